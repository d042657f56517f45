//! The release: the out-of-service taint in one Node update, or the pod deletions of
//! `ResourceDeletion`, each under the re-checks that the node is still the silent one; coroner's
//! taints brought in line with the fence's state.

use super::*;

impl<W: World> Fence<'_, W> {
    /// A release on the Node that status does not know of (coroner stopped, or NHC timed the
    /// remediation out, between the two writes): recorded before anything else decides on the status,
    /// after the Lease check that follows every release ([`standing_release`]).
    pub(super) async fn record_standing_release(&mut self, node: &Node) -> Result<(), Error> {
        let status = self.status();
        let recorded = status.evidence.as_ref().is_some_and(|e| e.release.is_some());
        if fence::phase_of(&status) != Phase::Releasing || recorded {
            return Ok(());
        }
        let lease = self.world.node_lease(&self.node_name).await?;
        let snapshot = NodeSnapshot::new(node, lease, &self.uid);
        if snapshot.released_at.is_none() {
            return Ok(());
        }
        let observation = Observation::Release(standing_release(self.world, &status, &snapshot, &self.uid).await?);
        let memory = self.remembered();
        let instance = self.world.instance();
        let decision = fence::next(&self.spec(), &status, observation, self.context(&snapshot, &memory, &instance));
        self.commit(decision, Some(node)).await
    }
}

/// Reads the node, lets `change` decide, and writes its taints and annotations as a patch under the
/// resourceVersion it was read at; on a conflict it reads and decides again. `Ok(None)`: the node is
/// gone or nothing to change.
pub(super) async fn update_node<W: World>(
    world: &W,
    name: &str,
    change: impl FnMut(&Node) -> Option<Node>,
) -> Result<Option<Node>, Error> {
    Ok(match updated_node(world, name, change).await? {
        NodeUpdate::Written(node) => Some(node),
        NodeUpdate::Gone | NodeUpdate::Unchanged(_) => None,
    })
}

/// What [`updated_node`] did: the node was gone, wanted no change (as read), or was written.
enum NodeUpdate {
    Gone,
    Unchanged(Node),
    Written(Node),
}

