//! The fence state machine. Every step is `next(spec, status, observation, context) -> Decision`: a pure
//! function of what is persisted in the remediation's status and what was just observed.
//!
//! The controller asks [`plan`] what to observe, observes it (BMC reads, the checked release, the node's
//! workloads), calls [`next`], persists the new status under a resourceVersion precondition, and only
//! then sends the BMC mutation the decision carries (the persisted intent comes first: if the write
//! fails, nothing is sent). The answer is fed back through [`next`] as [`Observation::ResetAnswered`].

mod admission;
#[cfg(test)]
mod level_tests;
mod look;
mod observe;
mod outlets;
mod power_off;
mod power_on;
#[cfg(test)]
mod props;
mod records;
mod release;
#[cfg(test)]
mod tests;
mod timing;

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

pub use look::{
    LOOK_ANSWERED, LookGate, as_proving_again, look_may_be_taken, look_pending, proving_again, runs_past_nhc_timeout,
};
pub use observe::*;
pub use outlets::{BmcVerdict, OUTLET_MAPPING_UNPROVEN, may_end_in_a_level};
pub use records::*;
pub use timing::*;

use crate::{
    api::{
        CoronerRemediationSpec, CoronerRemediationStatus, Evidence, FenceAction, IdentityEvidence, Intent, OffRun,
        Phase, PowerAction, PowerOffEvidence, PowerOnEvidence, Progress, Reading, ReleaseEvidence, ReleaseKind,
        conditions,
    },
    bmc::{PowerState, ResetType},
    contract::{self, Reason},
    identity,
};

pub use crate::words::Mono;

/// Readings kept from the start and the end of an Off run; bounds the status size.
const FIRST_READINGS: usize = 3;
const LAST_READINGS: usize = 5;
/// How often a remediation that waits on something outside coroner looks again.
const WAIT_RECHECK: StdDuration = StdDuration::from_secs(5);

/// What the controller should observe (or do, for Kubernetes-side steps that are idempotent) next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to observe before this time has passed.
    Wait(StdDuration),
    /// Evaluate the safety gates and, when they admit, record the node as found.
    Admit,
    /// Resolve the binding and read the BMC's system(s) for the identity proof.
    VerifyIdentity,
    /// One power reading of the verified system.
    ReadPower { system_path: String },
    /// One reading of every outlet of a PDU level (2 for the binding's first `pduLevels` entry).
    ReadOutlets { level: u32 },
    /// L7: every outlet of the level has read Off for settle: does the node's BMC still answer?
    AskBmcAfterOutlets,
    /// A4: the failed fence's look through its binding, asked for by an attestation about to release
    /// (read as the identity step reads).
    Look,
    /// Re-check the node and release its workloads in one resourceVersion-checked update, before the
    /// proof's freshness runs out ([`proof_deadline`]).
    Release,
    /// `ResourceDeletion`: the same re-checks, so that the release can be recorded as begun before the
    /// first pod is deleted ([`Progress::release_begun`]).
    BeginDeletion,
    /// `ResourceDeletion` begun and its proof gone stale (apiserver errors held the status write
    /// back): with no pod left to delete, the release is recorded as it stands — recording deletes
    /// nothing, so it needs no fresh proof; otherwise the machine is read, and proven again before
    /// any further pod goes.
    FinishDeletion { system_path: String },
    /// This remediation's own exact out-of-service taint is on the node but its status does not say so
    /// (coroner stopped between the release and its status write): record that release.
    RecordRelease,
    /// Count the node's pods and VolumeAttachments that still hold the release up.
    CheckWorkloads,
    /// Nothing to do until the node or the remediation changes.
    Idle,
}

/// A Kubernetes Event to publish on the remediation and on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// The Event reason when a release took over an out-of-service taint whose remediation is gone (R4).
pub const STALE_TAINT_ADOPTED: &str = crate::words::event::Event::StaleTaintAdopted.as_str();

