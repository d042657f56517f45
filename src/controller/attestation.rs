//! The CoronerAttestation controller: reads what the preconditions look at, asks
//! [`attestation::evaluate`] (pure), and writes what it decided. A release is, in this order: the
//! attestation's status `Releasing` (under its resourceVersion: a deletion before it cancels), the
//! release recorded on the remediation (under its resourceVersion; the remediation then wants the
//! taint, so it never removes it), the leader check, then one Node update under the Node's
//! resourceVersion that re-checks the node and adds the out-of-service taint owned by the remediation
//! ([`driver::attested::release_node`], over the fence loop's traits). A refusal in that update
//! withdraws the record; success confirms it.

use std::{sync::Arc, time::Duration as StdDuration};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    core::v1::{Node, Pod},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ListParams, PostParams},
    runtime::{Controller, controller::Action, reflector::ObjectRef, watcher},
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Context, Error};
use crate::{
    api::conditions,
    api::{
        AttestationPhase, AttestedRelease, BmcBinding, CoronerAttestation, CoronerAttestationStatus,
        CoronerRemediation, CoronerRemediationStatus,
    },
    attestation::{
        self, AttestationReason, ClusterView, Dangling, Evaluation, Inputs, RELEASED, Refusal, ReleasePlan, Verdict,
    },
    cluster, contract,
    driver::{self, Admissions, ports::Events},
    fence::Notice,
};

/// How often a waiting attestation is checked again (sooner when it expires first).
const RECHECK: StdDuration = StdDuration::from_secs(5);
/// A remediation whose status changes this often under the record is being written by something else.
const MAX_CONFLICTS: u32 = 10;

/// Runs the controller until `stop`: first settles release records a stopped coroner left half-way.
pub(super) async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    if let Err(error) = settle_dangling_records(&ctx).await {
        warn!(%error, "could not check the remediations for half-written attested releases; retried at the next start");
    }
    let client = ctx.client.clone();
    let attestations: Api<CoronerAttestation> = Api::namespaced(client.clone(), ctx.namespace());
    let controller = Controller::new(attestations, watcher::Config::default());
    let store = controller.store();
    // A remediation change (its fence failing, NHC deleting it) wakes the attestations for its node.
    controller
        .watches(
            Api::<CoronerRemediation>::namespaced(client, ctx.namespace()),
            watcher::Config::default(),
            move |remediation: CoronerRemediation| {
                let node = contract::node_name(&remediation.metadata).map(str::to_owned);
                store
                    .state()
                    .into_iter()
                    .filter(|a| Some(&a.spec.node_name) == node.as_ref())
                    .map(|a| ObjectRef::from_obj(&*a))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile, super::error_policy, ctx.clone())
        .for_each(super::settle(&ctx))
        .await;
}

fn phase_of(attestation: &CoronerAttestation) -> AttestationPhase {
    attestation.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
}

async fn reconcile(cached: Arc<CoronerAttestation>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<CoronerAttestation> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    // The cache may trail coroner's own last status write.
    let Some(attestation) = api.get_opt(&cached.name_any()).await? else { return Ok(Action::await_change()) };
    if attestation.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let mut admissions = ctx.local.admissions.lock().await;
    match phase_of(&attestation) {
        AttestationPhase::Released => {
            // Each attested release keeps its slot of the fence window, also across restarts.
            if let (Some(uid), Some(released)) =
                (attestation.uid(), attestation.status.as_ref().and_then(|s| s.released.as_ref()))
            {
                admissions.times.entry(uid).or_insert(released.released_at.0);
            }
            return Ok(Action::await_change());
        }
        AttestationPhase::Refused => return Ok(Action::await_change()),
        AttestationPhase::Pending | AttestationPhase::Releasing => {}
    }
    let seen = Seen::read(&ctx, &attestation, &mut admissions).await?;
    let now = Timestamp::now();
    if let Some(done) = seen.release_already_on_node(&attestation) {
        // A coroner stopped after the Node update: the release stands; only its records are missing.
        return finish(&ctx, &api, &attestation, done.0, &done.1, &mut admissions).await;
    }
    let evaluation = seen.evaluate(&ctx, &attestation, now);
    match evaluation.verdict.clone() {
        Verdict::Release(plan) => release(&ctx, &api, &attestation, &evaluation, &plan, &mut admissions).await,
        Verdict::Wait(refusal) | Verdict::Refuse(refusal) => {
            drop(admissions);
            if refusal.is_final()
                && let Some(remediation) = evaluation.remediation
            {
                withdraw(&ctx, &remediation.name_any(), &attestation.uid().unwrap_or_default()).await?;
            }
            refuse(&ctx, &api, &attestation, &evaluation, &refusal, now).await
        }
    }
}

