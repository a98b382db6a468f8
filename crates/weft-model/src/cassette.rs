//! Record and replay of HTTP exchanges with model providers.
//!
//! With `WEFT_CASSETTE=record:PATH` every exchange (method, URL path, request JSON without
//! auth headers, response status, a few headers, the full response body text, SSE included) is
//! appended to the JSON file PATH. With `WEFT_CASSETTE=replay:PATH` the exchanges are served from
//! the file in order and no network is used, so a real run becomes a regression test.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ModelError;

/// Whether exchanges are recorded or replayed, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CassetteMode {
    /// Every exchange is appended to this file (which is started afresh).
    Record(PathBuf),
    /// Exchanges are served from this file in order; no network is used.
    Replay(PathBuf),
}

impl CassetteMode {
    /// Parses `record:PATH` or `replay:PATH`.
    pub fn parse(spec: &str) -> Result<Self, ModelError> {
        match spec.split_once(':') {
            Some(("record", p)) if !p.is_empty() => Ok(Self::Record(PathBuf::from(p))),
            Some(("replay", p)) if !p.is_empty() => Ok(Self::Replay(PathBuf::from(p))),
            _ => Err(ModelError::Config(format!(
                "WEFT_CASSETTE={spec}: write record:PATH or replay:PATH"
            ))),
        }
    }

    /// The cassette file, recorded or replayed.
    pub fn path(&self) -> &Path {
        match self {
            Self::Record(p) | Self::Replay(p) => p,
        }
    }
}

/// One recorded exchange.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The HTTP method (`POST`).
    pub method: String,
    /// The URL path (`/v1/chat/completions`), without host or query.
    pub path: String,
    /// The request's JSON body (auth headers are never recorded).
    pub request: Value,
    /// The response's HTTP status code.
    pub status: u16,
    /// The few response headers replays need (`retry-after`, `content-type`, ...), by
    /// lower-case name.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The response body as text, exactly as received (SSE included).
    pub body: String,
    /// The body ended early (the connection broke mid-reply).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// A cassette file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CassetteFile {
    /// The exchanges, in the order they happened.
    pub exchanges: Vec<Exchange>,
}

/// An open cassette, shared by every provider of the process that names the same file.
#[derive(Debug)]
pub struct Cassette {
    mode: CassetteMode,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    file: CassetteFile,
    next: usize,
}

fn open_cassettes() -> &'static Mutex<HashMap<CassetteMode, Arc<Cassette>>> {
    static OPEN: OnceLock<Mutex<HashMap<CassetteMode, Arc<Cassette>>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashMap::new()))
}

impl std::hash::Hash for CassetteMode {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        self.path().hash(state);
    }
}

impl Cassette {
    /// Opens (once per process and mode) the cassette `mode` names. Replay reads the file now;
    /// record starts an empty file.
    pub fn open(mode: &CassetteMode) -> Result<Arc<Self>, ModelError> {
        let mut open = open_cassettes()
            .lock()
            .map_err(|_| ModelError::Config("the cassette registry is poisoned".into()))?;
        if let Some(c) = open.get(mode) {
            return Ok(c.clone());
        }
        let file = match mode {
            CassetteMode::Replay(p) => {
                let text = std::fs::File::open(p)
                    .and_then(weft_core::limits::read_text)
                    .map_err(|e| {
                        ModelError::Config(format!("cannot read the cassette {}: {e}", p.display()))
                    })?;
                serde_json::from_str(&text).map_err(|e| {
                    ModelError::Config(format!(
                        "the cassette {} is not a recorded cassette: {e}",
                        p.display()
                    ))
                })?
            }
            CassetteMode::Record(_) => CassetteFile::default(),
        };
        let c = Arc::new(Self {
            mode: mode.clone(),
            state: Mutex::new(State { file, next: 0 }),
        });
        open.insert(mode.clone(), c.clone());
        Ok(c)
    }

