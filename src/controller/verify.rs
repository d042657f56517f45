//! The CoronerVerification controller: answers `coroner verify` from the leader, which has the
//! network path and the credentials. For each node it reads the BMC as the binding verifier does
//! (one request per BMC origin at a time, a few nodes at once, no storm slot, never a power action)
//! and evaluates the fence's gates with the node taken as dead ([`crate::verify`]). A verification is
//! deleted an hour after it is done.

use std::{sync::Arc, time::Duration as StdDuration};

use futures::{StreamExt, stream};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::{
    api::core::v1::{Node, Pod},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
    runtime::{Controller, controller::Action, watcher},
};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{Context, Error};
use crate::{
    api::{
        BmcBinding, CoronerRemediation, CoronerRemediationSpec, CoronerRemediationTemplate, CoronerVerification,
        CoronerVerificationStatus, FetchedCertificate, NodeVerification, VerificationPhase,
    },
    contract,
    driver::ports::Target,
    gates::{self, GateInputs, LeaseSighting},
    verification::Check,
    verify,
};

/// At most this many endpoints of `fetchCertificates` are read per verification (the schema's limit).
const MAX_FETCHED: usize = 50;
/// How long an answered verification stays.
const KEPT: StdDuration = StdDuration::from_secs(3600);
/// Nodes checked at once within one verification.
const AT_ONCE: usize = 4;

pub(super) async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let verifications: Api<CoronerVerification> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    Controller::new(verifications, watcher::Config::default())
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile, super::error_policy, ctx.clone())
        .for_each(super::settle(&ctx))
        .await;
}

async fn reconcile(verification: Arc<CoronerVerification>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<CoronerVerification> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    let name = verification.name_any();
    let status = verification.status.clone().unwrap_or_default();
    if let Some(done) = status.completed_at.as_ref().map(|t| t.0) {
        let expires = done + SignedDuration::try_from(KEPT).unwrap_or_default();
        let now = Timestamp::now();
        if now >= expires {
            api.delete(&name, &DeleteParams::default()).await?;
            return Ok(Action::await_change());
        }
        return Ok(Action::requeue(StdDuration::try_from(expires.duration_since(now)).unwrap_or_default()));
    }
    let mut status = CoronerVerificationStatus { phase: Some(VerificationPhase::Running), ..status };
    status.certificates = first_contacts(&ctx, &verification.spec.fetch_certificates).await;
    let nodes: Vec<Node> = Api::<Node>::all(ctx.client.clone()).list(&ListParams::default()).await?.items;
    let (targets, unselected) = match targets(&ctx, &verification, &nodes).await {
        Ok(found) => found,
        Err(why) => {
            status.phase = Some(VerificationPhase::Failed);
            status.message = Some(why);
            status.completed_at = Some(Time(Timestamp::now()));
            write(&api, &name, &status).await?;
            return Ok(Action::requeue(KEPT));
        }
    };
    status.total = u32::try_from(targets.len()).unwrap_or(u32::MAX);
    status.unselected = unselected;
    let cluster = Cluster::read(&ctx).await?;
    let mut answers = Vec::with_capacity(targets.len());
    let (cluster, nodes, ctx) = (&cluster, &nodes, &*ctx);
    let mut checks = stream::iter(targets)
        .map(|(node, spec)| async move { cluster.answer(ctx, nodes, &node, &spec).await })
        .buffered(AT_ONCE);
    while let Some(answer) = checks.next().await {
        answers.push(answer?);
        status.checked = u32::try_from(answers.len()).unwrap_or(u32::MAX);
        // Progress for large fleets, every few nodes.
        if answers.len() % 10 == 0 {
            status.nodes.clone_from(&answers);
            write(&api, &name, &status).await?;
        }
    }
    status.nodes = answers;
    status.phase = Some(VerificationPhase::Done);
    status.completed_at = Some(Time(Timestamp::now()));
    write(&api, &name, &status).await?;
    let refused = status.nodes.iter().filter(|n| !n.would_fence).count();
    info!(verification = %name, nodes = status.nodes.len(), refused, "verification answered");
    Ok(Action::requeue(KEPT))
}

/// The certificates of `endpoints`, each read at first contact under its origin's turn (a fence's
/// request to the same BMC goes first or after, never alongside).
async fn first_contacts(ctx: &Context, endpoints: &[String]) -> Vec<FetchedCertificate> {
    let mut found: Vec<FetchedCertificate> = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints.iter().take(MAX_FETCHED) {
        if found.iter().any(|f| &f.endpoint == endpoint) {
            continue;
        }
        let _turn = ctx.local.origins.turn(&gates::origin(endpoint)).await;
        let read = crate::bmc::tls::first_contact(endpoint, ctx.settings.bmc.request_timeout).await;
        // Anyone who may create a verification may name any endpoint: the answer says whether a
        // certificate was read, not why not (refused, filtered, no TLS), which would map the network
        // from where the controller stands. The controller's log has the cause.
        let (sha256, error) = match read {
            Ok(sha256) => (Some(crate::bmc::tls::format_fingerprint(&sha256)), None),
            Err(why) => {
                info!(%endpoint, "no certificate at first contact: {why}");
                (None, Some("no TLS certificate could be read from it within the BMC request timeout".to_owned()))
            }
        };
        found.push(FetchedCertificate {
            endpoint: endpoint.clone(),
            sha256,
            error,
            fetched_at: Some(Time(Timestamp::now())),
        });
    }
    found
}