/// What a node's operator must see on the Node, not only on the remediation: every warning (a
/// refusal, a failure, a wait that holds the fence, the guard's alarms, a split-brain), the release
/// (its Event says the machine was proven Off), a power-on and what the guard did. Each other step
/// of the fence, the ForceOff that the release then reports included, is an Event on the
/// remediation only: every Event is an apiserver write.
pub fn for_the_node(notice: &Notice) -> bool {
    use crate::words::event::{Also, Event};
    notice.warning
        || notice.reason == Reason::NodeFenced.as_str()
        || Event::parse(&notice.reason).is_some_and(|event| event.also() == Also::Node)
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: CoronerRemediationStatus,
    /// What this process now knows of the fence (never persisted).
    pub memory: Memory,
    /// A BMC mutation to send after `status` (which records it as intent) has been persisted.
    pub reset: Option<ResetType>,
    /// When to look again; `None` waits for a change of the remediation or the node.
    pub requeue: Option<StdDuration>,
    pub notices: Vec<Notice>,
}

/// How BMC requests are made: what bounds the gap between two readings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub request_timeout: StdDuration,
    /// Extra tries of a read after a transport error or a 5xx.
    pub read_retries: u32,
}

/// An unbroken run of Off readings of the verified system, taken by this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub first: Sampled,
    pub last: Sampled,
    pub count: u32,
}

/// What this process knows of one fence and never persists: a proof counts only in the process that
/// took it, so a status anyone may write can never stand in for one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// The current unbroken run of Off readings, not yet a proof.
    pub run: Option<Run>,
    /// The run that proved the machine off, extended by every later unbroken Off reading.
    pub proof: Option<Run>,
    /// When this process began the current attempt (or phase with a deadline): its clock.
    pub attempt_started: Option<Mono>,
    /// When this process last asked for a reading (pacing).
    pub last_requested: Option<Mono>,
    /// No next attempt before this.
    pub not_before: Option<Mono>,
    /// The device the identity was proven through.
    pub through: Option<DeviceMark>,
    /// What this process's last reading of the verified system said, even when the status write
    /// after it failed (A1: an attestation does not follow it when it was not `Off`).
    pub last_power: Option<String>,
    /// When the guard last read the released machine, and how many times it has.
    pub guarded_at: Option<Mono>,
    pub guard_reads: u64,
    /// R2: the fence itself read the released machine not Off while its release stood (before its
    /// `On` was answered): the guard judges on that reading at once, even if its own finds it off.
    pub sighted_on: Option<PowerState>,
    /// The finalizer published `FenceDidNotTakeEffect` on the Node: a finalizer retried (its own
    /// write conflicted) must not publish it again. Kept after the finalizer, for that retry.
    pub finalizer_reported: bool,
    /// R1: this process recorded the `ResourceDeletion` release as begun and has sent no pod
    /// deletion since (every call that sent one reports it). Another process cannot know this.
    pub begun_untouched: bool,
    /// The generation of a spec edit after admission this process announced ([`ignored_spec_edit`]).
    pub spec_edit_announced: Option<i64>,
    /// The outlets of a PDU level as this process last read them, for the proof's evidence.
    pub outlets: Vec<crate::api::OutletProof>,
    /// L7's answer for the level being proven ([`BmcVerdict`]).
    pub bmc_after: Option<BmcVerdict>,
}

/// What stays fixed for one reconcile.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The wall clock, for what people read.
    pub now: Timestamp,
    /// This process's monotonic clock, for every duration decided on.
    pub mono: Mono,
    /// This coroner process (and leadership term), as recorded in intents and evidence.
    pub instance: &'a str,
    pub node: &'a NodeSnapshot,
    /// Why the power action must wait, if it must: the lease gate, checked again right before it.
    pub hold_power_action: Option<&'a (Reason, String)>,
    pub memory: &'a Memory,
    pub timing: Timing,
    /// The node's binding's PDU levels (from the store), for a fence that may move on to one.
    pub levels: Option<LevelsView<'a>>,
    /// Test builds only: what the simulated world sabotages ([`crate::sabotage`]).
    #[cfg(test)]
    pub sabotage: crate::sabotage::Sabotage,
}

pub fn phase_of(status: &CoronerRemediationStatus) -> Phase {
    status.phase.unwrap_or_default()
}

/// The spec a fence follows: as admitted, once admitted (edits of the remediation mid-fence change
/// nothing).
pub fn spec_of<'a>(
    spec: &'a CoronerRemediationSpec,
    status: &'a CoronerRemediationStatus,
) -> &'a CoronerRemediationSpec {
    status.admitted_spec.as_ref().unwrap_or(spec)
}

