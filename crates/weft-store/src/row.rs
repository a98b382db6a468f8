//! Turning envelopes into rows and back, shared by the SQL stores.
//!
//! A stored event is the columns `seq`, `ts`, `v` and `type`, plus a payload: the event's JSON
//! object without those four keys, written compactly.

use serde_json::{Map, Value};
use weft_core::{EVENT_VERSION, Envelope, SessionStatus};

use crate::{NewSession, SessionRecord, StoreError};

/// An envelope ready to be written.
pub(crate) struct EventRow {
    pub seq: i64,
    pub ts: i64,
    pub v: i32,
    pub kind: &'static str,
    pub payload: String,
    pub epoch: i64,
}

/// A snapshot head as read from its row: (seq, version, text).
pub(crate) fn snapshot(
    id: &str,
    seq: i64,
    version: i64,
    head: String,
) -> Result<Option<crate::Snapshot>, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(format!("session {id}: {what}"));
    let seq =
        u64::try_from(seq).map_err(|_| corrupt(format!("a snapshot has sequence number {seq}")))?;
    let version =
        u32::try_from(version).map_err(|_| corrupt(format!("a snapshot has version {version}")))?;
    Ok(Some(crate::Snapshot { seq, version, head }))
}

/// A snapshot's parts as read: `(start, JSON text)`.
pub(crate) fn parts(id: &str, parts: Vec<(i64, String)>) -> Result<Vec<(u64, String)>, StoreError> {
    parts
        .into_iter()
        .map(|(start, text)| {
            u64::try_from(start).map(|s| (s, text)).map_err(|_| {
                StoreError::Corrupt(format!(
                    "session {id}: a snapshot part starts at message {start}"
                ))
            })
        })
        .collect()
}

pub(crate) fn to_i64(what: &str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::too_large(what, n))
}

/// A session's metadata as JSON text.
pub(crate) fn encode_metadata(s: &crate::NewSession) -> Result<String, StoreError> {
    serde_json::to_string(&s.metadata).map_err(|e| StoreError::Unstorable {
        what: format!("the metadata of session {}", s.id),
        reason: e.to_string(),
    })
}

pub(crate) fn encode(session: &str, e: &Envelope) -> Result<EventRow, StoreError> {
    let kind = e.event.kind();
    let text = serde_json::to_string(&e.event).map_err(|err| StoreError::Unstorable {
        what: format!("event {} of session {session}", e.seq),
        reason: err.to_string(),
    })?;
    // The tag comes first in the JSON of an internally tagged enum: cut it off the text, which
    // is the object without its `type` key. Anything else takes the long way through a value.
    let payload = match without_tag(&text, kind) {
        Some(p) => p,
        None => payload_via_value(session, e)?,
    };
    Ok(EventRow {
        seq: to_i64("sequence number", e.seq)?,
        ts: e.ts,
        v: i32::try_from(e.v).map_err(|_| StoreError::Unstorable {
            what: format!("event {} of session {session}", e.seq),
            reason: format!("its version {} is too large for the database", e.v),
        })?,
        kind,
        payload,
        epoch: to_i64("epoch", e.epoch)?,
    })
}

/// `{"type":"KIND",REST` as `{REST`, and `{"type":"KIND"}` as `{}`.
fn without_tag(text: &str, kind: &str) -> Option<String> {
    let rest = text
        .strip_prefix("{\"type\":\"")?
        .strip_prefix(kind)?
        .strip_prefix('"')?;
    if rest == "}" {
        return Some("{}".to_owned());
    }
    let rest = rest.strip_prefix(',')?;
    let mut out = String::with_capacity(rest.len() + 1);
    out.push('{');
    out.push_str(rest);
    Some(out)
}

/// The payload through a JSON value: the event's object with its `type` key removed.
fn payload_via_value(session: &str, e: &Envelope) -> Result<String, StoreError> {
    let value = serde_json::to_value(&e.event).map_err(|err| StoreError::Unstorable {
        what: format!("event {} of session {session}", e.seq),
        reason: format!("it does not encode as JSON: {err}"),
    })?;
    let mut obj = match value {
        Value::Object(m) => m,
        other => {
            return Err(StoreError::Unstorable {
                what: format!("event {} of session {session}", e.seq),
                reason: format!("it encodes as {other}, not as a JSON object"),
            });
        }
    };
    obj.shift_remove("type");
    serde_json::to_string(&obj).map_err(|err| StoreError::Unstorable {
        what: format!("event {} of session {session}", e.seq),
        reason: err.to_string(),
    })
}