/// Everything the preconditions look at, read afresh.
struct Seen {
    policies: Option<(Vec<ValidatingAdmissionPolicy>, Vec<ValidatingAdmissionPolicyBinding>)>,
    remediations: Vec<CoronerRemediation>,
    node: Option<Node>,
    lease: Option<Option<Timestamp>>,
    nodes: Vec<Node>,
    etcd_pods: Vec<Pod>,
    bmc_bindings: Vec<BmcBinding>,
    /// When fences were admitted and attestations released (the fence window).
    recent: Vec<Timestamp>,
}

impl Seen {
    async fn read(ctx: &Context, attestation: &CoronerAttestation, admissions: &mut Admissions) -> Result<Self, Error> {
        let client = &ctx.client;
        let node_name = &attestation.spec.node_name;
        let remediations = Api::<CoronerRemediation>::namespaced(client.clone(), ctx.namespace())
            .list(&ListParams::default())
            .await?
            .items;
        // The fence window counts every admission the remediations record, as the fence's admission does.
        for r in &remediations {
            if let (Some(uid), Some(node)) =
                (r.uid(), r.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()))
            {
                admissions.times.insert(uid, node.admitted_at.0);
            }
        }
        let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
        Ok(Self {
            recent: admissions.times.values().copied().collect(),
            policies: read_policies(client).await?,
            node: nodes.iter().find(|n| &n.name_any() == node_name).cloned(),
            lease: cluster::node_lease(client, node_name).await?,
            etcd_pods: Api::<Pod>::namespaced(client.clone(), "kube-system")
                .list(&ListParams::default().labels("component=etcd"))
                .await?
                .items,
            bmc_bindings: Api::<BmcBinding>::namespaced(client.clone(), ctx.namespace())
                .list(&ListParams::default())
                .await?
                .items,
            remediations,
            nodes,
        })
    }

    fn evaluate<'a>(&'a self, ctx: &'a Context, attestation: &'a CoronerAttestation, now: Timestamp) -> Evaluation<'a> {
        let inputs = Inputs {
            attestation,
            now,
            policies: self.policies.as_ref().map(|(p, b)| (p.as_slice(), b.as_slice())),
            remediations: &self.remediations,
            node: self.node.as_ref(),
            lease: self.lease,
            sighting: Some(ctx.leases.sighting(&attestation.spec.node_name, ctx.started.elapsed())),
            cluster: Some(ClusterView {
                namespace: ctx.namespace(),
                nodes: &self.nodes,
                etcd_pods: &self.etcd_pods,
                bmc_bindings: &self.bmc_bindings,
                recent_admissions: &self.recent,
                limits: ctx.settings.limits,
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

/// Every ValidatingAdmissionPolicy and binding. A cluster without the v1 API (before 1.30) or an RBAC
/// that hides them reads as none: attestations are then ignored (AttestationPolicyMissing).
async fn read_policies(
    client: &Client,
) -> Result<Option<(Vec<ValidatingAdmissionPolicy>, Vec<ValidatingAdmissionPolicyBinding>)>, Error> {
    let hidden = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 403 || s.code == 404);
    let policies = match Api::<ValidatingAdmissionPolicy>::all(client.clone()).list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) if hidden(&e) => {
            warn!(error = %e, "cannot list ValidatingAdmissionPolicies: attestations are ignored");
            Vec::new()
        }
        Err(e) => return Err(e.into()),
    };
    let bindings = match Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).list(&ListParams::default()).await
    {
        Ok(list) => list.items,
        Err(e) if hidden(&e) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    Ok(Some((policies, bindings)))
}

fn remediations_api(ctx: &Context) -> Api<CoronerRemediation> {
    Api::namespaced(ctx.client.clone(), ctx.namespace())
}

/// Writes the attestation's status under the resourceVersion it was read at.
async fn write_status(
    api: &Api<CoronerAttestation>,
    attestation: &CoronerAttestation,
    status: CoronerAttestationStatus,
) -> Result<CoronerAttestation, kube::Error> {
    let mut updated = attestation.clone();
    updated.status = Some(status);
    api.replace_status(&attestation.name_any(), &PostParams::default(), &updated).await
}

