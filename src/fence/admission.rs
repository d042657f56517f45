//! The fence's first steps: admission, adopting a release already standing, identity (the BMC's
//! system is this node), the attempts, and a binding changed under the fence.

use super::*;
use crate::words::event::Event;

impl Step<'_> {
    pub(super) fn admission(&mut self, verdict: Verdict) {
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
    pub(super) fn adopt(&mut self, adoptable: &crate::gates::Adoptable) {
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
    pub(super) fn unavailable(&mut self, phase: Phase, cause: String) {
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

    pub(super) fn identity(&mut self, found: Result<IdentityFound, IdentityProblem>) {
        let found = match found {
            Ok(found) => found,
            Err(IdentityProblem::Binding { reason, message, seen_on }) => {
                if let Some(seen_on) = seen_on {
                    self.saw_power(&seen_on);
                }
                return self.fail(reason, message);
            }
            Err(IdentityProblem::SeenThenFailed { failure, seen_on }) => {
                self.saw_power(&seen_on);
                return self.identity(Err(IdentityProblem::Bmc(failure)));
            }
            Err(IdentityProblem::Bmc(failure)) if failure.transient => {
                return self.identity_attempt_failed(failure.message);
            }
            Err(IdentityProblem::Bmc(failure)) => return self.fail(failure.reason, failure.message),
        };
        let node_uuid = self.evidence.node.as_ref().map(|n| n.system_uuid.clone()).unwrap_or_default();
        // The identity read is the fence's first reading of the machine its UUID names (A1).
        let names_node = identity::names_machine(&node_uuid, &found.system.uuid);
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
            self.notify(true, Event::InsecureSkipVerify.as_str(), message);
        }
        let message = format!(
            "BMC system {} at {} has UUID {} ({:?} match with the node's systemUUID {node_uuid}); its power reads {}",
            found.system.id, found.endpoint, found.system.uuid, matched, found.system.power_state
        );
        self.notify(false, Event::IdentityVerified.as_str(), message.clone());
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

    pub(super) fn identity_attempt_failed(&mut self, message: String) {
        self.identity_attempt_ended(Reason::BmcUnreachable, message);
    }

    /// An identity attempt ended without a proof; `reason` is the fence's when it was the last.
    pub(super) fn identity_attempt_ended(&mut self, reason: Reason, message: String) {
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
    pub(super) fn start_afresh(&mut self, unanswered_level: Option<u32>) -> (Progress, Progress) {
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

    pub(super) fn schedule_next_attempt(&mut self) {
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
    pub(super) fn same_system(&mut self, reading: &PowerReading) -> bool {
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
    pub(super) fn binding_changed_after_release(&mut self) {
        let message = "the BmcBinding's spec changed (a new generation) since the identity was proven; no On is sent through it, the machine stays off".to_owned();
        self.set_condition(contract::POWERED_ON, false, "BindingChanged", &message);
        self.notify(true, Event::BindingChanged.as_str(), message.clone());
        self.enter(Phase::WaitingForNode, Reason::WaitingForNode, message);
    }

    pub(super) fn binding_changed(&mut self) {
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
}
