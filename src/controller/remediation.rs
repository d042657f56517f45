//! One reconcile of a `CoronerRemediation`: observe what the state machine asks for, decide (pure),
//! persist the decision under a resourceVersion precondition, and only then act on the BMC.

use std::{sync::Arc, time::Duration as StdDuration};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Resource, ResourceExt,
    api::ListParams,
    runtime::{controller::Action, finalizer},
};
use tracing::{Instrument, debug, info, info_span};

use super::{Admissions, Context, Error};
use crate::{
    api::{
        BmcBinding, BmcBindingStatus, CoronerRemediation, CoronerRemediationStatus, Phase, RemediationStrategy,
        conditions,
    },
    bmc::{self, Bmc, RedfishClient, RedfishConfig, SystemReading},
    cluster::{self, BindingError},
    contract::{self, Reason},
    fence::{
        self, BmcFailure, Decision, IdentityFound, IdentityProblem, NodeSnapshot, Notice, Observation, Plan,
        PowerReading, Verdict,
    },
    gates::{self, Gate, GateInputs},
    identity::Claim,
};

/// Steps one reconcile may take back to back (admission → identity → first reading …).
const MAX_STEPS: usize = 8;

pub async fn reconcile(remediation: Arc<CoronerRemediation>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<CoronerRemediation> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let node = contract::node_name(&remediation.metadata).unwrap_or_default().to_owned();
    let span = info_span!("remediation", name = %remediation.name_any(), node = %node);
    finalizer::finalizer(&api, contract::FINALIZER, remediation, |event| async {
        match event {
            finalizer::Event::Apply(remediation) => Fence::load(&ctx, &remediation).await?.run().await,
            finalizer::Event::Cleanup(remediation) => cleanup(&ctx, &remediation).await,
        }
    })
    .instrument(span)
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// The finalizer: remove the taints this remediation owns (if the node still exists), then let go.
async fn cleanup(ctx: &Context, remediation: &CoronerRemediation) -> Result<Action, Error> {
    let uid = remediation.uid().ok_or(Error::Incomplete("uid"))?;
    if let Some(node) = contract::node_name(&remediation.metadata) {
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        cluster::remove_owned_taints(&nodes, node, &uid).await?;
        info!(node, "removed the taints this remediation owned");
    }
    Ok(Action::await_change())
}

/// One remediation being worked on in this reconcile.
struct Fence<'a> {
    ctx: &'a Context,
    api: Api<CoronerRemediation>,
    nodes: Api<Node>,
    /// The latest version read or written; status writes carry its resourceVersion.
    remediation: CoronerRemediation,
    node_name: String,
    uid: String,
}

impl<'a> Fence<'a> {
    /// Reads the remediation afresh: the cache may trail coroner's own last status write.
    async fn load(ctx: &'a Context, cached: &CoronerRemediation) -> Result<Self, Error> {
        let api: Api<CoronerRemediation> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        let remediation = api.get(&cached.name_any()).await?;
        let node_name = contract::node_name(&remediation.metadata).ok_or(Error::Incomplete("node name"))?.to_owned();
        let uid = remediation.uid().ok_or(Error::Incomplete("uid"))?;
        Ok(Self { ctx, api, nodes: Api::all(ctx.client.clone()), remediation, node_name, uid })
    }

    fn status(&self) -> CoronerRemediationStatus {
        self.remediation.status.clone().unwrap_or_default()
    }