/// An edit of a remediation's spec after its admission changes nothing in its fence (it follows the
/// spec as admitted, [`spec_of`]): said once per generation, on the remediation, so the person who
/// edited it learns why nothing changed. `announced`: the generation already said.
pub fn ignored_spec_edit(
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    generation: Option<i64>,
    announced: Option<i64>,
) -> Option<Notice> {
    let admitted = status.admitted_spec.as_ref()?;
    if admitted == spec || generation == announced || phase_of(status).is_terminal() {
        return None;
    }
    Some(Notice {
        warning: true,
        reason: crate::words::event::Event::SpecEditIgnored.as_str().into(),
        message: format!(
            "the spec changed after admission (generation {}): this fence follows the spec it was admitted with; a new spec applies to the next remediation (edit the CoronerRemediationTemplate)",
            generation.unwrap_or_default()
        ),
    })
}

fn is_released(status: &CoronerRemediationStatus) -> bool {
    status.evidence.as_ref().is_some_and(|e| e.release.is_some())
}

/// R1: a `ResourceDeletion` release whose beginning is not yet persisted: no pod may be deleted
/// until it is, since a pod deleted and then forgotten (a crash, a lost answer) is a release nobody
/// guards.
pub fn deletion_unrecorded(spec: &CoronerRemediationSpec, status: &CoronerRemediationStatus) -> bool {
    spec.remediation_strategy == crate::api::RemediationStrategy::ResourceDeletion
        && status.progress.as_ref().is_none_or(|p| p.release_begun.is_none())
}

/// R1: a `ResourceDeletion` release recorded as begun (its first pod may be gone).
pub fn deletion_begun(spec: &CoronerRemediationSpec, status: &CoronerRemediationStatus) -> bool {
    spec.remediation_strategy == crate::api::RemediationStrategy::ResourceDeletion
        && status.progress.as_ref().is_some_and(|p| p.release_begun.is_some())
}

const NOTHING_RELEASED: &str = "nothing released";

fn settle_begun_standalone(status: &mut CoronerRemediationStatus, message: String, guarded: bool) -> String {
    let (Some(progress), evidence) = (status.progress.as_mut(), &mut status.evidence) else { return message };
    settle_begun_release(progress, evidence.get_or_insert_with(Evidence::default), message, false, guarded)
}

/// R1: a fence that ends after its pod deletions began, without their release recorded, records it
/// all the same: the pods deleted are released and the guard watches the machine. The final message
/// then says so where it would say "nothing released". `untouched`: this process knows no pod was
/// sent for deletion since the record ([`Memory::begun_untouched`]); then nothing was released.
pub fn settle_begun_release(
    progress: &mut Progress,
    evidence: &mut Evidence,
    message: String,
    untouched: bool,
    guarded: bool,
) -> String {
    let Some(begun) = progress.release_begun.take() else { return message };
    if evidence.release.is_some() || untouched {
        return message;
    }
    let watch = if guarded { ", and the machine is guarded" } else { "" };
    let held = format!(
        "pods of the node may have been force-deleted since {}: any that were are released{watch}; no further pod is deleted",
        begun.released_at.0
    );
    evidence.release = Some(begun);
    if message.contains(NOTHING_RELEASED) {
        message.replace(NOTHING_RELEASED, &held)
    } else {
        format!("{message}; {held}")
    }
}

