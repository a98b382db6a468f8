//! What a local model's reply may be, as an llguidance grammar built from the request, and the
//! reply read back: with a reply schema, JSON of that schema; with tools, either text or tool
//! calls `<tool_call>[{"name": an offered tool, "arguments": its input schema}, ...]</tool_call>`
//! (the form small instruction-tuned models such as SmolLM2 were trained to call tools in); with
//! both, the schema's JSON or calls. `tool_choice` narrows that: `required`, calls alone until a
//! tool has answered in this turn; `none`, no calls. The sampler only picks tokens the grammar
//! allows, so the reply always parses.

use llguidance::api::TopLevelGrammar;
use serde_json::{Value, json};

use crate::config::ToolChoice;
use crate::{Message, ModelRequest, Staged, ToolCall, ToolDef};

/// What a request's reply must be.
pub(super) struct Constraint {
    /// The grammar the reply follows.
    pub(super) grammar: TopLevelGrammar,
    /// How the grammar is built again as the items of a list in the reply are written (a
    /// plan's steps, each typed by the steps before it); `None` when it stays as it is.
    pub(super) stages: Option<Stages>,
    /// What a reply cut short near the end of its budget is closed with: the characters that
    /// end JSON values (`]`, `}`) and, where the reply may call tools, those of the calls'
    /// closing tag, so that calls cut short still end as calls.
    pub(super) closers: &'static [u8],
}

/// The characters that close a reply of JSON, and one that may hold calls.
const JSON_CLOSERS: &[u8] = b"]}";
const CALL_CLOSERS: &[u8] = b"]}</tool_call>";

/// What the reply may do with the offered tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Calls {
    /// No tools, or `tool_choice: none`: the reply calls nothing.
    Never,
    /// The reply may call tools or answer.
    May,
    /// `tool_choice: required` and no tool has answered since the person last spoke: the reply
    /// is calls alone.
    Must,
}

fn calls(req: &ModelRequest, choice: ToolChoice) -> Calls {
    if req.tools.is_empty() || choice == ToolChoice::None {
        return Calls::Never;
    }
    // `required` holds until a tool has answered in this turn; after that the model may answer
    // (else it could only ever call tools, and a turn would end only at its iteration limit).
    let answered = req.messages.iter().fold(false, |answered, m| match m {
        Message::User { .. } => false,
        Message::Tool { .. } => true,
        _ => answered,
    });
    if choice == ToolChoice::Required && !answered {
        Calls::Must
    } else {
        Calls::May
    }
}

/// The constraint of a request's reply; `None` when it may be any text.
pub(super) fn constraint(req: &ModelRequest, choice: ToolChoice) -> Option<Constraint> {
    // The grammar enforces every keyword, so it takes the exact form where the request has one.
    let exact = req.exact_schema.as_ref();
    let schema = exact.map(|e| &e.schema).or(req.response_schema.as_ref());
    let calls = calls(req, choice);
    let grammar = grammar(calls, schema, &req.tools)?;
    let stages = exact
        .and_then(|e| e.staged.clone())
        .filter(|_| calls != Calls::Must)
        .map(|staged| Stages {
            staged,
            calls,
            tools: req.tools.clone(),
            written: 0,
        });
    let closers = if calls == Calls::Never {
        JSON_CLOSERS
    } else {
        CALL_CLOSERS
    };
    Some(Constraint {
        grammar,
        stages,
        closers,
    })
}

