//! What a kept seed was kept for: each seed `known` lists names the shape of schedule it showed
//! (a cloned UUID read at discovery, a power-on after a `ResourceDeletion` release, …), and the budget
//! asserts that its run still reaches that shape, judged on the world's record as the invariants are.
//! A change of the loop's timings that moves a seed off its shape then fails loudly, and a soak names
//! candidates to replace it, instead of the seed passing while it no longer tests anything.

use super::{
    exec::{Micros, SECOND},
    scenario::{BmcKind, Event, Scenario},
    world::{Adder, Answered, Life, Record, Truth},
};
use crate::{
    api::{FenceAction, Phase},
    taints::CoronerTaint,
};

/// The shape of schedule a kept seed reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    // (The order is `Shape::ALL`'s.)
    /// A fence read the Systems collection of a BMC on which another system clones the node's UUID.
    ClonedUuidDiscovered,
    /// A second remediation of the node wrote its status while an older one's fence was admitted and
    /// not over.
    SecondFenceWhileFirstRuns,
    /// A `ResourceDeletion` release deleted a pod, and the world switched the machine on after it.
    PowerOnAfterDeletionRelease,
    /// A person attested the node after a fence's last reading of its machine was not `Off`.
    AttestedAfterLife,
    /// Someone else's out-of-service taint was on the node while a `Reboot` waited to power on.
    ForeignTaintAtPowerOn,
    /// Someone else's out-of-service taint was added to a node coroner had written its record on.
    ForeignTaintOverRecord,
    /// A release by BMC proof whose run began with a reading asked while the machine was still on
    /// (a ForceOff landing mid-request).
    ProofFromMidRequest,
    /// The guard reported or switched off a released machine on a seed that slows the apiserver.
    GuardOnSlowApi,
    /// A fence read the machine not `Off` and the apiserver failed that fence's next request.
    LifeThenFailedWrite,
    /// A fence's ForceOff followed life (a Lease renewal, `Ready=True`) it had not read yet.
    LifeAfterLastNodeRead,
    /// A pod was deleted by a release and the apiserver failed that fence's next request.
    FaultAfterPodDeleted,
    /// The node was labelled excluded while a fence ran.
    ExcludedMidFence,
    /// The node reported `Ready=True` while a fence ran.
    ReadyMidFence,
    /// A fence in `Releasing` read the machine again before its release (a proof gone stale).
    ProofReadAgain,
    /// A process died right after a release's Node write took effect.
    CrashAfterReleaseWrite,
    /// The Node was replaced while a fence ran.
    NodeReplacedMidFence,
    /// A slow, flaky or unknown-answering BMC, or a slow apiserver, and a fence released on its proof.
    ReleasedOnUnevenReadings,
    /// A leader's wall clock stepped while a fence ran.
    ClockStepped,
    /// A process died or leadership moved while a fence was proving.
    FailoverMidFence,
    /// Credentials changed (rotated, a new Secret value) while a fence ran.
    CredentialsChangedMidFence,
    /// A settle of a minute or more was proven (longer than a client's life).
    LongSettleProven,
    /// The guard sent a ForceOff to a released machine.
    GuardForceOff,
    /// The guard reported or acted on a released machine the world switched on.
    GuardSawPowerOn,
    /// The node came back on its pre-release bootID and `FenceDidNotTakeEffect` was published.
    DidNotTakeEffectReported,
    /// Two or more deaths or leadership moves while a remediation held a power-action slot.
    CrashLoop,
    /// The apiserver failed requests of a fence while it proved the machine off.
    ApiFaultsMidProof,
    /// A person approved a release's power-on, and the world switched that machine on.
    ApprovedPowerOn,
    /// A `Reboot` fence waited to power on while the world switched the machine on.
    PowerOnDuringReboot,
    /// A release through a PDU level.
    LevelRelease,
    /// The guard switched off a shared outlet after the release, the other node it feeds fenced too.
    SharedOutletOffAfterRelease,
    /// An attestation's look made a fence read its machine again (A4).
    LookFoundMachine,
    /// A BMC that lies `Off` was released on.
    LyingBmcReleased,
    /// A fence read another system of the BMC between two `Off` readings of the node's.
    DiscoveryReadMidRun,
    /// A power-on that began and ended between two proving readings of a fence that released.
    PowerOnBetweenSamples,
    /// A fence ended `ReleaseNotWritten` or `PowerOffNotConfirmed` after entering `Releasing`.
    ReleaseRanOut,
    /// A level's outlet request timed out while it proved the machine off.
    PduTimeoutMidLevel,
    /// A level whose mapping was stated wrongly, and the fence switched its outlets.
    WrongStatementSwitched,
    /// A level outlet whose meter fell silent once switched off was read again by the fence (L4).
    MeterFellSilent,
    /// A fence's last attempt ran out while a gate held its power action (`PowerActionHeld`, L2).
    EndedHeld,
    /// The BMC rejected a fence's reading after that fence's accepted ForceOff (its password changed
    /// before its Secret), and the fence read on and released (P7).
    ReleasedThroughRotation,
    /// The binding verifier read a level's outlets and recorded what their draws say of the
    /// mapping (L5).
    LevelObserved,
    /// The binding verifier kept a verification it made during the run beyond the binding object,
    /// and the world counts it as true (A2).
    VerifierKept,
}

