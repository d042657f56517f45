//! The release: the checks right before it, the Node update and its record, the answers to a power
//! action, and waiting for the node's workloads (R1, W2).

use super::*;
use crate::words::event::Event;

impl Step<'_> {
    /// A reading in Releasing: the proof had gone stale (or was taken by another process). Off, and
    /// unbroken from the proof, keeps the proof fresh; Off after a gap proves again; anything else
    /// means the machine came back on: a new attempt switches it off again.
    pub(super) fn releasing(&mut self, reading: Result<PowerReading, BmcFailure>) {
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

    pub(super) fn reset_answered(&mut self, action: ResetType, result: Result<u16, BmcFailure>) {
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
                    Some(level) => {
                        (Event::OutletsOffSent.as_str(), format!("Off sent to the outlets of level {level}"))
                    }
                    None => (Event::ForceOffSent.as_str(), "ForceOff sent".to_owned()),
                };
                self.notify(result.is_err(), reason, format!("{what} ({}): {text}{then}", self.attempt_label()));
            }
            ResetType::On => {
                let power_on = self.evidence.power_on.get_or_insert_with(PowerOnEvidence::default);
                power_on.sent_at = Some(sent_at);
                power_on.result = Some(text.clone());
                self.notify(result.is_err(), Event::PowerOnSent.as_str(), format!("On sent: {text}"));
            }
        }
        self.requeue = Some(self.spec.poll_interval.get());
    }

    /// Right before a power action the node, read again, did not allow it: nothing was sent.
    pub(super) fn action_refused(&mut self, refusal: NodeRefusal) {
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
    pub(super) fn action_unsent(&mut self, phase: Phase, failure: BmcFailure) {
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
    pub(super) fn device_changed(&mut self, proven: DeviceMark, now: DeviceMark) {
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
    pub(super) fn decide_again(&mut self, why: &str) {
        if phase_of(&self.status) == Phase::ConfirmingOff {
            let message = format!("{why}; the next reading decides the ForceOff again ({})", self.attempt_label());
            self.enter(Phase::PoweringOff, Reason::PoweringOff, message);
        }
    }

    // Releasing ---------------------------------------------------------------------------------------

    pub(super) fn release_evidence(&self, released: &Released) -> ReleaseEvidence {
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
    pub(super) fn deletion_may_begin(&mut self, outcome: Result<Released, ReleaseRefusal>) {
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

    pub(super) fn released(&mut self, outcome: Result<Released, ReleaseRefusal>) {
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

    pub(super) fn after_release(&mut self, message: String) {
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

    pub(super) fn waiting_for_release(&mut self, workloads: Workloads) {
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
    pub(super) fn workloads_unknown(&mut self, cause: String) {
        if self
            .release_timed_out(&format!("whether pods or VolumeAttachments still hold the node is unknown ({cause})"))
        {
            self.power_on_after_release();
        }
    }

    /// Whether releaseTimeout has passed since the release, with `holding` still true: says so, or
    /// waits.
    pub(super) fn release_timed_out(&mut self, holding: &str) -> bool {
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
        self.notify(true, Event::ReleaseTimeout.as_str(), message);
        if let Some(release) = self.evidence.release.as_mut() {
            release.release_timed_out = true;
        }
        true
    }
}
