//! Local command tools: the arguments as JSON on stdin, a JSON result on stdout. No shell.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weft_core::agent::{CommandToolDecl, parse_duration};
use weft_core::{ToolError, ToolInfo};

use crate::render::Vars;
use crate::secrets::{Secrets, referenced_in_str};
use crate::{Tool, ToolContext};

/// Output beyond this is cut off and the call fails as `invalid_output`.
const MAX_OUTPUT: usize = 16 * 1024 * 1024;
/// How much of stderr is kept in an error.
const MAX_STDERR: usize = 8 * 1024;
/// Variables passed on from weft's own environment.
const PASSED_ENV: &[&str] = &["PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT"];

/// A tool that runs a local executable.
#[derive(Debug, Clone)]
pub struct CommandTool {
    info: ToolInfo,
    program: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: PathBuf,
    timeout: Duration,
    secrets: Option<Secrets>,
    /// Exit codes after which a call is tried again (the tool is idempotent).
    retry_exit_codes: Vec<i32>,
    /// The tool's `sandbox:` (none: the default sandbox).
    sandbox: Option<weft_core::sandbox::SandboxDecl>,
    /// The agent file's directory.
    base_dir: PathBuf,
}

impl CommandTool {
    /// Builds the tool from its declaration; relative paths are taken from `base_dir`.
    pub fn from_decl(decl: CommandToolDecl, base_dir: &Path) -> Result<Self, String> {
        let Some((program, args)) = decl.command.split_first() else {
            return Err(format!(
                "`{}`: `command` is empty; give the program and its arguments as a list",
                decl.name
            ));
        };
        let timeout = match &decl.timeout {
            None => Duration::from_secs(60),
            Some(v) => parse_duration(v).map_err(|e| format!("`{}`: timeout: {e}", decl.name))?,
        };
        let cwd = match &decl.cwd {
            Some(c) => base_dir.join(c),
            // The directory of `agent.yaml` given without a directory is "", not a valid cwd.
            None if base_dir.as_os_str().is_empty() => PathBuf::from("."),
            None => base_dir.to_path_buf(),
        };
        check_program(&decl.name, program, args, &cwd)?;
        if !decl.retry_exit_codes.is_empty() && !decl.idempotent {
            return Err(format!(
                "`{}`: `retry_exit_codes` tries a call again, which only an idempotent tool allows; add `idempotent: true` if running it twice is safe, or remove `retry_exit_codes`",
                decl.name
            ));
        }
        Ok(Self {
            info: ToolInfo {
                name: decl.name,
                description: decl.description,
                category: decl.category,
                input_schema: decl.input_schema,
                idempotent: decl.idempotent,
                parallel: decl.parallel,
                requires_approval: decl.requires_approval,
                source: "command".into(),
                output_schema: decl.output_schema,
            },
            program: program.clone(),
            args: args.to_vec(),
            env: decl.env,
            cwd,
            timeout,
            secrets: None,
            retry_exit_codes: decl.retry_exit_codes,
            sandbox: decl.sandbox,
            base_dir: base_dir.to_path_buf(),
        })
    }

    /// Lets `env` values use `{{ secrets.NAME }}` (rendered when the command runs). Every secret
    /// referred to must be declared.
    pub fn with_secrets(mut self, secrets: Secrets) -> Result<Self, String> {
        let mut used = BTreeSet::new();
        self.env
            .values()
            .for_each(|v| referenced_in_str(v, &mut used));
        secrets
            .check_declared(used, &format!("command tool `{}`", self.info.name))
            .map_err(|e| e.to_string())?;
        self.secrets = Some(secrets);
        Ok(self)
    }

    fn rendered_env(&self) -> Result<BTreeMap<String, String>, ToolError> {
        let templated = self.env.values().any(|v| v.contains("{{"));
        if !templated {
            return Ok(self.env.clone());
        }
        let vars = Vars::new(Value::Null, self.secrets.as_ref(), true)?;
        self.env
            .iter()
            .map(|(k, v)| {
                Ok((
                    k.clone(),
                    vars.render(&self.info.name, &format!("env.{k}"), v)?,
                ))
            })
            .collect()
    }

