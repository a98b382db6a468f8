//! Secrets: declared by name in the agent file, resolved only when a tool runs, and never shown
//! to the model. The [`Redactor`] replaces every known secret value with `[secret:NAME]`.
//! Every declared secret is checked when the agent loads (one that does not resolve fails,
//! naming it) and read again each time a tool runs.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::Value;
use weft_core::ToolError;

/// The shortest secret value weft accepts. Secrets are redacted by value, and a shorter value
/// would match inside ordinary text everywhere (or not be redacted at all), so such a secret is
/// refused when it is read, with an error that says so.
pub(crate) const MIN_SECRET_LEN: usize = 4;

/// Where a secret's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable of the weft process.
    Env(String),
    /// A file (relative paths are taken from the agent file's directory); a trailing newline is
    /// trimmed.
    File(PathBuf),
    /// Given for this session only (e.g. by the caller of the run).
    Override,
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Env(v) => write!(f, "environment variable {v}"),
            Self::File(p) => write!(f, "file {}", p.display()),
            Self::Override => write!(f, "the value given for this session"),
        }
    }
}

/// Errors declaring or resolving secrets.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// A `secrets:` entry that is neither `{env: VARIABLE}` nor `{file: path}`.
    #[error("secrets.{name}: declare it as {{env: VARIABLE}} or {{file: path}} (got {got})")]
    BadDeclaration {
        /// The secret's name.
        name: String,
        /// The entry as written.
        got: String,
    },
    /// A secret's environment variable is not set (and no value was given for the session).
    #[error(
        "secret `{name}` does not resolve: {source_desc} is not set; set it or give the secret for this session"
    )]
    MissingEnv {
        /// The secret's name.
        name: String,
        /// The variable, as [`SecretSource`] displays it.
        source_desc: String,
    },
    /// A secret's file could not be read.
    #[error("secret `{name}` does not resolve: could not read {source_desc}: {cause}")]
    File {
        /// The secret's name.
        name: String,
        /// The file, as [`SecretSource`] displays it.
        source_desc: String,
        /// The operating system's error.
        #[source]
        cause: std::io::Error,
    },
    /// A secret is used (`{{ secrets.NAME }}`) but not declared.
    #[error(
        "secret `{name}` is used by {used_by} but not declared under `secrets:`; declare it as {{env: VARIABLE}} or {{file: path}}"
    )]
    Undeclared {
        /// The secret's name.
        name: String,
        /// What uses it, e.g. `a tool`.
        used_by: String,
    },
    /// A secret's value is shorter than the shortest value weft can redact safely.
    #[error(
        "secret `{name}` from {source_desc} is {len} bytes long; weft replaces every secret value with [secret:{name}] wherever it appears, and cannot do that safely for values shorter than {min} bytes: use a longer value"
    )]
    TooShort {
        /// The secret's name.
        name: String,
        /// Where the value came from, as [`SecretSource`] displays it.
        source_desc: String,
        /// The value's length in bytes.
        len: usize,
        /// The shortest length accepted, in bytes.
        min: usize,
    },
}

