//! Plans: data-flow graphs of tool calls.
//!
//! A plan is an array of calls (or `{"steps": [...]}` / `{"calls": [...]}`). Keys starting with `_`
//! are meta fields; every other key is an argument. An argument whose whole string value is
//! `†input.x`, `†state.a.b` or `†steps.<id>[.field]` (or an object `{"$ref": "state.a.b"}`) is a
//! reference, resolved when the step runs. Edges are data: a step that reads `state.a` depends on
//! every step whose `_outputPath` writes `state.a`, a path under it, or a path above it.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::path;

/// The marker that starts a reference in a string argument.
pub const REF_MARK: char = '†';

/// Meta fields a call may carry.
pub const META_FIELDS: &[&str] = &[
    "_tool",
    "_id",
    "_description",
    "_category",
    "_skill",
    "_outputSchema",
    "_outputPath",
    "_dependsOn",
    "_parallel",
    "_when",
    "_forEach",
    "_onItemError",
    "_maxParallel",
];

/// What a reference points into.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RefRoot {
    /// The run's input (`†input.x`).
    Input,
    /// The shared State object (`†state.a.b`).
    State,
    /// The whole output of a step (`†steps.<id>`).
    Step(String),
    /// The item a fan-out step's call serves (`†item`, `†item.x`; only in a step with
    /// `_forEach`).
    Item,
}

/// A parsed reference: a root and a path below it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    /// What the reference reads from: the input, the State, a step's result or a fan-out item.
    pub root: RefRoot,
    /// The keys (or list positions, as text) below the root, outermost first; empty for the
    /// root itself.
    pub path: Vec<String>,
}

impl Reference {
    /// Parses the part after the marker, e.g. `state.a.b`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (head, rest) = match text.split_once('.') {
            Some((h, r)) => (h, Some(r)),
            None => (text, None),
        };
        let rest_path = |r: Option<&str>| -> Result<Vec<String>, String> {
            match r {
                None => Ok(Vec::new()),
                Some(r) => {
                    let segs = path::parse(r).ok_or_else(|| {
                        format!("`{text}` has an empty or blank path segment; write it as root.a.b")
                    })?;
                    if segs.len() > crate::limits::MAX_PATH_SEGMENTS {
                        return Err(format!(
                            "`{}...` has {} path segments; weft accepts at most {}",
                            text.chars().take(40).collect::<String>(),
                            segs.len(),
                            crate::limits::MAX_PATH_SEGMENTS
                        ));
                    }
                    Ok(segs)
                }
            }
        };
        match head {
            "input" => Ok(Self {
                root: RefRoot::Input,
                path: rest_path(rest)?,
            }),
            "state" => {
                let path = rest_path(rest)?;
                if path.is_empty() {
                    return Err(format!(
                        "`{text}` names the whole State object; reference a path inside it, e.g. state.result"
                    ));
                }
                Ok(Self {
                    root: RefRoot::State,
                    path,
                })
            }
            "item" => Ok(Self {
                root: RefRoot::Item,
                path: rest_path(rest)?,
            }),
            "steps" => {
                let Some(rest) = rest else {
                    return Err(format!("`{text}` names no step; write steps.<id>"));
                };
                let mut segs = rest.split('.');
                let id = segs.next().unwrap_or_default().to_owned();
                if id.is_empty() {
                    return Err(format!("`{text}` names no step; write steps.<id>"));
                }
                let remainder: Vec<&str> = segs.collect();
                let path = if remainder.is_empty() {
                    Vec::new()
                } else {
                    rest_path(Some(&remainder.join(".")))?
                };
                Ok(Self {
                    root: RefRoot::Step(id),
                    path,
                })
            }
            other => Err(format!(
                "`{text}` starts with `{other}`; a reference starts with input., state., steps. or (in a `_forEach` step) item"
            )),
        }
    }

    /// True if this reference can be read from a string argument (`†state.x`).
    pub fn from_arg(value: &Value) -> Option<Result<Self, String>> {
        match value {
            Value::String(s) => s.strip_prefix(REF_MARK).map(Self::parse),
            Value::Object(map) if map.len() == 1 => match map.get("$ref") {
                Some(Value::String(s)) => Some(Self::parse(s.strip_prefix(REF_MARK).unwrap_or(s))),
                Some(_) => Some(Err(
                    "`$ref` must be a string such as \"state.a.b\"".to_owned()
                )),
                None => None,
            },
            _ => None,
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.root {
            RefRoot::Input => write!(f, "{REF_MARK}input")?,
            RefRoot::State => write!(f, "{REF_MARK}state")?,
            RefRoot::Step(id) => write!(f, "{REF_MARK}steps.{id}")?,
            RefRoot::Item => write!(f, "{REF_MARK}item")?,
        }
        for seg in &self.path {
            write!(f, ".{seg}")?;
        }
        Ok(())
    }
}

