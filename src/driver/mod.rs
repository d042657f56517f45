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
        self, BmcFailure, Decision, DeviceMark, IdentityFound, IdentityProblem, Memory, Mono, NodeRefusal,
        NodeSnapshot, Observation, Plan, PowerReading, ReleaseRefusal, Released, Sampled, Timing, Verdict, Workloads,
    },
    gates::{self, Gate, GateInputs},
    guard,
    identity::Claim,
    leader,
    taints::{self, CoronerTaint},
    telemetry::{self, NodeLabels, StageLabels},
    verification::{self, FenceFinding},
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

/// What this process knows of each fence, by remediation UID ([`fence::Memory`]), with the instance
/// (process and leadership term) that learnt it.
pub type Memories = std::sync::Mutex<BTreeMap<String, (String, Memory)>>;

/// One request at a time per BMC origin from this process: the guard's readings take no storm-limit
/// slot, but wait while another request to the same BMC is in flight.
#[derive(Debug, Default)]
pub struct Origins {
    locks: std::sync::Mutex<BTreeMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl Origins {
    /// Waits for the origin's turn; the turn lasts as long as the guard is held.
    pub async fn turn(&self, origin: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            locks.entry(origin.to_owned()).or_default().clone()
        };
        lock.lock_owned().await
    }
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
    NotLeader(#[from] leader::Refusal),
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

/// The finalizer: remove the taints this remediation owns and, once its release is over, the
/// approval to power the released machine on ([`guard::approval_ends`]) — if the node still exists —,
/// then let go. Before that, the bootID check one last time: NHC deletes the remediation about two
/// seconds after the node is Ready, so a node that never went down is reported on the Node.
pub async fn cleanup<W: World>(world: &W, remediation: &CoronerRemediation) -> Result<Next, Error> {
    let uid = remediation.uid().ok_or(Error::Incomplete("uid"))?;
    let status = remediation.status.clone().unwrap_or_default();
    if let Some(node) = node_of(remediation) {
        if let Some(found) = world.node(&node).await? {
            let snapshot = NodeSnapshot::new(&found, world.node_lease(&node).await?, &uid);
            if !remembered(world, &uid).finalizer_reported
                && let Some(message) = guard::unreported_did_not_take_effect(&status, &snapshot)
            {
                remember(world, &uid, Memory { finalizer_reported: true, ..Memory::default() });
                world.metrics().fence_did_not_take_effect.get_or_create(&NodeLabels { node: node.clone() }).inc();
                let notice = fence::Notice { warning: true, reason: guard::DID_NOT_TAKE_EFFECT.into(), message };
                world.publish(&found.object_ref(&()), &notice, "Cleanup").await;
            }
        }
        remove_owned_taints(world, &node, &uid, &status).await?;
        info!(node, "removed the taints this remediation owned");
    }
    if !remembered(world, &uid).finalizer_reported {
        forget(world, &uid);
    }
    Ok(Next::AwaitChange)
}

/// The sooner of two wake-ups.
fn sooner(next: Next, guard: Option<StdDuration>) -> Next {
    match (next, guard) {
        (Next::Requeue(after), Some(guard)) => Next::Requeue(after.min(guard)),
        (Next::AwaitChange, Some(guard)) => Next::Requeue(guard),
        (next, None) => next,
    }
}

/// The node a remediation fences: the one admitted (its name is frozen into the evidence), else NHC's
/// annotation.
fn node_of(remediation: &CoronerRemediation) -> Option<String> {
    let admitted = remediation.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()).map(|n| n.name.clone());
    admitted.or_else(|| contract::node_name(&remediation.metadata).map(str::to_owned))
}

/// Right before a reset: the remediation as read again must be the one whose status carries the
/// intent (unchanged since), not timed out by NHC and not being deleted.
pub fn reset_still_wanted(current: &CoronerRemediation, intended: &CoronerRemediation) -> bool {
    current.resource_version() == intended.resource_version()
        && !contract::timed_out_by_nhc(&current.metadata)
        && current.metadata.deletion_timestamp.is_none()
}

/// What this instance knows of the fence: a new leadership term of the same replica starts afresh
/// (its proof, its attempt clock), as a new process would.
fn remembered<W: World>(world: &W, uid: &str) -> Memory {
    let instance = world.instance();
    let memories = world.memories().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    memories.get(uid).filter(|(by, _)| *by == instance).map(|(_, memory)| memory.clone()).unwrap_or_default()
}

fn remember<W: World>(world: &W, uid: &str, memory: Memory) {
    let instance = world.instance();
    world
        .memories()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(uid.to_owned(), (instance, memory));
}

fn forget<W: World>(world: &W, uid: &str) {
    world.memories().lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(uid);
}

fn timing<W: World>(world: &W) -> Timing {
    let settings = world.settings();
    Timing { request_timeout: settings.request_timeout, read_retries: settings.read_retries }
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
        let node_name = node_of(&remediation).ok_or(Error::Incomplete("node name"))?;
        let uid = remediation.uid().ok_or(Error::Incomplete("uid"))?;
        Ok(Self { world, remediation, node_name, uid })
    }