    async fn run(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        let env = self.rendered_env()?;
        // Through the sandbox launcher (`sandbox.rs`), which also makes the tool die with weft,
        // even killed with SIGKILL (see `owned.rs`). The signal comes when the spawning thread
        // exits: the spawn below happens on the thread polling this call, a runtime worker (or
        // `block_on`'s thread), which lives as long as the runtime; never a blocking thread.
        let workspace = crate::sandbox::workspace(&ctx.session_id).map_err(|e| {
            ToolError::new(
                "sandbox",
                format!("could not create the tool's workspace directory: {e}"),
            )
            .with_detail(json!({"rule": "setup"}))
        })?;
        let (program, lead, sandboxed) = crate::sandbox::command(
            &self.program,
            &self.cwd,
            crate::owned::child_path(&env).as_deref(),
            |resolved| {
                crate::sandbox::Policy::for_tool(
                    self.sandbox.as_ref(),
                    &self.base_dir,
                    &self.cwd,
                    resolved,
                    script_of(&self.program, &self.args, &self.cwd).as_deref(),
                    &workspace,
                    true,
                )
            },
        )?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(lead)
            .args(&self.args)
            .current_dir(&self.cwd)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Its own process group, so that a call dropped where it stands (cancel, Ctrl-C, a
        // worker's drain) takes the tool's children with it (`GroupKill`), and a Ctrl-C on the
        // terminal reaches weft, which decides, rather than the tool.
        #[cfg(unix)]
        cmd.process_group(0);
        for k in PASSED_ENV {
            if let Ok(v) = std::env::var(k) {
                cmd.env(k, v);
            }
        }
        if sandboxed {
            cmd.env("TMPDIR", &workspace);
        }
        cmd.env("WEFT_WORKSPACE", &workspace)
            .envs(&env)
            .env("WEFT_SESSION_ID", &ctx.session_id)
            .env("WEFT_CALL_ID", &ctx.call_id)
            .env("WEFT_IDEMPOTENCY_KEY", &ctx.idempotency_key)
            .env("WEFT_ATTEMPT", ctx.attempt.to_string());
        if let Some(step) = &ctx.step {
            cmd.env("WEFT_STEP_ID", step);
        }
        let mut child = cmd.spawn().map_err(|e| {
            ToolError::new(
                "spawn",
                format!(
                    "could not start `{}` (in {}): {e}",
                    self.program,
                    self.cwd.display()
                ),
            )
        })?;
        #[cfg(unix)]
        let mut group = GroupKill(child.id());
        let input = serde_json::to_vec(&args).unwrap_or_default();
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let write = async {
            if let Some(s) = stdin.as_mut() {
                // A tool may exit without reading its input; that is not an error by itself.
                let _ = s.write_all(&input).await;
                let _ = s.shutdown().await;
            }
            drop(stdin.take());
        };
        let read_out = async {
            let mut buf = Vec::new();
            if let Some(s) = stdout.as_mut() {
                let _ = s.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut buf).await;
            }
            buf
        };
        let read_err = async {
            let mut buf = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.take(MAX_OUTPUT as u64).read_to_end(&mut buf).await;
            }
            buf
        };
        let all = async {
            let ((), out, err) = tokio::join!(write, read_out, read_err);
            let status = child.wait().await;
            (out, err, status)
        };
        let (out, err, status) = match tokio::time::timeout(self.timeout, all).await {
            Ok(r) => {
                #[cfg(unix)]
                group.disarm();
                r
            }
            Err(_) => {
                return Err(ToolError::new(
                    "timeout",
                    format!(
                        "`{}` did not finish within {:?}; it was killed",
                        self.info.name, self.timeout
                    ),
                ));
            }
        };
        let stderr_text = tail(&err);
        let status = status
            .map_err(|e| ToolError::new("io", format!("waiting for `{}`: {e}", self.program)))?;
        if !status.success() && sandboxed {
            #[cfg(unix)]
            let signal = std::os::unix::process::ExitStatusExt::signal(&status);
            #[cfg(not(unix))]
            let signal = None;
            if let Some(e) = crate::sandbox::classify(
                &self.info.name,
                &crate::sandbox::Ended {
                    code: status.code(),
                    signal,
                    stderr: &stderr_text,
                },
            ) {
                return Err(e);
            }
        }
        if !status.success() {
            return Err(ToolError::new(
                "exit_status",
                match stderr_text.lines().rev().find(|l| !l.trim().is_empty()) {
                    Some(last) => {
                        format!("`{}` exited with {status}: {}", self.info.name, last.trim())
                    }
                    None => format!("`{}` exited with {status}", self.info.name),
                },
            )
            .with_detail(
                json!({"exit_code": status.code(), "stderr": stderr_text, "stdout": tail(&out)}),
            )
            // A non-zero exit is the command's answer, unless its code is declared passing.
            .retryable(
                status
                    .code()
                    .is_some_and(|c| self.retry_exit_codes.contains(&c)),
            ));
        }
        if out.len() > MAX_OUTPUT {
            return Err(ToolError::new(
                "invalid_output",
                format!("`{}` wrote more than {MAX_OUTPUT} bytes", self.info.name),
            ));
        }
        serde_json::from_slice(&out).map_err(|e| {
            ToolError::new(
                "invalid_output",
                format!(
                    "`{}` did not print one JSON value on stdout: {e}",
                    self.info.name
                ),
            )
            .with_detail(json!({"stdout": tail(&out), "stderr": stderr_text}))
        })
    }
}

fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(MAX_STDERR);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

impl Tool for CommandTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        self.run(args, ctx).await
    }
}

/// Interpreters whose first non-option argument is a script file.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "node", "bash", "sh", "zsh", "ruby", "perl", "deno", "bun",
];

/// The script a known interpreter runs (its first non-option argument, relative to `cwd`),
/// if there is one.
pub(crate) fn script_of(program: &str, args: &[String], cwd: &Path) -> Option<PathBuf> {
    let stem = Path::new(program)
        .file_name()?
        .to_string_lossy()
        .into_owned();
    let known = INTERPRETERS.contains(&stem.as_str())
        || INTERPRETERS.iter().any(|i| {
            stem.strip_prefix(i)
                .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        });
    if !known {
        return None;
    }
    if args
        .iter()
        .take_while(|a| a.starts_with('-'))
        .any(|a| matches!(a.as_str(), "-c" | "-m" | "-e" | "--eval" | "-p" | "--print"))
    {
        return None;
    }
    let script = args.iter().find(|a| !a.starts_with('-'))?;
    std::path::absolute(cwd.join(script)).ok()
}

/// Refuses, when the agent loads, a command whose program is not found (a path, relative to the
/// command's working directory, or a name looked up on `PATH`) or whose script (the first
/// non-option argument of a known interpreter) does not exist.
fn check_program(tool: &str, program: &str, args: &[String], cwd: &Path) -> Result<(), String> {
    if program.contains('/') {
        let path = cwd.join(program);
        if !path.is_file() {
            return Err(format!(
                "`{tool}`: `command`: program `{program}` does not exist (looked for {})",
                path.display()
            ));
        }
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let on_path = |p: &str| std::env::split_paths(&path).any(|d| d.join(p).is_file());
        if !on_path(program) {
            // A misspelt interpreter is the usual mistake; only one that is installed is named.
            let meant = weft_core::diagnose::did_you_mean(
                program,
                INTERPRETERS.iter().copied().filter(|i| on_path(i)),
            );
            return Err(format!(
                "`{tool}`: `command`: program `{program}` is not found on PATH{meant}; install it or give its path"
            ));
        }
    }
    let stem = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if INTERPRETERS.contains(&stem.as_str()) {
        // `-c CODE`, `-m MODULE`, `-e CODE`: no script file to check.
        if args
            .iter()
            .take_while(|a| a.starts_with('-'))
            .any(|a| matches!(a.as_str(), "-c" | "-m" | "-e" | "--eval" | "-p" | "--print"))
        {
            return Ok(());
        }
        if let Some(script) = args.iter().find(|a| !a.starts_with('-')) {
            let path = cwd.join(script);
            if !path.exists() {
                return Err(format!(
                    "`{tool}`: `command`: script `{script}` does not exist (looked for {})",
                    path.display()
                ));
            }
        }
    }
    Ok(())
}