/// The secrets of one agent (and session). Cheap to clone.
#[derive(Clone, Default)]
pub struct Secrets {
    sources: Arc<BTreeMap<String, SecretSource>>,
    overrides: Arc<BTreeMap<String, String>>,
    redactor: Redactor,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names and sources only, never values.
        f.debug_struct("Secrets")
            .field("sources", &self.sources)
            .field("overrides", &self.overrides.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Secrets {
    /// Reads the `secrets:` table of an agent file and checks that every secret resolves now.
    /// `session_overrides` give values for this session; they win over the declared source and
    /// may name secrets that are not declared.
    pub fn from_spec(
        spec: &BTreeMap<String, Value>,
        base_dir: &Path,
        session_overrides: BTreeMap<String, String>,
    ) -> Result<Self, SecretsError> {
        let mut sources = BTreeMap::new();
        for (name, decl) in spec {
            let bad = || SecretsError::BadDeclaration {
                name: name.clone(),
                got: decl.to_string(),
            };
            let Value::Object(map) = decl else {
                return Err(bad());
            };
            if map.len() != 1 {
                return Err(bad());
            }
            let source = match (map.get("env"), map.get("file")) {
                (Some(Value::String(v)), None) => SecretSource::Env(v.clone()),
                (None, Some(Value::String(p))) => SecretSource::File(base_dir.join(p)),
                _ => return Err(bad()),
            };
            sources.insert(name.clone(), source);
        }
        for name in session_overrides.keys() {
            sources
                .entry(name.clone())
                .or_insert(SecretSource::Override);
        }
        let secrets = Self {
            sources: Arc::new(sources),
            overrides: Arc::new(session_overrides),
            redactor: Redactor::default(),
        };
        for name in secrets.sources.keys() {
            secrets.resolve(name)?;
        }
        Ok(secrets)
    }

    /// Secrets given directly (tests, embedding): every value is a session override. A value
    /// shorter than `MIN_SECRET_LEN` is refused.
    pub fn from_values(values: BTreeMap<String, String>) -> Result<Self, SecretsError> {
        let sources = values
            .keys()
            .map(|k| (k.clone(), SecretSource::Override))
            .collect();
        let s = Self {
            sources: Arc::new(sources),
            overrides: Arc::new(values),
            redactor: Redactor::default(),
        };
        for name in s.sources.keys() {
            s.resolve(name)?;
        }
        Ok(s)
    }

    /// The declared names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sources.keys().map(String::as_str)
    }

    /// Whether a secret named `name` is declared.
    pub fn contains(&self, name: &str) -> bool {
        self.sources.contains_key(name)
    }

    /// Checks that every name in `used` is declared; `used_by` names the place in errors.
    pub fn check_declared(
        &self,
        used: impl IntoIterator<Item = String>,
        used_by: &str,
    ) -> Result<(), SecretsError> {
        for name in used {
            if !self.contains(&name) {
                return Err(SecretsError::Undeclared {
                    name,
                    used_by: used_by.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Reads one secret's value now, and teaches the redactor the value. Values stay inside
    /// this crate: tools render them into requests, nothing hands them out.
    pub(crate) fn resolve(&self, name: &str) -> Result<String, SecretsError> {
        let value = if let Some(v) = self.overrides.get(name) {
            v.clone()
        } else {
            match self.sources.get(name) {
                None => {
                    return Err(SecretsError::Undeclared {
                        name: name.to_owned(),
                        used_by: "a tool".into(),
                    });
                }
                Some(SecretSource::Override) => String::new(),
                Some(SecretSource::Env(var)) => {
                    std::env::var(var).map_err(|_| SecretsError::MissingEnv {
                        name: name.to_owned(),
                        source_desc: SecretSource::Env(var.clone()).to_string(),
                    })?
                }
                Some(SecretSource::File(path)) => {
                    let text = std::fs::File::open(path)
                        .and_then(weft_core::limits::read_text)
                        .map_err(|cause| SecretsError::File {
                            name: name.to_owned(),
                            source_desc: SecretSource::File(path.clone()).to_string(),
                            cause,
                        })?;
                    let trimmed = text.strip_suffix('\n').unwrap_or(&text);
                    trimmed.strip_suffix('\r').unwrap_or(trimmed).to_owned()
                }
            }
        };
        if value.len() < MIN_SECRET_LEN {
            let source_desc = match self.sources.get(name) {
                Some(src) if !self.overrides.contains_key(name) => src.to_string(),
                _ => SecretSource::Override.to_string(),
            };
            return Err(SecretsError::TooShort {
                name: name.to_owned(),
                source_desc,
                len: value.len(),
                min: MIN_SECRET_LEN,
            });
        }
        self.redactor.learn(name, &value);
        Ok(value)
    }

    /// Every secret's current value by name, for template rendering at call time.
    pub(crate) fn resolve_all(&self) -> Result<BTreeMap<String, String>, ToolError> {
        let mut out = BTreeMap::new();
        for name in self.sources.keys() {
            let v = self
                .resolve(name)
                .map_err(|e| ToolError::new("secret", e.to_string()))?;
            out.insert(name.clone(), v);
        }
        Ok(out)
    }

    /// The redactor that knows every value resolved so far.
    pub fn redactor(&self) -> Redactor {
        self.redactor.clone()
    }
}

/// Replaces secret values with `[secret:NAME]`. Cheap to clone; shares what it knows with the
/// [`Secrets`] it came from, so values resolved later are redacted too.
#[derive(Clone, Default)]
pub struct Redactor {
    known: Arc<RwLock<Vec<(String, String)>>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.known.read().map(|k| k.len()).unwrap_or(0);
        f.debug_struct("Redactor").field("values", &n).finish()
    }
}

impl Redactor {
    fn learn(&self, name: &str, value: &str) {
        if let Ok(mut known) = self.known.write() {
            if known.iter().any(|(n, v)| n == name && v == value) {
                return;
            }
            known.retain(|(n, _)| n != name);
            known.push((name.to_owned(), value.to_owned()));
            // Longest first, so a secret containing another is replaced whole.
            known.sort_by_key(|b| std::cmp::Reverse(b.1.len()));
        }
    }

    /// The text with every known secret value replaced by `[secret:NAME]`.
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Ok(known) = self.known.read() else {
            return Cow::Borrowed(text);
        };
        let mut out: Cow<'a, str> = Cow::Borrowed(text);
        for (name, value) in known.iter() {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), &format!("[secret:{name}]")));
            }
        }
        out
    }