async fn write(api: &Api<CoronerVerification>, name: &str, status: &CoronerVerificationStatus) -> Result<(), Error> {
    let patch = serde_json::json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// The nodes to check, in order (those named, then those the NodeHealthChecks using a coroner
/// template select), each with the remediation spec its template would give; and, with `all`, the
/// other nodes. `Err`: the NodeHealthChecks could not be read.
async fn targets(
    ctx: &Context,
    verification: &CoronerVerification,
    nodes: &[Node],
) -> Result<(Vec<(String, CoronerRemediationSpec)>, Vec<String>), String> {
    let nhcs = crate::cluster::node_health_checks(&ctx.client)
        .await
        .map_err(|e| format!("cannot list NodeHealthChecks: {e}"))?;
    let (selected, unselected) = verify::selection(&nhcs, nodes.iter().map(|n| &n.metadata));
    let mut wanted: Vec<String> = verification.spec.nodes.clone();
    if verification.spec.all {
        wanted.extend(selected.keys().filter(|n| !verification.spec.nodes.contains(n)).cloned());
    }
    let mut targets = Vec::with_capacity(wanted.len());
    for node in wanted {
        let spec = match selected.get(&node) {
            Some(template) => Api::<CoronerRemediationTemplate>::namespaced(ctx.client.clone(), &template.namespace)
                .get_opt(&template.name)
                .await
                .map_err(|e| {
                    format!("cannot read CoronerRemediationTemplate {}/{}: {e}", template.namespace, template.name)
                })?
                .map(|t| t.spec.template.spec)
                .unwrap_or_default(),
            None => CoronerRemediationSpec::default(),
        };
        targets.push((node, spec));
    }
    Ok((targets, if verification.spec.all { unselected } else { Vec::new() }))
}

/// What the gates read besides the node, once per verification.
struct Cluster {
    bindings: Vec<BmcBinding>,
    remediations: Vec<CoronerRemediation>,
    etcd_pods: Vec<Pod>,
    recent: Vec<Timestamp>,
}

impl Cluster {
    async fn read(ctx: &Context) -> Result<Self, Error> {
        let namespace = ctx.namespace();
        let bindings =
            Api::<BmcBinding>::namespaced(ctx.client.clone(), namespace).list(&ListParams::default()).await?;
        let remediations =
            Api::<CoronerRemediation>::namespaced(ctx.client.clone(), namespace).list(&ListParams::default()).await?;
        let etcd = Api::<Pod>::namespaced(ctx.client.clone(), "kube-system")
            .list(&ListParams::default().labels("component=etcd"))
            .await?;
        let recent = ctx.local.admissions.lock().await.times.values().copied().collect();
        Ok(Self { bindings: bindings.items, remediations: remediations.items, etcd_pods: etcd.items, recent })
    }

    /// One node's answer: its BMC as the binding verifier reads it (under the origin's turn), and the
    /// gates with the node taken as dead.
    async fn answer(
        &self,
        ctx: &Context,
        nodes: &[Node],
        name: &str,
        spec: &CoronerRemediationSpec,
    ) -> Result<NodeVerification, Error> {
        let named: Vec<&BmcBinding> = self.bindings.iter().filter(|b| b.spec.node_name == name).collect();
        let Some(node) = nodes.iter().find(|n| n.name_any() == name) else {
            return Ok(NodeVerification {
                node: name.to_owned(),
                why_not: Some("no such node".into()),
                ..NodeVerification::default()
            });
        };
        let check = match named.as_slice() {
            [binding] => Some(self.read_bmc(ctx, binding).await?),
            _ => None,
        };
        let dead = verify::as_if_dead(node);
        let others: Vec<Node> =
            nodes.iter().map(|n| if n.name_any() == name { dead.clone() } else { n.clone() }).collect();
        let remediation = CoronerRemediation {
            metadata: ObjectMeta {
                name: Some(format!("verify-{name}")),
                uid: Some(format!("verify-{name}")),
                annotations: Some([(contract::NODE_NAME_ANNOTATION.to_owned(), name.to_owned())].into()),
                creation_timestamp: Some(Time(Timestamp::now())),
                ..ObjectMeta::default()
            },
            spec: spec.clone(),
            status: None,
        };
        let inputs = GateInputs {
            remediation: &remediation,
            node: &dead,
            namespace: ctx.namespace(),
            now: Timestamp::now(),
            lease: LeaseSighting::Missing,
            bindings: &self.bindings,
            nodes: &others,
            etcd_pods: &self.etcd_pods,
            remediations: &self.remediations,
            recent_admissions: &self.recent,
            limits: ctx.settings.limits,
        };
        Ok(verify::answer(name, &named, check.as_ref(), &gates::evaluate(&inputs)))
    }

    /// The binding verifier's reading of `binding`'s BMC, one request per origin at a time.
    async fn read_bmc(&self, ctx: &Context, binding: &BmcBinding) -> Result<Check, Error> {
        let conflicts = gates::binding_conflicts(&self.bindings).remove(&binding.name_any()).unwrap_or_default();
        if let Some(conflict) = conflicts.iter().find(|c| matches!(c, gates::Conflict::SameNode { .. })) {
            return Ok(Check::Conflict(conflict.to_string()));
        }
        let origin = match ctx.clients.client(&ctx.client, binding).await? {
            Ok(client) => client.0.origin(),
            Err(unusable) => return Ok(Check::Invalid(unusable.to_string())),
        };
        let _turn = ctx.local.origins.turn(&origin).await;
        Ok(crate::driver::verifier::identify(ctx, binding, &self.bindings).await?.0)
    }
}
