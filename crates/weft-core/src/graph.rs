//! The dependency graph of a plan, and its validation.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::path;
use crate::plan::{Plan, PlanProblem, RefRoot};
use crate::tool::ToolCatalog;

/// The steps writing each State path, indexed so that the writers overlapping a read path are
/// found without scanning the plan.
pub struct WriteIndex<'p> {
    /// Writers under every prefix of the path they write (so: writers at or below a path).
    under: HashMap<&'p [String], Vec<usize>>,
    /// Writers at exactly a path.
    exact: HashMap<&'p [String], Vec<usize>>,
}

impl<'p> WriteIndex<'p> {
    /// The index of every `_outputPath` (and error path) of `plan`'s steps.
    pub fn new(plan: &'p Plan) -> Self {
        let mut under: HashMap<&[String], Vec<usize>> = HashMap::new();
        let mut exact: HashMap<&[String], Vec<usize>> = HashMap::new();
        for (i, step) in plan.steps.iter().enumerate() {
            for w in step.writes() {
                exact.entry(w).or_default().push(i);
                for n in 1..=w.len() {
                    under.entry(&w[..n]).or_default().push(i);
                }
            }
        }
        Self { under, exact }
    }

    /// The written path closest to `path`, which no step writes (a misspelling of it), with the
    /// rest of `path` below it; and a step that writes it.
    pub fn meant(&self, path: &[String]) -> Option<(String, usize)> {
        let candidates: Vec<(String, usize)> = self
            .exact
            .iter()
            .filter(|(w, _)| w.len() <= path.len())
            .filter_map(|(w, ws)| {
                let mut full: Vec<&str> = w.iter().map(String::as_str).collect();
                full.extend(path[w.len()..].iter().map(String::as_str));
                Some((full.join("."), *ws.first()?))
            })
            .collect();
        let c =
            crate::diagnose::closest(&path.join("."), candidates.iter().map(|(c, _)| c.as_str()))?;
        candidates.iter().find(|(n, _)| n == c).cloned()
    }

    /// The steps writing `path`, a path below it, or a path above it.
    pub fn writers_of(&self, path: &[String]) -> Vec<usize> {
        let mut v: Vec<usize> = self.under.get(path).cloned().unwrap_or_default();
        for k in 1..path.len() {
            if let Some(ws) = self.exact.get(&path[..k]) {
                v.extend(ws);
            }
        }
        v
    }
}

/// Dependencies between the steps of a plan, by index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    /// `deps[i]`: the steps step `i` waits for.
    pub deps: Vec<Vec<usize>>,
    /// `dependants[i]`: the steps that wait for step `i`.
    pub dependants: Vec<Vec<usize>>,
}

impl Graph {
    /// Builds the graph: explicit `_dependsOn` edges, `†steps.<id>` edges, and data edges from
    /// every writer of a State path to every reader of an overlapping path. Unknown ids and
    /// self-edges are left out (validation reports them). Near-linear in the plan's size.
    pub fn build(plan: &Plan) -> Self {
        let index = plan.index();
        let writers = WriteIndex::new(plan);
        let n = plan.steps.len();
        let mut deps: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, step) in plan.steps.iter().enumerate() {
            let mut set: Vec<usize> = Vec::new();
            for d in &step.depends_on {
                if let Some(&j) = index.get(d.as_str()) {
                    set.push(j);
                }
            }
            for r in step.reads() {
                match &r.root {
                    RefRoot::Input | RefRoot::Item => {}
                    RefRoot::Step(id) => {
                        if let Some(&j) = index.get(id.as_str()) {
                            set.push(j);
                        }
                    }
                    RefRoot::State => set.extend(writers.writers_of(&r.path)),
                }
            }
            set.sort_unstable();
            set.dedup();
            set.retain(|&j| j != i);
            deps[i] = set;
        }
        let mut dependants: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, ds) in deps.iter().enumerate() {
            for &j in ds {
                dependants[j].push(i);
            }
        }
        Self { deps, dependants }
    }

    /// A cycle, as step indices (first repeated at the end), if the graph has one.
    pub fn find_cycle(&self) -> Option<Vec<usize>> {
        // Kahn's algorithm removes every step not on or behind a cycle.
        let n = self.deps.len();
        let mut indegree: Vec<usize> = self.deps.iter().map(Vec::len).collect();
        let mut queue: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
        let mut removed = vec![false; n];
        while let Some(i) = queue.pop() {
            removed[i] = true;
            for &d in &self.dependants[i] {
                indegree[d] -= 1;
                if indegree[d] == 0 {
                    queue.push(d);
                }
            }
        }
        let start = (0..n).find(|&i| !removed[i])?;
        // Walk dependencies among the remaining steps until a step repeats.
        let mut seen: HashMap<usize, usize> = HashMap::new();
        let mut walk = Vec::new();
        let mut cur = start;
        loop {
            if let Some(&pos) = seen.get(&cur) {
                let mut cycle: Vec<usize> = walk[pos..].to_vec();
                cycle.reverse();
                cycle.push(cycle[0]);
                return Some(cycle);
            }
            seen.insert(cur, walk.len());
            walk.push(cur);
            cur = *self.deps[cur].iter().find(|&&d| !removed[d])?;
        }
    }
}