    /// Redacts one text in place.
    pub fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(r) = self.redact_str(text) {
            *text = r;
        }
    }

    /// Redacts every string (and object key) inside the value, in place.
    pub fn redact_value(&self, value: &mut Value) {
        match value {
            Value::String(s) => {
                if let Cow::Owned(r) = self.redact_str(s) {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let needs_key_change = map
                    .keys()
                    .any(|k| matches!(self.redact_str(k), Cow::Owned(_)));
                if needs_key_change {
                    let old = std::mem::take(map);
                    for (k, mut v) in old {
                        self.redact_value(&mut v);
                        map.insert(self.redact_str(&k).into_owned(), v);
                    }
                } else {
                    map.values_mut().for_each(|v| self.redact_value(v));
                }
            }
            _ => {}
        }
    }

    /// Redacts a tool error's message and detail.
    pub fn redact_error(&self, error: &mut ToolError) {
        if let Cow::Owned(m) = self.redact_str(&error.message) {
            error.message = m;
        }
        self.redact_value(&mut error.detail);
    }
}

/// The secret names a template text refers to as `secrets.NAME` or `secrets["NAME"]`.
pub(crate) fn referenced_in_str(text: &str, out: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(i) = rest.find("secrets") {
        let after = &rest[i + "secrets".len()..];
        let before_ok = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'));
        if before_ok {
            let name: String = if let Some(a) = after.strip_prefix('.') {
                a.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            } else if let Some(a) = after
                .strip_prefix("[\"")
                .or_else(|| after.strip_prefix("['"))
            {
                a.chars().take_while(|c| *c != '"' && *c != '\'').collect()
            } else {
                String::new()
            };
            if !name.is_empty() {
                out.insert(name);
            }
        }
        rest = after;
    }
}

/// The secret names any string inside a JSON value refers to.
pub(crate) fn referenced_in_value(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => referenced_in_str(s, out),
        Value::Array(a) => a.iter().for_each(|v| referenced_in_value(v, out)),
        Value::Object(m) => m.values().for_each(|v| referenced_in_value(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redacts_strings_and_values() {
        let s = Secrets::from_values(BTreeMap::from([(
            "tok".to_owned(),
            "s3cr3t-value".to_owned(),
        )]))
        .expect("long enough");
        let r = s.redactor();
        assert_eq!(
            r.redact_str("Bearer s3cr3t-value, abc"),
            "Bearer [secret:tok], abc"
        );
        let mut v = json!({"a": ["xs3cr3t-valuex"], "s3cr3t-value": 1});
        r.redact_value(&mut v);
        assert_eq!(v, json!({"a": ["x[secret:tok]x"], "[secret:tok]": 1}));
    }

    #[test]
    fn file_secret_trims_newline_and_missing_env_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("k"), "file-secret\n").expect("write");
        let spec = BTreeMap::from([("k".to_owned(), json!({"file": "k"}))]);
        let s = Secrets::from_spec(&spec, dir.path(), BTreeMap::new()).expect("resolves");
        assert_eq!(s.resolve("k").ok().as_deref(), Some("file-secret"));

        let spec = BTreeMap::from([(
            "api".to_owned(),
            json!({"env": "WEFT_TEST_SURELY_UNSET_VARIABLE"}),
        )]);
        let e = Secrets::from_spec(&spec, dir.path(), BTreeMap::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("`api`") && e.contains("WEFT_TEST_SURELY_UNSET_VARIABLE"),
            "{e}"
        );
        // A session override makes it resolve.
        let s = Secrets::from_spec(
            &spec,
            dir.path(),
            BTreeMap::from([("api".to_owned(), "from-session".to_owned())]),
        )
        .expect("override");
        assert_eq!(s.resolve("api").ok().as_deref(), Some("from-session"));
    }

    #[test]
    fn finds_references() {
        let mut out = BTreeSet::new();
        referenced_in_value(
            &json!({"h": "Bearer {{ secrets.crm_token }}", "x": ["{{ secrets['b'] }}", "mysecrets.no"]}),
            &mut out,
        );
        assert_eq!(
            out.into_iter().collect::<Vec<_>>(),
            vec!["b".to_owned(), "crm_token".to_owned()]
        );
    }
}
