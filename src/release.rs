//! The release record: whether a fence's release stands, judged from its record in status (R1), its
//! id, and what an approval of it says (R3).

use jiff::Timestamp;

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

/// On a Node: a person approved that the released machine runs again (the value says who and why).
/// The guard then reports a power-on but does not switch the machine off.
pub const APPROVAL_ANNOTATION: &str = "coroner.dev/power-on-approved";

/// R3: a release's id — the releasing remediation's UID and its `releasedAt`, to the second — which
/// an approval must name.
pub fn release_id(remediation_uid: &str, status: &CoronerRemediationStatus) -> Option<String> {
    let release = status.evidence.as_ref()?.release.as_ref()?;
    Some(release_id_at(remediation_uid, release.released_at.0))
}

/// R3: `new` with its release's id recorded, when the write makes the release (`stored` has none) or
/// moves its time (an attested release confirmed at its Node update). An approval must name that id:
/// one that names none is never honoured, whenever it was written.
pub fn with_release_id(
    mut new: CoronerRemediationStatus,
    stored: &CoronerRemediationStatus,
    remediation_uid: &str,
) -> CoronerRemediationStatus {
    let before = stored.evidence.as_ref().and_then(|e| e.release.as_ref()).map(|r| &r.released_at);
    if let Some(release) = new.evidence.as_mut().and_then(|e| e.release.as_mut())
        && (release.release_id.is_some() || before != Some(&release.released_at))
    {
        release.release_id = Some(release_id_at(remediation_uid, release.released_at.0));
    }
    new
}

/// R3: the id of the release `remediation_uid` made at `released_at`.
pub fn release_id_at(remediation_uid: &str, released_at: Timestamp) -> String {
    format!("{remediation_uid}@{}", released_at.as_second())
}

/// What the Node's `coroner.dev/power-on-approved` says about this release (R3). Its value is
/// `<release-id> <who>: <why>`; one that names another release, or none, counts for nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval<'a> {
    None,
    /// Who approved, and why.
    ForThisRelease(&'a str),
    /// The whole value, reported once.
    NotForThisRelease(&'a str),
}

/// Judges the approval annotation's value against this release's id.
pub fn approval<'a>(release_id: Option<&str>, value: Option<&'a str>) -> Approval<'a> {
    let Some(value) = value else { return Approval::None };
    match (release_id, value.split_once(' ')) {
        // Who and why are part of the approval: a bare id approves nothing.
        (Some(id), Some((named, rest))) if named == id && rest.contains(':') => Approval::ForThisRelease(rest.trim()),
        _ => Approval::NotForThisRelease(value),
    }
}
