//! The fence at a PDU level (docs/safety.md L1–L7). When the BMC (level 1) could not prove Off and
//! stayed silent, the binding's next level takes over: its outlets are switched off (the intent
//! persisted first, as for every power action) and read until every one of them proves Off in an
//! unbroken run spanning settle, under the BMC proof's span and gap rules; then the node's BMC is
//! asked once: it must not answer, or read the machine Off. Only then is the node released.

use super::*;
use crate::words::event::Event;
use crate::{
    api::{LevelProof, OutletProof},
    levels::{self as rules, BmcAfterOutletsOff, LevelNotOff, MappingBasis},
};

/// L7's answer for one level, through one device of it: kept while that level is proven again (a
/// proof that went stale while the BMC was asked is not asked again), dropped when an outlet of
/// the level reads not Off, the level changes, or its device does.
#[derive(Clone, Debug, PartialEq)]
pub struct BmcVerdict {
    pub level: u32,
    pub through: DeviceMark,
    pub after: BmcAfterOutletsOff,
}

/// L2: the phases whose end may hand the fence to a PDU level: from the identity proof until the
/// release is written.
pub fn may_end_in_a_level(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::VerifyingIdentity
            | Phase::PoweringOff
            | Phase::ConfirmingOff
            | Phase::PoweringOffOutlets
            | Phase::Releasing
    )
}

/// The plan in `PoweringOffOutlets`: once every outlet has read Off for settle, ask the BMC (L7);
/// otherwise wait for the attempt or the next reading, then read the outlets.
pub(super) fn plan(
    spec: &CoronerRemediationSpec,
    memory: &Memory,
    wait: Option<StdDuration>,
    read: impl FnOnce() -> Plan,
) -> Plan {
    if memory.run.is_some_and(|run| spans_settle(&run, spec.settle.get())) {
        return Plan::AskBmcAfterOutlets;
    }
    wait.map_or_else(read, Plan::Wait)
}

fn describe(outcomes: &[crate::levels::OutletOutcome]) -> Vec<OutletProof> {
    outcomes
        .iter()
        .map(|o| match &o.reading {
            Ok(reading) => OutletProof {
                outlet: o.outlet.clone(),
                state: if reading.pending {
                    format!("{} (command pending)", reading.state)
                } else {
                    reading.state.to_string()
                },
                watts: reading.watts,
            },
            Err(error) => OutletProof { outlet: o.outlet.clone(), state: format!("unread: {error}"), watts: None },
        })
        .collect()
}