/// A waiting or final refusal: the condition, the list of checks, and an Event when the reason changed.
async fn refuse(
    ctx: &Context,
    api: &Api<CoronerAttestation>,
    attestation: &CoronerAttestation,
    evaluation: &Evaluation<'_>,
    refusal: &Refusal,
    now: Timestamp,
) -> Result<Action, Error> {
    let old = attestation.status.clone().unwrap_or_default();
    let mut status = attestation::refused_status(&old, &evaluation.checks, refusal, now);
    let reason_changed =
        conditions::find(&old.conditions, RELEASED).is_none_or(|c| c.reason != refusal.reason.as_str());
    if attestation::status_changed(&old, &status) {
        status.last_checked_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now));
        write_status(api, attestation, status).await?;
    }
    if reason_changed {
        info!(attestation = %attestation.name_any(), node = %attestation.spec.node_name, %refusal, "attestation not released");
        let notice = Notice { warning: true, reason: refusal.reason.as_str().into(), message: refusal.message.clone() };
        ctx.publish(&attestation.object_ref(&()), &notice, "Attest").await;
    }
    if refusal.is_final() {
        return Ok(Action::await_change());
    }
    let created = attestation.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    let expires = created + attestation.spec.valid_for.get();
    let until_expiry = StdDuration::try_from(expires.duration_since(now)).unwrap_or_default();
    Ok(Action::requeue(RECHECK.min(until_expiry + StdDuration::from_millis(100))))
}

/// The release, as the module documentation describes it.
async fn release(
    ctx: &Context,
    api: &Api<CoronerAttestation>,
    attestation: &CoronerAttestation,
    evaluation: &Evaluation<'_>,
    plan: &ReleasePlan,
    admissions: &mut Admissions,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let old = attestation.status.clone().unwrap_or_default();
    let attestation =
        write_status(api, attestation, attestation::releasing_status(&old, &evaluation.checks, plan, now)).await?;
    let uid = attestation.uid().unwrap_or_default();
    let remediation = evaluation.remediation.ok_or(Error::Fence(driver::Error::Incomplete("remediation")))?;
    if attestation::attested_record(remediation, &uid).is_none() {
        let status =
            attestation::record_release(&remediation.status.clone().unwrap_or_default(), &attestation, plan, now);
        cluster::persist_status(&remediations_api(ctx), remediation, status).await?;
    }
    // Deleting the attestation until now cancels the release.
    let current = api.get_opt(&attestation.name_any()).await?;
    if current
        .as_ref()
        .is_none_or(|c| c.uid().as_deref() != Some(uid.as_str()) || c.metadata.deletion_timestamp.is_some())
    {
        info!(attestation = %attestation.name_any(), "attestation deleted before the release; nothing released");
        withdraw(ctx, &plan.remediation, &uid).await?;
        return Ok(Action::await_change());
    }
    if let Some(election) = &ctx.settings.election
        && let Err(why) = election.ensure_leader(&ctx.client, ctx.settings.bmc.request_timeout).await
    {
        withdraw(ctx, &plan.remediation, &uid).await?;
        return Err(Error::Fence(driver::Error::NotLeader(why)));
    }
    match driver::attested::release_node(ctx, plan).await? {
        Err(refusal) => {
            withdraw(ctx, &plan.remediation, &uid).await?;
            let status = attestation::refused_status(
                &attestation.status.clone().unwrap_or_default(),
                &evaluation.checks,
                &refusal,
                Timestamp::now(),
            );
            write_status(api, &attestation, status).await?;
            let notice =
                Notice { warning: true, reason: refusal.reason.as_str().into(), message: refusal.message.clone() };
            ctx.publish(&attestation.object_ref(&()), &notice, "Attest").await;
            Ok(if refusal.is_final() { Action::await_change() } else { Action::requeue(RECHECK) })
        }
        Ok(released) => {
            let current = remediations_api(ctx).get_opt(&plan.remediation).await?;
            if current.as_ref().is_none_or(|r| r.metadata.deletion_timestamp.is_some()) {
                // NodeHealthCheck deleted the remediation meanwhile: its finalizer may have run before
                // the taint arrived. Take it back; nothing may outlive its owner.
                driver::attested::take_back(ctx, plan).await?;
                let refusal = Refusal {
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
                    Timestamp::now(),
                );
                write_status(api, &attestation, status).await?;
                return Ok(Action::await_change());
            }
            let remediation = current.ok_or(Error::Fence(driver::Error::Incomplete("remediation")))?;
            finish(ctx, api, &attestation, remediation, &released, admissions).await
        }
    }
}