/// Where a step's result goes: the output on success, the error object on failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputPath {
    /// The State path (below `†state`) the output is written to.
    pub ok: Vec<String>,
    /// The State path the error object is written to (after `||`); `None` when the step has no
    /// error path, and a failure then blocks its dependants.
    pub err: Option<Vec<String>>,
}

impl OutputPath {
    fn parse(text: &str) -> Result<Self, String> {
        let parse_one = |part: &str| -> Result<Vec<String>, String> {
            let part = part.trim();
            let body = part.strip_prefix(REF_MARK).unwrap_or(part);
            let r = Reference::parse(body)?;
            if r.root != RefRoot::State {
                return Err(format!(
                    "`{part}` is not a State path; outputs go to †state.<path>"
                ));
            }
            Ok(r.path)
        };
        let mut parts = text.split("||");
        let ok = parse_one(parts.next().unwrap_or_default())?;
        let err = parts.next().map(parse_one).transpose()?;
        if parts.next().is_some() {
            return Err("at most two paths: \"†state.ok || †state.error\"".to_owned());
        }
        Ok(Self { ok, err })
    }

    fn render(&self) -> String {
        let one = |p: &[String]| format!("{REF_MARK}state.{}", p.join("."));
        match &self.err {
            Some(e) => format!("{} || {}", one(&self.ok), one(e)),
            None => one(&self.ok),
        }
    }
}

/// What a fan-out step does when one of its items fails for good.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemPolicy {
    /// The step fails (items not started yet are not started).
    #[default]
    Fail,
    /// The failed item is left out of the results.
    Skip,
    /// The failed item's place in the results holds `{"error": ...}`.
    Collect,
}

impl ItemPolicy {
    /// The policy as written in a plan (`fail`, `skip`, `collect`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Skip => "skip",
            Self::Collect => "collect",
        }
    }
}

/// A fan-out: the step's tool runs once per item of a list, in parallel, and its output is the
/// list of results in item order.
#[derive(Clone, Debug, PartialEq)]
pub struct ForEach {
    /// The list (`_forEach: "†state.orders"`).
    pub list: Reference,
    /// `_onItemError`.
    pub on_error: ItemPolicy,
    /// `_maxParallel`: calls of the step running at once (default: the run's `max_parallel`).
    pub max_parallel: Option<usize>,
}

/// A `_when` condition: a minijinja expression over `input`, `state` and `steps`.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// The expression as written in the plan.
    pub source: String,
    /// The paths it reads (for dependencies).
    pub reads: Vec<Reference>,
}

impl Condition {
    fn parse(text: &str) -> Result<Self, String> {
        let expr = text.replace(REF_MARK, "");
        let env = minijinja::Environment::new();
        let compiled = crate::condition::compile(&env, &expr)
            .map_err(|e| format!("`{text}` is not a valid condition: {e}"))?;
        let mut reads = Vec::new();
        let mut names: Vec<String> = compiled.undeclared_variables(true).into_iter().collect();
        names.sort();
        for name in names {
            let r = Reference::parse(&name).map_err(|_| {
                format!(
                    "`{text}` uses `{name}`; a condition may only read input.*, state.* and steps.*"
                )
            })?;
            reads.push(r);
        }
        Ok(Self {
            source: text.to_owned(),
            reads,
        })
    }