/// Options for validation.
#[derive(Clone, Debug, Default)]
pub struct ValidateOptions<'a> {
    /// The run's input, when known: `†input.*` references must exist in it.
    pub input: Option<&'a Value>,
    /// State that exists before the plan runs (completed work, on a replan).
    pub initial_state: Option<&'a Value>,
    /// Steps outside this plan that `_dependsOn` and `†steps.*` may name (earlier, immutable steps).
    pub known_steps: &'a [String],
    /// Every step must name a tool (true for `weft plan`, which has no step executor).
    pub require_tools: bool,
    /// The agent's skills, which a step's `_skill` must name.
    pub skills: &'a [&'a str],
    /// Where the tools are declared, named in the hint for an unknown tool (default: the agent
    /// file's `tools`).
    pub tools_declared_in: Option<&'a str>,
}

/// Validates a plan against the tools available, returning every problem found.
pub fn validate(
    plan: &Plan,
    tools: &dyn ToolCatalog,
    opts: &ValidateOptions<'_>,
) -> Vec<PlanProblem> {
    let mut problems = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for s in &plan.steps {
        if !seen.insert(s.id.as_str()) {
            problems.push(PlanProblem::new(
                Some(&s.id),
                Some("_id"),
                "duplicate id; every step needs its own `_id`",
            ));
        }
        if opts.known_steps.iter().any(|k| k == &s.id) {
            problems.push(PlanProblem::new(
                Some(&s.id),
                Some("_id"),
                "reuses the id of an earlier step, which is immutable; choose a new id",
            ));
        }
    }
    let known = |id: &str| seen.contains(id) || opts.known_steps.iter().any(|k| k == id);
    let writers = WriteIndex::new(plan);
    let index = plan.index();
    let in_initial_state = |p: &[String]| {
        opts.initial_state
            .is_some_and(|st| path::get(st, p).is_some())
    };
    let mut validators = Validators::new();
    for s in &plan.steps {
        let me = index.get(s.id.as_str()).copied();
        let sid = Some(s.id.as_str());
        match (&s.tool, opts.require_tools) {
            (Some(t), _) => match tools.tool_info(t) {
                None => problems.push(PlanProblem::new(
                    sid,
                    Some("_tool"),
                    format!(
                        "unknown tool `{t}`; declare it in {} (known: {})",
                        opts.tools_declared_in
                            .unwrap_or("the agent file's `tools`"),
                        match tools.tool_names() {
                            n if n.is_empty() => "none".to_owned(),
                            n => n.join(", "),
                        }
                    ),
                )),
                Some(info) => check_literal_args(
                    s,
                    t,
                    &info.input_schema,
                    &mut validators,
                    &mut problems,
                ),
            },
            (None, true) => problems.push(PlanProblem::new(
                sid,
                Some("_tool"),
                "is missing; `weft plan` runs tool calls only (a step without `_tool` needs an agent's step executor)",
            )),
            (None, false) => {}
        }
        if let Some(k) = &s.skill {
            if s.tool.is_some() {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_skill"),
                    "a skill guides the step executor, and a step with `_tool` has none; remove `_skill`, or `_tool` and its arguments",
                ));
            } else if !opts.skills.contains(&k.as_str()) {
                let msg = if opts.skills.is_empty() {
                    format!(
                        "unknown skill `{k}`: the agent has no skills; leave `_skill` out or add the skill to the agent file's `skills`"
                    )
                } else {
                    format!(
                        "unknown skill `{k}`{}; the agent's skills: {}",
                        crate::diagnose::did_you_mean(k, opts.skills.iter().copied()),
                        opts.skills.join(", ")
                    )
                };
                problems.push(PlanProblem::new(sid, Some("_skill"), msg));
            }
        }
        for d in &s.depends_on {
            if d == &s.id {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_dependsOn"),
                    "a step cannot depend on itself",
                ));
            } else if !known(d) {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_dependsOn"),
                    format!("names unknown step `{d}`"),
                ));
            }
        }
        let mut refs: Vec<(String, crate::plan::Reference)> = s
            .arg_refs()
            .into_iter()
            .filter_map(|(at, r)| r.ok().map(|r| (at, r)))
            .collect();
        if let Some(c) = &s.when {
            refs.extend(c.reads.iter().cloned().map(|r| ("_when".to_owned(), r)));
        }
        if let Some(f) = &s.for_each {
            refs.push(("_forEach".to_owned(), f.list.clone()));
            if s.tool.is_none() {
                problems.push(PlanProblem::new(
                    sid,
                    Some("_forEach"),
                    "a fan-out runs a tool once per item; give the step a `_tool`",
                ));
            }
        }
        for (at, r) in refs {
            match &r.root {
                RefRoot::Item if at == "_when" => problems.push(PlanProblem::new(
                    sid,
                    Some(&at),
                    format!("{r}: `_when` is decided once for the whole step, before any item; it cannot read an item"),
                )),
                RefRoot::Item if s.for_each.is_none() => problems.push(PlanProblem::new(
                    sid,
                    Some(&at),
                    format!("{r} is read only in a step with `_forEach` (the list whose items it names)"),
                )),
                RefRoot::Item => {}
                RefRoot::Input => {
                    if let Some(input) = opts.input
                        && !r.path.is_empty()
                        && path::get(input, &r.path).is_none()
                    {
                        let message = match meant_input(input, &r.path) {
                            Some(m) => format!("{r} is not in the input; did you mean `†input.{m}`?"),
                            None => format!(
                                "{r} is not in the input; pass it with --input '{{\"{}\": ...}}'",
                                r.path[0]
                            ),
                        };
                        problems.push(PlanProblem::new(sid, Some(&at), message));
                    }
                }
                RefRoot::Step(id) => {
                    if id == &s.id {
                        problems.push(PlanProblem::new(
                            sid,
                            Some(&at),
                            format!("{r} reads this step's own output"),
                        ));
                    } else if !known(id) {
                        problems.push(PlanProblem::new(
                            sid,
                            Some(&at),
                            format!("{r} names unknown step `{id}`"),
                        ));
                    }
                }
                RefRoot::State => {
                    let ws = writers.writers_of(&r.path);
                    if in_initial_state(&r.path) {
                        continue;
                    }
                    if !ws.is_empty() && ws.iter().all(|&w| Some(w) == me) {
                        problems.push(PlanProblem::new(
                            sid,
                            Some(&at),
                            format!("{r} reads this step's own output"),
                        ));
                    } else if ws.is_empty() {
                        let message = match writers.meant(&r.path) {
                            Some((m, w)) => format!(
                                "{r} is written by no step; did you mean `†state.{m}` (written by step `{}`)?",
                                plan.steps[w].id
                            ),
                            None => format!(
                                "{r} is written by no step; add `_outputPath: \"{r}\"` to the step that produces it"
                            ),
                        };
                        problems.push(PlanProblem::new(sid, Some(&at), message));
                    }
                }
            }
        }
    }
    let graph = Graph::build(plan);
    if let Some(cycle) = graph.find_cycle() {
        let names: Vec<&str> = cycle.iter().map(|&i| plan.steps[i].id.as_str()).collect();
        problems.push(PlanProblem::new(
            Some(names[0]),
            None,
            format!(
                "the plan has a cycle: {}; a plan must be acyclic (use a sub-run for loops)",
                names.join(" -> ")
            ),
        ));
    }
    problems
}

