//! Processes (plans reused as tools) run as sessions of their own, linked to the caller's. The
//! child's id comes from the call's idempotency key, so a call run again after a crash finds
//! its child and continues it (the child's own calls are as durable as any plan's) instead of
//! starting the plan over. The result is the declared part of the child's State.
//!
//! A child's events are stored in its own session and not published to the caller's
//! observers: an event does not say which session it belongs to, and the children of a fan-out
//! run at the same time. The caller's log has the call and its result; the child's log is read
//! with `weft sessions events KEY/process`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::{SessionStatus, ToolError, ToolOutcome};
use weft_store::{Store, StoreError};
use weft_tools::{ProcessDecl, Registry};

use crate::{MAX_DEPTH, Runtime, RuntimeError, SessionInfo, StoreSubAgents};

fn error(message: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Error {
        error: ToolError::new("process", message),
    }
}

/// The id of the child session that serves the call with idempotency key `key`.
pub fn child_id(key: &str) -> String {
    format!("{key}/process")
}

/// Runs (or continues) the process a call names as a child of session `parent`, in a runtime
/// of `children` ([`StoreSubAgents::child_runtime`]).
pub(crate) async fn run<S: Store>(
    children: StoreSubAgents<S>,
    decl: ProcessDecl,
    args: Value,
    parent: String,
    key: String,
    depth: u32,
) -> ToolOutcome {
    if depth >= MAX_DEPTH {
        return error(format!(
            "processes and sub-agents nest deeper than {MAX_DEPTH}; `{}` was not run",
            decl.name
        ));
    }
    let spec = &decl.spec;
    let plan = match spec.plan() {
        Ok(p) => p,
        Err(problems) => {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return error(format!(
                "process file {}: `plan`: {}",
                decl.path.display(),
                list.join("; ")
            ));
        }
    };
    let agent = spec.as_agent(&decl.name);
    let tools = match Registry::from_agent_async(&agent, decl.base_dir(), BTreeMap::new()).await {
        Ok(t) => Arc::new(t),
        Err(e) => return error(format!("process file {}: {e}", decl.path.display())),
    };
    let rt = children.child_runtime(
        tools.clone(),
        spec.limits.clone(),
        !spec.secrets.is_empty(),
        depth,
    );
    let store = rt.store();
    let id = child_id(&key);
    let found = match store.get(&id).await {
        Ok(_) => match rt.load_session(&id).await {
            // A child whose creator died before its first events is started anew.
            Ok(s) if s.state.seq == 0 => Ok(false),
            Ok(_) => Ok(true),
            Err(e) => Err(e),
        },
        Err(StoreError::NotFound(_)) => Ok(false),
        Err(e) => Err(RuntimeError::Store(e)),
    };
    let ran = match found {
        Ok(true) => continue_child(&rt, &id).await,
        Ok(false) => {
            let info = SessionInfo {
                id: Some(id.clone()),
                parent_id: Some(parent),
                metadata: json!({"weft_process_file": decl.path.display().to_string()}),
                ..SessionInfo::default()
            };
            rt.run_plan_in(&decl.name, plan, args, info)
                .await
                .map(|s| outcome(&s.state))
        }
        Err(e) => Err(e),
    };
    tools.shutdown().await;
    match ran {
        Ok((SessionStatus::Completed, data, _)) => match spec.result(&data) {
            Ok(output) => ToolOutcome::Ok { output },
            Err(e) => error(format!("the process `{}` (session {id}): {e}", decl.name)),
        },
        Ok((_, _, why)) => error(format!(
            "the process `{}` (session {id}) failed: {}",
            decl.name,
            why.as_deref().unwrap_or("unknown reason")
        )),
        Err(RuntimeError::InvalidPlan(problems)) => {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            error(format!(
                "the process `{}` cannot run with these arguments: {}",
                decl.name,
                list.join("; ")
            ))
        }
        Err(e) => error(format!("the process `{}` (session {id}): {e}", decl.name)),
    }
}

/// A child that exists already (the call runs again after a crash): continued if it was
/// running, read if it has ended.
async fn continue_child<S: Store>(
    rt: &Runtime<S>,
    id: &str,
) -> Result<(SessionStatus, Value, Option<String>), RuntimeError> {
    let mut s = rt.load_session(id).await?;
    if s.state.status == SessionStatus::Running {
        rt.resume_plan(&mut s).await?;
    }
    Ok(outcome(&s.state))
}

/// How a child ended: its status, its State, and why it failed (each failed step's error).
fn outcome(st: &weft_core::State) -> (SessionStatus, Value, Option<String>) {
    let mut why: Vec<String> = st
        .plan
        .iter()
        .flat_map(|run| run.plan.steps.iter().zip(&run.steps))
        .filter(|(_, r)| r.status == weft_core::StepStatus::Failed && !r.handled)
        .filter_map(|(s, r)| {
            r.error
                .as_ref()
                .map(|e| format!("step `{}`: {}", s.id, e.bounded().message))
        })
        .collect();
    if why.is_empty() {
        why.extend(st.turn.error().map(str::to_owned));
    }
    let why = (!why.is_empty()).then(|| why.join("; "));
    (st.status, st.data.clone(), why)
}
