//! The invariants, judged from the world's record only (docs/simulation.md): the answers devices
//! gave coroner and what they looked at, what coroner's writes did and when they took effect, what
//! the machines really did, who really added a taint, what the kubelets and people really did.
//! coroner's status is never read to decide what was released or what a proof rested on; the
//! pure rules it shares with the product are the gap and freshness functions of docs/safety.md.

mod attestation;
mod guard;
mod levels;
mod proof;

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

use attestation::*;
use guard::*;
use levels::*;
use proof::*;

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
                            silent_at_release(truth, scenario, by, node, (*sent, *at), Write::OnTheNode)
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
                        silent_at_release(truth, scenario, by, node, (*sent, *at), Write::BesideTheNode)
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
        // One after it is read through until the attempt's deadline: no excuse. L2: such a rejection
        // hands a fence with PDU levels to them, and its end is then theirs (a level's own
        // invariants judge it): excused as the rejection itself is.
        let rotated = scenario.events.iter().any(|(_, e)| matches!(e, super::scenario::Event::RotateBmcFirst { .. }));
        let rejected_first = rotated
            && ended.clone().is_some_and(|(name, _)| {
                let first = |wanted: &dyn Fn(&Record) -> bool| truth.log.iter().position(wanted);
                let rejected = first(&|r| matches!(r, Record::CredentialsRejected { by, .. } if by.task == name));
                let reset =
                    first(&|r| matches!(r, Record::Reset { by, on: false, guard: false, .. } if by.task == name));
                let at_level = |after: usize| {
                    truth.log[after..].iter().any(|r| {
                        matches!(r, Record::Status { remediation, phase, .. }
                            if *remediation == name && phase == Phase::PoweringOffOutlets.as_str())
                    })
                };
                let ended_here = ended_for(contract::Reason::BmcAuthenticationFailed).is_some();
                rejected.is_some_and(|rejected| {
                    reset.is_none_or(|reset| rejected < reset) && (ended_here || at_level(rejected))
                })
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
