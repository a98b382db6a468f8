//! What weft has learned about a provider's server by talking to it, so that a fallback is paid
//! for once and not on every call: whether a streamed request comes back empty (then calls are
//! made without streaming) and which form of structured output the server accepts.
//!
//! Entries are keyed by base URL and model name. They live in memory for the whole process and,
//! when a file is given ([`use_file`]; the CLI puts `provider-capabilities.json` beside its
//! SQLite database), in that file too, so the next process starts where this one left off.
//! Delete the file to make weft learn again (e.g. after upgrading the server).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

/// What is known about one server and model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Learned {
    /// The server answers streamed requests with an empty body: do not stream.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_stream: bool,
    /// The form of structured output the server accepted last: `json_schema`, `json_object`
    /// or `prompt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FileForm {
    #[serde(default)]
    providers: BTreeMap<String, Learned>,
}

#[derive(Debug, Default)]
struct Registry {
    file: Option<PathBuf>,
    learned: BTreeMap<String, Learned>,
}

fn registry() -> &'static Mutex<Registry> {
    static REG: OnceLock<Mutex<Registry>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(Registry::default()))
}

/// Keys that start with this (calls recorded to or replayed from a cassette) are learned for the
/// process only.
pub const CASSETTE_PREFIX: &str = "cassette:";

/// The key of a server and model.
pub fn key(base_url: &str, model: &str) -> String {
    format!("{} {model}", base_url.trim_end_matches('/'))
}

fn read_file(path: &Path) -> BTreeMap<String, Learned> {
    // A missing or unreadable file only means nothing was learned yet: weft learns again.
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<FileForm>(&t).ok())
        .map(|f| f.providers)
        .unwrap_or_default()
}

/// Keeps learned capabilities in `path` from now on, and reads what it already holds.
pub fn use_file(path: impl Into<PathBuf>) {
    let path = path.into();
    let from_file = read_file(&path);
    if let Ok(mut reg) = registry().lock() {
        for (k, v) in from_file {
            reg.learned.entry(k).or_insert(v);
        }
        reg.file = Some(path);
    }
}

/// What is known about `key`.
pub fn get(key: &str) -> Learned {
    registry()
        .lock()
        .ok()
        .and_then(|r| r.learned.get(key).cloned())
        .unwrap_or_default()
}

/// Records something learned about `key`, in memory and in the file when one is used. A file
/// that cannot be written costs only the relearning in the next process.
pub fn learn(key: &str, change: impl FnOnce(&mut Learned)) {
    let Ok(mut reg) = registry().lock() else {
        return;
    };
    let entry = reg.learned.entry(key.to_owned()).or_default();
    let before = entry.clone();
    change(entry);
    if *entry == before {
        return;
    }
    let now = entry.clone();
    if let Some(path) = reg
        .file
        .clone()
        .filter(|_| !key.starts_with(CASSETTE_PREFIX))
    {
        let mut on_disk = read_file(&path);
        on_disk.insert(key.to_owned(), now);
        let form = FileForm { providers: on_disk };
        if let Ok(text) = serde_json::to_string_pretty(&form) {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                let _ = std::fs::create_dir_all(dir);
            }
            let tmp = path.with_extension("json.tmp");
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_entries_reach_the_file_and_a_fresh_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("caps.json");
        use_file(&path);
        let k = key("http://caps-test.invalid/v1/", "m");
        assert_eq!(k, "http://caps-test.invalid/v1 m");
        assert_eq!(get(&k), Learned::default());
        learn(&k, |l| l.no_stream = true);
        learn(&k, |l| l.structured = Some("json_object".into()));
        let on_disk = read_file(&path);
        assert_eq!(
            on_disk.get(&k),
            Some(&Learned {
                no_stream: true,
                structured: Some("json_object".into())
            })
        );
        assert!(get(&k).no_stream);
    }
}
