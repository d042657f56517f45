//! The invariants, judged from the world's record only (docs/simulation.md): the answers devices
//! gave coroner and what they looked at, what coroner's writes did and when they took effect, what
//! the machines really did, who really added a taint, what the kubelets and people really did.
//! coroner's status is never read to decide what was released or what a proof rested on; the
//! pure rules it shares with the product are the gap and freshness functions of docs/safety.md.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;

use super::{
    exec::{Micros, SECOND, micros},
    scenario::{BmcKind, Expect, Scenario},
    world::{Adder, Answered, Caller, Life, Record, Truth, taint_key},
};
use crate::{
    api::{AcknowledgedReason, FenceAction, GuardPolicy, Phase, conditions},
    contract,
    fence::{self, Timing},
    taints::CoronerTaint,
};

/// How long a death or a leadership move may leave nobody leading: the leader Lease runs out (15 s),
/// then another replica takes it at its next try.
const LEADERLESS: Micros = 20 * SECOND;
/// A Lease renewal closer than this to a power action may not have reached coroner yet (its watch).
const UNSEEN_LEASE: Micros = 2 * SECOND;
/// The guard's slack beyond two intervals: one guard round (a reading with its retry, the status
/// write of the intent, the re-reads before the request, the ForceOff itself) on a healthy apiserver.
const GUARD_SLACK: Micros = 7 * SECOND;

/// The invariants of docs/simulation.md ("The invariants"), each a rule of docs/safety.md judged on
/// the world's record: what a [`Violation`] names, and what each `sabotage_*` test shows can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// 1: a release by BMC proof rests on a dense, fresh run of Off readings, spanning settle, of the
    /// node's machine, taken by the releasing process in its term, the machine truly off.
    BmcProof,
    /// 1: a release through a PDU level rests on readings of every outlet that truly feeds the machine.
    LevelProof,
    /// 1: a fence's release lands only on the Node admitted, silent when the releasing process last
    /// read it (docs/safety.md, "Silence at release").
    SilentAtRelease,
    /// 2: a release by attestation (A1, A2).
    AttestedRelease,
    /// 3: no `On` while an out-of-service taint is on the node.
    OnUnderTaint,
    /// 4: a taint coroner did not add is never removed.
    ForeignTaintRemoved,
    /// 4: coroner's own out-of-service taint stays while the fence still needs it.
    ReleaseUndone,
    /// 5: every BMC mutation has a persisted intent, at most one per intent per process.
    MutationIntent,
    /// 5: a mutation goes to the node's own machine, through the system whose identity the fence proved.
    MutationTarget,
    /// 5: no fence ForceOff reaches a node that showed life early enough for coroner to see it.
    LifeBeforeForceOff,
    /// 5: no second remediation of a node acts while an older one is not finished.
    OneFencePerNode,
    /// 5: no guard ForceOff reaches a machine whose Node carries the approval of its release (R3).
    ApprovalHonoured,
    /// 6: `Succeeded` never leaves `True` and never leaves `False`.
    Succeeded,
    /// 7: a released machine switched on is switched off or reported within the guard's bound (R2).
    Guard,
    /// 7: a node back with its pre-release bootID is reported `FenceDidNotTakeEffect`.
    FenceDidNotTakeEffect,
    /// 8: the outcome the answers allow, within the bound.
    Liveness,
    /// 8: no remediation holds a power-action slot past the bound.
    SlotBound,
    /// L4: only immediate Off is ever sent to an outlet.
    OutletOnlyOff,
    /// L6: an outlet Off never takes the power of a node a power action is not permitted on.
    SharedOutlet,
}

impl Invariant {
    pub fn says(self, why: impl Into<String>) -> Violation {
        Violation { invariant: self, why: why.into() }
    }
}

/// An invariant broken, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    pub why: String,
}

impl Violation {
    fn reworded(self, f: impl FnOnce(String) -> String) -> Self {
        Self { why: f(self.why), ..self }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.invariant, self.why)
    }
}

/// A release as the world's record shows it: which remediation's out-of-service taint (or pod
/// deletion) took effect on which node, and when.
#[derive(Clone, Debug)]
struct Release {
    /// The releasing remediation's UID and name (its owner annotation; the task that deleted pods).
    uid: String,
    remediation: String,
    node: String,
    at: Micros,
    /// Written by an attestation's task, not the fence's.
    attested: bool,
}

#[derive(Debug, Default)]
pub struct Checker {
    checked: usize,
    /// Mutations per (process, remediation, persisted intent).
    mutations: BTreeMap<(u32, String, String), u32>,
    releases: Vec<Release>,
    /// Power-ons (their record's index) the guard invariant has judged.
    judged: BTreeSet<usize>,
    /// A power-on whose guard bound has not run out yet: the run goes on until it is judged.
    pending: bool,
}

fn oos(key: &str) -> bool {
    key == CoronerTaint::OutOfService.key()
}

fn timing() -> Timing {
    Timing { request_timeout: super::exec::duration(super::REQUEST_TIMEOUT), read_retries: 1 }
}

fn is_attestation(task: &str) -> bool {
    task.starts_with("attestation/")
}

impl Checker {
    /// Judges the records written since the last call, and the deadlines that ran out.
    pub fn check(&mut self, truth: &Truth, scenario: &Scenario) -> Result<(), Violation> {
        while self.checked < truth.log.len() {
            let record = &truth.log[self.checked];
            self.checked += 1;
            self.judge(truth, scenario, record)?;
        }
        self.guard_enforced(truth, scenario)?;
        self.fence_did_not_take_effect_reported(truth, scenario)
    }

    /// How long after the guard's device can see a powered-on released machine the guard has, at
    /// most, to switch it off (`guard: Enforce`) or report it (`Alert`): two guard intervals and one
    /// guard round ([`GUARD_SLACK`]); a slow apiserver slows each of a round's calls, and each time a
    /// seed killed the leader or moved leadership around then adds the time to elect a new one.
    fn guard_bound(truth: &Truth, scenario: &Scenario, from: Micros) -> Micros {
        let bound = 2 * micros(super::GUARD_INTERVAL) + GUARD_SLACK + Self::slowdown(scenario);
        // Each election the window holds lengthens it, and may bring another death into it.
        let mut elections = 0;
        loop {
            let until = from + bound + (elections + 1) * LEADERLESS;
            let held = truth.disruptions.iter().filter(|at| **at >= from - LEADERLESS && **at <= until).count() as i64;
            if held <= elections {
                return bound + elections * LEADERLESS;
            }
            elections = held;
        }
    }

    /// What a slow apiserver adds to a bound that waits on a reconcile: six slow answers, when the
    /// seed slows it.
    fn slowdown(scenario: &Scenario) -> Micros {
        let slow_api = scenario.faults.slow > 0.0
            || scenario.events.iter().any(|(_, event)| matches!(event, super::scenario::Event::SlowApi { .. }));
        if slow_api { 6 * scenario.faults.slow_latency } else { 0 }
    }

    /// Until when a release stands (docs/safety.md, "After the release"): coroner ends it to power the
    /// machine on (its out-of-service taint taken off, or its `On` sent), the remediation is deleted,
    /// or the node reports `Ready=True`. A taint removed by someone else does not end it. (A release
    /// that took effect after its remediation's deletion began ends at once.)
    fn release_end(truth: &Truth, release: &Release) -> Micros {
        let mut end = Micros::MAX;
        for record in &truth.log {
            let at = match record {
                Record::NodeWrite { at, by, before, after, before_annotations, node, .. }
                    if *at > release.at
                        && *node == release.node
                        && by.task == release.remediation
                        && owner_of(before_annotations).as_deref() == Some(release.uid.as_str())
                        && before.iter().any(|t| {
                            oos(&t.key)
                                && !after.iter().any(|a| taint_key(a) == taint_key(t))
                                && matches!(truth.provenance.get(&taint_key(t)), Some(Adder::Coroner { .. }))
                        }) =>
                {
                    *at
                }
                // An `On` sent ends it, whether it reached the BMC, was refused by it or was lost on the
                // way: coroner records the answer or the failure, and the rule counts an On answered
                // (docs/safety.md R1: "once its On is answered — sent, its answer or its failure recorded").
                Record::Reset { at, by, on: true, .. }
                | Record::ResetLost { at, by, on: true }
                | Record::ResetRefused { at, by, on: true }
                    if *at > release.at && by.task == release.remediation =>
                {
                    *at
                }
                // A deletion that began before the release took effect (a pod deletion already under
                // way) ends it as it takes effect: no guard follows a remediation being deleted.
                Record::Deleted { at, uid, .. } if *uid == release.uid => (*at).max(release.at),
                _ => continue,
            };
            end = end.min(at);
        }
        let ready = truth
            .life
            .get(&release.node)
            .into_iter()
            .flatten()
            .find(|(t, kind)| *kind == Life::Ready && *t > release.at);
        ready.map_or(end, |(t, _)| end.min(*t))
    }

    /// The guard judged by the machine: after a release under `guard: Enforce`, a machine the world
    /// switched on (a person, a power-restore policy, a glitch the guard's reads can see, a lying BMC
    /// that starts telling the truth) is switched off again by a ForceOff within the guard's bound,
    /// counted from when its BMC answers; while its BMC is dark, `GuardBlind` within the bound (or
    /// one already published in the same dark spell, before the power-on). Under
    /// `Alert`: `ReleasedMachinePoweredOn` within the bound, and no power-off. Exempt: an approval
    /// given after the release and before the bound ran out; the release ending before the bound.
    fn guard_enforced(&mut self, truth: &Truth, scenario: &Scenario) -> Result<(), Violation> {
        self.pending = false;
        for (index, record) in truth.log.iter().enumerate() {
            let Record::PoweredOn { at: on, machine, .. } = record else { continue };
            if self.judged.contains(&index) {
                continue;
            }
            let (on, machine) = (*on, *machine);
            let node = truth.machines[machine].node.clone();
            let Some(release) =
                self.releases.iter().find(|r| r.node == node && r.at <= on && Self::release_end(truth, r) > on)
            else {
                if self.releases.iter().all(|r| r.node != node || r.at > on) && truth.now > on + 600 * SECOND {
                    self.judged.insert(index);
                }
                continue;
            };
            match Self::guard_verdict(truth, scenario, release, &node, machine, on) {
                None => self.pending = true,
                Some(verdict) => {
                    self.judged.insert(index);
                    verdict?;
                }
            }
        }
        Ok(())
    }

