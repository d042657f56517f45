//! The fence state machine. Every step is `next(spec, status, observation, context) -> Decision`: a pure
//! function of what is persisted in the remediation's status and what was just observed.
//!
//! The controller asks [`plan`] what to observe, observes it (BMC reads, the checked release, the node's
//! workloads), calls [`next`], persists the new status under a resourceVersion precondition, and only
//! then sends the BMC mutation the decision carries (the persisted intent comes first: if the write
//! fails, nothing is sent). The answer is fed back through [`next`] as [`Observation::ResetAnswered`].

#[cfg(test)]
mod level_tests;
mod look;
mod observe;
mod outlets;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

pub use look::{
    LOOK_ANSWERED, LookGate, as_proving_again, look_may_be_taken, look_pending, proving_again, runs_past_nhc_timeout,
};
pub use observe::*;
pub use outlets::{BmcVerdict, OUTLET_MAPPING_UNPROVEN, may_end_in_a_level};

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
pub const STALE_TAINT_ADOPTED: &str = "StaleTaintAdopted";

/// What a node's operator must see on the Node, not only on the remediation: every warning (a
/// refusal, a failure, a wait that holds the fence, the guard's alarms, a split-brain), the release
/// (its Event says the machine was proven Off), a power-on and what the guard did. Each other step
/// of the fence, the ForceOff that the release then reports included, is an Event on the
/// remediation only: every Event is an apiserver write.
pub fn for_the_node(notice: &Notice) -> bool {
    const MILESTONES: &[&str] = &[
        "NodeFenced",
        STALE_TAINT_ADOPTED,
        "PowerOnSent",
        "PoweredOn",
        "NodeRecovered",
        "GuardForceOffSent",
        crate::words::guard::GUARD_HELD,
        "PowerOnApproved",
        crate::words::guard::MACHINE_OFF,
    ];
    notice.warning || MILESTONES.contains(&notice.reason.as_str())
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
        reason: "SpecEditIgnored".into(),
        message: format!(
            "the spec changed after admission (generation {}): this fence follows the spec it was admitted with; a new spec applies to the next remediation (edit the CoronerRemediationTemplate)",
            generation.unwrap_or_default()
        ),
    })
}

/// P4: what one honest read may take beyond `pollInterval`, and so also the pause from one request
/// to the next (the next goes `pollInterval` after the previous one, or at its answer when later).
pub const READ_ALLOWANCE: StdDuration = StdDuration::from_secs(1);

/// P4: the longest pause between the requests of two readings of one run: settle, but at least
/// `pollInterval` + [`READ_ALLOWANCE`] (what an honest BMC needs) and at most the [`gap_bound`]. At
/// the defaults (settle 2 s, pollInterval 1 s) that is settle: no proof rests on readings requested
/// further apart than the settle it proves; with a long settle, a reading delayed by an apiserver
/// hiccup still continues the run within the gap bound.
pub fn request_bound(spec: &CoronerRemediationSpec) -> StdDuration {
    spec.settle.get().clamp(spec.poll_interval.get() + READ_ALLOWANCE, gap_bound(spec))
}

/// P4, the gap bound: the later of two readings of one run must answer within
/// `2 × (pollInterval + READ_ALLOWANCE)` of the earlier one's request, however long settle is: an
/// honest BMC whose every read takes at most `pollInterval` + 1 s stays within it.
pub fn gap_bound(spec: &CoronerRemediationSpec) -> StdDuration {
    2 * (spec.poll_interval.get() + READ_ALLOWANCE)
}

/// P7: how many ForceOffs one attempt sends at most: the first, and the ones sent again after it
/// failed ([`force_off_again`]).
pub const FORCE_OFFS_PER_ATTEMPT: usize = 3;

/// P7, a failed ForceOff is sent again: one that failed in a way that passes (no answer before the
/// request timeout, when it may never have reached the BMC; a busy or rate-limiting BMC: 5xx, 408,
/// 429; credentials rotated since the client was built, HTTP 401, after which the client is built
/// again from the Secret) stays to be sent after the next fresh reading that is not `Off`, while
/// the attempt has sent fewer than [`FORCE_OFFS_PER_ATTEMPT`] (`sent_in_attempt` counts this one):
/// one lost request must not cost the attempt, and a BMC that fails every reset is not asked
/// without end. Another rejection (4xx, a 403 included) is the next attempt's to retry, and an
/// accepted ForceOff is not repeated within its attempt: only readings tell whether it took.
pub fn force_off_again<T>(answer: &Result<T, BmcFailure>, sent_in_attempt: usize) -> bool {
    matches!(answer, Err(failure) if failure.transient) && sent_in_attempt < FORCE_OFFS_PER_ATTEMPT
}

/// P4: what the loop itself takes between two readings (the status write after one, the next
/// reconcile), which the read latency must leave room for.
pub const LOOP_ALLOWANCE: StdDuration = StdDuration::from_millis(250);

/// P4: whether a BMC whose reads take `latency` can prove power-off at `poll_interval`: an honest BMC
/// stays dense while every read, with the loop's own time between readings, takes at most
/// `pollInterval` + [`READ_ALLOWANCE`].
pub fn read_fits(latency: StdDuration, poll_interval: StdDuration) -> bool {
    latency + LOOP_ALLOWANCE <= poll_interval + READ_ALLOWANCE
}

/// Two readings that are not one run, and by how much (P4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Gap {
    #[error("readings {} apart, from one request to the next answer, above the gap bound {}", secs(*.apart), secs(*.bound))]
    Answer { apart: StdDuration, bound: StdDuration },
    #[error("readings requested {} apart, above the request bound {}", secs(*.apart), secs(*.bound))]
    Requests { apart: StdDuration, bound: StdDuration },
}

impl Gap {
    /// What a person reads when a run broke on the gap: the figures and what to change.
    pub fn advice(&self, spec: &CoronerRemediationSpec) -> String {
        format!(
            "{self}: the BMC answers too slowly for pollInterval {} (the gap bound is 2 × (pollInterval + {})); raise pollInterval",
            spec.poll_interval,
            secs(READ_ALLOWANCE)
        )
    }
}

