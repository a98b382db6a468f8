//! Workflows: an agent as a state machine (the agent file's `workflow:`). Each step has its own
//! instructions, its own tools, an optional output schema and routing rules that live in the
//! file, not in a prompt. This module holds the file's shape, the checks made when it loads, and
//! the evaluation of its expressions; the loop that runs it is `agent_loop::workflow`.
//!
//! Expressions (`when`, `assign`, `reply`) are minijinja expressions over `output` (the step's
//! validated output), `state` (the State object), `input`, `steps.<name>.output`, `session`
//! (`id`, `metadata`, `turn`) and, in `reentry`, `message` (the user's new message). They say only
//! what a plan's `_when` may say (see [`crate::condition`]): they test and pick values, they do not
//! build them.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where routing goes when the turn is over: the answer is given and the session completes.
pub const END: &str = "end";
/// Where routing goes to hand the turn back: the session waits for the user's next message,
/// which enters at the step `reentry` picks.
pub const WAIT: &str = "wait";

/// How many rejected outputs a step retries by default before it fails.
pub const DEFAULT_OUTPUT_RETRIES: u32 = 2;

/// The `workflow:` of an agent file (`mode: workflow`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowSpec {
    /// The step a session's first message enters.
    pub initial: String,
    /// Where a later message enters (after `wait`, or a new task after `end`): the first rule
    /// whose `when` holds. The last rule has no `when`. Without rules: `initial`.
    #[serde(default)]
    pub reentry: Vec<Route>,
    /// The steps, by name (`end` and `wait` are reserved).
    pub steps: BTreeMap<String, StepSpec>,
}

/// A routing rule: go `to` a step (or `end`, or `wait`) when `when` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// A condition; absent on the last rule, the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// A step's name, `end` (the turn is over) or `wait` (wait for the user's next message).
    pub to: String,
}

/// One step of a workflow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// What the model does in this step (a minijinja template with `input` and
    /// `session.metadata`, as the agent's `instructions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The tools the model may call in this step, by name (default: none). A call of any other
    /// tool is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The JSON Schema the step's output must match; a reply that does not is refused with the
    /// reason and asked for again. Without it, the output is the reply's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Refused outputs asked for again before the step fails (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_retries: Option<u32>,
    /// State paths (`a` or `a.b`) set from expressions once the output is accepted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub assign: BTreeMap<String, String>,
    /// An expression for the text the user is given (default: the output, when it is text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// Routing rules, tried in order after the output is accepted; the first whose `when` holds
    /// wins. The last has no `when`. Without rules the turn ends (`end`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next: Vec<Route>,
    /// Where the session goes when the step fails (its output refused too often, an expression
    /// that cannot be evaluated, its agent failing, too many model turns). Without it such a
    /// failure ends the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<String>,
    /// Hand the step to another agent (a plan-mode or ReAct agent file, relative to this one):
    /// it runs in a session of its own, linked to this one, and its answer is the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Every tool call of this step waits for a person's approval.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approve: bool,
    /// Model turns in this step before it fails (default: `limits.max_iterations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
}

impl StepSpec {
    /// How many refused outputs the step asks again after before it fails (`output_retries`,
    /// default [`DEFAULT_OUTPUT_RETRIES`]).
    pub fn output_retries(&self) -> u32 {
        self.output_retries.unwrap_or(DEFAULT_OUTPUT_RETRIES)
    }
}

/// The name of the tool through which step `step` hands its work to its `agent` (the registry
/// declares it; the model is never offered it).
pub fn delegate_tool(step: &str) -> String {
    format!("workflow.{step}")
}

/// The user turn that tells the model the workflow entered `step` (added to a conversation
/// that ends with an earlier step's reply).
pub fn step_notice(step: &str) -> String {
    format!("[weft] The workflow is now in step `{step}`; carry it out.")
}

/// What a step's expressions may read.
const STEP_VARS: &[&str] = &["output", "state", "input", "steps", "session"];
/// What a reentry rule may read.
const REENTRY_VARS: &[&str] = &["message", "state", "input", "steps", "session"];

