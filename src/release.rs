//! R1: whether a fence's release stands, judged from its record in status.

use crate::{
    api::{AttestedReleaseState, CoronerRemediationStatus, PowerAction, conditions},
    node::{NodeSnapshot, replaced},
};

/// R1: whether this fence's release stands, judged from its record in status — never from a taint
/// or an annotation on the Node, which anything may rewrite or remove. It stands from the release
/// until coroner itself ends it to power the machine on (its `On` answered, after its own
/// out-of-service taint is off the Node), or the node reports `Ready=True`. (The remediation's
/// deletion ends it too: the finalizer does not guard.) An attested release is one once its Node
/// update took effect: while its record still says `Releasing` (written before that update, which
/// may never come: the process died, the attestation was refused), it stands only while the Node
/// shows that update: its out-of-service taint, or its owner record of that taint (someone removed
/// the taint in the gap before the record was confirmed: the release was made all the same).
pub fn release_stands(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> bool {
    let Some(release) = status.evidence.as_ref().and_then(|e| e.release.as_ref()) else { return false };
    if !release_made(status, node) {
        return false;
    }
    // A Node replaced under the same name reporting Ready is another machine's kubelet (R4).
    if node.ready.as_deref() == Some(conditions::TRUE) && !replaced(status, node) {
        return false;
    }
    match release.taint_removed_at {
        // Decided, but the release ends only once the taint is off the Node (a write refused keeps it);
        // a Node replaced under the same name never had coroner take it off (R4).
        Some(_) => node.released_at.is_some() || replaced(status, node) || !power_on_answered(status),
        None => !power_on_answered(status),
    }
}

/// Whether the release status records was made: any recorded release, except an attested one still
/// `Releasing` whose Node update the Node does not show ([`release_stands`]).
pub fn release_made(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> bool {
    let Some(release) = status.evidence.as_ref().and_then(|e| e.release.as_ref()) else { return false };
    let unconfirmed = release.attestation.as_ref().is_some_and(|a| a.state == AttestedReleaseState::Releasing);
    !(unconfirmed && node.released_at.is_none() && !node.release_recorded)
}

/// The `Reboot`'s `On` was sent and its answer (or its failure) recorded: an `On` decided and not
/// answered may never have reached the BMC.
pub fn power_on_answered(status: &CoronerRemediationStatus) -> bool {
    let intent = status.progress.as_ref().and_then(|p| p.intent.as_ref());
    intent.is_some_and(|i| i.action == PowerAction::On && i.result.is_some())
        || status.evidence.as_ref().and_then(|e| e.power_on.as_ref()).is_some_and(|p| p.sent_at.is_some())
}
