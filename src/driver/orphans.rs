//! R4: coroner's taints left on a Node by a remediation that no longer exists — a deposed leader's
//! write that landed after the finalizer ran. Found on Node events ([`crate::taints::orphaned`]
//! decides); removed under the Node's resourceVersion, or reported once while they must stay. And R1
//! past the remediation: a release whose remediation went before its node reported back
//! ([`crate::guard::UnconfirmedRelease`]), judged when the node reports.

use super::*;
use crate::taints::{Orphan, OrphanHeld};

/// The Event reason when coroner removed a taint whose remediation is gone.
pub const REMOVED: &str = crate::words::event::Event::StaleTaintRemoved.as_str();
/// The Event reason while an out-of-service taint whose remediation is gone must stay.
pub const HELD: &str = crate::words::event::Event::StaleReleaseHeld.as_str();

/// Sweeps the Node `name`: removes the records (and their exact taints) [`taints::orphaned`] lets
/// go, and reports once per owner and cause what it holds; judges a release left to watch past its
/// remediation ([`crate::guard::after_deletion`]).
pub async fn sweep<W: World>(world: &W, local: &Local, name: &str) -> Result<(), Error> {
    use crate::guard::AfterDeletion;
    let Some(node) = world.node(name).await? else { return Ok(()) };
    // A record the node as read leaves waiting costs no list.
    let unconfirmed = crate::guard::unconfirmed_release(&node).filter(|record| {
        crate::guard::after_deletion(record, &NodeSnapshot::new(&node, None, &record.uid), &[]) != AfterDeletion::Waits
    });
    if (taints::record_owners(&node).is_empty() && unconfirmed.is_none()) || !world.leading() {
        return Ok(());
    }
    // Listed after the Node was read: a record's remediation missing here is gone for good.
    let live: Vec<String> = world.remediations(Listing::Fresh).await?.iter().filter_map(ResourceExt::uid).collect();
    if unconfirmed.is_some() {
        // Judged on the Node read after the list: a finalizer that reported it took its record back
        // before its remediation went.
        if let Some(fresh) = world.node(name).await?
            && let Some(record) = crate::guard::unconfirmed_release(&fresh)
        {
            watch_unconfirmed(world, name, &fresh, &record, &live).await?;
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

/// R1 past the remediation ([`crate::guard::after_deletion`]): while leading, the Warning on the Node
/// (published before the record goes: a write that fails publishes it again at the next sweep), then
/// the record removed if it is still the one judged.
async fn watch_unconfirmed<W: World>(
    world: &W,
    name: &str,
    node: &Node,
    record: &crate::guard::UnconfirmedRelease,
    live: &[String],
) -> Result<(), Error> {
    use crate::guard::AfterDeletion;
    let judged = crate::guard::after_deletion(record, &NodeSnapshot::new(node, None, &record.uid), live);
    #[cfg(test)]
    let judged = match judged {
        AfterDeletion::NeverWentDown(_) if world.sabotage() == crate::sabotage::Sabotage::BootIdUnchecked => {
            AfterDeletion::BootedSince
        }
        judged => judged,
    };
    if judged == AfterDeletion::Waits {
        return Ok(());
    }
    world.ensure_leader(world.settings().request_timeout).await?;
    if let AfterDeletion::NeverWentDown(message) = judged {
        warn!(node = name, "{message}");
        world.metrics().fence_did_not_take_effect.get_or_create(&NodeLabels { node: name.to_owned() }).inc();
        let notice = fence::Notice { warning: true, reason: crate::guard::DID_NOT_TAKE_EFFECT.into(), message };
        world.publish(&node.object_ref(&()), &notice, "Cleanup").await;
    } else {
        info!(node = name, remediation = record.remediation, "the node booted since the deleted remediation's release");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotations: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        node
    }

    #[test]
    fn a_node_reaches_the_sweep_with_a_record_of_a_remediation_not_cached_or_a_release_left_to_watch() {
        assert!(!wants_sweep(&node(&[]), |_| false), "nothing of coroner's on it");
        let record =
            r#"{"uid":"gone","key":"coroner.dev/fencing","effect":"NoSchedule","timeAdded":"2025-03-01T12:00:00Z"}"#;
        let owned = node(&[("coroner.dev/fencing-owner", record)]);
        assert!(wants_sweep(&owned, |_| false));
        assert!(!wants_sweep(&owned, |uid| uid == "gone"), "its remediation is cached");
        let watched = r#"{"uid":"gone","remediation":"worker-1","bootID":"boot-1"}"#;
        assert!(wants_sweep(&node(&[(crate::guard::UNCONFIRMED_ANNOTATION, watched)]), |_| true));
    }
}
