//! Powering off through the BMC: the readings, the ForceOff and its answer-driven retries, the run
//! of Off readings that proves the machine off (P2-P5), and each attempt's deadline.

use super::*;
use crate::words::event::Event;

impl Step<'_> {
    pub(super) fn start_attempt_if_needed(&mut self) {
        if self.memory.attempt_started.is_none() {
            self.memory.attempt_started = Some(self.ctx.mono);
        }
        if self.progress.attempt_started_at.is_none() {
            self.progress.attempt_started_at = Some(self.now());
            self.progress.next_attempt_at = None;
            self.power_off_evidence().attempts = self.progress.attempt;
        }
    }

    pub(super) fn power_off_evidence(&mut self) -> &mut PowerOffEvidence {
        self.evidence.power_off.get_or_insert_with(PowerOffEvidence::default)
    }

    /// A reading of the node's machine (A1), in status and in this process's memory.
    pub(super) fn saw_power(&mut self, power: &str) {
        self.progress.last_power_state = Some(power.to_owned());
        self.progress.unrecorded_reader = None;
        self.memory.last_power = Some(power.to_owned());
    }

    pub(super) fn note_reading(&mut self, reading: &Result<PowerReading, BmcFailure>) {
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
    pub(super) fn begun_release_shows_life(&mut self, reading: &Result<PowerReading, BmcFailure>) -> bool {
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

    pub(super) fn powering_off(&mut self, reading: Result<PowerReading, BmcFailure>) {
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
    pub(super) fn paced_retry(&mut self) {
        if !self.check_attempt_deadline() {
            self.requeue = Some(self.until_next_poll());
        }
    }

    /// One `pollInterval` from the last request, not from its answer (a BMC slower than the interval
    /// is asked again as soon as it answers), or when the run spans settle ([`next_reading_due`]).
    pub(super) fn until_next_poll(&self) -> StdDuration {
        let poll = self.spec.poll_interval.get();
        next_reading_due(self.spec, &self.memory).map_or(poll, |at| at.saturating_sub(self.ctx.mono))
    }

    /// The node's Lease as admission recorded it (the epoch for none, so any Lease that appears
    /// later counts as a renewal); the Lease now for a fence admitted before this was recorded.
    pub(super) fn admitted_lease_time(&self) -> MicroTime {
        match self.evidence.node.as_ref() {
            Some(node) => MicroTime(node.lease_renew_time.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0)),
            None => lease_time(self.ctx.node),
        }
    }

    /// Decides a ForceOff after a fresh reading that is not Off.
    pub(super) fn force_off(&mut self, reading: &PowerReading, what: &str) {
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
    pub(super) fn decide(&mut self, action: PowerAction) {
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
    pub(super) fn held(&mut self) -> bool {
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
    pub(super) fn withdraw_unsent(&mut self) {
        if self.progress.intent.as_ref().is_some_and(|i| i.result.is_none()) {
            self.progress.intent = None;
        }
    }

    /// An intent of `action` is persisted but was never answered: it may never have been sent.
    pub(super) fn unsent(&self, action: PowerAction) -> bool {
        self.progress.intent.as_ref().is_some_and(|i| i.action == action && i.result.is_none())
    }

    pub(super) fn reading(&self, reading: &PowerReading) -> Reading {
        self.shown(reading.sampled, reading.power_state.to_string())
    }

    /// A reading sampled at `sampled`, for people: answered now, requested as long before as it took.
    pub(super) fn shown(&self, sampled: Sampled, power_state: String) -> Reading {
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
    pub(super) fn mirror_run(&mut self, reading: &PowerReading) {
        let shown = self.reading(reading);
        self.mirror(shown);
    }

    /// Adds `shown` to the status's mirror of the run in memory (none without a run).
    pub(super) fn mirror(&mut self, shown: Reading) {
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

    pub(super) fn confirming_off(&mut self, reading: Result<PowerReading, BmcFailure>) {
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
    pub(super) fn check_attempt_deadline(&mut self) -> bool {
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
    pub(super) fn release_out_of_time(&mut self) -> bool {
        if phase_of(&self.status) == Phase::Releasing && self.check_attempt_deadline() {
            return true;
        }
        self.progress.proof_lapsed_in = self.progress.attempt_started_at.clone();
        false
    }

    /// Whether this attempt's proof lapsed before its release could be written: the machine was
    /// proven Off in it, and a reading of anything else since would have started a new attempt, so
    /// its end is the release's, not the power-off's.
    pub(super) fn release_ran_out(&self) -> bool {
        let life = [self.progress.last_power_state.as_deref(), self.memory.last_power.as_deref()]
            .into_iter()
            .flatten()
            .any(crate::bmc::PowerState::recorded_shows_life);
        self.progress.proof_lapsed_in.is_some()
            && self.progress.proof_lapsed_in == self.progress.attempt_started_at
            && !life
    }

    pub(super) fn off_proven(&mut self, run: Run) {
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
        self.notify(false, Event::PowerOffProven.as_str(), message.clone());
        self.enter(Phase::Releasing, Reason::Releasing, message);
        self.requeue = Some(StdDuration::ZERO);
    }
}
