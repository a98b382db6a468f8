//! `weft eval AGENT DATASET`: run an agent over a dataset's cases, each as a session of the
//! store, score what each did, and write the results and a summary; `weft eval compare A B`:
//! what changed per case between two runs. The evaluation itself is `weft-eval`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand};
use serde_json::Value;
use weft_eval::replay::{self, ReplayMode};
use weft_eval::results::{self, RESULTS_FILE, SUMMARY_FILE};
use weft_eval::runner::{Job, Runner};
use weft_eval::{compare, dataset};
use weft_host::Host;
use weft_host::drive::AgentFile;
use weft_store::Store;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: Option<EvalCommand>,
    /// The agent file (YAML or JSON).
    #[arg(required = true)]
    pub agent: Option<PathBuf>,
    /// The dataset: YAML (a list of cases, or `cases:`) or JSON lines (`.jsonl`, a case a line).
    #[arg(required = true)]
    pub dataset: Option<PathBuf>,
    /// Run the agent with this model instead of its own, as an agent file names one
    /// (`openai:NAME`, `scripted:PATH`, or a JSON mapping such as `{"provider": "openai", ...}`).
    #[arg(long)]
    pub model: Option<String>,
    /// The model of judge scorers that name none (default: the agent's model).
    #[arg(long)]
    pub judge_model: Option<String>,
    /// How many sessions run at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// How many times each case runs (for models that do not answer the same way twice):
    /// the summary gives pass@k and pass^k with k = this, and the spread of the scores.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// The run's name: its sessions are `NAME-CASE-rK` (default: the agent's name and the time).
    #[arg(long)]
    pub name: Option<String>,
    /// Where the results go: `results.jsonl` and `summary.json` (default `.weft/evals/NAME`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Exit 1 when fewer sessions pass than this share (0 to 1; default 1: every one).
    #[arg(long, default_value_t = 1.0)]
    pub min_pass_rate: f64,
    /// Only the cases with these ids (repeatable).
    #[arg(long = "case", value_name = "ID")]
    pub cases: Vec<String>,
    /// Replay recorded cases in this mode instead of the one each was recorded with:
    /// strict, tools-live or live.
    #[arg(long, value_parser = parse_mode)]
    pub replay: Option<ReplayMode>,
    /// The user the sessions of cases that name no `user` belong to (their sessions are theirs
    /// in `weft serve` and the playground, as with `weft run --user`).
    #[arg(long, env = "WEFT_USER")]
    pub user: Option<String>,
    /// Print the summary as JSON on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Compare two runs case by case: what changed (score, answer, trajectory, cost, latency),
    /// regressions first. Exit 1 when a case regressed.
    Compare {
        /// The first run: its --out directory or its results.jsonl.
        run_a: PathBuf,
        /// The second run.
        run_b: PathBuf,
        /// Print the comparison as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Turn sessions of the store into cases whose model replies are replayed and whose
    /// expectations are the sessions' outcomes, appended to a JSON-lines dataset.
    Record {
        /// The sessions (made by `weft run`, `weft submit` or `weft eval`).
        #[arg(required = true)]
        sessions: Vec<String>,
        /// The dataset the cases are appended to (`.jsonl`; made if absent).
        #[arg(long)]
        into: PathBuf,
        /// How the cases replay: `strict` (the same requests must be sent), `tools-live`
        /// (replies replayed, tools run, their drift reported) or `live` (a new model run).
        #[arg(long, default_value = "strict", value_parser = parse_mode)]
        mode: ReplayMode,
    },
}

fn parse_mode(s: &str) -> Result<ReplayMode, String> {
    match s {
        "strict" => Ok(ReplayMode::Strict),
        "tools-live" => Ok(ReplayMode::ToolsLive),
        "live" => Ok(ReplayMode::Live),
        _ => Err(format!(
            "`{s}` is not a replay mode: strict, tools-live or live"
        )),
    }
}

/// Whether this is a new evaluation (not `compare` or `record`).
pub fn is_run(a: &EvalArgs) -> bool {
    a.command.is_none()
}

/// Whether the command needs the session store (`compare` reads files only).
pub fn needs_store(a: &EvalArgs) -> bool {
    !matches!(a.command, Some(EvalCommand::Compare { .. }))
}

/// Whether the command only reads the store (`record`).
pub fn reads_only(a: &EvalArgs) -> bool {
    matches!(a.command, Some(EvalCommand::Record { .. }))
}

/// An evaluation whose arguments, dataset and agent file are read and checked; nothing is
/// stored yet, so a mistake found here leaves no store behind.
pub struct Prepared {
    args: EvalArgs,
    data: dataset::Dataset,
    /// The agent file, with `--model` applied.
    pub agent: AgentFile,
    judge: Option<weft_model::SharedModel>,
}

