//! The attested release ([`crate::attestation`] decides), over the loop's traits, so the lab and the
//! simulator run it as production does. A release is, in this order: the attestation's status
//! `Releasing` (under its resourceVersion: a deletion before it cancels), the release recorded on the
//! remediation (under its resourceVersion; the remediation then wants the taint, so it never removes
//! it), the leader check, then one Node update under the Node's resourceVersion that re-checks the
//! node and adds the out-of-service taint owned by the remediation. A refusal in that update
//! withdraws the record; success confirms it.

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    core::v1::{Node, ObjectReference, Pod},
};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::{
    ApiError, Error, Listing, Local, MAX_CONFLICTS, Next, World,
    release::{After, Before, NodeRelease, update_node, write_release},
};
use crate::{
    api::{
        AttestationPhase, AttestedRelease, AttestedReleaseState, BmcBinding, CoronerAttestation,
        CoronerAttestationStatus, CoronerRemediation, CoronerRemediationStatus, conditions,
    },
    attestation::{
        self, AttestationReason, ClusterView, Dangling, Evaluation, Inputs, RELEASED, Refusal, ReleasePlan, Verdict,
    },
    fence::Notice,
    taints::{self, CoronerTaint},
};

/// How often a waiting attestation is checked again (sooner when it expires first).
const RECHECK: StdDuration = StdDuration::from_secs(5);

fn phase_of(attestation: &CoronerAttestation) -> AttestationPhase {
    attestation.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
}

/// One reconcile of the attestation called `name`.
pub async fn reconcile<W: World>(world: &W, local: &Local, name: &str) -> Result<Next, Error> {
    // The cache may trail coroner's own last status write.
    let Some(attestation) = world.attestation(name).await? else { return Ok(Next::AwaitChange) };
    if attestation.metadata.deletion_timestamp.is_some() {
        return Ok(Next::AwaitChange);
    }
    match phase_of(&attestation) {
        AttestationPhase::Released | AttestationPhase::Refused => return Ok(Next::AwaitChange),
        AttestationPhase::Pending | AttestationPhase::Releasing => {}
    }
    let seen = Seen::read(world, local, &attestation).await?;
    let now = world.now();
    if let Some((remediation, released)) = seen.release_already_on_node(&attestation) {
        // A coroner stopped after the Node update, maybe before it read the Lease again: the same
        // check as right after the update (A3), then only the records are missing.
        let plan = attestation::plan_of(&attestation, &remediation);
        if let Some(refusal) = plan.and_then(|plan| attestation::lease_held_after_release(&plan, seen.lease).err()) {
            take_back_owned(world, &attestation.spec.node_name, &remediation.uid().unwrap_or_default()).await?;
            withdraw(world, &remediation.name_any(), &attestation.uid().unwrap_or_default()).await?;
            let evaluation = seen.evaluate(world, &attestation, now);
            return refuse(world, &attestation, &evaluation, &refusal, now).await;
        }
        return finish(world, &attestation, remediation, &released).await;
    }
    let evaluation = seen.evaluate(world, &attestation, now);
    match evaluation.verdict.clone() {
        Verdict::Release(plan) => release(world, local, &attestation, &evaluation, &plan).await,
        Verdict::Look(plan) => {
            let remediation = evaluation.remediation.ok_or(Error::Incomplete("remediation"))?;
            let uid = attestation.uid().unwrap_or_default();
            let awaiting = evaluation
                .checks
                .iter()
                .find_map(|c| match &c.outcome {
                    attestation::Outcome::Refused(refusal) => Some(refusal.clone()),
                    _ => None,
                })
                .ok_or(Error::Incomplete("device look"))?;
            if attestation::attested_record(remediation, &uid).is_some() {
                // A release begun on a look that no longer stands (a restart, a Node write that kept
                // failing): if the Node, read afresh, carries its update, the release happened (the
                // check at the top finishes it, or the next start's settling records it); else its
                // record is withdrawn, and the attestation waits, Pending, for a new look.
                let node = world.node(&plan.node_name).await?;
                if node.as_ref().is_some_and(|n| attestation::release_recorded(n, &plan.remediation_uid)) {
                    return Ok(Next::Requeue(RECHECK));
                }
                withdraw(world, &plan.remediation, &uid).await?;
                return refuse(world, &attestation, &evaluation, &awaiting, now).await;
            }
            if let Some(status) = attestation::look_asked(remediation, &attestation, &plan, now) {
                // A conflict is a change of the remediation, which wakes this attestation again.
                match world.write_status(remediation, status).await {
                    Ok(_) | Err(ApiError::Conflict(_)) => {}
                    Err(error) => return Err(error.into()),
                }
                info!(attestation = %attestation.name_any(), remediation = %remediation.name_any(), "asked the failed fence to look through its device once more");
            }
            refuse(world, &attestation, &evaluation, &awaiting, now).await
        }
        Verdict::Wait(refusal) | Verdict::Refuse(refusal) => {
            if refusal.is_final()
                && let Some(remediation) = evaluation.remediation
            {
                withdraw(world, &remediation.name_any(), &attestation.uid().unwrap_or_default()).await?;
            }
            refuse(world, &attestation, &evaluation, &refusal, now).await
        }
    }
}