    /// R2 for one power-on while `release` stands, judged spell by spell of the guard's sight: while
    /// its device sees the machine, a ForceOff (`Enforce`) or `ReleasedMachinePoweredOn` (`Alert`)
    /// within the bound of the moment it began to see; while it is dark, `GuardBlind` within the
    /// bound of the moment the dark spell began (or one already reported in it), and the bound starts
    /// again when the device sees again. `None` while a bound has not run out yet.
    fn guard_verdict(
        truth: &Truth,
        scenario: &Scenario,
        release: &Release,
        node: &str,
        machine: usize,
        on: Micros,
    ) -> Option<Result<(), Violation>> {
        // R3: the guard honours the approval the Node carries when it acts, also one given after the
        // power-on; one given after the guard's bound ran out excuses nothing.
        let by = on + Self::guard_bound(truth, scenario, on);
        let approved = truth.log.iter().any(|r| {
            matches!(r, Record::Approved { at, node: of, value } if of == node && *at >= release.at && *at <= by
                && names_release(value, &release.uid))
        });
        if approved {
            return Some(Ok(()));
        }
        let end = Self::release_end(truth, release);
        // L9: after a level release, the guard's Off to the level's outlets is its ForceOff when it
        // takes the machine's power, or when the BMC cannot see the machine (a welded relay: nothing
        // else can be sent); otherwise its BMC's ForceOff is asked for.
        let reset_off = |from: Micros, until: Micros| {
            truth.log.iter().any(|r| match r {
                Record::Reset { at, machine: m, on: false, .. } => *m == machine && *at >= from && *at <= until,
                Record::OutletSwitched { at, by, outlet, on: false } => {
                    by.task == release.remediation
                        && truth.outlets[*outlet].feeds_machine(machine)
                        && *at >= from
                        && *at <= until
                        && (!truth.machines[machine].on_at(until) || !guard_sees(truth, node, machine, *at, false))
                }
                _ => false,
            })
        };
        // A fence's level release (not an attested one) whose statement is right: its outlets are the
        // guard's device too, while the binding is as it was at the release (an edit leaves the level
        // unknown to the guard).
        // A level whose mapping was stated wrongly (L5's named risk) names another machine's outlets:
        // they are no device of this machine's guard; its BMC is, and R2 judges the guard once the BMC
        // answers. While the BMC is dark, those outlets reading Off are what L9 rests on: no
        // `GuardBlind` is owed (the guard cannot know the statement is wrong).
        let stated_wrongly = scenario.levels.is_some_and(|l| l.wrong_mapping);
        let wrong_level = released_through_level(truth, release) && !release.attested && stated_wrongly;
        let level_release = released_through_level(truth, release) && !release.attested && !stated_wrongly;
        // L9: an edit of the binding since the level's proof (its last outlet reading before the
        // release) leaves the level unknown to the guard, as the guard judges it on the generation
        // its proof read through.
        let proven = truth
            .log
            .iter()
            .filter_map(|r| match r {
                Record::OutletAnswer { by, requested, .. }
                    if by.task == release.remediation && *requested <= release.at =>
                {
                    Some(*requested)
                }
                _ => None,
            })
            .max()
            .unwrap_or(release.at);
        let edited = truth.log.iter().any(
            |r| matches!(r, Record::BindingEdited { at, node: of, .. } if of == node && *at > proven && *at <= on),
        );
        let outlets = level_release && !edited;
        // R2 asks for what the device can see: a BMC that lies `Off` shows the guard nothing of a
        // power-on until it tells the truth, which the world records as a power-on of its own.
        let lying = scenario.bmc == BmcKind::LiesOff && truth.bmc_truthful_at.is_none_or(|at| at > on);
        if lying && !outlets {
            return Some(Ok(()));
        }
        let event = |reason: &str, from: Micros, until: Micros| {
            truth.log.iter().any(
                |r| matches!(r, Record::Event { at, reason: said, .. } if *at >= from && *at <= until && said == reason),
            )
        };
        // R2's report: the guard's condition written (its Event goes with it, best effort: an Event
        // the apiserver drops is not sent again, and a process that takes over sees the condition).
        let reported = |from: Micros, until: Micros| {
            event(crate::guard::POWERED_ON, from, until)
                || truth.log.iter().any(|r| {
                    matches!(r, Record::Status { at, remediation, guard: Some(said), .. }
                        if *at >= from && *at <= until && *remediation == release.remediation && said == crate::guard::POWERED_ON)
                })
        };
        let mut start = on;
        loop {
            let bound = Self::guard_bound(truth, scenario, start);
            let Some(from) = guard_sees_from(truth, node, machine, start, start + bound, outlets) else {
                let deadline = start + bound;
                if truth.now < deadline {
                    return None;
                }
                // A later dark spell is judged only if the machine still runs when it begins.
                if end <= deadline || (start != on && !truth.machines[machine].on_at(start)) {
                    return Some(Ok(()));
                }
                if wrong_level {
                    let still_on = truth.machines[machine].on_at(truth.now) && end > truth.now;
                    return match guard_sees_from(truth, node, machine, deadline, truth.now, outlets) {
                        Some(again) if still_on || again < end => {
                            start = again;
                            continue;
                        }
                        None if still_on => None,
                        _ => Some(Ok(())),
                    };
                }
                // A GuardBlind already reported for this dark spell of the guard's device stands (R2).
                // As `ReleasedMachinePoweredOn`, the report is the Guard condition written to the status;
                // its Event is best effort (one whose status write's answer was lost is not sent again).
                let dark = guard_dark_since(truth, node, machine, start, outlets).unwrap_or(start);
                let blind = |from: Micros, until: Micros, any_task: bool| {
                    truth.log.iter().any(|r| match r {
                        Record::Event { at, by, reason, .. } => {
                            *at >= from
                                && *at <= until
                                && (any_task || by.task == release.remediation)
                                && reason == crate::guard::BLIND
                        }
                        Record::Status { at, remediation, guard: Some(said), .. } => {
                            *at >= from
                                && *at <= until
                                && *remediation == release.remediation
                                && said == crate::guard::BLIND
                        }
                        _ => false,
                    })
                };
                let reported_in_spell = blind(dark.max(release.at), start, false);
                if !reported_in_spell && !blind(start, deadline, true) {
                    return Some(Err(Invariant::Guard.says(format!(
                        "the released machine of {node} was on at {} while the guard's device was dark; no GuardBlind by {}",
                        show(start),
                        show(deadline)
                    ))));
                }
                // The device may see again later: its bound starts then.
                let still_on = truth.machines[machine].on_at(truth.now) && end > truth.now;
                return match guard_sees_from(truth, node, machine, deadline, truth.now, outlets) {
                    Some(again) if still_on || again < end => {
                        start = again;
                        continue;
                    }
                    None if still_on => None,
                    _ => Some(Ok(())),
                };
            };
            let deadline = from + bound;
            let darkened = sight_changes(truth, node)
                .filter(|at| *at > from && *at <= deadline)
                .find(|at| !guard_sees(truth, node, machine, *at, outlets));
            if darkened.is_none() && truth.now < deadline {
                return None;
            }
            let until = darkened.unwrap_or(deadline);
            if end <= until {
                return Some(Ok(()));
            }
            let seen_on = truth.log.iter().any(|r| {
                matches!(r, Record::Answer { machine: Some(m), sampled, truly_on: true, said: Answered::System { reported_off: false, .. }, .. }
                    if *m == machine && *sampled >= from && *sampled <= until)
            });
            // R2 asks for what the device can see: answers in the window that all said Off (a BMC
            // that lies) showed the guard nothing; no answer at all is the guard not reading.
            let answered_off = |off: bool| {
                truth.log.iter().any(|r| {
                    matches!(r, Record::Answer { machine: Some(m), sampled, said: Answered::System { reported_off, .. }, .. }
                        if *m == machine && *sampled >= from && *sampled <= until && *reported_off == off)
                })
            };
            let device_blind = answered_off(true) && !answered_off(false);
            if !seen_on && (!truth.machines[machine].on_at(until) || device_blind) {
                return Some(Ok(()));
            }
            let switched_off = reset_off(on, until);
            // R2 counts from when the device answers: one that answered nothing of the machine since
            // it went on (a slow or flaky BMC timing out) sees it from its first answer, and the bound
            // starts then; none in the window, and the guard reported itself blind: it was dark.
            // An answer that sampled the machine since `a`: its BMC's, or after a level release its
            // outlets' (L9).
            let answered_from =
                |a: Micros| {
                    truth.log.iter().find_map(|r| match r {
                        Record::Answer {
                            machine: Some(m), answered, sampled, said: Answered::System { .. }, ..
                        } if *m == machine && *sampled >= a => Some(*answered),
                        Record::OutletAnswer { outlet, answered, sampled, .. }
                            if outlets && truth.outlets[*outlet].feeds_machine(machine) && *sampled >= a =>
                        {
                            Some(*answered)
                        }
                        _ => None,
                    })
                };
            // Dark in fact: the guard asked the BMC and it timed out, and the guard said so.
            let blind = |a: Micros, b: Micros| {
                let asked = truth.log.iter().any(|r| {
                    matches!(r, Record::BmcTimeout { at, by, .. } if *at >= a && *at <= b && by.task == release.remediation)
                });
                let said = truth.log.iter().any(|r| {
                    matches!(r, Record::Event { at, by, reason, .. }
                        if *at >= a && *at <= b && by.task == release.remediation && reason == crate::guard::BLIND)
                });
                asked && said
            };
            // R2's bound counts from the power-on (or from when the device could see it); it starts
            // again at the device's first answer only when the device was unreachable for the guard
            // before it: a guard request in between timed out or failed. The guard's own reading is
            // always a later answer, and must never move the bound.
            let unreachable = |a: Micros, b: Micros| {
                truth.log.iter().any(|r| match r {
                    Record::BmcTimeout { at, by, .. } => *at >= a && *at < b && by.task == release.remediation,
                    Record::Answer { by, requested, said: Answered::Error, .. } => {
                        *requested >= a && *requested < b && by.task == release.remediation
                    }
                    _ => false,
                })
            };
            if !switched_off {
                match answered_from(from) {
                    Some(first)
                        if first > from && unreachable(from, first) && (first <= until || blind(from, until)) =>
                    {
                        start = first;
                        continue;
                    }
                    // Dark so far: judged again once the device answers, while the release stands.
                    None if blind(from, until) => {
                        let still_on = truth.machines[machine].on_at(truth.now) && end > truth.now;
                        return if still_on { None } else { Some(Ok(())) };
                    }
                    _ => {}
                }
            }
            match (scenario.spec.guard, darkened) {
                (GuardPolicy::Alert, _) if switched_off => {
                    return Some(Err(Invariant::Guard.says(format!(
                        "the guard (Alert) switched the released machine of {node} off after {}",
                        show(on)
                    ))));
                }
                (GuardPolicy::Enforce, _) if switched_off => return Some(Ok(())),
                (GuardPolicy::Alert, _) if reported(on, until) => return Some(Ok(())),
                // Its device went dark before the bound ran out: the guard is judged as blind from then.
                (_, Some(dark)) => start = dark,
                (GuardPolicy::Enforce, None) => {
                    return Some(Err(Invariant::Guard.says(format!(
                        "the world switched the released machine of {node} on at {} (its guard's device seeing it from {}); no ForceOff by {}",
                        show(on),
                        show(from),
                        show(deadline)
                    ))));
                }
                (GuardPolicy::Alert, None) => {
                    return Some(Err(Invariant::Guard.says(format!(
                        "the world switched the released machine of {node} on at {}; no ReleasedMachinePoweredOn by {}",
                        show(on),
                        show(deadline)
                    ))));
                }
            }
        }
    }

