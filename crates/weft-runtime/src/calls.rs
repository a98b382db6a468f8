//! Tool calls in flight: spawned tasks, and their outcomes gathered in batches.
//!
//! A call is first polled once where it is started. One that finishes then (most built-in
//! tools, and every call refused before it runs) is done without a task of its own; the others
//! go on in a spawned task, polled again at once by the runtime (the first poll's waker does
//! nothing). A task costs a wake-up of another thread, which on a small machine costs more than
//! a quick tool.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tokio::task::JoinSet;
use weft_core::engine::Invocation;
use weft_core::{State, ToolError, ToolOutcome};
use weft_tools::{Registry, ToolContext};

use crate::{RuntimeError, SubAgents};

/// One finished call: its id, outcome and duration in milliseconds.
pub(crate) type Finished = (String, ToolOutcome, u64);

/// The calls this process is running.
pub(crate) struct Calls {
    set: JoinSet<Finished>,
    /// Calls that finished on their first poll.
    ready: Vec<Finished>,
    /// The call each task serves, so that a tool that panics fails its own call.
    ids: HashMap<tokio::task::Id, String>,
    sub_agents: Arc<dyn SubAgents>,
    depth: u32,
}

impl Calls {
    pub(crate) fn new(sub_agents: Arc<dyn SubAgents>, depth: u32) -> Self {
        Self {
            set: JoinSet::new(),
            ready: Vec::new(),
            ids: HashMap::new(),
            sub_agents,
            depth,
        }
    }

    /// Whether any call is running or has an outcome not recorded yet.
    pub(crate) fn busy(&self) -> bool {
        !self.set.is_empty() || !self.ready.is_empty()
    }

    /// Starts a call; `true` when it finished on its first poll (its outcome waits for
    /// [`Calls::next_batch`]).
    pub(crate) fn spawn(&mut self, tools: &Arc<Registry>, state: &State, call: Invocation) -> bool {
        let tools = Arc::clone(tools);
        let ctx = ToolContext {
            session_id: state.session_id().to_owned(),
            step: call.step.clone(),
            call_id: call.call_id.clone(),
            idempotency_key: call.idempotency_key.clone(),
            attempt: call.attempt,
        };
        let call_id = call.call_id.clone();
        let sub = tools.agent_tools().find(|d| d.name == call.tool).cloned();
        let process = tools.process_tools().find(|d| d.name == call.tool).cloned();
        let runner = Arc::clone(&self.sub_agents);
        let depth = self.depth;
        let parent = state.session_id().to_owned();
        let mut call_future = Box::pin(async move {
            if call.delay_ms > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(call.delay_ms)).await;
            }
            let start = Instant::now();
            let outcome = match (sub, process) {
                // A process: its plan runs in its own session, linked to this one.
                (None, Some(decl)) => match tools.check_args(&call.tool, &call.args) {
                    Err(error) => ToolOutcome::Error { error },
                    Ok(()) => {
                        runner
                            .run_process(decl, call.args, parent, call.idempotency_key, depth)
                            .await
                    }
                },
                // An `agent:` tool: the child runs in its own session, linked to this one.
                (Some(decl), _) => match tools.check_args(&call.tool, &call.args) {
                    Err(error) => ToolOutcome::Error { error },
                    Ok(()) => {
                        let task = call
                            .args
                            .get("task")
                            .and_then(serde_json::Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        runner.run(decl, task, parent, depth).await
                    }
                },
                (None, None) => tools.invoke(&call.tool, call.args, ctx).await,
            };
            let ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
            (call.call_id, outcome, ms)
        });
        let mut cx = Context::from_waker(Waker::noop());
        match std::panic::catch_unwind(AssertUnwindSafe(|| call_future.as_mut().poll(&mut cx))) {
            Ok(Poll::Ready(done)) => self.ready.push(done),
            Ok(Poll::Pending) => {
                let handle = self.set.spawn(call_future);
                self.ids.insert(handle.id(), call_id);
                return false;
            }
            Err(payload) => self.ready.push((call_id, panicked(payload), 0)),
        }
        true
    }

    /// Waits for at least one call to finish and returns every call finished by then.
    /// `None` when nothing is running.
    pub(crate) async fn next_batch(&mut self) -> Result<Option<Vec<Finished>>, RuntimeError> {
        let mut joined = Vec::new();
        if self.ready.is_empty() {
            let Some(first) = self.set.join_next_with_id().await else {
                return Ok(None);
            };
            joined.push(first);
        }
        while let Some(more) = self.set.try_join_next_with_id() {
            joined.push(more);
        }
        let mut done = std::mem::take(&mut self.ready);
        done.reserve(joined.len());
        for j in joined {
            match j {
                Ok((id, result)) => {
                    self.ids.remove(&id);
                    done.push(result);
                }
                Err(e) => {
                    let call_id = self.ids.remove(&e.id()).ok_or_else(|| {
                        RuntimeError::Internal(format!("a tool task failed: {e}"))
                    })?;
                    if !e.is_panic() {
                        return Err(RuntimeError::Internal(format!(
                            "tool call {call_id} was cancelled: {e}"
                        )));
                    }
                    done.push((call_id, panicked(e.into_panic()), 0));
                }
            }
        }
        Ok(Some(done))
    }
}

impl Calls {
    /// Records `events` (the calls' starts) and starts `calls`.
    ///
    /// A call of a tool that is not idempotent starts only once its start is stored. When every
    /// call is of an idempotent tool, the calls start first and their starts are staged: a call
    /// that finishes on its first poll (a built-in) is then stored with its outcome, in one
    /// append, and the starts are stored at once if any call goes on. Losing a staged start in a
    /// crash is harmless for such a call: it is as if it had never run, and running it again
    /// is allowed.
    pub(crate) async fn start<S: weft_store::Store>(
        &mut self,
        session: &mut crate::Session<'_, S>,
        tools: &Arc<Registry>,
        events: Vec<weft_core::Event>,
        calls: Vec<Invocation>,
    ) -> Result<(), RuntimeError> {
        use weft_core::ToolCatalog;
        let idempotent = !calls.is_empty()
            && calls
                .iter()
                .all(|c| tools.tool_info(&c.tool).is_some_and(|t| t.idempotent));
        if !idempotent {
            session.commit(events).await?;
            for call in calls {
                self.spawn(tools, &session.state, call);
            }
            return Ok(());
        }
        session.stage(events)?;
        let mut goes_on = false;
        for call in calls {
            goes_on |= !self.spawn(tools, &session.state, call);
        }
        if goes_on {
            session.flush().await?;
        }
        Ok(())
    }

    /// Waits for calls to finish and records their outcomes in one batch, each judged against
    /// the state and the outcomes before it (`tools_finished`).
    pub(crate) async fn settle<S: weft_store::Store>(
        &mut self,
        session: &mut crate::Session<'_, S>,
        limits: &weft_core::Limits,
    ) -> Result<(), RuntimeError> {
        let Some(done) = self.next_batch().await? else {
            return Err(RuntimeError::Internal(
                "the session waits for tool calls but none is running in this process".into(),
            ));
        };
        let events = weft_core::engine::tools_finished(&session.state, limits, done);
        session.commit(events).await
    }
}

/// The outcome of a call whose tool panicked: a failure that is not retried.
fn panicked(payload: Box<dyn std::any::Any + Send>) -> ToolOutcome {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    ToolOutcome::Error {
        error: ToolError::new("panicked", format!("the tool panicked: {message}")),
    }
}