/// The grammar of a reply that may make `calls` of `tools`, and is otherwise `schema`'s JSON
/// (any text without one).
fn grammar(calls: Calls, schema: Option<&Value>, tools: &[ToolDef]) -> Option<TopLevelGrammar> {
    let json_of = |s: &Value| TopLevelGrammar::from_json_schema(for_grammar(s));
    let lark = |start: String| {
        let calls = for_grammar(&tool_calls_schema(tools));
        Some(TopLevelGrammar::from_lark(format!(
            "{start}\ncall: \"{OPEN}\" %json {calls} \"{CLOSE}\"\nTEXT: /[^<]+/\n"
        )))
    };
    match (calls, schema) {
        (Calls::Never, None) => None,
        (Calls::Never, Some(s)) => Some(json_of(s)),
        (Calls::Must, _) => lark("start: call".to_owned()),
        // Without a schema, text may come before the calls (a model often says what it is
        // about to do; a `<` in text starts them). With one, the reply is the schema's JSON or
        // the calls alone: text before the calls would be dropped anyway, and a small model that
        // starts with text can ramble past its budget without reaching either.
        (Calls::May, Some(s)) => lark(format!(
            "start: answer | call\nanswer: %json {}",
            for_grammar(s)
        )),
        (Calls::May, None) => lark("start: answer | TEXT? call\nanswer: TEXT".to_owned()),
    }
}

/// The grammar of a reply with a staged schema ([`crate::Staged`]), built again each time more
/// items of its list are written.
pub(super) struct Stages {
    staged: Staged,
    calls: Calls,
    tools: Vec<ToolDef>,
    /// How many items the grammar in use knows.
    written: usize,
}

impl Stages {
    /// The grammar once the reply so far is `out`, when more of the list's items are written
    /// whole than the grammar in use knows; `None` otherwise.
    pub(super) fn next(&mut self, out: &[u8]) -> Option<TopLevelGrammar> {
        let items = items_written(out, self.staged.list);
        if items.len() <= self.written {
            return None;
        }
        self.written = items.len();
        grammar(self.calls, Some(&self.staged.schema(&items)), &self.tools)
    }
}

/// The items written whole so far of the list at `key` in the reply's top-level object (`out`
/// is the reply's start); items that are not objects or lists are not counted.
pub(super) fn items_written(out: &[u8], key: &str) -> Vec<Value> {
    let text = String::from_utf8_lossy(out);
    let mut items = Vec::new();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    // The last string closed at depth 1, its start, and the key whose value comes next.
    let (mut last, mut start, mut key_now) = (None::<(usize, usize)>, 0, None::<(usize, usize)>);
    let (mut in_list, mut item_from) = (false, None);
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    in_string = false;
                    if depth == 1 {
                        last = Some((start, i));
                    }
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                start = i + 1;
            }
            ':' if depth == 1 => key_now = last,
            ',' if depth == 1 => key_now = None,
            '{' | '[' => {
                if c == '[' && depth == 1 && key_now.is_some_and(|(a, b)| &text[a..b] == key) {
                    in_list = true;
                }
                depth += 1;
                if in_list && depth == 3 && item_from.is_none() {
                    item_from = Some(i);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if in_list
                    && depth == 2
                    && let Some(from) = item_from.take()
                    && let Ok(v) = serde_json::from_str(&text[from..=i])
                {
                    items.push(v);
                }
                if in_list && depth == 1 {
                    break;
                }
            }
            _ => {}
        }
    }
    items
}

/// The schema as the grammar is built from it: compact JSON (no free whitespace, which a small
/// model can repeat until it runs out of tokens), `oneOf` read as `anyOf`, and objects that list
/// their properties closed to others, so that the branches of a `oneOf` keyed by different
/// properties cannot both match. Each change only narrows what the grammar allows: a reply it
/// allows is valid against the original schema.
fn for_grammar(schema: &Value) -> Value {
    let mut s = schema.clone();
    close_objects(&mut s);
    if let Value::Object(m) = &mut s {
        m.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "coerce_one_of": true}),
        );
    }
    s
}