/// [`update_node`], keeping the node it read when there was nothing to write.
async fn updated_node<W: World>(
    world: &W,
    name: &str,
    mut change: impl FnMut(&Node) -> Option<Node>,
) -> Result<NodeUpdate, Error> {
    for _ in 0..MAX_CONFLICTS {
        let Some(node) = world.node(name).await? else { return Ok(NodeUpdate::Gone) };
        let Some(updated) = change(&node) else { return Ok(NodeUpdate::Unchanged(node)) };
        match world.patch_node(&node, &updated).await {
            Ok(written) => return Ok(NodeUpdate::Written(written)),
            Err(ApiError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::NodeConflicts(name.to_owned()))
}

/// Brings coroner's taints on the node in line with the remediation's state: adds the fencing taint
/// when wanted, removes it when not, and removes the out-of-service taint this remediation owns only
/// once the fence decided its release is over. `Some`: the Node as it read or wrote it.
pub(super) async fn align_taints<W: World>(
    world: &W,
    name: &str,
    owner_uid: &str,
    fencing: bool,
    out_of_service_ends: bool,
) -> Result<Option<Node>, Error> {
    #[cfg(test)]
    let out_of_service_ends = out_of_service_ends || sabotaged(world, crate::sabotage::Sabotage::ReleaseUndone);
    let now = world.now();
    updated_node(world, name, |node| {
        let mut unwanted = Vec::new();
        if !fencing {
            unwanted.push(CoronerTaint::Fencing);
        }
        if out_of_service_ends {
            unwanted.push(CoronerTaint::OutOfService);
        }
        let removed = taints::without_owned(node, &unwanted, owner_uid);
        let base = removed.as_ref().unwrap_or(node);
        let added = if fencing { taints::with_taint(base, CoronerTaint::Fencing, owner_uid, now) } else { None };
        added.or(removed)
    })
    .await
    .map(|update| match update {
        NodeUpdate::Gone => None,
        NodeUpdate::Unchanged(node) | NodeUpdate::Written(node) => Some(node),
    })
}

/// Removes every coroner taint this remediation owns, and the approval its release ends (the
/// finalizer's job); records the release left to watch past the remediation, or removes the one an
/// earlier try left ([`crate::guard::with_watch`]).
pub(super) async fn remove_owned_taints<W: World>(
    world: &W,
    name: &str,
    owner_uid: &str,
    status: &CoronerRemediationStatus,
    watch: Option<&crate::guard::UnconfirmedRelease>,
) -> Result<(), Error> {
    update_node(world, name, |node| {
        let mut updated = taints::without_owned(node, &[CoronerTaint::Fencing, CoronerTaint::OutOfService], owner_uid);
        #[cfg(test)]
        if sabotaged(world, crate::sabotage::Sabotage::TaintsByKey) {
            let keys = [CoronerTaint::Fencing.key(), CoronerTaint::OutOfService.key()];
            let mut all = updated.clone().unwrap_or_else(|| node.clone());
            if let Some(taints) = all.spec.as_mut().and_then(|s| s.taints.as_mut()) {
                taints.retain(|t| !keys.contains(&t.key.as_str()));
            }
            updated = Some(all);
        }
        if crate::guard::approval_ends(status, node, owner_uid) {
            updated.get_or_insert_with(|| node.clone()).annotations_mut().remove(crate::guard::APPROVAL_ANNOTATION);
        }
        crate::guard::with_watch(updated.as_ref().unwrap_or(node), watch, owner_uid).or(updated)
    })
    .await
    .map(drop)
}

/// The node as it is now with its current Lease, if `fence::release_check` holds on it.
pub(super) async fn silent_node<W: World>(
    world: &W,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
) -> Result<Result<(Node, NodeSnapshot), NodeRefusal>, Error> {
    let Some(node) = world.node(node_name).await? else {
        return Ok(Err(NodeRefusal::Gone { node: node_name.to_owned() }));
    };
    let snapshot = NodeSnapshot::new(&node, world.node_lease(node_name).await?, owner_uid);
    #[cfg(test)]
    if sabotaged(world, crate::sabotage::Sabotage::ReleaseUnchecked) {
        return Ok(Ok((node, snapshot)));
    }
    Ok(fence::release_check(spec, status, &snapshot).map(|()| (node, snapshot)))
}

/// Whether a release may be written now: the leader Lease outlasting the write, and the proof still
/// fresh ([`fence::proof_deadline`], on this process's monotonic clock).
pub(super) async fn may_write_release<W: World>(
    world: &W,
    deadline: Mono,
) -> Result<Result<(), ReleaseRefusal>, Error> {
    world.ensure_leader(world.settings().request_timeout).await?;
    #[cfg(test)]
    if sabotaged(world, crate::sabotage::Sabotage::ReleaseNeverWritten) {
        return Ok(Err(ReleaseRefusal::ProofExpired));
    }
    // Last, right before the write: the leader check itself takes time.
    if world.mono() >= deadline {
        return Ok(Err(ReleaseRefusal::ProofExpired));
    }
    Ok(Ok(()))
}

/// One Node-release loop for every release — the fence's (through the BMC or a level) and the
/// attested one: the kind reads the Node and its Lease and re-checks them ([`NodeRelease::decide`]),
/// the kind's checks right before the write ([`NodeRelease::may_write`]), one patch under the
/// resourceVersion read that adds coroner's out-of-service taint (a conflict reads and checks
/// again), then the kind's look after the write ([`NodeRelease::written`]: the Lease read again).
pub(super) async fn write_release<W: World, K: NodeRelease<W>>(
    world: &W,
    kind: &K,
    node_name: &str,
) -> Result<Result<K::Done, K::Refusal>, Error> {
    for _ in 0..MAX_CONFLICTS {
        let (node, updated, read) = match kind.decide(world).await? {
            Before::Write { node, updated, read } => (node, updated, read),
            Before::Done(done) => return Ok(Ok(done)),
            Before::Refused(refusal) => return Ok(Err(refusal)),
            Before::Again => continue,
        };
        if let Err(refusal) = kind.may_write(world).await? {
            return Ok(Err(refusal));
        }
        let written = match world.patch_node(&node, &updated).await {
            Ok(written) => written,
            Err(ApiError::Conflict(_)) => continue,
            Err(error) => return Ok(Err(kind.refused(error)?)),
        };
        match kind.written(world, &written, read).await? {
            After::Done(done) => return Ok(Ok(done)),
            After::Refused(refusal) => return Ok(Err(refusal)),
            After::Again => {}
        }
    }
    Err(Error::NodeConflicts(node_name.to_owned()))
}

/// What one release kind brings to [`write_release`].
pub(super) trait NodeRelease<W: World>: Sync {
    type Done: Send;
    type Refusal: Send;
    /// What the decision before the write carries to the look after it.
    type Read: Send;
    /// Reads the Node (and its Lease) and decides: the Node to write, the release already there, a
    /// refusal, or read again.
    fn decide(&self, world: &W) -> impl Future<Output = Decided<Self, W>> + Send;
    /// Right before the write.
    fn may_write(&self, world: &W) -> impl Future<Output = Result<Result<(), Self::Refusal>, Error>> + Send;
    /// A write the API server refused, other than a conflict: a refusal of the kind's, or the error.
    fn refused(&self, error: ApiError) -> Result<Self::Refusal, ApiError>;
    /// After the write, on the Node as written.
    fn written(
        &self,
        world: &W,
        written: &Node,
        read: Self::Read,
    ) -> impl Future<Output = Result<After<Self::Done, Self::Refusal>, Error>> + Send;
}

/// A release kind's decision before the write ([`NodeRelease::decide`]).
pub(super) type Decided<K, W> =
    Result<Before<<K as NodeRelease<W>>::Done, <K as NodeRelease<W>>::Refusal, <K as NodeRelease<W>>::Read>, Error>;

/// What a release kind decided on the Node it read.
pub(super) enum Before<D, R, X> {
    Write { node: Box<Node>, updated: Box<Node>, read: X },
    Done(D),
    Refused(R),
    Again,
}

/// What a release kind found after its write.
pub(super) enum After<D, R> {
    Done(D),
    Refused(R),
    Again,
}

/// The fence's release with the out-of-service taint, after a proof through the BMC or a level:
/// only if `fence::release_check` holds on exactly the Node written and its current Lease, and only
/// while the proof is fresh. Right after it the Lease is read again: a renewal since the power-off
/// takes the taint back at once (`DidNotTakeEffect`).
pub(super) struct ProvenRelease<'a> {
    pub spec: &'a CoronerRemediationSpec,
    pub status: &'a CoronerRemediationStatus,
    pub node_name: &'a str,
    pub owner_uid: &'a str,
    pub deadline: Mono,
}

impl<W: World> NodeRelease<W> for ProvenRelease<'_> {
    type Done = Released;
    type Refusal = ReleaseRefusal;
    /// The Node as checked, when the release was decided, and the release taken over (R4).
    type Read = (NodeSnapshot, Timestamp, Option<String>);

    async fn decide(&self, world: &W) -> Result<Before<Released, ReleaseRefusal, Self::Read>, Error> {
        let (node, snapshot) = match silent_node(world, self.spec, self.status, self.node_name, self.owner_uid).await? {
            Ok(silent) => silent,
            Err(refusal) => return Ok(Before::Refused(ReleaseRefusal::Node(refusal))),
        };
        if snapshot.released_at.is_some() {
            return Ok(match standing_release(world, self.status, &snapshot, self.owner_uid).await? {
                Ok(released) => Before::Done(released),
                Err(refusal) => Before::Refused(refusal),
            });
        }
        let now = world.now();
        let (updated, took_over_from) = match taints::with_taint(&node, CoronerTaint::OutOfService, self.owner_uid, now)
        {
            Some(updated) => (updated, None),
            None => match orphan_to_adopt(world, &node, self.owner_uid, now).await? {
                Some((updated, from)) => (updated, Some(from)),
                // Someone else's out-of-service taint is already there: not claimed.
                None => {
                    return Ok(Before::Done(Released { taint_owned: false, ..Released::checked(&snapshot, now) }));
                }
            },
        };
        Ok(Before::Write { node: Box::new(node), updated: Box::new(updated), read: (snapshot, now, took_over_from) })
    }

    async fn may_write(&self, world: &W) -> Result<Result<(), ReleaseRefusal>, Error> {
        may_write_release(world, self.deadline).await
    }

    fn refused(&self, error: ApiError) -> Result<ReleaseRefusal, ApiError> {
        match error {
            ApiError::Denied(why) => Ok(ReleaseRefusal::WriteRefused(why)),
            error => Err(error),
        }
    }

    async fn written(
        &self,
        world: &W,
        _written: &Node,
        (snapshot, now, took_over_from): Self::Read,
    ) -> Result<After<Released, ReleaseRefusal>, Error> {
        let after =
            NodeSnapshot { lease_renew_time: world.node_lease(self.node_name).await?.flatten(), ..snapshot.clone() };
        if let Err(NodeRefusal::LeaseRenewed { renewed, .. }) =
            fence::lease_unrenewed_since_power_off(self.status, &after)
        {
            remove_owned_out_of_service(world, self.node_name, self.owner_uid).await?;
            return Ok(After::Refused(ReleaseRefusal::DidNotTakeEffect { node: self.node_name.to_owned(), renewed }));
        }
        Ok(After::Done(Released { taint_owned: true, took_over_from, ..Released::checked(&snapshot, now) }))
    }
}

