//! Every invariant can fail: each test sabotages the product in the one way its invariant exists to
//! catch ([`crate::sabotage::Sabotage`]) and searches a fixed range of seeds for a schedule in which
//! the oracle reports exactly that invariant, on a seed the product as it is passes. A range with no
//! such schedule fails the test, so a shift of the schedules cannot make it pass vacuously
//! (docs/simulation.md, "Sabotage").

use std::ops::Range;

use super::{
    invariants::Invariant,
    run, run_sabotaged,
    scenario::{BmcKind, Death, Event, Expect, Scenario},
};
use crate::{
    api::{FenceAction, GuardPolicy},
    sabotage::Sabotage,
};

/// Runs the sabotaged product on the seeds of `seeds` whose world `fits`, until the oracle reports
/// `invariant` on one the product as it is passes; returns that seed.
fn shown(sabotage: Sabotage, invariant: Invariant, seeds: Range<u64>, fits: fn(&Scenario) -> bool) -> u64 {
    let search = std::thread::Builder::new().stack_size(crate::WORKER_STACK).spawn(move || {
        let mut other = Vec::new();
        let started = std::time::Instant::now();
        for seed in seeds.clone().filter(|seed| fits(&Scenario::generate(*seed))) {
            let sabotaged = run_sabotaged(seed, sabotage);
            match sabotaged.broken {
                Some(broken) if broken == invariant && run(seed).failure.is_none() => {
                    eprintln!(
                        "{sabotage:?}: the oracle reports {invariant:?} on seed {seed} of {seeds:?} ({:.1}s)",
                        started.elapsed().as_secs_f64()
                    );
                    return Ok(seed);
                }
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

fn has(s: &Scenario, wanted: fn(&Event) -> bool) -> bool {
    s.events.iter().any(|(_, e)| wanted(e))
}

fn any(_: &Scenario) -> bool {
    true
}

#[test]
fn sabotage_bmc_proof_broken_run() {
    let fits = |s: &Scenario| s.levels.is_none() && matches!(s.bmc, BmcKind::Slow | BmcKind::Flaky);
    shown(Sabotage::BrokenRunAccepted, Invariant::BmcProof, 0..2000, fits);
}

#[test]
fn sabotage_bmc_proof_resumed_across_a_crash() {
    let fits = |s: &Scenario| s.levels.is_none() && s.faults.crash_before + s.faults.crash_after > 0.0;
    shown(Sabotage::ProofResumed, Invariant::BmcProof, 0..2000, fits);
}

#[test]
fn sabotage_level_proof() {
    let fits = |s: &Scenario| s.levels.is_some_and(|l| l.outlets == 2);
    shown(Sabotage::PartialLevel, Invariant::LevelProof, 0..4000, fits);
}

#[test]
fn sabotage_silent_at_release() {
    let fits = |s: &Scenario| s.bmc == BmcKind::LiesOff || has(s, |e| matches!(e, Event::Heal | Event::ReplaceNode));
    shown(Sabotage::ReleaseUnchecked, Invariant::SilentAtRelease, 0..4000, fits);
}

#[test]
fn sabotage_attested_release() {
    let fits = |s: &Scenario| has(s, |e| matches!(e, Event::Attest { .. }));
    shown(Sabotage::AttestationIgnoresLife, Invariant::AttestedRelease, 0..4000, fits);
}

#[test]
fn sabotage_on_under_taint() {
    let fits =
        |s: &Scenario| s.spec.action == FenceAction::Reboot && has(s, |e| matches!(e, Event::ForeignOutOfService));
    shown(Sabotage::OnUnderTaint, Invariant::OnUnderTaint, 0..4000, fits);
}

#[test]
fn sabotage_foreign_taint_removed() {
    let fits = |s: &Scenario| has(s, |e| matches!(e, Event::ForeignOutOfService));
    shown(Sabotage::TaintsByKey, Invariant::ForeignTaintRemoved, 0..4000, fits);
}

#[test]
fn sabotage_release_undone() {
    shown(Sabotage::ReleaseUndone, Invariant::ReleaseUndone, 0..400, any);
}

#[test]
fn sabotage_mutation_intent() {
    shown(Sabotage::ResetBeforeIntent, Invariant::MutationIntent, 0..400, any);
}

#[test]
fn sabotage_mutation_target() {
    let fits = |s: &Scenario| s.bmc == BmcKind::MultiSystem;
    shown(Sabotage::ResetToFirstSystem, Invariant::MutationTarget, 0..2000, fits);
}

#[test]
fn sabotage_life_before_force_off() {
    let fits = |s: &Scenario| s.death == Death::LeaseOnly;
    shown(Sabotage::LeaseUnchecked, Invariant::LifeBeforeForceOff, 0..2000, fits);
}

#[test]
fn sabotage_one_fence_per_node() {
    let fits = |s: &Scenario| has(s, |e| matches!(e, Event::SecondRemediation));
    shown(Sabotage::SiblingsUnseen, Invariant::OneFencePerNode, 0..2000, fits);
}

#[test]
fn sabotage_approval_honoured() {
    let fits = |s: &Scenario| has(s, |e| matches!(e, Event::ApprovePowerOn)) && powered_on_after_release(s);
    shown(Sabotage::ApprovalUnseen, Invariant::ApprovalHonoured, 0..4000, fits);
}

#[test]
fn sabotage_succeeded() {
    // A fence that failed and is made to prove again by an attestation's look (A4) records new reasons.
    let fits = |s: &Scenario| has(s, |e| matches!(e, Event::Attest { .. }));
    shown(Sabotage::SucceededFlips, Invariant::Succeeded, 0..2000, fits);
}

#[test]
fn sabotage_guard() {
    let fits = |s: &Scenario| s.spec.guard == GuardPolicy::Enforce && powered_on_after_release(s);
    shown(Sabotage::GuardSendsNothing, Invariant::Guard, 0..400, fits);
}

#[test]
fn sabotage_fence_did_not_take_effect() {
    let fits = |s: &Scenario| s.bmc == BmcKind::LiesOff;
    shown(Sabotage::BootIdUnchecked, Invariant::FenceDidNotTakeEffect, 6000..12000, fits);
}

#[test]
fn sabotage_liveness() {
    let fits = |s: &Scenario| s.expect == Expect::Release;
    shown(Sabotage::ReleaseNeverWritten, Invariant::Liveness, 0..400, fits);
}

#[test]
fn sabotage_slot_bound() {
    let fits = |s: &Scenario| s.expect == Expect::Any;
    shown(Sabotage::DeadlineNeverPasses, Invariant::SlotBound, 0..400, fits);
}

#[test]
fn sabotage_outlet_only_off() {
    let fits = |s: &Scenario| s.levels.is_some();
    shown(Sabotage::OutletSwitchedOn, Invariant::OutletOnlyOff, 0..2000, fits);
}

#[test]
fn sabotage_shared_outlet() {
    let fits = |s: &Scenario| s.levels.is_some_and(|l| l.shared.is_some());
    shown(Sabotage::SharedUnchecked, Invariant::SharedOutlet, 0..8000, fits);
}