    /// A lying BMC's release cannot be caught by a reading; the node coming back with its pre-fence
    /// bootID must be: a `FenceDidNotTakeEffect` Event within 10 s of its kubelet's `Ready=True` (and
    /// six slow answers, when the seed slows the apiserver).
    fn fence_did_not_take_effect_reported(&self, truth: &Truth, scenario: &Scenario) -> Result<(), Violation> {
        if scenario.bmc != super::scenario::BmcKind::LiesOff {
            return Ok(());
        }
        let released = truth.log.iter().find_map(|r| match r {
            Record::NodeWrite { at, before, after, .. }
                if after.iter().any(|t| oos(&t.key)) && !before.iter().any(|t| oos(&t.key)) =>
            {
                Some(*at)
            }
            _ => None,
        });
        let Some(released) = released else { return Ok(()) };
        let Some(machine) = truth.machine_of_node(super::TARGET) else { return Ok(()) };
        // Never switched off since the release, and its kubelet reported Ready afterwards.
        if !truth.machines[machine].on_at(released)
            || truth.machines[machine].history.iter().any(|(at, on)| *at > released && !on)
        {
            return Ok(());
        }
        let back = truth
            .life
            .get(super::TARGET)
            .and_then(|life| life.iter().find(|(at, kind)| *at > released && *kind == Life::Ready).map(|(at, _)| *at));
        let Some(back) = back else { return Ok(()) };
        // What coroner can know: the node back with the very bootID its Node showed at the release.
        let boot_now = truth
            .nodes
            .get(super::TARGET)
            .and_then(|n| n.status.as_ref()?.node_info.as_ref())
            .map(|i| i.boot_id.as_str());
        if boot_now != truth.boot_at_release.get(super::TARGET).map(String::as_str) {
            return Ok(());
        }
        // The check runs first in every reconcile, which a slow apiserver delays as it does the guard's.
        let bound = 10 * SECOND + Self::slowdown(scenario);
        if truth.now < back + bound
            || truth.disruptions.iter().any(|at| *at >= back - LEADERLESS && *at <= back + bound)
        {
            return Ok(());
        }
        let reported = truth.log.iter().any(|r| {
            matches!(r, Record::Event { at, reason, .. } if *at >= back && reason == crate::guard::DID_NOT_TAKE_EFFECT)
        });
        if reported {
            Ok(())
        } else {
            Err(Invariant::FenceDidNotTakeEffect.says(format!(
                "node {} came back at {} with the bootID it had before a fence that never took effect; no FenceDidNotTakeEffect",
                super::TARGET,
                show(back)
            )))
        }
    }

    fn judge(&mut self, truth: &Truth, scenario: &Scenario, record: &Record) -> Result<(), Violation> {
        match record {
            Record::NodeWrite { at, sent, by, node, before, after, before_annotations, after_annotations } => {
                let pid = by.pid;
                if after.iter().any(|t| oos(&t.key) && !before.iter().any(|b| taint_key(b) == taint_key(t))) {
                    let uid = owner_of(after_annotations).unwrap_or_default();
                    let remediation = name_of(truth, &uid).unwrap_or_default();
                    let attested = is_attestation(&by.task);
                    let release = Release { uid, remediation, node: node.clone(), at: *at, attested };
                    let judged = if attested {
                        attestation_holds(truth, scenario, by, &release).map_err(|e| Invariant::AttestedRelease.says(e))
                    } else {
                        released_on_proof(truth, scenario, by, node, *sent, *at).and_then(|()| {
                            silent_at_release(truth, scenario, by, node, *sent, *at)
                                .map_err(|e| Invariant::SilentAtRelease.says(e))
                        })
                    };
                    judged.map_err(|v| {
                        v.reworded(|e| format!("p{pid} added the out-of-service taint to {node} at {}: {e}", show(*at)))
                    })?;
                    self.releases.push(release);
                }
                for removed in before.iter().filter(|b| !after.iter().any(|a| taint_key(a) == taint_key(b))) {
                    match truth.provenance.get(&taint_key(removed)) {
                        Some(Adder::Coroner { .. }) => {}
                        other => {
                            return Err(Invariant::ForeignTaintRemoved.says(format!(
                                "p{pid} removed taint {} from {node} at {}, which coroner did not add (added by {other:?})",
                                taint_key(removed),
                                show(*at)
                            )));
                        }
                    }
                    let owner = owner_of(before_annotations);
                    if oos(&removed.key)
                        && !release_may_end(truth, owner.as_deref())
                        && !taken_back_on_life(truth, node, owner.as_deref())
                    {
                        return Err(Invariant::ReleaseUndone.says(format!(
                            "p{pid} removed its own out-of-service taint from {node} at {} while the fence still needs it (the release was undone)",
                            show(*at)
                        )));
                    }
                }
            }
            Record::PodDeleted { at, sent, by, node } => {
                released_on_proof(truth, scenario, by, node, *sent, *at)
                    .and_then(|()| {
                        silent_at_release(truth, scenario, by, node, *sent, *at)
                            .map_err(|e| Invariant::SilentAtRelease.says(e))
                    })
                    .map_err(|v| {
                        v.reworded(|e| format!("p{} force-deleted a pod of {node} at {}: {e}", by.pid, show(*at)))
                    })?;
                if !self.releases.iter().any(|r| r.remediation == by.task && r.node == *node) {
                    let uid = uid_of(truth, &by.task).unwrap_or_default();
                    let release =
                        Release { uid, remediation: by.task.clone(), node: node.clone(), at: *at, attested: false };
                    self.releases.push(release);
                }
            }
            Record::Reset { at, by, node, machine, on, intent, proven_path, path, guard } => {
                let (pid, remediation) = (&by.pid, &by.task);
                let what = if *on { "On" } else { "ForceOff" };
                let Some((instance, attempt, decided)) = intent else {
                    return Err(Invariant::MutationIntent
                        .says(format!("p{pid} sent {what} to {path} at {} with no persisted intent", show(*at))));
                };
                let key = (*pid, remediation.clone(), format!("{instance}/{attempt}/{decided}/{what}"));
                let sent = self.mutations.entry(key).or_insert(0);
                *sent += 1;
                if *sent > 1 {
                    return Err(Invariant::MutationIntent.says(format!(
                        "p{pid} sent {what} twice for one persisted intent ({instance}, attempt {attempt}) of {remediation}"
                    )));
                }
                let owner = truth.machine_of_node(node);
                if owner != Some(*machine) {
                    return Err(Invariant::MutationTarget.says(format!(
                        "p{pid} sent {what} at {} to {}, which is not node {node}'s machine",
                        show(*at),
                        truth.machines[*machine].name
                    )));
                }
                if proven_path.as_deref() != Some(path.as_str()) {
                    return Err(Invariant::MutationTarget.says(format!(
                        "p{pid} sent {what} to {path}, whose identity this fence did not prove ({proven_path:?})"
                    )));
                }
                // An approval counts once the guard could have read it: at its last Node read before the
                // ForceOff (it reads the Node again right before sending).
                let seen = seen_until(truth, (*pid, node, remediation), *at, intent);
                // R3: only an approval naming this release, still on the Node, counts; one naming another
                // release or none counts for nothing, so a ForceOff despite it is the rule, not a defect.
                let current =
                    truth.nodes.get(node).and_then(|n| n.annotations().get(crate::guard::APPROVAL_ANNOTATION).cloned());
                let uid = uid_of(truth, remediation).unwrap_or_default();
                let approved_by_then = truth.log.iter().any(|r| {
                    matches!(r, Record::Approved { at: given, node: of, value } if of == node && *given <= seen
                        && names_release(value, &uid) && current.as_deref() == Some(value.as_str()))
                });
                if *guard
                    && approved_by_then
                    && let Some(approval) = current
                {
                    return Err(Invariant::ApprovalHonoured.says(format!(
                        "p{pid}'s guard switched {node} off at {} although its return was approved ({approval:?})",
                        show(*at)
                    )));
                }
                // The guard switches a released machine that came back off again: by design.
                if !*on
                    && !*guard
                    && let Some(life) = shows_life(truth, (*pid, node, remediation), *at, intent, scenario)
                {
                    return Err(Invariant::LifeBeforeForceOff
                        .says(format!("p{pid} sent ForceOff to {node} at {}, which showed life: {life}", show(*at))));
                }
                // coroner acts on its last read of the Node: a taint added after it it could not see.
                let seen = seen_until(truth, (*pid, node, remediation), *at, intent);
                if *on
                    && let Some(n) = truth.nodes.get(node)
                    && let Some(t) = super::world::taints_of(n).iter().find(|t| {
                        oos(&t.key) && truth.taint_added.get(&taint_key(t)).is_none_or(|added| *added <= seen)
                    })
                {
                    return Err(Invariant::OnUnderTaint.says(format!(
                        "p{pid} sent On to {node} at {} while {} is on it",
                        show(*at),
                        taint_key(t)
                    )));
                }
                let others: Vec<String> = truth
                    .remediations
                    .values()
                    .filter(|r| r.name_any() != *remediation && contract::node_name(&r.metadata) == Some(node.as_str()))
                    .filter(|r| !Phase::of(r).is_terminal())
                    .filter(|r| {
                        r.metadata.creation_timestamp
                            < truth.remediations.get(remediation).and_then(|m| m.metadata.creation_timestamp.clone())
                    })
                    .map(|r| r.name_any())
                    .collect();
                if !others.is_empty() {
                    return Err(Invariant::OneFencePerNode.says(format!(
                        "p{pid} sent {what} for {remediation} at {} while {others:?} already fences node {node}",
                        show(*at)
                    )));
                }
            }
            Record::Status { at, remediation, before, after, .. } => match (before.as_deref(), after.as_deref()) {
                (Some(conditions::TRUE), a) | (Some(conditions::FALSE), a) if a != before.as_deref() => {
                    return Err(Invariant::Succeeded
                        .says(format!("{remediation}: Succeeded went from {before:?} to {after:?} at {}", show(*at))));
                }
                _ => {}
            },
            Record::Answer { .. }
            | Record::ResetLost { .. }
            | Record::ResetRefused { .. }
            | Record::Event { .. }
            | Record::PoweredOn { .. }
            | Record::Deleted { .. }
            | Record::Attested { .. }
            | Record::BmcPower { .. }
            | Record::TimedOut { .. }
            | Record::Approved { .. }
            | Record::BindingEdited { .. }
            | Record::ApiFault { .. }
            | Record::PduTimeout { .. }
            | Record::OutletOnByHand { .. }
            | Record::BmcTimeout { .. }
            | Record::CredentialsRejected { .. }
            | Record::OutletAnswer { .. } => {}
            // Only immediate Off is ever sent to an outlet (docs/safety.md L4).
            Record::OutletSwitched { at, by, outlet, on } => {
                if *on {
                    return Err(Invariant::OutletOnlyOff.says(format!(
                        "p{} switched outlet {outlet} on at {}",
                        by.pid,
                        show(*at)
                    )));
                }
                // L6, judged on the world by the oracle's own reading of it: an Off never takes the
                // power of a machine (the outlet feeds it in truth, whatever the bindings say) whose
                // node a power action is not permitted on at that moment.
                let fed: Vec<String> = truth.outlets[*outlet]
                    .machines()
                    .map(|m| truth.machines[m].node.clone())
                    .filter(|n| truth.nodes.contains_key(n))
                    .collect();
                if let Some((node, why)) =
                    fed.iter().find_map(|n| shared_off_refused(truth, scenario, by, n, *at).map(|why| (n.clone(), why)))
                {
                    return Err(Invariant::SharedOutlet.says(format!(
                        "p{} switched off outlet {outlet} at {}, which feeds node {node}: {why}",
                        by.pid,
                        show(*at)
                    )));
                }
            }
        }
        Ok(())
    }