/// An epoch read back (a negative one is corrupt).
pub(crate) fn epoch(session: &str, seq: i64, epoch: i64) -> Result<u64, StoreError> {
    u64::try_from(epoch).map_err(|_| {
        StoreError::Corrupt(format!(
            "session {session}, event {seq}: negative epoch {epoch}"
        ))
    })
}

/// Rebuilds an envelope from its columns. `payload` is the stored JSON object.
pub(crate) fn decode(
    session: &str,
    seq: i64,
    ts: i64,
    v: i64,
    kind: &str,
    payload: Value,
) -> Result<Envelope, StoreError> {
    let corrupt =
        |why: String| StoreError::Corrupt(format!("session {session}, event {seq}: {why}"));
    let useq = u64::try_from(seq).map_err(|_| corrupt("negative sequence number".into()))?;
    let uv = u32::try_from(v).map_err(|_| corrupt(format!("bad event version {v}")))?;
    if uv > EVENT_VERSION {
        return Err(StoreError::NewerEvent {
            session: session.to_owned(),
            seq: useq,
            v: uv,
            known: EVENT_VERSION,
        });
    }
    let Value::Object(fields) = payload else {
        return Err(corrupt(format!(
            "the payload is not a JSON object but {payload}"
        )));
    };
    let mut obj = Map::with_capacity(fields.len() + 4);
    obj.insert("seq".into(), Value::from(useq));
    obj.insert("ts".into(), Value::from(ts));
    obj.insert("v".into(), Value::from(uv));
    obj.insert("type".into(), Value::from(kind));
    for (k, val) in fields {
        obj.entry(k).or_insert(val);
    }
    serde_json::from_value(Value::Object(obj))
        .map_err(|err| corrupt(format!("cannot decode the {kind:?} event: {err}")))
}

/// Parses a payload stored as text.
pub(crate) fn parse_payload(session: &str, seq: i64, text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|err| {
        StoreError::Corrupt(format!(
            "session {session}, event {seq}: the payload is not valid JSON: {err}"
        ))
    })
}

/// Checks that a log read back runs without gaps from `after + 1` to `last`.
pub(crate) fn check_contiguous(
    session: &str,
    after: u64,
    last: u64,
    log: &[Envelope],
) -> Result<(), StoreError> {
    for (k, e) in log.iter().enumerate() {
        let want = after + 1 + k as u64;
        if e.seq != want {
            return Err(StoreError::Corrupt(format!(
                "session {session}: event {want} is missing from the log (found {} in its place)",
                e.seq
            )));
        }
    }
    let got = after + log.len() as u64;
    if got < last {
        return Err(StoreError::Corrupt(format!(
            "session {session}: the log ends at event {got} but the session records {last} events"
        )));
    }
    Ok(())
}

/// The columns of a `sessions` row, as read by either SQL store.
pub(crate) struct SessionCols {
    pub id: String,
    pub user_id: Option<String>,
    pub agent: String,
    pub reference_id: Option<String>,
    pub metadata: Value,
    pub parent_id: Option<String>,
    pub status: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_seq: i64,
}

impl SessionCols {
    pub(crate) fn into_record(self) -> Result<SessionRecord, StoreError> {
        let status = SessionStatus::parse(&self.status).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "session {}: unknown status {:?}",
                self.id, self.status
            ))
        })?;
        let last_seq = u64::try_from(self.last_seq).map_err(|_| {
            StoreError::Corrupt(format!(
                "session {}: negative last sequence number {}",
                self.id, self.last_seq
            ))
        })?;
        Ok(SessionRecord {
            id: self.id,
            user_id: self.user_id,
            agent: self.agent,
            reference_id: self.reference_id,
            metadata: self.metadata,
            parent_id: self.parent_id,
            status,
            created_at: self.created_at,
            updated_at: self.updated_at,
            last_seq,
        })
    }
}

