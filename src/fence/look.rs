//! A4: an attestation about to release first has the failed fence look through its device once
//! more ([`crate::attestation::look_asked`] writes the ask on the remediation). The fence takes the
//! look as it takes its identity step (its reader named first, what it reads recorded as the
//! fence's), and when the node's machine answers it proves it off again through it: one more
//! attempt, from the identity step, through the BMC, under its admission's evidence; only that
//! proof then releases (docs/safety.md A4).

use super::*;
use crate::api::{AttestationLook, LookFound};

/// The look an attestation asked for and the fence has not taken yet.
pub fn look_pending(status: &CoronerRemediationStatus) -> Option<&AttestationLook> {
    let look = status.evidence.as_ref()?.attestation_look.as_ref()?;
    (phase_of(status) == Phase::Failed && look.looked_at.is_none()).then_some(look)
}

/// The fence is proving the machine off again on an attestation's look (or did, and ended).
pub fn proving_again(status: &CoronerRemediationStatus) -> bool {
    status
        .evidence
        .as_ref()
        .and_then(|e| e.attestation_look.as_ref())
        .is_some_and(|l| l.found == Some(LookFound::ProvingAgain))
}

/// NodeHealthCheck's `nhc-timed-out` (value `timed_out`) stops no look an attestation asked for,
/// and no proof taken again on one, until its release, while the value is the one recorded when the
/// look was asked: NHC gave up on the fence before it was asked to look, not on the look's proof.
pub fn runs_past_nhc_timeout(status: &CoronerRemediationStatus, timed_out: Option<&str>) -> bool {
    if look_pending(status).is_some() {
        return true;
    }
    let look = status.evidence.as_ref().and_then(|e| e.attestation_look.as_ref());
    // The proof, not what follows its release (a Reboot's On): NHC's timeout stops that as ever.
    let released = status.evidence.as_ref().is_some_and(|e| e.release.is_some())
        || status.progress.as_ref().is_some_and(|p| p.release_begun.is_some());
    !phase_of(status).is_terminal()
        && !released
        && look.is_some_and(|l| l.found == Some(LookFound::ProvingAgain) && l.nhc_timed_out.as_deref() == timed_out)
}