    async fn run(mut self) -> Result<Action, Error> {
        let now = Timestamp::now();
        if contract::timed_out_by_nhc(&self.remediation.metadata) {
            if let Some(decision) = fence::timed_out(&self.status(), now) {
                self.commit(decision, None).await?;
            }
            return self.settle_taints().await.map(|()| Action::await_change());
        }
        let Some(node) = self.nodes.get_opt(&self.node_name).await? else {
            if let Some(decision) = fence::node_missing(&self.status(), &self.node_name, now) {
                self.commit(decision, None).await?;
            }
            return Ok(Action::await_change());
        };
        if let Some(decision) = fence::start(&self.status(), &self.node_name, now) {
            self.commit(decision, Some(&node)).await?;
        }
        let mut node = node;
        for _ in 0..MAX_STEPS {
            let lease = cluster::node_lease(&self.ctx.client, &self.node_name).await?;
            let snapshot = NodeSnapshot::new(&node, lease, &self.uid);
            let now = Timestamp::now();
            let spec = self.remediation.spec.clone();
            let hold = match gates::lease_stale(
                self.ctx.leases.sighting(&self.node_name, now),
                now,
                spec.lease_freshness.get(),
            ) {
                Gate::Wait(reason, message) | Gate::Refuse(reason, message) => Some((reason, message)),
                Gate::Admit => None,
            };
            let context =
                fence::Context { now, instance: &self.ctx.instance, node: &snapshot, hold_power_action: hold.as_ref() };
            let status = self.status();
            let plan = fence::plan(&spec, &status, context);
            debug!(phase = fence::phase_of(&status).as_str(), ?plan, "step");
            // Admissions are serialised: the storm limits count what the others already took.
            let mut admissions = match plan {
                Plan::Admit => Some(self.ctx.admissions.lock().await),
                _ => None,
            };
            let gathered = match admissions.as_deref_mut() {
                Some(history) => {
                    Gathered::Plain(Observation::Admission(self.admission(&node, &snapshot, now, history).await?))
                }
                None => self.observe(&plan, &snapshot).await?,
            };
            let (observation, system) = gathered.split();
            let identity_observed = matches!(observation, Observation::Identity(_)).then(|| observation.clone());
            let decision = fence::next(&spec, &status, observation, context);
            let requeue = decision.requeue;
            let reset = decision.reset;
            self.commit(decision, Some(&node)).await?;
            if let Some(history) = admissions.as_deref_mut()
                && fence::phase_of(&self.status()) == Phase::VerifyingIdentity
            {
                history.times.push(now);
            }
            drop(admissions);
            if let Some(Observation::Identity(found)) = identity_observed {
                self.record_verification(&found).await;
            }
            if let Some(reset) = reset {
                self.send_reset(reset, system, &snapshot, &node).await?;
            }
            self.settle_taints().await?;
            match requeue {
                Some(StdDuration::ZERO) => {
                    node = self.nodes.get_opt(&self.node_name).await?.unwrap_or(node);
                }
                Some(after) => return Ok(Action::requeue(after)),
                None => return Ok(Action::await_change()),
            }
        }
        Ok(Action::requeue(StdDuration::from_millis(100)))
    }

    /// Gathers what `plan` asks for (admission aside). A power reading keeps the system it read, for
    /// the reset that may follow.
    async fn observe(&self, plan: &Plan, snapshot: &NodeSnapshot) -> Result<Gathered, Error> {
        Ok(match plan {
            Plan::Wait(_) | Plan::Admit => Gathered::Plain(Observation::Wait),
            Plan::Idle => Gathered::Plain(Observation::Nothing),
            Plan::VerifyIdentity => Gathered::Plain(Observation::Identity(self.identity(snapshot).await?)),
            Plan::ReadPower { system_path } => {
                let reading = match self.client_for_fence().await? {
                    Ok(client) => client.system(system_path).await.map_err(|e| BmcFailure::from(&e)),
                    Err(failure) => Err(failure),
                };
                Gathered::Reading(reading)
            }
            Plan::Release => {
                let (spec, status) = (&self.remediation.spec, self.status());
                let (client, node, uid) = (&self.ctx.client, &self.node_name, &self.uid);
                Gathered::Plain(Observation::Release(match spec.remediation_strategy {
                    RemediationStrategy::OutOfServiceTaint => {
                        cluster::release_with_taint(client, spec, &status, node, uid).await?
                    }
                    RemediationStrategy::ResourceDeletion => {
                        cluster::release_by_deletion(client, spec, &status, node, uid).await?
                    }
                }))
            }
            Plan::CheckWorkloads => {
                Gathered::Plain(Observation::Workloads(cluster::workloads(&self.ctx.client, &self.node_name).await?))
            }
        })
    }

    async fn bindings_for_node(&self) -> Result<Vec<BmcBinding>, Error> {
        let api: Api<BmcBinding> = Api::namespaced(self.ctx.client.clone(), &self.ctx.namespace);
        let all = api.list(&ListParams::default()).await?.items;
        Ok(all.into_iter().filter(|b| b.spec.node_name == self.node_name).collect())
    }