/// What to observe next in the current phase.
pub fn plan(spec: &CoronerRemediationSpec, status: &CoronerRemediationStatus, ctx: Context<'_>) -> Plan {
    let spec = spec_of(spec, status);
    let memory = ctx.memory;
    let after = |at: Option<Mono>| at.filter(|at| *at > ctx.mono).map(|at| at - ctx.mono);
    let paced = || after(next_reading_due(spec, memory));
    let system_path = || status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.system_path.clone());
    let level = status.progress.as_ref().and_then(|p| p.level);
    let read = || match level {
        Some(level) => Plan::ReadOutlets { level },
        None => system_path().map_or(Plan::VerifyIdentity, |system_path| Plan::ReadPower { system_path }),
    };
    let phase = phase_of(status);
    if release_unrecorded(status, ctx.node) {
        return Plan::RecordRelease;
    }
    match phase {
        Phase::Pending => Plan::Admit,
        Phase::VerifyingIdentity => after(memory.not_before).map_or(Plan::VerifyIdentity, Plan::Wait),
        Phase::PoweringOff => after(memory.not_before).map_or_else(read, Plan::Wait),
        Phase::ConfirmingOff => paced().map_or_else(read, Plan::Wait),
        Phase::PoweringOffOutlets => outlets::plan(spec, memory, after(memory.not_before).or_else(paced), read),
        // Only a fresh proof taken by this process releases; any other first reads again.
        Phase::Releasing => match proof_deadline(spec, memory, ctx.timing) {
            Some(deadline) if ctx.mono < deadline && deletion_unrecorded(spec, status) => Plan::BeginDeletion,
            Some(deadline) if ctx.mono < deadline => Plan::Release,
            _ => match (deletion_begun(spec, status), system_path()) {
                (true, Some(system_path)) if level.is_none() => Plan::FinishDeletion { system_path },
                _ => read(),
            },
        },
        Phase::WaitingForRelease => Plan::CheckWorkloads,
        Phase::PoweringOn => match paced() {
            Some(wait) => Plan::Wait(wait),
            None => system_path().map_or(Plan::Idle, |system_path| Plan::ReadPower { system_path }),
        },
        Phase::Failed if look_pending(status).is_some() => Plan::Look,
        Phase::WaitingForNode | Phase::Done | Phase::Failed => Plan::Idle,
    }
}

/// The next step of the fence.
pub fn next(
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    observation: Observation,
    ctx: Context<'_>,
) -> Decision {
    let spec = spec_of(spec, status);
    let mut step = Step::new(spec, status, ctx);
    match (phase_of(status), observation) {
        (_, Observation::ResetAnswered { action, result }) => step.reset_answered(action, result),
        (phase, Observation::ActionRefused(refusal)) if !phase.is_terminal() => step.action_refused(refusal),
        (phase, Observation::DeviceChanged { proven, now }) if !phase.is_terminal() => step.device_changed(proven, now),
        (phase, Observation::ActionUnsent(failure)) if !phase.is_terminal() => step.action_unsent(phase, failure),
        (Phase::Pending, Observation::Admission(verdict)) => step.admission(verdict),
        (Phase::VerifyingIdentity | Phase::PoweringOff | Phase::ConfirmingOff, Observation::Identity(found)) => {
            step.identity(found)
        }
        (Phase::PoweringOff, Observation::Power(reading)) => step.powering_off(reading),
        (Phase::ConfirmingOff, Observation::Power(reading)) => step.confirming_off(reading),
        (Phase::Releasing, Observation::Power(reading)) => step.releasing(reading),
        (Phase::PoweringOffOutlets, Observation::Outlets(reading)) => step.outlets_read(reading),
        (Phase::PoweringOffOutlets, Observation::BmcAfterOutlets(found)) => step.bmc_after_outlets(found),
        (Phase::Failed, Observation::Looked { found, nhc_timed_out }) => step.looked(found, nhc_timed_out),
        (Phase::Failed, Observation::LookNotTaken(why)) => step.look_not_taken(why),
        (Phase::Releasing, Observation::Outlets(reading)) => step.outlets_releasing(reading),
        (Phase::Releasing, Observation::Release(outcome)) => step.released(outcome),
        (Phase::Releasing, Observation::DeletionMayBegin(outcome)) => step.deletion_may_begin(outcome),
        (Phase::WaitingForRelease, Observation::Workloads(workloads)) => step.waiting_for_release(workloads),
        (Phase::PoweringOn, Observation::Power(reading)) => step.powering_on(reading),
        (Phase::WaitingForNode, Observation::Nothing) => step.waiting_for_node(),
        (phase, Observation::Unavailable(cause)) => step.unavailable(phase, cause),
        (_, Observation::Wait) => step.requeue = plan(spec, status, ctx).wait_time().or(Some(WAIT_RECHECK)),
        _ => {}
    }
    step.finish()
}