impl Step<'_> {
    /// L2: a level that ended with `reason` hands the fence to the binding's next level whose mapping
    /// may be relied on (L5). `Err`: the fence ends, with `message` saying why no level follows when
    /// the binding has levels.
    pub(super) fn next_level(&mut self, reason: Reason, message: String) -> Result<(), String> {
        let Some(view) = self.ctx.levels.filter(|v| !v.levels.is_empty()) else { return Err(message) };
        let fencing = may_end_in_a_level(phase_of(&self.status));
        let released = self.progress.release_begun.is_some() || is_released(&self.status);
        if !fencing || released || self.spec.action != FenceAction::Off {
            return Err(message);
        }
        if let Err(stop) = rules::may_try_next_level(reason) {
            return Err(format!("{message}; {stop}"));
        }
        let at = self.progress.level.unwrap_or(1);
        let mut skipped = Vec::new();
        for ((number, level), confirmed) in
            (2u32..).zip(view.levels).zip(view.confirmed.iter().chain(std::iter::repeat(&None)))
        {
            if number <= at {
                continue;
            }
            match rules::mapping_basis(level, *confirmed, view.generation) {
                Ok(basis) => {
                    self.enter_level(view, number, basis, reason, &message, &skipped);
                    return Ok(());
                }
                Err(refusal) => skipped.push(format!("level {number} not tried: {refusal}")),
            }
        }
        if skipped.is_empty() { Err(message) } else { Err(format!("{message}; {}", skipped.join("; "))) }
    }

    fn enter_level(
        &mut self,
        view: LevelsView<'_>,
        level: u32,
        basis: MappingBasis,
        reason: Reason,
        ended: &str,
        skipped: &[String],
    ) {
        let index = (level - 2) as usize;
        let outlets: Vec<String> = view.levels[index].outlets.iter().map(|o| o.key()).collect();
        let previous = match self.progress.level {
            Some(previous) => format!("level {previous} (PDU outlets)"),
            None => "level 1 (the BMC)".to_owned(),
        };
        // W1: a ForceOff to the BMC persisted and never answered may have gone out: recorded so.
        let (carried, old) = self.start_afresh(None);
        self.progress = Progress {
            level: Some(level),
            level_generation: view.generation,
            attempt: 1,
            // A power-off the BMC may have sent already counts: a Lease renewed since is life.
            lease_renew_time_at_power_off: old.lease_renew_time_at_power_off,
            ..carried
        };
        let mut message = format!(
            "{previous} could not prove Off ({}: {ended}); level {level}: switching off and reading outlets {} of BmcBinding {}",
            reason.as_str(),
            outlets.join(", "),
            view.binding
        );
        if !skipped.is_empty() {
            message = format!("{message} ({})", skipped.join("; "));
        }
        if basis == MappingBasis::OperatorStatement {
            let warning = format!(
                "level {level}'s mapping rests on an operator's statement (mappingProof: OperatorStatement): nothing confirmed that outlets {} feed node {}'s machine",
                outlets.join(", "),
                self.ctx.node.name
            );
            self.notify(true, OUTLET_MAPPING_UNPROVEN, warning);
        }
        self.enter(Phase::PoweringOffOutlets, Reason::PoweringOffOutlets, message);
        self.requeue = Some(StdDuration::ZERO);
    }

    fn level_number(&self) -> u32 {
        self.progress.level.unwrap_or(2)
    }

    /// A reading of the level's outlets in `PoweringOffOutlets`.
    pub(super) fn outlets_read(&mut self, reading: Result<LevelReading, BmcFailure>) {
        self.start_attempt_if_needed();
        self.progress.last_reading_at = Some(self.now());
        let reading = match reading {
            Ok(reading) => reading,
            Err(failure) if !failure.transient => {
                return self.fail(failure.reason, format!("{}; nothing released", failure.message));
            }
            Err(failure) => {
                self.memory.last_requested = Some(self.ctx.mono);
                self.memory.run = None;
                self.progress.off_run = None;
                self.progress.last_error = Some(failure.message);
                return self.paced_retry();
            }
        };
        self.memory.last_requested = Some(reading.sampled.requested);
        self.memory.outlets = describe(&reading.outcomes);
        // L4: persisted, so a process that takes over owes these meters a reading too.
        let metered = self.progress.metered_outlets.clone();
        self.progress.metered_outlets = rules::metered_now(&metered, &reading.outcomes);
        if self.begun_release_shows_life_at_level(&reading) {
            return;
        }
        // Readings through another binding generation or other credentials are another device's.
        if self.memory.through.is_some_and(|through| through != reading.through) {
            self.memory.run = None;
            self.progress.off_run = None;
        }
        self.memory.through = Some(reading.through);
        match rules::level_proves_off_since(&reading.outcomes, &metered) {
            Ok(()) => {
                let (run, gap) = extended(self.memory.run, reading.sampled, self.spec);
                if let Some(gap) = gap {
                    self.progress.last_error = Some(gap.advice(self.spec));
                }
                self.memory.run = Some(run);
                self.mirror_level(&reading);
                let baseline = self.admitted_lease_time();
                self.progress.lease_renew_time_at_power_off.get_or_insert(baseline);
                if spans_settle(&run, self.spec.settle.get()) {
                    // L7 answered for this level and device already: the level is proven again.
                    let level = self.level_number();
                    let known =
                        self.memory.bmc_after.clone().filter(|v| v.level == level && v.through == reading.through);
                    if let Some(verdict) = known {
                        return self.level_off_proven(run, &verdict.after);
                    }
                    // The plan asks the BMC next (L7).
                    self.requeue = Some(StdDuration::ZERO);
                    return;
                }
            }
            Err(not_off) => {
                self.memory.run = None;
                self.progress.off_run = None;
                let unread = matches!(not_off, LevelNotOff::Unread { .. });
                if !unread {
                    self.memory.bmc_after = None;
                    // An outlet not Off: the lapsed proof no longer stands (the power-off is the cause).
                    self.progress.proof_lapsed_in = None;
                }
                self.progress.last_error = Some(not_off.to_string());
                // An outlet that reads On (or pending, or drawing) is switched off: once per attempt,
                // and again after a failed command (P7). One that could not be read is read again.
                let wanted = self.progress.intent.is_none() || self.unsent(PowerAction::ForceOff);
                if !unread && wanted {
                    // L4: not before every outlet's meter is on record (an unread one is read again).
                    if let Err(unknown) = rules::meters_on_record(&reading.outcomes, &self.progress.metered_outlets) {
                        self.progress.last_error =
                            Some(format!("{unknown}; its meter goes on record before the level is switched off"));
                        return self.paced_retry();
                    }
                    if self.held() {
                        self.check_attempt_deadline();
                        return;
                    }
                    self.progress.lease_renew_time_at_power_off = Some(lease_time(self.ctx.node));
                    self.decide(PowerAction::ForceOff);
                    let message = format!(
                        "level {}: {not_off}; switching the level's outlets off ({})",
                        self.level_number(),
                        self.attempt_label()
                    );
                    self.enter(Phase::PoweringOffOutlets, Reason::PoweringOffOutlets, message);
                    self.requeue = Some(self.spec.poll_interval.get());
                    return;
                }
            }
        }
        self.paced_retry();
    }

    /// Mirrors the level's run into status, for people: one line per reading.
    fn mirror_level(&mut self, reading: &LevelReading) {
        let state = format!("Off (all {} outlets of level {})", reading.outcomes.len(), reading.level);
        let shown = self.shown(reading.sampled, state);
        self.mirror(shown);
    }

    /// R1 at a level: once the deletion of the node's pods may have begun, an outlet that no longer
    /// proves Off is the guard's at once (no hold delays the guard): the fence ends and its begun
    /// release is recorded with the level's outlets, which the guard then switches off (L9).
    fn begun_release_shows_life_at_level(&mut self, reading: &LevelReading) -> bool {
        if self.progress.release_begun.is_none() || self.memory.begun_untouched {
            return false;
        }
        let metered = &self.progress.metered_outlets;
        let Err(not_off @ LevelNotOff::NotOff { .. }) = rules::level_proves_off_since(&reading.outcomes, metered)
        else {
            return false;
        };
        let message = format!(
            "level {}: {not_off} after the deletion of the node's pods began; nothing released",
            self.level_number()
        );
        self.fail(Reason::PowerOffNotConfirmed, message);
        true
    }

    /// L7: what the node's BMC answered once every outlet had read Off for settle. Only silence (a
    /// fresh connection to its address heard nothing) or a reading of the verified system Off
    /// agrees; any other answer shows the BMC powered, and the fence ends at this level (no next
    /// level: that is no silence), the level's outlets disowned (the guard does not take them for
    /// proof that the machine is off).
    pub(super) fn bmc_after_outlets(&mut self, asked: AskedAfterOutlets) {
        let level = self.level_number();
        // A process that did not take the run itself reads the outlets again.
        let Some(run) = self.memory.run else { return self.paced_retry() };
        self.progress.last_reading_at = Some(self.now());
        let found = match asked {
            AskedAfterOutlets::Silent => None,
            AskedAfterOutlets::NotAsked(why) => {
                let message = format!(
                    "every outlet of level {level} reads Off and the node's BMC could not be asked whether it lost its power with them: {why}; nothing released"
                );
                return self.fail_here(Reason::BmcUnreachable, message);
            }
            AskedAfterOutlets::Answered(found) => Some(*found),
        };
        let answer = match found {
            None => Ok(BmcAfterOutletsOff::Silent),
            // The binding went between the question and the identity read: nothing was read.
            Some(Err(IdentityProblem::Binding { reason, message, .. }))
                if matches!(reason, Reason::NoBmcBinding | Reason::BindingInvalid | Reason::BindingConflict) =>
            {
                // It answered all the same: the outlets it may not hang on are no proof for the guard.
                if let Some(power_off) = self.evidence.power_off.as_mut() {
                    power_off.level = None;
                }
                let message = format!(
                    "every outlet of level {level} reads Off and the node's BMC could not be read: {message}; nothing released"
                );
                return self.fail_here(reason, message);
            }
            Some(Err(IdentityProblem::Binding { message, seen_on, .. })) => {
                if let Some(seen_on) = seen_on {
                    self.saw_power(&seen_on);
                }
                Err(message)
            }
            Some(Err(IdentityProblem::Bmc(failure))) => Err(failure.message),
            Some(Err(IdentityProblem::SeenThenFailed { failure, seen_on })) => {
                self.saw_power(&seen_on);
                Err(failure.message)
            }
            Some(Ok(found)) => {
                let node_uuid = self.evidence.node.as_ref().map(|n| n.system_uuid.clone()).unwrap_or_default();
                match identity::prove(&node_uuid, &found.system.uuid, &found.claims) {
                    Ok(_) => {
                        let power = found.system.power_state.to_string();
                        self.saw_power(&power);
                        Ok(BmcAfterOutletsOff::Reads(power))
                    }
                    Err(refusal) => Err(refusal.to_string()),
                }
            }
        };
        let agreed = match answer {
            Ok(after) => rules::bmc_agrees(&after).map(|()| after).map_err(|wrong| wrong.to_string()),
            Err(answered) => Err(format!(
                "every outlet of level {level} reads Off and the node's BMC still answers ({answered}): those outlets may not feed this machine; nothing released"
            )),
        };
        let after = match agreed {
            Ok(after) => after,
            Err(message) => {
                self.progress.last_answer_at = Some(self.now());
                if let Some(power_off) = self.evidence.power_off.as_mut() {
                    power_off.level = None;
                }
                return self.fail_here(Reason::OutletMappingWrong, message);
            }
        };
        if after != BmcAfterOutletsOff::Silent {
            self.progress.last_answer_at = Some(self.now());
        }
        if let Some(through) = self.memory.through {
            self.memory.bmc_after = Some(BmcVerdict { level, through, after: after.clone() });
        }
        self.level_off_proven(run, &after);
    }

    fn level_off_proven(&mut self, run: Run, after: &BmcAfterOutletsOff) {
        let level = self.level_number();
        // L5: the mapping is judged at the generation the readings came through.
        let read_at = self.memory.through.map(|t| t.generation);
        if self.ctx.levels.is_some_and(|v| v.generation.unwrap_or_default() != read_at.unwrap_or_default()) {
            self.memory.run = None;
            self.memory.bmc_after = None;
            self.progress.off_run = None;
            self.progress.last_error =
                Some(format!("the BmcBinding was edited since level {level}'s outlets were read; reading them again"));
            return self.paced_retry();
        }
        let view = self.ctx.levels.filter(|v| v.levels.len() + 1 >= level as usize);
        let basis = view.map(|v| {
            let index = (level - 2) as usize;
            rules::mapping_basis(&v.levels[index], v.confirmed.get(index).copied().flatten(), v.generation)
        });
        let mapping = match basis {
            Some(Ok(MappingBasis::OperatorStatement)) => "OperatorStatement",
            // L2: a mapping that lapsed is no silence: no next level.
            Some(Err(refusal)) => {
                return self.fail_here(
                    Reason::PowerOffNotConfirmed,
                    format!("level {level}'s mapping may no longer be relied on: {refusal}; nothing released"),
                );
            }
            None => {
                let message = format!("BmcBinding no longer has level {level}; nothing released");
                return self.fail_here(Reason::PowerOffNotConfirmed, message);
            }
        };
        let bmc_after = match after {
            BmcAfterOutletsOff::Silent => "no answer".to_owned(),
            BmcAfterOutletsOff::Reads(state) => state.clone(),
        };
        let outlets = std::mem::take(&mut self.memory.outlets);
        let message = format!(
            "power proven Off through level {level}: {} consecutive readings with every outlet ({}) Off spanning at least {}, and the node's BMC {}; releasing the node",
            run.count,
            outlets.iter().map(|o| o.outlet.as_str()).collect::<Vec<_>>().join(", "),
            self.spec.settle,
            match after {
                BmcAfterOutletsOff::Silent => "gave no answer".to_owned(),
                BmcAfterOutletsOff::Reads(state) => format!("reads {state}"),
            }
        );
        let now = self.now();
        let mirror = self.progress.off_run.take();
        let through = self.memory.through.map(|t| t.generation).unwrap_or_default();
        let proof = LevelProof {
            level,
            binding: view.map(|v| v.binding.to_owned()).unwrap_or_default(),
            binding_generation: through,
            mapping: mapping.to_owned(),
            outlets,
            bmc_after,
        };
        let evidence = self.power_off_evidence();
        evidence.proof = mirror;
        evidence.proven_at = Some(now);
        evidence.level = Some(proof);
        self.memory.run = None;
        self.memory.proof = Some(run);
        self.progress.last_error = None;
        self.notify(false, Event::PowerOffProven.as_str(), message.clone());
        self.enter(Phase::Releasing, Reason::Releasing, message);
        self.requeue = Some(StdDuration::ZERO);
    }

    /// A reading of the level in `Releasing`: the proof had gone stale (or was taken by another
    /// process). Every outlet Off, unbroken from the proof, keeps it fresh; Off after a gap proves
    /// again (asking the BMC again); an outlet on again starts a new attempt that switches it off.
    pub(super) fn outlets_releasing(&mut self, reading: Result<LevelReading, BmcFailure>) {
        self.start_attempt_if_needed();
        self.progress.last_reading_at = Some(self.now());
        // R1: a begun release keeps the level that proved it: the guard reads its outlets (L9).
        let forget_proof = |step: &mut Self| {
            let begun = step.progress.release_begun.is_some() && !step.memory.begun_untouched;
            if let Some(power_off) = step.evidence.power_off.as_mut() {
                power_off.proof = None;
                power_off.proven_at = None;
                if !begun {
                    power_off.level = None;
                }
            }
            step.memory.proof = None;
            step.memory.run = None;
            step.progress.off_run = None;
        };
        let reading = match reading {
            Ok(reading) => reading,
            Err(failure) if !failure.transient => {
                return self.fail(failure.reason, format!("{}; nothing released", failure.message));
            }
            Err(failure) => {
                self.progress.last_error = Some(failure.message);
                if !self.check_attempt_deadline() {
                    self.requeue = Some(self.spec.poll_interval.get());
                }
                return;
            }
        };
        self.memory.last_requested = Some(reading.sampled.requested);
        self.memory.outlets = describe(&reading.outcomes);
        // L4: persisted, so a process that takes over owes these meters a reading too.
        let metered = self.progress.metered_outlets.clone();
        self.progress.metered_outlets = rules::metered_now(&metered, &reading.outcomes);
        if self.begun_release_shows_life_at_level(&reading) {
            return;
        }
        let same_device = self.memory.through.is_none_or(|through| through == reading.through);
        match rules::level_proves_off_since(&reading.outcomes, &metered) {
            Ok(()) => match self.memory.proof {
                Some(proof) if same_device && dense(&proof.last, &reading.sampled, self.spec).is_ok() => {
                    self.memory.proof = Some(Run { last: reading.sampled, count: proof.count + 1, ..proof });
                    if !self.check_attempt_deadline() {
                        self.requeue = Some(StdDuration::ZERO);
                    }
                }
                _ => {
                    if self.release_out_of_time() {
                        return;
                    }
                    forget_proof(self);
                    self.memory.through = Some(reading.through);
                    self.memory.run = Some(extended(None, reading.sampled, self.spec).0);
                    self.mirror_level(&reading);
                    let message = format!(
                        "no fresh proof of level {} by this coroner process; proving it again",
                        self.level_number()
                    );
                    self.enter(Phase::PoweringOffOutlets, Reason::PoweringOffOutlets, message);
                    self.requeue = Some(self.spec.poll_interval.get());
                }
            },
            Err(LevelNotOff::Unread { outlet, error }) => {
                self.progress.last_error = Some(format!("outlet {outlet} could not be read: {error}"));
                if !self.check_attempt_deadline() {
                    self.requeue = Some(self.spec.poll_interval.get());
                }
            }
            Err(not_off) => {
                forget_proof(self);
                self.memory.bmc_after = None;
                let last = format!("level {}: {not_off} after the proof", self.level_number());
                self.progress.last_error = Some(last.clone());
                if self.progress.attempt >= self.spec.retry.count {
                    return self
                        .fail(Reason::PowerOffNotConfirmed, format!("{last} in the last attempt; nothing released"));
                }
                self.progress.attempt += 1;
                self.progress.attempt_started_at = Some(self.now());
                self.memory.attempt_started = Some(self.ctx.mono);
                self.progress.intent = None;
                self.notify(
                    true,
                    Reason::AttemptFailed.as_str(),
                    format!("{last}; a new attempt switches them off again"),
                );
                self.enter(Phase::PoweringOffOutlets, Reason::PoweringOffOutlets, last);
                self.requeue = Some(StdDuration::ZERO);
            }
        }
    }
}

/// The Warning (and safety-override kind) of a fence through a level whose mapping only an operator
/// stated (docs/safety.md L5).
pub const OUTLET_MAPPING_UNPROVEN: &str = crate::words::event::Event::OutletMappingUnproven.as_str();