    fn status(&self) -> CoronerRemediationStatus {
        self.remediation.status.clone().unwrap_or_default()
    }

    /// The spec this fence follows: as admitted, once admitted.
    fn spec(&self) -> CoronerRemediationSpec {
        fence::spec_of(&self.remediation.spec, &self.status()).clone()
    }

    fn context<'c>(&self, snapshot: &'c NodeSnapshot, memory: &'c Memory, instance: &'c str) -> fence::Context<'c> {
        fence::Context {
            now: self.world.now(),
            mono: self.world.mono(),
            instance,
            node: snapshot,
            hold_power_action: None,
            memory,
            timing: timing(self.world),
        }
    }

    async fn run(mut self) -> Result<Next, Error> {
        let now = self.world.now();
        if contract::timed_out_by_nhc(&self.remediation.metadata) {
            // NHC gave up on the remediation, not on the released machine: a release already on the
            // Node is recorded first, so the guard and the bootID check keep watching it.
            let node = self.world.node(&self.node_name).await?;
            if let Some(node) = &node {
                self.record_standing_release(node).await?;
            }
            if let Some(decision) = fence::timed_out(&self.status(), self.world.now()) {
                self.commit(decision, None).await?;
            }
            if let Some(node) = &node {
                self.check_boot_id(node).await?;
            }
            self.settle_taints().await?;
            let guard = match node {
                Some(node) => self.guard(&node).await?,
                None => None,
            };
            return Ok(sooner(Next::AwaitChange, guard));
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
        // First: nothing the fence's steps may fail on (a denied Node write) must hide this.
        self.check_boot_id(&node).await?;
        if self.world.own_node() == Some(self.node_name.as_str()) && !fence::phase_of(&self.status()).is_terminal() {
            return self.leader_on_target(&node, now).await;
        }
        let next = self.steps(node.clone()).await;
        // The guard watches the released machine even while a step keeps failing (a denied Node write).
        let guard = self.guard(&node).await;
        Ok(sooner(next?, guard?))
    }

    /// The fence's steps, back to back while the state machine asks for no wait.
    async fn steps(&mut self, mut node: Node) -> Result<Next, Error> {
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
            let instance = self.world.instance();
            let spec = self.spec();
            let hold = match gates::lease_stale(
                self.world.lease_sighting(&self.node_name, self.world.mono()),
                spec.lease_freshness.get(),
            ) {
                Gate::Wait(reason, message) | Gate::Refuse(reason, message) => Some((reason, message)),
                Gate::Admit => None,
            };
            let memory = remembered(self.world, &self.uid);
            let context =
                fence::Context { hold_power_action: hold.as_ref(), ..self.context(&snapshot, &memory, &instance) };
            let plan = fence::plan(&spec, &status, context);
            debug!(phase = fence::phase_of(&status).as_str(), ?plan, "step");
            let gathered = match (&plan, admissions.as_deref_mut()) {
                (Plan::Admit, Some(history)) => {
                    Gathered::Plain(Observation::Admission(self.admission(&node, &snapshot, history).await?))
                }
                _ => self.observe(&plan, &snapshot, &memory).await?,
            };
            let (observation, system) = gathered.split();
            // The clocks as they stand after the observation, which may have taken a while.
            let context = fence::Context { now: self.world.now(), mono: self.world.mono(), ..context };
            let decision = fence::next(&spec, &status, observation, context);
            let requeue = decision.requeue;
            let reset = decision.reset;
            self.commit(decision, Some(&node)).await?;
            if let Some(history) = admissions.as_deref_mut()
                && fence::phase_of(&self.status()) == Phase::VerifyingIdentity
            {
                history.times.insert(self.uid.clone(), context.now);
            }
            drop(admissions);
            if let Some(reset) = reset {
                self.send_reset(reset, system, &node).await?;
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
    async fn observe(&self, plan: &Plan, snapshot: &NodeSnapshot, memory: &Memory) -> Result<Gathered, Error> {
        Ok(match plan {
            Plan::Wait(_) | Plan::Admit => Gathered::Plain(Observation::Wait),
            Plan::Idle => Gathered::Plain(Observation::Nothing),
            Plan::VerifyIdentity => Gathered::Plain(Observation::Identity(self.identity(snapshot).await?)),
            Plan::ReadPower { system_path } => Gathered::Reading(self.read_power(system_path).await?),
            Plan::Release => {
                let (spec, status) = (self.spec(), self.status());
                let deadline = fence::proof_deadline(&spec, memory, timing(self.world)).unwrap_or_default();
                let (node, uid) = (&self.node_name, &self.uid);
                Gathered::Plain(Observation::Release(match spec.remediation_strategy {
                    RemediationStrategy::OutOfServiceTaint => {
                        release_with_taint(self.world, &spec, &status, node, uid, deadline).await?
                    }
                    RemediationStrategy::ResourceDeletion => {
                        release_by_deletion(self.world, &spec, &status, node, uid, deadline).await?
                    }
                }))
            }
            Plan::RecordRelease => Gathered::Plain(Observation::Release(
                standing_release(self.world, &self.status(), snapshot, &self.uid).await?,
            )),
            Plan::CheckWorkloads => {
                Gathered::Plain(Observation::Workloads(workloads(self.world, &self.node_name).await?))
            }
        })
    }

    /// One power reading of the verified system, stamped with when it was asked for and when it was
    /// answered. A rejection of the credentials is taken once as a sign that they changed: the client
    /// is built again from the Secret and read with once more.
    async fn read_power(&self, system_path: &str) -> Result<Result<(SystemReading, PowerReading), BmcFailure>, Error> {
        let binding = self.binding_name();
        for fresh in [false, true] {
            let (device, through) = match self.device_for_fence().await? {
                Ok(found) => found,
                Err(failure) => return Ok(Err(failure)),
            };
            let read = {
                let _turn = self.world.origins().turn(&device.origin()).await;
                let requested = self.world.mono();
                let read = device.read(system_path).await;
                (requested, read, self.world.mono())
            };
            let (requested, read, answered) = read;
            self.world.metrics().bmc(&binding, "read", read.as_ref().map_or_else(BmcError::category, |_| "ok"));
            match read {
                Err(BmcError::Unauthorized(_)) if !fresh => {
                    if let Some(binding) = self.world.binding(&binding).await? {
                        self.world.forget_device(&binding);
                    }
                }
                Ok(system) => {
                    let reading = PowerReading::of(&system, Sampled { requested, answered }, through);
                    return Ok(Ok((system, reading)));
                }
                Err(error) => return Ok(Err(BmcFailure::from(&error))),
            }
        }
        Ok(Err(BmcFailure {
            transient: false,
            reason: Reason::BmcAuthenticationFailed,
            message: "the BMC rejected the credentials, also after they were read again".into(),
        }))
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
        history: &mut Admissions,
    ) -> Result<Verdict, Error> {
        let bindings = self.world.bindings().await?;
        let remediations = self.world.remediations().await?;
        let nodes = self.world.nodes().await?;
        let etcd_pods = self.world.etcd_pods().await?;
        let now = self.world.now();
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
        // A release another remediation of the node did stands, whatever a storm limit or a wait
        // says; a final refusal still wins.
        Ok(match (gates::evaluate(&inputs), gates::release_to_adopt(&inputs)) {
            (Gate::Refuse(reason, message), _) => Verdict::Refuse { reason, message },
            (_, Some((from, released_at))) => Verdict::Adopt { from, released_at },
            (Gate::Admit, None) => Verdict::Admit(snapshot.evidence(now)),
            (Gate::Wait(reason, message), None) => Verdict::Wait { reason, message },
        })
    }

    fn binding_name(&self) -> String {
        self.status().evidence.and_then(|e| e.identity).map(|i| i.binding).unwrap_or_default()
    }

    /// The device for the binding the identity was proven through, and which client it is.
    async fn device_for_fence(&self) -> Result<Result<(W::Device, DeviceMark), BmcFailure>, Error> {
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
        Ok(match self.world.device(&binding).await? {
            Ok((device, serial)) => Ok((device, mark(&binding, serial))),
            Err(unusable) => {
                Err(BmcFailure { transient: false, reason: unusable.reason(), message: unusable.to_string() })
            }
        })
    }

    /// Resolves the binding, reads the BMC's system (pinned, the only one, or the one whose UUID names
    /// the node) and collects every other claim on a machine. Other BMCs are never asked.
    async fn identity(&self, snapshot: &NodeSnapshot) -> Result<Result<IdentityFound, IdentityProblem>, Error> {
        let all = self.world.bindings().await?;
        let bindings: Vec<&BmcBinding> = all.iter().filter(|b| b.spec.node_name == self.node_name).collect();
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
        let (device, serial) = match self.world.device(binding).await? {
            Ok(found) => found,
            Err(unusable) => {
                let (reason, message) = (unusable.reason(), unusable.to_string());
                return Ok(Err(IdentityProblem::Binding { reason, message }));
            }
        };
        let system = match node_system(self.world, binding, &device, &snapshot.system_uuid, "read").await {
            Ok(system) => system,
            Err(problem) => return Ok(Err(problem)),
        };
        // Another node's binding on the same BMC: what this read answered tells which is wrong.
        let peers = origin_peers(self.world, binding, &all).await?;
        let settled = gates::conflict_settled_by_identity(
            &binding.name_any(),
            &self.node_name,
            &snapshot.system_uuid,
            &system.uuid,
            &peers,
        );
        if let Err(message) = settled {
            return Ok(Err(IdentityProblem::Binding { reason: Reason::BindingConflict, message }));
        }
        Ok(Ok(IdentityFound {
            binding: binding.name_any(),
            endpoint: binding.spec.redfish.endpoint.clone(),
            // The identity read was answered: its handshake was verified unless verification is off.
            tls_verified: verification::request_tls_verified(&binding.spec.tls, true),
            system,
            claims: claims(self.world, &self.node_name, binding).await?,
            through: mark(binding, serial),
        }))
    }

    /// Records what the fence found on its binding's status, once per fence ([`verification::fence_finding`]:
    /// the proof, or the final refusal), so `kubectl get bmcb` shows what the fence last saw. The
    /// binding is the one the identity was proven through, else the one binding naming the node.
    /// Best-effort: a failure is logged and never fails the fence.
    async fn record_on_binding(&self, finding: FenceFinding<'_>) {
        if verification::fence_check(finding).is_none() {
            return;
        }
        let proven_through = self.status().evidence.and_then(|e| e.identity).map(|i| i.binding);
        let binding = match proven_through {
            Some(name) => self.world.binding(&name).await.map_err(Error::from),
            None => self.bindings_for_node().await.map(|bindings| match <[BmcBinding; 1]>::try_from(bindings) {
                Ok([binding]) => Some(binding),
                Err(_) => None,
            }),
        };
        let binding = match binding {
            Ok(Some(binding)) => binding,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "could not read the BmcBinding to record the fence's finding on it");
                return;
            }
        };
        let mut status = binding.status.clone().unwrap_or_default();
        let (changed, notices) = verification::record_fence(&mut status, finding, &binding, self.world.now());
        if changed
            && let Err(error) =
                self.world.write_binding_status(&binding.name_any(), binding.status.as_ref(), &status).await
        {
            tracing::warn!(%error, binding = %binding.name_any(), "could not record the fence's finding on the BmcBinding");
        }
        for notice in &notices {
            self.world.publish(&binding.object_ref(&()), notice, "Verify").await;
        }
    }

    /// Persists the decision's status (skipped when unchanged), keeps what it learnt in memory, and
    /// publishes its notices.
    async fn commit(&mut self, decision: Decision, node: Option<&Node>) -> Result<(), Error> {
        let old = self.status();
        if Some(&decision.status) != self.remediation.status.as_ref() {
            self.remediation = self.world.write_status(&self.remediation, decision.status).await?;
        }
        remember(self.world, &self.uid, decision.memory);
        self.count_transition(&old);
        let new = self.status();
        if let Some(finding) = verification::fence_finding(&old, &new) {
            self.record_on_binding(finding).await;
        }
        let phase = fence::phase_of(&new);
        for notice in &decision.notices {
            info!(reason = %notice.reason, warning = notice.warning, phase = phase.as_str(), "{}", notice.message);
            self.world.publish(&self.remediation.object_ref(&()), notice, phase.as_str()).await;
            if let Some(node) = node {
                self.world.publish(&node.object_ref(&()), notice, phase.as_str()).await;
            }
        }
        Ok(())
    }

    /// Commits an observation made outside the step loop (a reset's answer, a refused action): the
    /// decision is taken again on the latest status if another write came first.
    async fn commit_observation(&mut self, observation: Observation, node: &Node) -> Result<(), Error> {
        let instance = self.world.instance();
        let lease = self.world.node_lease(&self.node_name).await?;
        let snapshot = NodeSnapshot::new(node, lease, &self.uid);
        let spec = self.remediation.spec.clone();
        let world = self.world;
        self.commit_retrying(node, |status, memory| {
            let context = fence::Context {
                now: world.now(),
                mono: world.mono(),
                instance: &instance,
                node: &snapshot,
                hold_power_action: None,
                memory,
                timing: timing(world),
            };
            fence::next(&spec, status, observation.clone(), context)
        })
        .await
    }

    /// Commits `decide`'s decision on the latest status, deciding again after a conflict.
    async fn commit_retrying(
        &mut self,
        node: &Node,
        decide: impl Fn(&CoronerRemediationStatus, &Memory) -> Decision,
    ) -> Result<(), Error> {
        let name = self.remediation.name_any();
        for _ in 0..3 {
            let memory = remembered(self.world, &self.uid);
            let decision = decide(&self.status(), &memory);
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
    /// remediation is read again ([`reset_still_wanted`]), the BMC origin's turn is taken, the node
    /// and its Lease are read again and must still allow the action ([`fence::may_power_off`],
    /// [`fence::may_power_on`]), and the leader Lease must outlast the request.
    async fn send_reset(&mut self, reset: ResetType, system: Option<SystemReading>, node: &Node) -> Result<(), Error> {
        let binding = self.binding_name();
        let device = self.device_for_fence().await?;
        let name = self.remediation.name_any();
        let current =
            self.world.remediation(&name).await?.ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
        if !reset_still_wanted(&current, &self.remediation) {
            info!(reset = reset.as_str(), "the remediation changed since the intent was written; not sending");
            return Ok(());
        }
        // The origin's turn first: waiting for it must not age the checks that follow.
        let turn = match &device {
            Ok((device, _)) => Some(self.world.origins().turn(&device.origin()).await),
            Err(_) => None,
        };
        let now_node = self.world.node(&self.node_name).await?;
        let refusal = match &now_node {
            None => Some(NodeRefusal::Gone { node: self.node_name.clone() }),
            Some(now_node) => {
                let lease = self.world.node_lease(&self.node_name).await?;
                let snapshot = NodeSnapshot::new(now_node, lease, &self.uid);
                match reset {
                    ResetType::ForceOff => fence::may_power_off(&self.spec(), &self.status(), &snapshot).err(),
                    ResetType::On => fence::may_power_on(&snapshot).err(),
                }
            }
        };
        if let Some(refusal) = refusal {
            info!(reset = reset.as_str(), %refusal, "the node no longer allows the power action; not sending");
            return self
                .commit_observation(Observation::ActionRefused(refusal), now_node.as_ref().unwrap_or(node))
                .await;
        }
        self.world.ensure_leader(self.world.settings().request_timeout).await?;
        let result = match (device, system) {
            (Ok((device, _)), Some(system)) => {
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
        drop(turn);
        // The answer must land: a reset left unanswered in status would be sent again.
        self.commit_observation(Observation::ResetAnswered { action: reset, result }, node).await
    }

    /// A release on the Node that status does not know of (coroner stopped, or NHC timed the
    /// remediation out, between the two writes): recorded before anything else decides on the status,
    /// after the Lease check that follows every release ([`standing_release`]).
    async fn record_standing_release(&mut self, node: &Node) -> Result<(), Error> {
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
        let memory = remembered(self.world, &self.uid);
        let instance = self.world.instance();
        let decision = fence::next(&self.spec(), &status, observation, self.context(&snapshot, &memory, &instance));
        self.commit(decision, Some(node)).await
    }

    /// The bootID check, on every reconcile once the fence released the node: a node back with its
    /// pre-fence bootID never went down ([`guard::fence_did_not_take_effect`]).
    async fn check_boot_id(&mut self, node: &Node) -> Result<(), Error> {
        let status = self.status();
        if status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_none() {
            return Ok(());
        }
        let snapshot = NodeSnapshot::new(node, None, &self.uid);
        let Some(message) = guard::fence_did_not_take_effect(&status, &snapshot) else { return Ok(()) };
        let memory = remembered(self.world, &self.uid);
        if let Some(decision) = guard::record_did_not_take_effect(&status, &memory, &message, self.world.now()) {
            // Counted once it is recorded: a write that conflicts is decided, and counted, again.
            self.commit(decision, Some(node)).await?;
            let labels = NodeLabels { node: self.node_name.clone() };
            self.world.metrics().fence_did_not_take_effect.get_or_create(&labels).inc();
        }
        Ok(())
    }

    /// The guard after the release, on every reconcile while this fence's release stands. Returns
    /// when the guard reads again.
    async fn guard(&mut self, node: &Node) -> Result<Option<StdDuration>, Error> {
        let status = self.status();
        if status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_none() {
            return Ok(None);
        }
        let snapshot = NodeSnapshot::new(node, None, &self.uid);
        let labels = NodeLabels { node: self.node_name.clone() };
        if !guard::guarded(&status, &snapshot) {
            return Ok(None);
        }
        let interval = self.world.settings().guard_interval;
        let memory = remembered(self.world, &self.uid);
        if let Some(wait) = guard::due(&memory, self.world.mono(), interval, &self.uid) {
            return Ok(Some(wait));
        }
        let path = status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.system_path.clone());
        let (read, finding) = match path {
            Some(path) => {
                let read = self.read_power(&path).await?;
                let reading = read.as_ref().map(|(_, reading)| reading.clone()).map_err(Clone::clone);
                let finding = guard::assess(&status, &reading);
                (Some(read), finding)
            }
            // An attested release: the machine is found first, through the binding, as a fence does.
            None => {
                let identified = match guard::identity_target(&status, &snapshot) {
                    Ok(uuid) => guard::identify(&status, self.identity(&snapshot).await?, &uuid, self.world.now()),
                    Err(why) => Err(why),
                };
                match identified {
                    Ok((status, notice)) => {
                        let memory = memory.clone();
                        let decision = Decision { status, memory, reset: None, requeue: None, notices: vec![notice] };
                        self.commit(decision, Some(node)).await?;
                        return Ok(Some(StdDuration::ZERO));
                    }
                    Err(why) => (None, guard::Finding::Blind(why.to_string())),
                }
            }
        };
        if matches!(finding, guard::Finding::Blind(_)) {
            self.world.metrics().guard_blind_reads.get_or_create(&labels).inc();
        }
        let approval = node.annotations().get(guard::APPROVAL_ANNOTATION).map(String::as_str);
        let instance = self.world.instance();
        let watch = guard::Watch {
            policy: self.spec().guard,
            approval,
            instance: &instance,
            now: self.world.now(),
            mono: self.world.mono(),
        };
        let decision = guard::next(&status, &memory, &finding, watch);
        if decision.notices.iter().any(|n| n.reason == guard::POWERED_ON && n.warning)
            && matches!(finding, guard::Finding::NotOff(_))
        {
            self.world.metrics().released_machine_powered_on.get_or_create(&labels).inc();
        }
        let reset = decision.reset;
        self.commit(decision, Some(node)).await?;
        if let (Some(ResetType::ForceOff), Some(Ok((system, _)))) = (reset, read) {
            self.send_guard_reset(system, node).await?;
        }
        let memory = remembered(self.world, &self.uid);
        Ok(Some(guard::jittered(interval, &self.uid, memory.guard_reads)))
    }

    /// The guard's ForceOff to a released machine that reads on again: its intent is persisted, the
    /// remediation read again unchanged, the Node read again still calling for it
    /// ([`guard::may_enforce`]), the leader Lease outlasting the request; the reset goes to the
    /// system whose answer (its UUID re-checked) asked for it. It takes no storm-limit slot.
    async fn send_guard_reset(&mut self, system: SystemReading, node: &Node) -> Result<(), Error> {
        let name = self.remediation.name_any();
        let current =
            self.world.remediation(&name).await?.ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
        if !reset_still_wanted(&current, &self.remediation) {
            return Ok(());
        }
        let device = self.device_for_fence().await?;
        // The origin's turn first: waiting for it must not age the checks that follow.
        let turn = match &device {
            Ok((device, _)) => Some(self.world.origins().turn(&device.origin()).await),
            Err(_) => None,
        };
        let now_node = self.world.node(&self.node_name).await?;
        if let Err(hold) = guard::may_enforce(&self.status(), now_node.as_ref(), &self.uid) {
            drop(turn);
            info!(%hold, "the guard does not send ForceOff");
            let now = self.world.now();
            return self.commit_retrying(node, |status, memory| guard::withheld(status, memory, &hold, now)).await;
        }
        self.world.ensure_leader(self.world.settings().request_timeout).await?;
        let result = match device {
            Ok((device, _)) => {
                info!(system = %system.path, "the guard sends ForceOff to the released machine");
                let result = device.act(&system, ResetType::ForceOff).await;
                let binding = self.binding_name();
                self.world.metrics().bmc(&binding, "reset", result.as_ref().map_or_else(BmcError::category, |_| "ok"));
                result.map_err(|e| BmcFailure::from(&e))
            }
            Err(failure) => Err(failure),
        };
        drop(turn);
        let labels = NodeLabels { node: self.node_name.clone() };
        self.world.metrics().guard_force_offs.get_or_create(&labels).inc();
        let now = self.world.now();
        self.commit_retrying(node, |status, memory| guard::answered(status, memory, &result, now)).await
    }

    /// Makes coroner's taints on the node match what the remediation's state wants.
    async fn settle_taints(&self) -> Result<(), Error> {
        let status = self.status();
        if fence::phase_of(&status) == Phase::Pending && status.evidence.is_none() {
            return Ok(());
        }
        let fencing = fence::fencing_taint_wanted(&self.spec(), &status);
        let out_of_service_ends = fence::out_of_service_taint_ends(&status);
        align_taints(self.world, &self.node_name, &self.uid, fencing, out_of_service_ends).await
    }
}

/// Which client served an answer: the binding's generation and the client's serial.
fn mark(binding: &BmcBinding, serial: u64) -> DeviceMark {
    DeviceMark { generation: binding.metadata.generation.unwrap_or_default(), serial }
}

/// What an observation brought: a power reading keeps the system it read, for the reset.
enum Gathered {
    Plain(Observation),
    Reading(Result<(SystemReading, PowerReading), BmcFailure>),
}

impl Gathered {
    fn split(self) -> (Observation, Option<SystemReading>) {
        match self {
            Self::Plain(observation) => (observation, None),
            Self::Reading(Ok((system, reading))) => (Observation::Power(Ok(reading)), Some(system)),
            Self::Reading(Err(failure)) => (Observation::Power(Err(failure)), None),
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
        Ok(Err(refusal)) => Err(IdentityProblem::Binding {
            reason: refusal.reason(),
            message: format!("{refusal} (BMC {})", device.origin()),
        }),
        Err(error) => Err(IdentityProblem::Bmc(BmcFailure::from(&error))),
    }
}

/// The bindings of other nodes that reach `binding`'s BMC without a distinct system
/// ([`gates::Conflict::SameOrigin`]), with their nodes' systemUUIDs as the Nodes report them now: what
/// [`gates::conflict_settled_by_identity`] judges the binding's identity read against.
pub async fn origin_peers<W: World>(
    world: &W,
    binding: &BmcBinding,
    all: &[BmcBinding],
) -> Result<Vec<gates::OriginPeer>, Error> {
    let conflicts = gates::binding_conflicts(all).remove(&binding.name_any()).unwrap_or_default();
    let peers: Vec<(String, String)> = conflicts
        .into_iter()
        .filter_map(|conflict| match conflict {
            gates::Conflict::SameOrigin { other, other_node, .. } => Some((other, other_node)),
            gates::Conflict::SameNode { .. } => None,
        })
        .collect();
    if peers.is_empty() {
        return Ok(Vec::new());
    }
    let nodes = world.nodes().await?;
    let uuid_of = |name: &str| {
        let node = nodes.iter().find(|n| n.name_any() == name)?;
        Some(node.status.as_ref()?.node_info.as_ref()?.system_uuid.clone())
    };
    Ok(peers
        .into_iter()
        .map(|(binding, node)| {
            let node_uuid = uuid_of(&node).unwrap_or_default();
            gates::OriginPeer { binding, node, node_uuid }
        })
        .collect())
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

/// Reads the node, lets `change` decide, and writes its taints and annotations as a patch under the
/// resourceVersion it was read at; on a conflict it reads and decides again. `Ok(None)`: the node is
/// gone or nothing to change.
async fn update_node<W: World>(
    world: &W,
    name: &str,
    mut change: impl FnMut(&Node) -> Option<Node>,
) -> Result<Option<Node>, Error> {
    for _ in 0..MAX_CONFLICTS {
        let Some(node) = world.node(name).await? else { return Ok(None) };
        let Some(updated) = change(&node) else { return Ok(None) };
        match world.patch_node(&node, &updated).await {
            Ok(written) => return Ok(Some(written)),
            Err(ApiError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::NodeConflicts(name.to_owned()))
}

/// Brings coroner's taints on the node in line with the remediation's state: adds the fencing taint
/// when wanted, removes it when not, and removes the out-of-service taint this remediation owns only
/// once the fence decided its release is over.
async fn align_taints<W: World>(
    world: &W,
    name: &str,
    owner_uid: &str,
    fencing: bool,
    out_of_service_ends: bool,
) -> Result<(), Error> {
    let now = world.now();
    update_node(world, name, |node| {
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
    .map(drop)
}

/// Removes every coroner taint this remediation owns, and the approval its release ends (the
/// finalizer's job).
async fn remove_owned_taints<W: World>(
    world: &W,
    name: &str,
    owner_uid: &str,
    status: &CoronerRemediationStatus,
) -> Result<(), Error> {
    update_node(world, name, |node| {
        let removed = taints::without_owned(node, &[CoronerTaint::Fencing, CoronerTaint::OutOfService], owner_uid);
        if !guard::approval_ends(status, node) {
            return removed;
        }
        let mut updated = removed.unwrap_or_else(|| node.clone());
        updated.annotations_mut().remove(guard::APPROVAL_ANNOTATION);
        Some(updated)
    })
    .await
    .map(drop)
}

/// The node as it is now with its current Lease, if `fence::release_check` holds on it.
async fn silent_node<W: World>(
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
    Ok(fence::release_check(spec, status, &snapshot).map(|()| (node, snapshot)))
}

/// Whether a release may be written now: the leader Lease outlasting the write, and the proof still
/// fresh ([`fence::proof_deadline`], on this process's monotonic clock).
async fn may_write_release<W: World>(world: &W, deadline: Mono) -> Result<Result<(), ReleaseRefusal>, Error> {
    world.ensure_leader(world.settings().request_timeout).await?;
    // Last, right before the write: the leader check itself takes time.
    if world.mono() >= deadline {
        return Ok(Err(ReleaseRefusal::ProofExpired));
    }
    Ok(Ok(()))
}

/// The release with the out-of-service taint: one Node patch under the read resourceVersion that
/// adds the taint and its owner record, only if `fence::release_check` holds on exactly that Node and
/// its current Lease, and only while the proof is fresh. Right after it the Lease is read again: a
/// renewal since the power-off takes the taint back at once (`DidNotTakeEffect`).
async fn release_with_taint<W: World>(
    world: &W,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
    deadline: Mono,
) -> Result<Result<Released, ReleaseRefusal>, Error> {
    for _ in 0..MAX_CONFLICTS {
        let (node, snapshot) = match silent_node(world, spec, status, node_name, owner_uid).await? {
            Ok(silent) => silent,
            Err(refusal) => return Ok(Err(ReleaseRefusal::Node(refusal))),
        };
        let released = |at, taint_owned| Released {
            at,
            node_ready: snapshot.ready.clone().unwrap_or_default(),
            lease_renew_time: snapshot.lease_renew_time,
            taint_owned,
            pods_deleted: None,
        };
        if snapshot.released_at.is_some() {
            return standing_release(world, status, &snapshot, owner_uid).await;
        }
        let now = world.now();
        let Some(updated) = taints::with_taint(&node, CoronerTaint::OutOfService, owner_uid, now) else {
            // Someone else's out-of-service taint is already there: not claimed.
            return Ok(Ok(released(now, false)));
        };
        if let Err(refusal) = may_write_release(world, deadline).await? {
            return Ok(Err(refusal));
        }
        match world.patch_node(&node, &updated).await {
            Ok(_) => {}
            Err(ApiError::Conflict(_)) => continue,
            Err(ApiError::Denied(why)) => return Ok(Err(ReleaseRefusal::WriteRefused(why))),
            Err(e) => return Err(e.into()),
        }
        let after = NodeSnapshot { lease_renew_time: world.node_lease(node_name).await?.flatten(), ..snapshot.clone() };
        if let Err(NodeRefusal::LeaseRenewed { renewed, .. }) = fence::lease_unrenewed_since_power_off(status, &after) {
            remove_owned_out_of_service(world, node_name, owner_uid).await?;
            return Ok(Err(ReleaseRefusal::DidNotTakeEffect { node: node_name.to_owned(), renewed }));
        }
        return Ok(Ok(released(now, true)));
    }
    Err(Error::NodeConflicts(node_name.to_owned()))
}

/// This remediation's exact out-of-service taint found on the Node: a release written earlier, maybe
/// by a process that stopped before it could read the Lease again. The same check as right after a
/// release write: a Lease renewed since the power-off takes the taint back at once.
async fn standing_release<W: World>(
    world: &W,
    status: &CoronerRemediationStatus,
    snapshot: &NodeSnapshot,
    owner_uid: &str,
) -> Result<Result<Released, ReleaseRefusal>, Error> {
    if let Err(NodeRefusal::LeaseRenewed { renewed, .. }) = fence::lease_unrenewed_since_power_off(status, snapshot) {
        remove_owned_out_of_service(world, &snapshot.name, owner_uid).await?;
        return Ok(Err(ReleaseRefusal::DidNotTakeEffect { node: snapshot.name.clone(), renewed }));
    }
    Ok(Ok(Released {
        at: snapshot.released_at.unwrap_or_else(|| world.now()),
        node_ready: snapshot.ready.clone().unwrap_or_default(),
        lease_renew_time: snapshot.lease_renew_time,
        taint_owned: true,
        pods_deleted: None,
    }))
}

async fn remove_owned_out_of_service<W: World>(world: &W, name: &str, owner_uid: &str) -> Result<(), Error> {
    update_node(world, name, |node| taints::without_owned(node, &[CoronerTaint::OutOfService], owner_uid))
        .await
        .map(drop)
}

/// The release with `ResourceDeletion` (as FAR does): after the same check, force-delete every pod
/// bound to the node (grace period 0, UID precondition), mirror pods excepted, checking the node and
/// the proof's freshness again before each further pod. Never VolumeAttachments. Unlike the taint,
/// this is not one atomic update.
async fn release_by_deletion<W: World>(
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
    let mut deleted = 0;
    let mut first = true;
    for pod in world.pods_on(node_name).await? {
        if fence::is_mirror_pod(&pod) {
            continue;
        }
        // Deleting takes a while: the node must still be silent before each further pod goes.
        if !std::mem::take(&mut first)
            && let Err(refusal) = silent_node(world, spec, status, node_name, owner_uid).await?
        {
            return Ok(Err(ReleaseRefusal::Node(refusal)));
        }
        if let Err(refusal) = may_write_release(world, deadline).await? {
            return Ok(Err(refusal));
        }
        match world.delete_pod(&pod).await {
            Ok(()) => deleted += 1,
            // Gone already (another remediator may delete the same pod), or replaced by a new pod.
            Err(ApiError::NotFound(_) | ApiError::Conflict(_)) => {}
            Err(ApiError::Denied(why)) => return Ok(Err(ReleaseRefusal::WriteRefused(why))),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn remediation(version: &str) -> CoronerRemediation {
        let mut r = CoronerRemediation::new("worker-1-abcde", Default::default());
        r.metadata.resource_version = Some(version.into());
        r
    }

    #[test]
    fn a_reset_is_still_wanted_only_by_the_unchanged_remediation_neither_timed_out_nor_deleted() {
        let intended = remediation("7");
        assert!(reset_still_wanted(&remediation("7"), &intended));
        assert!(!reset_still_wanted(&remediation("8"), &intended), "changed since the intent was persisted");
        let mut timed_out = remediation("7");
        timed_out.metadata.annotations =
            Some([(contract::TIMED_OUT_ANNOTATION.to_owned(), "2026-12-01T10:00:00Z".to_owned())].into());
        assert!(!reset_still_wanted(&timed_out, &intended), "NHC gave up on it");
        let mut deleted = remediation("7");
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH));
        assert!(!reset_still_wanted(&deleted, &intended), "being deleted");
    }
}