/// Everything the preconditions look at, read afresh.
struct Seen {
    policies: (Vec<ValidatingAdmissionPolicy>, Vec<ValidatingAdmissionPolicyBinding>),
    remediations: Vec<CoronerRemediation>,
    node: Option<Node>,
    lease: Option<Option<Timestamp>>,
    nodes: Vec<Node>,
    etcd_pods: Vec<Pod>,
    bmc_bindings: Vec<BmcBinding>,
    /// What this process's fences last read (A1), by remediation UID.
    remembered_power: std::collections::BTreeMap<String, String>,
}

impl Seen {
    async fn read<W: World>(world: &W, local: &Local, attestation: &CoronerAttestation) -> Result<Self, Error> {
        let node_name = &attestation.spec.node_name;
        #[allow(unused_mut)]
        let mut remediations = world.remediations(Listing::Stored).await?;
        #[cfg(test)]
        if world.sabotage() == crate::sabotage::Sabotage::AttestationIgnoresLife {
            for progress in remediations.iter_mut().filter_map(|r| r.status.as_mut()?.progress.as_mut()) {
                progress.last_power_state = None;
            }
        }
        let nodes = world.nodes(Listing::Stored).await?;
        let instance = world.instance();
        let remembered_power = remediations
            .iter()
            .filter_map(|r| {
                let uid = r.uid()?;
                let power = local.remembered(&instance, &uid).last_power?;
                #[cfg(test)]
                if world.sabotage() == crate::sabotage::Sabotage::AttestationIgnoresLife {
                    return None;
                }
                Some((uid, power))
            })
            .collect();
        Ok(Self {
            remembered_power,
            policies: world.admission_policies().await?,
            node: nodes.iter().find(|n| &n.name_any() == node_name).cloned(),
            lease: world.node_lease(node_name).await?,
            etcd_pods: world.etcd_pods(Listing::Stored).await?,
            bmc_bindings: world.bindings(Listing::Stored).await?,
            remediations,
            nodes,
        })
    }

    fn evaluate<'a, W: World>(
        &'a self,
        world: &'a W,
        attestation: &'a CoronerAttestation,
        now: Timestamp,
    ) -> Evaluation<'a> {
        let settings = world.settings();
        let inputs = Inputs {
            attestation,
            now,
            policies: Some((self.policies.0.as_slice(), self.policies.1.as_slice())),
            remediations: &self.remediations,
            node: self.node.as_ref(),
            lease: self.lease,
            sighting: Some(world.lease_sighting(&attestation.spec.node_name, world.mono())),
            cluster: Some(ClusterView {
                namespace: &settings.namespace,
                nodes: &self.nodes,
                etcd_pods: &self.etcd_pods,
                bmc_bindings: &self.bmc_bindings,
                remembered_power: &self.remembered_power,
            }),
        };
        attestation::evaluate(&inputs)
    }

    /// This attestation's release already on the Node (its remediation's record and owned taint).
    fn release_already_on_node(
        &self,
        attestation: &CoronerAttestation,
    ) -> Option<(CoronerRemediation, AttestedRelease)> {
        let uid = attestation.uid()?;
        let remediation = self.remediations.iter().find(|r| attestation::attested_record(r, &uid).is_some())?;
        let released = attestation::release_on_node(
            self.node.as_ref()?,
            &remediation.name_any(),
            &remediation.uid()?,
            self.lease,
            None,
        )?;
        Some((remediation.clone(), released))
    }
}

