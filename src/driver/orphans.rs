//! R4: coroner's taints left on a Node by a remediation that no longer exists — a deposed leader's
//! write that landed after the finalizer ran. Found on Node events ([`crate::taints::orphaned`]
//! decides); removed under the Node's resourceVersion, or reported once while they must stay. And R1
//! past the remediation: a release whose remediation went before its node reported back
//! ([`crate::guard::UnconfirmedRelease`]), judged when the node reports.

use super::*;
use crate::taints::{Orphan, OrphanHeld};

/// The Event reason when coroner removed a taint whose remediation is gone.
pub const REMOVED: &str = "StaleTaintRemoved";
/// The Event reason while an out-of-service taint whose remediation is gone must stay.
pub const HELD: &str = "StaleReleaseHeld";

/// Sweeps the Node `name`: removes the records (and their exact taints) [`taints::orphaned`] lets
/// go, and reports once per owner and cause what it holds.
pub async fn sweep<W: World>(world: &W, local: &Local, name: &str) -> Result<(), Error> {
    let Some(node) = world.node(name).await? else { return Ok(()) };
    let unconfirmed = crate::guard::unconfirmed_release(&node);
    if (taints::record_owners(&node).is_empty() && unconfirmed.is_none()) || !world.leading() {
        return Ok(());
    }
    // Listed after the Node was read: a record's remediation missing here is gone for good.
    let listed = world.remediations(Listing::Fresh).await?;
    let live: Vec<String> = listed.iter().filter_map(ResourceExt::uid).collect();
    if let Some(record) = unconfirmed {
        // Only a finalizer writes it: its remediation is being deleted, or gone.
        let deleting = |r: &&CoronerRemediation| r.metadata.deletion_timestamp.is_some();
        if !listed.iter().any(|r| r.uid().as_deref() == Some(record.uid.as_str()) && !deleting(&r)) {
            watch_unconfirmed(world, name, &node, &record).await?;
        }
    }
    for orphan in taints::orphaned(&node, &live) {
        let Orphan { taint, owner, held } = &orphan;
        match held {
            None => {
                world.ensure_leader(world.settings().request_timeout).await?;
                // Judged again on the Node as read for each write.
                let removed = release::update_node(world, name, |node| {
                    taints::orphaned(node, &live)
                        .contains(&orphan)
                        .then(|| taints::without_owned(node, &[*taint], owner))
                        .flatten()
                })
                .await?;
                local.orphans_held(owner, *taint, None);
                if let Some(node) = removed {
                    let message = format!(
                        "removed {} ({}) that remediation UID {owner} added: that remediation no longer exists{}",
                        taint.key(),
                        taint.effect(),
                        match taint {
                            CoronerTaint::OutOfService => ", and the node is Ready on a new boot",
                            CoronerTaint::Fencing => "",
                        }
                    );
                    info!(node = name, "{message}");
                    let notice = fence::Notice { warning: false, reason: REMOVED.into(), message };
                    world.publish(&node.object_ref(&()), &notice, "Cleanup").await;
                }
            }
            Some(cause) => {
                if local.orphans_held(owner, *taint, Some(*cause)) {
                    let message = held_message(owner, *cause);
                    warn!(node = name, "{message}");
                    let notice = fence::Notice { warning: true, reason: HELD.into(), message };
                    world.publish(&node.object_ref(&()), &notice, "Cleanup").await;
                }
            }
        }
    }
    Ok(())
}

/// Whether a Node event should reach the sweep: a taint record whose remediation `cached` does not
/// hold, or a release left to watch past its remediation.
pub fn wants_sweep(node: &Node, cached: impl Fn(&str) -> bool) -> bool {
    taints::record_owners(node).iter().any(|owner| !cached(owner)) || crate::guard::unconfirmed_release(node).is_some()
}

/// R1 past the remediation ([`crate::guard::after_deletion`]): the Warning on the Node (published
/// before the record goes: at worst twice), then the record removed if it is still the one judged.
async fn watch_unconfirmed<W: World>(
    world: &W,
    name: &str,
    node: &Node,
    record: &crate::guard::UnconfirmedRelease,
) -> Result<(), Error> {
    use crate::guard::AfterDeletion;
    match crate::guard::after_deletion(record, &NodeSnapshot::new(node, None, &record.uid)) {
        AfterDeletion::Waits => return Ok(()),
        AfterDeletion::NeverWentDown(message) => {
            warn!(node = name, "{message}");
            world.metrics().fence_did_not_take_effect.get_or_create(&NodeLabels { node: name.to_owned() }).inc();
            let notice = fence::Notice { warning: true, reason: crate::guard::DID_NOT_TAKE_EFFECT.into(), message };
            world.publish(&node.object_ref(&()), &notice, "Cleanup").await;
        }
        AfterDeletion::BootedSince => {
            info!(
                node = name,
                remediation = record.remediation,
                "the node booted since the deleted remediation's release"
            );
        }
    }
    world.ensure_leader(world.settings().request_timeout).await?;
    release::update_node(world, name, |node| {
        (crate::guard::unconfirmed_release(node).as_ref() == Some(record)).then(|| {
            let mut updated = node.clone();
            updated.annotations_mut().remove(crate::guard::UNCONFIRMED_ANNOTATION);
            updated
        })
    })
    .await
    .map(drop)
}

fn held_message(owner: &str, cause: OrphanHeld) -> String {
    format!(
        "an out-of-service taint that remediation UID {owner} added is on the node, and that remediation no longer exists (a write that landed after its finalizer): it stays while {}; coroner removes it once the node is Ready=True on a new boot, or remove it by hand once the machine is known to be off or wiped",
        cause.as_str()
    )
}
