//! The one fence loop: observe what the state machine asks for, decide (pure, [`crate::fence`]),
//! persist the decision under a resourceVersion precondition, and only then act on the BMC. Written
//! once against the traits in [`ports`]: production runs it on kube and reqwest, the simulator on an
//! in-memory world.
//!
//! Results follow one convention: `Result<T, Error>` is infrastructure (the API server, a conflict
//! storm, lost leadership) and is retried by the controller's error policy; what the fence decides
//! about (a BMC failure, a binding that cannot be used, a node that proved alive) travels inside `T`
//! as an observation.

pub mod attested;
pub mod ports;

use std::{collections::BTreeMap, time::Duration as StdDuration};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::{Resource, ResourceExt};
use tracing::{debug, info};

use ports::Device;
pub use ports::{ApiError, ApiResult, LoopSettings, World};

use crate::{
    api::{
        BmcBinding, CoronerRemediation, CoronerRemediationSpec, CoronerRemediationStatus, Phase, RemediationStrategy,
    },
    bmc::{BmcError, ResetType, SystemReading},
    contract::{self, Reason},
    fence::{
        self, BmcFailure, Decision, IdentityFound, IdentityProblem, NodeSnapshot, Observation, Plan, PowerReading,
        Released, Verdict, Workloads,
    },
    gates::{self, Gate, GateInputs},
    identity::Claim,
    taints::{self, CoronerTaint},
    telemetry::{self, StageLabels},
    verification::{self, Check},
};

/// Steps one reconcile may take back to back (admission → identity → first reading …).
const MAX_STEPS: usize = 8;
/// A node that changes this often under us is being written by something else; try again later.
const MAX_CONFLICTS: u32 = 10;

/// When fences were admitted, by remediation UID. Every admission merges in what the existing
/// remediations record (so admissions by another replica count); a remediation NHC deleted before
/// this process saw it is forgotten (documented in docs/safety.md).
#[derive(Debug, Default)]
pub struct Admissions {
    pub times: BTreeMap<String, Timestamp>,
}

/// What the controller does after a reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Requeue(StdDuration),
    /// Wait for a change of the remediation or its node.
    AwaitChange,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("Node {0} changed under every one of {MAX_CONFLICTS} updates")]
    NodeConflicts(String),
    #[error("the remediation has no {0}")]
    Incomplete(&'static str),
    #[error("not sending to the BMC: {0}")]
    NotLeader(String),
    #[error("the remediation's status kept changing under {0} writes")]
    StatusConflicts(u32),
}

impl Error {
    /// Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Api(e) => e.category(),
            Self::NodeConflicts(_) | Self::StatusConflicts(_) => "conflict",
            Self::Incomplete(_) => "invalid-object",
            Self::NotLeader(_) => "not-leader",
        }
    }
}

/// One reconcile of a live remediation (the finalizer is in place).
pub async fn apply<W: World>(world: &W, cached: &CoronerRemediation) -> Result<Next, Error> {
    Fence::load(world, cached).await?.run().await
}

/// The finalizer: remove the taints this remediation owns (if the node still exists), then let go.
pub async fn cleanup<W: World>(world: &W, remediation: &CoronerRemediation) -> Result<Next, Error> {
    let uid = remediation.uid().ok_or(Error::Incomplete("uid"))?;
    if let Some(node) = contract::node_name(&remediation.metadata) {
        remove_owned_taints(world, node, &uid).await?;
        info!(node, "removed the taints this remediation owned");
    }
    Ok(Next::AwaitChange)
}

/// One remediation being worked on in this reconcile.
struct Fence<'a, W: World> {
    world: &'a W,
    /// The latest version read or written; status writes carry its resourceVersion.
    remediation: CoronerRemediation,
    node_name: String,
    uid: String,
}