/// R4: an out-of-service taint of coroner's already on the node whose remediation no longer exists
/// is this release's to take over ([`taints::adopt_orphan`]); the remediations are listed (after the
/// Node was read) only when a record names another one.
async fn orphan_to_adopt<W: World>(
    world: &W,
    node: &Node,
    owner_uid: &str,
    now: Timestamp,
) -> Result<Option<(Node, String)>, Error> {
    if taints::ownership(node, CoronerTaint::OutOfService).is_none_or(|o| o.uid == owner_uid) {
        return Ok(None);
    }
    let live: Vec<String> = world.remediations(Listing::Fresh).await?.iter().filter_map(ResourceExt::uid).collect();
    Ok(taints::adopt_orphan(node, owner_uid, &live, now))
}

/// This remediation's exact out-of-service taint found on the Node: a release written earlier, maybe
/// by a process that stopped before it could read the Lease again. The same check as right after a
/// release write: a Lease renewed since the power-off takes the taint back at once.
pub(super) async fn standing_release<W: World>(
    world: &W,
    status: &CoronerRemediationStatus,
    snapshot: &NodeSnapshot,
    owner_uid: &str,
) -> Result<Result<Released, ReleaseRefusal>, Error> {
    if let Err(NodeRefusal::LeaseRenewed { renewed, .. }) = fence::lease_unrenewed_since_power_off(status, snapshot) {
        remove_owned_out_of_service(world, &snapshot.name, owner_uid).await?;
        return Ok(Err(ReleaseRefusal::DidNotTakeEffect { node: snapshot.name.clone(), renewed }));
    }
    let node = world.node(&snapshot.name).await?;
    // R1/R4: a taint someone rewrote since leaves the owner record the releasing update wrote: the
    // release was made then.
    let recorded = node.as_ref().and_then(|n| taints::ownership(n, CoronerTaint::OutOfService));
    let recorded = recorded.filter(|o| o.uid == owner_uid).map(|o| o.time_added.0);
    let at = snapshot.released_at.or(recorded).unwrap_or_else(|| world.now());
    let took_over_from = node.as_ref().and_then(|node| taints::taken_over_from(node, owner_uid));
    Ok(Ok(Released { taint_owned: true, took_over_from, ..Released::checked(snapshot, at) }))
}

