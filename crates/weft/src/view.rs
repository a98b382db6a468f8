//! The view of a run that a person watches on stderr: the plan with each step's state, a card
//! for each tool call (tool, arguments, duration, a short result or the error), reviews, retries
//! with their count. The answer is not part of it: it is printed last, on stdout, when the run
//! ends (`cmd::run::report`).
//!
//! On a terminal the plan's steps are lines that change in place (pending, running, done,
//! failed, skipped), an answer being written shows as one line that follows it, and colour is
//! used unless `NO_COLOR` is set. Elsewhere (a pipe, a file) every change is a line of its own,
//! without colour or cursor movement, so a log reads top to bottom.

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use weft_core::event::{StepEntry, TransitionRule};
use weft_core::limits::Limits;
use weft_core::state::OpenCall;
use weft_core::{Envelope, Event, ToolOutcome};
use weft_runtime::Observer;

/// How many characters of arguments and results a card shows.
const SHORT: usize = 80;

/// The observer that draws the view; the limits number the retries.
pub fn observer(limits: &Limits) -> Observer {
    resuming(limits, &BTreeMap::new())
}

/// The view of a run that continues a session whose calls `open` were in flight when it stopped:
/// their cards name the tool and its arguments although their start is not part of this run.
pub fn resuming(limits: &Limits, open: &BTreeMap<String, OpenCall>) -> Observer {
    let stderr_is_terminal = std::io::stderr().is_terminal();
    let color = stderr_is_terminal
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let view = Mutex::new(View {
        paint: Paint(color),
        live: stderr_is_terminal.then(Live::new),
        calls: open
            .iter()
            .map(|(id, c)| (id.clone(), Call::of(&c.tool, c.item, &c.args)))
            .collect(),
        steps: HashMap::new(),
        max_attempts: limits.max_step_attempts,
        max_model_retries: limits.max_model_retries.max(1),
        model_failures: HashMap::new(),
        draft: String::new(),
    });
    Arc::new(move |e: &Envelope| {
        if let Ok(mut v) = view.lock() {
            v.on(&e.event);
        }
    })
}

/// ANSI colour, or none.
#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn sgr(self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
    fn ok(self, s: &str) -> String {
        self.sgr("32", s)
    }
    fn bad(self, s: &str) -> String {
        self.sgr("31", s)
    }
    fn warn(self, s: &str) -> String {
        self.sgr("33", s)
    }
    fn bold(self, s: &str) -> String {
        self.sgr("1", s)
    }
    fn dim(self, s: &str) -> String {
        self.sgr("2", s)
    }
}

/// The lines that change in place on a terminal.
struct Live {
    multi: MultiProgress,
    steps: HashMap<String, ProgressBar>,
    draft: Option<ProgressBar>,
}

impl Live {
    fn new() -> Self {
        Self {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(15)),
            steps: HashMap::new(),
            draft: None,
        }
    }

    fn line(&self, msg: String) -> ProgressBar {
        let bar = self.multi.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(msg);
        bar
    }
}

struct Call {
    tool: String,
    args: String,
}

impl Call {
    fn of(tool: &str, item: Option<usize>, args: &Value) -> Self {
        Self {
            tool: match item {
                Some(k) => format!("{tool}[{k}]"),
                None => tool.to_owned(),
            },
            args: short(args),
        }
    }
}

struct View {
    paint: Paint,
    live: Option<Live>,
    calls: HashMap<String, Call>,
    /// Each step's tool (or description), for its line.
    steps: HashMap<String, String>,
    max_attempts: u32,
    max_model_retries: u32,
    /// Failed model calls of each purpose in a row, with the last error shown.
    model_failures: HashMap<&'static str, (u32, String)>,
    draft: String,
}