/// `weft eval compare A B` and `weft eval record SESSION... --into DATASET`.
pub async fn other<S: Store>(store: Arc<S>, a: EvalArgs) -> Result<u8> {
    match a.command {
        Some(EvalCommand::Compare { run_a, run_b, json }) => compare_runs(&run_a, &run_b, json),
        Some(EvalCommand::Record {
            sessions,
            into,
            mode,
        }) => {
            let mut cases = Vec::new();
            for id in &sessions {
                let case = replay::record(store.as_ref(), id, mode, &into)
                    .await
                    .with_context(|| format!("cannot record session {id}"))?;
                let r = case.replay.as_ref().map_or(0, |r| r.replies.len());
                eprintln!(
                    "recorded session {id} as case {} ({r} model replies, {} mode)",
                    case.id,
                    mode.as_str()
                );
                cases.push(case);
            }
            replay::append(&into, &cases)?;
            eprintln!("{} case(s) added to {}", cases.len(), into.display());
            Ok(0)
        }
        None => Err(anyhow!(
            "give the agent file and the dataset: weft eval AGENT DATASET"
        )),
    }
}

/// Reads the dataset and the agent file and checks the arguments (exit 2 on a mistake).
pub async fn prepare(a: EvalArgs) -> Result<Prepared> {
    let (Some(agent_path), Some(dataset_path)) = (a.agent.clone(), a.dataset.clone()) else {
        return Err(anyhow!(
            "give the agent file and the dataset: weft eval AGENT DATASET"
        ));
    };
    if a.concurrency == 0 {
        return Err(anyhow!("--concurrency must be at least 1"));
    }
    if a.repeat == 0 {
        return Err(anyhow!("--repeat must be at least 1"));
    }
    if !(0.0..=1.0).contains(&a.min_pass_rate) {
        return Err(anyhow!(
            "--min-pass-rate {} is not a share from 0 to 1 (0.9: nine sessions in ten pass)",
            a.min_pass_rate
        ));
    }
    if let Some(n) = &a.name
        && (n.is_empty()
            || !n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)))
    {
        return Err(anyhow!(
            "--name {n}: use letters, digits, `.`, `_` or `-` (it starts the sessions' ids)"
        ));
    }
    let mut data = dataset::load(&dataset_path)?;
    if !a.cases.is_empty() {
        for id in &a.cases {
            if !data.cases.iter().any(|c| &c.id == id) {
                let ids = data.cases.iter().map(|c| c.id.as_str());
                return Err(anyhow!(
                    "--case {id}: no such case in {}{}",
                    dataset_path.display(),
                    weft_core::diagnose::did_you_mean(id, ids)
                ));
            }
        }
        data.cases.retain(|c| a.cases.contains(&c.id));
    }
    let mut agent = AgentFile::load(&agent_path).await?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    if let Some(m) = &a.model {
        let spec = model_spec(m);
        agent.model =
            weft_model::from_spec(&spec, &cwd).map_err(|e| anyhow!("--model {m}: {e}"))?;
        agent.spec.model = Some(spec);
    }
    let judge = match &a.judge_model {
        Some(m) => Some(
            weft_model::from_spec(&model_spec(m), &cwd)
                .map_err(|e| anyhow!("--judge-model {m}: {e}"))?,
        ),
        None => None,
    };
    Ok(Prepared {
        args: a,
        data,
        agent,
        judge,
    })
}

