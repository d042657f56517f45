//! R1: a machine back while its release stood — unapproved, or on the bootID it had before the
//! fence — judged in the loop, in the finalizer and past the remediation.

use super::*;

/// R1: the node reports `Ready=True` while coroner's release of it still stood — no `On` of
/// coroner's decided or sent, its taint not taken off for one — and nobody approved this release: a
/// machine brought back unapproved, reported once (`ReturnedWithoutApproval`). `None`: nothing to
/// report; else the status that records it.
pub fn returned_without_approval(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
    approval: Approval<'_>,
    now: Timestamp,
) -> Option<CoronerRemediationStatus> {
    let release = status.evidence.as_ref()?.release.as_ref()?;
    let returned = node.ready.as_deref() == Some(conditions::TRUE)
        && release.taint_removed_at.is_none()
        && !power_on_decided(status)
        && !matches!(approval, Approval::ForThisRelease(_));
    if !returned || status.guard.as_ref().is_some_and(|g| g.returned_without_approval.is_some()) {
        return None;
    }
    let mut new = status.clone();
    new.guard.get_or_insert_with(GuardStatus::default).returned_without_approval = Some(MicroTime(now));
    Some(new)
}

/// What `ReturnedWithoutApproval` says (a Warning on the remediation and the Node).
pub fn returned_notice(node: &str, release_id: Option<&str>) -> Notice {
    let message = format!(
        "node {node} reports Ready=True while release {} stood, and nobody approved it (coroner approve NODE): its machine was brought back while its workloads may run elsewhere; check them",
        release_id.unwrap_or_default()
    );
    Notice { warning: true, reason: RETURNED_WITHOUT_APPROVAL.into(), message }
}

/// The `Reboot`'s `On` is decided (its intent persisted, right before the request; a refused one is
/// withdrawn) or was sent.
fn power_on_decided(status: &CoronerRemediationStatus) -> bool {
    let intent = status.progress.as_ref().and_then(|p| p.intent.as_ref());
    intent.is_some_and(|i| i.action == PowerAction::On)
        || status.evidence.as_ref().and_then(|e| e.power_on.as_ref()).is_some_and(|p| p.sent_at.is_some())
}

/// bootID continuity: a fenced node that reports back (its kubelet posts `Ready` again) with the
/// bootID it had when the fence was admitted never went down — the fence did not take effect. The
/// strongest split-brain signal there is. A release counts from the moment it may have taken effect:
/// recorded (an attested one once the Node shows its update), begun (`ResourceDeletion`'s first pod
/// may be gone), or its exact taint on the Node (written, its status write lost or not landed yet).
pub fn fence_did_not_take_effect(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> Option<String> {
    let before = boot_before_release(status, node)?;
    (reports(node) && node.boot_id == before).then(|| {
        format!(
            "node {} reports Ready={} with bootID {before}, the one it had before the fence: it never went down, yet its workloads were released",
            node.name,
            node.ready.as_deref().unwrap_or_default()
        )
    })
}

/// The bootID the node had when its fence was admitted, once a release may have taken effect
/// ([`fence_did_not_take_effect`]).
fn boot_before_release<'a>(status: &'a CoronerRemediationStatus, node: &NodeSnapshot) -> Option<&'a str> {
    let evidence = status.evidence.as_ref()?;
    let begun = status.progress.as_ref().is_some_and(|p| p.release_begun.is_some());
    if !release_made(status, node) && !begun && node.released_at.is_none() {
        return None;
    }
    Some(evidence.node.as_ref()?.boot_id.as_str()).filter(|b| !b.is_empty())
}

/// Whether the node's kubelet reports (`Ready` True or False), so its bootID is its machine's now.
fn reports(node: &NodeSnapshot) -> bool {
    matches!(node.ready.as_deref(), Some(conditions::TRUE | conditions::FALSE))
}

/// Whether the remediation records that its fence did not take effect (the reconcile, or the
/// finalizer, that saw it first published the Event and counted it).
fn did_not_take_effect_recorded(status: &CoronerRemediationStatus) -> bool {
    conditions::find(&status.conditions, FENCE_TOOK_EFFECT)
        .is_some_and(|c| c.status == conditions::FALSE && c.reason == DID_NOT_TAKE_EFFECT)
}

/// R1 in the finalizer, on the node as read: what to report now, and what to leave on the Node to
/// watch past the remediation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtDeletion {
    pub report: Option<String>,
    pub watch: Option<UnconfirmedRelease>,
}

/// The finalizer's R1 decision. Nothing once the remediation records the report (or this process
/// made it). Otherwise the report is due when the node is back on its pre-fence bootID after a
/// release that may have taken effect ([`fence_did_not_take_effect`]), or after the one recorded on
/// the Node by an earlier try of this finalizer (`on_node`: its taints, the other evidence of that
/// release, went with that try). With no report due, the release to watch: the one the status and
/// Node show ([`watched_after_deletion`]), or the earlier try's while the node has neither reported
/// nor booted since.
pub fn at_deletion(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
    on_node: Option<&UnconfirmedRelease>,
    remediation: &str,
    remediation_uid: &str,
    reported_here: bool,
) -> AtDeletion {
    if reported_here || did_not_take_effect_recorded(status) {
        return AtDeletion { report: None, watch: None };
    }
    let own = on_node.filter(|r| r.uid == remediation_uid);
    let judged = own.map(|r| (r, after_deletion(r, node, &[])));
    let report = fence_did_not_take_effect(status, node).or_else(|| match &judged {
        Some((_, AfterDeletion::NeverWentDown(message))) => Some(message.clone()),
        _ => None,
    });
    if report.is_some() {
        return AtDeletion { report, watch: None };
    }
    let kept = judged.filter(|(r, j)| *j == AfterDeletion::Waits && r.boot_id == node.boot_id).map(|(r, _)| r.clone());
    AtDeletion { report: None, watch: watched_after_deletion(status, node, remediation, remediation_uid).or(kept) }
}

