//! Typed events: every transition of a session is one of these, appended to its log.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::Plan;

/// The version of the event schema written by this build. Readers accept this version and
/// older ones; a log written by a newer build is refused with a clear error.
pub const EVENT_VERSION: u32 = 1;

/// An event as stored and streamed: its place in the log, its time, and the event itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Position in the session's log, from 1.
    pub seq: u64,
    /// Unix time in milliseconds, stamped by the shell when the event was recorded.
    pub ts: i64,
    /// Event schema version.
    pub v: u32,
    #[serde(flatten)]
    pub event: Event,
}

/// How a session ended, or that it is still going.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    #[default]
    Running,
    WaitingForUser,
    Completed,
    Failed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::WaitingForUser => "waiting_for_user",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "running" => Some(Self::Running),
            "waiting_for_user" => Some(Self::WaitingForUser),
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

/// A tool's failure as the engine records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    /// `invalid_arguments`, `not_found`, `spawn`, `exit_status`, `invalid_output`, `timeout`,
    /// `io`, `refused`, `interrupted`, `unknown_outcome` or a tool's own kind.
    pub kind: String,
    pub message: String,
    /// Whatever helps a person or the model: stderr, an exit status, a response body.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
    /// Whether running the call again may succeed and is safe (never for a non-idempotent tool
    /// that may have acted).
    #[serde(default)]
    pub retryable: bool,
}

impl ToolError {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            message: message.into(),
            detail: Value::Null,
            retryable: false,
        }
    }

    #[must_use]
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = detail;
        self
    }

    #[must_use]
    pub fn retryable(mut self, yes: bool) -> Self {
        self.retryable = yes;
        self
    }

    /// The error as the JSON object written to a step's error path.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.kind)
    }
}

/// The result of one tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolOutcome {
    Ok { output: Value },
    Error { error: ToolError },
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    Failed,
}

/// Every transition of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A session began.
    SessionStarted {
        session_id: String,
        agent: String,
        #[serde(default)]
        input: Value,
    },
    /// A plan was accepted for execution (validated, tool flags filled in).
    PlanAccepted { plan: Plan },
    /// A wave of ready steps begins.
    WaveStarted { wave: u32, steps: Vec<String> },
    /// A step's attempt begins.
    StepStarted { step: String, attempt: u32 },
    /// A tool call is about to run. Durable before the tool runs.
    ToolCallStarted {
        call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        tool: String,
        args: Value,
        attempt: u32,
        /// Stable across a re-run after a crash: `session:step:attempt`.
        idempotency_key: String,
    },
    /// A tool call ended.
    ToolCallFinished {
        call_id: String,
        outcome: ToolOutcome,
        duration_ms: u64,
    },
    /// A step's attempt failed and the step will be tried again after `delay_ms`.
    StepRetrying {
        step: String,
        attempt: u32,
        error: ToolError,
        delay_ms: u64,
    },
    /// A step completed; its output went to its `_outputPath`.
    StepCompleted { step: String, output: Value },
    /// A step failed for good. `handled`: the error went to the step's error path.
    StepFailed {
        step: String,
        error: ToolError,
        handled: bool,
    },
    /// A step was skipped: its condition was false, the data it reads was not written, or a step
    /// it depends on failed.
    StepSkipped { step: String, reason: String },
    /// A wave ended (every step in it reached an outcome).
    WaveFinished { wave: u32 },
    /// The run ended.
    RunFinished {
        status: RunStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl Event {
    /// The event's type name as it appears in JSON (`step_completed`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SessionStarted { .. } => "session_started",
            Self::PlanAccepted { .. } => "plan_accepted",
            Self::WaveStarted { .. } => "wave_started",
            Self::StepStarted { .. } => "step_started",
            Self::ToolCallStarted { .. } => "tool_call_started",
            Self::ToolCallFinished { .. } => "tool_call_finished",
            Self::StepRetrying { .. } => "step_retrying",
            Self::StepCompleted { .. } => "step_completed",
            Self::StepFailed { .. } => "step_failed",
            Self::StepSkipped { .. } => "step_skipped",
            Self::WaveFinished { .. } => "wave_finished",
            Self::RunFinished { .. } => "run_finished",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelope_is_flat_and_tagged() {
        let e = Envelope {
            seq: 3,
            ts: 1,
            v: EVENT_VERSION,
            event: Event::StepSkipped {
                step: "s2".into(),
                reason: "r".into(),
            },
        };
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(
            v,
            json!({"seq": 3, "ts": 1, "v": 1, "type": "step_skipped", "step": "s2", "reason": "r"})
        );
        let back: Result<Envelope, _> = serde_json::from_value(v);
        assert_eq!(back.ok(), Some(e));
    }

    #[test]
    fn kind_matches_the_serde_tag() {
        let e = Event::ToolCallFinished {
            call_id: "c".into(),
            outcome: ToolOutcome::Ok { output: json!(1) },
            duration_ms: 2,
        };
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(v["type"], json!(e.kind()));
        assert_eq!(v["outcome"]["status"], json!("ok"));
    }
}
