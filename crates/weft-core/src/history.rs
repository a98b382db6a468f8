//! A session's conversation (ReAct): messages that are only ever appended, shared with the model
//! requests built from them.
//!
//! **Shared, not copied.** A ReAct request carries the whole conversation; copying it into every
//! request made each iteration cost allocations in proportion to the conversation. The messages
//! live behind an `Arc`: a request takes a clone of the `Arc` (see
//! [`Messages::with_history`](crate::model::Messages::with_history)), and an append writes in
//! place through `Arc::make_mut` as long as no request still holds it. An append while one does
//! copies the conversation once (the request keeps what it was given);
//! [`History::copies`] counts those copies, so tests can check that the runtime lets go of its
//! requests before it applies the replies.
//!
//! **Repaired as it grows.** A model must see every tool call paired with a result. A call left
//! without one (the run was interrupted, or a new task was given while the call waited for a
//! person) is shown with an `interrupted` error result, placed right after the results its
//! assistant message did get ([`repair_history`] is the definition). Once a
//! message other than a tool result follows an assistant message, the results that message got
//! are final: the missing ones are recorded then, as insertions at that position. So the repair
//! costs work in proportion to one reply, once, and a conversation that needed a repair does not
//! make every later request copy it. Only the last assistant message's results may still be
//! arriving; they are checked when a request is built ([`History::trailing_repairs`]), a scan of
//! that message's calls and results only.
//!
//! **Held from a window on.** A history folded from a log holds every message. One loaded from
//! a snapshot holds only the messages from its window on ([`History::start`]): the messages a
//! request, a compaction or a decision can still read, i.e. from the compacted part's end, and
//! never past the last message that is not a tool result (see [`History::window`]). Positions
//! stay those of the whole conversation, so `len`, `get` and a compaction's `upto` mean the same
//! in both; the messages before the window are in the log (and in the snapshot's parts) for
//! whatever shows the whole conversation.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;

use crate::model::{Message, ModelRequest, ToolCall};

/// The result shown to a model for a tool call that never got one.
pub fn interrupted_result(call: &ToolCall) -> Message {
    Message::Tool {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: json!({"error": "interrupted", "message": "the call did not complete (the run was interrupted)"}).to_string(),
        is_error: true,
    }
}

/// Pairs every assistant tool call with a tool result: a missing result becomes an
/// `interrupted` error result placed right after the assistant message's other results.
///
/// This is the definition of the repair, as a copy of the whole conversation. Requests do not
/// use it: [`History`] keeps the same repair up to date as messages are
/// appended (its tests check that the two agree).
pub fn repair_history(history: &[Message]) -> Vec<Message> {
    let mut out = Vec::with_capacity(history.len());
    let mut i = 0;
    while i < history.len() {
        let m = &history[i];
        out.push(m.clone());
        i += 1;
        if let Message::Assistant { tool_calls, .. } = m
            && !tool_calls.is_empty()
        {
            let first_result = i;
            while i < history.len() && matches!(history[i], Message::Tool { .. }) {
                out.push(history[i].clone());
                i += 1;
            }
            let results = &history[first_result..i];
            let answered = |id: &str| {
                results
                    .iter()
                    .any(|r| matches!(r, Message::Tool { call_id, .. } if call_id == id))
            };
            for c in tool_calls {
                if !answered(&c.id) {
                    out.push(interrupted_result(c));
                }
            }
        }
    }
    out
}

/// The conversation and its repairs: what a request shares.
#[derive(Clone, Debug, Default)]
pub(crate) struct Log {
    /// The position of `messages[0]` in the whole conversation (0 unless loaded from a window).
    start: usize,
    /// The messages held: positions `start..`.
    pub(crate) messages: Vec<Message>,
    /// `interrupted` results, each with the position of the message it goes before, in order.
    pub(crate) repairs: Vec<(usize, Message)>,
    /// The last assistant message with tool calls (a position), while only tool results follow
    /// it.
    open: Option<usize>,
    /// `ends[i]`: the estimated tokens of the held messages `0..=i` (see [`estimate_tokens`]).
    ends: Vec<u64>,
    /// The text of the last message a person wrote (a user message not from weft itself).
    last_person: Option<String>,
    /// The ids of the tool calls of the held assistant messages.
    call_ids: HashSet<String>,
}

