//! A thread's checkpoints and tasks as LangGraph names them, read from its log.
//!
//! A checkpoint is each event after which the thread's values changed (where the `values` stream
//! mode sends them): a task given or a person's answer (`source: input`), a model reply, a tool
//! call's result, a plan step's output, a wait, the run's end (`source: loop`), messages added
//! between runs (`threads.update_state`, `source: update`). Its id is the
//! event's sequence number, as in the thread's state; `step` counts the thread's checkpoints
//! (from -1, as LangGraph's first input checkpoint), `parent` is the checkpoint before it.
//!
//! A task is what runs between checkpoints: a model turn (`agent`), one of the model's tool calls
//! (`tools`), a plan step's attempt (named by the step's id); a workflow's model turn starts with
//! the task or where a step is entered; a plan agent's model turn (`agent`: planning, the review
//! after a wave, the answer) runs while none of its steps does, and ends with a plan or as its
//! steps start. It starts and ends at events of the log, and its id is derived from the thread
//! and the event that scheduled it (the checkpoint before a model turn, the reply and call id of
//! a tool call, a plan step's start), so a checkpoint names the tasks that run after it before
//! they start. The `tasks` and `checkpoints` stream modes and the thread's history come from
//! one fold of the log ([`Lineage`]), which a stream runs from the log's first event as it folds
//! the state: a live stream, a replay and the history give the same ids.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use weft_core::state::OpenCall;
use weft_core::{Envelope, Event, SessionStatus, State};

use super::{messages, threads};

/// Whether the thread's values change with `e` (a checkpoint follows it).
pub(crate) fn is_checkpoint(e: &Event) -> bool {
    matches!(
        e,
        Event::ModelReplied {
            purpose: weft_core::model::Purpose::React | weft_core::model::Purpose::Workflow,
            ..
        } | Event::TurnStarted { .. }
            | Event::UserReplied { .. }
            | Event::StepCompleted { .. }
            | Event::ToolCallFinished { .. }
            | Event::WaitingForUser { .. }
            | Event::RunFinished { .. }
            | Event::MessagesImported { .. }
    )
}

/// The call a `tool_call_finished` ends, as it is in flight in `st` (before the event).
pub(crate) fn open_call(e: &Event, st: &State) -> Option<OpenCall> {
    match e {
        Event::ToolCallFinished { call_id, .. } => st.calls().open.get(call_id).cloned(),
        _ => None,
    }
}

/// The id of a task of thread `thread_id` scheduled at `key` (a UUID, as LangGraph's): the
/// model turn scheduled by checkpoint S or a wait at event S has key `S`.
pub(crate) fn task_id(thread_id: &str, key: &str) -> String {
    let id = uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("{thread_id}:{key}").as_bytes(),
    );
    id.to_string()
}

/// A task: its id and its node's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Task {
    pub id: String,
    pub name: String,
}

/// What a task was, for its start's `input` and `triggers`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Kind {
    /// A model turn: its input is the thread's values.
    Agent,
    /// One of the model's tool calls (`call_id`).
    Tool { call_id: String },
    /// A plan step's attempt.
    Step { attempt: u32 },
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// It wrote the event's update (the reply, the call's result, the step's output).
    Done,
    /// It failed with this error.
    Failed(String),
    /// It waits for a person (the event is the wait).
    Interrupted,
}

/// A checkpoint: the event it follows and where it stands in the thread.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Checkpoint {
    pub seq: u64,
    pub parent: Option<u64>,
    pub step: i64,
    /// `input` (a task or an answer given) or `loop`.
    pub source: &'static str,
    /// The tasks that run next (LangGraph's `next` are their names).
    pub next: Vec<Task>,
}

/// What one event did to the thread's tasks and checkpoints, in the order LangGraph sends them:
/// tasks ended, the checkpoint, tasks started.
#[derive(Debug, Default)]
pub(crate) struct Noted {
    pub ended: Vec<(Task, Outcome)>,
    pub checkpoint: Option<Checkpoint>,
    pub started: Vec<(Task, Kind)>,
}

/// The thread's tasks and checkpoints so far, folded over its log from its first event.
#[derive(Debug, Default)]
pub(crate) struct Lineage {
    thread_id: String,
    checkpoints: i64,
    last: Option<u64>,
    /// The model turn that runs, if one does.
    agent: Option<Task>,
    /// The model turn a wait stopped, which goes on (with the same id) once the person answers.
    waiting: Option<Task>,
    /// The reply whose tool calls run (its sequence number).
    reply: u64,
    /// Plan steps that run, by step id.
    steps: BTreeMap<String, Task>,
}

