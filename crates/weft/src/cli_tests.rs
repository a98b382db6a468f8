//! The command line as people meet it: every command weft tells them to type parses, every
//! argument is described, and what the help says about exit codes is the same everywhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use clap::error::ErrorKind;

/// Every `.rs` file under the workspace's crates' `src` directories.
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for c in std::fs::read_dir(&crates).unwrap() {
        let src = c.unwrap().path().join("src");
        if src.is_dir() {
            walk(&src, &mut out);
        }
    }
    out
}

/// The commands a text names in backticks (`weft ...`), as argument lists: format placeholders
/// (`{id}`) and shell notation (`[...]`, `A|B` alternatives, pipes, redirections) turned into
/// what a person would type.
fn hints_in(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 0 || !part.starts_with("weft ") {
            continue;
        }
        let shown = part.replace("\\\"", "\"");
        // A placeholder glued to a word (`worker{}`) is an optional flag (`--db X`): left out.
        let mut line = String::new();
        let mut chars = shown.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '{' {
                let glued = line.ends_with(|c: char| !c.is_whitespace());
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                if !glued {
                    line.push('X');
                }
            } else {
                line.push(c);
            }
        }
        let line = line.split(" | ").next().unwrap_or_default();
        let line = line.split(" > ").next().unwrap_or_default();
        let words = shell_words(line);
        // `weft ARGS`, `weft <label>: ...`: a shape, not a command.
        if !words
            .get(1)
            .is_some_and(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '|'))
        {
            continue;
        }
        let words: Vec<String> = words
            .into_iter()
            .filter(|w| w != "...")
            .map(|w| {
                w.trim_start_matches('[')
                    .trim_end_matches("...")
                    .trim_end_matches(']')
                    .to_owned()
            })
            .filter(|w| !w.is_empty())
            .collect();
        // `add|list` alternatives: each is a command of its own.
        let mut variants = vec![Vec::new()];
        for w in &words {
            let alts: Vec<&str> = if w.starts_with('-') || w.contains(' ') {
                vec![w.as_str()]
            } else {
                w.split('|').collect()
            };
            variants = variants
                .into_iter()
                .flat_map(|v: Vec<String>| {
                    alts.iter().map(move |a| {
                        let mut v = v.clone();
                        v.push((*a).to_owned());
                        v
                    })
                })
                .collect();
        }
        out.extend(variants.into_iter().map(|v| (part.to_owned(), v)));
    }
    out
}

/// Splits on spaces, keeping "quoted text" together.
fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' | '\'' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

#[test]
fn every_command_a_message_names_parses() {
    let mut checked = 0;
    let mut bad = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (shown, args) in hints_in(&text) {
            checked += 1;
            // A hint may leave out what the person fills in; it may not name a command or a
            // flag that does not exist.
            // A flag named last may leave out its value.
            let flag_last = args.last().is_some_and(|a| a.starts_with("--"));
            if let Err(e) = crate::parse_from(&args)
                && !matches!(
                    e.kind(),
                    ErrorKind::MissingRequiredArgument
                        | ErrorKind::MissingSubcommand
                        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                        | ErrorKind::DisplayHelp
                )
                && !(flag_last && e.kind() == ErrorKind::InvalidValue)
            {
                bad.push(format!(
                    "{}: `{shown}` ({}): {}",
                    file.display(),
                    args.join(" "),
                    e.kind()
                ));
            }
        }
    }
    assert!(checked > 50, "only {checked} hints found");
    assert!(bad.is_empty(), "hints that do not run:\n{}", bad.join("\n"));
}

#[test]
fn a_hint_naming_a_command_that_does_not_exist_is_caught() {
    let found = hints_in(
        "watch it with `weft sessions follow{} {id}`; or `weft memory add|lisst X`; `weft ARGS`",
    );
    let failing: Vec<String> = found
        .iter()
        .filter(|(_, args)| crate::parse_from(args).is_err())
        .map(|(_, args)| args.join(" "))
        .collect();
    assert_eq!(
        failing,
        ["weft sessions follow X", "weft memory lisst X"],
        "{found:?}"
    );
}

/// Every command and every argument has a description in `--help`.
#[test]
fn every_command_and_argument_is_described() {
    fn visit(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            if a.is_hide_set() || ["help", "version"].contains(&a.get_id().as_str()) {
                continue;
            }
            if a.get_help().is_none() && a.get_long_help().is_none() {
                missing.push(format!("{path} {}", a.get_id()));
            }
        }
        for s in cmd.get_subcommands() {
            let p = format!("{path} {}", s.get_name());
            if s.get_name() != "help" && s.get_about().is_none() {
                missing.push(p.clone());
            }
            visit(s, &p, missing);
        }
    }
    let mut missing = Vec::new();
    let mut cmd = crate::cli();
    cmd.build();
    visit(&cmd, "weft", &mut missing);
    assert!(missing.is_empty(), "undescribed:\n{}", missing.join("\n"));
}

