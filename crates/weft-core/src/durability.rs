//! What a committed step survives: the promise a session store keeps when it says an append is
//! done. Chosen in the agent file (`durability:`) or on the command line (`--durability`); the
//! stores turn it into their own settings (SQLite's `synchronous`, PostgreSQL's
//! `synchronous_commit`).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How durable a committed append is.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// A committed step survives a crash of weft, and is lost only to a crash of the operating
    /// system (or of the database server) or a power cut before the next sync: SQLite
    /// `synchronous=NORMAL`, PostgreSQL `synchronous_commit=off`. Never inconsistent: what
    /// survives is a prefix of the log.
    Normal,
    /// A committed step is on disk before weft goes on (before a tool that is not idempotent
    /// runs, before an answer is shown): it survives a power cut. SQLite `synchronous=FULL` (the
    /// write-ahead log is synced at every commit; many sessions' appends share one commit),
    /// PostgreSQL `synchronous_commit=on` (or the server's stronger setting). The default.
    #[default]
    Full,
}

impl Durability {
    /// The setting as an agent file and `--durability` write it (`normal`, `full`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Full => "full",
        }
    }

    /// Reads `full` or `normal` (any case).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "full" => Some(Self::Full),
            "normal" => Some(Self::Normal),
            _ => None,
        }
    }

    /// The strongest of several choices (`Full` over `Normal`): what a process that drives the
    /// sessions of several agents writes at.
    pub fn strongest(choices: impl IntoIterator<Item = Self>) -> Option<Self> {
        choices.into_iter().max()
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s).ok_or_else(|| format!("{s:?} is not a durability; use full or normal"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_is_the_default_and_the_strongest() {
        assert_eq!(Durability::default(), Durability::Full);
        assert_eq!(
            Durability::strongest([Durability::Normal, Durability::Full, Durability::Normal]),
            Some(Durability::Full)
        );
        assert_eq!(
            Durability::strongest([Durability::Normal]),
            Some(Durability::Normal)
        );
        assert_eq!(Durability::strongest([]), None);
    }

    #[test]
    fn parses_its_names_only() {
        assert_eq!(" FULL ".parse::<Durability>(), Ok(Durability::Full));
        assert_eq!("normal".parse::<Durability>(), Ok(Durability::Normal));
        let e = "off".parse::<Durability>().unwrap_err();
        assert!(e.contains("full or normal"), "{e}");
        assert_eq!(
            serde_json::to_string(&Durability::Normal).unwrap(),
            "\"normal\""
        );
    }
}