/// Kills a tool's process group (SIGKILL) when dropped before [`GroupKill::disarm`]: the call was
/// dropped (cancelled, interrupted) or timed out, and whatever the tool started must stop too.
#[cfg(unix)]
struct GroupKill(Option<u32>);

#[cfg(unix)]
impl GroupKill {
    /// The call ended by itself: leave its process group alone.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

#[cfg(unix)]
impl Drop for GroupKill {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // The group may be gone already.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(cmd: &[&str], timeout: &str) -> CommandTool {
        let decl = CommandToolDecl {
            name: "t".into(),
            description: String::new(),
            category: None,
            command: cmd.iter().map(|s| (*s).to_owned()).collect(),
            input_schema: json!({}),
            idempotent: false,
            parallel: false,
            requires_approval: false,
            timeout: Some(json!(timeout)),
            env: BTreeMap::new(),
            cwd: None,
            retry_exit_codes: Vec::new(),
            sandbox: None,
            output_schema: None,
        };
        CommandTool::from_decl(decl, Path::new(".")).expect("valid declaration")
    }

    #[tokio::test]
    async fn reads_stdin_and_returns_stdout_json() {
        let t = tool(
            &[
                "python3",
                "-c",
                "import json,sys; a=json.load(sys.stdin); print(json.dumps({'n': a['n']+1}))",
            ],
            "10s",
        );
        assert_eq!(
            t.call(json!({"n": 1}), ToolContext::default()).await.ok(),
            Some(json!({"n": 2}))
        );
    }

    #[tokio::test]
    async fn non_zero_exit_keeps_stderr() {
        let t = tool(
            &[
                "python3",
                "-c",
                "import sys; sys.stderr.write('boom'); sys.exit(3)",
            ],
            "10s",
        );
        let e = t.call(json!({}), ToolContext::default()).await.err();
        let e = e.map(|e| {
            (
                e.kind,
                e.detail["stderr"].clone(),
                e.detail["exit_code"].clone(),
            )
        });
        assert_eq!(e, Some(("exit_status".to_owned(), json!("boom"), json!(3))));
    }

    #[tokio::test]
    async fn invalid_json_is_an_error() {
        let t = tool(&["python3", "-c", "print('not json')"], "10s");
        let e = t.call(json!({}), ToolContext::default()).await.err();
        assert_eq!(e.map(|e| e.kind), Some("invalid_output".to_owned()));
    }

    #[tokio::test]
    async fn timeout_kills_the_command() {
        let t = tool(&["sleep", "5"], "200ms");
        let start = std::time::Instant::now();
        let e = t.call(json!({}), ToolContext::default()).await.err();
        assert_eq!(e.map(|e| e.kind), Some("timeout".to_owned()));
        assert!(start.elapsed() < Duration::from_secs(4));
    }

    #[tokio::test]
    async fn an_empty_base_dir_means_the_current_directory() {
        let decl = CommandToolDecl {
            name: "t".into(),
            description: String::new(),
            category: None,
            command: vec!["python3".into(), "-c".into(), "print(1)".into()],
            input_schema: json!({}),
            idempotent: false,
            parallel: false,
            requires_approval: false,
            timeout: None,
            env: BTreeMap::new(),
            cwd: None,
            retry_exit_codes: Vec::new(),
            sandbox: None,
            output_schema: None,
        };
        let t = CommandTool::from_decl(decl, Path::new("")).expect("valid declaration");
        assert_eq!(
            t.call(json!({}), ToolContext::default()).await.ok(),
            Some(json!(1))
        );
    }

