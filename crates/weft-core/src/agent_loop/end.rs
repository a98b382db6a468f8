//! Ending a run: the one `run_finished`, after skipping the plan steps that can no longer run.
//! Shared by every mode.

use crate::event::{Event, RunStatus};
use crate::state::{State, StepStatus};

/// The event that ends a run.
pub(crate) fn finished(status: RunStatus, error: Option<String>, answer: Option<String>) -> Event {
    Event::RunFinished {
        status,
        error,
        answer,
    }
}

/// Ends a run that still has steps to run: each pending (or waiting) step is skipped with the
/// reason, as the end of execution does, then the run finishes.
pub(crate) fn end_run(
    state: &State,
    status: RunStatus,
    error: Option<String>,
    answer: Option<String>,
) -> Vec<Event> {
    let mut events = Vec::new();
    if let Some(run) = &state.plan {
        let why = error.as_deref().unwrap_or("the run ended");
        for (s, r) in run.plan.steps.iter().zip(&run.steps) {
            if matches!(r.status, StepStatus::Pending | StepStatus::WaitingForUser) {
                events.push(Event::StepSkipped {
                    step: s.id.clone(),
                    reason: format!("the run ended before this step could run: {why}"),
                });
            }
        }
    }
    events.push(finished(status, error, answer));
    events
}