/// `--db`, `--durability` and `--log-level` are shown under "Global options", apart from a
/// command's own.
#[test]
fn global_options_are_shown_apart() {
    let mut cmd = crate::cli();
    cmd.build();
    let run = cmd
        .find_subcommand_mut("run")
        .unwrap()
        .render_long_help()
        .to_string();
    let globals = run.find("Global options:").expect(&run);
    assert!(run[globals..].contains("--db"), "{run}");
    assert!(!run[..globals].contains("--db"), "{run}");
}

/// `--db` and `--durability` are listed only on the commands that open a store, `--log-level`
/// on all but `schema` and `completions`; all three are still accepted before or after any
/// command.
#[test]
fn global_options_are_listed_only_where_they_apply() {
    fn visit(cmd: &clap::Command, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
        let help = cmd.clone().render_long_help().to_string();
        out.push((path.clone(), help));
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            path.push(sub.get_name().to_owned());
            visit(sub, path, out);
            path.pop();
        }
    }
    let mut cmd = crate::cli();
    cmd.build();
    let mut helps = Vec::new();
    visit(&cmd, &mut Vec::new(), &mut helps);
    let under = |path: &[String], list: &[&[&str]]| {
        list.iter()
            .any(|p| path.len() >= p.len() && path.iter().zip(p.iter()).all(|(a, b)| a == b))
    };
    let mut wrong = Vec::new();
    for (path, help) in &helps {
        let name = format!("weft {}", path.join(" "));
        let store = !under(path, crate::WITHOUT_STORE);
        let logs = !under(path, crate::WITHOUT_LOGS);
        for (flag, want) in [
            ("--db", store),
            ("--durability", store),
            ("--log-level", logs),
        ] {
            if help.contains(flag) != want {
                wrong.push(format!(
                    "{name}: {flag} {}",
                    if want { "missing" } else { "listed" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The ones that must not list them, by name (the lists above could be wrong too).
    for path in [
        &["schema"][..],
        &["completions"],
        &["check"],
        &["plan", "check"],
    ] {
        let (_, help) = helps.iter().find(|(p, _)| p == path).unwrap();
        assert!(!help.contains("--db"), "{path:?}: {help}");
    }
    let (_, run) = helps.iter().find(|(p, _)| p == &["run"]).unwrap();
    assert!(
        run.contains("--durability") && run.contains("--log-level"),
        "{run}"
    );
    // `weft help schema` as `weft schema --help`.
    let e = crate::parse_from(["weft", "help", "schema"]).unwrap_err();
    assert!(e.to_string().contains("--process"), "{e}");
    assert!(!e.to_string().contains("--db"), "{e}");
    // Still accepted before and after the command.
    for args in [
        &["weft", "--db", "x.db", "run", "a.yaml", "t"][..],
        &["weft", "run", "a.yaml", "t", "--db", "x.db"],
        &["weft", "schema", "--db", "x.db"],
        &[
            "weft",
            "--log-level",
            "debug",
            "sessions",
            "list",
            "--db",
            "x.db",
        ],
    ] {
        let cli = crate::parse_from(args.iter().copied()).unwrap();
        assert_eq!(cli.db.as_deref(), Some("x.db"), "{args:?}");
    }
}

#[test]
fn a_misspelt_command_gets_a_suggestion() {
    let e = crate::parse_from(["weft", "rn"]).unwrap_err();
    assert!(e.to_string().contains("'run'"), "{e}");
}

/// The exit codes are listed once and shown by every command that drives a session.
#[test]
fn exit_codes_are_the_same_everywhere() {
    let mut cmd = crate::cli();
    cmd.build();
    for name in ["run", "answer", "resume"] {
        let h = cmd
            .find_subcommand(name)
            .unwrap()
            .clone()
            .render_long_help()
            .to_string();
        assert!(h.contains(crate::EXIT_CODES.trim()), "{name}:\n{h}");
    }
    for code in ["0 ", "1 ", "2 ", "3 ", "4 ", "130 "] {
        assert!(
            crate::EXIT_CODES.contains(&format!("  {code}")),
            "{code}: {}",
            crate::EXIT_CODES
        );
    }
}