    /// Runs the gates on fresh reads of everything they look at.
    async fn admission(
        &self,
        node: &Node,
        snapshot: &NodeSnapshot,
        now: Timestamp,
        history: &mut Admissions,
    ) -> Result<Verdict, Error> {
        let client = &self.ctx.client;
        let bindings = Api::<BmcBinding>::namespaced(client.clone(), &self.ctx.namespace)
            .list(&ListParams::default())
            .await?
            .items;
        let remediations = self.api.list(&ListParams::default()).await?.items;
        let nodes = self.nodes.list(&ListParams::default()).await?.items;
        let etcd_pods = Api::<Pod>::namespaced(client.clone(), "kube-system")
            .list(&ListParams::default().labels("component=etcd"))
            .await?
            .items;
        if !history.seeded {
            let admitted = remediations
                .iter()
                .filter_map(|r| r.status.as_ref()?.evidence.as_ref()?.node.as_ref().map(|n| n.admitted_at.0));
            history.times.extend(admitted);
            history.seeded = true;
        }
        let inputs = GateInputs {
            remediation: &self.remediation,
            node,
            namespace: &self.ctx.namespace,
            now,
            lease: self.ctx.leases.sighting(&self.node_name, now),
            bindings: &bindings,
            nodes: &nodes,
            etcd_pods: &etcd_pods,
            remediations: &remediations,
            recent_admissions: &history.times,
            limits: self.ctx.limits,
        };
        Ok(match gates::evaluate(&inputs) {
            Gate::Admit => Verdict::Admit(snapshot.evidence(now)),
            Gate::Wait(reason, message) => Verdict::Wait { reason, message },
            Gate::Refuse(reason, message) => Verdict::Refuse { reason, message },
        })
    }

    /// Builds the Redfish client for a binding; problems with what the binding refers to are final.
    async fn client(&self, binding: &BmcBinding) -> Result<Result<RedfishClient, IdentityProblem>, Error> {
        let invalid = |message: String| Ok(Err(IdentityProblem::Binding { reason: Reason::BindingInvalid, message }));
        let name = binding.name_any();
        let credentials = match cluster::credentials(&self.ctx.client, binding).await {
            Ok(credentials) => credentials,
            Err(BindingError::Invalid(message)) => return invalid(format!("BmcBinding {name}: {message}")),
            Err(BindingError::Kube(e)) => return Err(e.into()),
        };
        let trust = match cluster::trust(&self.ctx.client, binding).await {
            Ok(trust) => trust,
            Err(BindingError::Invalid(message)) => return invalid(format!("BmcBinding {name}: {message}")),
            Err(BindingError::Kube(e)) => return Err(e.into()),
        };
        let config = RedfishConfig {
            endpoint: binding.spec.redfish.endpoint.clone(),
            trust,
            credentials,
            request_timeout: self.ctx.bmc.request_timeout,
            read_retries: self.ctx.bmc.read_retries,
            retry_backoff: self.ctx.bmc.retry_backoff,
        };
        Ok(RedfishClient::new(config).map_err(|e| IdentityProblem::Binding {
            reason: Reason::BindingInvalid,
            message: format!("BmcBinding {name}: {e}"),
        }))
    }