/// A release taken back: its taint goes, or goes back to the remediation it was taken over from
/// ([`taints::taken_back`]).
pub(super) async fn remove_owned_out_of_service<W: World>(world: &W, name: &str, owner_uid: &str) -> Result<(), Error> {
    update_node(world, name, |node| taints::taken_back(node, owner_uid)).await.map(drop)
}

/// R1: what a `ResourceDeletion` release checks before it is recorded as begun: the node as before
/// each pod, and the proof still fresh. Nothing is deleted here.
pub(super) async fn deletion_check<W: World>(
    world: &W,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
    deadline: Mono,
) -> Result<Result<Released, ReleaseRefusal>, Error> {
    let snapshot = match silent_node(world, spec, status, node_name, owner_uid).await? {
        Ok((_, snapshot)) => snapshot,
        Err(refusal) => return Ok(Err(ReleaseRefusal::Node(refusal))),
    };
    if world.mono() >= deadline {
        return Ok(Err(ReleaseRefusal::ProofExpired));
    }
    Ok(Ok(Released::checked(&snapshot, world.now())))
}

/// The release with `ResourceDeletion` (as FAR does): after the same check, force-delete every pod
/// bound to the node (grace period 0, UID precondition), mirror pods excepted, checking the node and
/// the proof's freshness again before each further pod. Never VolumeAttachments. Unlike the taint,
/// this is not one atomic update.
pub(super) async fn release_by_deletion<W: World>(
    world: &W,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
    deadline: Mono,
    sending: impl Fn(),
) -> Result<Result<Released, ReleaseRefusal>, Error> {
    let snapshot = match silent_node(world, spec, status, node_name, owner_uid).await? {
        Ok((_, snapshot)) => snapshot,
        Err(refusal) => return Ok(Err(ReleaseRefusal::Node(refusal))),
    };
    let mut deleted = 0;
    let mut first = true;
    let released = |deleted: u32, interrupted: Option<ReleaseRefusal>| Released {
        pods_deleted: Some(deleted),
        interrupted,
        ..Released::checked(&snapshot, world.now())
    };
    // R1: once a pod is deleted the release has begun; a refusal after it records the pods deleted
    // so far as a release (guarded) and fails the fence with its cause, never "nothing released".
    // `sending` is told before each deletion: an error after one leaves the begun record standing.
    let stop = |deleted: u32, refusal: ReleaseRefusal| match deleted {
        0 => Ok(Err(refusal)),
        k => Ok(Ok(released(k, Some(refusal)))),
    };
    for pod in world.pods_on(node_name).await? {
        if fence::is_mirror_pod(&pod) {
            continue;
        }
        // Deleting takes a while: the node must still be silent before each further pod goes.
        if !std::mem::take(&mut first)
            && let Err(refusal) = silent_node(world, spec, status, node_name, owner_uid).await?
        {
            return stop(deleted, ReleaseRefusal::Node(refusal));
        }
        if let Err(refusal) = may_write_release(world, deadline).await? {
            return stop(deleted, refusal);
        }
        sending();
        match world.delete_pod(&pod).await {
            Ok(()) => deleted += 1,
            // Gone already (another remediator may delete the same pod), or replaced by a new pod.
            Err(ApiError::NotFound(_) | ApiError::Conflict(_)) => {}
            Err(ApiError::Denied(why)) => return stop(deleted, ReleaseRefusal::WriteRefused(why)),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Ok(released(deleted, None)))
}

/// R1: a `ResourceDeletion` release begun whose proof went stale. `None` while a pod is left to
/// delete (the machine is proven again first); else the release as it stands, with the node's
/// re-checks (a node no longer silent refuses it, as before any deletion): recording it deletes
/// nothing, so it needs no fresh proof.
pub(super) async fn finished_deletion<W: World>(
    world: &W,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
) -> Result<Option<Result<Released, ReleaseRefusal>>, Error> {
    if world.pods_on(node_name).await?.iter().any(|pod| !fence::is_mirror_pod(pod)) {
        return Ok(None);
    }
    Ok(Some(match silent_node(world, spec, status, node_name, owner_uid).await? {
        Ok((_, snapshot)) => Ok(Released { pods_deleted: Some(0), ..Released::checked(&snapshot, world.now()) }),
        Err(refusal) => Err(ReleaseRefusal::Node(refusal)),
    }))
}

/// What still holds the node: pods that are terminating or not yet evicted, and VolumeAttachments.
pub(super) async fn workloads<W: World>(world: &W, node_name: &str) -> Result<Workloads, Error> {
    let blocking_pods = world.pods_on(node_name).await?.iter().filter(|p| fence::pod_blocks_release(p)).count();
    let volume_attachments = world.volume_attachments_on(node_name).await?;
    Ok(Workloads { blocking_pods: count(blocking_pods), volume_attachments: count(volume_attachments) })
}

pub(super) fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        sim::{
            lab::{Lab, Setup, WorldChange},
            script::Script,
            world::Truth,
        },
        taints::{CoronerTaint, ownership},
    };

    const UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";

    /// The release's re-checks, table-driven (docs/safety.md R1, P5): each change of the node made
    /// right before the release re-reads it (or, for the Lease, right after the write) refuses the
    /// release, and coroner's out-of-service taint is not on the Node at the end. Today's BMC release
    /// re-checks the Node's UID, its Ready condition and its Lease; the exclusion label, the bootID
    /// and a foreign out-of-service taint are checked before the ForceOff, not again here.
    #[test]
    fn every_re_check_of_the_release_refuses_it_when_the_node_changed() {
        let cases: Vec<(&str, Option<WorldChange>, &str)> = vec![
            (
                "the Node replaced under the same name",
                Some(Box::new(|t: &mut Truth| t.replace_node("worker-1"))),
                "Replaced",
            ),
            (
                "the node Ready again",
                Some(Box::new(|t: &mut Truth| t.set_ready("worker-1", "True", None))),
                "Ready=True",
            ),
            (
                "its Lease renewed since the power-off",
                Some(Box::new(|t: &mut Truth| {
                    let now = t.wall(t.now);
                    t.renew_lease("worker-1", now);
                })),
                "Lease",
            ),
            ("its Lease renewed right after the release write", None, "Lease"),
        ];
        for (case, change, said) in cases {
            let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
            let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
            match change {
                Some(change) => lab.change_before_the_release(change),
                None => lab.renew_lease_right_after_the_release(),
            }
            let status = futures::executor::block_on(lab.run());
            let released = status.evidence.as_ref().and_then(|e| e.release.as_ref());
            assert!(released.is_none(), "{case}: the release stands: {status:?}");
            let uid = lab.world(|t| t.remediation("worker-1").and_then(|r| r.metadata.uid)).unwrap_or_default();
            let taint = lab.world(|t| t.node("worker-1")).and_then(|n| ownership(&n, CoronerTaint::OutOfService));
            assert!(taint.is_none_or(|o| o.uid != uid), "{case}: coroner's out-of-service taint stayed");
            let said_why = serde_json::to_string(&status).unwrap_or_default();
            assert!(said_why.contains(said), "{case}: the status does not say why ({said}): {said_why}");
        }
    }

    /// The attested release's re-checks (docs/safety.md A3), table-driven through the same loop:
    /// with nothing changed the release is written; each change of the node made before the Node
    /// update (or its Lease renewed right after it) refuses it with its reason, and coroner's
    /// out-of-service taint is not on the Node at the end.
    #[test]
    fn every_re_check_of_the_attested_release_refuses_it_when_the_node_changed() {
        use crate::attestation::{AttestationReason, ReleasePlan};
        let renew = |t: &mut Truth| {
            let now = t.wall(t.now);
            t.renew_lease("worker-1", now);
        };
        let foreign = |t: &mut Truth| {
            t.add_foreign_taint("worker-1", crate::taints::OUT_OF_SERVICE_KEY, None, "NoExecute", "someone")
        };
        let cases: Vec<(&str, Option<WorldChange>, Option<AttestationReason>)> = vec![
            ("nothing changed", Some(Box::new(|_: &mut Truth| {})), None),
            (
                "the Node replaced under the same name",
                Some(Box::new(|t: &mut Truth| t.replace_node("worker-1"))),
                Some(AttestationReason::NodeUidMismatch),
            ),
            (
                "the node Ready again",
                Some(Box::new(|t: &mut Truth| t.set_ready("worker-1", "True", None))),
                Some(AttestationReason::NodeNotUnreachable),
            ),
            (
                "a new bootID",
                Some(Box::new(|t: &mut Truth| t.set_ready("worker-1", "Unknown", Some("worker-1-boot-2")))),
                Some(AttestationReason::FenceSawLife),
            ),
            (
                "its Lease renewed since the fence",
                Some(Box::new(renew)),
                Some(AttestationReason::LeaseChangedSinceFence),
            ),
            (
                "the exclusion label",
                Some(Box::new(|t: &mut Truth| t.exclude_node("worker-1"))),
                Some(AttestationReason::NodeExcluded),
            ),
            (
                "a foreign out-of-service taint",
                Some(Box::new(foreign)),
                Some(AttestationReason::OutOfServiceTaintPresent),
            ),
            ("its Lease renewed right after the Node update", None, Some(AttestationReason::LeaseChangedSinceFence)),
        ];
        for (case, change, refused) in cases {
            let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
            let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
            let plan = lab.world(|t| {
                let node = t.node("worker-1").unwrap();
                let remediation = t.remediation("worker-1").unwrap();
                ReleasePlan {
                    node_name: "worker-1".into(),
                    node_uid: node.metadata.uid.clone().unwrap_or_default(),
                    boot_id: node
                        .status
                        .as_ref()
                        .and_then(|s| s.node_info.as_ref())
                        .map(|i| i.boot_id.clone())
                        .unwrap_or_default(),
                    remediation: "worker-1".into(),
                    remediation_uid: remediation.metadata.uid.clone().unwrap_or_default(),
                    lease_baseline: t.leases["worker-1"].unwrap(),
                    acknowledged: Vec::new(),
                    power_action: None,
                    boot_seen: None,
                }
            });
            match change {
                Some(change) => lab.world(change),
                None => lab.renew_lease_right_after_the_release(),
            }
            let released = futures::executor::block_on(crate::driver::attest::release_node(&lab, &plan)).unwrap();
            let taint = lab.world(|t| t.node("worker-1")).and_then(|n| ownership(&n, CoronerTaint::OutOfService));
            let ours = taint.is_some_and(|o| o.uid == plan.remediation_uid);
            match refused {
                None => assert!(released.is_ok() && ours, "{case}: not released: {released:?}"),
                Some(reason) => {
                    let refusal = released.expect_err(case);
                    assert_eq!(refusal.reason, reason, "{case}: {refusal}");
                    assert!(!ours, "{case}: coroner's out-of-service taint stayed");
                }
            }
        }
    }
}
