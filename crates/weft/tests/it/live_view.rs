//! The live view as a person sees it: `weft` runs under a pseudo-terminal (util-linux `script`),
//! and what it wrote is replayed through a terminal emulator (`vt100`), so the assertions are
//! about the final screen: steps whose lines changed in place, tool cards, the answer last.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

const ROWS: u16 = 60;
const COLS: u16 = 160;

/// Runs `weft ARGS` in `dir` on a terminal of ROWS x COLS; returns the raw bytes written to it
/// and the exit code.
fn on_terminal(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> (Vec<u8>, i32) {
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_weft"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    // `script -e` returns the command's exit code; stty gives the terminal a size.
    let inner = format!(
        "stty cols {COLS} rows {ROWS}; exec {} 2>&1",
        quoted.join(" ")
    );
    let mut c = Command::new("script");
    c.args(["-q", "-e", "-c", &inner, "/dev/null"])
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm-256color");
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("util-linux `script` is needed for this test: {e}"));
    (out.stdout, out.status.code().unwrap_or(-1))
}

/// The screen after replaying `bytes`: its non-empty lines, right-trimmed.
fn screen(bytes: &[u8]) -> Vec<String> {
    let size = |n: u16| std::num::NonZeroU16::new(n).unwrap();
    let mut p = vt100::Parser::new(size(ROWS), size(COLS), 0);
    p.process(bytes);
    p.screen()
        .rows(0, COLS)
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

fn has_colour(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    // An SGR sequence that sets a colour or an attribute, e.g. ESC[32m or ESC[1m.
    text.match_indices("\x1b[").any(|(i, _)| {
        let rest = &text[i + 2..];
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == ';'));
        n.is_some_and(|n| n > 0 && rest[n..].starts_with('m') && &rest[..n] != "0")
    })
}

fn position(lines: &[String], needle: &str) -> usize {
    lines
        .iter()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("`{needle}` is not on the screen:\n{}", lines.join("\n")))
}

fn examples(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for sub in ["scripts", "tools", "plans"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for f in std::fs::read_dir(src.join(sub)).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), dir.join(sub).join(f.file_name())).unwrap();
        }
    }
    for f in ["refund-desk.yaml", "weather-chat.yaml"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
}

#[test]
fn a_plan_run_shows_steps_in_place_tool_cards_and_the_answer_last() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    examples(d);
    let (bytes, code) = on_terminal(
        d,
        &[
            "run",
            "refund-desk.yaml",
            "I'd like a refund for my last order.",
            "--input",
            r#"{"customerId": "cust_123", "amount": 50.0}"#,
            "--db",
            "w.db",
        ],
        &[],
    );
    let lines = screen(&bytes);
    let all = lines.join("\n");
    assert_eq!(code, 0, "{all}");
    // Each step's line ends in its final state, once: it changed in place.
    for step in [
        "✓ billing checkBillingHistory done",
        "✓ refund issueRefund done",
    ] {
        assert_eq!(
            lines.iter().filter(|l| l.contains(step)).count(),
            1,
            "{step}:\n{all}"
        );
    }
    assert!(
        !all.contains("pending") && !all.contains("running"),
        "{all}"
    );
    // A card per tool call: tool, arguments, duration, a short result.
    let card = &lines[position(&lines, "✓ issueRefund {")];
    assert!(
        card.contains(r#"{"customerId":"cust_123","amount":50.0}"#)
            && card.contains(" ms → ")
            && card.contains("refund_cust_123_5000"),
        "{card}"
    );
    // The reviews, then the answer, then only the usage line.
    let answer = position(&lines, "Your refund of 50.00 has been processed");
    assert!(position(&lines, "answer review: ACCEPT") < answer, "{all}");
    assert!(position(&lines, "review: FINAL_RESPONSE") < answer, "{all}");
    assert_eq!(answer + 2, lines.len(), "{all}");
    assert!(lines[answer + 1].starts_with("usage: "), "{all}");
    assert!(has_colour(&bytes), "colour on a terminal");

    // NO_COLOR: the same view without colour.
    let (bytes, code) = on_terminal(
        d,
        &[
            "run",
            "refund-desk.yaml",
            "refund again",
            "--input",
            r#"{"customerId": "cust_123", "amount": 50.0}"#,
            "--db",
            "w.db",
        ],
        &[("NO_COLOR", "1")],
    );
    assert_eq!(code, 0);
    assert!(!has_colour(&bytes), "{}", String::from_utf8_lossy(&bytes));
    assert!(
        screen(&bytes)
            .join("\n")
            .contains("✓ refund issueRefund done")
    );
}

#[test]
fn a_react_run_shows_a_card_per_tool_call_and_the_answer_last() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    examples(d);
    let (bytes, code) = on_terminal(
        d,
        &[
            "run",
            "weather-chat.yaml",
            "Where is it sunnier, Lisbon or Oslo?",
            "--db",
            "w.db",
        ],
        &[],
    );
    let lines = screen(&bytes);
    let all = lines.join("\n");
    assert_eq!(code, 0, "{all}");
    // Both calls of the reply, each on its own card with its arguments and result.
    let lisbon = &lines[position(&lines, r#"✓ getWeather {"city":"Lisbon"}"#)];
    let oslo = &lines[position(&lines, r#"✓ getWeather {"city":"Oslo"}"#)];
    for card in [lisbon, oslo] {
        assert!(card.contains(" ms → {"), "{card}");
    }
    assert!(
        !all.contains("call_1"),
        "cards name the tool, not the call id:\n{all}"
    );
    let last_card =
        position(&lines, r#"{"city":"Lisbon"}"#).max(position(&lines, r#"{"city":"Oslo"}"#));
    // The answer comes after the cards, followed only by the usage line.
    let usage = position(&lines, "usage: ");
    assert_eq!(usage + 1, lines.len(), "{all}");
    assert!(
        usage >= last_card + 2,
        "an answer line between the cards and usage:\n{all}"
    );
    assert!(!lines[usage - 1].contains("getWeather"), "{all}");
    assert!(has_colour(&bytes));
}

#[test]
fn piped_the_view_is_plain_lines_without_colour() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    examples(d);
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "run",
            "weather-chat.yaml",
            "Lisbon or Oslo?",
            "--db",
            "w.db",
        ])
        .current_dir(d)
        .env_remove("WEFT_DB")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains('\x1b'),
        "no escape sequences when piped:\n{err}"
    );
    assert!(err.contains(r#"✓ getWeather {"city":"Lisbon"}"#), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("getWeather"));
}
