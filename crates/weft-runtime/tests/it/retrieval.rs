//! Memories and documents found by meaning, with embeddings from a real embedding model: the
//! local llama.cpp server that `scripts/llm-server start` runs with all-MiniLM-L6-v2 (it prints
//! WEFT_TEST_EMBEDDINGS_URL). On SQLite and PostgreSQL; the same questions without embeddings
//! show what the text search alone finds, and the same store with a dead endpoint shows search
//! still working by text.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::agents as common;

use std::sync::Arc;

use common::{t, tool_calls};
use serde_json::{Value, json};
use weft_model::Embedder;
use weft_runtime::retrieval::Retriever;
use weft_store::{Kind, Knowledge, NewEntry, Shelf, SqliteStore, Store};

fn embedder() -> Arc<Embedder> {
    let url = common::service_var("WEFT_TEST_EMBEDDINGS_URL");
    Arc::new(Embedder::new(&url, "all-MiniLM-L6-v2", None).unwrap())
}

fn memory(text: &str) -> NewEntry {
    NewEntry {
        text: text.into(),
        source: String::new(),
        position: 0,
        embedding: None,
    }
}

const ALICE: &[&str] = &[
    "I am allergic to peanuts and carry an adrenaline pen.",
    "My daughter Lena turns seven on the third of March.",
    "I drive a blue Volvo estate with a roof box.",
    "My favourite composer is Sibelius.",
    "The office wifi password changes every Monday.",
];

/// (question with no word of its memory, the memory it should find)
const MEANING: &[(&str, &str)] = &[
    ("Which foods must I keep away from?", "peanuts"),
    ("When is my child's birthday party?", "Lena"),
    ("What kind of vehicle do I own?", "Volvo"),
    ("Who writes the music I love most?", "Sibelius"),
];

async fn memories_are_found_by_meaning<S: Knowledge>(store: Arc<S>) {
    let with = Retriever::new(Arc::clone(&store), Some(embedder()));
    let without = Retriever::new(Arc::clone(&store), None);
    let (alice, bob) = (Shelf::user("alice"), Shelf::user("bob"));
    with.add(
        Kind::Memory,
        &alice,
        ALICE.iter().map(|t| memory(t)).collect(),
        false,
        1,
    )
    .await
    .unwrap();
    with.add(
        Kind::Memory,
        &bob,
        vec![memory("I am allergic to shellfish and must avoid prawns.")],
        false,
        1,
    )
    .await
    .unwrap();

    // The vectors were stored, and a search by vector alone ranks the memory asked about first.
    let model = "all-MiniLM-L6-v2";
    for (question, wanted) in MEANING {
        let q = embedder().embed(&[question]).await.unwrap().pop().unwrap();
        let near = store
            .search_vector(Kind::Memory, std::slice::from_ref(&alice), model, &q, 3)
            .await
            .unwrap();
        assert!(
            near.first().is_some_and(|h| h.text.contains(wanted)),
            "{question:?}: by meaning, the first hit should mention {wanted}: {near:#?}"
        );
        assert!(
            near[0].score > 0.2 && near[0].score <= 1.0 + 1e-6,
            "{near:#?}"
        );
        // Fused with the text ranking, the memory is still first; without embeddings, the text
        // search does not find it first (the question shares no word with it).
        let fused = with
            .search(Kind::Memory, std::slice::from_ref(&alice), question, 3)
            .await
            .unwrap();
        assert!(
            fused.first().is_some_and(|h| h.text.contains(wanted)),
            "{question:?}: fused, the first hit should mention {wanted}: {fused:#?}"
        );
        let text_only = without
            .search(Kind::Memory, std::slice::from_ref(&alice), question, 3)
            .await
            .unwrap();
        assert!(
            !text_only.first().is_some_and(|h| h.text.contains(wanted)),
            "{question:?}: text search alone was not expected to find it: {text_only:#?}"
        );
    }

    // Keywords still count: an exact word finds its memory first, with or without embeddings.
    for r in [&with, &without] {
        let hits = r
            .search(
                Kind::Memory,
                std::slice::from_ref(&alice),
                "wifi password",
                2,
            )
            .await
            .unwrap();
        assert!(hits[0].text.contains("wifi"), "{hits:#?}");
    }

    // Isolation: Bob's allergy is the nearest memory to an allergy question, but never reaches
    // Alice's search; and Bob finds only his own.
    let hits = with
        .search(
            Kind::Memory,
            std::slice::from_ref(&alice),
            "What am I allergic to?",
            10,
        )
        .await
        .unwrap();
    assert!(
        hits.iter().all(|h| !h.text.contains("shellfish")),
        "{hits:#?}"
    );
    assert!(hits[0].text.contains("peanuts"), "{hits:#?}");
    let q = embedder()
        .embed(&["What am I allergic to?"])
        .await
        .unwrap()
        .pop()
        .unwrap();
    let bobs = store
        .search_vector(Kind::Memory, std::slice::from_ref(&bob), model, &q, 10)
        .await
        .unwrap();
    assert_eq!(bobs.len(), 1, "{bobs:#?}");
    assert!(bobs[0].text.contains("shellfish"));

    // Vectors are compared only with vectors of the model that made them.
    let other = store
        .search_vector(
            Kind::Memory,
            std::slice::from_ref(&alice),
            "another-model",
            &q,
            10,
        )
        .await
        .unwrap();
    assert!(other.is_empty(), "{other:#?}");

    // A dead endpoint: a search still answers by text; an addition stores nothing and says why.
    let dead = Retriever::new(
        Arc::clone(&store),
        Some(Arc::new(
            Embedder::new("http://127.0.0.1:9/v1", model, None).unwrap(),
        )),
    );
    let hits = dead
        .search(Kind::Memory, std::slice::from_ref(&alice), "Volvo", 3)
        .await
        .unwrap();
    assert!(hits[0].text.contains("Volvo"), "{hits:#?}");
    let e = dead
        .add(Kind::Memory, &alice, vec![memory("never stored")], false, 2)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("WEFT_EMBEDDINGS_URL") && e.contains("127.0.0.1:9"),
        "{e}"
    );
    let found = without
        .search(
            Kind::Memory,
            std::slice::from_ref(&alice),
            "never stored",
            5,
        )
        .await
        .unwrap();
    assert!(found.iter().all(|h| h.text != "never stored"), "{found:#?}");
}