fn notice(refusal: &Refusal) -> Notice {
    Notice { warning: true, reason: refusal.reason.as_str().into(), message: refusal.message.clone() }
}

/// A waiting or final refusal: the condition, the list of checks, and an Event when the reason changed.
async fn refuse<W: World>(
    world: &W,
    attestation: &CoronerAttestation,
    evaluation: &Evaluation<'_>,
    refusal: &Refusal,
    now: Timestamp,
) -> Result<Next, Error> {
    let old = attestation.status.clone().unwrap_or_default();
    let mut status = attestation::refused_status(&old, &evaluation.checks, refusal, now);
    let reason_changed =
        conditions::find(&old.conditions, RELEASED).is_none_or(|c| c.reason != refusal.reason.as_str());
    if attestation::status_changed(&old, &status) {
        status.last_checked_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now));
        world.write_attestation_status(attestation, status).await?;
    }
    if reason_changed {
        info!(attestation = %attestation.name_any(), node = %attestation.spec.node_name, %refusal, "attestation not released");
        world.publish(&attestation.object_ref(&()), &notice(refusal), "Attest").await;
    }
    if refusal.is_final() {
        return Ok(Next::AwaitChange);
    }
    let created = attestation.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    let expires = created + attestation.spec.valid_for.get();
    let until_expiry = StdDuration::try_from(expires.duration_since(now)).unwrap_or_default();
    Ok(Next::Requeue(RECHECK.min(until_expiry + StdDuration::from_millis(100))))
}

