//! The simulator's fixed budget in `make test` (`cargo test sim`): every seed below and every seed
//! `known` lists, every time, on every core. `make soak SEEDS=N` runs more.

use std::io::Write as _;

use super::{
    known::{COVERAGE, KNOWN_FAILURES, Kept, REGRESSIONS},
    reaching,
};

/// Seeds explored by `cargo test sim`.
const SEEDS: std::ops::Range<u64> = 0..1000;

/// Runs `seeds` on every core; returns the failures that are not known ones (and the known ones
/// that pass now), and prints what was explored.
fn explore(seeds: Vec<u64>) -> Vec<String> {
    let known: Vec<u64> = KNOWN_FAILURES.iter().map(|(seed, ..)| *seed).collect();
    // The shape each kept seed must still reach (docs/simulation.md, "Seeds that keep their meaning").
    let kept = KNOWN_FAILURES.iter().chain(REGRESSIONS).chain(COVERAGE);
    let shapes: std::collections::BTreeMap<u64, super::reach::Shape> = kept
        .filter_map(|(seed, kept, _)| match kept {
            Kept::Reaches(shape) => Some((*seed, *shape)),
            Kept::Moved(_) => None,
        })
        .collect();
    let shapes = &shapes;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = std::time::Instant::now();
    let results: Vec<_> = std::thread::scope(|scope| {
        let chunks: Vec<Vec<u64>> =
            (0..workers).map(|w| seeds.iter().copied().skip(w).step_by(workers).collect()).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                std::thread::Builder::new()
                    .stack_size(crate::WORKER_STACK)
                    .spawn_scoped(scope, move || {
                        let run = |seed: u64| {
                            let shape = shapes.get(&seed).copied();
                            reaching(seed, shape.as_slice())
                        };
                        chunk.into_iter().map(run).collect::<Vec<_>>()
                    })
                    .expect("a thread for the simulator")
            })
            .collect();
        // A worker that panicked must not take its seeds' verdicts with it.
        handles.into_iter().flat_map(|h| h.join().expect("a simulator worker panicked")).collect()
    });
    let scenarios: Vec<_> = seeds.iter().map(|seed| super::scenario::Scenario::generate(*seed)).collect();
    let ipmi = scenarios.iter().filter(|s| s.ipmi.is_some()).count();
    let levels = scenarios.iter().filter(|s| s.levels.is_some()).count();
    let shared = scenarios.iter().filter(|s| s.levels.is_some_and(|l| l.shared.is_some())).count();
    let other_fenced = scenarios.iter().filter(|s| s.levels.is_some_and(|l| l.other_fenced)).count();
    let (mut calls, mut crashes, mut faults, mut level_releases) = (0u64, 0u64, 0u64, 0u64);
    let (mut acknowledged, mut kept, mut looks, mut again, mut after_look) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut shared_offs, mut guard_shared_offs, mut guard_shared_seeds) = (0u64, 0u64, Vec::new());
    let mut failures = Vec::new();
    for outcome in &results {
        calls += outcome.stats.calls;
        crashes += outcome.stats.crashes;
        faults += outcome.stats.faults;
        level_releases += outcome.stats.level_releases;
        acknowledged += outcome.stats.acknowledged_releases;
        kept += outcome.stats.kept_admissions;
        looks += outcome.stats.looks;
        again += outcome.stats.proven_again;
        after_look += outcome.stats.released_after_look;
        shared_offs += outcome.stats.shared_offs;
        guard_shared_offs += outcome.stats.shared_offs_after_release;
        if outcome.stats.shared_offs_after_release > 0 {
            guard_shared_seeds.push(outcome.seed);
        }
        if let Some(shape) = shapes.get(&outcome.seed)
            && !outcome.reached.contains(shape)
        {
            failures.push(format!(
                "seed {} was kept for {shape:?} and no longer reaches it: re-pick it (a soak names candidates)",
                outcome.seed
            ));
        }
        if !outcome.unknown_reasons.is_empty() {
            failures.push(format!(
                "seed {} published Events whose reason no table holds (add a row to words::event): {:?}",
                outcome.seed, outcome.unknown_reasons
            ));
        }
        match (&outcome.failure, known.contains(&outcome.seed)) {
            (Some(failure), false) => failures.push(failure.clone()),
            (None, true) => failures.push(format!(
                "seed {} is listed as a known failure but passes now: move it to REGRESSIONS",
                outcome.seed
            )),
            _ => {}
        }
    }
    guard_shared_seeds.sort_unstable();
    guard_shared_seeds.truncate(20);
    // Printed past the test harness's capture: the budget's numbers are part of every run's output.
    let _ = writeln!(
        std::io::stderr(),
        "sim: explored {} schedules ({ipmi} over IPMI, {levels} with a PDU level, {shared} of those with a shared outlet, {other_fenced} of those with its other node fenced too; {shared_offs} Offs to a shared outlet, {guard_shared_offs} after the release, in seeds {guard_shared_seeds:?} (the first 20)), {calls} calls, {crashes} crashes injected, {faults} faults, {level_releases} releases through a level, {acknowledged} attested on an acknowledgement, {kept} admitted on a kept verification, {looks} looks asked by an attestation ({again} found the machine, {after_look} of those proven off and released) in {:.1}s",
        results.len(),
        started.elapsed().as_secs_f64()
    );
    failures
}

