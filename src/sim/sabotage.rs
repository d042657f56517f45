//! Every invariant can fail: each test sabotages the product in the one way its invariant exists to
//! catch ([`crate::sabotage::Sabotage`]) and searches a fixed range of seeds for a schedule in which
//! the oracle reports exactly that invariant, on a seed the product as it is passes. A range with no
//! such schedule fails the test, so a shift of the schedules cannot make it pass vacuously
//! (docs/simulation.md, "Sabotage").

use std::ops::Range;

use super::{
    invariants::Invariant,
    run, run_sabotaged,
    scenario::{Event, Scenario},
};
use crate::{api::GuardPolicy, sabotage::Sabotage};

/// Runs the sabotaged product on the seeds of `seeds` whose world `fits`, until the oracle reports
/// `invariant` on one the product as it is passes; returns that seed.
fn shown(sabotage: Sabotage, invariant: Invariant, seeds: Range<u64>, fits: fn(&Scenario) -> bool) -> u64 {
    let search = std::thread::Builder::new().stack_size(crate::WORKER_STACK).spawn(move || {
        let mut other = Vec::new();
        for seed in seeds.clone().filter(|seed| fits(&Scenario::generate(*seed))) {
            let sabotaged = run_sabotaged(seed, sabotage);
            match sabotaged.broken {
                Some(broken) if broken == invariant && run(seed).failure.is_none() => return Ok(seed),
                Some(broken) => other.push((seed, broken)),
                None => {}
            }
        }
        Err(format!("no seed of {seeds:?} shows {sabotage:?} as {invariant:?}; other invariants broken: {other:?}"))
    });
    match search.map(|handle| handle.join()) {
        Ok(Ok(Ok(seed))) => seed,
        Ok(Ok(Err(why))) => panic!("{why}"),
        _ => panic!("the search for {sabotage:?} could not run"),
    }
}

fn powered_on_after_release(s: &Scenario) -> bool {
    s.events.iter().any(|(_, e)| matches!(e, Event::PowerOn | Event::PowerGlitch { .. } | Event::OutletsOnByHand))
}

#[test]
fn sabotage_guard() {
    let fits = |s: &Scenario| s.spec.guard == GuardPolicy::Enforce && powered_on_after_release(s);
    shown(Sabotage::GuardSendsNothing, Invariant::Guard, 0..400, fits);
}
