//! `weft memory add|list|search|forget`: long-term memories kept in the session store, the ones
//! agents keep with `remember` and find with `recall`. Every command names whose memories it
//! touches (`--user ID`, or `--scope user:ID|agent:NAME|public`), and reads, finds or deletes
//! nothing outside those shelves.
//!
//! It names its shelves on the command line because it is a tool for the people who run weft,
//! not for users: it is not held to one user's shelf. A memory's text is made by
//! `weft_tools::memory_text` (redacted with `--agent FILE`'s secrets, bounded), as `remember`
//! makes it. `list` goes newest first (`created_at`, then id), a page at a time (`--limit` at
//! most 1,000).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use weft_runtime::retrieval::{Retriever, configured_embedder};
use weft_store::{Kind, Knowledge, NewEntry, Shelf};
use weft_tools::{Redactor, Secrets};

use weft_host::sessions::fmt_time;

use crate::cmd::docs::parse_shelf;
use crate::store::CliStore;

/// The most memories one `list` shows.
const MAX_LIST: usize = 1000;

/// Whose memories a command touches.
#[derive(Debug, Args)]
pub struct Whose {
    /// A user's memories (the same as `--scope user:ID`).
    #[arg(long, value_name = "ID")]
    user: Option<String>,
    /// Whose memories: `user:ID`, `agent:NAME` or `public` (repeatable, except for `add`).
    #[arg(long, value_name = "SCOPE")]
    scope: Vec<String>,
}

