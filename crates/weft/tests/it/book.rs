//! The README and the book in docs/ run as written: every ` ```sh ` block of a page runs line by
//! line, in order, in a fresh directory holding a copy of `examples/`, with the `weft` these tests
//! built first on the `PATH`. A line must exit 0 unless its comment says `(exit N)`; a line whose
//! comment says `(serves until stopped)` must still be running after a few seconds. A ` ```yaml `
//! block whose first line is `# file: PATH` must be that file of the repository, byte for byte.
//! ` ```text ` blocks are synopses with placeholders and are not run.
//!
//! The README's set-up commands are the one exception: `cargo install --path crates/weft` is the
//! build these tests already made, and `scripts/test` is the run this test is part of. So is the
//! Python page's `pip install ./crates/weft-py`: the build `scripts/setup-python` made, whose
//! interpreter (`WEFT_TEST_PYTHON`) is the page's `python`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced blocks of a page with their info string and the line their first line is on.
fn fenced(text: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut current {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    current = Some((info.trim().to_owned(), i + 2, String::new()));
                }
            }
            Some((_, _, body)) => {
                if trimmed == "```" {
                    out.push(current.take().unwrap());
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    assert!(current.is_none(), "a fenced block is not closed");
    out
}

/// One command of a block: its text (continuation lines joined) and the line it starts on.
fn commands(block: &str, first_line: usize) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in block.lines().enumerate() {
        let line_no = first_line + i;
        let (start, mut text) = match pending.take() {
            Some((start, mut text)) => {
                text.push('\n');
                text.push_str(line);
                (start, text)
            }
            None => {
                let t = line.trim();
                if t.is_empty() || t.starts_with('#') {
                    continue;
                }
                (line_no, line.to_owned())
            }
        };
        if text.ends_with('\\') {
            text.pop();
            pending = Some((start, text));
        } else {
            out.push((start, text));
        }
    }
    if let Some(p) = pending {
        out.push(p);
    }
    out
}

/// What a command's comment says it does: the exit code it ends with, or that it serves.
enum Expect {
    Exit(i32),
    Serves,
}

fn expectation(command: &str) -> Expect {
    if command.contains("(serves until stopped)") {
        return Expect::Serves;
    }
    if let Some(rest) = command.split("(exit ").nth(1) {
        let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return Expect::Exit(code.parse().expect("(exit N) with a number"));
    }
    Expect::Exit(0)
}

/// The set-up commands of the README that this test stands in for (see the module's doc).
fn setup_command(command: &str) -> Option<&str> {
    let c = command.trim();
    if c == "scripts/test" || c == "pip install ./crates/weft-py" {
        return Some("");
    }
    c.strip_prefix("cargo install --path crates/weft --locked && ")
}