/// What weft's own messages to the model in the user's place start with.
pub const WEFT_PREFIX: &str = "[weft]";

/// A model-independent estimate of the tokens a message takes: a quarter of its bytes (text,
/// tool names and arguments) and a few for its framing. Budgets are set with it in mind.
pub fn estimate_tokens(m: &Message) -> u64 {
    let bytes = match m {
        Message::System { content } | Message::User { content } => content.len(),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            content.len()
                + tool_calls
                    .iter()
                    .map(|c| c.id.len() + c.name.len() + c.arguments.to_string().len())
                    .sum::<usize>()
        }
        Message::Tool {
            call_id,
            name,
            content,
            ..
        } => call_id.len() + name.len() + content.len(),
    };
    (bytes as u64).div_ceil(4) + 4
}

/// The estimated input tokens of a request: its messages (see [`estimate_tokens`]) and the
/// tools it offers, as compaction and budgets count them.
pub fn request_tokens(request: &ModelRequest) -> u64 {
    let messages: u64 = request.messages.iter().map(estimate_tokens).sum();
    let tools: u64 = request
        .tools
        .iter()
        .map(|t| {
            let bytes = t.name.len() + t.description.len() + t.parameters.to_string().len();
            (bytes as u64).div_ceil(4)
        })
        .sum();
    messages + tools
}

/// Whether `results` holds a tool result for the call `id`.
fn answered(results: &[Message], id: &str) -> bool {
    results
        .iter()
        .any(|r| matches!(r, Message::Tool { call_id, .. } if call_id == id))
}

impl Log {
    /// The number of messages of the whole conversation.
    fn total(&self) -> usize {
        self.start + self.messages.len()
    }

    /// The held messages from position `from` on.
    fn held_from(&self, from: usize) -> &[Message] {
        self.messages
            .get(from.saturating_sub(self.start)..)
            .unwrap_or_default()
    }

    fn push(&mut self, m: Message) {
        if let Message::User { content } = &m
            && !content.starts_with(WEFT_PREFIX)
        {
            self.last_person = Some(content.clone());
        }
        if !matches!(m, Message::Tool { .. }) {
            if let Some(a) = self.open.take()
                && let Some(Message::Assistant { tool_calls, .. }) =
                    a.checked_sub(self.start).and_then(|i| self.messages.get(i))
            {
                let at = self.total();
                let results = self.messages.get(a + 1 - self.start..).unwrap_or_default();
                for c in tool_calls {
                    if !answered(results, &c.id) {
                        self.repairs.push((at, interrupted_result(c)));
                    }
                }
            }
            if let Message::Assistant { tool_calls, .. } = &m
                && !tool_calls.is_empty()
            {
                self.open = Some(self.total());
                self.call_ids
                    .extend(tool_calls.iter().map(|c| c.id.clone()));
            }
        }
        let before = self.ends.last().copied().unwrap_or(0);
        self.ends.push(before + estimate_tokens(&m));
        self.messages.push(m);
    }

    /// The calls of the last assistant message that have no result (yet).
    fn unanswered(&self) -> impl Iterator<Item = &ToolCall> {
        let (calls, results): (&[ToolCall], &[Message]) = match self.open {
            Some(a) => match a.checked_sub(self.start).and_then(|i| self.messages.get(i)) {
                Some(Message::Assistant { tool_calls, .. }) => {
                    (tool_calls.as_slice(), self.held_from(a + 1))
                }
                _ => (&[], &[]),
            },
            None => (&[], &[]),
        };
        calls.iter().filter(move |c| !answered(results, &c.id))
    }

    /// The messages from position `from` on (from the window's start, if `from` is before it)
    /// with the repairs in place (a repair recorded at `from` or before belongs to the messages
    /// before). Does not include [`History::trailing_repairs`].
    pub(crate) fn iter(&self, from: usize) -> LogIter<'_> {
        let from = from.clamp(self.start, self.total());
        let skip = if from == 0 {
            0
        } else {
            self.repairs.partition_point(|(at, _)| *at <= from)
        };
        LogIter {
            messages: &self.messages,
            start: self.start,
            repairs: self.repairs.get(skip..).unwrap_or_default(),
            next: from - self.start,
        }
    }

    /// The number of messages [`Log::iter`] gives from `from` on.
    pub(crate) fn len(&self, from: usize) -> usize {
        self.iter(from).len()
    }
}

