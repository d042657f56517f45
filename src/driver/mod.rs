//! The one fence loop: observe what the state machine asks for, decide (pure, [`crate::fence`]),
//! persist the decision under a resourceVersion precondition, and only then act on the BMC. Written
//! once against the traits in [`ports`]: production runs it on kube and reqwest, the simulator on an
//! in-memory world.
//!
//! Results follow one convention: `Result<T, Error>` is infrastructure (the API server, a conflict
//! storm, lost leadership) and is retried by the controller's error policy; what the fence decides
//! about (a BMC failure, a binding that cannot be used, a node that proved alive) travels inside `T`
//! as an observation.

mod admission;
pub mod attest;
mod commit;
mod guard;
mod identity;
mod local;
pub mod orphans;
mod outlets;
pub mod ports;
mod power;
mod release;
pub mod verifier;

use std::{collections::BTreeMap, time::Duration as StdDuration};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

pub use crate::cluster::{ApiError, ApiResult};
pub use identity::{claims, node_system, origin_peers};
pub use local::{Admissions, Local, Memories, Origins};
use ports::Target;
pub use ports::{Listing, LoopSettings, World};
use power::Aim;
pub use power::CHECKS_ALLOWANCE;
use release::{
    ProvenRelease, align_taints, deletion_check, finished_deletion, release_by_deletion, remove_owned_taints,
    standing_release, workloads, write_release,
};

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
    leader,
    taints::{self, CoronerTaint},
    telemetry::{self, NodeLabels, StageLabels},
    verification::{self, FenceFinding},
};

/// Test builds only: whether the simulated world sabotages this process that way ([`crate::sabotage`]).
#[cfg(test)]
fn sabotaged<W: World>(world: &W, sabotage: crate::sabotage::Sabotage) -> bool {
    world.sabotage() == sabotage
}

/// Steps one reconcile may take back to back (admission → identity → first reading …).
const MAX_STEPS: usize = 8;
/// A node that changes this often under us is being written by something else; try again later.
const MAX_CONFLICTS: u32 = 10;

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
    /// P1: the reads between the leader check and a power request took longer than it allowed.
    #[error(
        "not sending to the BMC: the checks after the leader check took {:.1}s, more than the {:.1}s the Lease was asked to outlast them by",
        took.as_secs_f64(),
        allowance.as_secs_f64()
    )]
    ChecksTooSlow { took: StdDuration, allowance: StdDuration },
}

impl Error {
    /// Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Api(e) => e.category(),
            Self::NodeConflicts(_) | Self::StatusConflicts(_) => "conflict",
            Self::Incomplete(_) => "invalid-object",
            Self::NotLeader(_) => "not-leader",
            Self::ChecksTooSlow { .. } => "slow-checks",
        }
    }
}

/// One reconcile of a live remediation (the finalizer is in place).
pub async fn apply<W: World>(world: &W, local: &Local, cached: &CoronerRemediation) -> Result<Next, Error> {
    let (instance, uid) = (world.instance(), cached.uid().unwrap_or_default());
    let poked = local.take_poke(&cached.name_any());
    // Taken before the look, from the stores: a move they show after it is seen at the next. For
    // every pending remediation, so that the look that queues it is remembered too.
    let pending = cached.status.as_ref().and_then(|s| s.phase).unwrap_or_default() == Phase::Pending;
    let fingerprint = match pending {
        true => Some(queue_fingerprint(world, cached).await?),
        false => None,
    };
    if let Some(fingerprint) = fingerprint {
        let last = local.queue_look(&instance, &uid);
        let version = cached.metadata.resource_version.as_deref();
        if let Some(sleep) = gates::queued_look_skipped(last.as_ref(), version, fingerprint, poked, world.mono()) {
            return Ok(Next::Requeue(sleep));
        }
    }
    // A look that fails half-way leaves none behind: its retry looks (a poke it took is not lost).
    local.looked(&instance, &uid, None);
    let mut fence = Fence::load(world, local, cached).await?;
    let next = fence.run().await;
    // W1: a decision held back for the next write that did not come in this reconcile (the start of
    // a fence whose gates decided nothing new) is written now.
    fence.flush().await?;
    let frees_in = *fence.window_frees_in.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let look = match (&next, fingerprint, gates::queued(Some(&fence.status()))) {
        (Ok(Next::Requeue(_)), Some(fingerprint), true) => Some(gates::QueueLook {
            resource_version: fence.remediation.metadata.resource_version.clone(),
            fingerprint,
            until: frees_in.map(|frees| world.mono() + frees),
        }),
        _ => None,
    };
    local.looked(&instance, &uid, look);
    next
}