/// On a Node: a release whose remediation was deleted before the node reported back
/// ([`UnconfirmedRelease`]).
pub const UNCONFIRMED_ANNOTATION: &str = "coroner.dev/release-unconfirmed";

/// R1 past the remediation: a release that may have taken effect, whose remediation was deleted (by
/// hand, or by NHC before the node returned) while the node had not reported since on the bootID it
/// had before the fence. The finalizer leaves it on the Node, so that the sweep of Node events can
/// still tell whether that machine ever went down ([`after_deletion`]).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UnconfirmedRelease {
    pub uid: String,
    pub remediation: String,
    #[serde(rename = "bootID")]
    pub boot_id: String,
}

/// The record a finalizer left on the node, if it holds one.
pub fn unconfirmed_release(node: &Node) -> Option<UnconfirmedRelease> {
    serde_json::from_str(node.annotations().get(UNCONFIRMED_ANNOTATION)?).ok()
}

/// What a finalizer leaves on the Node: its release, when that release may have taken effect and the
/// node, as read, has neither reported back since (then the finalizer reports it itself) nor changed
/// its bootID (then its machine went down).
pub fn watched_after_deletion(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
    remediation: &str,
    remediation_uid: &str,
) -> Option<UnconfirmedRelease> {
    let before = boot_before_release(status, node)?;
    (!reports(node) && node.boot_id == before).then(|| UnconfirmedRelease {
        uid: remediation_uid.to_owned(),
        remediation: remediation.to_owned(),
        boot_id: before.to_owned(),
    })
}

/// The finalizer's Node update for R1 past the remediation: `node` with `watch` ([`at_deletion`])
/// recorded while the node, as read for the write, still shows the bootID from before the fence;
/// otherwise without a record this remediation left on an earlier try (since then the finalizer
/// reported it, or the machine booted). `None`: nothing to change.
pub fn with_watch(node: &Node, watch: Option<&UnconfirmedRelease>, remediation_uid: &str) -> Option<Node> {
    let current = unconfirmed_release(node);
    let booted = node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.as_str());
    let mut updated = node.clone();
    match watch.filter(|w| Some(w.boot_id.as_str()) == booted) {
        Some(watch) if current.as_ref() != Some(watch) => {
            let value = serde_json::to_string(watch).ok()?;
            updated.annotations_mut().insert(UNCONFIRMED_ANNOTATION.to_owned(), value);
        }
        None if current.is_some_and(|c| c.uid == remediation_uid) => {
            updated.annotations_mut().remove(UNCONFIRMED_ANNOTATION);
        }
        _ => return None,
    }
    Some(updated)
}

/// What the sweep makes of an [`UnconfirmedRelease`] on the node as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterDeletion {
    /// The node has not reported on that bootID nor booted since, or the remediation is still listed
    /// (its finalizer judges, and reports once): the record stays.
    Waits,
    /// It reports with the bootID it had before the fence: `FenceDidNotTakeEffect`, then the record goes.
    NeverWentDown(String),
    /// The Node shows another bootID: the machine went down since; the record goes.
    BootedSince,
}

/// R1 past the remediation, in the sweep: judges a record whose remediation is not among `live`
/// (the UIDs listed after the Node was read; a UID is never reused) on the node as read.
pub fn after_deletion(record: &UnconfirmedRelease, node: &NodeSnapshot, live: &[String]) -> AfterDeletion {
    if node.boot_id.is_empty() || live.contains(&record.uid) {
        AfterDeletion::Waits
    } else if node.boot_id != record.boot_id {
        AfterDeletion::BootedSince
    } else if reports(node) {
        AfterDeletion::NeverWentDown(format!(
            "node {} reports Ready={} with bootID {}, the one it had before the fence of remediation {} (UID {}), deleted before the node reported back: it never went down, yet its workloads were released",
            node.name,
            node.ready.as_deref().unwrap_or_default(),
            record.boot_id,
            record.remediation,
            record.uid
        ))
    } else {
        AfterDeletion::Waits
    }
}

/// The step that records [`fence_did_not_take_effect`] once, as a critical condition and Event.
pub fn record_did_not_take_effect(
    status: &CoronerRemediationStatus,
    memory: &Memory,
    message: &str,
    now: Timestamp,
) -> Option<Decision> {
    let mut new = status.clone();
    if !conditions::set(&mut new.conditions, FENCE_TOOK_EFFECT, conditions::FALSE, DID_NOT_TAKE_EFFECT, message, now) {
        return None;
    }
    new.last_update_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    let notice = Notice { warning: true, reason: DID_NOT_TAKE_EFFECT.into(), message: message.to_owned() };
    Some(Decision { status: new, memory: memory.clone(), reset: None, requeue: None, notices: vec![notice] })
}
