//! `weft docs add PATH... [--scope S]` and `weft docs search QUERY [--scope S]...`: documents
//! (text, Markdown, HTML, PDF) kept in the session store, cut into chunks that cite their file
//! and position (a line; a PDF's page), found by full-text search (and by agents, with the
//! `search_documents` tool).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use weft_runtime::retrieval::{Retriever, configured_embedder};
use weft_store::{Kind, NewEntry, Scope, Shelf};
use weft_tools::documents;

use crate::store::CliStore;

#[derive(Debug, Subcommand)]
pub enum DocsCommand {
    /// Add text, Markdown, HTML and PDF files (adding a file again replaces its chunks).
    Add {
        #[arg(required = true)]
        /// The files to add: text, Markdown, HTML or PDF (each replaces what an earlier add of
        /// the same path stored).
        paths: Vec<PathBuf>,
        /// Who may find them: `public` (everyone), `agent:NAME` or `user:ID`.
        #[arg(long, default_value = "public")]
        scope: String,
    },
    /// Search the documents; each result cites its file and line (a PDF's: its page).
    Search {
        /// What to look for, in a few words.
        query: String,
        /// Where to look (repeatable): `public`, `agent:NAME`, `user:ID`.
        #[arg(long, default_values_t = ["public".to_owned()])]
        scope: Vec<String>,
        /// The most results.
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// Print one JSON object per result.
        #[arg(long)]
        json: bool,
    },
}

/// Reads `public`, `agent:NAME` or `user:ID`.
pub fn parse_shelf(s: &str) -> Result<Shelf> {
    let (scope, owner) = s.split_once(':').unwrap_or((s, ""));
    match (Scope::parse(scope), owner) {
        (Some(Scope::Public), "") => Ok(Shelf::public()),
        (Some(Scope::Agent), name) if !name.is_empty() => Ok(Shelf::agent(name)),
        (Some(Scope::User), id) if !id.is_empty() => Ok(Shelf::user(id)),
        _ => bail!("--scope `{s}`: give `public`, `agent:NAME` or `user:ID`"),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub async fn run(store: Arc<CliStore>, cmd: DocsCommand) -> Result<u8> {
    // With WEFT_EMBEDDINGS_URL set, chunks are stored with their vectors and searches also rank
    // by meaning.
    let store = Retriever::new(store, configured_embedder().map_err(anyhow::Error::msg)?);
    match cmd {
        DocsCommand::Add { paths, scope } => {
            let shelf = parse_shelf(&scope)?;
            // Every file is read and cut before anything is stored: a bad file stores nothing.
            let mut files = Vec::with_capacity(paths.len());
            for path in &paths {
                let chunks = documents::read(path).map_err(|e| anyhow!(e))?;
                let source = path.display().to_string();
                let entries: Vec<NewEntry> = chunks
                    .into_iter()
                    .map(|c| NewEntry {
                        text: c.text,
                        source: source.clone(),
                        position: i64::try_from(c.line).unwrap_or(i64::MAX),
                        embedding: None,
                    })
                    .collect();
                files.push((source, entries));
            }
            let mut out = std::io::stdout().lock();
            for (source, entries) in files {
                let n = entries.len();
                if n == 0 {
                    writeln!(out, "{source}: no text, nothing added")?;
                    continue;
                }
                store
                    .add(Kind::Document, &shelf, entries, true, now_ms())
                    .await
                    .map_err(|e| anyhow!("cannot store document {source}: {e}"))?;
                writeln!(out, "{source}: {n} chunks ({scope})")?;
            }
            Ok(0)
        }
        DocsCommand::Search {
            query,
            scope,
            limit,
            json,
        } => {
            let shelves = scope
                .iter()
                .map(|s| parse_shelf(s))
                .collect::<Result<Vec<_>>>()?;
            let hits = store
                .search(Kind::Document, &shelves, &query, limit)
                .await
                .map_err(|e| anyhow!("cannot search the documents: {e}"))?;
            let mut out = std::io::stdout().lock();
            for h in &hits {
                if json {
                    writeln!(out, "{}", serde_json::to_string(h)?)?;
                } else {
                    writeln!(
                        out,
                        "{}:{}\n  {}\n",
                        h.source,
                        h.position,
                        h.text.replace('\n', "\n  ")
                    )?;
                }
            }
            if hits.is_empty() && !json {
                writeln!(out, "no document matches `{query}`")?;
            }
            Ok(0)
        }
    }
}
