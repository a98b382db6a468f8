//! Property tests: random acyclic plans run every step exactly once, each after all the steps it
//! depends on, with no more than `max_parallel` calls in flight.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support as common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{Log, Recorder, limits, registry};
use proptest::prelude::*;
use serde_json::{Value, json};
use weft_core::{Event, Limits, SessionStatus, StepStatus};

/// A generated step: its explicit dependencies, the earlier steps whose output it reads, and
/// whether it may run in parallel.
#[derive(Clone, Debug)]
struct GenStep {
    depends_on: BTreeSet<usize>,
    reads: BTreeSet<usize>,
    parallel: Option<bool>,
    read_field: bool,
}

fn gen_plan() -> impl Strategy<Value = (Vec<GenStep>, usize)> {
    (1usize..40, 1usize..7).prop_flat_map(|(n, max_parallel)| {
        let steps: Vec<_> = (0..n)
            .map(|i| {
                let earlier = if i == 0 {
                    Just(BTreeSet::new()).boxed()
                } else {
                    proptest::collection::btree_set(0..i, 0..=i.min(3)).boxed()
                };
                let earlier2 = if i == 0 {
                    Just(BTreeSet::new()).boxed()
                } else {
                    proptest::collection::btree_set(0..i, 0..=i.min(3)).boxed()
                };
                (
                    earlier,
                    earlier2,
                    prop_oneof![Just(None), Just(Some(true)), Just(Some(false))],
                    any::<bool>(),
                )
                    .prop_map(|(depends_on, reads, parallel, read_field)| {
                        GenStep {
                            depends_on,
                            reads,
                            parallel,
                            read_field,
                        }
                    })
            })
            .collect();
        (steps, Just(max_parallel))
    })
}

fn to_plan(steps: &[GenStep]) -> Value {
    Value::Array(
        steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut call = serde_json::Map::new();
                call.insert("_id".into(), json!(format!("s{i}")));
                call.insert("_tool".into(), json!("rec"));
                call.insert("n".into(), json!(i));
                call.insert("_outputPath".into(), json!(format!("†state.s{i}")));
                if !s.depends_on.is_empty() {
                    call.insert(
                        "_dependsOn".into(),
                        json!(
                            s.depends_on
                                .iter()
                                .map(|j| format!("s{j}"))
                                .collect::<Vec<_>>()
                        ),
                    );
                }
                for j in &s.reads {
                    let r = if s.read_field {
                        format!("†state.s{j}.n")
                    } else {
                        format!("†state.s{j}")
                    };
                    call.insert(format!("in{j}"), json!(r));
                }
                if let Some(p) = s.parallel {
                    call.insert("_parallel".into(), json!(p));
                }
                Value::Object(call)
            })
            .collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_acyclic_plans_run_every_step_once_after_its_dependencies(
        (steps, max_parallel) in gen_plan(),
        tool_parallel in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let log = Arc::new(Log::default());
        let reg = registry(vec![Recorder::new("rec", &log).parallel(tool_parallel).sleep_ms(1)]);
        let lim = Limits { max_parallel, ..limits() };
        let ran = rt.block_on(common::run(reg, lim, to_plan(&steps), json!({})));

        prop_assert_eq!(ran.state.status(), SessionStatus::Completed);
        let calls = log.calls();
        prop_assert_eq!(calls.len(), steps.len());
        prop_assert!(log.max_inflight() <= max_parallel);

        let pos = |kind: &str, step: &str| -> Vec<usize> {
            ran.events
                .iter()
                .enumerate()
                .filter(|(_, e)| e.event.kind() == kind && common::step_of(&e.event) == Some(step))
                .map(|(k, _)| k)
                .collect()
        };
        for (i, s) in steps.iter().enumerate() {
            let id = format!("s{i}");
            prop_assert_eq!(ran.status_of(&id), StepStatus::Completed);
            let mine = log.calls_of(&id);
            prop_assert_eq!(mine.len(), 1, "step {} ran {} times", id, mine.len());
            let started = pos("step_started", &id);
            prop_assert_eq!(started.len(), 1);
            for &j in s.depends_on.union(&s.reads) {
                let dep = format!("s{j}");
                let done = pos("step_completed", &dep);
                prop_assert_eq!(done.len(), 1);
                prop_assert!(done[0] < started[0], "{} started before {} completed", id, dep);
                let dep_call = &log.calls_of(&dep)[0];
                prop_assert!(dep_call.end < mine[0].start, "{} overlapped its dependency {}", id, dep);
            }
            // Each reader saw the value its dependency wrote.
            let out = &ran.state.data()[id.as_str()];
            prop_assert_eq!(&out["n"], &json!(i));
            for j in &s.reads {
                let want = if s.read_field { json!(j) } else { ran.state.data()[format!("s{j}").as_str()].clone() };
                prop_assert_eq!(&out[format!("in{j}").as_str()], &want);
            }
        }
        // A step that is not parallel had its wave to itself.
        let parallel_of = |id: &str| {
            let i: usize = id[1..].parse().unwrap();
            steps[i].parallel.unwrap_or(tool_parallel)
        };
        for e in &ran.events {
            if let Event::WaveStarted { steps: wave, .. } = &e.event {
                prop_assert!(!wave.is_empty());
                prop_assert!(wave.len() <= max_parallel);
                if wave.len() > 1 {
                    prop_assert!(wave.iter().all(|s| parallel_of(s)), "{:?}", wave);
                }
            }
        }
    }
}