/// The messages of a [`Log`] in order, each repair before the message it was recorded at.
#[derive(Clone, Debug)]
pub(crate) struct LogIter<'a> {
    messages: &'a [Message],
    /// The position of `messages[0]`.
    start: usize,
    repairs: &'a [(usize, Message)],
    /// The index (in `messages`) of the next message.
    next: usize,
}

impl<'a> Iterator for LogIter<'a> {
    type Item = &'a Message;

    fn next(&mut self) -> Option<&'a Message> {
        if let Some(((at, repair), rest)) = self.repairs.split_first()
            && (*at <= self.start + self.next || self.next >= self.messages.len())
        {
            self.repairs = rest;
            return Some(repair);
        }
        let m = self.messages.get(self.next)?;
        self.next += 1;
        Some(m)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.messages.len().saturating_sub(self.next) + self.repairs.len();
        (n, Some(n))
    }

    /// The same order as `next`, a slice at a time (sums over a long conversation go at the
    /// speed of a slice).
    fn fold<B, F: FnMut(B, &'a Message) -> B>(self, init: B, mut f: F) -> B {
        let mut acc = init;
        let mut next = self.next;
        for (at, repair) in self.repairs {
            let upto = at
                .saturating_sub(self.start)
                .clamp(next, self.messages.len());
            acc = self
                .messages
                .get(next..upto)
                .unwrap_or_default()
                .iter()
                .fold(acc, &mut f);
            next = upto;
            acc = f(acc, repair);
        }
        self.messages
            .get(next..)
            .unwrap_or_default()
            .iter()
            .fold(acc, f)
    }
}

impl ExactSizeIterator for LogIter<'_> {}

/// A session's conversation, shared with the requests built from it (see
/// [`Messages::with_history`](crate::model::Messages::with_history)). Positions are those of the
/// whole conversation; a history loaded from a snapshot holds the messages from [`Self::start`]
/// on (see the module's documentation).
#[derive(Clone, Default)]
pub struct History {
    log: Arc<Log>,
    /// Appends that had to copy the conversation because something else still shared it.
    copies: u64,
}

impl History {
    /// An empty conversation.
    pub fn new() -> Self {
        Self::default()
    }

    /// A history holding only `messages`, which start at position `start` of the
    /// conversation; `last_person` is the text of the last message a person wrote, which may be
    /// before `start`. What a snapshot's window loads into.
    pub fn from_window(start: usize, messages: Vec<Message>, last_person: Option<String>) -> Self {
        let mut log = Log {
            start,
            ..Log::default()
        };
        for m in messages {
            log.push(m);
        }
        if log.last_person.is_none() {
            log.last_person = last_person;
        }
        Self {
            log: Arc::new(log),
            copies: 0,
        }
    }

    /// Appends a message.
    pub fn push(&mut self, m: Message) {
        self.log_mut().push(m);
    }

    /// The number of messages in the whole conversation (held or not).
    pub fn len(&self) -> usize {
        self.log.total()
    }

    /// Whether the conversation has no message (held or not).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The position of the first message held (0 unless loaded from a snapshot's window).
    pub fn start(&self) -> usize {
        self.log.start
    }

    /// The message at position `i`, if it is held.
    pub fn get(&self, i: usize) -> Option<&Message> {
        i.checked_sub(self.log.start)
            .and_then(|k| self.log.messages.get(k))
    }

    /// The messages at positions `from..to`, if all of them are held.
    pub fn range(&self, from: usize, to: usize) -> Option<&[Message]> {
        let a = from.checked_sub(self.log.start)?;
        let b = to.checked_sub(self.log.start)?;
        self.log.messages.get(a..b)
    }

    /// The messages held, from [`Self::start`] on, as they were appended (without repairs).
    pub fn held(&self) -> &[Message] {
        &self.log.messages
    }