impl View {
    /// Prints a line above the lines that change in place (or as the next line).
    fn say(&self, line: &str) {
        match &self.live {
            Some(live) => {
                let _ = live.multi.println(line);
            }
            None => {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
        }
    }

    fn step_line(&self, id: &str, mark: &str, note: &str) -> String {
        let what = self.steps.get(id).map(String::as_str).unwrap_or_default();
        let note = if note.is_empty() {
            String::new()
        } else {
            format!(" {}", self.paint.dim(note))
        };
        format!("{mark} {} {what}{note}", self.paint.bold(id))
    }

    /// A step changed state: its line changes in place on a terminal, or a line says so.
    fn step_state(&mut self, id: &str, mark: &str, note: &str, done: bool) {
        let line = self.step_line(id, mark, note);
        let Some(live) = &mut self.live else {
            self.say(&format!("  {line}"));
            return;
        };
        let bar = match live.steps.get(id) {
            Some(b) => b.clone(),
            None => {
                let b = live.line(String::new());
                live.steps.insert(id.to_owned(), b.clone());
                b
            }
        };
        if done {
            bar.set_style(
                ProgressStyle::with_template("{msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.finish_with_message(format!("  {line}"));
        } else if mark.is_empty() {
            bar.set_style(
                ProgressStyle::with_template("  {spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(line.trim_start().to_owned());
            bar.enable_steady_tick(Duration::from_millis(100));
        } else {
            bar.set_style(
                ProgressStyle::with_template("{msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(format!("  {line}"));
        }
    }

    fn end_live(&mut self) {
        if let Some(live) = &mut self.live {
            if let Some(d) = live.draft.take() {
                d.finish_and_clear();
            }
            for (_, bar) in live.steps.drain() {
                if !bar.is_finished() {
                    bar.finish();
                }
            }
        }
    }

    fn on(&mut self, event: &Event) {
        let p = self.paint;
        match event {
            Event::SessionStarted { session_id, .. } => {
                self.say(&p.dim(&format!("session {session_id}")));
            }
            Event::TurnStarted { task, .. } => self.say(&format!("{} {task}", p.bold("▶"))),
            Event::PlanAccepted { plan } | Event::PlanRevised { plan, .. } => {
                let revised = matches!(event, Event::PlanRevised { .. });
                let head = if revised { "↻ new plan" } else { "plan" };
                self.say(&p.bold(&format!("{head} ({} steps)", plan.steps.len())));
                for s in &plan.steps {
                    let what = s
                        .tool
                        .clone()
                        .or_else(|| s.description.clone())
                        .unwrap_or_default();
                    self.steps.insert(s.id.clone(), what);
                }
                for s in &plan.steps {
                    self.step_state(&s.id, &p.dim("·"), "pending", false);
                }
            }
            Event::WaveStarted { wave, steps } if self.live.is_none() => {
                self.say(&p.dim(&format!("wave {wave}: {}", steps.join(", "))));
            }
            Event::StepStarted { step, attempt } => {
                let note = if *attempt > 1 {
                    format!("running, attempt {attempt}/{}", self.max_attempts)
                } else {
                    "running".to_owned()
                };
                let mark = if self.live.is_some() { "" } else { "…" };
                self.step_state(step, mark, &note, false);
            }
            Event::ToolCallStarted {
                call_id,
                tool,
                args,
                item,
                ..
            } => {
                self.calls
                    .insert(call_id.clone(), Call::of(tool, *item, args));
            }
            Event::FanOutStarted { step, items } => {
                self.say(&p.dim(&format!("  {step}: one call per item, {items} item(s)")));
            }
            Event::ItemRetrying {
                step,
                item,
                attempt,
                delay_ms,
                ..
            } => {
                self.say(&format!(
                    "  {} {step}[{item}]: retry {}/{} in {delay_ms} ms",
                    p.warn("↻"),
                    attempt + 1,
                    self.max_attempts
                ));
            }
            Event::ItemFailed { step, item, error } => {
                self.say(&format!(
                    "  {} {step}[{item}]: {}",
                    p.bad("✗"),
                    p.bad(&cut(&error.message))
                ));
            }
            Event::ToolCallFinished {
                call_id,
                outcome,
                duration_ms,
            } => {
                let (tool, args) = self
                    .calls
                    .remove(call_id)
                    .map_or((call_id.clone(), String::new()), |c| (c.tool, c.args));
                let took = p.dim(&format!("· {duration_ms} ms"));
                let line = match outcome {
                    ToolOutcome::Ok { output } => format!(
                        "  {} {} {args} {took} → {}",
                        p.ok("✓"),
                        p.bold(&tool),
                        short(output)
                    ),
                    ToolOutcome::Error { error } => format!(
                        "  {} {} {args} {took}: {}",
                        p.bad("✗"),
                        p.bold(&tool),
                        p.bad(&format!("{}: {}", error.kind, cut(&error.message)))
                    ),
                };
                self.say(&line);
            }
            Event::ToolCallBlocked { tool, reason, .. } => {
                self.say(&format!("  {} {}: {reason}", p.warn("⊘"), p.bold(tool)));
            }
            Event::StepCompleted { step, .. } => self.step_state(step, &p.ok("✓"), "done", true),
            Event::StepFailed {
                step,
                error,
                handled,
            } => {
                let note = if *handled {
                    format!("failed (handled): {}", cut(&error.message))
                } else {
                    format!("failed: {}", cut(&error.message))
                };
                self.step_state(step, &p.bad("✗"), &note, true);
            }
            Event::StepSkipped { step, reason } => {
                self.step_state(step, &p.dim("–"), &format!("skipped: {reason}"), true);
            }
            Event::StepRetrying {
                step,
                attempt,
                delay_ms,
                ..
            } => {
                let line = format!(
                    "  {} {step}: retry {}/{} in {delay_ms} ms",
                    p.warn("↻"),
                    attempt + 1,
                    self.max_attempts
                );
                self.say(&line);
                if self.live.is_some() {
                    self.step_state(
                        step,
                        &p.warn("↻"),
                        &format!("retrying ({}/{})", attempt + 1, self.max_attempts),
                        false,
                    );
                }
            }
            Event::ReviewDecided { decision, reason } => {
                let d = serde_json::to_value(decision)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                self.say(&format!("{} {d} {}", p.bold("review:"), p.dim(reason)));
            }
            Event::ResponseReviewed { verdict, feedback } => {
                let v = serde_json::to_value(verdict)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                self.say(&format!(
                    "{} {v} {}",
                    p.bold("answer review:"),
                    p.dim(feedback)
                ));
            }
            Event::PlanRejected { problems } => {
                let mut s = p.warn(&format!(
                    "plan rejected ({} problem(s)), asking again:",
                    problems.len()
                ));
                for pr in problems {
                    s.push_str(&format!("\n  - {pr}"));
                }
                self.say(&s);
            }
            Event::ModelReplyRejected { reason, .. } => {
                self.say(&p.warn(&format!("reply rejected: {reason}")));
            }
            Event::BudgetExceeded {
                which,
                limit,
                spent,
                call,
            } => {
                use weft_core::budget::number;
                self.say(&p.warn(&format!(
                    "budget reached: {which} is {}, {} spent; the next call may take up to {} more",
                    number(*limit),
                    number(*spent),
                    number(*call)
                )));
            }
            Event::ModelFailed {
                purpose,
                error,
                retryable,
                ..
            } => {
                // The first failure shows its error; the same error again is counted, not
                // repeated; the last one says that weft gives up (the run's error follows).
                let max = self.max_model_retries;
                let entry = self
                    .model_failures
                    .entry(purpose.as_str())
                    .or_insert((0, String::new()));
                entry.0 += 1;
                let n = entry.0;
                let same = entry.1 == *error;
                entry.1.clone_from(error);
                let what = format!("model call ({})", purpose.as_str());
                if !*retryable || n >= max {
                    let why = if *retryable {
                        format!("failed {n}/{max} times, giving up")
                    } else {
                        "failed, and asking again cannot help".to_owned()
                    };
                    let err = if same {
                        String::new()
                    } else {
                        format!(": {}", cut(error))
                    };
                    self.say(&format!("  {} {what} {why}{err}", p.bad("✗")));
                } else if same {
                    self.say(&format!(
                        "  {} {what} failed again: retry {}/{max}",
                        p.warn("↻"),
                        n + 1
                    ));
                } else {
                    self.say(&format!(
                        "  {} {what} failed: {}; retry {}/{max}",
                        p.warn("↻"),
                        p.bad(&cut(error)),
                        n + 1
                    ));
                }
            }
            Event::ModelReplied { purpose, .. } => {
                self.model_failures.remove(purpose.as_str());
            }
            Event::MemoriesRecalled {
                memories, error, ..
            } => match error {
                Some(e) => self.say(&p.warn(&format!("memory search failed: {}", cut(e)))),
                None if !memories.is_empty() => self.say(&format!(
                    "{} {}",
                    p.bold("remembered:"),
                    p.dim(&format!(
                        "{} memor{}",
                        memories.len(),
                        if memories.len() == 1 { "y" } else { "ies" }
                    ))
                )),
                None => {}
            },
            Event::TextDelta { text } => {
                self.draft.push_str(text);
                if let Some(live) = &mut self.live {
                    let tail = tail(&self.draft);
                    if live.draft.is_none() {
                        live.draft = Some(live.line(String::new()));
                    }
                    let Some(bar) = &live.draft else { return };
                    bar.set_message(format!("{} {}", p.dim("writing:"), tail));
                    bar.tick();
                }
            }
            Event::AnswerDrafted { .. } => {
                self.draft.clear();
                if let Some(d) = self.live.as_mut().and_then(|l| l.draft.take()) {
                    d.finish_and_clear();
                }
            }
            Event::WorkflowStepEntered { step, via } => {
                let how = match via {
                    StepEntry::Initial => String::new(),
                    StepEntry::Reentry { rule, when } => match when {
                        Some(w) => format!(" (reentry[{rule}]: {w})"),
                        None => format!(" (reentry[{rule}])"),
                    },
                    StepEntry::Transition { .. } => String::new(),
                };
                self.say(&format!(
                    "{} {}{}",
                    p.bold("▸ step"),
                    p.bold(step),
                    p.dim(&how)
                ));
            }
            Event::WorkflowOutputAccepted { output, .. } => {
                self.say(&format!("  {} output {}", p.ok("✓"), short(output)));
            }
            Event::WorkflowOutputRejected {
                step,
                reason,
                attempt,
            } => {
                self.say(&p.warn(&format!(
                    "  ↻ {step}: output refused ({attempt}), asking again: {}",
                    cut(reason)
                )));
            }
            Event::WorkflowTransition { from, to, rule } => {
                let line = match rule {
                    TransitionRule::Next { rule, when } => {
                        let why = match (rule, when) {
                            (Some(i), Some(w)) => format!("next[{i}]: {w}"),
                            (Some(i), None) => format!("next[{i}]: default"),
                            (None, _) => "no next: the turn ends".to_owned(),
                        };
                        format!("  → {} {}", p.bold(to), p.dim(&format!("({why})")))
                    }
                    TransitionRule::OnError { error } => format!(
                        "  {} {from} failed: {} → {}",
                        p.bad("✗"),
                        p.bad(&cut(error)),
                        p.bold(to)
                    ),
                };
                self.say(&line);
            }
            Event::WaitingForUser { .. } | Event::RunFinished { .. } => self.end_live(),
            _ => {}
        }
    }
}

/// At most [`SHORT`] characters of a value's JSON on one line.
fn short(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    cut(&text)
}

/// At most [`SHORT`] characters of the first line of a text.
fn cut(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default();
    let mut out: String = first.chars().take(SHORT).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// The last characters of a draft, on one line.
fn tail(text: &str) -> String {
    let flat = text.replace(['\n', '\r'], " ");
    let n = flat.chars().count();
    if n <= SHORT {
        return flat;
    }
    let rest: String = flat.chars().skip(n - SHORT).collect();
    format!("…{rest}")
}