    /// Whether a guard bound is still running: a run that stopped now would leave it unjudged.
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// At the end: the liveness oracle, and no slot held for ever.
    pub fn finish(&self, truth: &Truth, scenario: &Scenario) -> Result<(), Violation> {
        let bound = scenario.liveness_bound();
        // The clock restarts with every new leader: its Lease sightings start afresh. Crashes only
        // restart it: the last leader lives to the end of the run.
        let start = truth.processes.values().filter(|p| p.term > 0).map(|p| p.started).max().unwrap_or(0);

        let decided = |want: &str| {
            truth.log.iter().find_map(|r| match r {
                Record::Status { at, after, .. } if after.as_deref() == Some(want) => Some(*at),
                _ => None,
            })
        };
        // Released on a device's answers (an attested release is a person's, not the answers').
        let released = truth.log.iter().any(|r| match r {
            Record::NodeWrite { before, after, by, .. } => {
                !is_attestation(&by.task)
                    && after.iter().any(|t| oos(&t.key) && !before.iter().any(|b| taint_key(b) == taint_key(t)))
            }
            Record::PodDeleted { .. } => true,
            _ => false,
        });
        // A run whose horizon came before the last leader's bound, undecided, has nothing to judge.
        let outcome = decided(conditions::TRUE).or(decided(conditions::FALSE));
        let cut_short = truth.now < start + bound && outcome.is_none();
        // NodeHealthCheck's stamp stops the fence (no new step): a timeout before the outcome excuses it.
        let timed_out = truth
            .log
            .iter()
            .any(|r| matches!(r, Record::TimedOut { at, .. } if outcome.is_none_or(|decided| *at < decided)));
        // A crash loop cannot hold a power-action slot: a phase's deadline also elapses on the wall
        // clock, so two leadership changes or deaths before the outcome may end the attempts. One
        // failover must not.
        let crash_loop =
            truth.disruptions.iter().filter(|at| **at > 0 && outcome.is_none_or(|d| **at < d)).count() >= 2;
        // The remediation whose end decided a refusal, and its Succeeded reason.
        let ended = truth.log.iter().find_map(|r| match r {
            Record::Status { at, remediation, after, .. } if after.as_deref() == Some(conditions::FALSE) => {
                Some((remediation.clone(), *at))
            }
            _ => None,
        });
        let ended_for = |reason: contract::Reason| {
            ended.clone().filter(|(name, _)| {
                let status = truth.remediations.get(name).and_then(|r| r.status.as_ref());
                let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
                conditions::find(conditions, contract::SUCCEEDED).is_some_and(|c| c.reason == reason.as_str())
            })
        };
        // When that remediation last entered `phase` before it ended.
        let last_entered = |name: &str, phase: Phase, until: Micros| {
            let mut previous: Option<&str> = None;
            let mut entered = None;
            for r in &truth.log {
                if let Record::Status { at, remediation, phase: now, .. } = r
                    && remediation == name
                    && *at <= until
                {
                    if now == phase.as_str() && previous != Some(phase.as_str()) {
                        entered = Some(*at);
                    }
                    previous = Some(now.as_str());
                }
            }
            entered
        };
        let spec = &scenario.spec;
        let fresh = micros(fence::freshness(spec, timing()));
        // A release that keeps failing ends its attempt at the deadline, `ReleaseNotWritten` when none
        // is left (docs/safety.md, Crash safety): excused when the apiserver kept failing that fence's
        // own requests from when it last entered `Releasing` to its end, never leaving it twice the
        // proof's freshness to write in. One fault, or another process's, excuses nothing.
        let release_refused = ended_for(contract::Reason::ReleaseNotWritten).is_some_and(|(name, end)| {
            last_entered(&name, Phase::Releasing, end).is_some_and(|since| {
                let faults = truth.log.iter().filter_map(|r| match r {
                    Record::ApiFault { at, by } if by.task == name => Some(*at),
                    _ => None,
                });
                kept_failing(faults, since, end, 2 * fresh)
            })
        });
        // A level fails on timeouts too (L2: the gap an unanswered read leaves breaks the run, P2):
        // excused when that fence's own PDU requests kept timing out in the level it ended at, never
        // leaving it the time of a proof (settle, two gap bounds, the Off and L7's question).
        let proof_time = micros(spec.settle.get()) + 2 * micros(fence::gap_bound(spec)) + 2 * super::REQUEST_TIMEOUT;
        let pdu_unreliable = ended_for(contract::Reason::PowerOffNotConfirmed).is_some_and(|(name, end)| {
            last_entered(&name, Phase::PoweringOffOutlets, end).is_some_and(|since| {
                let timeouts = truth.log.iter().filter_map(|r| match r {
                    Record::PduTimeout { at, by, .. } if by.task == name => Some(*at),
                    _ => None,
                });
                kept_failing(timeouts, since, end, proof_time)
            })
        });
        // P7: the BMC's password changed before its Secret; a rejection that came before the fence's
        // own ForceOff reached the BMC is a final configuration error (`BmcAuthenticationFailed`).
        // One after it is read through until the attempt's deadline: no excuse.
        let rotated = scenario.events.iter().any(|(_, e)| matches!(e, super::scenario::Event::RotateBmcFirst { .. }));
        let rejected_first = rotated
            && ended_for(contract::Reason::BmcAuthenticationFailed).is_some_and(|(name, _)| {
                let first = |wanted: &dyn Fn(&Record) -> bool| truth.log.iter().position(wanted);
                let rejected = first(&|r| matches!(r, Record::CredentialsRejected { by, .. } if by.task == name));
                let reset =
                    first(&|r| matches!(r, Record::Reset { by, on: false, guard: false, .. } if by.task == name));
                rejected.is_some_and(|rejected| reset.is_none_or(|reset| rejected < reset))
            });
        match scenario.expect {
            _ if cut_short || timed_out || crash_loop => {}
            Expect::Release if release_refused || pdu_unreliable || rejected_first => {}
            Expect::Release => match decided(conditions::TRUE) {
                Some(at) if at <= start + bound => {}
                Some(at) => {
                    return Err(Invariant::Liveness.says(format!(
                        "released at {}, after the bound {}",
                        show(at),
                        show(start + bound)
                    )));
                }
                None => return Err(Invariant::Liveness.says(format!("never released (bound {})", show(start + bound)))),
            },
            Expect::Refuse => {
                if released {
                    return Err(Invariant::Liveness.says("released although the answers allow no proof"));
                }
                match decided(conditions::FALSE) {
                    Some(at) if at <= start + bound => {}
                    Some(at) => {
                        return Err(Invariant::Liveness.says(format!(
                            "refused at {}, after the bound {}",
                            show(at),
                            show(start + bound)
                        )));
                    }
                    None => {
                        return Err(Invariant::Liveness
                            .says(format!("never ended Succeeded=False (bound {})", show(start + bound))));
                    }
                }
            }
            Expect::Any => {}
        }
        // A crash loop ends attempts on the wall clock only, at twice their length: the rule's bound.
        let slot_bound = if crash_loop { scenario.crash_loop_slot_bound().max(bound) } else { bound };
        for r in truth.remediations.values() {
            let since = r.status.as_ref().and_then(|s| s.phase_since.as_ref()).map(|t| t.0);
            if Phase::of(r).holds_power_slot()
                && let Some(since) = since
                && truth.wall(truth.now).duration_since(since).as_micros() as i64 > slot_bound
            {
                return Err(Invariant::SlotBound.says(format!(
                    "{} holds a power-action slot in {} since {since}, past the bound",
                    r.name_any(),
                    Phase::of(r).as_str()
                )));
            }
        }
        Ok(())
    }
}

