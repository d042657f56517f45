//! A `Reboot`'s power-on after the release, and waiting for the node to come back.

use super::*;
use crate::words::event::Event;

impl Step<'_> {
    pub(super) fn power_on_after_release(&mut self) {
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
    pub(super) fn power_on_blocked(&mut self, refusal: &NodeRefusal) {
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
    pub(super) fn power_on_excluded(&mut self, value: &str) {
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
    pub(super) fn attempt_deadline_passed(&mut self) -> bool {
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

    pub(super) fn powering_on(&mut self, reading: Result<PowerReading, BmcFailure>) {
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
                self.notify(false, Event::PoweredOn.as_str(), message.clone());
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
    pub(super) fn power_on_not_read(&mut self, last: String) {
        let at_deadline =
            format!("power did not read On within {} ({last}); the node stays fenced", self.spec.power_off_timeout);
        self.power_on_waits(at_deadline, last);
    }

    /// PoweringOn's deadline: past it, `PoweredOn=False` with `at_deadline` and the fence waits for
    /// the node; before it, `meanwhile` is the last error and the next reading comes.
    pub(super) fn power_on_waits(&mut self, at_deadline: String, meanwhile: String) {
        let decided = self.progress.intent.as_ref().is_some_and(|i| i.action == PowerAction::On);
        if self.attempt_deadline_passed() && !decided {
            self.power_on_given_up(meanwhile);
        } else if self.attempt_deadline_passed() {
            self.set_condition(contract::POWERED_ON, false, "PowerOnNotConfirmed", &at_deadline);
            self.notify(true, Event::PowerOnNotConfirmed.as_str(), at_deadline.clone());
            self.enter(Phase::WaitingForNode, Reason::WaitingForNode, at_deadline);
        } else {
            self.progress.last_error = Some(meanwhile);
            self.requeue = Some(self.spec.poll_interval.get());
        }
    }

    /// PoweringOn's deadline passed and no `On` was ever decided (so none was sent): the fence ends as
    /// an `Off` release does, with the cause, and never waits for a node whose machine nobody
    /// switches on (a later remediation of the node is not held by it).
    pub(super) fn power_on_given_up(&mut self, cause: String) {
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

    pub(super) fn waiting_for_node(&mut self) {
        let node = self.ctx.node;
        let old_boot = self.evidence.node.as_ref().map(|n| n.boot_id.as_str()).unwrap_or_default();
        if node.ready.as_deref() != Some(conditions::TRUE) || node.boot_id.is_empty() || node.boot_id == old_boot {
            return;
        }
        let power_on = self.evidence.power_on.get_or_insert_with(PowerOnEvidence::default);
        power_on.new_boot_id = Some(node.boot_id.clone());
        power_on.node_ready_at = Some(MicroTime(self.ctx.now));
        let message = format!("node is Ready again with bootID {}; coroner's taints are removed", node.boot_id);
        self.notify(false, Event::NodeRecovered.as_str(), message.clone());
        self.enter(Phase::Done, Reason::RemediationComplete, message);
    }
}