/// The release, as the module documentation describes it.
async fn release<W: World>(
    world: &W,
    local: &Local,
    attestation: &CoronerAttestation,
    evaluation: &Evaluation<'_>,
    plan: &ReleasePlan,
) -> Result<Next, Error> {
    let now = world.now();
    let old = attestation.status.clone().unwrap_or_default();
    let attestation = world
        .write_attestation_status(attestation, attestation::releasing_status(&old, &evaluation.checks, plan, now))
        .await?;
    let uid = attestation.uid().unwrap_or_default();
    let remediation = evaluation.remediation.ok_or(Error::Incomplete("remediation"))?;
    if attestation::attested_record(remediation, &uid).is_none() {
        let status =
            attestation::record_release(&remediation.status.clone().unwrap_or_default(), &attestation, plan, now);
        world.write_status(remediation, status).await?;
    }
    // Deleting the attestation until now cancels the release.
    let current = world.attestation(&attestation.name_any()).await?;
    if current
        .as_ref()
        .is_none_or(|c| c.uid().as_deref() != Some(uid.as_str()) || c.metadata.deletion_timestamp.is_some())
    {
        info!(attestation = %attestation.name_any(), "attestation deleted before the release; nothing released");
        withdraw(world, &plan.remediation, &uid).await?;
        return Ok(Next::AwaitChange);
    }
    if let Err(why) = world.ensure_leader(world.settings().request_timeout).await {
        withdraw(world, &plan.remediation, &uid).await?;
        return Err(Error::NotLeader(why));
    }
    // A1 once more, after the leader check, on what the fence and its guard recorded and this process
    // read since the checks (a guard reading of life between them and the Node write).
    let fence = world.remediation(&plan.remediation).await?;
    let remembered = local.remembered(&world.instance(), &plan.remediation_uid).last_power;
    #[cfg(test)]
    let fence = fence.filter(|_| world.sabotage() != crate::sabotage::Sabotage::AttestationIgnoresLife);
    let life = match &fence {
        Some(fence) => attestation::no_life_in_fence(fence, remembered.as_deref())
            .err()
            .and_then(|found| found.into_iter().find(|refusal| !attestation::acknowledged_in(plan, refusal))),
        None => None,
    };
    if let Some(refusal) = life {
        withdraw(world, &plan.remediation, &uid).await?;
        return refuse(world, &attestation, evaluation, &refusal, world.now()).await;
    }
    match release_node(world, plan).await? {
        Err(refusal) => {
            withdraw(world, &plan.remediation, &uid).await?;
            let status = attestation::refused_status(
                &attestation.status.clone().unwrap_or_default(),
                &evaluation.checks,
                &refusal,
                world.now(),
            );
            world.write_attestation_status(&attestation, status).await?;
            world.publish(&attestation.object_ref(&()), &notice(&refusal), "Attest").await;
            Ok(if refusal.is_final() { Next::AwaitChange } else { Next::Requeue(RECHECK) })
        }
        Ok(released) => {
            let current = world.remediation(&plan.remediation).await?;
            if current.as_ref().is_none_or(|r| r.metadata.deletion_timestamp.is_some()) {
                // NodeHealthCheck deleted the remediation meanwhile: its finalizer may have run before
                // the taint arrived. Take it back; nothing may outlive its owner. The taint stood for
                // a moment (evictions may have begun): R1's bootID check goes on past the remediation.
                let watch = crate::guard::UnconfirmedRelease {
                    uid: plan.remediation_uid.clone(),
                    remediation: plan.remediation.clone(),
                    boot_id: plan.boot_id.clone(),
                };
                update_node(world, &plan.node_name, |node| {
                    let removed = taints::without_owned(node, &[CoronerTaint::OutOfService], &plan.remediation_uid);
                    crate::guard::with_watch(removed.as_ref().unwrap_or(node), Some(&watch), &plan.remediation_uid)
                        .or(removed)
                })
                .await?;
                let refusal = Refusal {
                    evidence_at: None,
                    reason: AttestationReason::RemediationDeleted,
                    message: format!(
                        "remediation {} was deleted during the release; the taint was removed again",
                        plan.remediation
                    ),
                };
                let status = attestation::refused_status(
                    &attestation.status.clone().unwrap_or_default(),
                    &evaluation.checks,
                    &refusal,
                    world.now(),
                );
                world.write_attestation_status(&attestation, status).await?;
                return Ok(Next::AwaitChange);
            }
            let remediation = current.ok_or(Error::Incomplete("remediation"))?;
            finish(world, &attestation, remediation, &released).await
        }
    }
}

/// The release is on the Node: confirm the remediation's record (no slot of the fence window: the
/// fence took its own, A3), mark the attestation Released and announce it on the remediation, the
/// Node and the attestation.
async fn finish<W: World>(
    world: &W,
    attestation: &CoronerAttestation,
    remediation: CoronerRemediation,
    released: &AttestedRelease,
) -> Result<Next, Error> {
    let uid = remediation.uid().unwrap_or_default();
    update_remediation_status(world, &remediation.name_any(), |status| {
        let record = status.evidence.as_ref()?.release.as_ref()?.attestation.as_ref()?;
        (record.state != AttestedReleaseState::Released)
            .then(|| crate::guard::with_release_id(attestation::confirm_release(status, released), status, &uid))
    })
    .await?;
    if let Err(error) = mark_attestation_released(world, attestation, released).await {
        // The release and its record on the remediation stand; the attestation may have been deleted.
        warn!(%error, attestation = %attestation.name_any(), "released, but could not mark the attestation Released");
    }
    // R3: the id an approval must name, as the confirmed record gives it.
    let id = crate::guard::release_id_at(&uid, released.released_at.0);
    // A1/A2: each acknowledgement that cleared a refusal is said with the release, and counted.
    let record = attestation::attested_record(&remediation, &attestation.uid().unwrap_or_default());
    let acknowledged: Vec<String> =
        record.map(|r| r.acknowledged.iter().map(ToString::to_string).collect()).unwrap_or_default();
    for ack in record.into_iter().flat_map(|r| &r.acknowledged) {
        world.metrics().safety_override(&format!("Acknowledged{}", ack.reason.as_str()));
    }
    let acknowledged = match acknowledged.as_slice() {
        [] => String::new(),
        list => format!("; the attester acknowledged {}", list.join(", ")),
    };
    let message = format!("{}{acknowledged} (release {id})", attestation::release_message(attestation));
    info!(attestation = %attestation.name_any(), node = %attestation.spec.node_name, remediation = %remediation.name_any(), "{message}");
    let attested = Notice { warning: true, reason: attestation::OPERATOR_ATTESTED.into(), message };
    world.publish(&remediation.object_ref(&()), &attested, "Release").await;
    let node_ref = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(attestation.spec.node_name.clone()),
        uid: Some(released.node_uid.clone()),
        ..Default::default()
    };
    world.publish(&node_ref, &attested, "Release").await;
    let done = Notice {
        warning: false,
        reason: crate::words::event::Event::Released.as_str().into(),
        message: format!("node {} released through remediation {}", attestation.spec.node_name, remediation.name_any()),
    };
    world.publish(&attestation.object_ref(&()), &done, "Release").await;
    Ok(Next::AwaitChange)
}

