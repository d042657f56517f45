//! R4: coroner's taints left on a Node by a remediation that no longer exists — a deposed leader's
//! write that landed after the finalizer ran. Found on Node events ([`crate::taints::orphaned`]
//! decides); removed under the Node's resourceVersion, or reported once while they must stay.

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
    if taints::record_owners(&node).is_empty() || !world.leading() {
        return Ok(());
    }
    // Listed after the Node was read: a record's remediation missing here is gone for good.
    let live: Vec<String> = world.remediations(Listing::Fresh).await?.iter().filter_map(ResourceExt::uid).collect();
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

fn held_message(owner: &str, cause: OrphanHeld) -> String {
    format!(
        "an out-of-service taint that remediation UID {owner} added is on the node, and that remediation no longer exists (a write that landed after its finalizer): it stays while {}; coroner removes it once the node is Ready=True on a new boot, or remove it by hand once the machine is known to be off or wiped",
        cause.as_str()
    )
}