impl<'a, W: World> Fence<'a, W> {
    /// Reads the remediation afresh: the cache may trail coroner's own last status write.
    async fn load(world: &'a W, cached: &CoronerRemediation) -> Result<Self, Error> {
        let name = cached.name_any();
        let remediation =
            world.remediation(&name).await?.ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
        let node_name = contract::node_name(&remediation.metadata).ok_or(Error::Incomplete("node name"))?.to_owned();
        let uid = remediation.uid().ok_or(Error::Incomplete("uid"))?;
        Ok(Self { world, remediation, node_name, uid })
    }

    fn status(&self) -> CoronerRemediationStatus {
        self.remediation.status.clone().unwrap_or_default()
    }

    async fn run(mut self) -> Result<Next, Error> {
        let now = self.world.now();
        if contract::timed_out_by_nhc(&self.remediation.metadata) {
            if let Some(decision) = fence::timed_out(&self.status(), now) {
                self.commit(decision, None).await?;
            }
            return self.settle_taints().await.map(|()| Next::AwaitChange);
        }
        let Some(node) = self.world.node(&self.node_name).await? else {
            if let Some(decision) = fence::node_missing(&self.status(), &self.node_name, now) {
                self.commit(decision, None).await?;
            }
            return Ok(Next::AwaitChange);
        };
        if let Some(decision) = fence::start(&self.status(), &self.node_name, now) {
            self.commit(decision, Some(&node)).await?;
        }
        if self.world.own_node() == Some(self.node_name.as_str()) && !fence::phase_of(&self.status()).is_terminal() {
            return self.leader_on_target(&node, now).await;
        }
        let mut node = node;
        for _ in 0..MAX_STEPS {
            let status = self.status();
            // Admissions are serialised: the storm limits count what the others already took, and
            // the admission time is taken once the turn has come.
            let mut admissions = match fence::phase_of(&status) {
                Phase::Pending => Some(self.world.admissions().lock().await),
                _ => None,
            };
            let lease = self.world.node_lease(&self.node_name).await?;
            let snapshot = NodeSnapshot::new(&node, lease, &self.uid);
            let now = self.world.now();
            let instance = self.world.instance();
            let spec = self.remediation.spec.clone();
            let hold = match gates::lease_stale(
                self.world.lease_sighting(&self.node_name, self.world.mono()),
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
                    node = self.world.node(&self.node_name).await?.unwrap_or(node);
                }
                Some(after) => return Ok(Next::Requeue(after)),
                None => return Ok(Next::AwaitChange),
            }
        }
        Ok(Next::Requeue(StdDuration::from_millis(100)))
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
                let reading = match self.device_for_fence().await? {
                    Ok(device) => {
                        let read = device.read(system_path).await;
                        self.world.metrics().bmc(
                            &binding,
                            "read",
                            read.as_ref().map_or_else(BmcError::category, |_| "ok"),
                        );
                        read.map_err(|e| BmcFailure::from(&e))
                    }
                    Err(failure) => Err(failure),
                };
                Gathered::Reading(reading)
            }
            Plan::Release => {
                let (spec, status) = (&self.remediation.spec, self.status());
                let (node, uid) = (&self.node_name, &self.uid);
                Gathered::Plain(Observation::Release(match spec.remediation_strategy {
                    RemediationStrategy::OutOfServiceTaint => {
                        release_with_taint(self.world, spec, &status, node, uid).await?
                    }
                    RemediationStrategy::ResourceDeletion => {
                        release_by_deletion(self.world, spec, &status, node, uid).await?
                    }
                }))
            }
            Plan::CheckWorkloads => {
                Gathered::Plain(Observation::Workloads(workloads(self.world, &self.node_name).await?))
            }
        })
    }

    async fn bindings_for_node(&self) -> Result<Vec<BmcBinding>, Error> {
        let all = self.world.bindings().await?;
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
        let bindings = self.world.bindings().await?;
        let remediations = self.world.remediations().await?;
        let nodes = self.world.nodes().await?;
        let etcd_pods = self.world.etcd_pods().await?;
        for r in &remediations {
            if let (Some(uid), Some(node)) =
                (r.uid(), r.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()))
            {
                history.times.insert(uid, node.admitted_at.0);
            }
        }
        let admitted: Vec<Timestamp> = history.times.values().copied().collect();
        let settings = self.world.settings();
        let inputs = GateInputs {
            remediation: &self.remediation,
            node,
            namespace: &settings.namespace,
            now,
            lease: self.world.lease_sighting(&self.node_name, self.world.mono()),
            bindings: &bindings,
            nodes: &nodes,
            etcd_pods: &etcd_pods,
            remediations: &remediations,
            recent_admissions: &admitted,
            limits: settings.limits,
        };
        Ok(match gates::evaluate(&inputs) {
            Gate::Admit => Verdict::Admit(snapshot.evidence(now)),
            Gate::Wait(reason, message) => Verdict::Wait { reason, message },
            Gate::Refuse(reason, message) => Verdict::Refuse { reason, message },
        })
    }

    /// The device for the binding the identity was proven through.
    async fn device_for_fence(&self) -> Result<Result<W::Device, BmcFailure>, Error> {
        let status = self.status();
        let Some(name) = status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.binding.clone()) else {
            return Ok(Err(BmcFailure {
                transient: false,
                reason: Reason::BindingInvalid,
                message: "no verified binding recorded".into(),
            }));
        };
        let Some(binding) = self.world.binding(&name).await? else {
            let message = format!("BmcBinding {name} was deleted during the fence");
            return Ok(Err(BmcFailure { transient: false, reason: Reason::BindingInvalid, message }));
        };
        Ok(self.world.device(&binding).await?.map_err(|message| BmcFailure {
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
                let message = format!(
                    "no BmcBinding in namespace {} names node {}",
                    self.world.settings().namespace,
                    self.node_name
                );
                return Ok(Err(IdentityProblem::Binding { reason: Reason::NoBmcBinding, message }));
            }
            _ => {
                let message = format!("several BmcBindings name node {}", self.node_name);
                return Ok(Err(IdentityProblem::Binding { reason: Reason::BindingConflict, message }));
            }
        };
        let device = match self.world.device(binding).await? {
            Ok(device) => device,
            Err(message) => return Ok(Err(IdentityProblem::Binding { reason: Reason::BindingInvalid, message })),
        };
        let system = match node_system(self.world, binding, &device, &snapshot.system_uuid, "read").await {
            Ok(system) => system,
            Err(problem) => return Ok(Err(problem)),
        };
        Ok(Ok(IdentityFound {
            binding: binding.name_any(),
            endpoint: binding.spec.redfish.endpoint.clone(),
            // The identity read was answered: its handshake was verified unless verification is off.
            tls_verified: verification::request_tls_verified(&binding.spec.tls, true),
            system,
            claims: claims(self.world, &self.node_name, binding).await?,
        }))
    }

    /// Records the fence's identity check on the binding's status too: an early warning for other
    /// fences and for the binding's own verification.
    async fn record_verification(&self, found: &Result<IdentityFound, IdentityProblem>) {
        let check = match found {
            Ok(found) => {
                let status = self.status();
                let proven = status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.match_kind);
                let refused = crate::api::conditions::find(&status.conditions, contract::SUCCEEDED).and_then(|c| {
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
        let bindings = match self.bindings_for_node().await {
            Ok(bindings) => bindings,
            Err(_) => return,
        };
        let [binding] = bindings.as_slice() else { return };
        let mut status = binding.status.clone().unwrap_or_default();
        let notices = verification::record(&mut status, &check, binding, self.world.now());
        if binding.status.as_ref() != Some(&status)
            && let Err(error) =
                self.world.write_binding_status(&binding.name_any(), binding.status.as_ref(), &status).await
        {
            tracing::warn!(%error, binding = %binding.name_any(), "could not record the verification on the BmcBinding");
        }
        for notice in &notices {
            self.world.publish(&binding.object_ref(&()), notice, "Verify").await;
        }
    }

    /// Persists the decision's status (skipped when unchanged) and publishes its notices.
    async fn commit(&mut self, decision: Decision, node: Option<&Node>) -> Result<(), Error> {
        let old = self.status();
        if Some(&decision.status) != self.remediation.status.as_ref() {
            self.remediation = self.world.write_status(&self.remediation, decision.status).await?;
        }
        self.count_transition(&old);
        let phase = fence::phase_of(&self.status());
        for notice in &decision.notices {
            info!(reason = %notice.reason, warning = notice.warning, phase = phase.as_str(), "{}", notice.message);
            self.world.publish(&self.remediation.object_ref(&()), notice, phase.as_str()).await;
            if let Some(node) = node {
                self.world.publish(&node.object_ref(&()), notice, phase.as_str()).await;
            }
        }
        Ok(())
    }

    /// Metrics of what the last write changed: a start, the outcome, and the stages completed.
    fn count_transition(&self, old: &CoronerRemediationStatus) {
        let new = self.status();
        let metrics = self.world.metrics();
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
    async fn leader_on_target(mut self, node: &Node, now: Timestamp) -> Result<Next, Error> {
        if self.world.hand_over(&self.node_name).await? {
            info!("the node to fence runs this leader; handing leadership over");
            return Ok(Next::AwaitChange);
        }
        let decision = fence::leader_on_target(&self.status(), &self.node_name, now);
        let requeue = decision.requeue;
        self.commit(decision, Some(node)).await?;
        Ok(requeue.map_or(Next::AwaitChange, Next::Requeue))
    }

    /// Sends the reset the persisted decision asked for (its intent is already in status), and
    /// records the answer. Everything that takes time comes first; right before the POST the
    /// remediation is read again (unchanged since the intent was written, not timed out by NHC, not
    /// being deleted) and the leader Lease must outlast the request.
    async fn send_reset(
        &mut self,
        reset: ResetType,
        system: Option<SystemReading>,
        snapshot: &NodeSnapshot,
        node: &Node,
    ) -> Result<(), Error> {
        let binding = self.status().evidence.and_then(|e| e.identity).map(|i| i.binding).unwrap_or_default();
        let device = self.device_for_fence().await?;
        let name = self.remediation.name_any();
        let current =
            self.world.remediation(&name).await?.ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
        let unchanged = current.resource_version() == self.remediation.resource_version();
        if !unchanged || contract::timed_out_by_nhc(&current.metadata) || current.metadata.deletion_timestamp.is_some()
        {
            info!(reset = reset.as_str(), "the remediation changed since the intent was written; not sending");
            return Ok(());
        }
        self.world.ensure_leader(self.world.settings().request_timeout).await.map_err(Error::NotLeader)?;
        let result = match (device, system) {
            (Ok(device), Some(system)) => {
                info!(reset = reset.as_str(), system = %system.path, "sending reset");
                let result = device.act(&system, reset).await;
                self.world.metrics().bmc(&binding, "reset", result.as_ref().map_or_else(BmcError::category, |_| "ok"));
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
        let instance = self.world.instance();
        for _ in 0..3 {
            let context =
                fence::Context { now: self.world.now(), instance: &instance, node: snapshot, hold_power_action: None };
            let answer = Observation::ResetAnswered { action: reset, result: result.clone() };
            let decision = fence::next(&self.remediation.spec, &self.status(), answer, context);
            match self.commit(decision, Some(node)).await {
                Err(Error::Api(ApiError::Conflict(_))) => {
                    self.remediation = self
                        .world
                        .remediation(&name)
                        .await?
                        .ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
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
        align_taints(self.world, &self.node_name, &self.uid, fencing, out_of_service).await
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

/// The system on the binding's BMC that is the node's machine ([`Device::find`]: the pinned one,
/// the only one, or the one with the node's UUID), counted in the BMC metric under `operation`.
/// `IdentityProblem::Binding` (IdentityMismatch): several systems, none the node's.
pub async fn node_system<W: World>(
    world: &W,
    binding: &BmcBinding,
    device: &W::Device,
    node_uuid: &str,
    operation: &str,
) -> Result<SystemReading, IdentityProblem> {
    let pinned = binding.spec.redfish.system_id.as_deref();
    let found = device.find(pinned, node_uuid).await;
    world.metrics().bmc(&binding.name_any(), operation, found.as_ref().map_or_else(BmcError::category, |_| "ok"));
    match found {
        Ok(Ok(system)) => Ok(system),
        Ok(Err(uuids)) => Err(IdentityProblem::Binding {
            reason: Reason::IdentityMismatch,
            message: format!(
                "none of the {} systems at {} ({}) has the node's systemUUID {node_uuid} in either byte order",
                uuids.len(),
                device.origin(),
                uuids.join(", ")
            ),
        }),
        Err(error) => Err(IdentityProblem::Bmc(BmcFailure::from(&error))),
    }
}

/// Every other Node's systemUUID and every other binding's last verified UUID: what must not
/// match the node's machine. Never asks another BMC.
pub async fn claims<W: World>(world: &W, node_name: &str, binding: &BmcBinding) -> Result<Vec<Claim>, Error> {
    let nodes = world.nodes().await?;
    let node_claims = nodes.into_iter().filter(|n| n.name_any() != node_name).filter_map(|n| {
        let uuid = n.status.and_then(|s| s.node_info).map(|i| i.system_uuid).filter(|u| !u.is_empty())?;
        Some(Claim { owner: format!("Node {}", n.metadata.name.unwrap_or_default()), uuid })
    });
    let namespace = &world.settings().namespace;
    let bindings = world.bindings().await?;
    let binding_claims = bindings.into_iter().filter(|b| b.uid() != binding.uid()).filter_map(|b| {
        let uuid = b.status.as_ref().and_then(|s| s.uuid.clone())?;
        Some(Claim { owner: format!("BmcBinding {namespace}/{}", b.name_any()), uuid })
    });
    Ok(node_claims.chain(binding_claims).collect())
}

/// Reads the node, lets `change` decide, and replaces it under the resourceVersion it was read at;
/// on a conflict it reads and decides again. `Ok(None)`: the node is gone or nothing to change.
async fn update_node<W: World>(
    world: &W,
    name: &str,
    mut change: impl FnMut(&Node) -> Option<Node>,
) -> Result<Option<Node>, Error> {
    for _ in 0..MAX_CONFLICTS {
        let Some(node) = world.node(name).await? else { return Ok(None) };
        let Some(updated) = change(&node) else { return Ok(None) };
        match world.replace_node(&updated).await {
            Ok(written) => return Ok(Some(written)),
            Err(ApiError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::NodeConflicts(name.to_owned()))
}

/// Brings coroner's taints on the node in line with the remediation's state: adds the fencing taint
/// when wanted, removes whichever of them this remediation owns and no longer wants.
async fn align_taints<W: World>(
    world: &W,
    name: &str,
    owner_uid: &str,
    fencing: bool,
    out_of_service: bool,
) -> Result<(), Error> {
    let now = world.now();
    update_node(world, name, |node| {
        let mut unwanted = Vec::new();
        if !fencing {
            unwanted.push(CoronerTaint::Fencing);
        }
        if !out_of_service {
            unwanted.push(CoronerTaint::OutOfService);
        }
        let removed = taints::without_owned(node, &unwanted, owner_uid);
        let base = removed.as_ref().unwrap_or(node);
        let added = if fencing { taints::with_taint(base, CoronerTaint::Fencing, owner_uid, now) } else { None };
        added.or(removed)
    })
    .await
    .map(drop)
}

/// Removes every coroner taint this remediation owns (the finalizer's job).
async fn remove_owned_taints<W: World>(world: &W, name: &str, owner_uid: &str) -> Result<(), Error> {
    update_node(world, name, |node| {
        taints::without_owned(node, &[CoronerTaint::Fencing, CoronerTaint::OutOfService], owner_uid)
    })
    .await
    .map(drop)
}

/// The node as it is now, if `fence::release_check` holds on it and its current Lease;
/// `Ok(Err(why))` when the node turned out alive (or gone).
async fn silent_node<W: World>(
    world: &W,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
) -> Result<Result<(Node, NodeSnapshot), String>, Error> {
    let Some(node) = world.node(node_name).await? else {
        return Ok(Err(format!("Node {node_name} disappeared")));
    };
    let snapshot = NodeSnapshot::new(&node, world.node_lease(node_name).await?, owner_uid);
    Ok(fence::release_check(spec, status, &snapshot).map(|()| (node, snapshot)))
}

/// The release with the out-of-service taint: one Node update under the read resourceVersion that
/// adds the taint and its owner annotation, and only if `fence::release_check` holds on exactly that
/// Node and its current Lease. A conflict re-reads both and checks again.
async fn release_with_taint<W: World>(
    world: &W,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
) -> Result<Result<Released, String>, Error> {
    for _ in 0..MAX_CONFLICTS {
        let (node, snapshot) = match silent_node(world, spec, status, node_name, owner_uid).await? {
            Ok(silent) => silent,
            Err(alive) => return Ok(Err(alive)),
        };
        let released = |taint_owned| Released {
            at: world.now(),
            node_ready: snapshot.ready.clone().unwrap_or_default(),
            lease_renew_time: snapshot.lease_renew_time,
            taint_owned,
            pods_deleted: None,
        };
        let Some(updated) = taints::with_taint(&node, CoronerTaint::OutOfService, owner_uid, world.now()) else {
            // Already there: ours if an earlier pass of this remediation added it, else not claimed.
            return Ok(Ok(released(taints::owns(&node, CoronerTaint::OutOfService, owner_uid))));
        };
        match world.replace_node(&updated).await {
            Ok(_) => return Ok(Ok(released(true))),
            Err(ApiError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::NodeConflicts(node_name.to_owned()))
}

/// The release with `ResourceDeletion` (as FAR does): after the same check, force-delete every pod
/// bound to the node (grace period 0, UID precondition), mirror pods excepted, checking again before
/// each further pod. Never VolumeAttachments. Unlike the taint, this is not one atomic update.
async fn release_by_deletion<W: World>(
    world: &W,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
) -> Result<Result<Released, String>, Error> {
    let snapshot = match silent_node(world, spec, status, node_name, owner_uid).await? {
        Ok((_, snapshot)) => snapshot,
        Err(alive) => return Ok(Err(alive)),
    };
    let mut deleted = 0;
    for pod in world.pods_on(node_name).await? {
        if fence::is_mirror_pod(&pod) {
            continue;
        }
        // Deleting takes a while: the node must still be silent before each pod goes.
        if deleted > 0
            && let Err(alive) = silent_node(world, spec, status, node_name, owner_uid).await?
        {
            return Ok(Err(alive));
        }
        match world.delete_pod(&pod).await {
            Ok(()) => deleted += 1,
            // Gone already (another remediator may delete the same pod), or replaced by a new pod.
            Err(ApiError::NotFound(_) | ApiError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Ok(Released {
        at: world.now(),
        node_ready: snapshot.ready.unwrap_or_default(),
        lease_renew_time: snapshot.lease_renew_time,
        taint_owned: false,
        pods_deleted: Some(deleted),
    }))
}

/// What still holds the node: pods that are terminating or not yet evicted, and VolumeAttachments.
async fn workloads<W: World>(world: &W, node_name: &str) -> Result<Workloads, Error> {
    let blocking_pods = world.pods_on(node_name).await?.iter().filter(|p| fence::pod_blocks_release(p)).count();
    let volume_attachments = world.volume_attachments_on(node_name).await?;
    Ok(Workloads { blocking_pods: count(blocking_pods), volume_attachments: count(volume_attachments) })
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