    /// Evaluates the condition against a context of `input`, `state` and `steps`.
    pub fn eval(&self, ctx: &Value) -> Result<bool, String> {
        let expr = self.source.replace(REF_MARK, "");
        let env = minijinja::Environment::new();
        let compiled = crate::condition::compile(&env, &expr)
            .map_err(|e| format!("condition `{}`: {e}", self.source))?;
        let v = compiled
            .eval(ctx)
            .map_err(|e| format!("condition `{}`: {e}", self.source))?;
        Ok(v.is_true())
    }
}

/// One call of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanStep {
    /// `_id`: the step's id, unique in the plan (`s1`, `s2`, ... by position when not written).
    pub id: String,
    /// The tool to call. `None` for a step the step executor carries out (plan mode).
    pub tool: Option<String>,
    /// `_description`: what the step is to do, for the step executor and for people.
    pub description: Option<String>,
    /// `_category`: the category of tools the step's executor is offered (all allowed tools when
    /// `None` or when no tool has it).
    pub category: Option<String>,
    /// `_skill`: the agent's skill whose instructions the step executor follows for this step
    /// (a step without `_tool` only; its executor sees no other skill's instructions).
    pub skill: Option<String>,
    /// `_outputSchema`: a JSON Schema (an object) for a step without `_tool`: its executor
    /// calls no tool and returns one value of that schema, read from the outputs of the steps it
    /// depends on (a quarantined step: what it returns carries only their labels, see
    /// [`crate::trust`]).
    pub output_schema: Option<Value>,
    /// Arguments as written, references included.
    pub args: Map<String, Value>,
    /// `_outputPath`: where the step's result (and, optionally, its error) is written; `None`
    /// when it is written nowhere (later steps can still read it as `†steps.<id>`).
    pub output: Option<OutputPath>,
    /// `_dependsOn`: ids of steps that must reach an outcome first, beyond those whose output
    /// the step reads.
    pub depends_on: Vec<String>,
    /// `_parallel` as written; `None` falls back to the tool's own `parallel` flag.
    pub parallel: Option<bool>,
    /// `_when`: the condition the step runs under (it is skipped when false); `None` runs it
    /// always.
    pub when: Option<Condition>,
    /// `_forEach`: run the tool once per item of a list.
    pub for_each: Option<ForEach>,
}

impl PlanStep {
    /// Every reference in the arguments, with the argument path it sits at.
    pub fn arg_refs(&self) -> Vec<(String, Result<Reference, String>)> {
        let mut out = Vec::new();
        for (k, v) in &self.args {
            collect_refs(k.clone(), v, &mut out);
        }
        out
    }

    /// Every well-formed reference this step reads (arguments and condition).
    pub fn reads(&self) -> Vec<Reference> {
        let mut v: Vec<Reference> = self
            .arg_refs()
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .collect();
        if let Some(c) = &self.when {
            v.extend(c.reads.iter().cloned());
        }
        if let Some(f) = &self.for_each {
            v.push(f.list.clone());
        }
        v
    }

    /// The State paths this step may write.
    pub fn writes(&self) -> Vec<&[String]> {
        match &self.output {
            Some(o) => {
                let mut v = vec![o.ok.as_slice()];
                if let Some(e) = &o.err {
                    v.push(e.as_slice());
                }
                v
            }
            None => Vec::new(),
        }
    }

    /// The call in the seed's form.
    pub fn to_call(&self) -> Value {
        let mut m = Map::new();
        m.insert("_id".into(), Value::String(self.id.clone()));
        if let Some(t) = &self.tool {
            m.insert("_tool".into(), Value::String(t.clone()));
        }
        if let Some(d) = &self.description {
            m.insert("_description".into(), Value::String(d.clone()));
        }
        if let Some(c) = &self.category {
            m.insert("_category".into(), Value::String(c.clone()));
        }
        if let Some(k) = &self.skill {
            m.insert("_skill".into(), Value::String(k.clone()));
        }
        if let Some(schema) = &self.output_schema {
            m.insert("_outputSchema".into(), schema.clone());
        }
        for (k, v) in &self.args {
            m.insert(k.clone(), v.clone());
        }
        if let Some(o) = &self.output {
            m.insert("_outputPath".into(), Value::String(o.render()));
        }
        if !self.depends_on.is_empty() {
            m.insert(
                "_dependsOn".into(),
                Value::Array(self.depends_on.iter().cloned().map(Value::String).collect()),
            );
        }
        if let Some(p) = self.parallel {
            m.insert("_parallel".into(), Value::Bool(p));
        }
        if let Some(w) = &self.when {
            m.insert("_when".into(), Value::String(w.source.clone()));
        }
        if let Some(f) = &self.for_each {
            m.insert("_forEach".into(), Value::String(f.list.to_string()));
            if f.on_error != ItemPolicy::Fail {
                m.insert(
                    "_onItemError".into(),
                    Value::String(f.on_error.as_str().into()),
                );
            }
            if let Some(n) = f.max_parallel {
                m.insert("_maxParallel".into(), Value::from(n));
            }
        }
        Value::Object(m)
    }
}