/// The record of a session just created.
pub(crate) fn record(s: NewSession, now: i64, last_seq: u64) -> SessionRecord {
    SessionRecord {
        id: s.id,
        user_id: s.user_id,
        agent: s.agent,
        reference_id: s.reference_id,
        metadata: s.metadata,
        parent_id: s.parent_id,
        status: SessionStatus::Running,
        created_at: now,
        updated_at: now,
        last_seq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use weft_core::{Event, ToolOutcome};

    #[test]
    fn encode_then_decode_gives_the_envelope_back() {
        let e = Envelope {
            epoch: 0,
            seq: 7,
            ts: 123,
            v: EVENT_VERSION,
            event: Event::ToolCallFinished {
                call_id: "c1".into(),
                outcome: ToolOutcome::Ok {
                    output: json!({"seq": "not the envelope's", "x": [1, 2]}),
                },
                duration_ms: 5,
            },
        };
        let row = encode("s", &e).unwrap();
        assert_eq!(row.kind, "tool_call_finished");
        assert!(!row.payload.contains("\"type\""));
        assert!(!row.payload.contains(": ") && !row.payload.contains(", "));
        let back = decode(
            "s",
            row.seq,
            row.ts,
            i64::from(row.v),
            row.kind,
            parse_payload("s", row.seq, &row.payload).unwrap(),
        )
        .unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn cutting_the_tag_gives_what_the_value_gives() {
        let events = [
            Event::WaveFinished { wave: 3 },
            Event::UserReplied {
                text: "a \"quoted\" {brace}, and a comma".into(),
            },
            Event::ToolCallFinished {
                call_id: "c1".into(),
                outcome: ToolOutcome::Error {
                    error: weft_core::ToolError::new("bad", "no \u{e9}t\u{e9}"),
                },
                duration_ms: 1,
            },
            Event::ToolCallStarted {
                call_id: "c2".into(),
                step: None,
                item: None,
                tool: "echo".into(),
                args: json!({"type": "not the tag", "n": 1.5, "z": null}),
                attempt: 2,
                idempotency_key: "k".into(),
                untrusted_from: Vec::new(),
            },
        ];
        for (k, event) in events.into_iter().enumerate() {
            let e = Envelope {
                epoch: 0,
                seq: k as u64 + 1,
                ts: 0,
                v: EVENT_VERSION,
                event,
            };
            let fast = encode("s", &e).unwrap().payload;
            assert_eq!(fast, payload_via_value("s", &e).unwrap(), "{:?}", e.event);
        }
        assert_eq!(without_tag(r#"{"type":"x"}"#, "x").as_deref(), Some("{}"));
        assert_eq!(without_tag(r#"{"type":"xy","a":1}"#, "x"), None);
        assert_eq!(without_tag(r#"{"a":1,"type":"x"}"#, "x"), None);
    }

    #[test]
    fn newer_event_versions_are_refused() {
        let err = decode(
            "s",
            1,
            0,
            i64::from(EVENT_VERSION) + 1,
            "wave_finished",
            json!({"wave": 1}),
        )
        .unwrap_err();
        assert!(
            matches!(err, StoreError::NewerEvent { seq: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("newer weft"));
    }

    #[test]
    fn undecodable_payloads_name_session_and_seq() {
        let err = decode("abc", 4, 0, 1, "wave_finished", json!({"wave": "x"})).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Corrupt(_)));
        assert!(msg.contains("session abc, event 4"), "{msg}");
        let err = parse_payload("abc", 5, "{not json").unwrap_err();
        assert!(err.to_string().contains("session abc, event 5"));
    }

    #[test]
    fn gaps_in_a_log_are_reported() {
        let ev = |seq| Envelope {
            epoch: 0,
            seq,
            ts: 0,
            v: 1,
            event: Event::WaveFinished { wave: 1 },
        };
        assert!(check_contiguous("s", 0, 2, &[ev(1), ev(2)]).is_ok());
        assert!(check_contiguous("s", 0, 3, &[ev(1), ev(3)]).is_err());
        assert!(check_contiguous("s", 0, 3, &[ev(1), ev(2)]).is_err());
    }
}