/// A decision made outside a fence step (start, timeout, missing node, leader on the node): stamps
/// the phase change and the update time.
/// A1: what this process last read of the node's machine outlives a decision taken without a
/// reading (NHC's timeout, a missing Node, a leader on its target node), as it outlives every step:
/// into status, and kept in memory. A reading whose own status write failed would otherwise be lost
/// with the process, and an attestation could follow life it showed.
pub fn keeping_last_reading(mut decision: Decision, memory: &Memory) -> Decision {
    if let Some(power) = &memory.last_power {
        let progress = decision.status.progress.get_or_insert_with(Progress::default);
        progress.last_power_state = last_reading_kept(progress.last_power_state.as_deref(), Some(power));
        decision.memory.last_power = Some(power.clone());
    }
    decision
}

/// A1: a reading of life this process took and could not record (its status write failed, or
/// another process wrote first) goes into the latest status on its own, whether this process still
/// leads or not: a failed write never loses a sign of life. `None` when the latest status already
/// shows life, or this process remembers none.
pub fn recording_life(latest: &CoronerRemediationStatus, remembered: Option<&str>) -> Option<CoronerRemediationStatus> {
    let remembered = remembered.filter(|p| crate::bmc::PowerState::recorded_shows_life(p))?;
    let recorded = latest.progress.as_ref().and_then(|p| p.last_power_state.as_deref());
    if recorded.is_some_and(crate::bmc::PowerState::recorded_shows_life) {
        return None;
    }
    let mut status = latest.clone();
    let progress = status.progress.get_or_insert_with(Progress::default);
    progress.last_power_state = Some(remembered.to_owned());
    // Life after a lapsed proof: the power-off is the cause again (`release_ran_out`).
    progress.proof_lapsed_in = None;
    Some(status)
}

/// A1: the last reading status keeps when this process's memory holds one (perhaps never
/// persisted) and status holds another (perhaps another process's, taken later): neither order is
/// known, so a reading that showed life wins, and an `Off` never replaces it.
pub fn last_reading_kept(recorded: Option<&str>, remembered: Option<&str>) -> Option<String> {
    match (recorded, remembered) {
        (Some(recorded), Some(remembered))
            if crate::bmc::PowerState::recorded_shows_life(recorded)
                && !crate::bmc::PowerState::recorded_shows_life(remembered) =>
        {
            Some(recorded.to_owned())
        }
        (recorded, remembered) => remembered.or(recorded).map(str::to_owned),
    }
}

fn standalone(
    old: &CoronerRemediationStatus,
    mut new: CoronerRemediationStatus,
    now: Timestamp,
    requeue: Option<StdDuration>,
    notices: Vec<Notice>,
) -> Decision {
    stamp_phase(old, &mut new, now);
    if new != *old {
        new.last_update_time = Some(Time(now));
    }
    Decision { status: new, memory: Memory::default(), reset: None, requeue, notices }
}

/// Marks when the phase changed, so operators (and alerts) see how long a remediation has been in it.
fn stamp_phase(old: &CoronerRemediationStatus, new: &mut CoronerRemediationStatus, now: Timestamp) {
    if new.phase != old.phase {
        new.phase_since = Some(MicroTime(now));
    }
}

/// A remediation seen for the first time: `Processing=True`, `Succeeded=Unknown` before any gate runs.
pub fn start(status: &CoronerRemediationStatus, node_name: &str, now: Timestamp) -> Option<Decision> {
    if status.phase.is_some() {
        return None;
    }
    let mut new = status.clone();
    let message = format!("remediation of node {node_name} accepted; checking the safety gates");
    contract::record(&mut new.conditions, Reason::RemediationStarted, &message, now);
    new.phase = Some(Phase::Pending);
    let notice = Notice { warning: false, reason: Reason::RemediationStarted.as_str().into(), message };
    Some(standalone(status, new, now, Some(StdDuration::ZERO), vec![notice]))
}

/// coroner's leader runs on the node to fence: it never fences itself. The remediation waits in its
/// phase (`Processing=True`) until another replica leads.
pub fn leader_on_target(status: &CoronerRemediationStatus, node_name: &str, now: Timestamp) -> Decision {
    let mut new = status.clone();
    let message =
        format!("coroner's leader runs on node {node_name}, the node to fence: waiting for another replica to lead");
    let changed = contract::record(&mut new.conditions, Reason::LeaderOnTargetNode, &message, now);
    let notices = if changed {
        vec![Notice { warning: true, reason: Reason::LeaderOnTargetNode.as_str().into(), message }]
    } else {
        vec![]
    };
    standalone(status, new, now, Some(WAIT_RECHECK), notices)
}

