//! The Node side of a release by attestation ([`crate::attestation`]): the same kind of write as the
//! fence's release — one Node update under the resourceVersion it read, re-checking the node and its
//! Lease for that very write — over the loop's traits, so the simulator's world can judge it too.

use super::{ApiError, Error, MAX_CONFLICTS, World, release::update_node};
use crate::{
    api::AttestedRelease,
    attestation::{self, Refusal, ReleasePlan},
    taints::{self, CoronerTaint},
};

/// Reads the Node and its Lease, re-checks them ([`attestation::recheck_node`]) and adds the
/// out-of-service taint owned by the remediation in one update under the Node's resourceVersion; a
/// conflict reads and checks again. A taint this remediation already owns is the release done before
/// (nothing is written).
pub async fn release_node<W: World>(world: &W, plan: &ReleasePlan) -> Result<Result<AttestedRelease, Refusal>, Error> {
    for _ in 0..MAX_CONFLICTS {
        let node = world.node(&plan.node_name).await?;
        let lease = world.node_lease(&plan.node_name).await?;
        if let Err(refusal) = attestation::recheck_node(plan, node.as_ref(), lease) {
            return Ok(Err(refusal));
        }
        let Some(node) = node else { continue };
        let now = world.now();
        let found = |n: &k8s_openapi::api::core::v1::Node, at| {
            attestation::release_on_node(n, &plan.remediation, &plan.remediation_uid, lease, at)
        };
        if let Some(done) = found(&node, None) {
            return Ok(Ok(done));
        }
        let Some(updated) = taints::with_taint(&node, CoronerTaint::OutOfService, &plan.remediation_uid, now) else {
            continue;
        };
        match world.patch_node(&node, &updated).await {
            Ok(written) => {
                if let Some(done) = found(&written, Some(now)) {
                    return Ok(Ok(done));
                }
            }
            Err(ApiError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::NodeConflicts(plan.node_name.clone()))
}

/// Removes the out-of-service taint the remediation owns (a release whose owner is gone).
pub async fn take_back<W: World>(world: &W, plan: &ReleasePlan) -> Result<(), Error> {
    update_node(world, &plan.node_name, |node| {
        taints::without_owned(node, &[CoronerTaint::OutOfService], &plan.remediation_uid)
    })
    .await
    .map(drop)
}
