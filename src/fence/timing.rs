//! The proof's timing rules (P2-P5): what one read may take, how far apart readings may be, when a
//! run spans settle, and the deadlines.

use super::*;

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