impl Lineage {
    pub(crate) fn new(thread_id: &str) -> Self {
        Self {
            thread_id: thread_id.to_owned(),
            ..Self::default()
        }
    }

    fn task(&self, name: &str, key: &str) -> Task {
        Task {
            id: task_id(&self.thread_id, key),
            name: name.to_owned(),
        }
    }

    /// The tool call `call_id` of the reply that runs, as a task.
    fn tool_task(&self, call_id: &str) -> Task {
        self.task("tools", &format!("{}:{call_id}", self.reply))
    }

    /// Notes `env`, which `st` has applied; `call`: the call a `tool_call_finished` ends, as it
    /// was in flight.
    pub(crate) fn note(&mut self, env: &Envelope, call: Option<&OpenCall>, st: &State) -> Noted {
        let mut out = Noted::default();
        match &env.event {
            Event::ModelReplied {
                purpose: weft_core::model::Purpose::React | weft_core::model::Purpose::Workflow,
                reply,
                ..
            } => {
                if let Some(t) = self.agent.take() {
                    out.ended.push((t, Outcome::Done));
                }
                if !reply.tool_calls.is_empty() {
                    self.reply = env.seq;
                }
            }
            Event::ToolCallStarted {
                call_id,
                step: None,
                ..
            } => out.started.push((
                self.tool_task(call_id),
                Kind::Tool {
                    call_id: call_id.clone(),
                },
            )),
            Event::ToolCallFinished { call_id, .. } if call.is_some_and(|c| c.step.is_none()) => {
                out.ended.push((self.tool_task(call_id), Outcome::Done));
            }
            // A workflow step's model turn (the first one's began with the task).
            Event::WorkflowStepEntered { .. }
                if self.agent.is_none() && st.status() == SessionStatus::Running =>
            {
                let t = self.task("agent", &env.seq.to_string());
                self.agent = Some(t.clone());
                out.started.push((t, Kind::Agent));
            }
            // A plan agent's model turn (planning, reviewing) ends once a plan's steps run.
            Event::PlanAccepted { .. } | Event::PlanRevised { .. } => {
                if let Some(t) = self.agent.take() {
                    out.ended.push((t, Outcome::Done));
                }
            }
            Event::StepStarted { step, attempt } => {
                if let Some(t) = self.agent.take() {
                    out.ended.push((t, Outcome::Done));
                }
                let t = self.task(step, &env.seq.to_string());
                self.steps.insert(step.clone(), t.clone());
                out.started.push((t, Kind::Step { attempt: *attempt }));
            }
            Event::StepCompleted { step, .. } => {
                if let Some(t) = self.steps.remove(step) {
                    out.ended.push((t, Outcome::Done));
                }
            }
            Event::StepFailed { step, error, .. } | Event::StepRetrying { step, error, .. } => {
                if let Some(t) = self.steps.remove(step) {
                    out.ended.push((t, Outcome::Failed(error.message.clone())));
                }
            }
            Event::WaitingForUser { .. } => {
                // A plan step that asked ends interrupted (it runs again after the answer, as
                // a new attempt); a model turn too, and the turn after the answer is it.
                for t in std::mem::take(&mut self.steps).into_values() {
                    out.ended.push((t, Outcome::Interrupted));
                }
                self.waiting = Some(match self.agent.take() {
                    Some(t) => {
                        out.ended.push((t.clone(), Outcome::Interrupted));
                        t
                    }
                    None => self.task("agent", &env.seq.to_string()),
                });
            }
            Event::RunFinished { error, .. } => {
                let outcome = error.clone().map_or(Outcome::Done, Outcome::Failed);
                self.waiting = None;
                if let Some(t) = self.agent.take() {
                    out.ended.push((t, outcome.clone()));
                }
                for t in std::mem::take(&mut self.steps).into_values() {
                    out.ended.push((t, outcome.clone()));
                }
            }
            _ => {}
        }
        if !is_checkpoint(&env.event) {
            return out;
        }
        let next = self.next(env.seq, st);
        if st.status() == SessionStatus::Running
            && self.agent.is_none()
            && let Some(t) = next.iter().find(|t| t.name == "agent")
        {
            self.waiting = None;
            self.agent = Some(t.clone());
            out.started.push((t.clone(), Kind::Agent));
        }
        let source = match env.event {
            Event::TurnStarted { .. } | Event::UserReplied { .. } => "input",
            Event::MessagesImported { .. } => "update",
            _ => "loop",
        };
        out.checkpoint = Some(Checkpoint {
            seq: env.seq,
            parent: self.last,
            step: self.checkpoints - 1,
            source,
            next,
        });
        self.checkpoints += 1;
        self.last = Some(env.seq);
        out
    }