fn collect_refs(at: String, v: &Value, out: &mut Vec<(String, Result<Reference, String>)>) {
    if let Some(r) = Reference::from_arg(v) {
        out.push((at, r));
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                collect_refs(format!("{at}.{k}"), v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_refs(format!("{at}[{i}]"), v, out);
            }
        }
        _ => {}
    }
}

/// A plan: its steps in the order written.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    /// The steps, in the order written.
    pub steps: Vec<PlanStep>,
}

/// One problem found in a plan, naming the step and field it concerns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlanProblem {
    /// The step id (or `#n` for a call whose id could not be read).
    pub step: Option<String>,
    /// The field at fault (`_tool`, an argument's name, ...); `None` when the problem is the
    /// step or the plan as a whole.
    pub field: Option<String>,
    /// What is wrong and, where it helps, what to write instead.
    pub message: String,
}

impl PlanProblem {
    /// A problem of `step`'s `field` (either may be absent).
    pub fn new(step: Option<&str>, field: Option<&str>, message: impl Into<String>) -> Self {
        Self {
            step: step.map(str::to_owned),
            field: field.map(str::to_owned),
            message: message.into(),
        }
    }
}

impl fmt::Display for PlanProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.step, &self.field) {
            (Some(s), Some(fl)) => write!(f, "step `{s}`, field `{fl}`: {}", self.message),
            (Some(s), None) => write!(f, "step `{s}`: {}", self.message),
            (None, Some(fl)) => write!(f, "field `{fl}`: {}", self.message),
            (None, None) => write!(f, "{}", self.message),
        }
    }
}

impl Plan {
    /// Parses a plan from JSON text, reporting every problem found in its shape.
    pub fn parse_str(text: &str) -> Result<Self, Vec<PlanProblem>> {
        crate::limits::check_text_depth(text, "the plan")
            .map_err(|m| vec![PlanProblem::new(None, None, m)])?;
        let value: Value = serde_json::from_str(text).map_err(|e| {
            vec![PlanProblem::new(
                None,
                None,
                format!(
                    "not valid JSON ({e}); a plan is a JSON array of calls or {{\"steps\": [...]}}"
                ),
            )]
        })?;
        Self::from_value(&value)
    }