impl Step<'_> {
    /// This step works on a proof taken again on an attestation's look.
    pub(super) fn proving_again(&self) -> bool {
        self.evidence.attestation_look.as_ref().is_some_and(|l| l.found == Some(LookFound::ProvingAgain))
    }

    /// The look, taken: what the device answered. `timed_out`: NHC's `nhc-timed-out` now.
    pub(super) fn looked(&mut self, found: Result<IdentityFound, IdentityProblem>, timed_out: Option<String>) {
        let Some(look) = look_pending(self.old).cloned() else { return };
        self.progress.last_reading_at = Some(self.now());
        // A fence refused at admission recorded no node: the Node as it is now names the machine,
        // as it named it to the look's discovery.
        let node_uuid =
            self.evidence.node.as_ref().map_or_else(|| self.ctx.node.system_uuid.clone(), |n| n.system_uuid.clone());
        let (kind, message) = match found {
            Err(IdentityProblem::Bmc(failure)) => (LookFound::NoAnswer, failure.message),
            // What answered before the failure saw the machine alive: life, whatever failed after.
            Err(IdentityProblem::SeenThenFailed { failure, seen_on }) => {
                self.progress.last_answer_at = Some(self.now());
                self.saw_power(&seen_on);
                (
                    LookFound::NoAnswer,
                    format!("{} (a system naming the node answered {seen_on} first)", failure.message),
                )
            }
            Err(IdentityProblem::Binding { reason, message, seen_on: Some(seen_on) }) => {
                self.progress.last_answer_at = Some(self.now());
                self.saw_power(&seen_on);
                (LookFound::NotTheNode, format!("{}: {message}", reason.as_str()))
            }
            Err(IdentityProblem::Binding { reason, message, seen_on: None }) => {
                (LookFound::NoAnswer, format!("{}: {message}", reason.as_str()))
            }
            Ok(found) => {
                self.progress.last_answer_at = Some(self.now());
                let names_node = identity::names_machine(&node_uuid, &found.system.uuid);
                if names_node {
                    self.saw_power(&found.system.power_state.to_string());
                }
                let proven = identity::prove(&node_uuid, &found.system.uuid, &found.claims)
                    .and_then(|_| identity::other_spellings_clear(&found.system.aliases, &found.claims));
                let answered = format!(
                    "BMC system {} at {} (UUID {}) answered, its power reading {}",
                    found.system.id, found.endpoint, found.system.uuid, found.system.power_state
                );
                match proven {
                    Err(refusal) => {
                        (LookFound::NotTheNode, format!("{answered}; not provably the node's machine: {refusal}"))
                    }
                    Ok(()) => match self.may_prove_again(&look, timed_out.as_deref()) {
                        Ok(()) => {
                            let message = format!("{answered}: the fence proves the machine off again through it");
                            self.record_look(&look, LookFound::ProvingAgain, message.clone());
                            return self.prove_again(&look, message);
                        }
                        Err(why) => (LookFound::NodeMachine, format!("{answered}; not proven again: {why}")),
                    },
                }
            }
        };
        self.record_look(&look, kind, message);
    }

    fn record_look(&mut self, look: &AttestationLook, found: LookFound, message: String) {
        self.evidence.attestation_look = Some(AttestationLook {
            looked_at: Some(self.now()),
            found: Some(found),
            message: Some(message),
            ..look.clone()
        });
    }

    /// The look is not taken ([`look_may_be_taken`]): recorded so, with nothing found; the
    /// attestation that asked never counts it.
    pub(super) fn look_not_taken(&mut self, why: String) {
        let Some(look) = look_pending(self.old).cloned() else { return };
        self.evidence.attestation_look =
            Some(AttestationLook { looked_at: Some(self.now()), found: None, message: Some(why), ..look });
    }

    /// Why the node's machine answering the look does not make the fence prove it off again.
    fn may_prove_again(&self, look: &AttestationLook, timed_out: Option<&str>) -> Result<(), String> {
        if !look.may_prove_again {
            return Err(format!(
                "attestation {} acknowledged evidence, which a proof would refuse on",
                look.attestation
            ));
        }
        if look.nhc_timed_out.as_deref() != timed_out {
            return Err("NodeHealthCheck timed the remediation out after the look was asked for".into());
        }
        if self.progress.release_begun.is_some() || self.evidence.release.is_some() {
            return Err("a release is recorded on the remediation".into());
        }
        if self.evidence.node.is_none() {
            return Err("the fence was refused at admission: it has no admission evidence to prove under".into());
        }
        Ok(())
    }

    /// The fence proves again: one more attempt after every recorded one, through the BMC that
    /// answered (no level: its outlets are not what answered), from its identity step, as a fence
    /// starts (its fencing taint is back on the node before any power action).
    fn prove_again(&mut self, look: &AttestationLook, message: String) {
        // W1: a ForceOff persisted and never answered may have gone out: recorded so (as a level does).
        let level = self.progress.level;
        let (carried, old) = self.start_afresh(level);
        let recorded = self.evidence.power_off.iter().flat_map(|p| &p.resets).map(|r| r.attempt).max().unwrap_or(0);
        self.progress = Progress { attempt: old.attempt.max(recorded) + 1, ..carried };
        // A level's proof is not this one's (the guard watches the outlets of a level's).
        if let Some(power_off) = self.evidence.power_off.as_mut() {
            power_off.level = None;
        }
        self.evidence.identity = None;
        let message = format!("on attestation {}'s look: {message}", look.attestation);
        // Announced once, as the look's answer (enter adds no second Event with the same message).
        self.notify(false, LOOK_ANSWERED, message.clone());
        self.enter(Phase::VerifyingIdentity, Reason::VerifyingIdentity, message);
        self.requeue = Some(StdDuration::ZERO);
    }
}