    /// The tasks that run after checkpoint `seq`: in a ReAct (or workflow) loop, the reply's
    /// tool calls that have no result yet, else the next model turn (also when the thread waits
    /// for a person: the turn goes on with the answer); a plan's steps that run, else the plan
    /// agent's model turn (planning, reviewing, answering).
    fn next(&self, seq: u64, st: &State) -> Vec<Task> {
        if st.status() == SessionStatus::Completed || st.status() == SessionStatus::Failed {
            return Vec::new();
        }
        let agent = || {
            self.agent
                .clone()
                .or_else(|| self.waiting.clone())
                .unwrap_or_else(|| self.task("agent", &seq.to_string()))
        };
        // A wait is the agent's (as the thread's state says), a plan step's included.
        if st.status() == SessionStatus::WaitingForUser {
            return vec![agent()];
        }
        if !self.steps.is_empty() {
            return self.steps.values().cloned().collect();
        }
        // A plan agent between its steps: the model plans, reviews or answers.
        if st.phase() != weft_core::state::Phase::React {
            return if st.status() == SessionStatus::Running {
                vec![agent()]
            } else {
                Vec::new()
            };
        }
        match unanswered(st) {
            None => Vec::new(),
            Some(calls) if calls.is_empty() => vec![agent()],
            Some(calls) => calls.iter().map(|c| self.tool_task(c)).collect(),
        }
    }
}

/// The tool calls of the model's last reply that have no result in the conversation yet;
/// `None` when the conversation ends with a reply without calls (the model has answered).
fn unanswered(st: &State) -> Option<Vec<String>> {
    use weft_core::model::Message as M;
    let mut answered = Vec::new();
    for m in st.history().held().iter().rev() {
        match m {
            M::Tool { call_id, .. } => answered.push(call_id.as_str()),
            M::Assistant { tool_calls, .. } if tool_calls.is_empty() && answered.is_empty() => {
                return None;
            }
            M::Assistant { tool_calls, .. } => {
                return Some(
                    tool_calls
                        .iter()
                        .filter(|c| !answered.contains(&c.id.as_str()))
                        .map(|c| c.id.clone())
                        .collect(),
                );
            }
            _ => return Some(Vec::new()),
        }
    }
    Some(Vec::new())
}

/// A checkpoint as LangGraph's `checkpoints` stream mode sends it (`st`: the thread at it).
pub(crate) fn checkpoint_json(thread_id: &str, cp: &Checkpoint, st: &State) -> Value {
    let config = |seq: u64| {
        json!({"configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": seq.to_string(),
        }})
    };
    json!({
        "config": config(cp.seq),
        "parent_config": cp.parent.map(config),
        "values": threads::values(st),
        "metadata": metadata(cp),
        "next": cp.next.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        "tasks": cp.next.iter().map(|t| json!({
            "id": t.id,
            "name": t.name,
            "interrupts": waits(st),
            "state": null,
        })).collect::<Vec<_>>(),
    })
}

/// A checkpoint's metadata as LangGraph's stream writes it: `source`, `step`, `parents`.
pub(crate) fn metadata(cp: &Checkpoint) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("source".into(), json!(cp.source));
    m.insert("step".into(), json!(cp.step));
    m.insert("parents".into(), json!({}));
    m
}

/// The interrupt the thread waits on, if it waits.
pub(crate) fn waits(st: &State) -> Vec<threads::Interrupt> {
    st.turn()
        .waiting()
        .iter()
        .map(|w| threads::interrupt(st, w))
        .collect()
}

/// A task's start as LangGraph's `tasks` stream mode sends it: `{id, name, input, triggers}`
/// (`env`: the event it started at, `st`: the thread after it).
pub(crate) fn started_json(task: &Task, kind: &Kind, env: &Envelope, st: &State) -> Value {
    let (input, trigger) = match kind {
        Kind::Agent => (
            json!(threads::values(st)),
            format!("branch:to:{}", task.name),
        ),
        Kind::Tool { call_id } => {
            let (tool, args) = match &env.event {
                Event::ToolCallStarted { tool, args, .. } => (tool.as_str(), args.clone()),
                _ => ("", Value::Null),
            };
            (
                json!({
                    "__type": "tool_call_with_context",
                    "tool_call": {"name": tool, "args": args, "id": call_id, "type": "tool_call"},
                    "state": threads::values(st),
                }),
                "__pregel_push".to_owned(),
            )
        }
        Kind::Step { attempt } => (
            json!({ "attempt": attempt }),
            format!("branch:to:{}", task.name),
        ),
    };
    json!({"id": task.id, "name": task.name, "input": input, "triggers": [trigger]})
}

