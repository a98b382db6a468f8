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
                    RefRoot::Input => {}
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
    for s in &plan.steps {
        let me = index.get(s.id.as_str()).copied();
        let sid = Some(s.id.as_str());
        match (&s.tool, opts.require_tools) {
            (Some(t), _) => match tools.tool_info(t) {
                None => problems.push(PlanProblem::new(
                    sid,
                    Some("_tool"),
                    format!(
                        "unknown tool `{t}`; declare it in the agent file's `tools` (known: {})",
                        tools.tool_names().join(", ")
                    ),
                )),
                Some(info) => check_literal_args(s, &info.input_schema, &mut problems),
            },
            (None, true) => problems.push(PlanProblem::new(
                sid,
                Some("_tool"),
                "is missing; `weft plan` runs tool calls only (a step without `_tool` needs an agent's step executor)",
            )),
            (None, false) => {}
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
        for (at, r) in refs {
            match &r.root {
                RefRoot::Input => {
                    if let Some(input) = opts.input
                        && !r.path.is_empty()
                        && path::get(input, &r.path).is_none()
                    {
                        problems.push(PlanProblem::new(
                            sid,
                            Some(&at),
                            format!(
                                "{r} is not in the input; pass it with --input '{{\"{}\": ...}}'",
                                r.path[0]
                            ),
                        ));
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
                        problems.push(PlanProblem::new(
                            sid,
                            Some(&at),
                            format!("{r} is written by no step; add `_outputPath: \"{r}\"` to the step that produces it"),
                        ));
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

/// Validates the literal (non-reference) arguments against the tool's input schema. Fields given
/// by reference are checked when the step runs, with their values.
fn check_literal_args(
    step: &crate::plan::PlanStep,
    schema: &Value,
    problems: &mut Vec<PlanProblem>,
) {
    if schema.is_null() || schema.as_object().is_some_and(serde_json::Map::is_empty) {
        return;
    }
    let ref_fields: HashSet<String> = step
        .args
        .iter()
        .filter(|(_, v)| crate::plan::Reference::from_arg(v).is_some() || contains_ref(v))
        .map(|(k, _)| k.clone())
        .collect();
    let mut schema = schema.clone();
    if let Some(Value::Array(req)) = schema.get_mut("required") {
        req.retain(|r| r.as_str().is_none_or(|n| !ref_fields.contains(n)));
    }
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for f in &ref_fields {
            if let Some(p) = props.get_mut(f) {
                *p = Value::Bool(true);
            }
        }
    }
    let validator = match jsonschema::validator_for(&schema) {
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
