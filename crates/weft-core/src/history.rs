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
//! assistant message did get ([`crate::prompts::repair_history`] is the definition). Once a
//! message other than a tool result follows an assistant message, the results that message got
//! are final: the missing ones are recorded then, as insertions at that position. So the repair
//! costs work in proportion to one reply, once, and a conversation that needed a repair does not
//! make every later request copy it. Only the last assistant message's results may still be
//! arriving; they are checked when a request is built ([`History::trailing_repairs`]), a scan of
//! that message's calls and results only.

use std::sync::Arc;

use serde_json::json;

use crate::model::{Message, ToolCall};

/// The result shown to a model for a tool call that never got one.
pub fn interrupted_result(call: &ToolCall) -> Message {
    Message::Tool {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: json!({"error": "interrupted", "message": "the call did not complete (the run was interrupted)"}).to_string(),
        is_error: true,
    }
}

/// The conversation and its repairs: what a request shares.
#[derive(Clone, Debug, Default)]
pub(crate) struct Log {
    pub(crate) messages: Vec<Message>,
    /// `interrupted` results, each with the index of the message it goes before, in order.
    pub(crate) repairs: Vec<(usize, Message)>,
    /// The last assistant message with tool calls, while only tool results follow it.
    open: Option<usize>,
    /// `ends[i]`: the estimated tokens of messages `0..=i` (see [`estimate_tokens`]).
    ends: Vec<u64>,
}

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

/// Whether `results` holds a tool result for the call `id`.
fn answered(results: &[Message], id: &str) -> bool {
    results
        .iter()
        .any(|r| matches!(r, Message::Tool { call_id, .. } if call_id == id))
}

impl Log {
    fn push(&mut self, m: Message) {
        if !matches!(m, Message::Tool { .. }) {
            if let Some(a) = self.open.take()
                && let Some(Message::Assistant { tool_calls, .. }) = self.messages.get(a)
            {
                let at = self.messages.len();
                let results = self.messages.get(a + 1..).unwrap_or_default();
                for c in tool_calls {
                    if !answered(results, &c.id) {
                        self.repairs.push((at, interrupted_result(c)));
                    }
                }
            }
            if let Message::Assistant { tool_calls, .. } = &m
                && !tool_calls.is_empty()
            {
                self.open = Some(self.messages.len());
            }
        }
        let before = self.ends.last().copied().unwrap_or(0);
        self.ends.push(before + estimate_tokens(&m));
        self.messages.push(m);
    }

    /// The calls of the last assistant message that have no result (yet).
    fn unanswered(&self) -> impl Iterator<Item = &ToolCall> {
        let (calls, results): (&[ToolCall], &[Message]) = match self.open {
            Some(a) => match self.messages.get(a) {
                Some(Message::Assistant { tool_calls, .. }) => (
                    tool_calls.as_slice(),
                    self.messages.get(a + 1..).unwrap_or_default(),
                ),
                _ => (&[], &[]),
            },
            None => (&[], &[]),
        };
        calls.iter().filter(move |c| !answered(results, &c.id))
    }

    /// The messages from `from` on with the repairs in place (a repair recorded at `from` or
    /// before belongs to the messages before). Does not include [`History::trailing_repairs`].
    pub(crate) fn iter(&self, from: usize) -> LogIter<'_> {
        let from = from.min(self.messages.len());
        let skip = if from == 0 {
            0
        } else {
            self.repairs.partition_point(|(at, _)| *at <= from)
        };
        LogIter {
            messages: &self.messages,
            repairs: self.repairs.get(skip..).unwrap_or_default(),
            next: from,
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
    repairs: &'a [(usize, Message)],
    /// The index (in `messages`) of the next message.
    next: usize,
}

impl<'a> Iterator for LogIter<'a> {
    type Item = &'a Message;

    fn next(&mut self) -> Option<&'a Message> {
        if let Some(((at, repair), rest)) = self.repairs.split_first()
            && (*at <= self.next || self.next >= self.messages.len())
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
            let upto = (*at).clamp(next, self.messages.len());
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

/// A session's conversation. Reads as a slice of its messages (as they were appended, without
/// repairs); requests share it through [`Messages::with_history`](crate::model::Messages::with_history).
#[derive(Clone, Default)]
pub struct History {
    log: Arc<Log>,
    /// Appends that had to copy the conversation because something else still shared it.
    copies: u64,
}

impl History {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a message.
    pub fn push(&mut self, m: Message) {
        self.log_mut().push(m);
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

    /// The estimated tokens (see [`estimate_tokens`]) of the messages `from..to`.
    pub fn tokens_between(&self, from: usize, to: usize) -> u64 {
        let end = |i: usize| {
            i.checked_sub(1)
                .and_then(|i| self.log.ends.get(i))
                .copied()
                .unwrap_or(0)
        };
        let to = to.min(self.log.messages.len());
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

impl std::ops::Deref for History {
    type Target = [Message];

    fn deref(&self) -> &[Message] {
        &self.log.messages
    }
}

/// Two histories are equal when their messages are (the repairs follow from them).
impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.log.messages == other.log.messages
    }
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
    use crate::prompts::repair_history;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: json!({"x": id}),
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
        assert_eq!(shown(&h), h.to_vec());
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
        assert_eq!(out, repair_history(&h));
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
                let want = repair_history(&h);
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
}
