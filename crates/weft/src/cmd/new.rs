//! `weft new NAME`: writes a starter agent, `NAME.yaml`, and its model's script,
//! `NAME.script.yaml`: a ReAct agent with a scripted model (it runs with no server and no key)
//! and one command tool, which `weft check` passes and `weft run` runs. It writes new files
//! only: one that exists is left as it is, and nothing is written.
//! `examples/tutorial/hello.yaml` and `hello.script.yaml` are what `weft new hello` writes (a
//! test keeps them so); the tutorial starts from them.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use clap::Args;

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The agent's name (letters, digits, `-` and `_`): the files are NAME.yaml and
    /// NAME.script.yaml, in the current directory (or in DIR, for `DIR/NAME`).
    pub name: PathBuf,
}

/// The agent file `weft new NAME` writes.
fn agent_file(name: &str) -> String {
    format!(
        r#"# {name}: a starter agent, written by `weft new {name}`.
#   weft check {name}.yaml
#   weft run {name}.yaml "What time is it?"
# Its model is a script of replies ({name}.script.yaml), so it runs with no model server and no
# key. For a real model, change `model:` (e.g. `model: openai:gpt-4o-mini`; see docs/models.md).
name: {name}
mode: react
model: scripted:{name}.script.yaml
instructions: You tell the time. Ask the clock before you answer.
limits: {{ max_iterations: 8 }}
tools:
  # A command tool: weft runs the program with the call's arguments as JSON on its stdin, and
  # reads one JSON value from its stdout. Any program will do: put yours in place of this one.
  - name: clock
    description: The date and time now, in UTC.
    command: [sh, -c, 'cat > /dev/null; date -u +"{{\"utc\": \"%Y-%m-%dT%H:%M:%SZ\"}}"']
    input_schema: {{ type: object, properties: {{}} }}
    idempotent: true
"#
    )
}

/// The script of the agent's model that `weft new NAME` writes.
fn script_file(name: &str) -> String {
    format!(
        r#"# What {name}'s scripted model says, in order: a call of the clock, then (once its result is
# in) the answer. A real model decides these itself.
- tool_calls:
    - {{ name: clock, arguments: {{}} }}
- text: "I asked the clock: its answer, above, is the time now in UTC."
"#
    )
}

/// Whether `name` can name an agent and its files: letters, digits, `-` and `_`, starting
/// with a letter or a digit.
fn valid(name: &str) -> bool {
    name.len() <= 64
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

pub fn run(a: &NewArgs) -> Result<u8> {
    // `DIR/NAME`: the files go in DIR; a name alone: in the current directory.
    let dir = a.name.parent().unwrap_or(Path::new(""));
    let given = a
        .name
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let name = given
        .strip_suffix(".yaml")
        .or_else(|| given.strip_suffix(".yml"))
        .unwrap_or(given);
    if !valid(name) {
        return Err(anyhow!(
            "`{}` is not an agent name: use letters, digits, `-` and `_` (e.g. `weft new helper`)",
            a.name.display()
        ));
    }
    if !dir.as_os_str().is_empty() && !dir.is_dir() {
        return Err(anyhow!(
            "{}: no such directory; make it first, or give a name alone for the current directory",
            dir.display()
        ));
    }
    let files = [
        (dir.join(format!("{name}.yaml")), agent_file(name)),
        (dir.join(format!("{name}.script.yaml")), script_file(name)),
    ];
    // Nothing is written unless every file is new.
    for (path, _) in &files {
        if path.exists() {
            return Err(anyhow!(
                "{} exists already; `weft new` writes new files only (it was left as it is): give another name, or move the file away",
                path.display()
            ));
        }
    }
    for (path, text) in &files {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    }
    let agent = crate::store::shell_word(&files[0].0.display().to_string());
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "wrote {agent} (the agent) and {} (its model's replies); next:",
        files[1].0.display()
    )?;
    writeln!(out, "  weft check {agent}")?;
    writeln!(out, "  weft run {agent} \"What time is it?\"")?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The tutorial shows `examples/tutorial/hello.yaml` and `hello.script.yaml` as what
    /// `weft new hello` writes: they are.
    #[test]
    fn the_tutorials_starter_is_what_weft_new_writes() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tutorial");
        let read = |f: &str| std::fs::read_to_string(examples.join(f)).unwrap();
        assert_eq!(agent_file("hello"), read("hello.yaml"));
        assert_eq!(script_file("hello"), read("hello.script.yaml"));
    }

    #[test]
    fn names_are_letters_digits_dashes_and_underscores() {
        assert!(valid("hello") && valid("my-agent_2") && valid("7up"));
        assert!(!valid("") && !valid("-x") && !valid("a b") && !valid("a.b") && !valid("é"));
    }
}