/// Runs every `sh` block of `page` (a path from the repository's root) and checks its `file:`
/// blocks.
fn run_page(page: &str) {
    let text = std::fs::read_to_string(repo().join(page)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    crate::support::copy_dir(&repo().join("examples"), &dir.path().join("examples"));
    let weft = PathBuf::from(env!("CARGO_BIN_EXE_weft"));
    let mut path = format!(
        "{}:{}",
        weft.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The Python page runs the interpreter the package is installed in as `python`.
    if page == "docs/python.md" {
        let python = PathBuf::from(crate::support::service_var("WEFT_TEST_PYTHON"));
        path = format!("{}:{path}", python.parent().unwrap().display());
    }
    let mut ran = 0;
    for (info, first_line, body) in fenced(&text) {
        if info == "yaml" || info == "json" {
            if let Some(file) = body.lines().next().and_then(|l| l.strip_prefix("# file: ")) {
                let shown = body.split_once('\n').map_or("", |(_, rest)| rest);
                let real = std::fs::read_to_string(repo().join(file.trim()))
                    .unwrap_or_else(|e| panic!("{page}:{first_line}: {file}: {e}"));
                assert_eq!(
                    shown, real,
                    "{page}:{first_line}: the block differs from {file}; copy the file into it"
                );
            }
            continue;
        }
        if info != "sh" {
            continue;
        }
        for (line, command) in commands(&body, first_line) {
            let command = match setup_command(&command) {
                Some("") => continue,
                Some(rest) => rest.to_owned(),
                None => command,
            };
            ran += 1;
            run_command(page, line, &command, dir.path(), &path);
        }
    }
    assert!(ran > 0, "{page} has no command to run");
}

/// Runs one command with bash in `dir`, in a process group of its own. The variables a line sets
/// (`fork=$(...)`) are kept in a file and read back before the next line, as in one shell.
fn run_command(page: &str, line: usize, command: &str, dir: &Path, path: &str) {
    let script = dir.join(".book-vars");
    let wrapped = format!(
        "[ -f {vars} ] && . {vars}\n{command}\nrc=$?\ndeclare -p | grep -E '^declare -- [a-z_]+=' > {vars}.new 2>/dev/null; mv {vars}.new {vars}\nexit $rc\n",
        vars = script.display()
    );
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&wrapped)
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env_remove("WEFT_DB")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    match expectation(command) {
        Expect::Exit(want) => {
            let out = wait_bounded(child, 120, page, line, command);
            let got = out.status.code().unwrap_or(-1);
            assert_eq!(
                got,
                want,
                "{page}:{line}: `{command}` exited {got}, the page says {want}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Expect::Serves => {
            std::thread::sleep(std::time::Duration::from_secs(3));
            let still_running = child.try_wait().unwrap().is_none();
            // The command runs in a process group of its own: stop all of it.
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", child.id())])
                .status();
            let out = child.wait_with_output().unwrap();
            assert!(
                still_running,
                "{page}:{line}: `{command}` stopped instead of serving\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

fn wait_bounded(
    mut child: std::process::Child,
    secs: u64,
    page: &str,
    line: usize,
    command: &str,
) -> std::process::Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            panic!("{page}:{line}: `{command}` ran over {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The pages of the book, from docs/SUMMARY.md, with the README first.
fn pages() -> Vec<String> {
    let summary = std::fs::read_to_string(repo().join("docs/SUMMARY.md")).unwrap();
    let mut out = vec!["README.md".to_owned()];
    for part in summary.split("](").skip(1) {
        let target = part.split(')').next().unwrap();
        out.push(format!("docs/{target}"));
    }
    out
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let listed = pages();
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") && name != "SUMMARY.md" {
            assert!(
                listed.contains(&format!("docs/{name}")),
                "docs/{name} is not in docs/SUMMARY.md"
            );
        }
    }
}

/// One test per page, so they run in parallel and a failure names its page.
macro_rules! pages {
    ($($name:ident => $page:literal),* $(,)?) => {
        $(#[test] fn $name() { run_page($page); })*

        #[test]
        fn every_page_with_commands_is_run() {
            let run = [$($page),*];
            for page in pages() {
                let text = std::fs::read_to_string(repo().join(&page)).unwrap();
                let has_sh = fenced(&text).iter().any(|(info, _, _)| info == "sh");
                assert!(
                    !has_sh || run.contains(&page.as_str()),
                    "{page} has sh blocks but no test runs them; add it to pages! in book.rs"
                );
            }
        }
    };
}

pages! {
    readme => "README.md",
    tutorial => "docs/tutorial.md",
    agents => "docs/agents.md",
    plans_guide => "docs/plans-guide.md",
    models => "docs/models.md",
    mcp => "docs/mcp.md",
    sessions => "docs/sessions.md",
    budgets => "docs/budgets.md",
    memory => "docs/memory.md",
    workers => "docs/workers.md",
    serve => "docs/serve.md",
    telemetry => "docs/telemetry.md",
    evals => "docs/evals.md",
    command_line => "docs/command-line.md",
    needs_python_page => "docs/python.md",
}