impl Whose {
    fn shelves(&self) -> Result<Vec<Shelf>> {
        let mut shelves = Vec::new();
        if let Some(id) = &self.user {
            if id.is_empty() {
                bail!("--user: give the user's id");
            }
            shelves.push(Shelf::user(id));
        }
        for s in &self.scope {
            shelves.push(parse_shelf(s)?);
        }
        if shelves.is_empty() {
            bail!("say whose memories: --user ID, or --scope user:ID|agent:NAME|public");
        }
        Ok(shelves)
    }
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Remember a fact for a user, an agent (shared by its users) or everyone.
    Add {
        /// The memory, in a sentence or two.
        text: String,
        #[command(flatten)]
        whose: Whose,
        /// An agent file whose secrets are replaced by `[secret:NAME]` in the text before it
        /// is stored, as the `remember` tool does.
        #[arg(long, value_name = "FILE")]
        agent: Option<PathBuf>,
        /// Print the stored memory as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List memories, newest first, with their ids.
    List {
        #[command(flatten)]
        whose: Whose,
        /// The most memories shown.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=MAX_LIST as u64))]
        limit: u64,
        /// How many of the newest to skip (the next page: the last offset plus the limit).
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Print one JSON object per memory.
        #[arg(long)]
        json: bool,
    },
    /// Search memories by their words, best first.
    Search {
        /// What to look for, in a few words.
        query: String,
        #[command(flatten)]
        whose: Whose,
        /// The most results.
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// Print one JSON object per result.
        #[arg(long)]
        json: bool,
    },
    /// Forget one memory, by the id `list` or `search` shows. Exit 1 if there is no such
    /// memory on the shelves named.
    Forget {
        /// The memory's id, as `weft memory list` shows it.
        id: i64,
        #[command(flatten)]
        whose: Whose,
    },
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The redactor of an agent file's secrets (every declared secret must resolve).
fn redactor(agent: Option<&PathBuf>) -> Result<Redactor> {
    let Some(path) = agent else {
        return Ok(Redactor::default());
    };
    let text = std::fs::File::open(path)
        .and_then(weft_core::limits::read_text)
        .with_context(|| format!("cannot read agent file {}", path.display()))?;
    let spec = weft_core::agent::AgentSpec::parse(&path.display().to_string(), &text)?;
    let secrets = Secrets::from_spec(
        &spec.secrets,
        weft_host::load::base_dir(path),
        BTreeMap::new(),
    )
    .map_err(|e| anyhow!("agent file {}: {e}", path.display()))?;
    Ok(secrets.redactor())
}

/// `user:alice`, `agent:shop`, `public`.
fn shelf_name(scope: weft_store::Scope, owner: &str) -> String {
    if owner.is_empty() {
        scope.as_str().to_owned()
    } else {
        format!("{}:{owner}", scope.as_str())
    }
}

pub async fn run(store: Arc<CliStore>, cmd: MemoryCommand) -> Result<u8> {
    // With WEFT_EMBEDDINGS_URL set, a memory is stored with its vector and a search also ranks
    // by meaning, as the agents' `remember` and `recall` do.
    let retriever = Retriever::new(
        Arc::clone(&store),
        configured_embedder().map_err(anyhow::Error::msg)?,
    );
    let mut out = std::io::stdout().lock();
    match cmd {
        MemoryCommand::Add {
            text,
            whose,
            agent,
            json,
        } => {
            let shelves = whose.shelves()?;
            let [shelf] = shelves.as_slice() else {
                bail!("a memory goes on one shelf: give one --user or --scope");
            };
            let text = weft_tools::memory_text(&redactor(agent.as_ref())?, &text)
                .map_err(|e| anyhow!(e))?;
            let entry = NewEntry {
                text: text.clone(),
                source: String::new(),
                position: 0,
                embedding: None,
            };
            let ids = retriever
                .add(Kind::Memory, shelf, vec![entry], false, now_ms())
                .await
                .context("cannot store the memory")?;
            let id = ids
                .first()
                .copied()
                .ok_or_else(|| anyhow!("the store gave no id for the memory"))?;
            let name = shelf_name(shelf.scope, &shelf.owner);
            if json {
                let v = serde_json::json!({"id": id, "scope": shelf.scope, "owner": shelf.owner, "text": text});
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "remembered {id} ({name}): {text}")?;
            }
            Ok(0)
        }
        MemoryCommand::List {
            whose,
            limit,
            offset,
            json,
        } => {
            let shelves = whose.shelves()?;
            let limit = usize::try_from(limit).unwrap_or(MAX_LIST);
            let offset = usize::try_from(offset).unwrap_or(usize::MAX);
            let listed = store
                .list_entries(Kind::Memory, &shelves, limit, offset)
                .await
                .context("cannot list the memories")?;
            for m in &listed {
                if json {
                    writeln!(out, "{}", serde_json::to_string(m)?)?;
                } else {
                    writeln!(
                        out,
                        "{}  {}  {}\n  {}\n",
                        m.id,
                        fmt_time(m.created_at),
                        shelf_name(m.scope, &m.owner),
                        m.text.replace('\n', "\n  ")
                    )?;
                }
            }
            if listed.is_empty() && !json {
                writeln!(out, "no memories")?;
            }
            Ok(0)
        }
        MemoryCommand::Search {
            query,
            whose,
            limit,
            json,
        } => {
            let shelves = whose.shelves()?;
            let hits = retriever
                .search(Kind::Memory, &shelves, &query, limit)
                .await
                .context("cannot search the memories")?;
            for h in &hits {
                if json {
                    writeln!(out, "{}", serde_json::to_string(h)?)?;
                } else {
                    writeln!(
                        out,
                        "{}  {}\n  {}\n",
                        h.id,
                        h.scope.as_str(),
                        h.text.replace('\n', "\n  ")
                    )?;
                }
            }
            if hits.is_empty() && !json {
                writeln!(out, "no memory matches `{query}`")?;
            }
            Ok(0)
        }
        MemoryCommand::Forget { id, whose } => {
            let shelves = whose.shelves()?;
            let gone = store
                .forget(Kind::Memory, &shelves, id)
                .await
                .context("cannot forget the memory")?;
            let names: Vec<String> = shelves
                .iter()
                .map(|s| shelf_name(s.scope, &s.owner))
                .collect();
            if gone {
                writeln!(out, "forgot {id}")?;
                Ok(0)
            } else {
                eprintln!(
                    "no memory {id} of {}: nothing forgotten (`weft memory list` shows the ids)",
                    names.join(", ")
                );
                Ok(crate::EXIT_FAILED)
            }
        }
    }
}