/// Marks the attestation Released, reading it again after a conflict (a label added meanwhile).
async fn mark_attestation_released<W: World>(
    world: &W,
    attestation: &CoronerAttestation,
    released: &AttestedRelease,
) -> Result<(), ApiError> {
    let mut current = attestation.clone();
    for _ in 0..MAX_CONFLICTS {
        let status: CoronerAttestationStatus =
            attestation::released_status(&current.status.clone().unwrap_or_default(), released, world.now());
        match world.write_attestation_status(&current, status).await {
            Err(ApiError::Conflict(_)) => match world.attestation(&attestation.name_any()).await? {
                Some(latest) if latest.uid() == attestation.uid() => current = latest,
                _ => return Ok(()),
            },
            other => return other.map(drop),
        }
    }
    Ok(())
}

/// Read-modify-write of a remediation's status until it lands (a record must not be lost to a
/// conflict). `change` returns `None` when there is nothing to write.
async fn update_remediation_status<W: World>(
    world: &W,
    name: &str,
    change: impl Fn(&CoronerRemediationStatus) -> Option<CoronerRemediationStatus>,
) -> Result<(), Error> {
    for _ in 0..MAX_CONFLICTS {
        let Some(remediation) = world.remediation(name).await? else { return Ok(()) };
        let Some(status) = change(&remediation.status.clone().unwrap_or_default()) else { return Ok(()) };
        match world.write_status(&remediation, status).await {
            Ok(_) => return Ok(()),
            Err(ApiError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::StatusConflicts(MAX_CONFLICTS))
}

/// Withdraws this attestation's `Releasing` record from the remediation: its release did not happen.
async fn withdraw<W: World>(world: &W, remediation: &str, attestation_uid: &str) -> Result<(), Error> {
    update_remediation_status(world, remediation, |status| attestation::withdraw_release(status, attestation_uid)).await
}

/// At start: a `Releasing` record on a remediation is confirmed when its taint is on the node, and
/// withdrawn when its attestation is gone and the taint is not there (the release never happened).
pub async fn settle_dangling_records<W: World>(world: &W) -> Result<(), Error> {
    let remediations = world.remediations(Listing::Stored).await?;
    let attestations = world.attestations().await?;
    for remediation in &remediations {
        let Some(record) =
            remediation.status.as_ref().and_then(|s| s.evidence.as_ref()?.release.as_ref()?.attestation.clone())
        else {
            continue;
        };
        let exists = attestations.iter().any(|a| a.uid().as_deref() == Some(record.uid.as_str()));
        let node = match crate::contract::node_name(&remediation.metadata) {
            Some(name) => world.node(name).await?,
            None => None,
        };
        match attestation::dangling_record(remediation, exists, node.as_ref()) {
            Dangling::Keep => {}
            Dangling::Confirm => {
                info!(remediation = %remediation.name_any(), attestation = %record.name, "attested release found on the node; recorded as done");
                update_remediation_status(world, &remediation.name_any(), attestation::mark_released).await?;
            }
            Dangling::Withdraw => {
                info!(remediation = %remediation.name_any(), attestation = %record.name, "attestation deleted before its release; its record is withdrawn");
                withdraw(world, &remediation.name_any(), &record.uid).await?;
            }
        }
    }
    Ok(())
}

/// Reads the Node and its Lease, re-checks them ([`attestation::recheck_node`]) and adds the
/// out-of-service taint owned by the remediation in one update under the Node's resourceVersion
/// ([`write_release`]); a conflict reads and checks again. A taint this remediation already owns is
/// the release done before (nothing is written).
pub async fn release_node<W: World>(world: &W, plan: &ReleasePlan) -> Result<Result<AttestedRelease, Refusal>, Error> {
    write_release(world, &AttestedNodeRelease(plan), &plan.node_name).await
}

/// The attested release as [`write_release`] runs it: no check right before the write (the leader
/// check came before the Node was read, A3), and the Lease read again right after it, as the BMC
/// release does.
struct AttestedNodeRelease<'a>(&'a ReleasePlan);

impl<W: World> NodeRelease<W> for AttestedNodeRelease<'_> {
    type Done = AttestedRelease;
    type Refusal = Refusal;
    /// The Lease as read before the write, and when the release was decided.
    type Read = (Option<Option<Timestamp>>, Timestamp);

    async fn decide(&self, world: &W) -> Result<Before<AttestedRelease, Refusal, Self::Read>, Error> {
        let plan = self.0;
        let node = world.node(&plan.node_name).await?;
        let lease = world.node_lease(&plan.node_name).await?;
        if let Err(refusal) = attestation::recheck_node(plan, node.as_ref(), lease) {
            return Ok(Before::Refused(refusal));
        }
        let Some(node) = node else { return Ok(Before::Again) };
        if let Some(done) = attestation::release_on_node(&node, &plan.remediation, &plan.remediation_uid, lease, None) {
            return Ok(Before::Done(done));
        }
        let now = world.now();
        Ok(match taints::with_taint(&node, CoronerTaint::OutOfService, &plan.remediation_uid, now) {
            Some(updated) => Before::Write { node: Box::new(node), updated: Box::new(updated), read: (lease, now) },
            None => Before::Again,
        })
    }

    async fn may_write(&self, _world: &W) -> Result<Result<(), Refusal>, Error> {
        Ok(Ok(()))
    }

    fn refused(&self, error: ApiError) -> Result<Refusal, ApiError> {
        Err(error)
    }

    async fn written(
        &self,
        world: &W,
        written: &Node,
        (lease, now): Self::Read,
    ) -> Result<After<AttestedRelease, Refusal>, Error> {
        let plan = self.0;
        let Some(done) =
            attestation::release_on_node(written, &plan.remediation, &plan.remediation_uid, lease, Some(now))
        else {
            return Ok(After::Again);
        };
        // A3: the Lease read again right after the update, as the BMC release does.
        let after = world.node_lease(&plan.node_name).await?;
        if let Err(refusal) = attestation::lease_held_after_release(plan, after) {
            take_back(world, plan).await?;
            return Ok(After::Refused(refusal));
        }
        Ok(After::Done(done))
    }
}

/// Removes the out-of-service taint the remediation owns (a release whose owner is gone, or whose
/// node showed life right after it).
async fn take_back<W: World>(world: &W, plan: &ReleasePlan) -> Result<(), Error> {
    take_back_owned(world, &plan.node_name, &plan.remediation_uid).await
}

async fn take_back_owned<W: World>(world: &W, node: &str, remediation_uid: &str) -> Result<(), Error> {
    update_node(world, node, |node| taints::without_owned(node, &[CoronerTaint::OutOfService], remediation_uid))
        .await
        .map(drop)
}
