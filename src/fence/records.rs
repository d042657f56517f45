//! What status keeps and what a process keeps (W1, P3), and who reads for the fence (A1, P7): the
//! rules of the fence's record.

use super::*;

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