impl Shape {
    /// Every shape, for a soak that names candidates.
    pub const ALL: &[Shape] = &[
        Shape::ClonedUuidDiscovered,
        Shape::SecondFenceWhileFirstRuns,
        Shape::PowerOnAfterDeletionRelease,
        Shape::AttestedAfterLife,
        Shape::ForeignTaintAtPowerOn,
        Shape::ForeignTaintOverRecord,
        Shape::ProofFromMidRequest,
        Shape::GuardOnSlowApi,
        Shape::LifeThenFailedWrite,
        Shape::LifeAfterLastNodeRead,
        Shape::FaultAfterPodDeleted,
        Shape::ExcludedMidFence,
        Shape::ReadyMidFence,
        Shape::ProofReadAgain,
        Shape::CrashAfterReleaseWrite,
        Shape::NodeReplacedMidFence,
        Shape::ReleasedOnUnevenReadings,
        Shape::ClockStepped,
        Shape::FailoverMidFence,
        Shape::CredentialsChangedMidFence,
        Shape::LongSettleProven,
        Shape::GuardForceOff,
        Shape::GuardSawPowerOn,
        Shape::DidNotTakeEffectReported,
        Shape::CrashLoop,
        Shape::ApiFaultsMidProof,
        Shape::ApprovedPowerOn,
        Shape::PowerOnDuringReboot,
        Shape::LevelRelease,
        Shape::SharedOutletOffAfterRelease,
        Shape::LookFoundMachine,
        Shape::LyingBmcReleased,
        Shape::DiscoveryReadMidRun,
        Shape::PowerOnBetweenSamples,
        Shape::ReleaseRanOut,
        Shape::PduTimeoutMidLevel,
        Shape::WrongStatementSwitched,
        Shape::MeterFellSilent,
        Shape::EndedHeld,
        Shape::ReleasedThroughRotation,
        Shape::LevelObserved,
        Shape::VerifierKept,
    ];