/// The input path closest to `path`, which the input does not hold: the part of `path` that is
/// there, then the key closest to the first part that is not.
fn meant_input(input: &Value, path: &[String]) -> Option<String> {
    let mut v = input;
    for (i, k) in path.iter().enumerate() {
        match v.get(k) {
            Some(next) => v = next,
            None => {
                let c = crate::diagnose::closest(k, v.as_object()?.keys().map(String::as_str))?;
                let mut out: Vec<&str> = path[..i].iter().map(String::as_str).collect();
                out.push(c);
                out.extend(path[i + 1..].iter().map(String::as_str));
                return Some(out.join("."));
            }
        }
    }
    None
}

/// The validators of literal arguments compiled so far in one validation, by tool and the
/// fields given by reference (sorted): the steps of a plan mostly share a few of each, and
/// compiling a schema costs far more than checking arguments against it.
type Validators = HashMap<(String, Vec<String>), Result<jsonschema::Validator, String>>;

/// Validates the literal (non-reference) arguments against the tool's input schema. Fields given
/// by reference are checked when the step runs, with their values.
fn check_literal_args(
    step: &crate::plan::PlanStep,
    tool: &str,
    schema: &Value,
    validators: &mut Validators,
    problems: &mut Vec<PlanProblem>,
) {
    if schema.is_null() || schema.as_object().is_some_and(serde_json::Map::is_empty) {
        return;
    }
    let mut ref_fields: Vec<String> = step
        .args
        .iter()
        .filter(|(_, v)| crate::plan::Reference::from_arg(v).is_some() || contains_ref(v))
        .map(|(k, _)| k.clone())
        .collect();
    ref_fields.sort_unstable();
    let validator = validators
        .entry((tool.to_owned(), ref_fields))
        .or_insert_with_key(|(_, ref_fields)| {
            let mut schema = schema.clone();
            if let Some(Value::Array(req)) = schema.get_mut("required") {
                req.retain(|r| {
                    r.as_str()
                        .is_none_or(|n| !ref_fields.iter().any(|f| f == n))
                });
            }
            if let Some(Value::Object(props)) = schema.get_mut("properties") {
                for f in ref_fields {
                    if let Some(p) = props.get_mut(f) {
                        *p = Value::Bool(true);
                    }
                }
            }
            jsonschema::validator_for(&schema).map_err(|e| e.to_string())
        });
    let validator = match validator {
        Ok(v) => v,
        Err(e) => {
            problems.push(PlanProblem::new(
                Some(&step.id),
                Some("_tool"),
                format!("the tool's input_schema is not a valid JSON Schema: {e}"),
            ));
            return;
        }
    };
    let args = Value::Object(step.args.clone());
    for e in validator.iter_errors(&args) {
        let at = e.instance_path().to_string();
        let field = if at.is_empty() {
            "arguments".to_owned()
        } else {
            at.trim_start_matches('/').replace('/', ".")
        };
        problems.push(PlanProblem::new(
            Some(&step.id),
            Some(&field),
            format!("{e} (the tool's input_schema)"),
        ));
    }
}