/// [`gates::queue_fingerprint`] from the stores (no request).
async fn queue_fingerprint<W: World>(world: &W, me: &CoronerRemediation) -> Result<u64, Error> {
    let remediations = world.remediations(Listing::Stored).await?;
    let bindings = world.bindings(Listing::Stored).await?;
    let mono = world.mono();
    let lease_changed = match world.lease_sighting(node_of(me).as_deref().unwrap_or_default(), mono) {
        gates::LeaseSighting::Missing => None,
        gates::LeaseSighting::Seen { age } => Some(mono.saturating_sub(age)),
    };
    Ok(gates::queue_fingerprint(me, &remediations, &bindings, lease_changed))
}

/// The finalizer: remove the taints this remediation owns and, once its release is over, the
/// approval to power the released machine on ([`crate::guard::approval_ends`]) — if the node still exists —,
/// then let go. Before that, the bootID check one last time: NHC deletes the remediation about two
/// seconds after the node is Ready, so a node that never went down is reported on the Node. A node
/// that has not reported back yet keeps the release's bootID in the same Node update, for the sweep
/// ([`crate::guard::watched_after_deletion`]).
pub async fn cleanup<W: World>(world: &W, local: &Local, remediation: &CoronerRemediation) -> Result<Next, Error> {
    let instance = world.instance();
    let uid = remediation.uid().ok_or(Error::Incomplete("uid"))?;
    let status = remediation.status.clone().unwrap_or_default();
    let mut watch = None;
    if let Some(node) = node_of(remediation) {
        let found = world.node(&node).await?;
        // R4: the Node was deleted while the release stood; the guard ends with this remediation.
        if found.is_none()
            && let Some((binding, notice)) = crate::guard::unguarded_by_node_deletion(&status, &node)
        {
            let regarding = ObjectReference {
                api_version: Some("coroner.dev/v1alpha1".into()),
                kind: Some("BmcBinding".into()),
                name: Some(binding),
                namespace: Some(world.settings().namespace.clone()),
                ..Default::default()
            };
            warn!(node, "{}", notice.message);
            world.publish(&regarding, &notice, "Cleanup").await;
            world.publish(&remediation.object_ref(&()), &notice, "Cleanup").await;
        }
        if let Some(found) = found {
            let snapshot = NodeSnapshot::new(&found, world.node_lease(&node).await?, &uid);
            // R1: the node came back Ready while the release stood and NHC deleted the remediation
            // before any reconcile saw it: the finalizer reports it, once (its record in status).
            // Read afresh: a finalizer retried after a conflict must see what the first try recorded.
            let mut current = world.remediation(&remediation.name_any()).await?.unwrap_or_else(|| remediation.clone());
            let mut status = current.status.clone().unwrap_or_default();
            let id = crate::guard::release_id(&uid, &status);
            let value = found.annotations().get(crate::guard::APPROVAL_ANNOTATION).map(String::as_str);
            let approval = crate::guard::approval(id.as_deref(), value);
            if let Some(new) = crate::guard::returned_without_approval(&status, &snapshot, approval, world.now()) {
                current = world.write_status(&current, new).await?;
                status = current.status.clone().unwrap_or_default();
                let notice = crate::guard::returned_notice(&node, id.as_deref());
                world.publish(&remediation.object_ref(&()), &notice, "Cleanup").await;
                world.publish(&found.object_ref(&()), &notice, "Cleanup").await;
                world.metrics().returned_without_approval.get_or_create(&NodeLabels { node: node.clone() }).inc();
                world.metrics().safety_override("ReturnedWithoutApproval");
            }
            let on_node = crate::guard::unconfirmed_release(&found);
            let reported_here = local.remembered(&instance, &uid).finalizer_reported;
            let name = remediation.name_any();
            #[allow(unused_mut)]
            let mut decided =
                crate::guard::at_deletion(&status, &snapshot, on_node.as_ref(), &name, &uid, reported_here);
            #[cfg(test)]
            if sabotaged(world, crate::sabotage::Sabotage::BootIdUnchecked) {
                decided.report = None;
            }
            if let Some(message) = decided.report {
                // Published first (a status write whose answer is lost must not lose the report),
                // then recorded on the remediation, so a retry in another process does not repeat it.
                local.remember(&instance, &uid, Memory { finalizer_reported: true, ..Memory::default() });
                world.metrics().fence_did_not_take_effect.get_or_create(&NodeLabels { node: node.clone() }).inc();
                let reason = crate::guard::DID_NOT_TAKE_EFFECT.into();
                let notice = fence::Notice { warning: true, reason, message: message.clone() };
                world.publish(&found.object_ref(&()), &notice, "Cleanup").await;
                if let Some(recorded) =
                    crate::guard::record_did_not_take_effect(&status, &Memory::default(), &message, world.now())
                {
                    world.write_status(&current, recorded.status).await?;
                }
            }
            watch = decided.watch;
        }
        remove_owned_taints(world, &node, &uid, &status, watch.as_ref()).await?;
        info!(node, "removed the taints this remediation owned");
    }
    if !local.remembered(&instance, &uid).finalizer_reported {
        local.forget(&uid);
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
pub fn node_of(remediation: &CoronerRemediation) -> Option<String> {
    let admitted = remediation.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()).map(|n| n.name.clone());
    admitted.or_else(|| contract::node_name(&remediation.metadata).map(str::to_owned))
}

fn timing<W: World>(world: &W) -> Timing {
    let settings = world.settings();
    Timing { request_timeout: settings.request_timeout, read_retries: settings.read_retries }
}

/// One remediation being worked on in this reconcile.
struct Fence<'a, W: World> {
    world: &'a W,
    local: &'a Local,
    /// The latest version read or written; status writes carry its resourceVersion.
    remediation: CoronerRemediation,
    /// A status decided on top of `remediation` and not yet written (W1).
    held: Option<CoronerRemediationStatus>,
    node_name: String,
    uid: String,
    /// How long until the fence window frees, when the gates queued the fence on it (uncapped: the
    /// queued look's `until`).
    window_frees_in: std::sync::Mutex<Option<StdDuration>>,
}