#[test]
fn sim_every_seed_keeps_the_invariants() {
    let mut seeds: Vec<u64> = SEEDS.collect();
    let listed = KNOWN_FAILURES.iter().chain(REGRESSIONS).chain(COVERAGE);
    seeds.extend(listed.map(|(seed, ..)| *seed).filter(|seed| !SEEDS.contains(seed)));
    let failures = explore(seeds);
    assert!(failures.is_empty(), "{} seeds broke an invariant:\n{}", failures.len(), failures.join("\n"));
}

/// `make soak SEEDS=N [FROM=S]`: N more seeds, from S (default: right after the budget's).
#[test]
#[ignore = "a soak: make soak SEEDS=N"]
fn sim_soak() {
    let count: u64 = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let from: u64 = std::env::var("SIM_FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS.end);
    let failures = explore((from..from + count).collect());
    assert!(failures.is_empty(), "{} seeds broke an invariant:\n{}", failures.len(), failures.join("\n"));
}

/// `SIM_SHAPES=A,B SIM_FROM=X SIM_SEEDS=N cargo test --features sim --lib sim_candidates -- --ignored
/// --nocapture`: the seeds of the range that pass and reach each shape named (all without
/// SIM_SHAPES), up to five each: candidates for a kept seed that lost its shape.
#[test]
#[ignore = "a tool: names candidate seeds for shapes"]
fn sim_candidates() {
    let count: u64 = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2_000);
    let from: u64 = std::env::var("SIM_FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS.end);
    let wanted: Vec<super::reach::Shape> = match std::env::var("SIM_SHAPES") {
        Ok(names) => names
            .split(',')
            .map(|name| {
                let found = super::reach::Shape::ALL.iter().copied().find(|s| format!("{s:?}") == name);
                found.unwrap_or_else(|| panic!("no shape is called {name:?}"))
            })
            .collect(),
        Err(_) => super::reach::Shape::ALL.to_vec(),
    };
    let seeds: Vec<u64> = (from..from + count).collect();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let wanted = &wanted;
    let found: Vec<(u64, Vec<super::reach::Shape>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let chunk: Vec<u64> = seeds.iter().copied().skip(w).step_by(workers).collect();
                std::thread::Builder::new()
                    .stack_size(crate::WORKER_STACK)
                    .spawn_scoped(scope, move || {
                        let reach = |seed| {
                            let outcome = reaching(seed, wanted);
                            (seed, if outcome.failure.is_none() { outcome.reached } else { Vec::new() })
                        };
                        chunk.into_iter().map(reach).collect::<Vec<_>>()
                    })
                    .expect("a thread for the simulator")
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("a simulator worker panicked")).collect()
    });
    for shape in wanted {
        let mut seeds: Vec<u64> = found.iter().filter(|(_, r)| r.contains(shape)).map(|(seed, _)| *seed).collect();
        seeds.sort_unstable();
        seeds.truncate(5);
        println!("{shape:?}: {seeds:?}");
    }
}

/// `SIM_SEED=N cargo test --lib sim_one -- --ignored --nocapture`: one schedule and its story.
#[test]
#[ignore = "a tool: runs the seed in SIM_SEED"]
fn sim_one() {
    let seed = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    // SIM_SABOTAGE=<name>: the same seed on a sabotaged product (crate::sabotage).
    let sabotage = std::env::var("SIM_SABOTAGE").ok().map(|name| {
        let known = crate::sabotage::Sabotage::ALL.iter().copied().find(|s| format!("{s:?}") == name);
        known.unwrap_or_else(|| panic!("no sabotage is called {name:?}: {:?}", crate::sabotage::Sabotage::ALL))
    });
    let story = std::thread::Builder::new().stack_size(crate::WORKER_STACK).spawn(move || match sabotage {
        Some(sabotage) => super::story_sabotaged(seed, sabotage),
        None => super::story(seed),
    });
    println!("{}", story.expect("a thread for the seed").join().expect("the seed's story"));
}

/// The simulator's finalizer helper patches as kube-runtime's does (a JSON Patch `test` on the
/// finalizers only): a status written since the read does not stop it; a finalizer list changed
/// since does.
#[test]
fn the_finalizer_helper_tests_the_finalizers_only_as_kube_runtime_does() {
    use crate::{api::CoronerRemediationSpec, contract};
    let mut truth = super::world::Truth::new("coroner");
    truth.add_node_as("worker-1", "uuid-1", "boot-1", "Unknown", &[]);
    truth.create_remediation("r", "worker-1", &CoronerRemediationSpec::default());
    let read = truth.remediation("r").unwrap();
    truth.write_status("r", read.metadata.resource_version.as_deref(), &Default::default()).unwrap();
    truth.set_finalizer("r", read.metadata.finalizers.as_deref().unwrap_or_default(), true).unwrap();
    let with = truth.remediation("r").unwrap();
    assert_eq!(with.metadata.finalizers.as_deref(), Some(&[contract::FINALIZER.to_owned()][..]));
    // Added by someone else since the read: the list is not the one read.
    assert!(truth.set_finalizer("r", &[], true).is_err());
    // Another controller's finalizer added after ours: ours is still at the index read.
    let mut others = with.metadata.finalizers.clone().unwrap();
    truth.remediations.get_mut("r").unwrap().metadata.finalizers.as_mut().unwrap().push("other/finalizer".into());
    truth.delete_remediation("r");
    truth.set_finalizer("r", &others, false).unwrap();
    let left = truth.remediation("r").expect("the other finalizer holds it");
    assert_eq!(left.metadata.finalizers.as_deref(), Some(&["other/finalizer".to_owned()][..]));
    // Ours gone already: the test fails instead of removing someone else's.
    others = vec![contract::FINALIZER.to_owned()];
    assert!(truth.set_finalizer("r", &others, false).is_err());
}
