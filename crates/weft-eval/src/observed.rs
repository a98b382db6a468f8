//! What a case's session did, read from its events: how it ended, its answer (or question),
//! its State, the tools it called, what it used and how long it took.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_core::{Envelope, Event, SessionStatus, State};

use crate::trajectory::Call;

/// How a session ended, as datasets name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalOutcome")]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// With an answer.
    Completed,
    /// Waiting for a person.
    Waiting,
    /// The agent could not complete the task.
    CannotComplete,
    /// Still running (it was stopped before it ended).
    Running,
}

impl Outcome {
    /// The outcome as written in datasets and results.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Waiting => "waiting",
            Self::CannotComplete => "cannot_complete",
            Self::Running => "running",
        }
    }
}

/// What a session used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "EvalUsed")]
pub struct Used {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost in US dollars, when the model's prices are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Model calls that replied.
    pub model_calls: u32,
    /// Milliseconds from the session's first event to its last.
    pub latency_ms: u64,
}

impl Used {
    /// Input and output tokens together.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// What a session did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// The session's id.
    pub session: String,
    /// How it ended.
    pub status: Outcome,
    /// Its answer (also the text given with a failure, when there is one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// What it asks the person, when it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// Why it could not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its final State (`data`).
    pub state: Value,
    /// The tool calls it made, in the order they started (a step's retries are one call; calls
    /// refused before they ran are not calls).
    pub calls: Vec<Call>,
    /// What it used.
    pub used: Used,
}

impl Observed {
    /// What session `st` (with its log `events`) did.
    pub fn of(st: &State, events: &[Envelope]) -> Self {
        let status = match st.status() {
            SessionStatus::Completed => Outcome::Completed,
            SessionStatus::WaitingForUser => Outcome::Waiting,
            SessionStatus::Failed => Outcome::CannotComplete,
            SessionStatus::Running => Outcome::Running,
        };
        let calls = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::ToolCallStarted {
                    tool,
                    args,
                    attempt: 1,
                    ..
                } => Some(Call {
                    tool: tool.clone(),
                    args: args.clone(),
                }),
                _ => None,
            })
            .collect();
        let latency_ms = match (events.first(), events.last()) {
            (Some(a), Some(b)) => u64::try_from(b.ts.saturating_sub(a.ts)).unwrap_or(0),
            _ => 0,
        };
        let t = &st.usage().tokens;
        Self {
            session: st.session_id().to_owned(),
            status,
            answer: st.turn().answer().map(str::to_owned),
            question: st.turn().waiting().map(|w| w.question.clone()),
            error: st.turn().error().map(str::to_owned),
            state: st.data().clone(),
            calls,
            used: Used {
                input_tokens: t.input_tokens,
                output_tokens: t.output_tokens,
                cost_usd: t.cost_usd,
                model_calls: st.usage().calls,
                latency_ms,
            },
        }
    }
}