/// Document chunks found by meaning cite their source and position.
async fn documents_are_found_by_meaning<S: Knowledge>(store: Arc<S>) {
    let with = Retriever::new(Arc::clone(&store), Some(embedder()));
    let shelf = Shelf::public();
    let chunk = |position: i64, text: &str| NewEntry {
        text: text.into(),
        source: "handbook.md".into(),
        position,
        embedding: None,
    };
    with.add(
        Kind::Document,
        &shelf,
        vec![
            chunk(
                1,
                "Refunds are paid within 14 days of the returned item arriving.",
            ),
            chunk(9, "Parcels to Norway take about a week by road."),
            chunk(
                17,
                "Staff may work from home on Fridays with their manager's consent.",
            ),
        ],
        true,
        1,
    )
    .await
    .unwrap();
    let hits = with
        .search(
            Kind::Document,
            std::slice::from_ref(&shelf),
            "How long until I get my money back?",
            1,
        )
        .await
        .unwrap();
    assert_eq!(
        (hits[0].source.as_str(), hits[0].position),
        ("handbook.md", 1),
        "{hits:#?}"
    );
    let hits = with
        .search(
            Kind::Document,
            std::slice::from_ref(&shelf),
            "Can employees do remote work?",
            1,
        )
        .await
        .unwrap();
    assert_eq!(hits[0].position, 17, "{hits:#?}");
}

/// Through an agent: a memory stored by `remember` in one session (its vector made by the
/// runtime's embedder) is found by `recall` in the user's next session from a question that
/// shares no word with it; the tool's result is what goes back to the model.
async fn an_agent_recalls_by_meaning<S: Store>(store: Arc<S>) {
    let run = async |user: &str, react: Vec<weft_model::ScriptedReply>| -> Vec<String> {
        common::react_tool_results(
            &store,
            user,
            "name: desk\nmode: react\ntools:\n  - builtin: remember\n  - builtin: recall\n",
            react,
            Some(embedder()),
        )
        .await
    };
    run(
        "carol",
        vec![
            tool_calls(&[("remember", json!({"text": "Carol is allergic to peanuts."}))]),
            tool_calls(&[(
                "remember",
                json!({"text": "Carol's flat is on the fourth floor."}),
            )]),
            t("Noted."),
        ],
    )
    .await;
    let seen = run(
        "carol",
        vec![
            tool_calls(&[("recall", json!({"query": "which foods must be avoided"}))]),
            t("Peanuts."),
        ],
    )
    .await;
    let found: Value = serde_json::from_str(&seen[0]).unwrap();
    assert_eq!(
        found["memories"][0]["text"], "Carol is allergic to peanuts.",
        "{found}"
    );
}

#[tokio::test]
async fn needs_embeddings_memories_and_documents_are_found_by_meaning_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("weft.db")).await.unwrap());
    memories_are_found_by_meaning(Arc::clone(&store)).await;
    documents_are_found_by_meaning(Arc::clone(&store)).await;
    an_agent_recalls_by_meaning(store).await;
}

mod needs_postgres {
    use super::*;

    #[tokio::test]
    async fn needs_embeddings_memories_and_documents_are_found_by_meaning() {
        let mut pg = common::PgSchemas::new("weft_retrieval");
        let store = pg.store().await;
        memories_are_found_by_meaning(Arc::clone(&store)).await;
        documents_are_found_by_meaning(Arc::clone(&store)).await;
        an_agent_recalls_by_meaning(Arc::clone(&store)).await;
        store.close().await;
    }
}