/// NHC stamped `nhc-timed-out`: no further BMC mutation. Unless the fence already succeeded, it fails.
pub fn timed_out(status: &CoronerRemediationStatus, now: Timestamp) -> Option<Decision> {
    let phase = phase_of(status);
    if phase.is_terminal() {
        return None;
    }
    let mut new = status.clone();
    // A proof taken again on an attestation's look releases with Succeeded kept False (A4).
    let succeeded = conditions::is_true(&status.conditions, contract::SUCCEEDED) || is_released(status);
    let message = if succeeded {
        format!("NodeHealthCheck timed the remediation out in phase {}; no further BMC request is sent", phase.as_str())
    } else {
        format!(
            "NodeHealthCheck timed the remediation out in phase {} before the fence succeeded; nothing released, no further BMC request is sent",
            phase.as_str()
        )
    };
    let message = settle_begun_standalone(&mut new, message, true);
    if succeeded {
        conditions::set(
            &mut new.conditions,
            contract::PROCESSING,
            conditions::FALSE,
            Reason::TimedOutByNHC.as_str(),
            &message,
            now,
        );
        new.phase = Some(Phase::Done);
    } else {
        contract::record(&mut new.conditions, Reason::TimedOutByNHC, &message, now);
        new.phase = Some(Phase::Failed);
    }
    let notice = Notice { warning: !succeeded, reason: Reason::TimedOutByNHC.as_str().into(), message };
    Some(standalone(status, new, now, None, vec![notice]))
}

/// The node is gone. Before success that ends the fence; after it, there is nothing left to wait for.
pub fn node_missing(status: &CoronerRemediationStatus, node_name: &str, now: Timestamp) -> Option<Decision> {
    let phase = phase_of(status);
    if phase.is_terminal() {
        return None;
    }
    let mut new = status.clone();
    // A deleted Node ends the guard (R4): the release is recorded, not watched.
    let message = settle_begun_standalone(&mut new, format!("Node {node_name} does not exist"), false);
    if conditions::is_true(&status.conditions, contract::SUCCEEDED) || is_released(status) {
        contract::record(
            &mut new.conditions,
            Reason::RemediationComplete,
            &format!("{message} any more; nothing left to do"),
            now,
        );
        new.phase = Some(Phase::Done);
    } else {
        contract::record(&mut new.conditions, Reason::NodeNotFound, &message, now);
        new.phase = Some(Phase::Failed);
    }
    let notice = Notice { warning: true, reason: Reason::NodeNotFound.as_str().into(), message };
    Some(standalone(status, new, now, None, vec![notice]))
}

/// Whether coroner's `coroner.dev/fencing:NoSchedule` taint belongs on the node in this state: from
/// admission on; after a final refusal only if a power action was ever decided (the machine may be
/// half-way off); with `Off` until the remediation is deleted; with `Reboot` until the node is back.
pub fn fencing_taint_wanted(spec: &CoronerRemediationSpec, status: &CoronerRemediationStatus) -> bool {
    match phase_of(status) {
        Phase::Pending => false,
        Phase::Failed => power_action_decided(status),
        Phase::Done => spec.action == FenceAction::Off || !node_returned(status),
        _ => true,
    }
}

/// Whether coroner takes its own out-of-service taint off the node now: only once the fence decided
/// so (before powering the machine on again). A taint of this remediation that its status does not
/// know of is a release done just before coroner stopped: it stays, and is recorded, never removed
/// and added again. With `Off` it stays until the remediation is deleted (the finalizer).
pub fn out_of_service_taint_ends(status: &CoronerRemediationStatus) -> bool {
    status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_some_and(|r| r.taint_removed_at.is_some())
}

fn power_action_decided(status: &CoronerRemediationStatus) -> bool {
    status.progress.as_ref().is_some_and(|p| p.intent.is_some())
        || status.evidence.as_ref().and_then(|e| e.power_off.as_ref()).is_some_and(|p| !p.resets.is_empty())
}

fn node_returned(status: &CoronerRemediationStatus) -> bool {
    status.evidence.as_ref().and_then(|e| e.power_on.as_ref()).is_some_and(|p| p.new_boot_id.is_some())
}

fn elapsed(since: Timestamp, now: Timestamp) -> StdDuration {
    StdDuration::try_from(now.duration_since(since)).unwrap_or_default()
}