fn secs(d: StdDuration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// P4, dense readings: `later` continues a run that `earlier` is part of only when it answered within
/// [`gap_bound`] of `earlier`'s request and was requested within [`request_bound`] of it: a longer
/// gap is a window in which the machine could have been on unseen.
pub fn dense(earlier: &Sampled, later: &Sampled, spec: &CoronerRemediationSpec) -> Result<(), Gap> {
    let apart = later.answered.saturating_sub(earlier.requested);
    let bound = gap_bound(spec);
    if apart > bound {
        return Err(Gap::Answer { apart, bound });
    }
    let requests = later.requested.saturating_sub(earlier.requested);
    let bound = request_bound(spec);
    if requests > bound {
        return Err(Gap::Requests { apart: requests, bound });
    }
    Ok(())
}

/// The proof: a run whose span, from the first reading's answer to the last reading's request, is at
/// least `settle` (each value may have been sampled anywhere between its request and its answer).
pub fn spans_settle(run: &Run, settle: StdDuration) -> bool {
    run.last.requested.checked_sub(run.first.answered).is_some_and(|span| span >= settle)
}

/// When the next reading is due (this process's monotonic clock): a `pollInterval` after the last
/// request; but when an unbroken Off run would then fall short of `settle` by at most a tenth of
/// `pollInterval` (the first reading's latency: the span counts from its answer), just when it
/// spans it: a reading a few milliseconds too early would need another a whole `pollInterval`
/// later. The cadence stays the `pollInterval` the template asks for, within a tenth.
pub fn next_reading_due(spec: &CoronerRemediationSpec, memory: &Memory) -> Option<Mono> {
    let last = memory.last_requested?;
    let poll = spec.poll_interval.get();
    let due = last + poll;
    let spans_at = memory.run.map(|run| run.first.answered + spec.settle.get());
    Some(match spans_at {
        Some(spans_at) if due < spans_at && spans_at - due <= poll / 10 => spans_at,
        _ => due,
    })
}

/// Whether the reading after a reset is taken at once instead of at the pace: only after a ForceOff
/// the BMC accepted (the run that proves the machine off starts there). After a failed one it waits,
/// so a ForceOff to send again (P7) is not sent again at once.
pub fn read_at_once_after(reset: ResetType, accepted: bool) -> bool {
    reset == ResetType::ForceOff && accepted
}

/// How long a proof's last Off reading counts as fresh: `pollInterval` + the request timeout.
pub fn freshness(spec: &CoronerRemediationSpec, timing: Timing) -> StdDuration {
    spec.poll_interval.get() + timing.request_timeout
}

/// Until when (this process's monotonic clock) the proof may release the node: its last Off reading
/// is younger than [`freshness`], counted from the reading's request.
pub fn proof_deadline(spec: &CoronerRemediationSpec, memory: &Memory, timing: Timing) -> Option<Mono> {
    memory.proof.map(|proof| proof.last.requested + freshness(spec, timing))
}

/// P3: what this process keeps when the status write of a decision failed. The phase stays as
/// persisted, so what the decision learnt is mostly dropped; but its reading was taken all the same:
/// a reading that broke or restarted a run ends the run (and the proof), and no run outlives a
/// reading it did not take in; a reading that extended the run stays in it, as every Off reading of
/// a run lives in memory only (W1) — dropping it would open a gap its next reading did not make.
pub fn memory_after_failed_write(old: &Memory, new: &Memory) -> Memory {
    let kept = |old: Option<Run>, new: Option<Run>| match (old, new) {
        (Some(o), Some(n)) if n.first == o.first => Some(n),
        _ => None,
    };
    // A run that became the proof was not broken: it is the same run under another name, and goes on
    // as the run in the phase that stays (the next reading proves it again).
    let became_proof = |old: Option<Run>| new.proof.filter(|p| old.is_some_and(|o| p.first == o.first));
    Memory {
        run: kept(old.run, new.run).or_else(|| became_proof(old.run)),
        proof: kept(old.proof, new.proof),
        last_requested: new.last_requested.or(old.last_requested),
        last_power: new.last_power.clone().or_else(|| old.last_power.clone()),
        sighted_on: new.sighted_on.clone().or_else(|| old.sighted_on.clone()),
        guarded_at: if new.sighted_on.is_some() { None } else { old.guarded_at },
        begun_untouched: old.begun_untouched && new.begun_untouched,
        ..old.clone()
    }
}

/// W1: a decided status may wait for the next write (it is kept by the process that decided it) when
/// it differs from what the API server holds only by what that write will carry anyway: the Off
/// readings of a run (the run itself lives in [`Memory`]; status only mirrors it), the time of a
/// reading, and the answer to a persisted intent. Everything else is written at once: a phase, a
/// condition, an error, a new or withdrawn intent, evidence, the guard's record, and any reading
/// that is not Off (A1: life is recorded as soon as it is seen). A process that stops before the
/// next write loses only readings and an answer; the intent it answered stands unanswered, which
/// the fence already treats as a request that may not have gone out.
pub fn may_wait_for_next_write(stored: &CoronerRemediationStatus, decided: &CoronerRemediationStatus) -> bool {
    let stored_progress = stored.progress.clone().unwrap_or_default();
    let progress = decided.progress.as_ref();
    let power = progress.and_then(|p| p.last_power_state.as_deref());
    let new_reading = progress.and_then(|p| p.last_reading_at.as_ref()) != stored_progress.last_reading_at.as_ref();
    if power.is_some_and(|power| power != "Off")
        && (new_reading || power != stored_progress.last_power_state.as_deref())
    {
        return false;
    }
    let stored_resets = stored.evidence.as_ref().and_then(|e| e.power_off.as_ref()).map(|p| p.resets.clone());
    let mut carried = decided.clone();
    carried.last_update_time = stored.last_update_time.clone();
    let progress = carried.progress.get_or_insert_with(Progress::default);
    progress.off_run = stored_progress.off_run.clone();
    progress.last_reading_at = stored_progress.last_reading_at.clone();
    progress.last_answer_at = stored_progress.last_answer_at.clone();
    progress.last_power_state = stored_progress.last_power_state.clone();
    // The answer to the intent the API server holds, and its line in the evidence.
    let answered = match (&stored_progress.intent, &mut progress.intent) {
        // Answered: a failed ForceOff to be sent again (P7) stays unanswered and is written at once.
        (Some(persisted), Some(intent))
            if persisted.result.is_none()
                && intent.result.is_some()
                && Intent { result: None, ..intent.clone() } == *persisted =>
        {
            intent.result = None;
            Some(persisted.attempt)
        }
        _ => None,
    };
    if let (Some(attempt), Some(power_off)) = (answered, carried.evidence.as_mut().and_then(|e| e.power_off.as_mut()))
        && let Some(stored_resets) = stored_resets
        && power_off.resets.len() == stored_resets.len() + 1
        && power_off.resets.starts_with(&stored_resets)
        && power_off.resets.last().is_some_and(|answer| answer.attempt == attempt)
    {
        power_off.resets = stored_resets;
    }
    carried == *stored
}

/// A reading added to a run: continues it when [`dense`], else starts a new one (and says why the old
/// one broke).
pub fn extended(run: Option<Run>, reading: Sampled, spec: &CoronerRemediationSpec) -> (Run, Option<Gap>) {
    let fresh = Run { first: reading, last: reading, count: 1 };
    match run {
        None => (fresh, None),
        Some(run) => match dense(&run.last, &reading, spec) {
            Ok(()) => (Run { last: reading, count: run.count + 1, ..run }, None),
            Err(gap) => (fresh, Some(gap)),
        },
    }
}

/// Whether a phase that holds a power-action slot has run past its deadline: `deadline` on this
/// process's monotonic clock since `started`, or twice that on the wall clock since the persisted
/// `since`. A process resuming a phase starts its own clock afresh (a failover does not eat the
/// attempt), and the wall clock bounds the whole, so the deadline elapses even when no process lives
/// long enough to see it on its own clock.
pub fn past_deadline(
    started: Option<Mono>,
    now: Mono,
    since: Option<Timestamp>,
    wall: Timestamp,
    deadline: StdDuration,
) -> bool {
    started.is_some_and(|started| now.saturating_sub(started) >= deadline)
        || since.is_some_and(|since| elapsed(since, wall) >= deadline * 2)
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

/// The phases whose steps read the machine through its BMC.
fn reads_the_machine(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::VerifyingIdentity
            | Phase::PoweringOff
            | Phase::ConfirmingOff
            | Phase::PoweringOffOutlets
            | Phase::Releasing
            | Phase::PoweringOn
    )
}

/// A1: a reading a process takes and cannot record (it stops first) is lost with it, and an
/// attestation must not follow it. So every status write names its writer as the fence's reader in
/// a phase that reads the machine, and a process is named so before its first reading
/// ([`reader_unnamed`]); the write that ends the fence holds the writer's last reading (kept in
/// memory from the moment it answered) and so names no reader, unless the reader was another
/// process: then its name stays, and no attestation follows the fence
/// (`attestation::no_life_in_fence`). A process that takes over as reader keeps its predecessor's
/// name (`unrecorded_reader`) until it records a reading of its own.
pub fn with_reader(mut status: CoronerRemediationStatus, instance: &str) -> CoronerRemediationStatus {
    let phase = phase_of(&status);
    if reads_the_machine(phase) || look_pending(&status).is_some() {
        let progress = status.progress.get_or_insert_with(Progress::default);
        // Taking over from another reader: what it last read may be lost with it, until a reading
        // is recorded after the takeover ([`Step::saw_power`] clears it).
        if let Some(previous) = progress.reader.replace(instance.to_owned()).filter(|p| p != instance) {
            progress.unrecorded_reader = Some(previous);
        }
    } else if phase.is_terminal()
        && let Some(progress) = status.progress.as_mut()
        && progress.reader.as_deref() == Some(instance)
    {
        progress.reader = None;
    }
    status
}

/// P4 on a failing API server: the longest wait before a fence that reads the machine retries a
/// reconcile that failed on something passing (an unavailable API server, a conflict). A reading is
/// due `pollInterval` after the previous one's request, and the request bound leaves at least
/// [`READ_ALLOWANCE`] beyond that: retries at most 250 ms apart keep three failed reconciles in a row
/// within it, where the error policy's backoff (0.5 s, then 1 s) broke a run on two (soak seed
/// 580271: settle 1.86 s, pollInterval 366 ms, 5% of requests failing, every run of its attempt
/// broken). Each failure in a row still adds its wait to the gap: a longer outage breaks the run, and
/// the attempt's deadline (P5) ends it.
pub const RETRY_WHILE_READING: StdDuration = StdDuration::from_millis(250);

/// P4: how soon at the latest a fence retries a reconcile that failed on something passing:
/// `pollInterval`, at most [`RETRY_WHILE_READING`], in a phase that reads the machine (or with an
/// attestation's look pending); `None`: the error policy's backoff as it is.
pub fn retry_within(spec: &CoronerRemediationSpec, status: Option<&CoronerRemediationStatus>) -> Option<StdDuration> {
    let status = status?;
    (reads_the_machine(phase_of(status)) || look_pending(status).is_some())
        .then(|| spec_of(spec, status).poll_interval.get().min(RETRY_WHILE_READING))
}

/// A1: this process is about to read the machine for a fence that does not name it as its reader
/// ([`with_reader`]): the name is written first.
pub fn reader_unnamed(status: &CoronerRemediationStatus, instance: &str) -> bool {
    (reads_the_machine(phase_of(status)) || look_pending(status).is_some())
        && status.progress.as_ref().and_then(|p| p.reader.as_deref()) != Some(instance)
}

/// L2: an attempt ends held when a gate holds its power action at its deadline (the step that found
/// the deadline past had entered the hold: its `Processing` reason is the gate's). It ends with
/// `PowerActionHeld`, never `PowerOffNotConfirmed`, and hands the fence to no level: the BMC was not
/// silent, coroner chose to wait. Deadlines and slots run as for any attempt.
pub fn ended_held(status: &CoronerRemediationStatus, hold: Option<&(Reason, String)>) -> bool {
    hold.is_some_and(|(reason, _)| {
        conditions::find(&status.conditions, contract::PROCESSING).is_some_and(|c| c.reason == reason.as_str())
    })
}

/// P7: a rejection of the credentials (HTTP 401) after a ForceOff of this fence that the BMC accepted,
/// or one persisted whose answer is not recorded (it may have been sent, and accepted), passes: a
/// password rotated mid-proof, the Secret's update lagging the BMC's. The Secret is read again at every
/// reading and the fence keeps reading until the attempt's deadline. Before any such ForceOff, a
/// rejection read again from the Secret is a fast, final configuration error.
pub fn rejection_passes(status: &CoronerRemediationStatus) -> bool {
    let resets = status.evidence.as_ref().and_then(|e| e.power_off.as_ref()).map(|p| p.resets.as_slice());
    let accepted = resets.unwrap_or_default().iter().any(|r| r.accepted && r.level.is_none());
    let intent = status.progress.as_ref().and_then(|p| p.intent.as_ref());
    let unanswered = intent.is_some_and(|i| i.action == PowerAction::ForceOff && i.result.is_none())
        && status.progress.as_ref().is_some_and(|p| p.level.is_none());
    accepted || unanswered
}

/// R1: this fence's release is on the Node (its exact owned taint, or its owner record of it: a
/// taint someone rewrote since, R4) while its status, still in `Releasing`, does not record it (the
/// process that wrote it stopped first). It is recorded before anything else is decided, whatever the
/// attempt's deadline: an attempt ended instead would forget a release that stands, and leave it
/// unguarded.
pub fn release_unrecorded(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> bool {
    phase_of(status) == Phase::Releasing
        && (node.released_at.is_some() || node.release_recorded)
        && !is_released(status)
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
    fn new(spec: &'a CoronerRemediationSpec, old: &'a CoronerRemediationStatus, ctx: Context<'a>) -> Self {
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

    fn now(&self) -> MicroTime {
        MicroTime(self.ctx.now)
    }

    fn finish(mut self) -> Decision {
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
    fn enter(&mut self, phase: Phase, reason: Reason, message: String) {
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

    fn fail(&mut self, reason: Reason, message: String) {
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
    fn fail_here(&mut self, reason: Reason, message: String) {
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

    fn notify(&mut self, warning: bool, reason: &str, message: String) {
        self.notices.push(Notice { warning, reason: reason.to_owned(), message });
    }

    fn set_condition(&mut self, type_: &str, ok: bool, reason: &str, message: &str) {
        let status = if ok { conditions::TRUE } else { conditions::FALSE };
        conditions::set(&mut self.status.conditions, type_, status, reason, message, self.ctx.now);
    }

    fn attempt_label(&self) -> String {
        match self.proving_again() {
            true => format!("attempt {}, the proof taken again on an attestation's look", self.progress.attempt),
            false => format!("attempt {}/{}", self.progress.attempt.max(1), self.spec.retry.count),
        }
    }

    // Pending ---------------------------------------------------------------------------------------

    fn admission(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Admit(node) => {
                let message =
                    format!("gates passed for node {} (Ready={}); verifying the BMC's identity", node.name, node.ready);
                self.evidence.node = Some(*node);
                self.status.admitted_spec = Some(self.spec.clone());
                self.progress = Progress { attempt: 1, attempt_started_at: Some(self.now()), ..Progress::default() };
                self.memory = Memory { attempt_started: Some(self.ctx.mono), ..Memory::default() };
                self.enter(Phase::VerifyingIdentity, Reason::VerifyingIdentity, message);
                self.requeue = Some(StdDuration::ZERO);
            }
            Verdict::Adopt(adoptable) => self.adopt(&adoptable),
            Verdict::Wait { reason, message, recheck } => {
                self.enter(Phase::Pending, reason, message);
                self.requeue = Some(recheck.unwrap_or(WAIT_RECHECK));
            }
            Verdict::Refuse { reason, message } => self.fail(reason, message),
        }
    }

    /// Another remediation of this node released it, and that release stands: this one stands on it
    /// and never resets the machine itself. Its record says how the sibling released (its strategy),
    /// so the guard judges this record as it judges the sibling's.
    fn adopt(&mut self, adoptable: &crate::gates::Adoptable) {
        let crate::gates::Adoptable { from, released_at, strategy } = adoptable;
        self.evidence.node = Some(self.ctx.node.evidence(self.ctx.now));
        self.status.admitted_spec = Some(self.spec.clone());
        self.evidence.release = Some(ReleaseEvidence {
            kind: ReleaseKind::Adopted,
            // Given by the driver as it writes it (guard::with_release_id).
            release_id: None,
            attestation: None,
            adopted_from: Some(from.clone()),
            strategy: *strategy,
            node_ready: self.ctx.node.ready.clone().unwrap_or_default(),
            lease_renew_time: self.ctx.node.lease_renew_time.map(MicroTime),
            released_at: MicroTime(*released_at),
            taint_owned: false,
            pods_deleted: None,
            taint_removed_at: None,
            release_timed_out: false,
        });
        let message = format!(
            "remediation {from} already proved node {} off and released it; this remediation stands on that release and sends no reset of its own",
            self.ctx.node.name
        );
        self.notify(false, Reason::NodeFenced.as_str(), message.clone());
        match self.spec.action {
            FenceAction::Off => self.after_release(message),
            // Only a finished fence whose release stands is adopted, so its own power-on is not
            // coming: this one proved no identity to send On through, so it ends as an Off release
            // does, never waiting for a power-on nobody will send.
            FenceAction::Reboot => {
                let reason = Reason::PowerOnNotOwned;
                let message = format!(
                    "{message}; {from} ended its fence without powering the machine on, and this remediation proved no identity to send On through: no power-on ({}), the release stands as with action Off",
                    reason.as_str()
                );
                self.set_condition(contract::POWERED_ON, false, reason.as_str(), &message);
                self.notify(true, reason.as_str(), message.clone());
                self.enter(Phase::Done, reason, message);
            }
        }
    }

    // Any phase -------------------------------------------------------------------------------------

    /// P5: what the plan asked for could not be observed (the API server refused a read, a list
    /// failed). The phase's deadline is judged all the same, so a phase whose reads keep failing
    /// ends at its deadline with the cause and frees its slot; until then the cause is the status's
    /// last error.
    fn unavailable(&mut self, phase: Phase, cause: String) {
        let cause = format!("cannot observe: {cause}");
        match phase {
            Phase::VerifyingIdentity => {
                if self.attempt_deadline_passed() {
                    let cause = format!("{cause}, for {}", self.spec.power_off_timeout);
                    return self.identity_attempt_ended(Reason::ApiUnavailable, cause);
                }
                self.progress.last_error = Some(cause);
                self.requeue = Some(self.spec.poll_interval.get());
            }
            Phase::PoweringOff | Phase::ConfirmingOff | Phase::PoweringOffOutlets | Phase::Releasing => {
                self.progress.last_error = Some(cause);
                if release_unrecorded(self.old, self.ctx.node) || !self.check_attempt_deadline() {
                    self.requeue = Some(self.spec.poll_interval.get());
                }
            }
            Phase::PoweringOn => self.power_on_not_read(cause),
            Phase::WaitingForRelease => self.workloads_unknown(cause),
            Phase::Pending | Phase::WaitingForNode | Phase::Done | Phase::Failed => {}
        }
    }

    // VerifyingIdentity -----------------------------------------------------------------------------

    fn identity(&mut self, found: Result<IdentityFound, IdentityProblem>) {
        let found = match found {
            Ok(found) => found,
            Err(IdentityProblem::Binding { reason, message, seen_on }) => {
                if let Some(seen_on) = seen_on {
                    self.saw_power(&seen_on);
                }
                return self.fail(reason, message);
            }
            Err(IdentityProblem::Bmc(failure)) if failure.transient => {
                return self.identity_attempt_failed(failure.message);
            }
            Err(IdentityProblem::Bmc(failure)) => return self.fail(failure.reason, failure.message),
        };
        let node_uuid = self.evidence.node.as_ref().map(|n| n.system_uuid.clone()).unwrap_or_default();
        // The identity read is the fence's first reading of the machine its UUID names (A1).
        let names_node = identity::parse(&node_uuid)
            .zip(identity::parse(&found.system.uuid))
            .is_some_and(|(node, bmc)| identity::same_machine(node, bmc).is_some());
        if names_node {
            self.saw_power(&found.system.power_state.to_string());
        }
        let proven = identity::prove(&node_uuid, &found.system.uuid, &found.claims).and_then(|matched| {
            identity::other_spellings_clear(&found.system.aliases, &found.claims).map(|()| matched)
        });
        let matched = match proven {
            Ok(matched) => matched,
            Err(refusal) => {
                return self.fail(refusal.reason(), format!("{refusal}; no power action taken"));
            }
        };
        if found.tls_verified == Some(true) {
            self.set_condition(
                contract::TLS_VERIFIED,
                true,
                "CertificateVerified",
                "the BMC's certificate was verified",
            );
        } else if found.tls_verified == Some(false) {
            let message =
                format!("BmcBinding {} sets insecureSkipVerify: the BMC's certificate is not verified", found.binding);
            self.set_condition(contract::TLS_VERIFIED, false, "InsecureSkipVerify", &message);
            self.notify(true, "InsecureSkipVerify", message);
        }
        let message = format!(
            "BMC system {} at {} has UUID {} ({:?} match with the node's systemUUID {node_uuid}); its power reads {}",
            found.system.id, found.endpoint, found.system.uuid, matched, found.system.power_state
        );
        self.notify(false, "IdentityVerified", message.clone());
        let first_reading = PowerReading::of(&found.system, found.sampled, found.through);
        self.evidence.identity = Some(IdentityEvidence {
            binding: found.binding,
            endpoint: found.endpoint,
            system_id: found.system.id,
            system_path: found.system.path,
            bmc_uuid: found.system.uuid,
            node_uuid,
            match_kind: matched,
            verified_at: self.now(),
            tls_verified: found.tls_verified == Some(true),
            binding_generation: Some(found.through.generation),
            binding_content: Some(crate::words::digest::content_hex(found.through.serial)),
        });
        let attempt = self.progress.attempt.max(1);
        let last_power_state = self.progress.last_power_state.take();
        let release_begun = self.progress.release_begun.take();
        let (reader, unrecorded_reader) = (self.progress.reader.take(), self.progress.unrecorded_reader.take());
        // A1: when the machine was last read, and when its BMC last answered, go with that reading.
        let (last_reading_at, last_answer_at) =
            (self.progress.last_reading_at.take(), self.progress.last_answer_at.take());
        self.progress = Progress {
            attempt,
            last_power_state,
            last_reading_at,
            last_answer_at,
            release_begun,
            reader,
            unrecorded_reader,
            ..Progress::default()
        };
        let last_power = self.memory.last_power.take();
        self.memory = Memory { through: Some(found.through), last_power, ..Memory::default() };
        self.enter(Phase::PoweringOff, Reason::PoweringOff, message);
        self.requeue = Some(StdDuration::ZERO);
        // The identity read is the first power reading (issue 23: no second GET milliseconds later).
        self.powering_off(Ok(first_reading));
    }

    fn identity_attempt_failed(&mut self, message: String) {
        self.identity_attempt_ended(Reason::BmcUnreachable, message);
    }

    /// An identity attempt ended without a proof; `reason` is the fence's when it was the last.
    fn identity_attempt_ended(&mut self, reason: Reason, message: String) {
        if self.progress.attempt >= self.spec.retry.count {
            let message = format!("{message} ({}); no power action taken", self.attempt_label());
            return self.fail(reason, message);
        }
        let message = format!(
            "identity check failed ({}): {message}; retrying in {}",
            self.attempt_label(),
            self.spec.retry.interval
        );
        self.schedule_next_attempt();
        self.enter(Phase::VerifyingIdentity, Reason::AttemptFailed, message);
    }

    /// A proof started afresh on another path (a PDU level, or a proof taken again on an
    /// attestation's look): a ForceOff persisted and never answered is recorded as maybe sent (W1,
    /// at `unanswered_level`), the readings A1 keeps and the reader carry over, the proof and this
    /// process's memory of it go, and the new attempt's clock starts now. Returns the progress to
    /// build on and the progress left behind.
    fn start_afresh(&mut self, unanswered_level: Option<u32>) -> (Progress, Progress) {
        if let Some(intent) =
            self.progress.intent.clone().filter(|i| i.result.is_none() && i.action == PowerAction::ForceOff)
        {
            let result = "no answer recorded: it may have been sent".to_owned();
            let record = crate::api::ResetRecord {
                attempt: intent.attempt,
                sent_at: intent.decided_at,
                result,
                level: unanswered_level,
                accepted: false,
            };
            self.power_off_evidence().resets.push(record);
        }
        let old = std::mem::take(&mut self.progress);
        let carried = Progress {
            attempt_started_at: Some(self.now()),
            last_reading_at: old.last_reading_at.clone(),
            last_answer_at: old.last_answer_at.clone(),
            last_power_state: old.last_power_state.clone(),
            reader: old.reader.clone(),
            unrecorded_reader: old.unrecorded_reader.clone(),
            // L4: an outlet's meter that read once in this fence is owed a reading in every attempt.
            metered_outlets: old.metered_outlets.clone(),
            lease_change_seen_at: old.lease_change_seen_at.clone(),
            boot_change_seen_at: old.boot_change_seen_at.clone(),
            boot_seen: old.boot_seen.clone(),
            ..Progress::default()
        };
        self.memory = Memory {
            attempt_started: Some(self.ctx.mono),
            last_power: self.memory.last_power.take(),
            ..Memory::default()
        };
        if let Some(power_off) = self.evidence.power_off.as_mut() {
            power_off.proof = None;
            power_off.proven_at = None;
        }
        (carried, old)
    }

    fn schedule_next_attempt(&mut self) {
        let interval = self.spec.retry.interval.get();
        self.progress.attempt += 1;
        self.progress.attempt_started_at = None;
        self.progress.next_attempt_at = Some(MicroTime(self.ctx.now + interval));
        self.progress.off_run = None;
        self.memory =
            Memory { not_before: Some(self.ctx.mono + interval), through: self.memory.through, ..Memory::default() };
        self.requeue = Some(interval);
    }

    // PoweringOff / ConfirmingOff / Releasing --------------------------------------------------------

    /// Checks that a reading comes from the verified system, through the device the identity was
    /// proven through; ends the attempt or the fence otherwise. A reading through a rebuilt client
    /// (new credentials) is the first of a new run.
    fn same_system(&mut self, reading: &PowerReading) -> bool {
        let Some(verified) = self.evidence.identity.as_ref() else {
            self.fail(Reason::BmcProtocolError, "a power reading arrived before the identity proof".into());
            return false;
        };
        let same = identity::parse(&reading.uuid).zip(identity::parse(&verified.bmc_uuid)).is_some_and(|(a, b)| a == b);
        if !same {
            let (path, uuid, verified) =
                (verified.system_path.clone(), reading.uuid.clone(), verified.bmc_uuid.clone());
            if conditions::is_true(&self.status.conditions, contract::SUCCEEDED) || is_released(self.old) {
                // Already released: the fence stands; only the power-on stops.
                let message = format!(
                    "system {path} now reports UUID {uuid:?}, not the verified {verified}; no power-on is sent"
                );
                self.set_condition(contract::POWERED_ON, false, Reason::IdentityChanged.as_str(), &message);
                self.notify(true, Reason::IdentityChanged.as_str(), message.clone());
                self.enter(Phase::WaitingForNode, Reason::WaitingForNode, message);
            } else {
                let message = format!(
                    "system {path} now reports UUID {uuid:?}, not the verified {verified}; the fence stops and nothing is released"
                );
                self.fail(Reason::IdentityChanged, message);
            }
            return false;
        }
        // P1: the generation the identity was proven through, as recorded (a new process knows it too).
        let proven = verified.binding_generation.or(self.memory.through.map(|t| t.generation));
        if proven.is_some_and(|generation| generation != reading.through.generation) {
            if is_released(self.old) {
                self.binding_changed_after_release();
            } else {
                // The binding's spec changed: a proof comes from where the reset went.
                self.binding_changed();
            }
            return false;
        }
        match self.memory.through {
            Some(through) if through.serial != reading.through.serial => {
                self.memory.run = None;
                self.memory.proof = None;
            }
            _ => {}
        }
        self.memory.through = Some(reading.through);
        true
    }

    /// The binding changed since the identity was proven: this attempt ends, and the next one proves
    /// the identity again and resets through what the binding says now.
    /// P1, after the release: no `On` goes through a binding whose spec changed since the identity
    /// was proven; the machine stays off (`PoweredOn=False`) and the release stands as it is.
    fn binding_changed_after_release(&mut self) {
        let message = "the BmcBinding's spec changed (a new generation) since the identity was proven; no On is sent through it, the machine stays off".to_owned();
        self.set_condition(contract::POWERED_ON, false, "BindingChanged", &message);
        self.notify(true, "BindingChanged", message.clone());
        self.enter(Phase::WaitingForNode, Reason::WaitingForNode, message);
    }

    fn binding_changed(&mut self) {
        let last = "the BmcBinding changed since the identity was proven".to_owned();
        if self.progress.attempt >= self.spec.retry.count {
            // L2: an edit is no silence: no level follows it.
            let message = format!("{last} in the last attempt ({}); nothing released", self.attempt_label());
            return self.fail_here(Reason::PowerOffNotConfirmed, message);
        }
        let message = format!(
            "{last} ({}); the next attempt proves it again, in {}",
            self.attempt_label(),
            self.spec.retry.interval
        );
        self.evidence.identity = None;
        self.progress.intent = None;
        self.schedule_next_attempt();
        self.memory.through = None;
        self.enter(Phase::VerifyingIdentity, Reason::AttemptFailed, message);
    }

    fn start_attempt_if_needed(&mut self) {
        if self.memory.attempt_started.is_none() {
            self.memory.attempt_started = Some(self.ctx.mono);
        }
        if self.progress.attempt_started_at.is_none() {
            self.progress.attempt_started_at = Some(self.now());
            self.progress.next_attempt_at = None;
            self.power_off_evidence().attempts = self.progress.attempt;
        }
    }

    fn power_off_evidence(&mut self) -> &mut PowerOffEvidence {
        self.evidence.power_off.get_or_insert_with(PowerOffEvidence::default)
    }

    /// A reading of the node's machine (A1), in status and in this process's memory.
    fn saw_power(&mut self, power: &str) {
        self.progress.last_power_state = Some(power.to_owned());
        self.progress.unrecorded_reader = None;
        self.memory.last_power = Some(power.to_owned());
    }

    fn note_reading(&mut self, reading: &Result<PowerReading, BmcFailure>) {
        self.progress.last_reading_at = Some(self.now());
        if let Ok(reading) = reading {
            self.progress.last_answer_at = Some(self.now());
            // The proof that lapsed no longer stands for this attempt: the power-off is its cause again.
            if reading.power_state != PowerState::Off {
                self.progress.proof_lapsed_in = None;
            }
            let verified = self.evidence.identity.as_ref().and_then(|v| identity::parse(&v.bmc_uuid));
            if verified.is_some() && identity::parse(&reading.uuid) == verified {
                self.saw_power(&reading.power_state.to_string());
            }
            self.memory.last_requested = Some(reading.sampled.requested);
        } else {
            self.memory.last_requested = Some(self.ctx.mono);
        }
    }

    /// R1: once the deletion of the node's pods may have begun, a reading of the verified system
    /// that is not Off is the guard's at once (no hold delays the guard): the fence ends and its
    /// begun release is recorded, so the guard switches the machine off within its bound.
    fn begun_release_shows_life(&mut self, reading: &Result<PowerReading, BmcFailure>) -> bool {
        let Ok(reading) = reading else { return false };
        let verified = self.evidence.identity.as_ref().and_then(|v| identity::parse(&v.bmc_uuid));
        let of_the_machine = verified.is_some() && identity::parse(&reading.uuid) == verified;
        if !of_the_machine
            || reading.power_state == PowerState::Off
            || self.progress.release_begun.is_none()
            || self.memory.begun_untouched
        {
            return false;
        }
        let message = format!(
            "power reads {} after the deletion of the node's pods began; nothing released",
            reading.power_state
        );
        self.fail(Reason::PowerOffNotConfirmed, message);
        true
    }

    fn powering_off(&mut self, reading: Result<PowerReading, BmcFailure>) {
        self.start_attempt_if_needed();
        self.note_reading(&reading);
        if self.begun_release_shows_life(&reading) {
            return;
        }
        match reading {
            // A reading of another system ends the attempt or the fence (same_system): only one that
            // changed nothing waits for the next poll.
            Ok(reading) if !self.same_system(&reading) => {
                if self.status.phase == self.old.phase {
                    self.paced_retry();
                }
            }
            Ok(reading) if reading.power_state == PowerState::Off => {
                // Already off only if no ForceOff may have gone out: an intent whose answer was never
                // recorded (W1: held, then lost with its process) may have been sent.
                let force_off_decided =
                    self.progress.intent.as_ref().is_some_and(|i| i.action == PowerAction::ForceOff);
                if self.power_off_evidence().resets.is_empty() && !force_off_decided {
                    self.power_off_evidence().already_off = true;
                }
                // No power-off of coroner's: the Lease must not have changed since admission.
                let baseline = self.admitted_lease_time();
                self.progress.lease_renew_time_at_power_off.get_or_insert(baseline);
                self.memory.run = Some(extended(None, reading.sampled, self.spec).0);
                self.mirror_run(&reading);
                let message = format!(
                    "power reads Off before any reset ({}); confirming for {}",
                    self.attempt_label(),
                    self.spec.settle
                );
                self.enter(Phase::ConfirmingOff, Reason::ConfirmingOff, message);
                self.requeue = Some(self.spec.poll_interval.get());
            }
            Ok(_) if self.held() => {
                self.check_attempt_deadline();
            }
            Ok(reading) => self.force_off(&reading, "sending ForceOff"),
            Err(failure) if !failure.transient => {
                self.fail(failure.reason, format!("{}; nothing released", failure.message))
            }
            Err(failure) => {
                self.progress.last_error = Some(failure.message);
                self.paced_retry();
            }
        }
    }

    /// The next reading of a failing or wrong answer comes one `pollInterval` later (none at once:
    /// a BMC that refuses connections answers in microseconds), or the attempt ends.
    fn paced_retry(&mut self) {
        if !self.check_attempt_deadline() {
            self.requeue = Some(self.until_next_poll());
        }
    }

    /// One `pollInterval` from the last request, not from its answer (a BMC slower than the interval
    /// is asked again as soon as it answers), or when the run spans settle ([`next_reading_due`]).
    fn until_next_poll(&self) -> StdDuration {
        let poll = self.spec.poll_interval.get();
        next_reading_due(self.spec, &self.memory).map_or(poll, |at| at.saturating_sub(self.ctx.mono))
    }

    /// The node's Lease as admission recorded it (the epoch for none, so any Lease that appears
    /// later counts as a renewal); the Lease now for a fence admitted before this was recorded.
    fn admitted_lease_time(&self) -> MicroTime {
        match self.evidence.node.as_ref() {
            Some(node) => MicroTime(node.lease_renew_time.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0)),
            None => lease_time(self.ctx.node),
        }
    }

    /// Decides a ForceOff after a fresh reading that is not Off.
    fn force_off(&mut self, reading: &PowerReading, what: &str) {
        // The Lease as it stood before the reset: a renewal after it means a live kubelet.
        self.progress.lease_renew_time_at_power_off = Some(lease_time(self.ctx.node));
        self.decide(PowerAction::ForceOff);
        self.memory.run = None;
        self.memory.proof = None;
        self.progress.off_run = None;
        let message = format!("power reads {}; {what} ({})", reading.power_state, self.attempt_label());
        self.enter(Phase::ConfirmingOff, Reason::ConfirmingOff, message);
        self.requeue = Some(self.spec.poll_interval.get());
    }

    /// Persists the intent of a BMC mutation (with this attempt and process) and asks for it to be sent
    /// once the status carrying the intent is written.
    fn decide(&mut self, action: PowerAction) {
        self.progress.intent = Some(Intent {
            action,
            attempt: self.progress.attempt,
            decided_at: self.now(),
            instance: self.ctx.instance.to_owned(),
            result: None,
        });
        self.reset = Some(ResetType::from(action));
    }

    /// A gate holds power actions (e.g. the node's Lease was renewed lately): wait in PoweringOff,
    /// saying why. The wait counts against the attempt, so a hold that never lifts ends the fence.
    fn held(&mut self) -> bool {
        let Some((reason, message)) = self.ctx.hold_power_action else { return false };
        self.progress.last_error = Some(message.clone());
        let phase = if self.progress.level.is_some() { Phase::PoweringOffOutlets } else { Phase::PoweringOff };
        self.enter(phase, *reason, format!("{message}; no power action yet"));
        // Paced: the held step's own status write wakes the fence again at once, and the BMC must
        // not be read at every such wake-up while the hold lasts.
        self.memory.not_before = Some(self.ctx.mono + WAIT_RECHECK);
        self.requeue = Some(WAIT_RECHECK);
        true
    }

    /// P1: nothing was sent right before a request: the decision, unanswered, is withdrawn.
    fn withdraw_unsent(&mut self) {
        if self.progress.intent.as_ref().is_some_and(|i| i.result.is_none()) {
            self.progress.intent = None;
        }
    }

    /// An intent of `action` is persisted but was never answered: it may never have been sent.
    fn unsent(&self, action: PowerAction) -> bool {
        self.progress.intent.as_ref().is_some_and(|i| i.action == action && i.result.is_none())
    }

    fn reading(&self, reading: &PowerReading) -> Reading {
        self.shown(reading.sampled, reading.power_state.to_string())
    }

    /// A reading sampled at `sampled`, for people: answered now, requested as long before as it took.
    fn shown(&self, sampled: Sampled, power_state: String) -> Reading {
        let took = sampled.answered.saturating_sub(sampled.requested);
        let now = self.now();
        Reading {
            requested_at: jiff::SignedDuration::try_from(took)
                .ok()
                .and_then(|t| now.0.checked_sub(t).ok())
                .map(MicroTime),
            at: now,
            power_state,
        }
    }

    /// Mirrors the run in memory into status, for people: its first and latest readings.
    fn mirror_run(&mut self, reading: &PowerReading) {
        let shown = self.reading(reading);
        self.mirror(shown);
    }

    /// Adds `shown` to the status's mirror of the run in memory (none without a run).
    fn mirror(&mut self, shown: Reading) {
        let Some(run) = self.memory.run.or(self.memory.proof) else {
            self.progress.off_run = None;
            return;
        };
        let mut mirror = match self.progress.off_run.take() {
            Some(mirror) if run.count > 1 && mirror.instance == self.ctx.instance => mirror,
            _ => OffRun { instance: self.ctx.instance.to_owned(), count: 0, first: Vec::new(), last: Vec::new() },
        };
        mirror.count = run.count;
        if mirror.first.len() < FIRST_READINGS {
            mirror.first.push(shown);
        } else {
            mirror.last.push(shown);
            if mirror.last.len() > LAST_READINGS {
                mirror.last.remove(0);
            }
        }
        self.progress.off_run = Some(mirror);
    }

    fn confirming_off(&mut self, reading: Result<PowerReading, BmcFailure>) {
        self.start_attempt_if_needed();
        self.note_reading(&reading);
        if self.begun_release_shows_life(&reading) {
            return;
        }
        match reading {
            Ok(reading) if !self.same_system(&reading) => return,
            Ok(reading) if reading.power_state == PowerState::Off => {
                let (run, gap) = extended(self.memory.run, reading.sampled, self.spec);
                #[cfg(test)]
                let (run, gap) = match self.memory.run {
                    Some(old) if self.ctx.sabotage == crate::sabotage::Sabotage::BrokenRunAccepted && gap.is_some() => {
                        (Run { last: reading.sampled, count: old.count + 1, ..old }, None)
                    }
                    _ => (run, gap),
                };
                if let Some(gap) = gap {
                    self.progress.last_error = Some(gap.advice(self.spec));
                }
                self.memory.run = Some(run);
                self.mirror_run(&reading);
                self.progress.lease_renew_time_at_power_off.get_or_insert_with(|| lease_time(self.ctx.node));
                if spans_settle(&run, self.spec.settle.get()) {
                    return self.off_proven(run);
                }
            }
            Ok(reading) => {
                self.memory.run = None;
                self.progress.off_run = None;
                self.progress.last_error = Some(format!("power reads {}", reading.power_state));
                if self.unsent(PowerAction::ForceOff) {
                    // The ForceOff persisted earlier was never answered (coroner stopped, or lost
                    // leadership, between persisting it and sending it), or it failed at the BMC
                    // (P7). Send it now, right after this fresh reading; unless a gate holds power
                    // actions.
                    if self.held() {
                        self.check_attempt_deadline();
                        return;
                    }
                    let failed = self.progress.intent.as_ref().is_some_and(|intent| {
                        self.evidence
                            .power_off
                            .as_ref()
                            .is_some_and(|p| p.resets.last().is_some_and(|r| r.sent_at == intent.decided_at))
                    });
                    let what = if failed {
                        "sending ForceOff again: it failed"
                    } else {
                        "sending the ForceOff decided earlier"
                    };
                    self.force_off(&reading, what);
                }
            }
            Err(failure) if !failure.transient => {
                return self.fail(failure.reason, format!("{}; nothing released", failure.message));
            }
            Err(failure) => {
                self.memory.run = None;
                self.progress.off_run = None;
                self.progress.last_error = Some(failure.message);
            }
        }
        self.paced_retry();
    }

    /// Ends the attempt when powerOffTimeout has passed on this process's clock: schedules the next
    /// one, or fails when the budget is spent. Returns whether the attempt ended.
    fn check_attempt_deadline(&mut self) -> bool {
        if !self.attempt_deadline_passed() {
            return false;
        }
        // A proof that stood, with a release the API server would not take, is a different failure,
        // also when it lapsed meanwhile (`release_ran_out`); so is an attempt that ends while a gate
        // holds its power action (`ended_held`): neither is silence (L2).
        let (reason, none) = if phase_of(&self.status) == Phase::Releasing || self.release_ran_out() {
            (Reason::ReleaseNotWritten, "the proof lapsed before the release got through")
        } else if ended_held(&self.status, self.ctx.hold_power_action) {
            (Reason::PowerActionHeld, "a gate held the power action")
        } else {
            (Reason::PowerOffNotConfirmed, "no unbroken run of Off readings")
        };
        let last = self.progress.last_error.clone().unwrap_or_else(|| none.into());
        if self.progress.attempt >= self.spec.retry.count {
            // L2: a level whose binding was edited under it (since the fence entered the level, or
            // since its readings) ended on the edit, not on silence: no next level.
            let stored = self.ctx.levels.and_then(|v| v.generation);
            let since = |generation: Option<i64>| generation.zip(stored).is_some_and(|(then, now)| then != now);
            let edited = self.progress.level.is_some()
                && (since(self.progress.level_generation) || since(self.memory.through.map(|t| t.generation)));
            // A4: the proof taken again on a look is one attempt past the template's count.
            let tried = match self.proving_again() {
                true => {
                    format!("in the proof taken again on an attestation's look (attempt {})", self.progress.attempt)
                }
                false => format!("in any of {} attempts", self.spec.retry.count),
            };
            let message = match reason {
                Reason::ReleaseNotWritten => format!(
                    "the machine was proven Off but the Node could not be updated within {} {tried} (last: {last}); nothing released",
                    self.spec.power_off_timeout
                ),
                Reason::PowerActionHeld => format!(
                    "a gate held the power action until the last attempt ran out ({} {tried}; {last}); nothing released",
                    self.spec.power_off_timeout
                ),
                _ => format!(
                    "no proof of power-off within {} {tried} (last: {last}); nothing released",
                    self.spec.power_off_timeout
                ),
            };
            if edited {
                let message = format!("{message}; the BmcBinding was edited during the level: no next level");
                return {
                    self.fail_here(reason, message);
                    true
                };
            }
            self.fail(reason, message);
        } else {
            let message = format!(
                "no release within {} ({}; last: {last}); next attempt in {}",
                self.spec.power_off_timeout,
                self.attempt_label(),
                self.spec.retry.interval
            );
            self.schedule_next_attempt();
            self.progress.intent = None;
            let phase = if self.progress.level.is_some() { Phase::PoweringOffOutlets } else { Phase::PoweringOff };
            self.enter(phase, Reason::AttemptFailed, message);
        }
        true
    }

    /// A proof that lapsed in `Releasing` once the attempt's time is up is not proven again: the
    /// release ran out of time (`ReleaseNotWritten`), which is the real cause, not the power-off.
    /// Before then it is proven again, and the attempt remembers that its proof lapsed.
    fn release_out_of_time(&mut self) -> bool {
        if phase_of(&self.status) == Phase::Releasing && self.check_attempt_deadline() {
            return true;
        }
        self.progress.proof_lapsed_in = self.progress.attempt_started_at.clone();
        false
    }

    /// Whether this attempt's proof lapsed before its release could be written: the machine was
    /// proven Off in it, and a reading of anything else since would have started a new attempt, so
    /// its end is the release's, not the power-off's.
    fn release_ran_out(&self) -> bool {
        let life = [self.progress.last_power_state.as_deref(), self.memory.last_power.as_deref()]
            .into_iter()
            .flatten()
            .any(crate::bmc::PowerState::recorded_shows_life);
        self.progress.proof_lapsed_in.is_some()
            && self.progress.proof_lapsed_in == self.progress.attempt_started_at
            && !life
    }

    fn off_proven(&mut self, run: Run) {
        let first = self.progress.off_run.as_ref().and_then(|r| r.first.first()).map(|r| r.at.0.to_string());
        let message = format!(
            "power proven Off: {} consecutive Off readings from {} spanning at least {}; releasing the node",
            run.count,
            first.unwrap_or_default(),
            self.spec.settle
        );
        let now = self.now();
        let mirror = self.progress.off_run.take();
        let evidence = self.power_off_evidence();
        evidence.proof = mirror;
        evidence.proven_at = Some(now);
        self.memory.run = None;
        self.memory.proof = Some(run);
        self.progress.last_error = None;
        self.notify(false, "PowerOffProven", message.clone());
        self.enter(Phase::Releasing, Reason::Releasing, message);
        self.requeue = Some(StdDuration::ZERO);
    }

    /// A reading in Releasing: the proof had gone stale (or was taken by another process). Off, and
    /// unbroken from the proof, keeps the proof fresh; Off after a gap proves again; anything else
    /// means the machine came back on: a new attempt switches it off again.
    fn releasing(&mut self, reading: Result<PowerReading, BmcFailure>) {
        self.start_attempt_if_needed();
        self.note_reading(&reading);
        if self.begun_release_shows_life(&reading) {
            return;
        }
        match reading {
            Ok(reading) if !self.same_system(&reading) => {}
            Ok(reading) if reading.power_state == PowerState::Off => match self.memory.proof {
                Some(proof) if dense(&proof.last, &reading.sampled, self.spec).is_ok() => {
                    self.memory.proof = Some(Run { last: reading.sampled, count: proof.count + 1, ..proof });
                    // A release that keeps failing must not hold its slot on a proof kept fresh.
                    if !self.check_attempt_deadline() {
                        self.requeue = Some(StdDuration::ZERO);
                    }
                }
                _ => {
                    if self.release_out_of_time() {
                        return;
                    }
                    self.memory.proof = None;
                    self.memory.run = Some(extended(None, reading.sampled, self.spec).0);
                    self.progress.off_run = None;
                    self.mirror_run(&reading);
                    if let Some(power_off) = self.evidence.power_off.as_mut() {
                        power_off.proof = None;
                        power_off.proven_at = None;
                    }
                    let message = "no fresh proof of power-off by this coroner process; proving it again".to_owned();
                    self.enter(Phase::ConfirmingOff, Reason::ConfirmingOff, message);
                    self.requeue = Some(self.spec.poll_interval.get());
                }
            },
            Ok(reading) => {
                if let Some(power_off) = self.evidence.power_off.as_mut() {
                    power_off.proof = None;
                    power_off.proven_at = None;
                }
                // P3: the proof and any run end here, also when a gate holds the ForceOff below.
                self.memory.proof = None;
                self.memory.run = None;
                self.progress.off_run = None;
                let last = format!("power reads {} after the proof: the machine came back on", reading.power_state);
                self.progress.last_error = Some(last.clone());
                if self.progress.attempt >= self.spec.retry.count {
                    return self
                        .fail(Reason::PowerOffNotConfirmed, format!("{last} in the last attempt; nothing released"));
                }
                self.progress.attempt += 1;
                self.progress.attempt_started_at = Some(self.now());
                self.memory.attempt_started = Some(self.ctx.mono);
                self.notify(
                    true,
                    Reason::AttemptFailed.as_str(),
                    format!("{last}; a new attempt switches it off again"),
                );
                if self.held() {
                    return;
                }
                self.force_off(&reading, "switching it off again");
            }
            Err(failure) if !failure.transient => {
                self.fail(failure.reason, format!("{}; nothing released", failure.message))
            }
            Err(failure) => {
                self.progress.last_error = Some(failure.message);
                if !self.check_attempt_deadline() {
                    self.requeue = Some(self.spec.poll_interval.get());
                }
            }
        }
    }

    fn reset_answered(&mut self, action: ResetType, result: Result<u16, BmcFailure>) {
        let level = self.progress.level.filter(|_| phase_of(&self.status) == Phase::PoweringOffOutlets);
        let text = match &result {
            Ok(_) if let Some(level) = level => format!("every outlet of level {level} accepted Off"),
            // IPMI answers with its completion code; 0 is no HTTP status.
            Ok(0) => "accepted (IPMI completion code 0x00)".to_owned(),
            Ok(status) => format!("HTTP {status}"),
            Err(failure) => failure.message.clone(),
        };
        let sent_at = self.progress.intent.as_ref().map_or_else(|| self.now(), |i| i.decided_at.clone());
        let mut again = false;
        if action == ResetType::ForceOff {
            let (attempt, at) = (self.progress.attempt, self.progress.level);
            // A level's attempts count from 1 again: only its own Offs count in its attempt (P7).
            let resets = &mut self.power_off_evidence().resets;
            let accepted = result.is_ok();
            let record = crate::api::ResetRecord {
                attempt,
                sent_at: sent_at.clone(),
                result: text.clone(),
                level: at,
                accepted,
            };
            resets.push(record);
            let in_attempt = resets.iter().filter(|r| r.attempt == attempt && r.level == at).count();
            again = force_off_again(&result, in_attempt);
            // A level's outlets have their own pace (outlets::plan).
            if level.is_none() && read_at_once_after(action, result.is_ok()) {
                self.memory.last_requested = None;
            }
        }
        // The answer belongs to the intent this process persisted: a deposed process's answer,
        // decided again on a status that now carries another process's intent, must not mark that
        // one answered (it is still to be sent, under its own checks). A failed ForceOff to be sent
        // again stays unanswered, so the next reading that is not Off sends it (P7).
        let instance = self.ctx.instance;
        if let Some(intent) = self.progress.intent.as_mut()
            && intent.instance == instance
            && intent.action == PowerAction::from(action)
            && !again
        {
            intent.result = Some(text.clone());
        }
        match action {
            ResetType::ForceOff => {
                // The answer proves nothing either way; only readings do. A rejection is still worth a Warning.
                let then = if again { "; sent again after the next reading that is not Off" } else { "" };
                let (reason, what) = match level {
                    Some(level) => ("OutletsOffSent", format!("Off sent to the outlets of level {level}")),
                    None => ("ForceOffSent", "ForceOff sent".to_owned()),
                };
                self.notify(result.is_err(), reason, format!("{what} ({}): {text}{then}", self.attempt_label()));
            }
            ResetType::On => {
                let power_on = self.evidence.power_on.get_or_insert_with(PowerOnEvidence::default);
                power_on.sent_at = Some(sent_at);
                power_on.result = Some(text.clone());
                self.notify(result.is_err(), "PowerOnSent", format!("On sent: {text}"));
            }
        }
        self.requeue = Some(self.spec.poll_interval.get());
    }

    /// Right before a power action the node, read again, did not allow it: nothing was sent.
    fn action_refused(&mut self, refusal: NodeRefusal) {
        if phase_of(&self.status) == Phase::PoweringOn {
            // Not sent: the release stands again until an `On` is decided (docs/safety.md R1).
            if self.unsent(PowerAction::On) {
                self.progress.intent = None;
            }
            return self.power_on_blocked(&refusal);
        }
        let message = format!("{refusal}; no power action taken, nothing released");
        self.fail(refusal.reason(), message);
    }

    /// P1: right before the request there was no device to send it to: the decision is withdrawn
    /// (nothing was sent, so nothing is taken for an answer) and the phase's deadline judged.
    fn action_unsent(&mut self, phase: Phase, failure: BmcFailure) {
        let force_off = self.unsent(PowerAction::ForceOff);
        self.withdraw_unsent();
        let message = format!("nothing sent: {}", failure.message);
        if phase == Phase::PoweringOn {
            return self.power_on_not_read(message);
        }
        if force_off {
            self.decide_again(&message);
        }
        self.progress.last_error = Some(message);
        if !self.check_attempt_deadline() {
            self.requeue = Some(self.spec.poll_interval.get());
        }
    }

    /// P1: right before the request the binding led to another device than the reading's. An
    /// endpoint or TLS change (a new generation) ends the attempt, whose next one proves identity
    /// through the binding as it is now; after the release no `On` goes through it. New credential
    /// values alone: the run restarts and the next reading, through them, decides again.
    fn device_changed(&mut self, proven: DeviceMark, now: DeviceMark) {
        let force_off = self.unsent(PowerAction::ForceOff);
        self.withdraw_unsent();
        if proven.generation != now.generation {
            if is_released(self.old) {
                return self.binding_changed_after_release();
            }
            return self.binding_changed();
        }
        self.memory.run = None;
        self.memory.proof = None;
        self.memory.through = None;
        self.progress.off_run = None;
        let message =
            "the credentials changed between the reading and the request; nothing sent, reading again through them";
        if force_off {
            self.decide_again(message);
        }
        self.progress.last_error = Some(message.into());
        self.requeue = Some(StdDuration::ZERO);
    }

    /// P1/P7: a ForceOff withdrawn before it was sent (no device to send it to, new credential values)
    /// is decided again on the next fresh reading that is not Off, as the attempt's first was.
    fn decide_again(&mut self, why: &str) {
        if phase_of(&self.status) == Phase::ConfirmingOff {
            let message = format!("{why}; the next reading decides the ForceOff again ({})", self.attempt_label());
            self.enter(Phase::PoweringOff, Reason::PoweringOff, message);
        }
    }

    // Releasing ---------------------------------------------------------------------------------------

    fn release_evidence(&self, released: &Released) -> ReleaseEvidence {
        ReleaseEvidence {
            kind: if self.progress.level.is_some() { ReleaseKind::LevelProof } else { ReleaseKind::BmcProof },
            release_id: None,
            attestation: None,
            adopted_from: None,
            strategy: self.spec.remediation_strategy,
            node_ready: released.node_ready.clone(),
            lease_renew_time: released.lease_renew_time.map(MicroTime),
            released_at: MicroTime(released.at),
            taint_owned: released.taint_owned,
            pods_deleted: released.pods_deleted,
            taint_removed_at: None,
            release_timed_out: false,
        }
    }

    /// R1: the node passed the release check; before its first pod is deleted the release is
    /// recorded as begun, so that nothing that ends the fence later can forget it.
    fn deletion_may_begin(&mut self, outcome: Result<Released, ReleaseRefusal>) {
        match outcome {
            Ok(released) => {
                // How many pods will go is not known until they are gone.
                let begun = ReleaseEvidence { pods_deleted: None, ..self.release_evidence(&released) };
                self.progress.release_begun = Some(begun);
                self.memory.begun_untouched = true;
                self.requeue = Some(StdDuration::ZERO);
            }
            Err(refusal) => self.released(Err(refusal)),
        }
    }

    fn released(&mut self, outcome: Result<Released, ReleaseRefusal>) {
        // A refusal sent no deletion: if none was sent since this process recorded the release as
        // begun, nothing was released and the record goes (the next try records it again).
        if outcome.is_err() && self.memory.begun_untouched {
            self.progress.release_begun = None;
        }
        if outcome.is_ok() {
            self.memory.begun_untouched = false;
        }
        let released = match outcome {
            Ok(released) => released,
            Err(ReleaseRefusal::Node(refusal)) => {
                let message = format!("{refusal}; nothing released, no retry");
                return self.fail(refusal.reason(), message);
            }
            Err(ReleaseRefusal::ProofExpired) => {
                self.progress.last_error = Some(ReleaseRefusal::ProofExpired.to_string());
                if !self.check_attempt_deadline() {
                    self.requeue = Some(StdDuration::ZERO);
                }
                return;
            }
            Err(ReleaseRefusal::WriteRefused(why)) => {
                self.progress.last_error = Some(format!("the Node update was refused: {why}"));
                if !self.check_attempt_deadline() {
                    self.requeue = Some(self.spec.poll_interval.get());
                }
                return;
            }
            Err(refusal @ ReleaseRefusal::DidNotTakeEffect { .. }) => {
                let message = format!("{refusal}; nothing released, and the machine needs a look");
                return self.fail(Reason::FenceDidNotTakeEffect, message);
            }
        };
        let begun = self.progress.release_begun.is_some();
        let how = match released.pods_deleted {
            Some(0) if begun => "the deletion of the node's pods, begun on the proof, left none to delete".to_owned(),
            Some(count) => format!("force-deleted {count} pods bound to the node"),
            None if let Some(from) = &released.took_over_from => {
                format!("took over the out-of-service taint that remediation UID {from} added, which no longer exists")
            }
            None if released.taint_owned => "added the out-of-service taint".to_owned(),
            None => "the out-of-service taint was already there (not claimed)".to_owned(),
        };
        let message = format!("power proven Off and the node still silent (Ready={}); {how}", released.node_ready);
        let mut evidence = self.release_evidence(&released);
        // A deletion's release began when it was recorded as begun, before its first pod.
        if let Some(begun) = self.progress.release_begun.take() {
            evidence.released_at = begun.released_at;
        }
        self.evidence.release = Some(evidence);
        self.memory.proof = None;
        if let Some(refusal) = released.interrupted {
            // The pods deleted are released (and guarded); the rest are not, and the fence fails.
            let (reason, why) = match &refusal {
                ReleaseRefusal::Node(node) => (node.reason(), node.to_string()),
                other => (Reason::ReleaseNotWritten, other.to_string()),
            };
            let message = format!(
                "power proven Off; {how}, then stopped: {why}. Those pods are released and the machine is guarded; the others were not deleted"
            );
            return self.fail(reason, message);
        }
        if let Some(from) = &released.took_over_from {
            let text = format!(
                "the out-of-service taint remediation UID {from} left on the node (that remediation no longer exists) is now this release's: guarded with it, removed as its own"
            );
            self.notify(false, STALE_TAINT_ADOPTED, text);
        }
        self.notify(false, Reason::NodeFenced.as_str(), message.clone());
        self.after_release(message);
    }

    fn after_release(&mut self, message: String) {
        match self.spec.action {
            FenceAction::Off => {
                let message = format!("{message}; the machine stays off until someone powers it on");
                self.enter(Phase::Done, Reason::RemediationComplete, message);
                // Only this fence's own proof read the machine right before the release; an adopted
                // release's guard is the sibling's.
                if self.evidence.release.as_ref().is_some_and(|r| r.adopted_from.is_none()) {
                    crate::words::guard::armed_at_release(&mut self.status.conditions, self.ctx.now);
                }
            }
            FenceAction::Reboot => {
                // releaseTimeout runs from the release, on this process's clock too.
                self.memory.attempt_started = Some(self.ctx.mono);
                self.enter(
                    Phase::WaitingForRelease,
                    Reason::WaitingForRelease,
                    format!("{message}; waiting for pods and volumes to be released"),
                );
                self.requeue = Some(self.spec.poll_interval.get());
            }
        }
    }

    // WaitingForRelease -------------------------------------------------------------------------------

    fn waiting_for_release(&mut self, workloads: Workloads) {
        if workloads.blocking_pods == 0 && workloads.volume_attachments == 0 {
            self.set_condition(
                contract::WORKLOADS_RELEASED,
                true,
                "WorkloadsReleased",
                "no pod or VolumeAttachment holds the node any more",
            );
        } else {
            let holding = format!(
                "{} pods and {} VolumeAttachments still hold the node",
                workloads.blocking_pods, workloads.volume_attachments
            );
            if !self.release_timed_out(&holding) {
                return;
            }
        }
        self.power_on_after_release();
    }

    /// P5: the workloads could not be listed; at releaseTimeout the fence goes on as if they still
    /// held the node.
    fn workloads_unknown(&mut self, cause: String) {
        if self
            .release_timed_out(&format!("whether pods or VolumeAttachments still hold the node is unknown ({cause})"))
        {
            self.power_on_after_release();
        }
    }

    /// Whether releaseTimeout has passed since the release, with `holding` still true: says so, or
    /// waits.
    fn release_timed_out(&mut self, holding: &str) -> bool {
        let released_at = self.evidence.release.as_ref().map_or(self.ctx.now, |r| r.released_at.0);
        // Class 9: also on this process's own clock since it began to wait, so a release time
        // written by a clock that ran ahead cannot hold the slot, however often leaders change.
        let waiting_since = *self.memory.attempt_started.get_or_insert(self.ctx.mono);
        let waited = self.ctx.mono.saturating_sub(waiting_since) >= self.spec.release_timeout.get();
        if elapsed(released_at, self.ctx.now) < self.spec.release_timeout.get() && !waited {
            self.requeue = Some(self.spec.poll_interval.get().max(StdDuration::from_secs(2)));
            return false;
        }
        let message = format!("after {}: {holding}; powering on regardless", self.spec.release_timeout);
        self.set_condition(contract::WORKLOADS_RELEASED, false, "ReleaseTimeout", &message);
        self.notify(true, "ReleaseTimeout", message);
        if let Some(release) = self.evidence.release.as_mut() {
            release.release_timed_out = true;
        }
        true
    }

    fn power_on_after_release(&mut self) {
        if let Some(value) = self.ctx.node.excluded.clone() {
            // R5: no `On`, and the release stands as an `Off` release's does (its taint stays).
            return self.power_on_excluded(&value);
        }
        if let Some(release) = self.evidence.release.as_mut() {
            release.taint_removed_at = release.taint_owned.then_some(MicroTime(self.ctx.now));
        }
        self.progress = Progress { attempt: 1, attempt_started_at: Some(self.now()), ..Progress::default() };
        // PoweringOn holds a slot: its deadline runs from here, whatever it waits for.
        self.memory =
            Memory { attempt_started: Some(self.ctx.mono), through: self.memory.through, ..Memory::default() };
        self.enter(
            Phase::PoweringOn,
            Reason::PoweringOn,
            "workloads released; out-of-service taint removed; powering on".into(),
        );
        self.requeue = Some(StdDuration::from_secs(1));
    }

    // PoweringOn --------------------------------------------------------------------------------------

    /// An out-of-service taint is on the node: no `On`. Waits with a Warning, and at the deadline
    /// leaves the machine off (`PoweredOn=False`); the fence stands.
    fn power_on_blocked(&mut self, refusal: &NodeRefusal) {
        if let NodeRefusal::Excluded { value, .. } = refusal {
            return self.power_on_excluded(value);
        }
        if self.attempt_deadline_passed() {
            return self.power_on_given_up(refusal.to_string());
        }
        let message = format!("{refusal}; waiting for it to go");
        let reason = Reason::OutOfServiceTaintPresent.as_str();
        let changed = conditions::set(
            &mut self.status.conditions,
            contract::POWERED_ON,
            conditions::UNKNOWN,
            reason,
            &message,
            self.ctx.now,
        );
        if changed {
            self.notify(true, reason, message.clone());
        }
        self.enter(Phase::PoweringOn, Reason::OutOfServiceTaintPresent, message);
        self.requeue = Some(self.spec.poll_interval.get().max(StdDuration::from_secs(1)));
    }

    /// R5: the exclusion label stopped the `Reboot`'s `On`: the fence ends as an `Off` release does
    /// (`Succeeded` stays True, the machine stays off) and never waits for a power-on.
    fn power_on_excluded(&mut self, value: &str) {
        let message = format!(
            "the node carries {}={value:?}: no power-on ({}); the machine stays off, as with action Off",
            contract::EXCLUDE_LABEL,
            Reason::PowerOnExcluded.as_str()
        );
        self.progress.intent = None;
        self.set_condition(contract::POWERED_ON, false, Reason::PowerOnExcluded.as_str(), &message);
        self.notify(true, Reason::PowerOnExcluded.as_str(), message.clone());
        self.enter(Phase::Done, Reason::PowerOnExcluded, message);
    }

    /// Whether powerOffTimeout has passed since the attempt (or the phase with a deadline) began
    /// ([`past_deadline`]); starts this process's clock on it when none runs.
    fn attempt_deadline_passed(&mut self) -> bool {
        if self.memory.attempt_started.is_none() {
            self.memory.attempt_started = Some(self.ctx.mono);
        }
        let since = self.progress.attempt_started_at.as_ref().map(|t| t.0);
        #[cfg(test)]
        if self.ctx.sabotage == crate::sabotage::Sabotage::DeadlineNeverPasses {
            return false;
        }
        past_deadline(
            self.memory.attempt_started,
            self.ctx.mono,
            since,
            self.ctx.now,
            self.spec.power_off_timeout.get(),
        )
    }

    fn powering_on(&mut self, reading: Result<PowerReading, BmcFailure>) {
        self.note_reading(&reading);
        let sent_on = self.progress.intent.as_ref().is_some_and(|i| i.action == PowerAction::On && i.result.is_some());
        if let Some(value) = self.ctx.node.excluded.clone()
            && !sent_on
        {
            return self.power_on_excluded(&value);
        }
        let decided = self.progress.intent.as_ref().is_some_and(|i| i.action == PowerAction::On);
        // R1: the release stands until coroner's `On` is answered; a power-on before that is not
        // taken for coroner's, whatever became of the taint (it may have come while nobody read).
        match reading {
            Ok(reading) if !self.same_system(&reading) => {}
            Ok(reading) if reading.power_state == PowerState::On && sent_on => {
                let message = "power reads On again".to_owned();
                self.evidence.power_on.get_or_insert_with(PowerOnEvidence::default).confirmed_at = Some(self.now());
                self.set_condition(contract::POWERED_ON, true, "PoweredOn", &message);
                self.notify(false, "PoweredOn", message.clone());
                self.enter(
                    Phase::WaitingForNode,
                    Reason::WaitingForNode,
                    format!("{message}; waiting for the node to return with a new bootID"),
                );
            }
            Ok(reading) if reading.power_state == PowerState::On => {
                // R1: on while the release stands, before coroner's own `On` was answered: not taken
                // for coroner's, the guard's to judge. An `On` on top of it would claim it.
                let message = "power reads On before coroner's power-on was answered, while its release stands: not taken for coroner's doing (the guard switches it off with guard: Enforce); no On is sent".to_owned();
                // R2: the guard judges on this reading now, not on its own next one; recorded, so a
                // process that takes over judges on it too.
                self.memory.sighted_on = Some(PowerState::On);
                self.memory.guarded_at = None;
                let now = self.now();
                self.status.guard.get_or_insert_with(Default::default).sighted_at = Some(now);
                self.power_on_waits(message.clone(), message);
            }
            Ok(_) if (!decided || self.unsent(PowerAction::On)) && !self.attempt_deadline_passed() => {
                let allowed = may_power_on(self.ctx.node);
                #[cfg(test)]
                let allowed = match allowed {
                    Err(NodeRefusal::OutOfService { .. })
                        if self.ctx.sabotage == crate::sabotage::Sabotage::OnUnderTaint =>
                    {
                        Ok(())
                    }
                    allowed => allowed,
                };
                if let Err(refusal) = allowed {
                    return self.power_on_blocked(&refusal);
                }
                self.decide(PowerAction::On);
                self.requeue = Some(self.spec.poll_interval.get());
            }
            outcome => self.power_on_not_read(match outcome {
                Ok(reading) => format!("power reads {}", reading.power_state),
                Err(failure) => failure.message,
            }),
        }
    }

    /// No `On` read back (yet): at the deadline the node stays fenced, with `last` as the cause.
    fn power_on_not_read(&mut self, last: String) {
        let at_deadline =
            format!("power did not read On within {} ({last}); the node stays fenced", self.spec.power_off_timeout);
        self.power_on_waits(at_deadline, last);
    }

    /// PoweringOn's deadline: past it, `PoweredOn=False` with `at_deadline` and the fence waits for
    /// the node; before it, `meanwhile` is the last error and the next reading comes.
    fn power_on_waits(&mut self, at_deadline: String, meanwhile: String) {
        let decided = self.progress.intent.as_ref().is_some_and(|i| i.action == PowerAction::On);
        if self.attempt_deadline_passed() && !decided {
            self.power_on_given_up(meanwhile);
        } else if self.attempt_deadline_passed() {
            self.set_condition(contract::POWERED_ON, false, "PowerOnNotConfirmed", &at_deadline);
            self.notify(true, "PowerOnNotConfirmed", at_deadline.clone());
            self.enter(Phase::WaitingForNode, Reason::WaitingForNode, at_deadline);
        } else {
            self.progress.last_error = Some(meanwhile);
            self.requeue = Some(self.spec.poll_interval.get());
        }
    }

    /// PoweringOn's deadline passed and no `On` was ever decided (so none was sent): the fence ends as
    /// an `Off` release does, with the cause, and never waits for a node whose machine nobody
    /// switches on (a later remediation of the node is not held by it).
    fn power_on_given_up(&mut self, cause: String) {
        let reason = Reason::PowerOnBlocked;
        let message = format!(
            "{cause}; no On was sent by the power-on deadline of {} ({}): the machine stays off, as with action Off",
            self.spec.power_off_timeout,
            reason.as_str()
        );
        self.progress.intent = None;
        self.set_condition(contract::POWERED_ON, false, reason.as_str(), &message);
        self.notify(true, reason.as_str(), message.clone());
        self.enter(Phase::Done, reason, message);
    }

    // WaitingForNode ----------------------------------------------------------------------------------

    fn waiting_for_node(&mut self) {
        let node = self.ctx.node;
        let old_boot = self.evidence.node.as_ref().map(|n| n.boot_id.as_str()).unwrap_or_default();
        if node.ready.as_deref() != Some(conditions::TRUE) || node.boot_id.is_empty() || node.boot_id == old_boot {
            return;
        }
        let power_on = self.evidence.power_on.get_or_insert_with(PowerOnEvidence::default);
        power_on.new_boot_id = Some(node.boot_id.clone());
        power_on.node_ready_at = Some(MicroTime(self.ctx.now));
        let message = format!("node is Ready again with bootID {}; coroner's taints are removed", node.boot_id);
        self.notify(false, "NodeRecovered", message.clone());
        self.enter(Phase::Done, Reason::RemediationComplete, message);
    }
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
