//! `weft memory add|list|search|forget` through the binary, on SQLite and PostgreSQL: memories
//! are listed newest first a page at a time, found and forgotten by their ids, secrets never
//! reach the store, and one user's memories are never listed, found or forgotten by another.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn weft(dir: &Path, db: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .args(["--db", db])
        .current_dir(dir)
        .env_remove("WEFT_DB")
        .env("CRM_TOKEN", "crm-5ecret-value")
        .output()
        .unwrap()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8(o.stdout).unwrap()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn add(dir: &Path, db: &str, text: &str, who: &[&str]) -> i64 {
    let mut args = vec!["memory", "add", text, "--json"];
    args.extend_from_slice(who);
    let v: Value = serde_json::from_str(&ok(weft(dir, db, &args))).unwrap();
    v["id"].as_i64().unwrap()
}

fn list(dir: &Path, db: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["memory", "list", "--json"];
    args.extend_from_slice(extra);
    json_lines(&ok(weft(dir, db, &args)))
}

fn texts(items: &[Value]) -> Vec<&str> {
    items.iter().map(|v| v["text"].as_str().unwrap()).collect()
}

fn scenario(dir: &Path, db: &str) {
    let first = add(
        dir,
        db,
        "Alice's favourite colour is teal",
        &["--user", "alice"],
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    let second = add(
        dir,
        db,
        "Alice flies to Lisbon on Friday",
        &["--user", "alice"],
    );
    let bobs = add(dir, db, "Bob's favourite colour is red", &["--user", "bob"]);
    add(
        dir,
        db,
        "The shop opens at nine",
        &["--scope", "agent:shop"],
    );

    // Newest first, with ids; a page at a time.
    let all = list(dir, db, &["--user", "alice"]);
    assert_eq!(
        texts(&all),
        [
            "Alice flies to Lisbon on Friday",
            "Alice's favourite colour is teal"
        ]
    );
    assert_eq!(all[0]["id"].as_i64(), Some(second));
    assert_eq!(
        (all[0]["scope"].as_str(), all[0]["owner"].as_str()),
        (Some("user"), Some("alice"))
    );
    let page = list(
        dir,
        db,
        &["--user", "alice", "--limit", "1", "--offset", "1"],
    );
    assert_eq!(page.len(), 1);
    assert_eq!(page[0]["id"].as_i64(), Some(first));
    let text = ok(weft(dir, db, &["memory", "list", "--user", "alice"]));
    assert!(text.starts_with(&format!("{second}  20")), "{text}");
    assert!(
        text.contains("user:alice\n  Alice flies to Lisbon on Friday"),
        "{text}"
    );

    // Search: the user's own memories only.
    let hits = json_lines(&ok(weft(
        dir,
        db,
        &[
            "memory",
            "search",
            "favourite colour",
            "--user",
            "alice",
            "--json",
        ],
    )));
    assert_eq!(texts(&hits), ["Alice's favourite colour is teal"]);
    assert_eq!(hits[0]["id"].as_i64(), Some(first));
    let text = ok(weft(
        dir,
        db,
        &["memory", "search", "colour", "--user", "alice"],
    ));
    assert!(
        text.starts_with(&format!(
            "{first}  user\n  Alice's favourite colour is teal"
        )),
        "{text}"
    );

    // Bob can neither list, nor find, nor forget Alice's memories.
    assert_eq!(
        texts(&list(dir, db, &["--user", "bob"])),
        ["Bob's favourite colour is red"]
    );
    let hits = json_lines(&ok(weft(
        dir,
        db,
        &[
            "memory",
            "search",
            "Alice teal Lisbon colour",
            "--user",
            "bob",
            "--json",
        ],
    )));
    assert_eq!(texts(&hits), ["Bob's favourite colour is red"]);
    let o = weft(
        dir,
        db,
        &["memory", "forget", &first.to_string(), "--user", "bob"],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("no memory {first} of user:bob")),
        "{o:?}"
    );
    assert_eq!(list(dir, db, &["--user", "alice"]).len(), 2);
    // Nor can the agent's or the public shelf reach them.
    let o = weft(
        dir,
        db,
        &[
            "memory",
            "forget",
            &first.to_string(),
            "--scope",
            "agent:shop",
            "--scope",
            "public",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(
        texts(&list(dir, db, &["--scope", "agent:shop"])),
        ["The shop opens at nine"]
    );

    // Alice forgets her own.
    let text = ok(weft(
        dir,
        db,
        &["memory", "forget", &first.to_string(), "--user", "alice"],
    ));
    assert_eq!(text, format!("forgot {first}\n"));
    assert_eq!(
        texts(&list(dir, db, &["--user", "alice"])),
        ["Alice flies to Lisbon on Friday"]
    );
    assert_eq!(
        list(dir, db, &["--user", "bob"])[0]["id"].as_i64(),
        Some(bobs)
    );

    // With --agent, the agent's secrets are redacted before the memory is stored.
    std::fs::write(
        dir.join("crm.yaml"),
        "name: crm\nmodel: scripted:crm.script.yaml\nsecrets:\n  crm_token: {env: CRM_TOKEN}\n",
    )
    .unwrap();
    let out: Value = serde_json::from_str(&ok(weft(
        dir,
        db,
        &[
            "memory",
            "add",
            "Carol's CRM key is crm-5ecret-value",
            "--user",
            "carol",
            "--agent",
            "crm.yaml",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(out["text"], "Carol's CRM key is [secret:crm_token]");
    let stored = list(dir, db, &["--user", "carol"]);
    assert_eq!(texts(&stored), ["Carol's CRM key is [secret:crm_token]"]);
    let hits = ok(weft(
        dir,
        db,
        &["memory", "search", "5ecret", "--user", "carol"],
    ));
    assert!(hits.starts_with("no memory matches"), "{hits}");

    // Bad input: refused with the reason, exit 2, nothing stored.
    for (args, says) in [
        (vec!["memory", "list"], "say whose memories"),
        (
            vec!["memory", "add", "x y", "--user", "a", "--scope", "public"],
            "one shelf",
        ),
        (
            vec!["memory", "add", "   ", "--user", "a"],
            "needs some text",
        ),
        (
            vec!["memory", "search", "x", "--scope", "users:a"],
            "--scope `users:a`",
        ),
        (
            vec!["memory", "list", "--user", "a", "--limit", "0"],
            "--limit",
        ),
    ] {
        let o = weft(dir, db, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{args:?}: {o:?}"
        );
    }
    let long = "word ".repeat(500);
    let o = weft(dir, db, &["memory", "add", &long, "--user", "dave"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("at most 2000 bytes"),
        "{o:?}"
    );
    assert!(list(dir, db, &["--user", "dave"]).is_empty());
    let o = weft(dir, db, &["memory", "list", "--user", "a"]);
    assert_eq!(ok(o), "no memories\n");
}

#[test]
fn memories_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("weft.db");
    scenario(dir.path(), db.to_str().unwrap());
}

#[test]
fn needs_postgres_memories_on_postgres() {
    let pg = common::Database::new("memory");
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path(), &pg.url);
}
