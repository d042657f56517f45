//! One reconcile of a `CoronerRemediation`: observe what the state machine asks for, decide (pure),
//! persist the decision under a resourceVersion precondition, and only then act on the BMC.

use std::{sync::Arc, time::Duration as StdDuration};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Resource, ResourceExt,
    api::{ListParams, Patch, PatchParams},
    runtime::{controller::Action, finalizer},
};
use tracing::{Instrument, debug, info, info_span};

use super::{Admissions, Context, Error};
use crate::{
    api::{BmcBinding, CoronerRemediation, CoronerRemediationStatus, Phase, RemediationStrategy, conditions},
    bmc::{Bmc, BmcError, RedfishClient, SystemReading},
    cluster,
    contract::{self, Reason},
    fence::{
        self, BmcFailure, Decision, IdentityFound, IdentityProblem, NodeSnapshot, Observation, Plan, PowerReading,
        Verdict,
    },
    gates::{self, Gate, GateInputs},
    telemetry::{self, StageLabels},
    verification::{self, Check},
};

/// Steps one reconcile may take back to back (admission → identity → first reading …).
const MAX_STEPS: usize = 8;

pub async fn reconcile(remediation: Arc<CoronerRemediation>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<CoronerRemediation> = Api::namespaced(ctx.client.clone(), ctx.namespace());
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
        let api: Api<CoronerRemediation> = Api::namespaced(ctx.client.clone(), ctx.namespace());
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
        if self.ctx.settings.node_name.as_deref() == Some(self.node_name.as_str())
            && !fence::phase_of(&self.status()).is_terminal()
        {
            return self.leader_on_target(&node, now).await;
        }
        let mut node = node;
        for _ in 0..MAX_STEPS {
            let status = self.status();
            // Admissions are serialised: the storm limits count what the others already took, and
            // the admission time is taken once the turn has come.
            let mut admissions = match fence::phase_of(&status) {
                Phase::Pending => Some(self.ctx.admissions.lock().await),
                _ => None,
            };
            let lease = cluster::node_lease(&self.ctx.client, &self.node_name).await?;
            let snapshot = NodeSnapshot::new(&node, lease, &self.uid);
            let now = Timestamp::now();
            let instance = self.ctx.instance();
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
                fence::Context { now, instance: &instance, node: &snapshot, hold_power_action: hold.as_ref() };
            let plan = fence::plan(&spec, &status, context);
            debug!(phase = fence::phase_of(&status).as_str(), ?plan, "step");
            let gathered = match (&plan, admissions.as_deref_mut()) {
                (Plan::Admit, Some(history)) => {
                    Gathered::Plain(Observation::Admission(self.admission(&node, &snapshot, now, history).await?))
                }
                _ => self.observe(&plan, &snapshot).await?,
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
                history.times.insert(self.uid.clone(), now);
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
                let binding = self.status().evidence.and_then(|e| e.identity).map(|i| i.binding).unwrap_or_default();
                let reading = match self.client_for_fence().await? {
                    Ok(client) => {
                        let read = client.system(system_path).await;
                        self.ctx.metrics.bmc(&binding, "read", read.as_ref().map_or_else(BmcError::category, |_| "ok"));
                        read.map_err(|e| BmcFailure::from(&e))
                    }
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
        let api: Api<BmcBinding> = Api::namespaced(self.ctx.client.clone(), self.ctx.namespace());
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
        let bindings = Api::<BmcBinding>::namespaced(client.clone(), self.ctx.namespace())
            .list(&ListParams::default())
            .await?
            .items;
        let remediations = self.api.list(&ListParams::default()).await?.items;
        let nodes = self.nodes.list(&ListParams::default()).await?.items;
        let etcd_pods = Api::<Pod>::namespaced(client.clone(), "kube-system")
            .list(&ListParams::default().labels("component=etcd"))
            .await?
            .items;
        for r in &remediations {
            if let (Some(uid), Some(node)) =
                (r.uid(), r.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()))
            {
                history.times.insert(uid, node.admitted_at.0);
            }
        }
        let admitted: Vec<Timestamp> = history.times.values().copied().collect();
        let inputs = GateInputs {
            remediation: &self.remediation,
            node,
            namespace: self.ctx.namespace(),
            now,
            lease: self.ctx.leases.sighting(&self.node_name, now),
            bindings: &bindings,
            nodes: &nodes,
            etcd_pods: &etcd_pods,
            remediations: &remediations,
            recent_admissions: &admitted,
            limits: self.ctx.settings.limits,
        };
        Ok(match gates::evaluate(&inputs) {
            Gate::Admit => Verdict::Admit(snapshot.evidence(now)),
            Gate::Wait(reason, message) => Verdict::Wait { reason, message },
            Gate::Refuse(reason, message) => Verdict::Refuse { reason, message },
        })
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
        let api: Api<BmcBinding> = Api::namespaced(self.ctx.client.clone(), self.ctx.namespace());
        let Some(binding) = api.get_opt(&name).await? else {
            let message = format!("BmcBinding {name} was deleted during the fence");
            return Ok(Err(BmcFailure { transient: false, reason: Reason::BindingInvalid, message }));
        };
        Ok(self.ctx.redfish_client(&binding).await?.map_err(|message| BmcFailure {
            transient: false,
            reason: Reason::BindingInvalid,
            message,
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
                    format!("no BmcBinding in namespace {} names node {}", self.ctx.namespace(), self.node_name);
                return Ok(Err(IdentityProblem::Binding { reason: Reason::NoBmcBinding, message }));
            }
            _ => {
                let message = format!("several BmcBindings name node {}", self.node_name);
                return Ok(Err(IdentityProblem::Binding { reason: Reason::BindingConflict, message }));
            }
        };
        let client = match self.ctx.redfish_client(binding).await? {
            Ok(client) => client,
            Err(message) => return Ok(Err(IdentityProblem::Binding { reason: Reason::BindingInvalid, message })),
        };
        let system = match self.ctx.node_system(binding, &client, &snapshot.system_uuid, "read").await {
            Ok(system) => system,
            Err(problem) => return Ok(Err(problem)),
        };
        Ok(Ok(IdentityFound {
            binding: binding.name_any(),
            endpoint: binding.spec.redfish.endpoint.clone(),
            tls_verified: !binding.spec.tls.insecure_skip_verify,
            system,
            claims: self.ctx.claims(&self.node_name, binding).await?,
        }))
    }

    /// Records the fence's identity check on the binding's status too: an early warning for other
    /// fences and for the binding's own verification.
    async fn record_verification(&self, found: &Result<IdentityFound, IdentityProblem>) {
        let check = match found {
            Ok(found) => {
                let status = self.status();
                let proven = status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.match_kind);
                let refused = conditions::find(&status.conditions, contract::SUCCEEDED).and_then(|c| {
                    let reason = Reason::ALL.iter().copied().find(|r| r.as_str() == c.reason)?;
                    Some((reason, c.message.clone()))
                });
                let identity = match (proven, refused) {
                    (Some(matched), _) => Ok(matched),
                    (None, Some((reason, message))) => Err((reason, message)),
                    (None, None) => return,
                };
                let system = &found.system;
                Check::Read {
                    system_id: system.id.clone(),
                    uuid: system.uuid.clone(),
                    power_state: system.power_state.to_string(),
                    identity,
                }
            }
            Err(IdentityProblem::Bmc(failure)) => {
                Check::Failed { reason: failure.reason, message: failure.message.clone() }
            }
            Err(IdentityProblem::Binding { .. }) => return,
        };
        let api: Api<BmcBinding> = Api::namespaced(self.ctx.client.clone(), self.ctx.namespace());
        let bindings = match self.bindings_for_node().await {
            Ok(bindings) => bindings,
            Err(_) => return,
        };
        let [binding] = bindings.as_slice() else { return };
        let mut status = binding.status.clone().unwrap_or_default();
        let notices = verification::record(&mut status, &check, binding, Timestamp::now());
        if binding.status.as_ref() != Some(&status) {
            let patch = verification::status_patch(binding.status.as_ref(), &status);
            if let Err(error) =
                api.patch_status(&binding.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await
            {
                tracing::warn!(%error, binding = %binding.name_any(), "could not record the verification on the BmcBinding");
            }
        }
        for notice in &notices {
            self.ctx.publish(&binding.object_ref(&()), notice, "Verify").await;
        }
    }

    /// Persists the decision's status (skipped when unchanged) and publishes its notices.
    async fn commit(&mut self, decision: Decision, node: Option<&Node>) -> Result<(), Error> {
        let old = self.status();
        if Some(&decision.status) != self.remediation.status.as_ref() {
            self.remediation = cluster::persist_status(&self.api, &self.remediation, decision.status).await?;
        }
        self.count_transition(&old);
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

    /// Metrics of what the last write changed: a start, the outcome, and the stages completed.
    fn count_transition(&self, old: &CoronerRemediationStatus) {
        let new = self.status();
        let metrics = &self.ctx.metrics;
        if old.phase.is_none() && new.phase.is_some() {
            metrics.remediations_started.inc();
        }
        if let Some(outcome) = telemetry::decided_outcome(old, &new) {
            metrics.remediations_finished.get_or_create(&outcome).inc();
        }
        for (stage, seconds) in telemetry::stage_durations(old, &new) {
            metrics.fence_stage_seconds.get_or_create(&StageLabels { stage: stage.into() }).observe(seconds);
        }
    }

    /// This replica runs on the node to fence. With another replica ready it hands leadership over;
    /// otherwise the remediation waits (`LeaderOnTargetNode`).
    async fn leader_on_target(mut self, node: &Node, now: Timestamp) -> Result<Action, Error> {
        let siblings = match &self.ctx.settings.pod_name {
            Some(pod) => cluster::ready_siblings(&self.ctx.client, self.ctx.namespace(), pod, &self.node_name).await?,
            None => 0,
        };
        if siblings > 0 && self.ctx.settings.election.is_some() {
            info!(siblings, "the node to fence runs this leader; handing leadership over");
            self.ctx.step_down.notify_one();
            return Ok(Action::await_change());
        }
        let decision = fence::leader_on_target(&self.status(), &self.node_name, now);
        let requeue = decision.requeue;
        self.commit(decision, Some(node)).await?;
        Ok(requeue.map_or_else(Action::await_change, Action::requeue))
    }

    /// Sends the reset the persisted decision asked for (its intent is already in status), and
    /// records the answer. Everything that takes time comes first; right before the POST the
    /// remediation is read again (unchanged since the intent was written, not timed out by NHC, not
    /// being deleted) and the leader Lease must outlast the request.
    async fn send_reset(
        &mut self,
        reset: crate::bmc::ResetType,
        system: Option<SystemReading>,
        snapshot: &NodeSnapshot,
        node: &Node,
    ) -> Result<(), Error> {
        let binding = self.status().evidence.and_then(|e| e.identity).map(|i| i.binding).unwrap_or_default();
        let client = self.client_for_fence().await?;
        let current = self.api.get(&self.remediation.name_any()).await?;
        let unchanged = current.resource_version() == self.remediation.resource_version();
        if !unchanged || contract::timed_out_by_nhc(&current.metadata) || current.metadata.deletion_timestamp.is_some()
        {
            info!(reset = reset.as_str(), "the remediation changed since the intent was written; not sending");
            return Ok(());
        }
        if let Some(election) = &self.ctx.settings.election {
            election
                .ensure_leader(&self.ctx.client, self.ctx.settings.bmc.request_timeout)
                .await
                .map_err(Error::NotLeader)?;
        }
        let result = match (client, system) {
            (Ok(client), Some(system)) => {
                info!(reset = reset.as_str(), system = %system.path, "sending reset");
                let result = client.reset(&system, reset).await;
                self.ctx.metrics.bmc(&binding, "reset", result.as_ref().map_or_else(BmcError::category, |_| "ok"));
                result.map_err(|e| BmcFailure::from(&e))
            }
            (Err(failure), _) => Err(failure),
            (Ok(_), None) => Err(BmcFailure {
                transient: true,
                reason: Reason::BmcProtocolError,
                message: "no fresh reading to reset from".into(),
            }),
        };
        // The answer must land: a reset left unanswered in status would be sent again.
        let instance = self.ctx.instance();
        for _ in 0..3 {
            let context =
                fence::Context { now: Timestamp::now(), instance: &instance, node: snapshot, hold_power_action: None };
            let answer = Observation::ResetAnswered { action: reset, result: result.clone() };
            let decision = fence::next(&self.remediation.spec, &self.status(), answer, context);
            match self.commit(decision, Some(node)).await {
                Err(Error::Kube(kube::Error::Api(status))) if status.code == 409 => {
                    self.remediation = self.api.get(&self.remediation.name_any()).await?;
                }
                other => return other,
            }
        }
        Err(Error::StatusConflicts(3))
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