/// Whether failures at `times` kept coming from `since` to `end`: at least one, and no stretch
/// without one (from `since`, between two, to `end`) longer than `stretch`.
fn kept_failing(times: impl Iterator<Item = Micros>, since: Micros, end: Micros, stretch: Micros) -> bool {
    let mut times: Vec<Micros> = times.filter(|at| *at >= since && *at <= end).collect();
    if times.is_empty() {
        return false;
    }
    times.sort_unstable();
    let mut last = since;
    for at in times.into_iter().chain(std::iter::once(end)) {
        if at - last > stretch {
            return false;
        }
        last = at;
    }
    true
}

fn show(at: Micros) -> String {
    format!("t={:.3}s", at as f64 / SECOND as f64)
}

/// Whether an approval's value names a release of remediation `uid` (docs/safety.md R3: the release
/// id is the remediation's UID and its release time).
/// Who and why are part of it: a bare id approves nothing.
fn names_release(value: &str, uid: &str) -> bool {
    !uid.is_empty()
        && value.split_once(' ').is_some_and(|(id, rest)| id.starts_with(&format!("{uid}@")) && rest.contains(':'))
}

/// The remediation UID the out-of-service owner annotation names.
fn owner_of(annotations: &BTreeMap<String, String>) -> Option<String> {
    let record = annotations.get(CoronerTaint::OutOfService.owner_annotation())?;
    serde_json::from_str::<crate::taints::Ownership>(record).ok().map(|o| o.uid)
}

/// A remediation by name, while it exists, with its UID; else the UID its deletion recorded.
fn uid_of(truth: &Truth, remediation: &str) -> Option<String> {
    truth.remediations.get(remediation).and_then(|r| r.uid()).or_else(|| {
        truth.log.iter().find_map(|r| match r {
            Record::Deleted { remediation: name, uid, .. } if name == remediation => Some(uid.clone()),
            _ => None,
        })
    })
}

/// A remediation's name by its UID (alive, or deleted since).
fn name_of(truth: &Truth, uid: &str) -> Option<String> {
    truth.remediations.values().find(|r| r.uid().as_deref() == Some(uid)).map(|r| r.name_any()).or_else(|| {
        truth.log.iter().find_map(|r| match r {
            Record::Deleted { remediation, uid: of, .. } if of == uid => Some(remediation.clone()),
            _ => None,
        })
    })
}

/// Whether BMC `bmc` was powered and answering at `at`.
fn bmc_alive_at(truth: &Truth, bmc: usize, at: Micros) -> bool {
    truth
        .log
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::BmcPower { at: when, bmc: which, alive } if *which == bmc && *when <= at => Some(*alive),
            _ => None,
        })
        .unwrap_or(true)
}

/// The BMC `node`'s binding leads to at `at`: where its last edit led, else the BMC of its machine.
fn bound_bmc(truth: &Truth, node: &str, machine: usize, at: Micros) -> Option<usize> {
    truth
        .log
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::BindingEdited { at: when, node: of, bmc } if of == node && *when <= at => Some(*bmc),
            _ => None,
        })
        .unwrap_or_else(|| truth.bound_at_start.get(node).copied().or_else(|| bmc_of(truth, machine)))
}

/// R2: the guard's device sees `machine` at `at` when the node's binding, as it is then, leads to a
/// BMC that serves the machine and has power. A binding edited to an endpoint where nothing answers,
/// or to another machine's BMC, leaves the guard dark until it is fixed. After a release through a
/// level whose outlets feed the machine (`outlets`), those outlets are the guard's device too (L9):
/// the world's PDU always answers, and a metered outlet shows a running machine's draw.
fn guard_sees(truth: &Truth, node: &str, machine: usize, at: Micros, outlets: bool) -> bool {
    outlets
        || bound_bmc(truth, node, machine, at)
            .is_some_and(|b| truth.bmcs[b].systems.iter().any(|s| s.machine == machine) && bmc_alive_at(truth, b, at))
}

/// When the guard's device may change its sight: BMC power changes and binding edits.
fn sight_changes(truth: &Truth, node: &str) -> impl Iterator<Item = Micros> {
    truth.log.iter().filter_map(move |r| match r {
        Record::BmcPower { at, .. } => Some(*at),
        Record::BindingEdited { at, node: of, .. } if of == node => Some(*at),
        _ => None,
    })
}

/// The first moment in `from..=until` when the guard's device sees `machine`.
fn guard_sees_from(
    truth: &Truth,
    node: &str,
    machine: usize,
    from: Micros,
    until: Micros,
    outlets: bool,
) -> Option<Micros> {
    std::iter::once(from)
        .chain(sight_changes(truth, node).filter(|at| *at > from && *at <= until))
        .find(|at| guard_sees(truth, node, machine, *at, outlets))
}

/// The start of the guard's dark spell that holds `at` (none if its device sees the machine then).
fn guard_dark_since(truth: &Truth, node: &str, machine: usize, at: Micros, outlets: bool) -> Option<Micros> {
    if guard_sees(truth, node, machine, at, outlets) {
        return None;
    }
    let changes: Vec<Micros> = sight_changes(truth, node).filter(|when| *when <= at).collect();
    let since =
        changes.into_iter().rev().find(|when| *when > 0 && guard_sees(truth, node, machine, *when - 1, outlets));
    Some(since.unwrap_or(0))
}

/// The BMC that serves `machine` (its first system of it).
fn bmc_of(truth: &Truth, machine: usize) -> Option<usize> {
    truth.bmcs.iter().position(|b| b.systems.iter().any(|s| s.machine == machine))
}

/// One reading in the record, as the proof rules see it.
#[derive(Clone, Copy, Debug)]
struct Reading {
    requested: Micros,
    sampled: Micros,
    answered: Micros,
    machine: Option<usize>,
    off: bool,
    truly_on: bool,
}

impl Reading {
    fn times(&self) -> fence::Sampled {
        fence::Sampled {
            requested: super::exec::duration(self.requested),
            answered: super::exec::duration(self.answered),
        }
    }
}

/// The system readings `by` received up to `until`, in order.
fn readings_by(truth: &Truth, by: &Caller, until: Micros) -> Vec<Reading> {
    truth
        .log
        .iter()
        .filter_map(|r| match r {
            Record::Answer { by: who, machine, read_from, sampled, answered, truly_on, said, .. }
                if who == by && *answered <= until =>
            {
                // A failed try is retried within the same reading, and the gap rule bounds what it
                // leaves unseen: only what a system answered counts, as requested when its read
                // began (the value was sampled somewhere between then and its answer).
                let Answered::System { reported_off: off, .. } = said else { return None };
                let off = *off;
                Some(Reading {
                    requested: *read_from,
                    sampled: *sampled,
                    answered: *answered,
                    machine: *machine,
                    off,
                    truly_on: *truly_on,
                })
            }
            _ => None,
        })
        .collect()
}