/// The release is on the Node: confirm the remediation's record, take the window slot, mark the
/// attestation Released and announce it on the remediation, the Node and the attestation.
async fn finish(
    ctx: &Context,
    api: &Api<CoronerAttestation>,
    attestation: &CoronerAttestation,
    remediation: CoronerRemediation,
    released: &AttestedRelease,
    admissions: &mut Admissions,
) -> Result<Action, Error> {
    update_remediation_status(ctx, &remediation.name_any(), |status| {
        let record = status.evidence.as_ref()?.release.as_ref()?.attestation.as_ref()?;
        (record.state != crate::api::AttestedReleaseState::Released)
            .then(|| attestation::confirm_release(status, released))
    })
    .await?;
    if let Some(uid) = attestation.uid() {
        admissions.times.insert(uid, released.released_at.0);
    }
    if let Err(error) = mark_attestation_released(api, attestation, released).await {
        // The release and its record on the remediation stand; the attestation may have been deleted.
        warn!(%error, attestation = %attestation.name_any(), "released, but could not mark the attestation Released");
    }
    let message = attestation::release_message(attestation);
    info!(attestation = %attestation.name_any(), node = %attestation.spec.node_name, remediation = %remediation.name_any(), "{message}");
    let notice = Notice { warning: true, reason: "OperatorAttested".into(), message };
    ctx.publish(&remediation.object_ref(&()), &notice, "Release").await;
    let node_ref = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(attestation.spec.node_name.clone()),
        uid: Some(released.node_uid.clone()),
        ..Default::default()
    };
    ctx.publish(&node_ref, &notice, "Release").await;
    let done = Notice {
        warning: false,
        reason: "Released".into(),
        message: format!("node {} released through remediation {}", attestation.spec.node_name, remediation.name_any()),
    };
    ctx.publish(&attestation.object_ref(&()), &done, "Release").await;
    Ok(Action::await_change())
}

/// Marks the attestation Released, reading it again after a conflict (a label added meanwhile).
async fn mark_attestation_released(
    api: &Api<CoronerAttestation>,
    attestation: &CoronerAttestation,
    released: &AttestedRelease,
) -> Result<(), kube::Error> {
    let mut current = attestation.clone();
    for _ in 0..MAX_CONFLICTS {
        let status =
            attestation::released_status(&current.status.clone().unwrap_or_default(), released, Timestamp::now());
        match write_status(api, &current, status).await {
            Err(kube::Error::Api(s)) if s.code == 409 => match api.get_opt(&attestation.name_any()).await? {
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
async fn update_remediation_status(
    ctx: &Context,
    name: &str,
    change: impl Fn(&CoronerRemediationStatus) -> Option<CoronerRemediationStatus>,
) -> Result<(), Error> {
    let api = remediations_api(ctx);
    for _ in 0..MAX_CONFLICTS {
        let Some(remediation) = api.get_opt(name).await? else { return Ok(()) };
        let Some(status) = change(&remediation.status.clone().unwrap_or_default()) else { return Ok(()) };
        match cluster::persist_status(&api, &remediation, status).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Fence(driver::Error::StatusConflicts(MAX_CONFLICTS)))
}

/// Withdraws this attestation's `Releasing` record from the remediation: its release did not happen.
async fn withdraw(ctx: &Context, remediation: &str, attestation_uid: &str) -> Result<(), Error> {
    update_remediation_status(ctx, remediation, |status| attestation::withdraw_release(status, attestation_uid)).await
}

/// At start: a `Releasing` record on a remediation is confirmed when its taint is on the node, and
/// withdrawn when its attestation is gone and the taint is not there (the release never happened).
async fn settle_dangling_records(ctx: &Context) -> Result<(), Error> {
    let remediations = remediations_api(ctx).list(&ListParams::default()).await?.items;
    let attestations = Api::<CoronerAttestation>::namespaced(ctx.client.clone(), ctx.namespace())
        .list(&ListParams::default())
        .await?
        .items;
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    for remediation in &remediations {
        let Some(record) =
            remediation.status.as_ref().and_then(|s| s.evidence.as_ref()?.release.as_ref()?.attestation.clone())
        else {
            continue;
        };
        let exists = attestations.iter().any(|a| a.uid().as_deref() == Some(record.uid.as_str()));
        let node = match contract::node_name(&remediation.metadata) {
            Some(name) => nodes.get_opt(name).await?,
            None => None,
        };
        match attestation::dangling_record(remediation, exists, node.as_ref()) {
            Dangling::Keep => {}
            Dangling::Confirm => {
                info!(remediation = %remediation.name_any(), attestation = %record.name, "attested release found on the node; recorded as done");
                update_remediation_status(ctx, &remediation.name_any(), attestation::mark_released).await?;
            }
            Dangling::Withdraw => {
                info!(remediation = %remediation.name_any(), attestation = %record.name, "attestation deleted before its release; its record is withdrawn");
                withdraw(ctx, &remediation.name_any(), &record.uid).await?;
            }
        }
    }
    Ok(())
}