    /// Parses a plan from a JSON value, reporting every problem found in its shape.
    pub fn from_value(value: &Value) -> Result<Self, Vec<PlanProblem>> {
        crate::limits::check_depth(value, "the plan")
            .map_err(|m| vec![PlanProblem::new(None, None, m)])?;
        let max = crate::limits::MAX_PLAN_NODES;
        if crate::limits::nodes(value, max) > max {
            return Err(vec![PlanProblem::new(
                None,
                None,
                format!("the plan holds more than {max} JSON values; split it into smaller plans"),
            )]);
        }
        let calls = match value {
            Value::Array(a) => a,
            Value::Object(m) => match m.get("steps").or_else(|| m.get("calls")) {
                Some(Value::Array(a)) => a,
                _ => {
                    return Err(vec![PlanProblem::new(
                        None,
                        None,
                        "a plan is a JSON array of calls, or an object with a `steps` array",
                    )]);
                }
            },
            _ => {
                return Err(vec![PlanProblem::new(
                    None,
                    None,
                    "a plan is a JSON array of calls, or an object with a `steps` array",
                )]);
            }
        };
        let mut problems = Vec::new();
        let mut steps = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            match parse_call(i, call) {
                Ok(s) => steps.push(s),
                Err(mut p) => problems.append(&mut p),
            }
        }
        if problems.is_empty() {
            Ok(Self { steps })
        } else {
            Err(problems)
        }
    }

    /// Parses the steps of a replan: a call without `_id` gets `sN` numbered after the
    /// `existing` steps (and clear of every id they or the new calls use), so that it never
    /// takes the id of a step that already ran.
    pub fn from_value_after(value: &Value, existing: &[&str]) -> Result<Self, Vec<PlanProblem>> {
        if existing.is_empty() {
            return Self::from_value(value);
        }
        let mut value = value.clone();
        let calls = match &mut value {
            Value::Array(a) => Some(a),
            Value::Object(m) => match m.get_mut("steps") {
                Some(Value::Array(a)) => Some(a),
                _ => match m.get_mut("calls") {
                    Some(Value::Array(a)) => Some(a),
                    _ => None,
                },
            },
            _ => None,
        };
        if let Some(calls) = calls {
            let mut taken: std::collections::HashSet<String> =
                existing.iter().map(|s| (*s).to_owned()).collect();
            taken.extend(
                calls
                    .iter()
                    .filter_map(|c| c.get("_id").and_then(Value::as_str))
                    .map(str::to_owned),
            );
            let mut n = existing.len();
            for call in calls.iter_mut() {
                if let Value::Object(m) = call
                    && !m.contains_key("_id")
                {
                    let id = loop {
                        n += 1;
                        let id = format!("s{n}");
                        if !taken.contains(&id) {
                            break id;
                        }
                    };
                    taken.insert(id.clone());
                    m.insert("_id".into(), Value::String(id));
                }
            }
        }
        Self::from_value(&value)
    }

    /// The plan in the seed's form (an array of calls).
    pub fn to_value(&self) -> Value {
        Value::Array(self.steps.iter().map(PlanStep::to_call).collect())
    }

    /// Step index by id (the first one, if ids repeat).
    pub fn index(&self) -> HashMap<&str, usize> {
        let mut m = HashMap::with_capacity(self.steps.len());
        for (i, s) in self.steps.iter().enumerate() {
            m.entry(s.id.as_str()).or_insert(i);
        }
        m
    }
}

impl Serialize for Plan {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Plan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Plan::from_value(&v).map_err(|ps| {
            let msgs: Vec<String> = ps.iter().map(ToString::to_string).collect();
            serde::de::Error::custom(msgs.join("; "))
        })
    }
}

fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn parse_call(i: usize, call: &Value) -> Result<PlanStep, Vec<PlanProblem>> {
    let label = format!("#{}", i + 1);
    let Value::Object(map) = call else {
        return Err(vec![PlanProblem::new(
            Some(&label),
            None,
            "a call must be a JSON object with `_tool` and its arguments",
        )]);
    };
    let mut problems = Vec::new();
    let id = match map.get("_id") {
        None => format!("s{}", i + 1),
        Some(Value::String(s)) if is_valid_id(s) => s.clone(),
        Some(other) => {
            problems.push(PlanProblem::new(
                Some(&label),
                Some("_id"),
                format!("{other} is not a valid id; use letters, digits, `_` and `-`"),
            ));
            label.clone()
        }
    };
    let sid = Some(id.as_str());
    let str_field = |name: &str, problems: &mut Vec<PlanProblem>| -> Option<String> {
        match map.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                problems.push(PlanProblem::new(
                    sid,
                    Some(name),
                    format!("must be a string, found {other}"),
                ));
                None
            }
        }
    };
    let tool = str_field("_tool", &mut problems);
    let description = str_field("_description", &mut problems);
    let category = str_field("_category", &mut problems);
    let skill = str_field("_skill", &mut problems);
    if skill.as_deref().is_some_and(|k| k.trim().is_empty()) {
        problems.push(PlanProblem::new(
            sid,
            Some("_skill"),
            "is empty; name one of the agent's skills or leave `_skill` out",
        ));
    }
    if tool.as_deref() == Some("") {
        problems.push(PlanProblem::new(
            sid,
            Some("_tool"),
            "is empty; name a tool",
        ));
    }
    if tool.is_none() && description.is_none() {
        problems.push(PlanProblem::new(
            sid,
            Some("_tool"),
            "is missing; a call names its `_tool` (or, in an agent's plan, carries a `_description` for the step executor)",
        ));
    }
    let output_schema = match map.get("_outputSchema") {
        None | Some(Value::Null) => None,
        Some(schema @ Value::Object(_)) => match jsonschema::validator_for(schema) {
            Ok(_) => Some(schema.clone()),
            Err(e) => {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_outputSchema"),
                    format!("is not a JSON Schema: {e}"),
                ));
                None
            }
        },
        Some(other) => {
            problems.push(PlanProblem::new(
                sid,
                Some("_outputSchema"),
                format!("must be a JSON Schema (an object), found {other}"),
            ));
            None
        }
    };
    if output_schema.is_some() && tool.is_some() {
        problems.push(PlanProblem::new(
            sid,
            Some("_outputSchema"),
            "a step with `_tool` returns its tool's output; remove `_outputSchema`, or replace `_tool` and its arguments with a `_description` (the step then calls no tool and returns a value of the schema)",
        ));
    }
    let output = match str_field("_outputPath", &mut problems) {
        None => None,
        Some(s) => match OutputPath::parse(&s) {
            Ok(o) => Some(o),
            Err(e) => {
                problems.push(PlanProblem::new(sid, Some("_outputPath"), e));
                None
            }
        },
    };
    let depends_on = match map.get("_dependsOn") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => {
            let mut v = Vec::new();
            for x in a {
                match x {
                    Value::String(s) => v.push(s.clone()),
                    other => problems.push(PlanProblem::new(
                        sid,
                        Some("_dependsOn"),
                        format!("{other} is not a step id; list ids as strings"),
                    )),
                }
            }
            v
        }
        Some(other) => {
            problems.push(PlanProblem::new(
                sid,
                Some("_dependsOn"),
                format!("{other} is neither a step id nor a list of ids"),
            ));
            Vec::new()
        }
    };
    let parallel = match map.get("_parallel") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            problems.push(PlanProblem::new(
                sid,
                Some("_parallel"),
                format!("must be true or false, found {other}"),
            ));
            None
        }
    };
    let when = match str_field("_when", &mut problems) {
        None => None,
        Some(s) => match Condition::parse(&s) {
            Ok(c) => Some(c),
            Err(e) => {
                problems.push(PlanProblem::new(sid, Some("_when"), e));
                None
            }
        },
    };
    let for_each = parse_for_each(map, sid, &mut problems);
    let mut args = Map::new();
    for (k, v) in map {
        if k.starts_with('_') {
            if !META_FIELDS.contains(&k.as_str()) {
                problems.push(PlanProblem::new(
                    sid,
                    Some(k),
                    format!(
                        "unknown meta field; known ones are {}",
                        META_FIELDS.join(", ")
                    ),
                ));
            }
        } else {
            args.insert(k.clone(), v.clone());
        }
    }
    let step = PlanStep {
        id: id.clone(),
        tool,
        description,
        category,
        skill,
        output_schema,
        args,
        output,
        depends_on,
        parallel,
        when,
        for_each,
    };
    for (at, r) in step.arg_refs() {
        if let Err(e) = r {
            problems.push(PlanProblem::new(
                Some(&id),
                Some(&at),
                format!("malformed reference: {e}"),
            ));
        }
    }
    if problems.is_empty() {
        Ok(step)
    } else {
        Err(problems)
    }
}