fn contains_ref(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .values()
            .any(|x| crate::plan::Reference::from_arg(x).is_some() || contains_ref(x)),
        Value::Array(a) => a
            .iter()
            .any(|x| crate::plan::Reference::from_arg(x).is_some() || contains_ref(x)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::tool::ToolInfo;

    fn plan(v: Value) -> Plan {
        Plan::from_value(&v).unwrap_or_else(|p| panic!("plan does not parse: {p:?}"))
    }

    fn tool(name: &str, schema: Value) -> (String, ToolInfo) {
        (
            name.to_owned(),
            ToolInfo {
                name: name.to_owned(),
                description: String::new(),
                category: None,
                input_schema: schema,
                idempotent: true,
                parallel: true,
                requires_approval: false,
                source: "test".into(),
                output_schema: None,
            },
        )
    }

    fn catalog() -> BTreeMap<String, ToolInfo> {
        BTreeMap::from([
            tool("t", json!({})),
            tool(
                "typed",
                json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
            ),
        ])
    }

    fn ids(p: &Plan, list: &[usize]) -> Vec<String> {
        list.iter().map(|&i| p.steps[i].id.clone()).collect()
    }

    #[test]
    fn a_misspelt_reference_is_named_with_the_one_meant() {
        let p = plan(json!([
            {"_id": "look", "_tool": "t", "city": "†input.cty", "_outputPath": "†state.weather"},
            {"_id": "say", "_tool": "t", "sunny": "†state.wether.sunny", "far": "†state.zzz"}
        ]));
        let input = json!({"city": "Oslo"});
        let opts = ValidateOptions {
            input: Some(&input),
            ..ValidateOptions::default()
        };
        let text: Vec<String> = validate(&p, &catalog(), &opts)
            .iter()
            .map(|p| p.message.clone())
            .collect();
        let text = text.join("\n");
        for needle in [
            "†input.cty is not in the input; did you mean `†input.city`?",
            "†state.wether.sunny is written by no step; did you mean `†state.weather.sunny` (written by step `look`)?",
            "†state.zzz is written by no step; add `_outputPath: \"†state.zzz\"`",
        ] {
            assert!(text.contains(needle), "`{needle}` in:\n{text}");
        }
    }

    #[test]
    fn data_edges_follow_overlapping_state_paths() {
        let p = plan(json!([
            {"_id": "whole", "_tool": "t", "_outputPath": "†state.a"},
            {"_id": "below", "_tool": "t", "_outputPath": "†state.a.b.c"},
            {"_id": "exact", "_tool": "t", "_outputPath": "†state.a.b"},
            {"_id": "aside", "_tool": "t", "_outputPath": "†state.a.x"},
            {"_id": "other", "_tool": "t", "_outputPath": "†state.ab"},
            {"_id": "reader", "_tool": "t", "v": "†state.a.b"}
        ]));
        let g = Graph::build(&p);
        assert_eq!(ids(&p, &g.deps[5]), ["whole", "below", "exact"]);
        for i in 0..5 {
            assert!(g.deps[i].is_empty(), "{}", p.steps[i].id);
        }
        assert_eq!(ids(&p, &g.dependants[0]), ["reader"]);
        assert!(g.dependants[3].is_empty());
        assert!(g.dependants[4].is_empty());
    }

    #[test]
    fn explicit_step_and_condition_edges_are_deduplicated() {
        let p = plan(json!([
            {"_id": "a", "_tool": "t", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "t", "_outputPath": "†state.b"},
            {"_id": "c", "_tool": "t", "x": "†state.a", "y": "†steps.a.out", "_dependsOn": ["a", "a"],
             "_when": "state.b.ok", "_outputPath": "†state.c"},
            {"_id": "d", "_tool": "t", "_dependsOn": ["ghost", "d"]}
        ]));
        let g = Graph::build(&p);
        assert_eq!(ids(&p, &g.deps[2]), ["a", "b"]);
        assert_eq!(ids(&p, &g.dependants[0]), ["c"]);
        // Unknown ids and self-edges are left to validation.
        assert!(g.deps[3].is_empty());
        assert_eq!(g.find_cycle(), None);
    }

    #[test]
    fn a_step_reading_its_own_output_has_no_self_edge() {
        let p =
            plan(json!([{"_id": "a", "_tool": "t", "x": "†state.a", "_outputPath": "†state.a"}]));
        let g = Graph::build(&p);
        assert!(g.deps[0].is_empty());
        let problems = validate(&p, &catalog(), &ValidateOptions::default());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].message.contains("own output"));
    }

    fn assert_is_cycle(g: &Graph, cycle: &[usize]) {
        assert!(cycle.len() >= 3, "{cycle:?}");
        assert_eq!(cycle.first(), cycle.last());
        for w in cycle.windows(2) {
            assert!(
                g.deps[w[1]].contains(&w[0]),
                "{} does not wait for {} in {cycle:?}",
                w[1],
                w[0]
            );
        }
    }

    #[test]
    fn find_cycle_returns_a_real_cycle_without_its_tail() {
        let p = plan(json!([
            {"_id": "root", "_tool": "t", "_outputPath": "†state.root"},
            {"_id": "a", "_tool": "t", "x": "†state.c", "r": "†state.root", "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "t", "x": "†state.a", "_outputPath": "†state.b"},
            {"_id": "c", "_tool": "t", "x": "†state.b", "_outputPath": "†state.c"},
            {"_id": "tail", "_tool": "t", "x": "†state.c"}
        ]));
        let g = Graph::build(&p);
        let cycle = g.find_cycle().unwrap_or_default();
        assert_is_cycle(&g, &cycle);
        let mut members = ids(&p, &cycle[..cycle.len() - 1]);
        members.sort();
        assert_eq!(members, ["a", "b", "c"]);
        let problems = validate(&p, &catalog(), &ValidateOptions::default());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].message.contains("cycle: "), "{problems:?}");
        assert!(!problems[0].message.contains("tail"));
    }

    #[test]
    fn find_cycle_sees_two_step_and_depends_on_cycles() {
        let p = plan(json!([
            {"_id": "x", "_tool": "t", "_dependsOn": "y"},
            {"_id": "y", "_tool": "t", "_dependsOn": "x"}
        ]));
        let g = Graph::build(&p);
        let cycle = g.find_cycle().unwrap_or_default();
        assert_is_cycle(&g, &cycle);
        assert_eq!(cycle.len(), 3);
    }

    #[test]
    fn find_cycle_handles_a_long_chain_and_a_long_cycle() {
        let n = 20_000;
        let calls: Vec<Value> = (0..n)
            .map(|i| json!({"_id": format!("s{i}"), "_tool": "t", "_dependsOn": if i == 0 { json!([]) } else { json!([format!("s{}", i - 1)]) }}))
            .collect();
        let mut p = plan(Value::Array(calls));
        let g = Graph::build(&p);
        assert_eq!(g.find_cycle(), None);
        p.steps[0].depends_on = vec![format!("s{}", n - 1)];
        let g = Graph::build(&p);
        let cycle = g.find_cycle().unwrap_or_default();
        assert_eq!(cycle.len(), n + 1);
        assert_is_cycle(&g, &cycle);
    }

    #[test]
    fn validate_accepts_a_good_plan() {
        let p = plan(json!([
            {"_id": "a", "_tool": "typed", "n": 1, "_outputPath": "†state.a"},
            {"_id": "b", "_tool": "typed", "n": "†state.a.n", "_outputPath": "†state.b"},
            {"_id": "c", "_tool": "t", "v": "†input.v", "w": "†steps.a", "_dependsOn": ["b"]}
        ]));
        let input = json!({"v": 1});
        let opts = ValidateOptions {
            input: Some(&input),
            require_tools: true,
            ..ValidateOptions::default()
        };
        assert_eq!(validate(&p, &catalog(), &opts), vec![]);
    }

    #[test]
    fn validate_checks_input_only_when_it_is_known() {
        let p = plan(json!([{"_id": "a", "_tool": "t", "v": "†input.missing.deep"}]));
        assert!(validate(&p, &catalog(), &ValidateOptions::default()).is_empty());
        let input = json!({"missing": {}});
        let problems = validate(
            &p,
            &catalog(),
            &ValidateOptions {
                input: Some(&input),
                ..ValidateOptions::default()
            },
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].step.as_deref(), Some("a"));
        assert_eq!(problems[0].field.as_deref(), Some("v"));
        assert!(problems[0].message.contains("--input"));
    }

    #[test]
    fn validate_uses_initial_state_and_known_steps() {
        let p = plan(json!([
            {"_id": "next", "_tool": "t", "v": "†state.done.value", "w": "†steps.old.x", "_dependsOn": ["old"]}
        ]));
        let bare = validate(&p, &catalog(), &ValidateOptions::default());
        assert_eq!(bare.len(), 3, "{bare:?}");
        let state = json!({"done": {"value": 1}});
        let known = vec!["old".to_owned()];
        let opts = ValidateOptions {
            initial_state: Some(&state),
            known_steps: &known,
            ..ValidateOptions::default()
        };
        assert_eq!(validate(&p, &catalog(), &opts), vec![]);
        // An earlier step's id cannot be reused.
        let reuse = plan(json!([{"_id": "old", "_tool": "t"}]));
        let problems = validate(&reuse, &catalog(), &opts);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message.contains("immutable"));
    }

    #[test]
    fn a_steps_skill_must_be_one_of_the_agents() {
        let skills = ["refund-policy", "tone"];
        let opts = ValidateOptions {
            skills: &skills,
            ..ValidateOptions::default()
        };
        let good = plan(json!([{"_id": "a", "_description": "decide", "_skill": "refund-policy"}]));
        assert_eq!(validate(&good, &catalog(), &opts), vec![]);
        let bad = plan(json!([
            {"_id": "a", "_description": "decide", "_skill": "refund-polcy"},
            {"_id": "b", "_tool": "t", "_skill": "tone"}
        ]));
        let problems = validate(&bad, &catalog(), &opts);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0].field.as_deref(), Some("_skill"));
        assert_eq!(
            problems[0].message,
            "unknown skill `refund-polcy` (did you mean `refund-policy`?); the agent's skills: refund-policy, tone"
        );
        assert!(problems[1].message.contains("a step with `_tool` has none"));
        let none = validate(&good, &catalog(), &ValidateOptions::default());
        assert!(
            none[0].message.contains("the agent has no skills"),
            "{none:?}"
        );
        // The choice is part of the plan as written (and so of the events that record it).
        assert_eq!(good.steps[0].to_call()["_skill"], json!("refund-policy"));
        let empty = crate::plan::Plan::from_value(
            &json!([{"_id": "a", "_description": "d", "_skill": ""}]),
        );
        assert!(empty.is_err());
    }

    #[test]
    fn validate_requires_tools_only_when_asked() {
        let p = plan(json!([{"_id": "a", "_description": "look it up"}]));
        assert!(validate(&p, &catalog(), &ValidateOptions::default()).is_empty());
        let problems = validate(
            &p,
            &catalog(),
            &ValidateOptions {
                require_tools: true,
                ..ValidateOptions::default()
            },
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].field.as_deref(), Some("_tool"));
    }

    #[test]
    fn validate_checks_literals_but_not_references_against_the_schema() {
        let p = plan(json!([
            {"_id": "w", "_tool": "t", "_outputPath": "†state.w"},
            {"_id": "ok_ref", "_tool": "typed", "n": "†state.w"},
            {"_id": "ok_nested_ref", "_tool": "typed", "n": {"$ref": "state.w"}},
            {"_id": "bad_type", "_tool": "typed", "n": "seven"},
            {"_id": "missing", "_tool": "typed"}
        ]));
        let problems = validate(&p, &catalog(), &ValidateOptions::default());
        let got: Vec<(String, String)> = problems
            .iter()
            .map(|p| {
                (
                    p.step.clone().unwrap_or_default(),
                    p.field.clone().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("bad_type".to_owned(), "n".to_owned()),
                ("missing".to_owned(), "arguments".to_owned())
            ]
        );
    }

    #[test]
    fn validate_reports_a_tool_with_a_broken_schema() {
        let mut cat = catalog();
        cat.extend([tool("broken", json!({"type": 12}))]);
        let p = plan(json!([{"_id": "a", "_tool": "broken", "x": 1}]));
        let problems = validate(&p, &cat, &ValidateOptions::default());
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message.contains("not a valid JSON Schema"));
    }

    #[test]
    fn validate_reports_steps_references() {
        let p = plan(json!([
            {"_id": "a", "_tool": "t", "me": "†steps.a", "who": "†steps.nobody.x"}
        ]));
        let problems = validate(&p, &catalog(), &ValidateOptions::default());
        let msgs: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(problems.len(), 2, "{msgs:?}");
        assert!(msgs.iter().any(|m| m.contains("own output")));
        assert!(msgs.iter().any(|m| m.contains("unknown step `nobody`")));
    }

    #[test]
    fn write_index_finds_writers_above_at_and_below() {
        let p = plan(json!([
            {"_tool": "t", "_outputPath": "†state.a"},
            {"_tool": "t", "_outputPath": "†state.a.b || †state.err.a"},
            {"_tool": "t", "_outputPath": "†state.a.b.c"},
            {"_tool": "t", "_outputPath": "†state.z"}
        ]));
        let w = WriteIndex::new(&p);
        let path = |s: &str| s.split('.').map(str::to_owned).collect::<Vec<_>>();
        let sorted = |mut v: Vec<usize>| {
            v.sort_unstable();
            v
        };
        assert_eq!(sorted(w.writers_of(&path("a.b"))), [0, 1, 2]);
        assert_eq!(sorted(w.writers_of(&path("a"))), [0, 1, 2]);
        assert_eq!(sorted(w.writers_of(&path("a.b.c.d"))), [0, 1, 2]);
        assert_eq!(sorted(w.writers_of(&path("a.q"))), [0]);
        assert_eq!(sorted(w.writers_of(&path("err"))), [1]);
        assert!(w.writers_of(&path("y")).is_empty());
    }
}