/// A release by BMC proof (docs/safety.md, "The proof"), sent by `by` at `sent` and in effect at
/// `at`, judged from the answers that process received in its term for that remediation: they end in
/// Off readings of the node's machine, dense by the gap rule, spanning `settle`, the last one fresh
/// when the release was sent; the machine was truly off at every proving sample and stayed off from
/// the last one until the release took effect — unless the world switched it on after the last
/// proving reading's request (no reading can see that: the guard must). A power-on wholly between two
/// proving samples is not judged (docs/safety.md P4: invisible to sampling, and nothing runs elsewhere
/// before the release). A BMC that lies Off consistently is exempt from the truth check only.
fn proof_holds(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    (since, sent): (Micros, Micros),
    at: Micros,
) -> Result<(), String> {
    let machine = truth.machine_of_node(node).ok_or("the node has no machine")?;
    let m = &truth.machines[machine];
    let spec = &scenario.spec;
    let all: Vec<Reading> = readings_by(truth, by, sent).into_iter().filter(|r| r.requested >= since).collect();
    // A read of another system during discovery (every member is read) is no reading of this machine:
    // it neither extends nor breaks the run (docs/safety.md, "When a reading was taken"). A last
    // reading of another machine still leaves no proof behind the release.
    let misdirected = all.last().is_some_and(|r| r.machine.is_some_and(|m| m != machine));
    let readings: Vec<Reading> =
        all.iter().filter(|r| !misdirected && r.machine.is_none_or(|m| m == machine)).copied().collect();
    let trailing = readings.iter().rev().take_while(|r| r.off && r.machine == Some(machine)).count();
    let run = &readings[readings.len() - trailing..];
    let Some(last) = run.last() else {
        let what = all.last().map_or("no reading at all".to_owned(), |r| match r.machine {
            Some(other) if other != machine => format!("its last reading was of {}", truth.machines[other].name),
            _ => format!("its last reading ({}) was not Off", show(r.requested)),
        });
        return Err(format!("p{}/{} has no Off reading of {} behind it: {what}", by.pid, by.term, m.name));
    };
    let gap = micros(fence::gap_bound(spec));
    let mut first = run.len() - 1;
    while first > 0 && fence::dense(&run[first - 1].times(), &run[first].times(), spec).is_ok() {
        first -= 1;
    }
    let dense = &run[first..];
    let settle = micros(spec.settle.get());
    let Some(start) = dense.iter().rposition(|r| last.requested - r.answered >= settle) else {
        return Err(format!(
            "its dense Off readings of {} (from {}, gap bound {}) do not span settle {}",
            m.name,
            show(dense[0].requested),
            show(gap),
            show(settle)
        ));
    };
    let proving = &dense[start..];
    let fresh = micros(fence::freshness(spec, timing()));
    if sent - last.requested > fresh {
        return Err(format!(
            "the proof's last reading ({}) was older than pollInterval + the request timeout when the release was sent",
            show(last.requested)
        ));
    }
    if scenario.bmc == BmcKind::LiesOff {
        return Ok(());
    }
    if let Some(on) = proving.iter().find(|r| r.truly_on) {
        return Err(format!("{} was on when the BMC sampled it for a proving reading at {}", m.name, show(on.sampled)));
    }
    // P4: a power-on wholly between two proving samples is invisible to sampling and frees nothing;
    // from the last proving sample the machine must stay off until the release takes effect.
    let until = before_injected_power_on(truth, machine, last.requested, at);
    if !m.off_throughout(last.sampled, until) {
        return Err(format!(
            "{} was on at some time between the proof's last sample ({}) and the release taking effect ({})",
            m.name,
            show(last.sampled),
            show(at)
        ));
    }
    Ok(())
}

/// Until when a release in effect at `at` must find `machine` off since its proof: the world's own
/// power-on after the proof's last request (`last_requested`) is the guard's to catch, not the proof's.
fn before_injected_power_on(truth: &Truth, machine: usize, last_requested: Micros, at: Micros) -> Micros {
    let injected = truth.log.iter().find_map(|r| match r {
        Record::PoweredOn { at: on, machine: which, .. } if *which == machine && *on > last_requested && *on <= at => {
            Some(*on)
        }
        _ => None,
    });
    injected.map_or(at, |on| on - 1)
}

/// Whether `release` was proven through a PDU level: its remediation's fence read outlets before it.
fn released_through_level(truth: &Truth, release: &Release) -> bool {
    truth.log.iter().any(|r| {
        matches!(r, Record::OutletAnswer { by, requested, .. } if by.task == release.remediation && *requested <= release.at)
    })
}

/// A release by a device's proof: through a PDU level when the releasing process read outlets for
/// it ([`level_proof_holds`]), or by the BMC's readings ([`proof_holds`]; for a process that read
/// outlets, only readings taken after its last outlet reading: a fence that proved again through
/// its BMC after a level, A4).
fn released_on_proof(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    sent: Micros,
    at: Micros,
) -> Result<(), Violation> {
    let last_outlet = truth
        .log
        .iter()
        .filter_map(|r| match r {
            Record::OutletAnswer { by: who, requested, .. } if who == by && *requested <= sent => Some(*requested),
            _ => None,
        })
        .max();
    let Some(last_outlet) = last_outlet else {
        return proof_holds(truth, scenario, by, node, (0, sent), at).map_err(|e| Invariant::BmcProof.says(e));
    };
    // A4: a fence whose level failed may prove the machine off again through its BMC once that
    // answers an attestation's look: it then releases on BMC readings all taken after its last
    // outlet reading.
    level_proof_holds(truth, scenario, by, node, sent, at).or_else(|outlets| {
        proof_holds(truth, scenario, by, node, (last_outlet, sent), at).map_err(|bmc| {
            Invariant::LevelProof.says(format!("{outlets}; nor by its BMC after its last outlet reading: {bmc}"))
        })
    })
}

/// L6 on the world: why an outlet Off by `by` at `at` may not take the power of `node`'s machine, if
/// it may not. A power action is permitted on a node only while it is silent — no Lease renewal
/// within `leaseFreshness` (but the last moment, which the watch may not have brought), `Ready` not
/// `True` (nor anything but `Unknown`, unless `remediateReadyFalse`) when the switching task last read
/// it — not excluded, and fenced: a remediation of it admitted and not being deleted whose release is
/// not yet written, or one whose release stands and nobody approved to power on. The switching fence's
/// own remediation, deleted after that task last read it before the Off (right before the request,
/// P1), is the power action's race, not L6's. As R3, an approval counts when it names that release and
/// stands on the Node, given before the task last read that Node; any written release counts as
/// standing (looser than L6, which judges it on the Node it reads).
fn shared_off_refused(truth: &Truth, scenario: &Scenario, by: &Caller, node: &str, at: Micros) -> Option<String> {
    let read = truth
        .node_reads
        .get(&(by.pid, by.task.clone(), node.to_owned()))
        .and_then(|reads| reads.iter().rev().find(|read| **read <= at).copied());
    // What the switching task last read of the Node; one it did not read, as it was at the Off and
    // for the moment before it (a change in the last moment it could not have seen).
    let seen = read.unwrap_or(at);
    let freshness = micros(scenario.spec.lease_freshness.get());
    let life = truth.life.get(node).map(Vec::as_slice).unwrap_or_default();
    if let Some((renewed, _)) =
        life.iter().find(|(t, kind)| *kind == Life::Lease && *t >= at - freshness && *t <= at - UNSEEN_LEASE)
    {
        return Some(format!("its kubelet renewed its Lease at {}", show(*renewed)));
    }
    let ready_at = |t: Micros| truth.ready_history.get(node).and_then(|h| h.iter().rev().find(|(at, _)| *at <= t));
    let silent = |status: &str| match scenario.spec.remediate_ready_false {
        true => status != conditions::TRUE,
        false => status == conditions::UNKNOWN,
    };
    let showed = match read {
        Some(read) => ready_at(read).map(|(_, s)| s.clone()),
        None => ready_at(at)
            .zip(ready_at(at - UNSEEN_LEASE))
            .and_then(|((_, now), (_, before))| (!silent(now) && !silent(before)).then(|| now.clone())),
    };
    if let Some(status) = showed.filter(|s| !silent(s)) {
        let when = if read.is_some() { "when the switching task last read it" } else { "at the Off" };
        return Some(format!("it showed Ready={status} {when}"));
    }
    if let Some((excluded, _)) = life.iter().find(|(t, kind)| *kind == Life::Excluded && *t <= seen) {
        return Some(format!("it was labelled {} at {}", contract::EXCLUDE_LABEL, show(*excluded)));
    }
    let current = truth.nodes.get(node).and_then(|n| n.annotations().get(crate::guard::APPROVAL_ANNOTATION).cloned());
    let approved = |uid: &str| {
        truth.log.iter().any(|r| {
            matches!(r, Record::Approved { at: given, node: of, value } if of == node && *given <= seen
                && names_release(value, uid) && current.as_deref() == Some(value.as_str()))
        })
    };
    let last_read = truth
        .remediation_reads
        .get(&(by.pid, by.task.clone(), by.task.clone()))
        .and_then(|reads| reads.iter().rev().find(|read| **read <= at).copied());
    let racing = |uid: &str| {
        truth.log.iter().any(|r| {
            matches!(r, Record::Deleted { at: deleted, uid: of, .. }
                if of == uid && last_read.is_some_and(|read| *deleted > read))
        })
    };
    let fenced = truth.remediations.values().filter(|r| contract::node_name(&r.metadata) == Some(node)).any(|r| {
        let uid = r.uid().unwrap_or_default();
        let own = r.metadata.name.as_deref() == Some(by.task.as_str());
        if r.metadata.deletion_timestamp.is_some() && !(own && racing(&uid)) {
            return false;
        }
        let released = r.status.as_ref().and_then(|s| s.evidence.as_ref()).is_some_and(|e| e.release.is_some());
        match Phase::of(r) {
            Phase::VerifyingIdentity
            | Phase::PoweringOff
            | Phase::ConfirmingOff
            | Phase::PoweringOffOutlets
            | Phase::Releasing => true,
            Phase::Done | Phase::Failed => released && !approved(&uid),
            Phase::Pending | Phase::WaitingForRelease | Phase::PoweringOn | Phase::WaitingForNode => false,
        }
    });
    (!fenced).then(|| "neither being fenced nor released by a fence whose power-on nobody approved".to_owned())
}