impl Plan {
    fn wait_time(&self) -> Option<StdDuration> {
        match self {
            Plan::Wait(wait) => Some(*wait),
            _ => None,
        }
    }
}

/// The working copy of one decision.
struct Step<'a> {
    spec: &'a CoronerRemediationSpec,
    ctx: Context<'a>,
    old: &'a CoronerRemediationStatus,
    status: CoronerRemediationStatus,
    progress: Progress,
    evidence: Evidence,
    memory: Memory,
    reset: Option<ResetType>,
    requeue: Option<StdDuration>,
    notices: Vec<Notice>,
}

impl<'a> Step<'a> {
    pub(super) fn new(spec: &'a CoronerRemediationSpec, old: &'a CoronerRemediationStatus, ctx: Context<'a>) -> Self {
        Self {
            spec,
            ctx,
            old,
            status: old.clone(),
            progress: {
                // A1: this process's own last reading (perhaps never persisted) goes into status.
                let mut progress = old.progress.clone().unwrap_or_default();
                progress.last_power_state =
                    last_reading_kept(progress.last_power_state.as_deref(), ctx.memory.last_power.as_deref());
                progress
            },
            evidence: old.evidence.clone().unwrap_or_default(),
            memory: ctx.memory.clone(),
            reset: None,
            requeue: None,
            notices: Vec::new(),
        }
    }

    pub(super) fn now(&self) -> MicroTime {
        MicroTime(self.ctx.now)
    }

    pub(super) fn finish(mut self) -> Decision {
        // A reset goes out only as the persisted intent of a live fence: if a later rule of this
        // step ended the attempt or the fence, nothing is sent.
        let phase = self.status.phase.unwrap_or_default();
        let intended = |reset: ResetType| {
            self.progress.intent.as_ref().is_some_and(|i| i.result.is_none() && ResetType::from(i.action) == reset)
        };
        let reset = self.reset.filter(|r| !phase.is_terminal() && intended(*r));
        // No reset of the memory forgets what the machine last read (A1): this step's own reading
        // (in progress since it was taken), else what the process read before.
        if self.memory.last_power.is_none() {
            self.memory.last_power =
                self.progress.last_power_state.clone().or_else(|| self.ctx.memory.last_power.clone());
        }
        // An error an earlier phase recorded is not this phase's: a phase change carries none over.
        let carried = self.old.progress.as_ref().and_then(|p| p.last_error.as_ref());
        if self.status.phase != self.old.phase && self.progress.last_error.as_ref() == carried {
            self.progress.last_error = None;
        }
        note_life_seen(&mut self.progress, self.evidence.node.as_ref(), self.ctx.node, self.ctx.now);
        if phase.is_terminal() {
            // The fence is over; the guard after the release is not.
            self.memory = Memory {
                guarded_at: self.memory.guarded_at,
                guard_reads: self.memory.guard_reads,
                last_power: self.memory.last_power.take(),
                // R2: a sighting the guard has not acted on yet is the guard's, not the fence's.
                sighted_on: self.memory.sighted_on.take(),
                ..Memory::default()
            };
        }
        self.status.progress = Some(self.progress);
        self.status.evidence = Some(self.evidence);
        stamp_phase(self.old, &mut self.status, self.ctx.now);
        if self.status != *self.old {
            self.status.last_update_time = Some(Time(self.ctx.now));
        }
        Decision { status: self.status, memory: self.memory, reset, requeue: self.requeue, notices: self.notices }
    }

    /// Moves to `phase` with `reason`; a change of phase or reason is announced once as an Event.
    pub(super) fn enter(&mut self, phase: Phase, reason: Reason, message: String) {
        // Processing's reason: Succeeded keeps a first failure while a fence proves again (A4).
        let changed_reason =
            conditions::find(&self.status.conditions, contract::PROCESSING).is_none_or(|c| c.reason != reason.as_str());
        let changed = self.status.phase != Some(phase) || changed_reason;
        #[cfg(test)]
        if self.ctx.sabotage == crate::sabotage::Sabotage::SucceededFlips {
            self.status.conditions.retain(|c| c.type_ != contract::SUCCEEDED);
        }
        contract::record(&mut self.status.conditions, reason, &message, self.ctx.now);
        self.status.phase = Some(phase);
        // One Event per transition: a step that already announced this message with its own reason
        // (IdentityVerified, PowerOffProven) is not announced twice.
        if changed && !self.notices.iter().any(|n| n.message == message) {
            // A wait for the node's Lease to go stale is the rule doing its job, not trouble.
            let warning = matches!(reason.disposition(), contract::Disposition::Final | contract::Disposition::Waiting)
                && reason != Reason::NodeLeaseFresh;
            self.notify(warning, reason.as_str(), message);
        }
    }