    /// The messages held, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Message> {
        self.log.messages.iter()
    }

    /// Whether a held assistant message has a tool call with this id.
    pub fn has_call(&self, id: &str) -> bool {
        self.log.call_ids.contains(id)
    }

    /// The text of the last message a person wrote (not one weft wrote in the user's place).
    pub fn last_person(&self) -> Option<&str> {
        self.log.last_person.as_deref()
    }

    /// Where a load may start holding the conversation when its messages before `upto` are
    /// compacted into a summary: the messages from there on are all that a request (which
    /// carries the summary instead of the rest), a compaction (which starts at `upto`) or a
    /// decision (which reads the last reply and its results) reads. Never past the last message
    /// that is not a tool result, and always at a message that is not one (a call and its results
    /// are held together); never before [`Self::start`].
    pub fn window(&self, upto: usize) -> usize {
        let total = self.len();
        let is_result = |i: usize| matches!(self.get(i), Some(Message::Tool { .. }));
        let last_turn = (self.start()..total).rev().find(|&i| !is_result(i));
        let mut w = upto.min(last_turn.unwrap_or(self.start()));
        while w > self.start() && is_result(w) {
            w -= 1;
        }
        w.max(self.start())
    }

    /// Lets go of the messages before position `start` (a no-op if they are not held): the
    /// history then is what a load from a snapshot whose window starts there holds.
    pub fn forget_before(&mut self, start: usize) {
        if start <= self.start() {
            return;
        }
        let start = start.min(self.len());
        let kept = self.log.held_from(start).to_vec();
        let last_person = self.log.last_person.clone();
        *self = Self::from_window(start, kept, last_person);
    }

    /// How many appends had to copy the whole conversation because another holder (a model
    /// request still alive) shared it. The runtime keeps this at zero.
    pub fn copies(&self) -> u64 {
        self.copies
    }

    /// Whether a model request (or a clone of this history) shares the conversation now: an
    /// append would copy it.
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.log) > 1
    }

    /// Whether some tool call has no result: a request shows it with an `interrupted` one.
    pub fn needs_repair(&self) -> bool {
        !self.log.repairs.is_empty() || self.log.unanswered().next().is_some()
    }

    /// `interrupted` results for the calls of the last assistant message that have none yet.
    /// They go right after the conversation. Empty (and not allocated) in the usual case.
    pub fn trailing_repairs(&self) -> Vec<Message> {
        self.log.unanswered().map(interrupted_result).collect()
    }

    /// The estimated tokens (see [`estimate_tokens`]) of the messages `from..to` that are held.
    pub fn tokens_between(&self, from: usize, to: usize) -> u64 {
        let start = self.log.start;
        let end = |i: usize| {
            i.checked_sub(start + 1)
                .and_then(|i| self.log.ends.get(i))
                .copied()
                .unwrap_or(0)
        };
        let to = to.min(self.len());
        end(to).saturating_sub(end(from.min(to)))
    }

    pub(crate) fn shared(&self) -> Arc<Log> {
        Arc::clone(&self.log)
    }

    fn log_mut(&mut self) -> &mut Log {
        if self.is_shared() {
            self.copies += 1;
        }
        Arc::make_mut(&mut self.log)
    }
}

/// Two histories are equal when they hold the same messages from the same position on and
/// name the same last message of a person (the repairs follow from the messages).
impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.log.start == other.log.start
            && self.log.messages == other.log.messages
            && self.log.last_person == other.log.last_person
    }
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.log.start > 0 {
            write!(f, "(from message {}) ", self.log.start)?;
        }
        f.debug_list().entries(self.log.messages.iter()).finish()
    }
}

impl Extend<Message> for History {
    fn extend<I: IntoIterator<Item = Message>>(&mut self, messages: I) {
        let log = self.log_mut();
        for m in messages {
            log.push(m);
        }
    }
}