/// Silence at release (docs/safety.md, "What counts as proof"): a fence writes its release (the
/// taint, or a pod's deletion) sent at `sent` and in effect at `at` only on the Node it admitted, not
/// replaced since; silent as the releasing process last read it before the write (`Ready=Unknown`, or
/// anything but `True` with `remediateReadyFalse`); and its Lease not renewed between the power-off
/// (the fence's first reading that proved the machine off, through its BMC or an outlet; admission
/// when there is none) and that read. A renewal after the read is the check after the write's to see.
fn silent_at_release(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    sent: Micros,
    at: Micros,
) -> Result<(), String> {
    let admitted = admitted_at(truth, &by.task).unwrap_or(0);
    let read = truth
        .node_reads
        .get(&(by.pid, by.task.clone(), node.to_owned()))
        .and_then(|reads| reads.iter().rev().find(|read| **read <= sent).copied())
        .unwrap_or(sent);
    let life = truth.life.get(node).map(Vec::as_slice).unwrap_or_default();
    if let Some((replaced, _)) = life.iter().find(|(t, kind)| *kind == Life::Replaced && *t > admitted && *t <= at) {
        return Err(format!("the Node was replaced at {} after the fence admitted it", show(*replaced)));
    }
    let ready = truth
        .ready_history
        .get(node)
        .and_then(|history| history.iter().rev().find(|(t, _)| *t <= read))
        .map(|(_, status)| status.as_str());
    let silent = match ready {
        Some(status) if scenario.spec.remediate_ready_false => status != conditions::TRUE,
        Some(status) => status == conditions::UNKNOWN,
        None => true,
    };
    if !silent {
        return Err(format!(
            "the Node showed Ready={ready:?} when the releasing process last read it ({})",
            show(read)
        ));
    }
    let machine = truth.machine_of_node(node);
    let proved_off =
        truth.log.iter().filter_map(|r| match r {
            Record::Answer {
                by: who, machine: m, sampled, said: Answered::System { reported_off: true, .. }, ..
            } if who.task == by.task && *m == machine && machine.is_some() && *sampled >= admitted => Some(*sampled),
            Record::OutletAnswer { by: who, sampled, proves_off: true, .. }
                if who.task == by.task && *sampled >= admitted =>
            {
                Some(*sampled)
            }
            _ => None,
        });
    let power_off = proved_off.min().unwrap_or(admitted);
    if let Some((renewed, _)) = life.iter().find(|(t, kind)| *kind == Life::Lease && *t > power_off && *t <= read) {
        return Err(format!(
            "its Lease was renewed at {}, after the power-off ({}) and before the releasing process last read the Node ({})",
            show(*renewed),
            show(power_off),
            show(read)
        ));
    }
    Ok(())
}