    /// Whether the run whose world is `truth` reached this shape.
    pub fn reached(self, truth: &Truth, scenario: &Scenario) -> bool {
        let log = &truth.log;
        let fence_task = |task: &str| !task.starts_with("attestation/") && truth.remediation_node(task).is_some();
        let fenced_spans = fenced_spans(truth);
        let mid_fence = |at: Micros| fenced_spans.iter().any(|(from, to)| at >= *from && at <= *to);
        let life_mid_fence = |kind: Life| truth.life.values().flatten().any(|(at, k)| *k == kind && mid_fence(*at));
        let released_by_proof = || {
            log.iter().any(|r| match r {
                Record::NodeWrite { by, before, after, .. } => {
                    fence_task(&by.task) && added_out_of_service(before, after)
                }
                Record::PodDeleted { by, .. } => fence_task(&by.task),
                _ => false,
            })
        };
        let event_fired = |wanted: fn(&Event) -> bool| scenario.events.iter().any(|(_, e)| wanted(e));
        let guard_force_off = || log.iter().any(|r| matches!(r, Record::Reset { guard: true, .. }));
        let guard_report = || {
            guard_force_off()
                || log.iter().any(|r| {
                    matches!(r, Record::Event { reason, .. }
                        if reason == crate::guard::POWERED_ON || reason == crate::guard::BLIND)
                })
        };
        let slow_api = scenario.faults.slow > 0.0 || event_fired(|e| matches!(e, Event::SlowApi { .. }));
        match self {
            Self::ClonedUuidDiscovered => {
                scenario.bmc == BmcKind::Clone
                    && log.iter().any(|r| matches!(r, Record::Answer { by, said: Answered::Members, .. } if fence_task(&by.task)))
            }
            Self::SecondFenceWhileFirstRuns => second_fence_while_first(truth),
            Self::PowerOnAfterDeletionRelease => {
                let deleted = log.iter().find_map(|r| match r {
                    Record::PodDeleted { at, by, .. } if fence_task(&by.task) => Some(*at),
                    _ => None,
                });
                deleted.is_some_and(|d| log.iter().any(|r| matches!(r, Record::PoweredOn { at, .. } if *at > d)))
            }
            Self::AttestedAfterLife => log.iter().enumerate().any(|(i, r)| {
                matches!(r, Record::Attested { .. })
                    && log[..i].iter().rev().find_map(|r| match r {
                        Record::Answer { by, machine: Some(_), said: Answered::System { reported_off, .. }, .. }
                            if fence_task(&by.task) =>
                        {
                            Some(*reported_off)
                        }
                        _ => None,
                    }) == Some(false)
            }),
            Self::ForeignTaintAtPowerOn => {
                scenario.spec.action == FenceAction::Reboot
                    && foreign_out_of_service(truth)
                    && entered(truth, &[Phase::WaitingForRelease, Phase::PoweringOn])
            }
            Self::ForeignTaintOverRecord => {
                foreign_out_of_service(truth)
                    && log.iter().any(|r| {
                        matches!(r, Record::NodeWrite { by, after_annotations, .. }
                            if fence_task(&by.task) && after_annotations.contains_key(CoronerTaint::OutOfService.owner_annotation()))
                    })
            }
            Self::ProofFromMidRequest => {
                released_by_proof()
                    && log.iter().any(|r| match r {
                        Record::Answer {
                            by,
                            machine: Some(m),
                            requested,
                            truly_on: false,
                            said: Answered::System { reported_off: true, .. },
                            ..
                        } => fence_task(&by.task) && truth.machines[*m].on_at(*requested),
                        _ => false,
                    })
            }
            Self::GuardOnSlowApi => slow_api && guard_report(),
            Self::LifeThenFailedWrite => log.iter().enumerate().any(|(i, r)| match r {
                Record::Answer { by, answered, said: Answered::System { reported_off: false, .. }, .. }
                    if fence_task(&by.task) =>
                {
                    log[i..].iter().any(|later| {
                        matches!(later, Record::ApiFault { at, by: of } if of == by && *at >= *answered && *at <= *answered + 2 * SECOND)
                    })
                }
                _ => false,
            }),
            Self::LifeAfterLastNodeRead => log.iter().any(|r| match r {
                Record::Reset { at, by, node, on: false, guard: false, .. } => {
                    let read = truth
                        .node_reads
                        .get(&(by.pid, by.task.clone(), node.clone()))
                        .and_then(|reads| reads.iter().rev().find(|t| **t <= *at).copied())
                        .unwrap_or(0);
                    truth.life.get(node).into_iter().flatten().any(|(t, kind)| {
                        matches!(kind, Life::Lease | Life::Ready) && *t > read && *t <= *at + SECOND
                    })
                }
                _ => false,
            }),
            Self::FaultAfterPodDeleted => log.iter().any(|r| match r {
                Record::PodDeleted { at, by, .. } if fence_task(&by.task) => log.iter().any(|later| {
                    matches!(later, Record::ApiFault { at: f, by: of } if of.task == by.task && *f >= *at && *f <= *at + 5 * SECOND)
                }),
                _ => false,
            }),
            Self::ExcludedMidFence => life_mid_fence(Life::Excluded),
            Self::ReadyMidFence => life_mid_fence(Life::Ready),
            Self::NodeReplacedMidFence => life_mid_fence(Life::Replaced),
            Self::ProofReadAgain => {
                let releasing = entered_at(truth, Phase::Releasing);
                releasing.iter().any(|(task, from)| {
                    log.iter().any(|r| {
                        matches!(r, Record::Answer { by, requested, said: Answered::System { .. }, .. }
                            if by.task == *task && *requested > *from + SECOND)
                    })
                }) && released_by_proof()
            }
            Self::CrashAfterReleaseWrite => log.iter().any(|r| match r {
                Record::NodeWrite { at, by, before, after, .. } if added_out_of_service(before, after) => {
                    truth.disruptions.iter().any(|d| *d >= *at && *d <= *at + SECOND) || !process_alive(truth, by.pid)
                }
                _ => false,
            }),
            Self::ReleasedOnUnevenReadings => {
                (matches!(scenario.bmc, BmcKind::Slow | BmcKind::Flaky | BmcKind::Unknowns) || slow_api)
                    && released_by_proof()
            }
            Self::ClockStepped => event_fired(|e| matches!(e, Event::ClockStep { .. })) && !fenced_spans.is_empty(),
            Self::FailoverMidFence => truth.disruptions.iter().any(|d| mid_fence(*d)),
            Self::CredentialsChangedMidFence => {
                event_fired(|e| matches!(e, Event::RotateCredentials | Event::SecretChange { value: true }))
                    && !fenced_spans.is_empty()
            }
            Self::LongSettleProven => {
                scenario.spec.settle.get() >= std::time::Duration::from_secs(60) && entered(truth, &[Phase::Releasing])
            }
            Self::GuardForceOff => guard_force_off(),
            Self::GuardSawPowerOn => {
                guard_report() && log.iter().any(|r| matches!(r, Record::PoweredOn { .. } | Record::OutletOnByHand { .. }))
            }
            Self::DidNotTakeEffectReported => log.iter().any(|r| {
                matches!(r, Record::Event { reason, .. } if reason == crate::guard::DID_NOT_TAKE_EFFECT)
            }),
            Self::CrashLoop => truth.disruptions.iter().filter(|d| mid_fence(**d)).count() >= 2,
            Self::ApiFaultsMidProof => {
                let proving = entered_at(truth, Phase::ConfirmingOff);
                log.iter().any(|r| {
                    matches!(r, Record::ApiFault { at, by } if proving.iter().any(|(task, from)| by.task == *task && *at >= *from))
                })
            }
            Self::ApprovedPowerOn => {
                log.iter().any(|r| matches!(r, Record::Approved { .. }))
                    && log.iter().any(|r| matches!(r, Record::PoweredOn { .. }))
                    && released_by_proof()
            }
            Self::PowerOnDuringReboot => {
                scenario.spec.action == FenceAction::Reboot
                    && entered_at(truth, Phase::WaitingForRelease).iter().any(|(_, from)| {
                        log.iter().any(|r| matches!(r, Record::PoweredOn { at, .. } if *at >= *from))
                    })
            }
            Self::LevelRelease => {
                released_by_proof() && log.iter().any(|r| matches!(r, Record::OutletSwitched { on: false, .. }))
            }
            Self::SharedOutletOffAfterRelease => {
                let released = log.iter().find_map(|r| match r {
                    Record::NodeWrite { at, node, after, .. }
                        if node == super::TARGET && after.iter().any(|t| t.key == CoronerTaint::OutOfService.key()) =>
                    {
                        Some(*at)
                    }
                    _ => None,
                });
                log.iter().any(|r| {
                    matches!(r, Record::OutletSwitched { at, outlet, on: false, .. }
                        if truth.outlets[*outlet].also_feeds.is_some() && released.is_some_and(|rel| *at > rel))
                })
            }
            Self::LookFoundMachine => truth.remediations.values().any(|r| {
                r.status
                    .as_ref()
                    .and_then(|s| s.evidence.as_ref()?.attestation_look.as_ref())
                    .is_some_and(|look| look.found.is_some())
            }),
            Self::LyingBmcReleased => scenario.bmc == BmcKind::LiesOff && released_by_proof(),
            Self::DiscoveryReadMidRun => {
                released_by_proof()
                    && log.iter().any(|r| {
                        matches!(r, Record::Answer { by, machine: Some(m), said: Answered::System { .. }, .. }
                            if fence_task(&by.task) && truth.machine_of_node(super::TARGET) != Some(*m))
                    })
            }
            Self::PowerOnBetweenSamples => {
                released_by_proof()
                    && log.iter().any(|r| matches!(r, Record::PoweredOn { until: Some(until), at, .. } if until - at < 2 * SECOND))
            }
            Self::ReleaseRanOut => {
                entered(truth, &[Phase::Releasing])
                    && truth.remediations.values().any(|r| {
                        let conditions = r.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
                        crate::api::conditions::find(conditions, crate::contract::SUCCEEDED).is_some_and(|c| {
                            c.reason == crate::contract::Reason::ReleaseNotWritten.as_str()
                                || c.reason == crate::contract::Reason::PowerOffNotConfirmed.as_str()
                        })
                    })
            }
            Self::PduTimeoutMidLevel => log.iter().any(|r| matches!(r, Record::PduTimeout { .. })),
            Self::ReleasedThroughRotation => {
                event_fired(|e| matches!(e, Event::RotateBmcFirst { .. }))
                    && released_by_proof()
                    && log.iter().enumerate().any(|(i, r)| match r {
                        Record::Reset { by, on: false, guard: false, .. } => log[i..].iter().any(|later| {
                            matches!(later, Record::CredentialsRejected { by: of, .. } if of.task == by.task)
                        }),
                        _ => false,
                    })
            }
            Self::LevelObserved => truth.bindings.values().any(|b| {
                let confirmations = b.status.as_ref().map(|s| s.level_confirmations.as_slice()).unwrap_or_default();
                confirmations.iter().any(|c| c.on_seen_at.is_some() || c.off_seen_at.is_some())
            }),
            Self::VerifierKept => truth.kept_verifications.values().any(|kept| {
                let made_in_run = |(at, of, _): &(Micros, String, u64)| {
                    *at > 0 && truth.bindings.get(of).and_then(|b| b.metadata.uid.as_deref()) == Some(kept.uid.as_str())
                };
                kept.at > truth.wall(0) && truth.binding_verifications.iter().any(made_in_run)
            }),
            Self::EndedHeld => truth.remediations.values().any(|r| {
                let conditions = r.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
                crate::api::conditions::find(conditions, crate::contract::SUCCEEDED)
                    .is_some_and(|c| c.reason == crate::contract::Reason::PowerActionHeld.as_str())
            }),
            Self::MeterFellSilent => log.iter().any(|r| match r {
                Record::OutletSwitched { at, outlet, on: false, .. } if truth.outlets[*outlet].silent_off.is_some() => {
                    log.iter().any(|later| {
                        matches!(later, Record::OutletAnswer { by, outlet: o, requested, .. }
                            if o == outlet && *requested > *at && fence_task(&by.task))
                    })
                }
                _ => false,
            }),
            Self::WrongStatementSwitched => {
                scenario.levels.is_some_and(|l| l.wrong_mapping)
                    && log.iter().any(|r| matches!(r, Record::OutletSwitched { on: false, .. }))
            }
        }
    }
}