/// Whether the failed fence takes the look asked for now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookGate {
    Take,
    /// Not now: looked at again later.
    Wait(String),
    /// Never: the ask is recorded as not taken.
    Withdraw(String),
}

/// A4: a look is taken only for the attestation that asked while it is still pending (read
/// afresh), while no other fence of the node runs or released it (the look's proof would be a
/// second fence of the node), not by a leader on the node's own machine, and only when the storm
/// limits' queue, power slots and BMC origins would let a fence power a machine off now (`storm`:
/// [`crate::gates::storm`] without the admission window; a proof taken again may power it off).
pub fn look_may_be_taken(
    me: &crate::api::CoronerRemediation,
    node: &str,
    attestation: Option<&crate::api::CoronerAttestation>,
    remediations: &[crate::api::CoronerRemediation],
    own_node: Option<&str>,
    storm: crate::gates::Gate,
) -> LookGate {
    use kube::ResourceExt;
    let Some(look) = me.status.as_ref().and_then(look_pending) else {
        return LookGate::Withdraw("no look is asked for".into());
    };
    let asking = attestation.filter(|a| {
        a.uid().as_deref() == Some(look.attestation_uid.as_str())
            && a.metadata.deletion_timestamp.is_none()
            && a.status.as_ref().and_then(|s| s.phase).unwrap_or_default() == crate::api::AttestationPhase::Pending
    });
    if asking.is_none() {
        return LookGate::Withdraw(format!("attestation {} is gone or decided", look.attestation));
    }
    let of_node = |r: &&crate::api::CoronerRemediation| {
        r.uid() != me.uid()
            && r.metadata.deletion_timestamp.is_none()
            && crate::contract::node_name(&r.metadata) == Some(node)
    };
    let released = |r: &crate::api::CoronerRemediation| r.status.as_ref().is_some_and(is_released);
    if let Some(other) = remediations.iter().filter(of_node).find(|r| !Phase::of(r).is_terminal() || released(r)) {
        return LookGate::Withdraw(format!("remediation {} of the node runs or released it", other.name_any()));
    }
    if own_node == Some(node) {
        return LookGate::Wait(format!("coroner's leader runs on node {node}: another replica looks"));
    }
    match storm {
        crate::gates::Gate::Admit => LookGate::Take,
        crate::gates::Gate::Wait(_, why) | crate::gates::Gate::Refuse(_, why) => LookGate::Wait(why),
    }
}

/// A look this process let through may reopen its fence before a store shows it: until a
/// remediation shows that look (asked for at `reproving`'s time) taken or a later ask, or a phase
/// other than `Failed`, the storm limits and one fence per node count it as a fence holding a power
/// slot (a store behind the ask, showing an older look or none, counts it too).
pub fn as_proving_again(
    mut remediation: crate::api::CoronerRemediation,
    reproving: &std::collections::BTreeMap<String, Timestamp>,
) -> crate::api::CoronerRemediation {
    use kube::ResourceExt;
    let Some(asked) = remediation.uid().and_then(|uid| reproving.get(&uid).copied()) else { return remediation };
    let status = remediation.status.clone().unwrap_or_default();
    let look = status.evidence.as_ref().and_then(|e| e.attestation_look.as_ref());
    // Taken, or past: a later ask means this one was answered (or withdrawn) before it.
    let taken = look.is_some_and(|l| l.requested_at.0 > asked || (l.requested_at.0 == asked && l.looked_at.is_some()));
    if phase_of(&status) == Phase::Failed && !taken {
        remediation.status.get_or_insert_with(Default::default).phase = Some(Phase::VerifyingIdentity);
    }
    remediation
}

/// The Event reason when an attestation's look found the node's machine and the fence proves again.
pub const LOOK_ANSWERED: &str = crate::words::event::Event::ProvingAgainOnAnswer.as_str();