/// A2: an attested release only on a binding verified at the content it had when the fence was
/// admitted (unless the attestation acknowledges `BindingUnverified`): judged from the world's record
/// of the binding's content, at some moment between the fence's last status write before its
/// admission (when it read the binding for it) and the admission. The simulated binding verifier
/// verifies once, before the outage.
fn binding_verified_at_admission(
    truth: &Truth,
    attestation: &crate::api::CoronerAttestation,
    fence: &str,
    binding: &str,
    admitted: Micros,
) -> Result<(), String> {
    if attestation.spec.acknowledge.iter().any(|a| a.reason == AcknowledgedReason::BindingUnverified) {
        return Ok(());
    }
    // The world's own verifications up to the admission: one coroner made since counts for nothing.
    let verified: Vec<u64> = truth
        .binding_verifications
        .iter()
        .filter(|(at, of, _)| of == binding && *at <= admitted)
        .map(|(_, _, content)| *content)
        .collect();
    let Some(verified) = verified.last().copied() else {
        return Err(format!("binding {binding} was never verified before fence {fence} was admitted (A2)"));
    };
    let read_from = truth
        .log
        .iter()
        .filter_map(|r| match r {
            Record::Status { at, remediation, .. } if remediation == fence && *at < admitted => Some(*at),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut moments = vec![read_from];
    moments.extend(
        truth
            .binding_contents
            .iter()
            .filter(|(at, of, _)| of == binding && *at > read_from && *at <= admitted)
            .map(|(at, ..)| *at),
    );
    let verified_then = moments.iter().any(|at| truth.binding_content_at(binding, *at) == Some(verified));
    if verified_then {
        Ok(())
    } else {
        Err(format!(
            "binding {binding} was not verified at the content it had when fence {fence} was admitted ({}), and no acknowledgement says so (A2)",
            show(admitted)
        ))
    }
}

/// A release through a PDU level (docs/safety.md L1–L7), judged from the outlet answers the releasing
/// process received in its term and from the rack's truth: every outlet that truly feeds the machine
/// was read by it, its last readings proving Off (L4), the last one fresh when the release was sent;
/// from the moment the last of them began to read Off (when the PDU looked) the readings span settle,
/// and the machine was truly off from then until the release took effect — unless the world switched
/// it on after the last proving request (the guard's to catch).
fn level_proof_holds(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    sent: Micros,
    at: Micros,
) -> Result<(), String> {
    let machine = truth.machine_of_node(node).ok_or("the node has no machine")?;
    let m = &truth.machines[machine];
    let spec = &scenario.spec;
    // L5's named risk: a level whose mapping an operator stated wrongly proves another machine off,
    // which L7 catches only while this machine's BMC answers: judged on the outlets the level names.
    let stated_wrongly = scenario.levels.is_some_and(|l| l.wrong_mapping);
    let feeders: Vec<usize> = match stated_wrongly {
        false => (0..truth.outlets.len()).filter(|o| truth.outlets[*o].feeds_machine(machine)).collect(),
        true => named_outlets(truth, node),
    };
    if feeders.is_empty() {
        return Err(format!("released through PDU outlets, and no outlet feeds {}", m.name));
    }
    let fresh = micros(fence::freshness(spec, timing()));
    // (requested, sampled, answered, proves off, truly on) of each feeder's readings by this process.
    let mut runs = Vec::new();
    for outlet in feeders {
        let answers: Vec<(Micros, Micros, Micros, bool, bool)> = truth
            .log
            .iter()
            .filter_map(|r| match r {
                Record::OutletAnswer { by: who, outlet: o, requested, sampled, answered, proves_off, truly_on }
                    if who == by && *o == outlet && *answered <= sent =>
                {
                    Some((*requested, *sampled, *answered, *proves_off, *truly_on))
                }
                _ => None,
            })
            .collect();
        let trailing = answers.iter().rev().take_while(|a| a.3).count();
        let run = answers[answers.len() - trailing..].to_vec();
        let Some(last) = run.last() else {
            return Err(format!(
                "outlet {outlet} feeds {} and p{}/{}'s last reading of it did not prove Off",
                m.name, by.pid, by.term
            ));
        };
        if sent - last.0 > fresh {
            return Err(format!(
                "outlet {outlet}'s last reading ({}) was stale when the release was sent",
                show(last.0)
            ));
        }
        runs.push(run);
    }
    // The level reads Off from when the last of its outlets began to (its answer), to the last request.
    let began = runs.iter().filter_map(|run| run.first().map(|a| a.2)).max().unwrap_or_default();
    let last_requested = runs.iter().filter_map(|run| run.last().map(|a| a.0)).max().unwrap_or_default();
    let last_sampled = runs.iter().filter_map(|run| run.last().map(|a| a.1)).max().unwrap_or_default();
    let settle = micros(spec.settle.get());
    if last_requested - began < settle {
        return Err(format!(
            "the outlets feeding {} read Off together from {} only, short of settle {}",
            m.name,
            show(began),
            show(settle)
        ));
    }
    // Exempt from the truth only while L7 could not catch it: the BMC silent when it was asked, or
    // lying Off (L5: L7 catches a wrong statement only through a BMC that answers the truth; a lying
    // BMC's own proof is exempt from the truth in the same way, `proof_holds`).
    if stated_wrongly && scenario.bmc == BmcKind::LiesOff {
        return Ok(());
    }
    if stated_wrongly {
        let silent = bound_bmc(truth, node, machine, sent).is_none_or(|b| {
            std::iter::once(last_requested)
                .chain(truth.log.iter().filter_map(|r| match r {
                    Record::BmcPower { at, bmc, .. } if *bmc == b && *at > last_requested && *at <= sent => Some(*at),
                    _ => None,
                }))
                .any(|at| !bmc_alive_at(truth, b, at))
        });
        if silent {
            return Ok(());
        }
    }
    // P4: the machine truly off at every proving sample, and from the last one until the release took
    // effect, unless the world switched it on after the last proving request (the guard's).
    // Judged on this machine's own power when the PDU looked (an outlet's record tells the power of the
    // machine it feeds first, and a shared outlet feeds another too); a wrong statement's outlets on
    // the power of the machine they feed (L5's named risk, judged on the outlets it names).
    let proving = runs.iter().flatten().filter(|a| a.2 >= began);
    if let Some(on) = proving.clone().find(|a| if stated_wrongly { a.4 } else { m.on_at(a.1) }) {
        return Err(format!("{} was on when its PDU sampled a proving outlet reading at {}", m.name, show(on.1)));
    }
    let until = before_injected_power_on(truth, machine, last_requested, at);
    if !m.off_throughout(last_sampled, until) {
        return Err(format!(
            "{} was on at some time between its outlets' last proving sample ({}) and the release taking effect ({})",
            m.name,
            show(last_sampled),
            show(at)
        ));
    }
    Ok(())
}

/// The world's outlets the node's binding names as its level 2.
fn named_outlets(truth: &Truth, node: &str) -> Vec<usize> {
    let Some(level) =
        truth.bindings.values().find(|b| b.spec.node_name == node).and_then(|b| b.spec.pdu_levels.first())
    else {
        return Vec::new();
    };
    level
        .outlets
        .iter()
        .filter_map(|o| {
            let snmp = o.snmp.as_ref()?;
            let pdu = crate::api::host_port(&snmp.address, snmp.port.unwrap_or(161));
            truth.outlets.iter().position(|w| w.pdu == pdu && w.number == snmp.outlet)
        })
        .collect()
}

/// When the world's record shows remediation `task`'s fence admitted: its first status write past
/// `Pending`, or its first write of the fencing taint if that came first; with neither, its
/// creation, which comes no later.
fn admitted_at(truth: &Truth, task: &str) -> Option<Micros> {
    let created = || {
        let at = truth.remediations.get(task)?.metadata.creation_timestamp.as_ref()?.0;
        Some(at.duration_since(truth.wall(0)).as_micros() as Micros)
    };
    truth
        .log
        .iter()
        .find_map(|r| match r {
            Record::Status { at, remediation, phase, .. }
                if remediation == task && phase != Phase::Pending.as_str() =>
            {
                Some(*at)
            }
            Record::NodeWrite { at, by, before, after, .. }
                if by.task == task
                    && after.iter().any(|t| t.key == CoronerTaint::Fencing.key())
                    && !before.iter().any(|t| t.key == CoronerTaint::Fencing.key()) =>
            {
                Some(*at)
            }
            _ => None,
        })
        .or_else(created)
}

/// A release by attestation (docs/safety.md, "Attestations"), in effect at `at`: an attestation of
/// this node, not expired, about the Node object as it is; and nothing the fence recorded showed the
/// machine alive — the last reading of the node's machine, if any, was Off; no kubelet renewal or
/// `Ready=True` since the fence was admitted; no Lease fresh and no `Ready=True` now.
fn attestation_holds(truth: &Truth, scenario: &Scenario, by: &Caller, release: &Release) -> Result<(), String> {
    let name = by.task.trim_start_matches("attestation/");
    let attestation = truth.attestations.get(name).ok_or_else(|| format!("attestation {name} does not exist"))?;
    let created = truth.log.iter().find_map(|r| match r {
        Record::Attested { at, name: of, .. } if of == name => Some(*at),
        _ => None,
    });
    let created = created.ok_or_else(|| format!("nobody created attestation {name}"))?;
    let node = truth.nodes.get(&release.node).ok_or("the node is gone")?;
    if attestation.spec.node_name != release.node || node.uid().as_deref() != Some(attestation.spec.node_uid.as_str()) {
        return Err(format!("attestation {name} is about another Node object"));
    }
    if release.at - created > micros(attestation.spec.valid_for.get()) {
        return Err(format!("attestation {name} had expired"));
    }
    let machine = truth.machine_of_node(&release.node).ok_or("the node has no machine")?;
    let fence = &release.remediation;
    let acknowledged = |reason| attestation.spec.acknowledge.iter().any(|a| a.reason == reason);
    // The fence's power action: its first ForceOff that reached a BMC, or Off that reached an outlet.
    let power_action = truth.log.iter().find_map(|r| match r {
        Record::Reset { at, by, on: false, guard: false, .. } | Record::OutletSwitched { at, by, on: false, .. }
            if by.task == *fence =>
        {
            Some(*at)
        }
        _ => None,
    });
    let last_reading = truth.log.iter().rev().find_map(|r| match r {
        Record::Answer {
            by,
            bmc,
            machine: Some(of),
            said: Answered::System { reported_off, .. },
            sampled,
            answered,
            ..
        } if by.task == *fence && *of == machine && *sampled <= release.at => {
            Some((*reported_off, *sampled, *answered, *bmc))
        }
        _ => None,
    });
    if let Some((false, sampled, answered, bmc)) = last_reading {
        // A1: an On from a BMC that has not answered the fence since, read before its power action,
        // may be acknowledged; one read after it has no override.
        let dark_since = !truth.log.iter().any(|r| {
            matches!(r, Record::Answer { by, bmc: of, said: Answered::System { .. }, answered: later, .. }
                if by.task == *fence && *of == bmc && *later > answered)
        });
        let before_power_action = power_action.is_none_or(|at| at > sampled);
        if !(acknowledged(AcknowledgedReason::BmcReportedOn) && dark_since && before_power_action) {
            return Err(format!(
                "the fence's last reading of {} ({}) was not Off: the BMC showed the machine alive{}",
                truth.machines[machine].name,
                show(sampled),
                if dark_since { "" } else { ", and it answered the fence since" }
            ));
        }
    }
    let since = admitted_at(truth, fence).unwrap_or(0);
    binding_verified_at_admission(truth, attestation, fence, &release.node, since)?;
    let freshness = micros(scenario.spec.lease_freshness.get());
    let ended = truth.log.iter().find_map(|r| match r {
        Record::Status { at, remediation, after, .. }
            if remediation == fence && after.as_deref() == Some(conditions::FALSE) =>
        {
            Some(*at)
        }
        _ => None,
    });
    // A1: life the fence saw before its power action may be acknowledged (`FenceSawLife`) by an
    // attestation created once leaseFreshness has passed since; life after the power action or
    // after the fence ended, and a Lease fresh at the release, have no override.
    let acknowledged_life = |t: Micros| {
        acknowledged(AcknowledgedReason::FenceSawLife)
            && ended.is_some_and(|ended| t < ended)
            && power_action.is_none_or(|at| t < at)
            && t <= release.at - freshness
            && created >= t + freshness - SECOND
    };
    let life = truth.life.get(&release.node).into_iter().flatten().find(|(t, kind)| {
        matches!(kind, Life::Lease | Life::Ready)
            && *t <= release.at
            && (*t >= since || *t > release.at - freshness)
            && !acknowledged_life(*t)
    });
    if let Some((t, kind)) = life {
        return Err(format!("the node's kubelet reported ({kind:?}) at {}, during or after the fence", show(*t)));
    }
    if crate::fence::ready_status(node) == Some(conditions::TRUE) {
        return Err("the node reports Ready=True".into());
    }
    Ok(())
}

/// Whether the node showed life before the power action at `at`, early enough for coroner to have
/// known: its kubelet renewed its Lease in the freshness window (not in the last moment, which the
/// watch may not have brought yet), or reported `Ready=True` in that window, or a person labelled it
/// excluded — those two before the process last read the Node (a power action rests on that read;
/// one taken before the intent was persisted does not count as a re-check, and then everything up to
/// the action counts); or the Node is another than the one admitted.
fn shows_life(
    truth: &Truth,
    (pid, node, remediation): (u32, &str, &str),
    at: Micros,
    intent: &Option<(String, u32, String)>,
    scenario: &Scenario,
) -> Option<String> {
    let window = micros(scenario.spec.lease_freshness.get());
    let current = truth.nodes.get(node)?;
    let admitted = truth
        .remediations
        .get(remediation)
        .and_then(|r| r.status.as_ref()?.evidence.as_ref()?.node.as_ref().map(|n| n.uid.clone()));
    let seen_until = seen_until(truth, (pid, node, remediation), at, intent);
    // A replacement after the process's last read of the Node, right before the request, it could not see.
    let replacements: Vec<Micros> = truth
        .life
        .get(node)
        .into_iter()
        .flatten()
        .filter(|(_, kind)| *kind == Life::Replaced)
        .map(|(t, _)| *t)
        .collect();
    let seen_replaced = replacements.is_empty() || replacements.iter().any(|t| *t <= seen_until);
    if admitted.is_some_and(|uid| current.uid().as_ref() != Some(&uid)) && seen_replaced {
        return Some("it is another Node than the one admitted (a new UID)".into());
    }
    truth
        .life
        .get(node)?
        .iter()
        .rev()
        .find(|(t, kind)| match kind {
            Life::Lease => *t <= at - UNSEEN_LEASE && *t >= at - window,
            Life::Ready => *t <= seen_until && *t >= at - window,
            Life::Excluded => *t <= seen_until,
            // Not a sign of life: a person's word that the machine may run again (judged for the guard).
            Life::Approved => false,
            Life::Replaced => false,
        })
        .map(|(t, kind)| match kind {
            Life::Excluded => format!("it was labelled {} at {}", contract::EXCLUDE_LABEL, show(*t)),
            _ => format!("its kubelet reported ({kind:?}) at {}", show(*t)),
        })
}

/// Until when the process that acted at `at` had seen the Node: its last read of it, if that came
/// after the intent was persisted (the re-check right before acting); else everything up to `at`.
fn seen_until(
    truth: &Truth,
    (pid, node, remediation): (u32, &str, &str),
    at: Micros,
    intent: &Option<(String, u32, String)>,
) -> Micros {
    let decided = intent.as_ref().and_then(|(instance, attempt, decided)| {
        truth.intents.get(&(remediation.to_owned(), format!("{instance}/{attempt}/{decided}"))).copied()
    });
    let last_read = truth
        .node_reads
        .get(&(pid, remediation.to_owned(), node.to_owned()))
        .and_then(|reads| reads.iter().rev().find(|read| **read <= at).copied());
    match (last_read, decided) {
        (Some(read), Some(decided)) if read >= decided => read,
        _ => at,
    }
}

/// Whether coroner may take the out-of-service taint owned by remediation `owner` off its node now:
/// that fence is past its release (powering on again, with `Reboot`), or the remediation is being
/// deleted or gone.
/// docs/safety.md, "After the release": a Lease renewed since the power-off means the machine
/// switched off is not this node, and the taint is taken back at once. Judged from the world: the
/// node's Lease was renewed after the owning remediation was created (no fence's power-off comes
/// before that), whatever coroner recorded.
fn taken_back_on_life(truth: &Truth, node: &str, owner: Option<&str>) -> bool {
    // In true time: a kubelet's renewTime may run behind the world's clock.
    let Some(name) = truth.remediations.values().find(|r| r.uid().as_deref() == owner).map(|r| r.name_any()) else {
        return false;
    };
    let created = truth.created.iter().rev().find(|(of, ..)| *of == name).map(|(.., at)| *at);
    let renewed = truth.life.get(node).and_then(|life| life.iter().rev().find(|(_, k)| *k == Life::Lease));
    created.zip(renewed).is_some_and(|(created, (renewed, _))| *renewed > created)
}

fn release_may_end(truth: &Truth, owner: Option<&str>) -> bool {
    let Some(r) = truth.remediations.values().find(|r| r.uid().as_deref() == owner) else { return true };
    let phase = Phase::of(r);
    r.metadata.deletion_timestamp.is_some()
        || matches!(phase, Phase::PoweringOn | Phase::WaitingForNode)
        || (phase == Phase::Done && r.spec.action == FenceAction::Reboot)
}