/// A task's end as LangGraph's `tasks` stream mode sends it: `{id, name, error, result,
/// interrupts}`; `result` is what it wrote: the model's reply, or the event's update (`update`,
/// by node, as the `updates` stream mode sends it). `env`: the event it ended at, `st`: the
/// thread after it.
pub(crate) fn ended_json(
    task: &Task,
    outcome: &Outcome,
    (env, update): (&Envelope, Option<&Value>),
    st: &State,
) -> Value {
    let result = match (outcome, &env.event) {
        (Outcome::Done, Event::ModelReplied { .. }) => {
            messages::last_reply(st).map(|m| json!({ "messages": [m] }))
        }
        (Outcome::Done, Event::PlanAccepted { plan } | Event::PlanRevised { plan, .. }) => {
            Some(json!({ "plan": plan }))
        }
        (Outcome::Done, _) => update.and_then(|u| u.get(&task.name)).cloned(),
        _ => None,
    };
    let error = match outcome {
        Outcome::Failed(e) => json!(e),
        _ => Value::Null,
    };
    let interrupts = match outcome {
        Outcome::Interrupted => waits(st),
        _ => Vec::new(),
    };
    json!({
        "id": task.id,
        "name": task.name,
        "error": error,
        "result": result.unwrap_or_else(|| json!({})),
        "interrupts": interrupts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ReAct turn whose reply asks for two calls, run one after the other, then the answer.
    fn log() -> Vec<Envelope> {
        let events = [
            json!({"type": "session_started", "session_id": "t1", "agent": "a", "mode": "react"}),
            json!({"type": "turn_started", "task": "go"}),
            json!({"type": "run_started", "run_id": "r1", "after": 0}),
            json!({"type": "model_replied", "purpose": "react", "reply": {"content": "",
                "tool_calls": [{"id": "c1", "name": "x", "arguments": {}},
                               {"id": "c2", "name": "y", "arguments": {"n": 1}}]}}),
            json!({"type": "tool_call_started", "call_id": "c1", "tool": "x", "args": {},
                "attempt": 1, "idempotency_key": "k1"}),
            json!({"type": "tool_call_finished", "call_id": "c1",
                "outcome": {"status": "ok", "output": 1}, "duration_ms": 1}),
            json!({"type": "tool_call_started", "call_id": "c2", "tool": "y", "args": {"n": 1},
                "attempt": 1, "idempotency_key": "k2"}),
            json!({"type": "tool_call_finished", "call_id": "c2",
                "outcome": {"status": "ok", "output": 2}, "duration_ms": 1}),
            json!({"type": "model_replied", "purpose": "react", "reply": {"content": "done"}}),
            json!({"type": "run_finished", "status": "completed", "answer": "done"}),
        ];
        numbered(events.into())
    }

    /// Envelopes of `events`, numbered from 1.
    fn numbered(events: Vec<Value>) -> Vec<Envelope> {
        events
            .into_iter()
            .zip(1..)
            .map(|(mut e, seq)| {
                e["seq"] = json!(seq);
                e["ts"] = json!(0);
                e["v"] = json!(1);
                serde_json::from_value(e).unwrap()
            })
            .collect()
    }

    fn fold(log: &[Envelope]) -> Vec<Noted> {
        let mut st = State::new();
        let mut lineage = Lineage::new("t1");
        log.iter()
            .map(|e| {
                let call = open_call(&e.event, &st);
                st.apply(&e.event);
                lineage.note(e, call.as_ref(), &st)
            })
            .collect()
    }

    #[test]
    fn each_task_starts_and_ends_once_and_each_checkpoint_names_what_runs_next() {
        let noted = fold(&log());
        fn names(ts: &[Task]) -> Vec<&str> {
            ts.iter().map(|t| t.name.as_str()).collect()
        }
        let cps: Vec<&Checkpoint> = noted.iter().filter_map(|n| n.checkpoint.as_ref()).collect();
        assert_eq!(
            cps.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [2, 4, 6, 8, 9, 10]
        );
        assert_eq!(
            cps.iter()
                .map(|c| (c.step, c.parent, c.source))
                .collect::<Vec<_>>(),
            [
                (-1, None, "input"),
                (0, Some(2), "loop"),
                (1, Some(4), "loop"),
                (2, Some(6), "loop"),
                (3, Some(8), "loop"),
                (4, Some(9), "loop"),
            ]
        );
        let next: Vec<Vec<&str>> = cps.iter().map(|c| names(&c.next)).collect();
        assert_eq!(
            next,
            [
                vec!["agent"],
                vec!["tools", "tools"],
                vec!["tools"],
                vec!["agent"],
                vec![],
                vec![]
            ]
        );
        // Starts and ends pair up, in order, and each start is a task a checkpoint announced.
        let mut open: Vec<String> = Vec::new();
        let mut started = Vec::new();
        for n in &noted {
            for (t, outcome) in &n.ended {
                assert_eq!(*outcome, Outcome::Done);
                assert_eq!(open.pop().as_deref(), Some(t.id.as_str()), "{t:?}");
            }
            for (t, _) in &n.started {
                assert!(open.is_empty(), "one task at a time here");
                open.push(t.id.clone());
                started.push(t.clone());
            }
        }
        assert!(open.is_empty());
        assert_eq!(names(&started), ["agent", "tools", "tools", "agent"]);
        let announced: Vec<&Task> = cps.iter().flat_map(|c| &c.next).collect();
        assert!(
            started.iter().all(|t| announced.contains(&t)),
            "{started:?}"
        );
        assert_eq!(
            cps[1].next[1], started[2],
            "the second call, announced before it ran"
        );
        // A fold of the same log (a replay, the history) gives the same ids.
        let again = fold(&log());
        let ids = |ns: &[Noted]| {
            ns.iter()
                .flat_map(|n| n.started.iter().map(|(t, _)| t.id.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&noted), ids(&again));
    }

    #[test]
    fn a_plan_step_that_asks_ends_interrupted_and_its_next_attempt_is_a_task_of_its_own_between_the_models_turns()
     {
        let log = numbered(vec![
            json!({"type": "session_started", "session_id": "t1", "agent": "a", "mode": "plan"}),
            json!({"type": "turn_started", "task": "refund c1"}),
            json!({"type": "step_started", "step": "refund", "attempt": 1}),
            json!({"type": "waiting_for_user", "request": {"kind": "missing_input",
                "question": "How much?", "step": "refund"}}),
            json!({"type": "user_replied", "text": "50"}),
            json!({"type": "step_started", "step": "refund", "attempt": 1}),
            json!({"type": "step_completed", "step": "refund", "output": {"ok": true}}),
            json!({"type": "run_finished", "status": "completed", "answer": "Refunded."}),
        ]);
        let noted = fold(&log);
        let events: Vec<(u64, &str, &str, Option<&Outcome>)> = noted
            .iter()
            .zip(&log)
            .flat_map(|(n, e)| {
                let ended = n
                    .ended
                    .iter()
                    .map(|(t, o)| (e.seq, "end", t.id.as_str(), Some(o)));
                let started = n
                    .started
                    .iter()
                    .map(|(t, _)| (e.seq, "start", t.id.as_str(), None));
                ended.chain(started).collect::<Vec<_>>()
            })
            .collect();
        // The model's turns (the plan, then what follows each wave) are the agent's tasks,
        // between the steps' attempts.
        let agent = |seq: &str| task_id("t1", seq);
        assert_eq!(events.len(), 10, "{events:?}");
        let (first, second) = (events[2].2, events[6].2);
        assert_ne!(first, second, "a new attempt is a new task");
        let (a2, a4, a7) = (agent("2"), agent("4"), agent("7"));
        assert_eq!(
            events,
            [
                (2, "start", a2.as_str(), None),
                (3, "end", a2.as_str(), Some(&Outcome::Done)),
                (3, "start", first, None),
                (4, "end", first, Some(&Outcome::Interrupted)),
                (5, "start", a4.as_str(), None),
                (6, "end", a4.as_str(), Some(&Outcome::Done)),
                (6, "start", second, None),
                (7, "end", second, Some(&Outcome::Done)),
                (7, "start", a7.as_str(), None),
                (8, "end", a7.as_str(), Some(&Outcome::Done)),
            ]
        );
        // The task's checkpoint names the planner's turn.
        let given = noted[1].checkpoint.as_ref().unwrap();
        assert_eq!(
            given.next,
            [Task {
                id: a2.clone(),
                name: "agent".into()
            }]
        );
        // The wait's checkpoint names the agent's task, as the thread's state does.
        let wait = noted[3].checkpoint.as_ref().unwrap();
        assert_eq!(
            wait.next,
            [Task {
                id: task_id("t1", "4"),
                name: "agent".into()
            }]
        );
    }
}
