//! The turn: what one task given to the agent has gathered. A new turn starts from a fresh one.

use serde::{Deserialize, Serialize};

use super::Ledger;
use crate::event::{Event, InputRequest, RecalledMemory, ResponseVerdict, ReviewDecision};
use crate::model::Purpose;
use crate::plan::PlanProblem;

/// The current turn (one task given to the agent): its task, its answer or error, the loop's
/// counters and what was fed back, the person's answers. `TurnStarted` replaces it as one
/// value, keeping only the count of turns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Turns started (tasks given): the current turn's number, from 1.
    pub(crate) number: u32,
    /// The current task.
    pub(crate) task: Option<String>,
    /// Why the turn's run failed, or the last model failure's error; `None` while nothing
    /// failed.
    pub(crate) error: Option<String>,
    /// The answer given to the person; `None` until the run ends (and when it ends without
    /// one).
    pub(crate) answer: Option<String>,
    /// The text (a new task, or a workflow's next message) whose long-term memories have not
    /// been searched for yet; the search happens only for an agent that recalls memories.
    pub(crate) recall_due: Option<String>,
    /// The long-term memories recalled for the current turn, as its requests carry them.
    pub(crate) recalled: Vec<RecalledMemory>,
    /// The problems of the last plan rejected.
    pub(crate) last_problems: Vec<PlanProblem>,
    /// Plans revised in this turn.
    pub(crate) replans: u32,
    /// Why the plan is to be made again (the review's reason); `None` before any replan.
    pub(crate) replan_reason: Option<String>,
    /// Model turns in the current ReAct turn.
    pub(crate) iterations: u32,
    /// Consecutive unusable replies (prose, bad JSON, rejected plans: one count for all) and
    /// model failures.
    pub(crate) rejections: u32,
    /// Consecutive failed model calls (a reply resets it).
    pub(crate) model_failures: u32,
    /// Feedback for the next model call (why the last reply was refused).
    pub(crate) feedback: Option<String>,
    /// What the session asks of a person while it waits; `None` when it does not wait.
    pub(crate) waiting: Option<InputRequest>,
    /// Answers of a person in this turn (the review and resolver see them).
    pub(crate) user_inputs: Vec<String>,
    /// The reviews after waves in this turn: each decision with its reason, in order.
    pub(crate) reviews: Vec<(ReviewDecision, String)>,
    /// The drafts of the answer in this turn, in order.
    pub(crate) drafts: Vec<String>,
    /// What the response reviewer asked to change in the last draft (or asked the person);
    /// `None` until it asked.
    pub(crate) response_feedback: Option<String>,
    /// The calls this turn's run ran, which a repeat of a call is refused or asked about by
    /// (see [`crate::repeats`]).
    #[serde(default, skip_serializing_if = "Ledger::is_empty")]
    pub(crate) repeats: Ledger,
}

impl Turn {
    /// Turns started (tasks given): the current turn's number, from 1.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// The current task.
    pub fn task(&self) -> Option<&str> {
        self.task.as_deref()
    }

    /// Why the turn's run failed, or the last model failure's error; `None` while nothing
    /// failed.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The answer given to the person; `None` until the run ends (and when it ends without
    /// one).
    pub fn answer(&self) -> Option<&str> {
        self.answer.as_deref()
    }

    /// The long-term memories recalled for the current turn.
    pub fn recalled(&self) -> &[RecalledMemory] {
        &self.recalled
    }

    /// Plans revised in this turn.
    pub fn replans(&self) -> u32 {
        self.replans
    }

    /// What the session asks of a person while it waits; `None` when it does not wait.
    pub fn waiting(&self) -> Option<&InputRequest> {
        self.waiting.as_ref()
    }

    /// Answers of a person in this turn.
    pub fn user_inputs(&self) -> &[String] {
        &self.user_inputs
    }

    /// The drafts of the answer in this turn, in order.
    pub fn drafts(&self) -> &[String] {
        &self.drafts
    }

    /// Turn `number`, for `task`: nothing gathered yet, the task's memories not searched.
    pub(super) fn start(number: u32, task: &str) -> Self {
        Self {
            number,
            task: Some(task.to_owned()),
            recall_due: Some(task.to_owned()),
            ..Self::default()
        }
    }

    /// Applies what an event says about the turn. The waits (`WaitingForUser`, `UserReplied`)
    /// and `TurnStarted` are applied by the state, which reads the turn before it changes.
    pub(super) fn apply(&mut self, event: &Event) {
        match event {
            Event::ModelReplied { purpose, .. } => {
                self.model_failures = 0;
                if matches!(purpose, Purpose::React | Purpose::Workflow) {
                    self.iterations = self.iterations.saturating_add(1);
                }
            }
            Event::ModelReplyRejected { reason, .. } => {
                self.rejections = self.rejections.saturating_add(1);
                self.feedback = Some(reason.clone());
            }
            Event::ModelFailed { error, .. } => {
                self.model_failures = self.model_failures.saturating_add(1);
                self.error = Some(error.clone());
            }
            Event::PlanRejected { problems } => {
                self.rejections = self.rejections.saturating_add(1);
                self.last_problems.clone_from(problems);
                let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
                self.feedback = Some(text.join("\n"));
            }
            Event::PlanRevised { reason, .. } => {
                self.replans = self.replans.saturating_add(1);
                self.replan_reason = Some(reason.clone());
                self.feedback = None;
                self.rejections = 0;
            }
            Event::PlanAccepted { .. } | Event::HistoryCompacted { .. } => {
                self.feedback = None;
                self.rejections = 0;
            }
            Event::StepAction { .. } => {
                self.rejections = 0;
            }
            Event::AnswerDrafted { text, .. } => {
                self.drafts.push(text.clone());
                self.rejections = 0;
            }
            Event::ReviewDecided { decision, reason } => {
                self.reviews.push((*decision, reason.clone()));
                self.rejections = 0;
                if *decision == ReviewDecision::Replan {
                    self.replan_reason = Some(reason.clone());
                }
            }
            Event::ResponseReviewed { verdict, feedback } => {
                self.rejections = 0;
                if matches!(verdict, ResponseVerdict::Refine | ResponseVerdict::AskUser) {
                    self.response_feedback = Some(feedback.clone());
                }
            }
            Event::MemoriesRecalled { memories, .. } => {
                self.recall_due = None;
                self.recalled.clone_from(memories);
            }
            Event::RunFinished { error, answer, .. } => {
                self.error.clone_from(error);
                self.answer.clone_from(answer);
            }
            _ => {}
        }
    }
}