    /// Whether the cassette records or replays, and its file.
    pub fn mode(&self) -> &CassetteMode {
        &self.mode
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, ModelError> {
        self.state.lock().map_err(|_| {
            ModelError::Config(format!(
                "the cassette {} is poisoned",
                self.mode.path().display()
            ))
        })
    }

    /// Appends an exchange and rewrites the file.
    pub fn record(&self, exchange: Exchange) -> Result<(), ModelError> {
        let mut st = self.lock()?;
        st.file.exchanges.push(exchange);
        let text = serde_json::to_string_pretty(&st.file)
            .map_err(|e| ModelError::Config(format!("cannot encode the cassette: {e}")))?;
        let path = self.mode.path();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| ModelError::Config(format!("cannot create {}: {e}", dir.display())))?;
        }
        std::fs::write(path, text).map_err(|e| {
            ModelError::Config(format!("cannot write the cassette {}: {e}", path.display()))
        })
    }

    /// The next recorded exchange, which must be for `method`, `path` and the same request body
    /// (whether it asked for a stream aside: the reply is read as it was recorded).
    pub fn next(&self, method: &str, path: &str, request: &Value) -> Result<Exchange, ModelError> {
        let mut st = self.lock()?;
        let i = st.next;
        let file = self.mode.path().display();
        let ex = st.file.exchanges.get(i).cloned().ok_or_else(|| {
            ModelError::Config(format!(
                "the cassette {file} has no exchange #{} left (it holds {}); record it again",
                i + 1,
                st.file.exchanges.len()
            ))
        })?;
        if ex.method != method || ex.path != path {
            return Err(ModelError::Config(format!(
                "the cassette {file}: exchange #{} was recorded for {} {}, but this call is {method} {path}; record it again",
                i + 1,
                ex.method,
                ex.path
            )));
        }
        if let Some((at, recorded, now)) = first_difference(&ex.request, request, "") {
            return Err(ModelError::Config(format!(
                "the cassette {file}: the request of exchange #{} differs at `{}`: recorded {}, now {}; record it again",
                i + 1,
                if at.is_empty() { "/" } else { &at },
                shorten(&recorded),
                shorten(&now)
            )));
        }
        st.next += 1;
        Ok(ex)
    }
}

/// Fields that say how a reply is delivered, not what is asked.
const DELIVERY_FIELDS: &[&str] = &["stream", "stream_options"];

/// The first place (a JSON pointer) where two requests differ, with both values.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<(String, String, String)> {
    let show = |v: Option<&Value>| v.map_or_else(|| "nothing".to_owned(), Value::to_string);
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                if at.is_empty() && DELIVERY_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let here = format!("{at}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_difference(p, q, &here) {
                            return Some(d);
                        }
                    }
                    (p, q) => return Some((here, show(p), show(q))),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                if let Some(d) = first_difference(p, q, &format!("{at}/{i}")) {
                    return Some(d);
                }
            }
            (x.len() != y.len()).then(|| {
                (
                    format!("{at}/{}", x.len().min(y.len())),
                    show(x.get(y.len())),
                    show(y.get(x.len())),
                )
            })
        }
        _ => (a != b).then(|| (at.to_owned(), a.to_string(), b.to_string())),
    }
}

fn shorten(s: &str) -> String {
    const MAX: usize = 120;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn modes_parse() {
        assert_eq!(
            CassetteMode::parse("record:/tmp/a.json").unwrap(),
            CassetteMode::Record("/tmp/a.json".into())
        );
        assert!(CassetteMode::parse("play:/tmp/a.json").is_err());
        assert!(CassetteMode::parse("replay:").is_err());
    }

    #[test]
    fn replay_serves_in_order_and_checks_paths() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let rec = Cassette::open(&CassetteMode::Record(path.clone())).unwrap();
        for n in 0..2 {
            rec.record(Exchange {
                method: "POST".into(),
                path: "/v1/chat/completions".into(),
                request: json!({"n": n}),
                status: 200,
                headers: BTreeMap::new(),
                body: format!("body{n}"),
                cut: false,
            })
            .unwrap();
        }
        let rep = Cassette::open(&CassetteMode::Replay(path)).unwrap();
        let path = "/v1/chat/completions";
        // Whether a stream is asked for does not matter: the reply is read as recorded.
        assert_eq!(
            rep.next("POST", path, &json!({"n": 0, "stream": true}))
                .unwrap()
                .body,
            "body0"
        );
        let e = rep
            .next("POST", "/v1/messages", &json!({"n": 1}))
            .unwrap_err();
        assert!(e.to_string().contains("/v1/messages"), "{e}");
        let e = rep.next("POST", path, &json!({"n": 2})).unwrap_err();
        assert!(
            e.to_string().contains("differs at `/n`: recorded 1, now 2"),
            "{e}"
        );
        assert_eq!(
            rep.next("POST", path, &json!({"n": 1})).unwrap().body,
            "body1"
        );
        assert!(rep.next("POST", path, &json!({"n": 1})).is_err());
    }

    #[test]
    fn differences_are_named_by_their_path() {
        let a = json!({"messages": [{"role": "user", "content": "hi"}], "model": "m"});
        let b = json!({"messages": [{"role": "user", "content": "ho"}], "model": "m"});
        assert_eq!(
            first_difference(&a, &b, "").unwrap(),
            (
                "/messages/0/content".into(),
                "\"hi\"".into(),
                "\"ho\"".into()
            )
        );
        let c = json!({"messages": [], "model": "m", "tools": []});
        assert_eq!(first_difference(&a, &c, "").unwrap().0, "/messages/0");
        assert_eq!(first_difference(&c, &c, ""), None);
    }
}