/// `_forEach`, `_onItemError` and `_maxParallel`.
fn parse_for_each(
    map: &Map<String, Value>,
    sid: Option<&str>,
    problems: &mut Vec<PlanProblem>,
) -> Option<ForEach> {
    let list = match map.get("_forEach") {
        None | Some(Value::Null) => {
            for k in ["_onItemError", "_maxParallel"] {
                if map.contains_key(k) {
                    problems.push(PlanProblem::new(
                        sid,
                        Some(k),
                        "belongs to a fan-out step; add `_forEach: \"†state.list\"`",
                    ));
                }
            }
            return None;
        }
        Some(v) => match Reference::from_arg(v) {
            Some(Ok(r)) if r.root != RefRoot::Item => r,
            Some(Ok(_)) => {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_forEach"),
                    "names the list to fan out over (†state.x, †input.x or †steps.id.x), not an item",
                ));
                return None;
            }
            Some(Err(e)) => {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_forEach"),
                    format!("malformed reference: {e}"),
                ));
                return None;
            }
            None => {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_forEach"),
                    format!(
                        "{v} is not a reference; write the list's path, e.g. \"†state.orders\""
                    ),
                ));
                return None;
            }
        },
    };
    let on_error = match map.get("_onItemError") {
        None | Some(Value::Null) => ItemPolicy::Fail,
        Some(v) => match serde_json::from_value::<ItemPolicy>(v.clone()) {
            Ok(p) => p,
            Err(_) => {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_onItemError"),
                    format!("{v} is not a policy; use \"fail\", \"skip\" or \"collect\""),
                ));
                ItemPolicy::Fail
            }
        },
    };
    let max_parallel = match map.get("_maxParallel") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64().filter(|&n| n >= 1) {
            Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            None => {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_maxParallel"),
                    format!("{v} is not a whole number of at least 1"),
                ));
                None
            }
        },
    };
    Some(ForEach {
        list,
        on_error,
        max_parallel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_the_seed_profile_plan() {
        let plan = Plan::from_value(&json!([
            {"_tool": "fetchUserProfile", "userName": "Alice", "_outputPath": "†state.userProfileData"},
            {"_tool": "summarizeProfile", "profile": "†state.userProfileData", "_outputPath": "†state.profileSummary"}
        ]))
        .map_err(|p| format!("{p:?}"));
        let plan = plan.unwrap_or_default();
        assert_eq!(plan.steps.len(), 2);
        assert_eq!(plan.steps[0].id, "s1");
        assert_eq!(
            plan.steps[1].reads()[0].to_string(),
            "†state.userProfileData"
        );
        assert_eq!(
            plan.steps[0].output.as_ref().map(|o| o.ok.clone()),
            Some(vec!["userProfileData".to_owned()])
        );
    }

    #[test]
    fn parses_error_paths_and_ascii_refs() {
        let plan = Plan::from_value(&json!({"steps": [
            {"_tool": "pay", "amount": {"$ref": "input.amount"}, "_outputPath": "†state.receipt || †state.error"}
        ]}))
        .unwrap_or_default();
        let o = plan.steps[0].output.clone();
        assert_eq!(o.and_then(|o| o.err), Some(vec!["error".to_owned()]));
        assert_eq!(plan.steps[0].reads()[0].root, RefRoot::Input);
    }

    #[test]
    fn reports_malformed_meta_and_refs() {
        let err = Plan::from_value(&json!([
            {"_tool": "x", "a": "†stat.foo", "_parallel": "yes", "_bogus": 1, "_outputPath": "†input.x"}
        ]))
        .err()
        .unwrap_or_default();
        let text: Vec<String> = err.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t.contains("field `a`") && t.contains("malformed reference")),
            "{text:?}"
        );
        assert!(text.iter().any(|t| t.contains("`_parallel`")), "{text:?}");
        assert!(text.iter().any(|t| t.contains("`_bogus`")), "{text:?}");
        assert!(text.iter().any(|t| t.contains("`_outputPath`")), "{text:?}");
    }

    #[test]
    fn condition_reads_paths() {
        let c = Condition::parse("state.weather.sunny and not input.indoors");
        let c = c.unwrap_or_else(|e| Condition {
            source: e,
            reads: vec![],
        });
        let names: Vec<String> = c.reads.iter().map(ToString::to_string).collect();
        assert_eq!(names, vec!["†input.indoors", "†state.weather.sunny"]);
        assert_eq!(
            c.eval(&json!({"state": {"weather": {"sunny": true}}, "input": {"indoors": false}})),
            Ok(true)
        );
        assert!(Condition::parse("os.system").is_err());
    }

    #[test]
    fn round_trips_through_serde() {
        let plan = Plan::from_value(&json!([
            {"_id": "a", "_tool": "t", "x": "†input.x", "_outputPath": "†state.r || †state.e", "_when": "input.go", "_parallel": true, "_dependsOn": []}
        ]))
        .unwrap_or_default();
        let text = serde_json::to_string(&plan).unwrap_or_default();
        let back: Plan = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(plan, back);
    }
}