impl<'a, W: World> Fence<'a, W> {
    /// Reads the remediation afresh: the cache may trail coroner's own last status write.
    async fn load(world: &'a W, local: &'a Local, cached: &CoronerRemediation) -> Result<Self, Error> {
        let name = cached.name_any();
        let remediation =
            world.remediation(&name).await?.ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
        let node_name = node_of(&remediation).ok_or(Error::Incomplete("node name"))?;
        let uid = remediation.uid().ok_or(Error::Incomplete("uid"))?;
        let held = local.unwritten(&world.instance(), &uid, &remediation);
        Ok(Self { world, local, remediation, held, node_name, uid, window_frees_in: Default::default() })
    }

    /// What this instance knows of the fence ([`Local::remembered`]).
    fn remembered(&self) -> Memory {
        let memory = self.local.remembered(&self.world.instance(), &self.uid);
        #[cfg(test)]
        if sabotaged(self.world, crate::sabotage::Sabotage::ProofResumed) && memory.proof.is_none() {
            return self.resumed(memory);
        }
        memory
    }

    /// Test builds only: a fence another process was proving resumes the run its status shows as its
    /// own, unbroken up to now, and in `Releasing` as its proof (`Sabotage::ProofResumed`: what "the
    /// proof lives in one process" forbids).
    #[cfg(test)]
    fn resumed(&self, memory: Memory) -> Memory {
        let status = self.status();
        let Some(shown) = status.progress.as_ref().and_then(|p| p.off_run.as_ref()) else { return memory };
        let phase = fence::phase_of(&status);
        let Some(first) = shown.first.first() else { return memory };
        if !matches!(phase, Phase::ConfirmingOff | Phase::Releasing) || shown.instance == self.world.instance() {
            return memory;
        }
        let (wall, now) = (self.world.now(), self.world.mono());
        let answered = now.saturating_sub(wall.duration_since(first.at.0).unsigned_abs());
        let first = Sampled { requested: answered, answered };
        let run = fence::Run { first, last: Sampled { requested: now, answered: now }, count: shown.count };
        let proof = (phase == Phase::Releasing).then_some(run);
        Memory { run: Some(run), proof, ..memory }
    }

