//! R4: the release's record on the Node — what a divergence or a deleted Node says.

use super::*;

/// R4: how a standing release's record and the Node disagree — the Node replaced under the same
/// name, the out-of-service taint coroner wrote no longer on it as written (removed or rewritten by
/// someone else), or a release resting on someone else's out-of-service taint. `None`: they agree.
pub fn record_diverged(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> Option<String> {
    let release = status.evidence.as_ref()?.release.as_ref()?;
    if replaced(status, node) {
        let admitted = status.evidence.as_ref()?.node.as_ref()?.uid.as_str();
        return Some(format!("Node {} was replaced (UID {admitted} admitted, {} now)", node.name, node.uid));
    }
    if release.strategy != crate::api::RemediationStrategy::OutOfServiceTaint || release.taint_removed_at.is_some() {
        return None;
    }
    if !release.taint_owned {
        return Some(format!(
            "the release rests on an out-of-service taint coroner did not add ({})",
            node.out_of_service.as_deref().unwrap_or("gone since")
        ));
    }
    node.released_at.is_none().then(|| match &node.out_of_service {
        Some(now) => format!("the out-of-service taint coroner added was rewritten by someone else (now {now})"),
        None => "the out-of-service taint coroner added was removed by someone else".to_owned(),
    })
}

/// R4: the record of a divergence to write and report, once per cause: `None` when nothing changed.
/// While the release stands, the guard goes on against the machine of the admitted identity.
pub fn diverged_record(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
) -> Option<(CoronerRemediationStatus, Option<Notice>)> {
    let now = record_diverged(status, node);
    let before = status.guard.as_ref().and_then(|g| g.record_diverged.clone());
    if now == before {
        return None;
    }
    let mut new = status.clone();
    new.guard.get_or_insert_with(GuardStatus::default).record_diverged.clone_from(&now);
    let uuid = status.evidence.as_ref().and_then(|e| e.node.as_ref()).map_or("", |n| n.system_uuid.as_str());
    let notice = now.map(|cause| Notice {
        warning: true,
        reason: RECORD_DIVERGED.into(),
        message: format!(
            "{cause}: the release still stands, and the guard goes on against the machine of the admitted identity (systemUUID {uuid})"
        ),
    });
    Some((new, notice))
}

/// R4: a Node deleted while a release of it stood (the documented decommission): NHC deletes the
/// orphaned remediation and the guard ends with it. The warning the finalizer publishes on the
/// binding, naming the machine's identity; `None` when no release stood.
pub fn unguarded_by_node_deletion(status: &CoronerRemediationStatus, node: &str) -> Option<(String, Notice)> {
    let evidence = status.evidence.as_ref()?;
    let release = evidence.release.as_ref()?;
    if release.taint_removed_at.is_some() || power_on_answered(status) {
        return None;
    }
    let binding = evidence
        .identity
        .as_ref()
        .map(|i| i.binding.clone())
        .or_else(|| evidence.node.as_ref()?.binding.as_ref().map(|b| b.name.clone()))?;
    let machine = match &evidence.identity {
        Some(identity) => {
            format!("system {} (UUID {}) at {}", identity.system_path, identity.bmc_uuid, identity.endpoint)
        }
        None => format!("systemUUID {}", evidence.node.as_ref().map_or("", |n| n.system_uuid.as_str())),
    };
    let message = format!(
        "Node {node} was deleted while coroner's release of it stood: nothing guards its machine, {machine}, any more. Keep it switched off, or wipe it before it runs again: its workloads may run elsewhere"
    );
    Some((binding, Notice { warning: true, reason: UNGUARDED_NODE_DELETED.into(), message }))
}