impl WorkflowSpec {
    /// Every problem of the workflow, each naming the step and the field (`workflow.steps.
    /// classify.next[1].to: ...`): targets that do not exist, a last rule that is not the
    /// default, steps no route reaches, invalid schemas and expressions.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let target = |to: &str, at: &str, out: &mut Vec<String>| {
            if to != END && to != WAIT && !self.steps.contains_key(to) {
                out.push(format!(
                    "{at}: `{to}` is not a step{}; use one of {}, `end` or `wait`",
                    crate::diagnose::did_you_mean(
                        to,
                        self.steps.keys().map(String::as_str).chain([END, WAIT])
                    ),
                    self.step_list()
                ));
            }
        };
        if self.steps.is_empty() {
            out.push("workflow.steps: a workflow needs at least one step".into());
            return out;
        }
        for reserved in [END, WAIT] {
            if self.steps.contains_key(reserved) {
                out.push(format!(
                    "workflow.steps.{reserved}: `{reserved}` is a routing target, not a step name; rename the step"
                ));
            }
        }
        if !self.steps.contains_key(&self.initial) {
            out.push(format!(
                "workflow.initial: `{}` is not a step; use one of {}",
                self.initial,
                self.step_list()
            ));
        }
        rules(&self.reentry, "workflow.reentry", REENTRY_VARS, &mut out);
        for (i, r) in self.reentry.iter().enumerate() {
            if r.to == END || r.to == WAIT {
                out.push(format!(
                    "workflow.reentry[{i}].to: a message enters at a step, not at `{}`",
                    r.to
                ));
            } else {
                target(&r.to, &format!("workflow.reentry[{i}].to"), &mut out);
            }
        }
        for (name, s) in &self.steps {
            let at = format!("workflow.steps.{name}");
            if name.trim().is_empty() || name.contains(char::is_whitespace) {
                out.push(format!("{at}: a step name has no spaces"));
            }
            rules(&s.next, &format!("{at}.next"), STEP_VARS, &mut out);
            for (i, r) in s.next.iter().enumerate() {
                target(&r.to, &format!("{at}.next[{i}].to"), &mut out);
            }
            if let Some(e) = &s.on_error {
                target(e, &format!("{at}.on_error"), &mut out);
            }
            if let Some(schema) = &s.output_schema
                && let Err(e) = jsonschema::validator_for(schema)
            {
                out.push(format!("{at}.output_schema: not a valid JSON Schema: {e}"));
            }
            for (key, expr) in &s.assign {
                if crate::path::parse(key).is_none_or(|p| p.is_empty()) {
                    out.push(format!(
                        "{at}.assign: `{key}` is not a State path; write it as name or a.b"
                    ));
                }
                if let Err(e) = check_expr(expr, STEP_VARS) {
                    out.push(format!("{at}.assign.{key}: {e}"));
                }
            }
            if let Some(r) = &s.reply
                && let Err(e) = check_expr(r, STEP_VARS)
            {
                out.push(format!("{at}.reply: {e}"));
            }
            let mut reads: Vec<(String, &str)> = s
                .assign
                .iter()
                .map(|(k, e)| (format!("{at}.assign.{k}"), e.as_str()))
                .collect();
            reads.extend(s.reply.iter().map(|e| (format!("{at}.reply"), e.as_str())));
            reads.extend(s.next.iter().enumerate().filter_map(|(i, r)| {
                r.when
                    .as_deref()
                    .map(|w| (format!("{at}.next[{i}].when"), w))
            }));
            for (field, expr) in reads {
                if let Err(e) = output_fields(expr, s.output_schema.as_ref()) {
                    out.push(format!("{field}: {e}"));
                }
            }
            if s.agent.is_some() && !s.tools.is_empty() {
                out.push(format!(
                    "{at}: a step that hands its work to an `agent` has no `tools` of its own (the agent has them)"
                ));
            }
            if s.agent.is_some() && s.approve {
                out.push(format!(
                    "{at}: `approve` asks for approval of the step's tool calls, and a step with an `agent` makes none (declare requires_approval in the agent's file)"
                ));
            }
            if let Some(a) = &s.agent
                && a.trim().is_empty()
            {
                out.push(format!("{at}.agent: name the agent file"));
            }
            if s.max_turns == Some(0) {
                out.push(format!("{at}.max_turns: at least 1"));
            }
            let mut seen = BTreeSet::new();
            for t in &s.tools {
                if !seen.insert(t) {
                    out.push(format!("{at}.tools: `{t}` is listed twice"));
                }
            }
        }
        let unreachable = self.unreachable();
        // A route to a step that does not exist (a misspelt name, named above) may be the one
        // meant to reach it: the step is not reported unreachable as well.
        let misrouted = self
            .reentry
            .iter()
            .map(|r| &r.to)
            .chain(
                self.steps
                    .values()
                    .flat_map(|s| s.next.iter().map(|r| &r.to)),
            )
            .chain(self.steps.values().filter_map(|s| s.on_error.as_ref()))
            .any(|to| to != END && to != WAIT && !self.steps.contains_key(to));
        if !unreachable.is_empty() && !misrouted && self.steps.contains_key(&self.initial) {
            out.push(format!(
                "workflow.steps: no route reaches {} (from `initial`, `reentry`, `next` or `on_error`); route to it or remove it",
                unreachable
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out
    }

    fn step_list(&self) -> String {
        self.steps
            .keys()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The steps that no route reaches from the entries (`initial` and the reentry targets).
    pub fn unreachable(&self) -> Vec<&str> {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut todo: Vec<&str> = vec![self.initial.as_str()];
        todo.extend(self.reentry.iter().map(|r| r.to.as_str()));
        while let Some(s) = todo.pop() {
            let Some(step) = self.steps.get(s) else {
                continue;
            };
            if !seen.insert(s) {
                continue;
            }
            todo.extend(step.next.iter().map(|r| r.to.as_str()));
            todo.extend(step.on_error.as_deref());
        }
        self.steps
            .keys()
            .map(String::as_str)
            .filter(|s| !seen.contains(s))
            .collect()
    }
}

/// Checks a list of routing rules: the last (and only the last) has no `when`; every `when`
/// is a valid condition over `vars`.
fn rules(list: &[Route], at: &str, vars: &[&str], out: &mut Vec<String>) {
    for (i, r) in list.iter().enumerate() {
        let last = i + 1 == list.len();
        match (&r.when, last) {
            (None, false) => out.push(format!(
                "{at}[{i}]: only the last rule may have no `when` (the rules after it would never apply)"
            )),
            (Some(w), true) => out.push(format!(
                "{at}[{i}]: the last rule is the default and has no `when` (it has `{w}`); add `{{ to: ... }}` after it"
            )),
            _ => {}
        }
        if let Some(w) = &r.when
            && let Err(e) = check_expr(w, vars)
        {
            out.push(format!("{at}[{i}].when: {e}"));
        }
    }
}

/// Checks an expression: it says only what a condition may say, compiles, and reads only `vars`.
fn check_expr(expr: &str, vars: &[&str]) -> Result<(), String> {
    if expr.trim().is_empty() {
        return Err("the expression is empty".into());
    }
    let env = minijinja::Environment::new();
    let compiled = crate::condition::compile(&env, expr)
        .map_err(|e| format!("`{expr}` is not a valid expression: {e}"))?;
    let mut names: Vec<String> = compiled.undeclared_variables(false).into_iter().collect();
    names.sort();
    for name in names {
        if !vars.contains(&name.as_str()) {
            return Err(format!(
                "`{expr}` reads `{name}`; an expression here may read {}",
                vars.join(", ")
            ));
        }
    }
    Ok(())
}

/// Checks that every `output.a.b` an expression reads can be in the step's output: a field
/// that the output schema (or an object under it) cannot have, because it lists its
/// `properties` and refuses others (`additionalProperties: false`), is an error with the fields
/// it has. An expression that does not compile is left to [`check_expr`].
fn output_fields(expr: &str, schema: Option<&Value>) -> Result<(), String> {
    let env = minijinja::Environment::new();
    let Ok(compiled) = crate::condition::compile(&env, expr) else {
        return Ok(());
    };
    let mut reads: Vec<String> = compiled
        .undeclared_variables(true)
        .into_iter()
        .filter(|n| n.starts_with("output."))
        .collect();
    reads.sort();
    for read in reads {
        let mut node = schema;
        let mut walked = String::from("output");
        for field in read.split('.').skip(1) {
            let Some(props) = node
                .and_then(|n| n.get("properties"))
                .and_then(Value::as_object)
            else {
                break;
            };
            if let Some(p) = props.get(field) {
                node = Some(p);
                walked = format!("{walked}.{field}");
                continue;
            }
            let closed =
                node.and_then(|n| n.get("additionalProperties")) == Some(&Value::Bool(false));
            if !closed {
                break;
            }
            let known: Vec<&str> = props.keys().map(String::as_str).collect();
            return Err(format!(
                "`{expr}` reads `{walked}.{field}`, which the step's output_schema does not allow (additionalProperties: false){}; its fields: {}",
                crate::diagnose::did_you_mean(field, known.iter().copied()),
                known.join(", ")
            ));
        }
    }
    Ok(())
}

/// Evaluates an expression against `ctx` (checked when the file loaded; checked again here, as
/// the file on disk may have changed under a running session).
pub fn eval(expr: &str, ctx: &Value) -> Result<Value, String> {
    let env = minijinja::Environment::new();
    let compiled = crate::condition::compile(&env, expr).map_err(|e| format!("`{expr}`: {e}"))?;
    let v = compiled.eval(ctx).map_err(|e| format!("`{expr}`: {e}"))?;
    if v.is_undefined() {
        return Ok(Value::Null);
    }
    serde_json::to_value(&v).map_err(|e| format!("`{expr}`: the value cannot be stored: {e}"))
}

/// Evaluates a condition: its value's truth.
pub fn holds(expr: &str, ctx: &Value) -> Result<bool, String> {
    let env = minijinja::Environment::new();
    let compiled = crate::condition::compile(&env, expr).map_err(|e| format!("`{expr}`: {e}"))?;
    compiled
        .eval(ctx)
        .map(|v| v.is_true())
        .map_err(|e| format!("`{expr}`: {e}"))
}

/// Validates a step's output against its schema; the error names every place that does not fit.
pub fn validate_output(schema: &Value, output: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the step's output_schema is not a valid JSON Schema: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(output)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the output does not match the step's output_schema: {}",
            errors.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn spec(yaml: &str) -> WorkflowSpec {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    const TRIAGE: &str = r#"
initial: classify
reentry: [{ when: 'state.awaiting == "info"', to: gather }, { to: classify }]
steps:
  classify:
    output_schema: { type: object, required: [category], properties: { category: { type: string } } }
    assign: { category: output.category }
    next:
      - { when: 'output.category == "other"', to: escalate }
      - { to: resolve }
    on_error: escalate
  gather: { next: [{ to: wait }] }
  resolve: { tools: [searchKb], next: [{ to: end }] }
  escalate: { next: [{ to: end }] }
"#;

    #[test]
    fn a_sound_workflow_has_no_problems() {
        assert_eq!(spec(TRIAGE).problems(), Vec::<String>::new());
    }

    /// Found by fuzzing the agent file: a template's closing marker in an expression that reads
    /// a closed output schema's fields made the expression compiler panic ("empty lexer stack").
    #[test]
    fn a_closing_marker_in_an_expression_is_a_problem_not_a_panic() {
        let wf = spec(
            r#"
initial: ask
steps:
  ask:
    output_schema:
      type: object
      additionalProperties: false
      properties: { complete: { type: boolean }, question: { type: string } }
    reply: 'none if output.complete else output.q}}}}'
    next: [{ to: end }]
"#,
        );
        let problems = wf.problems();
        assert!(
            problems.iter().any(|p| p.contains("not a template")),
            "{problems:?}"
        );
    }

    #[test]
    fn fields_read_from_a_closed_output_schema_must_be_in_it() {
        let wf = spec(
            r#"
initial: read
steps:
  read:
    output_schema:
      type: object
      additionalProperties: false
      properties:
        line: { type: string }
        place: { type: object, additionalProperties: false, properties: { city: { type: string } } }
        extra: { type: object }
    assign: { line: output.lnie, city: output.place.ctiy, open: output.extra.anything }
    reply: output.line
    next:
      - { when: 'output.lines == "x"', to: end }
      - { to: end }
"#,
        );
        let p = wf.problems();
        let all = p.join("\n");
        assert_eq!(p.len(), 3, "{all}");
        for needle in [
            "workflow.steps.read.assign.line: `output.lnie` reads `output.lnie`, which the step's output_schema does not allow (additionalProperties: false) (did you mean `line`?); its fields: line, place, extra",
            "workflow.steps.read.assign.city: `output.place.ctiy` reads `output.place.ctiy`",
            "did you mean `city`?",
            "workflow.steps.read.next[0].when: `output.lines == \"x\"` reads `output.lines`",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        // The example's schema is open: its reads are not refused.
        assert_eq!(spec(TRIAGE).problems(), Vec::<String>::new());
    }

    #[test]
    fn problems_name_the_step_and_the_field() {
        let bad = spec(
            r#"
initial: start
reentry: [{ to: classify }, { when: 'state.x', to: nowhere }]
steps:
  classify:
    output_schema: { type: 12 }
    assign: { "a..b": output.x, c: "range(10)" }
    next:
      - { to: resolve }
      - { when: 'output.x', to: missing }
  resolve: { next: [{ when: 'secret.x', to: end }] }
  orphan: { agent: other.yaml, tools: [t] }
"#,
        );
        let p = bad.problems().join("\n");
        for needle in [
            "workflow.initial: `start` is not a step",
            "workflow.reentry[0]: only the last rule may have no `when`",
            "workflow.reentry[1]: the last rule is the default",
            "workflow.reentry[1].to: `nowhere` is not a step",
            "workflow.steps.classify.output_schema: not a valid JSON Schema",
            "workflow.steps.classify.assign: `a..b` is not a State path",
            "workflow.steps.classify.assign.c:",
            "workflow.steps.classify.next[1].to: `missing` is not a step",
            "workflow.reentry[1].to: `nowhere` is not a step; use one of",
            "workflow.steps.resolve.next[0].when: `secret.x` reads `secret`",
            "workflow.steps.orphan: a step that hands its work to an `agent` has no `tools`",
        ] {
            assert!(p.contains(needle), "missing {needle:?} in:\n{p}");
        }
    }

    #[test]
    fn a_misspelt_step_is_named_with_the_step_meant() {
        let s = spec("initial: start\nsteps:\n  start: { next: [{ to: finsh }] }\n  finish: {}\n");
        let p = s.problems().join("\n");
        assert!(
            p.contains("`finsh` is not a step (did you mean `finish`?)"),
            "{p}"
        );
        assert!(!p.contains("no route reaches"), "{p}");
    }

    #[test]
    fn unreachable_steps_are_named() {
        let s = spec(
            "initial: a\nsteps:\n  a: { next: [{ to: b }] }\n  b: { on_error: c }\n  c: {}\n  d: { next: [{ to: a }] }\n",
        );
        assert_eq!(s.unreachable(), vec!["d"]);
        assert!(s.problems().join("\n").contains("no route reaches `d`"));
    }

    #[test]
    fn expressions_pick_values_and_test_them() {
        let ctx = json!({"output": {"category": "billing", "missing": ["order"]}, "state": {}});
        assert_eq!(eval("output.category", &ctx), Ok(json!("billing")));
        assert_eq!(holds("output.missing | length > 0", &ctx), Ok(true));
        assert_eq!(holds("output.nothing", &ctx), Ok(false));
        assert_eq!(eval("output.nothing", &ctx), Ok(Value::Null));
        assert!(eval("output.category * 1000000", &ctx).is_err());
        assert!(
            validate_output(
                &json!({"type": "object", "required": ["category"]}),
                &json!({})
            )
            .unwrap_err()
            .contains("category")
        );
    }
}