    /// How long ago this process saw the node's Lease change.
    fn lease_sighting(&self) -> gates::LeaseSighting {
        #[cfg(test)]
        if sabotaged(self.world, crate::sabotage::Sabotage::LeaseUnchecked) {
            return gates::LeaseSighting::Missing;
        }
        self.world.lease_sighting(&self.node_name, self.world.mono())
    }

    fn remember(&self, memory: Memory) {
        self.local.remember(&self.world.instance(), &self.uid, memory);
    }

    /// The status this process decided last: written, or held for the next write (W1).
    fn status(&self) -> CoronerRemediationStatus {
        self.held.clone().or_else(|| self.remediation.status.clone()).unwrap_or_default()
    }

    /// Takes `status` as the one the API server holds (just read or written).
    fn stored(&mut self, remediation: CoronerRemediation) {
        self.remediation = remediation;
        self.held = None;
        self.local.hold(&self.uid, None);
    }

    /// Writes a status held back for a write that did not come (W1): the start of a fence.
    async fn flush(&mut self) -> Result<(), Error> {
        let Some(held) = self.held.clone() else { return Ok(()) };
        let stored = self.remediation.status.clone().unwrap_or_default();
        if fence::may_wait_for_next_write(&stored, &held) {
            return Ok(());
        }
        let written = self.world.write_status(&self.remediation, held).await?;
        self.stored(written);
        Ok(())
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
            levels: None,
            #[cfg(test)]
            sabotage: self.world.sabotage(),
        }
    }

    async fn run(&mut self) -> Result<Next, Error> {
        let now = self.world.now();
        let timed_out = contract::nhc_timed_out(&self.remediation.metadata);
        if timed_out.is_some() && !fence::runs_past_nhc_timeout(&self.status(), timed_out) {
            // NHC gave up on the remediation, not on the released machine: a release already on the
            // Node is recorded first, so the guard and the bootID check keep watching it.
            let Some(node) = self.world.node(&self.node_name).await? else {
                if let Some(decision) = fence::timed_out(&self.status(), self.world.now()) {
                    self.commit(fence::keeping_last_reading(decision, &self.remembered()), None).await?;
                }
                return Ok(Next::AwaitChange);
            };
            let ended = self.end_timed_out(&node).await;
            // R2: the guard watches the released machine even while ending keeps failing (a denied
            // Node write), as it does while a step of the fence does.
            let guard = self.guard(&node).await;
            ended?;
            return Ok(sooner(Next::AwaitChange, guard?));
        }
        let Some(node) = self.world.node(&self.node_name).await? else {
            if let Some(decision) = fence::node_missing(&self.status(), &self.node_name, now) {
                self.commit(fence::keeping_last_reading(decision, &self.remembered()), None).await?;
            }
            return Ok(Next::AwaitChange);
        };
        if let Some(decision) = fence::start(&self.status(), &self.node_name, now) {
            // W1: the gates decide right after; their write carries the start.
            Box::pin(self.commit_as(decision, Some(&node), true)).await?;
        }
        let memory = self.remembered();
        let generation = self.remediation.metadata.generation;
        if let Some(notice) =
            fence::ignored_spec_edit(&self.remediation.spec, &self.status(), generation, memory.spec_edit_announced)
        {
            info!(reason = %notice.reason, "{}", notice.message);
            let phase = fence::phase_of(&self.status());
            self.world.publish(&self.remediation.object_ref(&()), &notice, phase.as_str()).await;
            self.remember(Memory { spec_edit_announced: generation, ..memory });
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

    /// The end of a fence NHC timed out: a release already on the Node recorded first (the guard
    /// and the bootID check keep watching it), the fence ended, the bootID checked, the taints
    /// settled.
    async fn end_timed_out(&mut self, node: &Node) -> Result<(), Error> {
        self.record_standing_release(node).await?;
        if let Some(decision) = fence::timed_out(&self.status(), self.world.now()) {
            self.commit(fence::keeping_last_reading(decision, &self.remembered()), None).await?;
        }
        self.check_boot_id(node).await?;
        self.settle_taints().await.map(drop)
    }

    /// The fence's steps, back to back while the state machine asks for no wait.
    async fn steps(&mut self, mut node: Node) -> Result<Next, Error> {
        for _ in 0..MAX_STEPS {
            let status = self.status();
            // Admissions are serialised: the storm limits count what the others already took, and
            // the admission time is taken once the turn has come.
            let mut admissions = match fence::phase_of(&status) {
                Phase::Pending => Some(self.local.admissions.lock().await),
                // A4: a look may start a proof, which the gates of a new fence must see.
                Phase::Failed if fence::look_pending(&status).is_some() => Some(self.local.admissions.lock().await),
                _ => None,
            };
            let lease = self.world.node_lease(&self.node_name).await?;
            let snapshot = NodeSnapshot::new(&node, lease, &self.uid);
            let instance = self.world.instance();
            let spec = self.spec();
            let hold = match gates::lease_stale(self.lease_sighting(), spec.lease_freshness.get()) {
                Gate::Wait(reason, message) | Gate::Refuse(reason, message) => Some((reason, message)),
                Gate::Admit => None,
            };
            let memory = self.remembered();
            // Boxed: a binding is large, and this future is polled on the caller's stack.
            let level_binding = Box::pin(self.level_binding()).await?.map(Box::new);
            let level_binding_name = level_binding.as_ref().map(|b| b.name_any()).unwrap_or_default();
            let confirmed = level_binding.as_ref().map(|b| self.confirmed_levels(b)).unwrap_or_default();
            let levels = level_binding.as_ref().map(|b| fence::LevelsView {
                binding: &level_binding_name,
                generation: b.metadata.generation,
                levels: &b.spec.pdu_levels,
                confirmed: &confirmed,
            });
            let context = fence::Context {
                hold_power_action: hold.as_ref(),
                levels,
                ..self.context(&snapshot, &memory, &instance)
            };
            let plan = fence::plan(&spec, &status, context);
            debug!(phase = fence::phase_of(&status).as_str(), ?plan, "step");
            if matches!(
                plan,
                Plan::VerifyIdentity
                    | Plan::Look
                    | Plan::ReadPower { .. }
                    | Plan::ReadOutlets { .. }
                    | Plan::AskBmcAfterOutlets
            ) {
                // A1: a process that knows it was deposed reads no more (another reads now, and a
                // reading this one could not record would be lost); a reader is named in status
                // before its first reading of the machine.
                if !self.world.leading() {
                    return Ok(Next::AwaitChange);
                }
                if fence::reader_unnamed(&status, &instance) {
                    let decision = Decision { status, memory, reset: None, requeue: None, notices: Vec::new() };
                    self.commit(decision, Some(&node)).await?;
                    continue;
                }
            }
            // A4: a look is let through under the admissions lock, and counts as a fence of the node
            // holding a power slot from then on (`Admissions::reproving`) while it is asked for; the
            // lock is not held across its read.
            let look = match (&plan, admissions.as_deref()) {
                (Plan::Look, Some(history)) => Some(self.look_gate(history).await?),
                _ => None,
            };
            if let (Some(fence::LookGate::Take), Some(history)) = (&look, admissions.as_deref_mut()) {
                let asked = fence::look_pending(&status).map_or(Timestamp::UNIX_EPOCH, |l| l.requested_at.0);
                history.reproving.insert(self.uid.clone(), asked);
                admissions = None;
            }
            let gathered = match (&plan, admissions.as_deref_mut(), look) {
                (Plan::Admit, Some(history), _) => {
                    Gathered::Plain(Observation::Admission(self.admission(&node, &snapshot, history).await?))
                }
                (Plan::Look, _, Some(fence::LookGate::Wait(why))) => {
                    debug!(node = %self.node_name, "the look waits: {why}");
                    Gathered::Plain(Observation::Wait)
                }
                (Plan::Look, _, Some(fence::LookGate::Withdraw(why))) => {
                    Gathered::Plain(Observation::LookNotTaken(why))
                }
                _ => match self.observe(&plan, &snapshot, &memory).await {
                    Ok(gathered) => gathered,
                    // P5: the phase's deadline is judged on a failed observation too.
                    Err(error @ (Error::Api(_) | Error::NodeConflicts(_))) => {
                        // What the failed observation remembered (a reading it took, A1) is kept.
                        let memory = self.remembered();
                        let context = fence::Context {
                            now: self.world.now(),
                            mono: self.world.mono(),
                            memory: &memory,
                            ..context
                        };
                        let unavailable = Observation::Unavailable(error.to_string());
                        self.commit(fence::next(&spec, &status, unavailable, context), Some(&node)).await?;
                        return Err(error);
                    }
                    Err(error) => return Err(error),
                },
            };
            let (observation, aim) = gathered.split();
            // The clocks as they stand after the observation, which may have taken a while.
            let context = fence::Context { now: self.world.now(), mono: self.world.mono(), ..context };
            let decision = fence::next(&spec, &status, observation, context);
            let requeue = decision.requeue;
            let reset = decision.reset;
            let to_outlets = fence::phase_of(&decision.status) == Phase::PoweringOffOutlets;
            let before = self.status();
            // An admission counts from before its write: a write that took effect but whose answer
            // was lost leaves a store showing it Pending, and the gates must still count it (an
            // admission that did not happen only makes the others wait).
            if let Some(history) = admissions.as_deref_mut()
                && fence::phase_of(&decision.status) == Phase::VerifyingIdentity
            {
                history.times.insert(self.uid.clone(), context.now);
            }
            #[cfg(test)]
            if sabotaged(self.world, crate::sabotage::Sabotage::ResetBeforeIntent)
                && reset == Some(ResetType::ForceOff)
                && !to_outlets
            {
                self.send_reset(ResetType::ForceOff, aim.clone(), &node).await?;
            }
            self.commit(decision, Some(&node)).await?;
            // A change held for the next write (W1) wakes the fence as its write would have.
            let requeue = match requeue {
                None if self.held.is_some() && self.status() != before => Some(StdDuration::ZERO),
                requeue => requeue,
            };
            drop(admissions);
            let requeue = match reset {
                Some(ResetType::ForceOff) if to_outlets => {
                    Box::pin(self.send_outlets_off(&node)).await?;
                    requeue
                }
                Some(reset) => {
                    let accepted = self.send_reset(reset, aim, &node).await?;
                    if fence::read_at_once_after(reset, accepted) { Some(StdDuration::ZERO) } else { requeue }
                }
                None => requeue,
            };
            let settled = self.settle_taints().await?;
            match requeue {
                // The next step works on the Node as the taints' update just read or wrote it.
                Some(StdDuration::ZERO) => {
                    node = match settled {
                        Some(latest) => latest,
                        None => self.world.node(&self.node_name).await?.unwrap_or(node),
                    };
                }
                // The wait counts from the decision: its writes and notices since took part of it
                // (a wait they used up goes through the queue all the same, not on in this loop).
                Some(after) => {
                    let spent = self.world.mono().saturating_sub(context.mono);
                    return Ok(Next::Requeue(after.saturating_sub(spent)));
                }
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
            // The identity read is also the first power reading: a ForceOff decided on it aims there.
            Plan::VerifyIdentity => match self.identity(snapshot).await? {
                Ok(found) => {
                    let aim =
                        Aim { system: found.system.clone(), through: found.through, origin: found.origin.clone() };
                    Gathered::Aimed(Observation::Identity(Ok(found)), aim)
                }
                problem => Gathered::Plain(Observation::Identity(problem)),
            },
            // A4: the look through the binding, once [`Fence::look_gate`] let it be taken.
            Plan::Look => {
                let nhc_timed_out = contract::nhc_timed_out(&self.remediation.metadata).map(str::to_owned);
                Gathered::Plain(Observation::Looked { found: self.identity(snapshot).await?, nhc_timed_out })
            }
            Plan::ReadPower { system_path } => Gathered::Reading(self.read_power(system_path).await?),
            Plan::ReadOutlets { level } => {
                Gathered::Plain(Observation::Outlets(Box::pin(self.read_outlets(*level)).await?))
            }
            Plan::AskBmcAfterOutlets => {
                Gathered::Plain(Observation::BmcAfterOutlets(Box::pin(self.ask_bmc_after_outlets(snapshot)).await?))
            }
            Plan::Release => {
                let (spec, status) = (self.spec(), self.status());
                let deadline = fence::proof_deadline(&spec, memory, timing(self.world)).unwrap_or_default();
                let (node, uid) = (&self.node_name, &self.uid);
                Gathered::Plain(Observation::Release(match spec.remediation_strategy {
                    RemediationStrategy::OutOfServiceTaint => {
                        let release =
                            ProvenRelease { spec: &spec, status: &status, node_name: node, owner_uid: uid, deadline };
                        write_release(self.world, &release, node).await?
                    }
                    RemediationStrategy::ResourceDeletion => {
                        // R1: from the first deletion on, this process no longer knows that nothing went.
                        let sending = || {
                            let mut memory = self.remembered();
                            memory.begun_untouched = false;
                            self.remember(memory);
                        };
                        release_by_deletion(self.world, &spec, &status, node, uid, deadline, sending).await?
                    }
                }))
            }
            Plan::BeginDeletion => {
                let (spec, status) = (self.spec(), self.status());
                let deadline = fence::proof_deadline(&spec, memory, timing(self.world)).unwrap_or_default();
                Gathered::Plain(Observation::DeletionMayBegin(
                    deletion_check(self.world, &spec, &status, &self.node_name, &self.uid, deadline).await?,
                ))
            }
            Plan::FinishDeletion { system_path } => {
                match finished_deletion(self.world, &self.spec(), &self.status(), &self.node_name, &self.uid).await? {
                    Some(outcome) => Gathered::Plain(Observation::Release(outcome)),
                    None => Gathered::Reading(self.read_power(system_path).await?),
                }
            }
            Plan::RecordRelease => Gathered::Plain(Observation::Release(
                standing_release(self.world, &self.status(), snapshot, &self.uid).await?,
            )),
            Plan::CheckWorkloads => {
                Gathered::Plain(Observation::Workloads(workloads(self.world, &self.node_name).await?))
            }
        })
    }

    /// This replica runs on the node to fence. With another replica ready it hands leadership over;
    /// otherwise the remediation waits (`LeaderOnTargetNode`).
    async fn leader_on_target(&mut self, node: &Node, now: Timestamp) -> Result<Next, Error> {
        if self.world.hand_over(&self.node_name).await? {
            info!("the node to fence runs this leader; handing leadership over");
            return Ok(Next::AwaitChange);
        }
        let decision = fence::keeping_last_reading(
            fence::leader_on_target(&self.status(), &self.node_name, now),
            &self.remembered(),
        );
        let requeue = decision.requeue;
        self.commit(decision, Some(node)).await?;
        Ok(requeue.map_or(Next::AwaitChange, Next::Requeue))
    }

    /// Makes coroner's taints on the node match what the remediation's state wants. `Some`: the Node
    /// as its GET or its patch's answer showed it; `None`: nothing read (a Pending fence without
    /// evidence) or no Node.
    async fn settle_taints(&self) -> Result<Option<Node>, Error> {
        let status = self.status();
        if fence::phase_of(&status) == Phase::Pending && status.evidence.is_none() {
            return Ok(None);
        }
        let fencing = fence::fencing_taint_wanted(&self.spec(), &status);
        let out_of_service_ends = fence::out_of_service_taint_ends(&status);
        align_taints(self.world, &self.node_name, &self.uid, fencing, out_of_service_ends).await
    }
}

/// What an observation brought: a power reading keeps what it read and through which device, for
/// the reset.
enum Gathered {
    Plain(Observation),
    /// An observation that read the machine (the identity read) and what an action after it aims at.
    Aimed(Observation, Aim),
    Reading(Result<(Aim, PowerReading), BmcFailure>),
}

impl Gathered {
    fn split(self) -> (Observation, Option<Aim>) {
        match self {
            Self::Plain(observation) => (observation, None),
            Self::Aimed(observation, aim) => (observation, Some(aim)),
            Self::Reading(Ok((aim, reading))) => (Observation::Power(Ok(reading)), Some(aim)),
            Self::Reading(Err(failure)) => (Observation::Power(Err(failure)), None),
        }
    }
}