    #[tokio::test]
    async fn env_values_render_secrets() {
        let mut env = BTreeMap::new();
        env.insert("TOK".to_owned(), "v={{ secrets.tok }}".to_owned());
        let decl = CommandToolDecl {
            name: "t".into(),
            description: String::new(),
            category: None,
            command: vec![
                "python3".into(),
                "-c".into(),
                "import os, json; print(json.dumps(os.environ['TOK']))".into(),
            ],
            input_schema: json!({}),
            idempotent: false,
            parallel: false,
            requires_approval: false,
            timeout: None,
            env,
            cwd: None,
            retry_exit_codes: Vec::new(),
            sandbox: None,
            output_schema: None,
        };
        let secrets =
            Secrets::from_values(BTreeMap::from([("tok".to_owned(), "abcd-1234".to_owned())]))
                .expect("long enough");
        let t = CommandTool::from_decl(decl.clone(), Path::new("."))
            .and_then(|t| t.with_secrets(secrets))
            .expect("valid declaration");
        assert_eq!(
            t.call(json!({}), ToolContext::default()).await.ok(),
            Some(json!("v=abcd-1234"))
        );
        // A secret that is not declared is a declaration error naming it.
        let e = CommandTool::from_decl(decl, Path::new("."))
            .and_then(|t| t.with_secrets(Secrets::default()))
            .err()
            .unwrap_or_default();
        assert!(e.contains("`tok`") && e.contains("`t`"), "{e}");
    }

    fn decl(cmd: &[&str]) -> CommandToolDecl {
        CommandToolDecl {
            name: "t".into(),
            description: String::new(),
            category: None,
            command: cmd.iter().map(|s| (*s).to_owned()).collect(),
            input_schema: json!({}),
            idempotent: false,
            parallel: false,
            requires_approval: false,
            timeout: None,
            env: BTreeMap::new(),
            cwd: None,
            retry_exit_codes: Vec::new(),
            sandbox: None,
            output_schema: None,
        }
    }

    #[test]
    fn a_missing_program_or_script_is_refused_when_loading() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = CommandTool::from_decl(decl(&["/no/such/program"]), dir.path())
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("program `/no/such/program` does not exist"),
            "{e}"
        );
        let e = CommandTool::from_decl(decl(&["no-such-program-weft"]), dir.path())
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("`no-such-program-weft` is not found on PATH;"),
            "{e}"
        );
        let e = CommandTool::from_decl(decl(&["pyhton3", "t.py"]), dir.path())
            .err()
            .unwrap_or_default();
        assert!(e.contains("(did you mean `python3`?)"), "{e}");
        let e = CommandTool::from_decl(decl(&["python3", "-u", "tools/gone.py", "x"]), dir.path())
            .err()
            .unwrap_or_default();
        assert!(e.contains("script `tools/gone.py` does not exist"), "{e}");
        // Inline code has no script file; a script that exists is accepted.
        assert!(CommandTool::from_decl(decl(&["python3", "-c", "print(1)"]), dir.path()).is_ok());
        std::fs::write(dir.path().join("ok.sh"), "echo '{}'").expect("write");
        assert!(CommandTool::from_decl(decl(&["sh", "ok.sh"]), dir.path()).is_ok());
    }

    #[tokio::test]
    async fn only_a_declared_exit_code_is_retryable() {
        let mut d = decl(&["sh", "-c", "cat > /dev/null; exit \"$CODE\""]);
        d.idempotent = true;
        d.retry_exit_codes = vec![75];
        let retryable = |code: &str| {
            let mut d = d.clone();
            d.env.insert("CODE".into(), code.into());
            async move {
                let t = CommandTool::from_decl(d, Path::new(".")).expect("loads");
                t.call(json!({}), ToolContext::default())
                    .await
                    .err()
                    .map(|e| (e.kind, e.retryable))
            }
        };
        assert_eq!(retryable("75").await, Some(("exit_status".into(), true)));
        assert_eq!(retryable("1").await, Some(("exit_status".into(), false)));
        // Trying a call again needs an idempotent tool.
        d.idempotent = false;
        let e = CommandTool::from_decl(d, Path::new("."))
            .err()
            .unwrap_or_default();
        assert!(e.contains("`t`") && e.contains("idempotent: true"), "{e}");
    }

    #[tokio::test]
    async fn a_program_gone_after_loading_is_a_spawn_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let prog = dir.path().join("prog");
        std::fs::write(&prog, "#!/bin/sh\necho '{}'\n").expect("write");
        let t = CommandTool::from_decl(decl(&["./prog"]), dir.path()).expect("loads");
        std::fs::remove_file(&prog).expect("remove");
        let e = t.call(json!({}), ToolContext::default()).await.err();
        assert_eq!(e.map(|e| e.kind), Some("spawn".to_owned()));
    }
}