fn added_out_of_service(
    before: &[k8s_openapi::api::core::v1::Taint],
    after: &[k8s_openapi::api::core::v1::Taint],
) -> bool {
    let key = CoronerTaint::OutOfService.key();
    after.iter().any(|t| t.key == key) && !before.iter().any(|t| t.key == key)
}

fn process_alive(truth: &Truth, pid: u32) -> bool {
    truth.processes.get(&pid).is_some_and(|p| p.alive)
}

/// Someone other than coroner put an out-of-service taint on a node.
fn foreign_out_of_service(truth: &Truth) -> bool {
    let key = CoronerTaint::OutOfService.key();
    truth.provenance.iter().any(|(taint, adder)| taint.starts_with(key) && matches!(adder, Adder::Someone(_)))
}

/// Each remediation's first entry into `phase`, by task (the remediation's name).
fn entered_at(truth: &Truth, phase: Phase) -> Vec<(String, Micros)> {
    let mut seen = Vec::<(String, Micros)>::new();
    for r in &truth.log {
        if let Record::Status { at, remediation, phase: now, .. } = r
            && now == phase.as_str()
            && !seen.iter().any(|(task, _)| task == remediation)
        {
            seen.push((remediation.clone(), *at));
        }
    }
    seen
}

fn entered(truth: &Truth, phases: &[Phase]) -> bool {
    phases.iter().any(|phase| !entered_at(truth, *phase).is_empty())
}