    pub(super) fn fail(&mut self, reason: Reason, message: String) {
        // A4: a proof taken again on an attestation's look goes through the BMC that answered only.
        if self.proving_again() {
            return self.fail_here(reason, message);
        }
        // L2: a level that stayed silent hands the fence to the next level, if there is one.
        let message = match self.next_level(reason, message) {
            Ok(()) => return,
            Err(message) => message,
        };
        self.fail_here(reason, message);
    }

    /// L2: ends the fence failed with no next level tried: what ended it is no silence (a binding
    /// edited, a mapping that lapsed, a BMC that answered), though its reason alone would let one follow.
    pub(super) fn fail_here(&mut self, reason: Reason, message: String) {
        self.requeue = None;
        let message = match self.proving_again() {
            true => format!(
                "{message}; this was the proof taken again on an attestation's look: {}",
                contract::PROVEN_AGAIN_LEVER
            ),
            false => message,
        };
        let message =
            settle_begun_release(&mut self.progress, &mut self.evidence, message, self.memory.begun_untouched, true);
        self.memory.begun_untouched = false;
        // An attestation may release the node only while its Lease stays exactly as it is now.
        self.progress.lease_renew_time_at_failure = Some(lease_time(self.ctx.node));
        self.enter(Phase::Failed, reason, message);
    }

    pub(super) fn notify(&mut self, warning: bool, reason: &str, message: String) {
        self.notices.push(Notice { warning, reason: reason.to_owned(), message });
    }

    pub(super) fn set_condition(&mut self, type_: &str, ok: bool, reason: &str, message: &str) {
        let status = if ok { conditions::TRUE } else { conditions::FALSE };
        conditions::set(&mut self.status.conditions, type_, status, reason, message, self.ctx.now);
    }

    pub(super) fn attempt_label(&self) -> String {
        match self.proving_again() {
            true => format!("attempt {}, the proof taken again on an attestation's look", self.progress.attempt),
            false => format!("attempt {}/{}", self.progress.attempt.max(1), self.spec.retry.count),
        }
    }

    // Pending ---------------------------------------------------------------------------------------
}

/// A1: life is dated by when coroner first saw it, never by the node's clock: the first step that sees
/// the admitted node's Lease other than admission recorded it, or its bootID changed, records that
/// moment on coroner's clock (`progress.leaseChangeSeenAt`, `progress.bootChangeSeenAt`). A change
/// no step of the fence saw is dated when an attestation first sees it, after the fence: no override.
pub fn note_life_seen(
    progress: &mut Progress,
    admitted: Option<&crate::api::NodeEvidence>,
    node: &NodeSnapshot,
    now: Timestamp,
) {
    let Some(admitted) = admitted.filter(|a| a.uid == node.uid) else { return };
    let then = (admitted.lease_present, admitted.lease_renew_time.as_ref().map(|t| t.0));
    if then != (node.lease_present, node.lease_renew_time) && progress.lease_change_seen_at.is_none() {
        progress.lease_change_seen_at = Some(MicroTime(now));
    }
    // Each new boot is dated when first seen: a later one is not the earlier one's.
    let booted = !admitted.boot_id.is_empty() && !node.boot_id.is_empty() && node.boot_id != admitted.boot_id;
    if booted && progress.boot_seen.as_deref() != Some(node.boot_id.as_str()) {
        progress.boot_change_seen_at = Some(MicroTime(now));
        progress.boot_seen = Some(node.boot_id.clone());
    }
}

fn lease_time(node: &NodeSnapshot) -> MicroTime {
    // Absent Lease: record the epoch, so any Lease that appears later counts as a renewal.
    MicroTime(node.lease_renew_time.unwrap_or(Timestamp::UNIX_EPOCH))
}