/// Runs a prepared evaluation on `store`.
pub async fn execute<S: Store>(host: &Host, store: Arc<S>, p: Prepared) -> Result<u8> {
    let Prepared {
        args: a,
        data,
        agent,
        judge,
    } = p;
    host.durability.for_agents(store.as_ref(), [&agent.spec]);
    host.shutdown.set_quiet();
    let name = a
        .name
        .clone()
        .unwrap_or_else(|| default_name(&agent.spec.name));
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(".weft/evals").join(&name));
    std::fs::create_dir_all(&out)
        .with_context(|| format!("cannot create the results directory {}", out.display()))?;
    let agent = Arc::new(agent);
    let runner = Arc::new(
        Runner::new(
            host.clone(),
            store,
            agent.clone(),
            &data,
            judge,
            name.clone(),
        )
        .replay_in(a.replay)
        .user(a.user.clone()),
    );
    let jobs: Vec<Job> = data
        .cases
        .iter()
        .flat_map(|c| {
            let c = Arc::new(c.clone());
            (1..=a.repeat).map(move |k| Job {
                case: c.clone(),
                repeat: k,
            })
        })
        .collect();
    let total = jobs.len() as u64;
    // The same command finishes a run stopped midway: the results it wrote are kept, and only
    // the sessions without one run (see `weft_eval::runner`). The file is written as results
    // come, so a run stopped again keeps what it finished.
    let results_path = out.join(RESULTS_FILE);
    let mut kept: std::collections::HashMap<String, results::CaseResult> =
        results::finished(&results_path, &name)
            .into_iter()
            .map(|r| (r.session.clone(), r))
            .collect();
    let (done, to_run): (Vec<Job>, Vec<Job>) = jobs
        .iter()
        .cloned()
        .partition(|j| kept.contains_key(&runner.session_id(&j.case.id, j.repeat)));
    let mut earlier: Vec<results::CaseResult> = done
        .iter()
        .filter_map(|j| kept.remove(&runner.session_id(&j.case.id, j.repeat)))
        .collect();
    results::write_results(&results_path, &earlier)?;
    let bar = progress(total);
    let (mut passed, mut failed) = (0_u64, 0_u64);
    for r in &earlier {
        if r.pass {
            passed += 1;
        } else {
            failed += 1;
        }
        bar.inc(1);
    }
    let mut unwritten = None;
    let ran = runner
        .clone()
        .run_all(to_run, a.concurrency, |r| {
            if r.pass {
                passed += 1;
            } else {
                failed += 1;
            }
            bar.inc(1);
            bar.set_message(format!("{passed} passed, {failed} failed · {}", r.case));
            if let Err(e) = results::append_result(&results_path, r) {
                unwritten.get_or_insert(e);
            }
        })
        .await;
    bar.finish_and_clear();
    agent.tools.shutdown().await;
    if let Some(e) = unwritten {
        eprintln!("warning: {e}; the results are written whole below");
    }
    // Every result in the dataset's order, each session once.
    earlier.extend(ran);
    let mut by_session: std::collections::HashMap<String, results::CaseResult> = earlier
        .into_iter()
        .map(|r| (r.session.clone(), r))
        .collect();
    let results: Vec<results::CaseResult> = jobs
        .iter()
        .filter_map(|j| by_session.remove(&runner.session_id(&j.case.id, j.repeat)))
        .collect();
    results::write_results(&results_path, &results)?;
    let summary = results::summarise(&name, a.repeat, &results);
    let summary_path = out.join(SUMMARY_FILE);
    std::fs::write(&summary_path, serde_json::to_string_pretty(&summary)?)
        .with_context(|| format!("cannot write {}", summary_path.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", results::table(&summary));
    }
    let interrupted = host.shutdown.is_requested();
    let not_run = total.saturating_sub(results.len() as u64);
    eprintln!(
        "results {} · summary {}{}",
        out.join(RESULTS_FILE).display(),
        summary_path.display(),
        if not_run > 0 {
            format!(" · {not_run} session(s) not run")
        } else {
            String::new()
        }
    );
    for r in results.iter().filter(|r| !r.pass) {
        let why: Vec<String> = r
            .error
            .iter()
            .cloned()
            .chain(
                r.scores
                    .iter()
                    .filter(|s| !s.pass)
                    .map(|s| format!("{}: {}", s.scorer, s.detail)),
            )
            .collect();
        eprintln!(
            "failed {} (session {}): {}",
            r.case,
            r.session,
            why.join("; ")
        );
    }
    if interrupted {
        return Ok(weft_host::EXIT_INTERRUPTED);
    }
    let rate = summary.sessions.pass_rate;
    if rate + 1e-9 < a.min_pass_rate || summary.sessions.n == 0 {
        eprintln!(
            "pass rate {:.0}% is below --min-pass-rate {:.0}%",
            rate * 100.0,
            a.min_pass_rate * 100.0
        );
        return Ok(crate::EXIT_FAILED);
    }
    Ok(0)
}

fn compare_runs(a: &Path, b: &Path, json: bool) -> Result<u8> {
    let ra = results::read_results(a)?;
    let rb = results::read_results(b)?;
    let changes = compare::compare(&ra, &rb);
    if json {
        println!("{}", serde_json::to_string_pretty(&changes)?);
    } else {
        print!("{}", compare::report(&changes));
    }
    let regressed = changes
        .iter()
        .any(|c| c.verdict == compare::Verdict::Regressed);
    Ok(if regressed { crate::EXIT_FAILED } else { 0 })
}

/// `--model`'s text as an agent file's `model`: a JSON mapping, or `provider:name`.
fn model_spec(text: &str) -> Value {
    let t = text.trim();
    if t.starts_with('{')
        && let Ok(v) = serde_json::from_str::<Value>(t)
    {
        return v;
    }
    Value::String(t.to_owned())
}

/// `AGENT-YYYYMMDDTHHMMSS-XXXX`: the agent, the time, and a few random digits.
fn default_name(agent: &str) -> String {
    let time: String = weft_host::sessions::fmt_time(weft_runtime::now_ms())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .filter(|c| *c != 'Z')
        .collect();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let safe: String = agent
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{safe}-{time}-{}", &id[..4])
}

/// A progress line on a terminal; hidden otherwise.
fn progress(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr_with_hz(10),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} sessions · {msg} · {elapsed}")
    {
        bar.set_style(style);
    }
    bar
}