    /// The client for the binding the identity was proven through.
    async fn client_for_fence(&self) -> Result<Result<RedfishClient, BmcFailure>, Error> {
        let status = self.status();
        let Some(name) = status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.binding.clone()) else {
            return Ok(Err(BmcFailure {
                transient: false,
                reason: Reason::BindingInvalid,
                message: "no verified binding recorded".into(),
            }));
        };
        let api: Api<BmcBinding> = Api::namespaced(self.ctx.client.clone(), &self.ctx.namespace);
        let Some(binding) = api.get_opt(&name).await? else {
            let message = format!("BmcBinding {name} was deleted during the fence");
            return Ok(Err(BmcFailure { transient: false, reason: Reason::BindingInvalid, message }));
        };
        Ok(self.client(&binding).await?.map_err(|problem| match problem {
            IdentityProblem::Binding { reason, message } => BmcFailure { transient: false, reason, message },
            IdentityProblem::Bmc(failure) => failure,
        }))
    }

    /// Resolves the binding, reads the BMC's system (pinned, the only one, or the one whose UUID names
    /// the node) and collects every other claim on a machine. Other BMCs are never asked.
    async fn identity(&self, snapshot: &NodeSnapshot) -> Result<Result<IdentityFound, IdentityProblem>, Error> {
        let bindings = self.bindings_for_node().await?;
        let binding = match bindings.as_slice() {
            [binding] => binding,
            [] => {
                let message =
                    format!("no BmcBinding in namespace {} names node {}", self.ctx.namespace, self.node_name);
                return Ok(Err(IdentityProblem::Binding { reason: Reason::NoBmcBinding, message }));
            }
            _ => {
                let message = format!("several BmcBindings name node {}", self.node_name);
                return Ok(Err(IdentityProblem::Binding { reason: Reason::BindingConflict, message }));
            }
        };
        let client = match self.client(binding).await? {
            Ok(client) => client,
            Err(problem) => return Ok(Err(problem)),
        };
        let pinned = binding.spec.redfish.system_id.as_deref();
        let system = match bmc::find_system(&client, pinned, &snapshot.system_uuid).await {
            Ok(Ok(system)) => system,
            Ok(Err(uuids)) => {
                let message = format!(
                    "none of the {} systems at {} ({}) has the node's systemUUID {} in either byte order; no power action taken",
                    uuids.len(),
                    binding.spec.redfish.endpoint,
                    uuids.join(", "),
                    snapshot.system_uuid
                );
                return Ok(Err(IdentityProblem::Binding { reason: Reason::IdentityMismatch, message }));
            }
            Err(error) => return Ok(Err(IdentityProblem::Bmc(BmcFailure::from(&error)))),
        };
        Ok(Ok(IdentityFound {
            binding: binding.name_any(),
            endpoint: binding.spec.redfish.endpoint.clone(),
            tls_verified: !binding.spec.tls.insecure_skip_verify,
            system,
            claims: self.claims(binding).await?,
        }))
    }

    /// Every other Node's systemUUID and every other binding's last verified UUID.
    async fn claims(&self, binding: &BmcBinding) -> Result<Vec<Claim>, Error> {
        let nodes = self.nodes.list(&ListParams::default()).await?.items;
        let node_claims = nodes.into_iter().filter(|n| n.name_any() != self.node_name).filter_map(|n| {
            let uuid = n.status.and_then(|s| s.node_info).map(|i| i.system_uuid).filter(|u| !u.is_empty())?;
            Some(Claim { owner: format!("Node {}", n.metadata.name.unwrap_or_default()), uuid })
        });
        let bindings: Api<BmcBinding> = Api::namespaced(self.ctx.client.clone(), &self.ctx.namespace);
        let binding_claims = bindings
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|b| b.uid() != binding.uid())
            .filter_map(|b| {
                let uuid = b.status.as_ref().and_then(|s| s.uuid.clone())?;
                Some(Claim { owner: format!("BmcBinding {}/{}", self.ctx.namespace, b.name_any()), uuid })
            });
        Ok(node_claims.chain(binding_claims).collect())
    }

    /// Records the identity check on the binding's status: an early warning for other fences.
    async fn record_verification(&self, found: &Result<IdentityFound, IdentityProblem>) {
        let status = self.status();
        let api: Api<BmcBinding> = Api::namespaced(self.ctx.client.clone(), &self.ctx.namespace);
        let name = match found {
            Ok(found) => found.binding.clone(),
            Err(_) => match self.bindings_for_node().await.ok().as_deref() {
                Some([binding]) => binding.name_any(),
                _ => return,
            },
        };
        let Ok(Some(binding)) = api.get_opt(&name).await else { return };
        let now = Timestamp::now();
        let mut binding_status = binding.status.clone().unwrap_or_default();
        let succeeded = conditions::find(&status.conditions, contract::SUCCEEDED);
        let verified = status.evidence.as_ref().and_then(|e| e.identity.as_ref()).filter(|i| i.binding == name);
        match (found, verified) {
            (Ok(found), Some(identity)) => {
                set_binding_conditions(&mut binding_status, true, "Reachable", "the BMC answered", now);
                conditions::set(
                    &mut binding_status.conditions,
                    "IdentityVerified",
                    conditions::TRUE,
                    "UuidMatched",
                    &format!("{:?} match with node {}", identity.match_kind, self.node_name),
                    now,
                );
                binding_status.system_id = Some(found.system.id.clone());
                binding_status.uuid = Some(found.system.uuid.clone());
                binding_status.power_state = Some(found.system.power_state.to_string());
                binding_status.last_verification_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
            }
            (Ok(_), None) => {
                set_binding_conditions(&mut binding_status, true, "Reachable", "the BMC answered", now);
                let (reason, message) = succeeded.map(|c| (c.reason.clone(), c.message.clone())).unwrap_or_default();
                conditions::set(
                    &mut binding_status.conditions,
                    "IdentityVerified",
                    conditions::FALSE,
                    &reason,
                    &message,
                    now,
                );
            }
            (Err(IdentityProblem::Bmc(failure)), _) => {
                set_binding_conditions(&mut binding_status, false, failure.reason.as_str(), &failure.message, now);
            }
            (Err(IdentityProblem::Binding { reason, message }), _) => {
                conditions::set(
                    &mut binding_status.conditions,
                    "IdentityVerified",
                    conditions::FALSE,
                    reason.as_str(),
                    message,
                    now,
                );
            }
        }
        if binding.spec.tls.insecure_skip_verify {
            conditions::set(
                &mut binding_status.conditions,
                "TLSVerified",
                conditions::FALSE,
                "InsecureSkipVerify",
                "insecureSkipVerify is set: the BMC's certificate is not verified",
                now,
            );
        }
        if binding.status.as_ref() != Some(&binding_status) {
            if let Err(error) = cluster::record_binding_status(&self.ctx.client, &binding, &binding_status).await {
                tracing::warn!(%error, binding = %name, "could not record the verification on the BmcBinding");
            }
            if binding.spec.tls.insecure_skip_verify {
                let notice = Notice {
                    warning: true,
                    reason: "InsecureSkipVerify".into(),
                    message: "insecureSkipVerify is set: the BMC's certificate is not verified".into(),
                };
                self.ctx.publish(&binding.object_ref(&()), &notice, "Verify").await;
            }
        }
    }

    /// Persists the decision's status (skipped when unchanged) and publishes its notices.
    async fn commit(&mut self, decision: Decision, node: Option<&Node>) -> Result<(), Error> {
        if Some(&decision.status) != self.remediation.status.as_ref() {
            self.remediation = cluster::persist_status(&self.api, &self.remediation, decision.status).await?;
        }
        let phase = fence::phase_of(&self.status());
        for notice in &decision.notices {
            info!(reason = %notice.reason, warning = notice.warning, phase = phase.as_str(), "{}", notice.message);
            self.ctx.publish(&self.remediation.object_ref(&()), notice, phase.as_str()).await;
            if let Some(node) = node {
                self.ctx.publish(&node.object_ref(&()), notice, phase.as_str()).await;
            }
        }
        Ok(())
    }

    /// Sends the reset the persisted decision asked for (its intent is already in status), and
    /// records the answer.
    async fn send_reset(
        &mut self,
        reset: crate::bmc::ResetType,
        system: Option<SystemReading>,
        snapshot: &NodeSnapshot,
        node: &Node,
    ) -> Result<(), Error> {
        let result = match (self.client_for_fence().await?, system) {
            (Ok(client), Some(system)) => {
                info!(reset = reset.as_str(), system = %system.path, "sending reset");
                client.reset(&system, reset).await.map_err(|e| BmcFailure::from(&e))
            }
            (Err(failure), _) => Err(failure),
            (Ok(_), None) => Err(BmcFailure {
                transient: true,
                reason: Reason::BmcProtocolError,
                message: "no fresh reading to reset from".into(),
            }),
        };
        let context = fence::Context {
            now: Timestamp::now(),
            instance: &self.ctx.instance,
            node: snapshot,
            hold_power_action: None,
        };
        let decision = fence::next(
            &self.remediation.spec,
            &self.status(),
            Observation::ResetAnswered { action: reset, result },
            context,
        );
        self.commit(decision, Some(node)).await
    }

    /// Makes coroner's taints on the node match what the remediation's state wants.
    async fn settle_taints(&self) -> Result<(), Error> {
        let status = self.status();
        if fence::phase_of(&status) == Phase::Pending && status.evidence.is_none() {
            return Ok(());
        }
        let fencing = fence::fencing_taint_wanted(&self.remediation.spec, &status);
        let out_of_service = fence::out_of_service_taint_wanted(&status);
        cluster::align_taints(&self.nodes, &self.node_name, &self.uid, fencing, out_of_service).await?;
        Ok(())
    }
}

/// What an observation brought: a power reading keeps the system it read.
enum Gathered {
    Plain(Observation),
    Reading(Result<SystemReading, BmcFailure>),
}

impl Gathered {
    fn split(self) -> (Observation, Option<SystemReading>) {
        match self {
            Self::Plain(observation) => (observation, None),
            Self::Reading(reading) => {
                let power = reading.as_ref().map(PowerReading::from).map_err(Clone::clone);
                (Observation::Power(power), reading.ok())
            }
        }
    }
}

fn set_binding_conditions(status: &mut BmcBindingStatus, reachable: bool, reason: &str, message: &str, now: Timestamp) {
    let state = if reachable { conditions::TRUE } else { conditions::FALSE };
    conditions::set(&mut status.conditions, "Reachable", state, reason, message, now);
}