impl From<Vec<Message>> for History {
    fn from(messages: Vec<Message>) -> Self {
        let mut h = Self::new();
        h.extend(messages);
        h
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::Messages;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: json!({"x": id}),
            provider_id: None,
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool {
            call_id: id.into(),
            name: "t".into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    fn assistant(ids: &[&str]) -> Message {
        Message::Assistant {
            content: String::new(),
            tool_calls: ids.iter().map(|id| call(id)).collect(),
        }
    }

    fn user(t: &str) -> Message {
        Message::User { content: t.into() }
    }

    /// What a request built from `history` shows after its leading messages.
    fn shown(history: &History) -> Vec<Message> {
        Messages::with_history(Vec::new(), history).to_vec()
    }

    #[test]
    fn a_complete_conversation_needs_no_repair() {
        let h = History::from(vec![
            user("go"),
            assistant(&["a", "b"]),
            result("b"),
            result("a"),
            assistant(&[]),
            user("next"),
            assistant(&["c"]),
            result("c"),
        ]);
        assert!(!h.needs_repair());
        assert!(h.trailing_repairs().is_empty());
        assert_eq!(shown(&h), h.held().to_vec());
    }

    #[test]
    fn missing_results_are_inserted_after_the_results_given() {
        let h = History::from(vec![
            user("go"),
            assistant(&["a", "b", "c"]),
            result("b"),
            user("new task"),
            assistant(&["d"]),
        ]);
        assert!(h.needs_repair());
        let out = shown(&h);
        let ids: Vec<String> = out
            .iter()
            .map(|m| match m {
                Message::User { content } => content.clone(),
                Message::Assistant { tool_calls, .. } => format!("call {}", tool_calls.len()),
                Message::Tool {
                    call_id, is_error, ..
                } => format!("{call_id}{}", if *is_error { "!" } else { "" }),
                Message::System { .. } => "system".into(),
            })
            .collect();
        assert_eq!(
            ids,
            ["go", "call 3", "b", "a!", "c!", "new task", "call 1", "d!"]
        );
        assert_eq!(out, repair_history(h.held()));
    }

    #[test]
    fn appending_while_a_request_is_alive_copies_once() {
        let mut h = History::from(vec![user("go")]);
        h.push(assistant(&["a"]));
        h.push(result("a"));
        assert_eq!(h.copies(), 0);
        let req = Messages::with_history(Vec::new(), &h);
        assert!(h.is_shared());
        h.push(user("more"));
        assert_eq!(h.copies(), 1);
        // The request keeps what it was given.
        assert_eq!(req.len(), 3);
        drop(req);
        assert!(!h.is_shared());
        h.push(user("again"));
        assert_eq!(h.copies(), 1);
        assert_eq!(h.len(), 5);
    }

    fn message() -> impl Strategy<Value = Message> {
        let id = prop::sample::select(vec!["a", "b", "c", "d"]);
        prop_oneof![
            Just(user("u")),
            Just(Message::System {
                content: "s".into()
            }),
            prop::collection::vec(id.clone(), 0..4).prop_map(|ids| assistant(&ids)),
            id.prop_map(result),
        ]
    }

    proptest! {
        /// Every prefix of any conversation is shown exactly as `repair_history` repairs it,
        /// and needs a repair exactly when that changes something.
        #[test]
        fn incremental_repair_is_repair_history(messages in prop::collection::vec(message(), 0..24)) {
            let mut h = History::new();
            for m in messages {
                h.push(m);
                let want = repair_history(h.held());
                let mut got = Messages::with_history(vec![user("system")], &h);
                got.push(user("after"));
                let want: Vec<Message> = std::iter::once(user("system"))
                    .chain(want)
                    .chain(std::iter::once(user("after")))
                    .collect();
                prop_assert_eq!(got.len(), want.len());
                // A `for` loop steps with `next`; `fold` below takes the other path.
                let mut one_by_one = Vec::new();
                for m in got.iter() {
                    one_by_one.push(m.clone());
                }
                prop_assert_eq!(&one_by_one, &want);
                let folded = got.iter().fold(Vec::new(), |mut v, m| {
                    v.push(m.clone());
                    v
                });
                prop_assert_eq!(&folded, &want);
                prop_assert_eq!(h.needs_repair(), want.len() != h.len() + 2);
            }
        }
    }

    #[test]
    fn repair_adds_interrupted_results_for_calls_without_one() {
        let history = vec![
            Message::User {
                content: "go".into(),
            },
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "a".into(),
                        name: "t".into(),
                        arguments: json!({}),
                        provider_id: None,
                    },
                    ToolCall {
                        id: "b".into(),
                        name: "t".into(),
                        arguments: json!({}),
                        provider_id: None,
                    },
                ],
            },
            Message::Tool {
                call_id: "a".into(),
                name: "t".into(),
                content: "1".into(),
                is_error: false,
            },
            Message::User {
                content: "next".into(),
            },
        ];
        let fixed = repair_history(&history);
        assert_eq!(fixed.len(), 5);
        assert!(
            matches!(&fixed[3], Message::Tool { call_id, is_error: true, .. } if call_id == "b")
        );
        assert!(matches!(&fixed[4], Message::User { .. }));
    }
}