fn close_objects(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.contains_key("properties")
                && !m.contains_key("additionalProperties")
                && !m.contains_key("patternProperties")
                && !m.contains_key("unevaluatedProperties")
            {
                m.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (k, child) in m.iter_mut() {
                // The parts of an `allOf` each see only some properties: closing one would
                // refuse the others'.
                if k != "allOf" {
                    close_objects(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// What opens and closes a reply's tool calls.
pub(super) const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// One or more calls of the offered tools: a list of `{name, arguments}` objects, each `anyOf`
/// one object per tool.
fn tool_calls_schema(tools: &[ToolDef]) -> Value {
    let one = |t: &ToolDef| {
        let args = if t.parameters.is_object() {
            t.parameters.clone()
        } else {
            json!({"type": "object"})
        };
        json!({
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": args},
            "required": ["name", "arguments"],
            "additionalProperties": false
        })
    };
    json!({
        "type": "array",
        "minItems": 1,
        "items": {"anyOf": tools.iter().map(one).collect::<Vec<_>>()}
    })
}

/// The reply's text and tool calls: a reply that is calls of offered tools becomes those calls;
/// anything else is text. A list of calls cut short (the reply's budget ran out before its end)
/// gives the calls written whole before the cut; the one being written is dropped.
pub(super) fn read_reply(
    req: &ModelRequest,
    choice: ToolChoice,
    text: String,
) -> (String, Vec<ToolCall>) {
    // Text before the calls is kept as the reply's text.
    if calls(req, choice) == Calls::Never {
        return (text, Vec::new());
    }
    let Some((before, after)) = text.split_once(OPEN) else {
        return (text, Vec::new());
    };
    let items = match after.trim_end().strip_suffix(CLOSE) {
        Some(list) => match serde_json::from_str::<Value>(list) {
            Ok(Value::Array(items)) => items,
            _ => return (text, Vec::new()),
        },
        None => whole_items(after),
    };
    let mut calls = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(mut call) = item else {
            return (text, Vec::new());
        };
        let name = call.get("name").and_then(Value::as_str).map(str::to_owned);
        let offered = name
            .as_ref()
            .is_some_and(|n| req.tools.iter().any(|t| &t.name == n));
        if !offered || call.len() != 2 || !call.contains_key("arguments") {
            return (text, Vec::new());
        }
        calls.push(ToolCall {
            id: format!("call_{}_{i}", req.call_index),
            name: name.unwrap_or_default(),
            arguments: call.remove("arguments").unwrap_or(Value::Null),
            provider_id: None,
        });
    }
    if calls.is_empty() {
        return (text, calls);
    }
    (before.trim().to_owned(), calls)
}

/// The items of a JSON list (`text` starts at its `[`, and may be cut anywhere) written whole.
fn whole_items(text: &str) -> Vec<Value> {
    let Some(mut rest) = text.trim_start().strip_prefix('[') else {
        return Vec::new();
    };
    let mut items = Vec::new();
    loop {
        rest = rest.trim_start();
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match values.next() {
            Some(Ok(v)) => items.push(v),
            _ => return items,
        }
        rest = rest[values.byte_offset()..].trim_start();
        match rest.strip_prefix(',') {
            Some(r) => rest = r,
            None => return items,
        }
    }
}

/// How an assistant turn's tool calls are written back into the conversation (the form the
/// model replies in).
pub(super) fn calls_text(calls: &[ToolCall]) -> String {
    let list: Vec<Value> = calls
        .iter()
        .map(|c| json!({"name": c.name, "arguments": c.arguments}))
        .collect();
    format!("{OPEN}{}{CLOSE}", Value::Array(list))
}

/// The lines added to the system prompt when tools are offered: what each does and takes, and
/// how to call one. (A reply schema is not written into the prompt: the grammar holds it.)
pub(super) fn tools_prompt(tools: &[ToolDef]) -> String {
    let list: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.parameters}))
        .collect();
    format!(
        "Based on the question, make one or more tool calls to achieve the purpose, or answer \
         in plain text when no tool is needed.\n\n\
         You have access to the following tools:\n<tools>{}</tools>\n\n\
         To call tools, reply with only this, and no other text:\n\
         {OPEN}[{{\"name\": \"<tool name>\", \"arguments\": {{<its arguments>}}}}]{CLOSE}",
        Value::Array(list)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Messages, Purpose};

    fn req(tools: Vec<ToolDef>) -> ModelRequest {
        ModelRequest {
            purpose: Purpose::React,
            call_index: 3,
            purpose_index: 0,
            messages: Messages::new(),
            tools,
            response_schema: None,
            exact_schema: None,
            max_tokens: None,
            temperature: None,
        }
    }

    fn tool(name: &str) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: "d".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }
    }

    #[test]
    fn a_call_of_an_offered_tool_becomes_a_tool_call_and_anything_else_stays_text() {
        let r = req(vec![tool("weather")]);
        let (text, calls) = read_reply(
            &r,
            ToolChoice::Auto,
            r#"<tool_call>[{"name": "weather", "arguments": {"city": "Oslo"}}]</tool_call>"#.into(),
        );
        assert_eq!(text, "");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "weather");
        assert_eq!(calls[0].arguments, json!({"city": "Oslo"}));
        assert_eq!(calls[0].id, "call_3_0");
        let (text, calls) = read_reply(
            &r,
            ToolChoice::Auto,
            r#"<tool_call>[{"name": "other", "arguments": {}}]</tool_call>"#.into(),
        );
        assert!(calls.is_empty());
        assert!(text.contains("other"));
        let (text, calls) = read_reply(&r, ToolChoice::Auto, "It is sunny.".into());
        assert_eq!((text.as_str(), calls.len()), ("It is sunny.", 0));
    }

    #[test]
    fn calls_cut_short_keep_those_written_whole() {
        let r = req(vec![tool("weather")]);
        let whole = r#"{"name": "weather", "arguments": {"city": "Oslo"}}"#;
        for cut in [
            format!("<tool_call>[{whole}, {whole}]</"),
            format!("<tool_call>[{whole}, {whole}, {{\"name\": \"wea"),
            format!("<tool_call>[{whole},{whole},"),
            format!(
                "<tool_call>[{whole}, {whole}, {{\"name\": \"weather\", \"arguments\": {{\"city\": 12"
            ),
        ] {
            let (text, calls) = read_reply(&r, ToolChoice::Auto, cut.clone());
            assert_eq!(calls.len(), 2, "{cut}");
            assert_eq!(text, "");
            assert!(calls.iter().all(|c| c.arguments == json!({"city": "Oslo"})));
        }
        // Nothing whole: text. A whole item that is no call of an offered tool: text.
        for text in [
            r#"<tool_call>[{"name": "weather", "argu"#.to_owned(),
            r#"<tool_call>[{"name": "<tool name>", "arguments": {<its arguments>}}]</tool_call>"#
                .to_owned(),
            format!(r#"<tool_call>[{whole}, {{"name": "other", "arguments": {{}}}}, "#),
        ] {
            let (said, calls) = read_reply(&r, ToolChoice::Auto, text.clone());
            assert!(calls.is_empty(), "{text}");
            assert_eq!(said, text);
        }
    }

    #[test]
    fn the_grammar_follows_the_request() {
        assert!(constraint(&req(vec![]), ToolChoice::Auto).is_none());
        let mut r = req(vec![]);
        r.response_schema = Some(json!({"type": "object"}));
        assert!(constraint(&r, ToolChoice::Auto).is_some());
        let c = constraint(&req(vec![tool("a"), tool("b")]), ToolChoice::Auto);
        let g = c.map(|c| serde_json::to_string(&c.grammar).unwrap_or_default());
        let g = g.unwrap_or_default();
        assert!(g.contains("anyOf") && g.contains("TEXT? call"), "{g}");
        // With a reply schema too, the reply is the schema's JSON or the calls, no text first.
        let mut both = req(vec![tool("a")]);
        both.response_schema = Some(json!({"type": "object"}));
        let g = constraint(&both, ToolChoice::Auto)
            .map(|c| serde_json::to_string(&c.grammar).unwrap_or_default());
        let g = g.unwrap_or_default();
        assert!(
            g.contains("start: answer | call") && !g.contains("TEXT? call"),
            "{g}"
        );
        let calls = [ToolCall {
            id: "c".into(),
            name: "weather".into(),
            arguments: json!({"city": "Oslo"}),
            provider_id: None,
        }];
        let (_, back) = read_reply(
            &req(vec![tool("weather")]),
            ToolChoice::Auto,
            calls_text(&calls),
        );
        assert_eq!(
            back[0].arguments, calls[0].arguments,
            "calls read back as written"
        );
    }

    #[test]
    fn the_grammar_schema_closes_objects_outside_all_of_and_keeps_the_rest() {
        let s = for_grammar(&json!({
            "oneOf": [
                {"type": "object", "properties": {"plan": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}}}},
                {"type": "object", "properties": {"x": {}}, "additionalProperties": true},
                {"allOf": [{"type": "object", "properties": {"y": {}}}]}
            ]
        }));
        assert_eq!(s["oneOf"][0]["additionalProperties"], json!(false));
        assert_eq!(
            s["oneOf"][0]["properties"]["plan"]["items"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(s["oneOf"][1]["additionalProperties"], json!(true));
        assert!(
            s["oneOf"][2]["allOf"][0]
                .get("additionalProperties")
                .is_none()
        );
        assert_eq!(s["x-guidance"]["coerce_one_of"], json!(true));
    }

    #[test]
    fn tool_choice_required_calls_until_a_tool_has_answered_and_none_never_calls() {
        let grammar = |r: &ModelRequest, choice| {
            constraint(r, choice)
                .map(|c| serde_json::to_string(&c.grammar).unwrap_or_default())
                .unwrap_or_default()
        };
        let mut r = req(vec![tool("weather")]);
        r.messages.push(Message::User {
            content: "Weather in Oslo?".into(),
        });
        assert!(grammar(&r, ToolChoice::Required).contains("start: call\\n"));
        // After the tool's result the model may answer.
        r.messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: vec![],
        });
        r.messages.push(Message::Tool {
            call_id: "c".into(),
            name: "weather".into(),
            content: "sunny".into(),
            is_error: false,
        });
        assert!(grammar(&r, ToolChoice::Required).contains("TEXT? call"));
        // A new question from the person: a call again.
        r.messages.push(Message::User {
            content: "And in Bergen?".into(),
        });
        assert!(grammar(&r, ToolChoice::Required).contains("start: call\\n"));
        // `none`: plain text, and calls written as text stay text.
        assert!(constraint(&r, ToolChoice::None).is_none());
        let written = r#"<tool_call>[{"name": "weather", "arguments": {}}]</tool_call>"#;
        let (text, calls) = read_reply(&r, ToolChoice::None, written.into());
        assert_eq!((text.as_str(), calls.len()), (written, 0));
    }

    #[test]
    fn the_items_of_a_list_are_counted_once_written_whole() {
        let items = |t: &str| items_written(t.as_bytes(), "plan");
        assert!(items(r#"{"plan":[{"_id":"s1","x":"†steps"#).is_empty());
        assert_eq!(
            items(r#"{"plan":[{"_id":"s1","x":{"y":"]}"}}"#),
            [json!({"_id": "s1", "x": {"y": "]}"}})]
        );
        assert_eq!(
            items(r#"{"plan": [{"a":"\"}"} , {"b":[1,{"c":2}]},{"#).len(),
            2,
            "strings with escapes and nested lists do not end an item"
        );
        // Only the list at the key, in the top-level object.
        assert!(items(r#"{"other":[{"a":1}],"x":{"plan":[{"b":2}]}}"#).is_empty());
        assert!(items(r#"{"direct_response":"{\"plan\":[{}]}"}"#).is_empty());
        assert_eq!(items(r#"{"plan":[{"a":1}]} {"plan":[{"b":2}]}"#).len(), 1);
    }
}