/// When each fence ran: from its first status write past `Pending` to its first terminal or
/// post-release phase (or the end of the run).
fn fenced_spans(truth: &Truth) -> Vec<(Micros, Micros)> {
    let mut spans: Vec<(String, Micros, Micros)> = Vec::new();
    for r in &truth.log {
        let Record::Status { at, remediation, phase, .. } = r else { continue };
        let running = !matches!(
            phase.as_str(),
            "Pending" | "Done" | "Failed" | "WaitingForRelease" | "PoweringOn" | "WaitingForNode"
        );
        match spans.iter_mut().find(|(task, ..)| task == remediation) {
            Some((_, _, end)) if *end == Micros::MAX && !running => *end = *at,
            Some(_) => {}
            None if running => spans.push((remediation.clone(), *at, Micros::MAX)),
            None => {}
        }
    }
    spans.into_iter().map(|(_, from, to)| (from, to.min(truth.now))).collect()
}

/// A younger remediation of a node wrote its status while an older one's fence ran.
fn second_fence_while_first(truth: &Truth) -> bool {
    let spans: Vec<(String, String, Micros, Micros)> = {
        let mut spans: Vec<(String, String, Micros, Micros)> = Vec::new();
        for r in &truth.log {
            let Record::Status { at, remediation, phase, .. } = r else { continue };
            let Some(node) = truth.remediation_node(remediation) else { continue };
            let running = !matches!(phase.as_str(), "Pending" | "Done" | "Failed");
            match spans.iter_mut().find(|(task, ..)| task == remediation) {
                Some((_, _, _, end)) if *end == Micros::MAX && !running => *end = *at,
                Some(_) => {}
                None if running => spans.push((remediation.clone(), node, *at, Micros::MAX)),
                None => {}
            }
        }
        spans
    };
    truth.log.iter().any(|r| {
        let Record::Status { at, remediation, .. } = r else { return false };
        let Some(node) = truth.remediation_node(remediation) else { return false };
        spans.iter().any(|(older, of, from, to)| {
            older != remediation && *of == node && *from < *at && *at < *to && truth.created_before(older, remediation)
        })
    })
}
