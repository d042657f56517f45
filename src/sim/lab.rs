//! A lab: the simulator's in-memory world without its faults, one coroner process, and the power
//! device a test picks, so an ordinary test runs the real fence loop — [`driver::apply`] and
//! [`driver::cleanup`] under the finalizer helper ([`super::reconcile`]) — against a small world:
//! one Node (`Ready=Unknown`, its Lease long stale), its BmcBinding and credentials Secret, and the
//! remediation NHC created. The objects behave as in the simulator (the same [`Truth`] methods:
//! resourceVersion preconditions, the apiserver's JSON round trip, finalizers); left out are the
//! faults, the crash points and the executor.
//!
//! Two clocks: real time under tokio, for a real `RedfishClient` (tests/redfish.rs); virtual time
//! for a [`Scripted`] device (unit tests), where a run is deterministic and takes no wall time.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration as StdDuration,
};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::ResourceExt;

use super::{
    Finalizer,
    exec::{Micros, micros},
    script::{Script, Scripted},
    world::{Caller, Policies, Truth},
};
use crate::{
    access::{Cause, Unusable},
    api::{
        BmcBinding, BmcBindingStatus, CoronerAttestation, CoronerAttestationStatus, CoronerRemediation,
        CoronerRemediationSpec, CoronerRemediationStatus, Phase, conditions,
    },
    controller::LeaseTracker,
    controller::retry,
    driver::{
        self, Admissions, ApiResult, Local, LoopSettings, Next, World,
        ports::{
            Attestations, Clock, Cluster, Devices, Events, Leadership, Level, Listing, NodeLeases, Nodes, Remediations,
            Target,
        },
    },
    fence::{Mono, Notice},
    gates::{LeaseSighting, StormLimits},
    pdu::{OutletReading, PduError},
    telemetry::Metrics,
};

pub const NAMESPACE: &str = "coroner";
/// The lab's one process, as the simulator numbers processes (its instance is `p1/<term>`).
const PID: u32 = 1;
/// A run that reconciles this often without ending is a loop that does not converge.
const MAX_RECONCILES: usize = 20_000;

/// What the lab's world holds at the start (see [`Lab::new`]).
#[derive(Clone, Debug)]
pub struct Setup {
    /// The node to fence; the remediation has its name, as NHC names it.
    pub node: String,
    /// The systemUUID its kubelet reported.
    pub system_uuid: String,
    /// The remediation's spec (NHC copies it from the template).
    pub spec: CoronerRemediationSpec,
}

impl Setup {
    /// Node `worker-1`, reporting `system_uuid`.
    pub fn new(system_uuid: &str, spec: CoronerRemediationSpec) -> Self {
        Self { node: "worker-1".into(), system_uuid: system_uuid.into(), spec }
    }
}

/// A change a test makes to the lab's world at a moment the lab picks.
pub type WorldChange = Box<dyn FnOnce(&mut Truth) + Send>;

/// The lab's time: the machine's clock, or a virtual one that moves only when the loop (or a
/// scripted device's latency) sleeps.
#[derive(Clone, Debug)]
pub struct LabClock {
    epoch: Timestamp,
    virtual_now: Option<Arc<Mutex<Micros>>>,
}

impl LabClock {
    pub fn real() -> Self {
        // Whole microseconds: the times the world derives from it (a Lease's renewTime) are the
        // apiserver's MicroTimes.
        let now = Timestamp::now();
        let epoch = Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now);
        Self { epoch, virtual_now: None }
    }

    /// Virtual time from the simulator's epoch.
    pub fn virtual_time() -> Self {
        Self { epoch: Truth::new(NAMESPACE).epoch, virtual_now: Some(Arc::default()) }
    }

    /// Time since the lab began.
    pub fn micros(&self) -> Micros {
        match &self.virtual_now {
            Some(now) => *now.lock().unwrap_or_else(PoisonError::into_inner),
            None => i64::try_from(Timestamp::now().duration_since(self.epoch).as_micros()).unwrap_or(Micros::MAX),
        }
    }

    pub fn now(&self) -> Timestamp {
        match &self.virtual_now {
            Some(_) => self.epoch + SignedDuration::from_micros(self.micros()),
            None => Timestamp::now(),
        }
    }

    pub async fn sleep(&self, duration: StdDuration) {
        match &self.virtual_now {
            Some(now) => *now.lock().unwrap_or_else(PoisonError::into_inner) += micros(duration),
            None => tokio::time::sleep(duration).await,
        }
    }
}

/// What dies with the process: its leadership term, its Lease sightings, what it knew of the fence
/// and its client's serial.
struct Incarnation {
    term: u64,
    tracker: LeaseTracker,
    serial: u64,
}

/// How long the lab's process has been running when the lab begins: it has watched the node's Lease
/// (which did not change) that long.
const UPTIME: StdDuration = StdDuration::from_secs(3600);

pub struct Lab<D, L = NoLevel> {
    name: String,
    clock: LabClock,
    truth: Mutex<Truth>,
    device: D,
    /// The devices of the binding's PDU level 2, when the test gives it one.
    level: Option<L>,
    settings: LoopSettings,
    metrics: Metrics,
    incarnation: Mutex<Incarnation>,
    local: Local,
    /// When the current process started, on the lab's clock.
    started: Mutex<Micros>,
    /// Every status coroner wrote, in order.
    history: Mutex<Vec<CoronerRemediationStatus>>,
    decided: Mutex<Vec<CoronerRemediationStatus>>,
    /// Events published: the kind of object they regard, and the notice.
    events: Mutex<Vec<(String, Notice)>>,
    /// Errors reconciles returned (the controller retries them).
    errors: Mutex<Vec<String>>,
    /// Every binding status coroner wrote, in order: the binding's name and the status.
    binding_history: Mutex<Vec<(String, BmcBindingStatus)>>,
    /// A change of the world made at the first Node read while the remediation is `Releasing` (right
    /// before the release's re-checks read the Node).
    before_release: Mutex<Option<WorldChange>>,
    /// While set, the API server refuses binding status writes.
    binding_writes_refused: std::sync::atomic::AtomicBool,
    /// While set, the API server refuses every read of a credentials Secret.
    secret_reads_refused: std::sync::atomic::AtomicBool,
    /// Set: the binding's endpoint is edited at the next leader check (right before a power action).
    edit_at_leader_check: std::sync::atomic::AtomicBool,
    /// The kubelet renews the node's Lease right after the next Node write that adds an
    /// out-of-service taint (or takes one over).
    renew_after_taint: std::sync::atomic::AtomicBool,
    /// Someone edits the binding as the next guard intent is persisted.
    edit_at_guard_intent: std::sync::atomic::AtomicBool,
    /// Set: the first Node read after the next leader check takes this long (micros).
    slow_after_leader_check: std::sync::atomic::AtomicI64,
    /// Armed by a leader check: the next Node read takes this long (micros).
    slow_node_read: std::sync::atomic::AtomicI64,
    /// Requests sent to the API server ([`Lab::requests`]).
    requests: std::sync::atomic::AtomicU64,
    /// How long a run may take before it counts as one that never ends.
    pub limit: StdDuration,
}

impl Lab<Scripted> {
    /// A lab on virtual time whose BMC answers from `script`.
    pub fn scripted(setup: &Setup, script: Script) -> Self {
        let clock = LabClock::virtual_time();
        let device = Scripted::new(script, clock.clone());
        Self::new(setup, clock, device)
    }
}

impl<D: Target + Clone> Lab<D> {
    /// The world of `setup`, its binding leading to `device`'s origin. The process has been running
    /// (and watching the node's Lease, which has not changed) for an hour.
    pub fn new(setup: &Setup, clock: LabClock, device: D) -> Self {
        Self::with_level(setup, clock, device, None)
    }
}

/// No PDU level: what a lab without one (and the simulator, which models no PDUs yet) gives.
#[derive(Clone, Debug)]
pub struct NoLevel;

impl Level for NoLevel {
    fn outlets(&self) -> Vec<(String, f64)> {
        Vec::new()
    }

    async fn read(&self, index: usize) -> Result<OutletReading, PduError> {
        Err(PduError::NoSuchOutlet(index.to_string()))
    }

    async fn switch_off(&self, index: usize) -> Result<(), PduError> {
        Err(PduError::NoSuchOutlet(index.to_string()))
    }
}

/// A level's outlets in memory: each On or Off, unmetered, every answer at once. A test gives it to
/// [`Lab::with_level`] and names the same keys in the binding's level.
#[derive(Clone, Debug)]
pub struct LabOutlets {
    keys: Vec<String>,
    on: Arc<Mutex<Vec<bool>>>,
}

impl LabOutlets {
    /// Outlets named `keys`, all On.
    pub fn new(keys: &[&str]) -> Self {
        Self { keys: keys.iter().map(|k| (*k).to_owned()).collect(), on: Arc::new(Mutex::new(vec![true; keys.len()])) }
    }

    pub fn is_on(&self, index: usize) -> bool {
        lock(&self.on)[index]
    }
}

impl Level for LabOutlets {
    fn outlets(&self) -> Vec<(String, f64)> {
        self.keys.iter().map(|k| (k.clone(), crate::api::DEFAULT_FLOOR_WATTS)).collect()
    }

    async fn read(&self, index: usize) -> Result<OutletReading, PduError> {
        let on = *lock(&self.on).get(index).ok_or_else(|| PduError::NoSuchOutlet(index.to_string()))?;
        let state = if on { crate::pdu::OutletState::On } else { crate::pdu::OutletState::Off };
        Ok(OutletReading { state, pending: false, watts: None, metered: false })
    }

    async fn switch_off(&self, index: usize) -> Result<(), PduError> {
        let mut on = lock(&self.on);
        *on.get_mut(index).ok_or_else(|| PduError::NoSuchOutlet(index.to_string()))? = false;
        Ok(())
    }
}

impl<D: Target + Clone, L: Level + Clone> Lab<D, L> {
    /// [`Lab::new`], with `level` as the devices of the binding's PDU level 2 (whose entry the
    /// test writes into the binding through [`Lab::world`]).
    pub fn with_level(setup: &Setup, clock: LabClock, device: D, level: Option<L>) -> Self {
        let mut truth = Truth::new(NAMESPACE);
        truth.epoch = clock.epoch;
        truth.now = clock.micros();
        let node = setup.node.as_str();
        truth.add_node_as(node, &setup.system_uuid, &format!("{node}-boot-1"), conditions::UNKNOWN, &[]);
        truth.add_binding(node, node, &device.origin(), None);
        truth.create_remediation(node, node, &setup.spec);
        let tracker = LeaseTracker::default();
        for (node, renewed) in &truth.leases {
            tracker.observe(node, *renewed, StdDuration::ZERO);
        }
        tracker.set_synced(true);
        let started = clock.micros() - micros(UPTIME);
        let limit = match clock.virtual_now {
            Some(_) => StdDuration::from_secs(3600),
            None => StdDuration::from_secs(120),
        };
        Self {
            name: node.into(),
            clock,
            truth: Mutex::new(truth),
            device,
            level,
            settings: LoopSettings {
                namespace: NAMESPACE.into(),
                limits: StormLimits { max_concurrent: 3, max_per_window: 5, window: StdDuration::from_secs(600) },
                request_timeout: StdDuration::from_secs(2),
                read_retries: 1,
                guard_interval: StdDuration::from_secs(10),
            },
            metrics: Metrics::new().0,
            incarnation: Mutex::new(Incarnation { term: 1, tracker, serial: 1 }),
            local: Local::default(),
            started: Mutex::new(started),
            history: Mutex::default(),
            decided: Mutex::default(),
            events: Mutex::default(),
            errors: Mutex::default(),
            binding_history: Mutex::default(),
            before_release: Mutex::default(),
            binding_writes_refused: std::sync::atomic::AtomicBool::new(false),
            secret_reads_refused: std::sync::atomic::AtomicBool::new(false),
            edit_at_leader_check: std::sync::atomic::AtomicBool::new(false),
            renew_after_taint: std::sync::atomic::AtomicBool::new(false),
            edit_at_guard_intent: std::sync::atomic::AtomicBool::new(false),
            slow_after_leader_check: std::sync::atomic::AtomicI64::new(0),
            slow_node_read: std::sync::atomic::AtomicI64::new(0),
            requests: std::sync::atomic::AtomicU64::new(0),
            limit,
        }
    }

    /// Reads or changes the world (between reconciles): another Node, a kubelet that reports, …
    pub fn world<T>(&self, f: impl FnOnce(&mut Truth) -> T) -> T {
        let mut truth = self.truth.lock().unwrap_or_else(PoisonError::into_inner);
        truth.now = self.clock.micros();
        truth.call_started = truth.now;
        let term = lock(&self.incarnation).term;
        truth.caller = Caller { pid: PID, term, task: self.name.clone() };
        f(&mut truth)
    }

    /// Changes or reads the world as a request of coroner's to the API server (counted).
    fn request<T>(&self, f: impl FnOnce(&mut Truth) -> T) -> T {
        self.requests.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.world(f)
    }

    /// A list: from a store (no request; the lab's stores never trail) or from the API server.
    fn listing<T>(&self, from: Listing, f: impl FnOnce(&mut Truth) -> T) -> T {
        match from {
            Listing::Stored => self.world(f),
            Listing::Fresh => self.request(f),
        }
    }

    /// How many requests coroner sent the API server so far (reads and writes; a store's list apart).
    pub fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The content (device digest) of the client the lab's devices stand for now.
    pub fn device_content(&self) -> u64 {
        lock(&self.incarnation).serial
    }

    /// What the lab's process keeps in memory.
    pub fn local(&self) -> &Local {
        &self.local
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    pub fn clock(&self) -> &LabClock {
        &self.clock
    }

    /// The remediation's status now (the last one written once the remediation is gone).
    pub fn status(&self) -> CoronerRemediationStatus {
        match self.world(|t| t.remediation(&self.name)) {
            Some(remediation) => remediation.status.unwrap_or_default(),
            None => lock(&self.history).last().cloned().unwrap_or_default(),
        }
    }

    /// Every status coroner wrote, in order.
    pub fn history(&self) -> Vec<CoronerRemediationStatus> {
        lock(&self.history).clone()
    }

    /// The status coroner decided last: the one written, or the one its process holds for the next
    /// write (W1, `fence::may_wait_for_next_write`).
    pub fn decided(&self) -> CoronerRemediationStatus {
        let Some(remediation) = self.world(|t| t.remediation(&self.name)) else { return self.status() };
        let uid = remediation.uid().unwrap_or_default();
        let held = self.local.unwritten.lock().unwrap_or_else(PoisonError::into_inner).get(&uid).cloned();
        // What this process holds now: a restarted one holds nothing of the one before.
        let instance = Leadership::instance(self);
        match held {
            Some((by, version, status))
                if by == instance && Some(&version) == remediation.metadata.resource_version.as_ref() =>
            {
                status
            }
            _ => remediation.status.unwrap_or_default(),
        }
    }

    /// Every status coroner decided, written or held, as seen after each reconcile and each write.
    pub fn decided_history(&self) -> Vec<CoronerRemediationStatus> {
        lock(&self.decided).clone()
    }

    /// The phases the remediation went through, in order.
    pub fn phases(&self) -> Vec<Phase> {
        let mut phases: Vec<Phase> = Vec::new();
        for status in lock(&self.history).iter() {
            let phase = crate::fence::phase_of(status);
            if phases.last() != Some(&phase) {
                phases.push(phase);
            }
        }
        phases
    }

    /// The reasons of the Events published on the remediation, in order.
    pub fn reasons(&self) -> Vec<String> {
        self.reasons_on("CoronerRemediation")
    }

    /// The reasons of the Events published on objects of `kind` (e.g. `Node`), in order.
    pub fn reasons_on(&self, kind: &str) -> Vec<String> {
        lock(&self.events).iter().filter(|(k, _)| k == kind).map(|(_, notice)| notice.reason.clone()).collect()
    }

    /// Every binding status coroner wrote, in order: the binding's name and the status.
    pub fn binding_history(&self) -> Vec<(String, BmcBindingStatus)> {
        lock(&self.binding_history).clone()
    }

    /// From now on the API server refuses every binding status write.
    pub fn refuse_binding_status_writes(&self) {
        self.binding_writes_refused.store(true, std::sync::atomic::Ordering::Release);
    }

    /// From now on the API server refuses every credentials Secret read (RBAC taken away).
    pub fn refuse_secret_reads(&self) {
        self.secret_reads_refused.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Someone edits the binding's endpoint right before the next power action: after the reading
    /// that asked for it, at the leader check.
    pub fn edit_endpoint_before_the_next_power_action(&self) {
        self.edit_at_leader_check.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Someone edits the binding's endpoint (a new generation) as the guard persists its next intent:
    /// after the reading that asked for the power action, before the action's checks.
    pub fn edit_binding_as_the_guard_persists_its_intent(&self) {
        self.edit_at_guard_intent.store(true, std::sync::atomic::Ordering::Release);
    }

    /// `change` happens to the world right before the release re-checks the Node: at the first Node
    /// read while the remediation is `Releasing`.
    pub fn change_before_the_release(&self, change: impl FnOnce(&mut Truth) + Send + 'static) {
        *lock(&self.before_release) = Some(Box::new(change));
    }

    /// The node's kubelet renews its Lease right after the next Node write that adds an out-of-service
    /// taint: between the release write and the Lease read that follows it.
    pub fn renew_lease_right_after_the_release(&self) {
        self.renew_after_taint.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The API server is slow right before the next power action: the first Node read after the
    /// next leader check takes `by` (a request's checks that outlast their allowance).
    pub fn slow_checks_at_the_next_power_action(&self, by: StdDuration) {
        self.slow_after_leader_check.store(micros(by), std::sync::atomic::Ordering::Release);
    }

    /// The errors reconciles returned, in order.
    pub fn errors(&self) -> Vec<String> {
        lock(&self.errors).clone()
    }

    /// The process restarts: a new leadership term (its instance changes), no Lease sightings (the
    /// first list counts as a renewal seen now), no admissions in memory.
    pub fn restart(&self) {
        *lock(&self.started) = self.clock.micros();
        let tracker = LeaseTracker::default();
        let now = self.mono();
        for (node, renewed) in self.world(|t| t.leases.clone()) {
            tracker.observe(&node, renewed, now);
        }
        tracker.set_synced(true);
        lock(&self.local.memories).clear();
        let mut incarnation = lock(&self.incarnation);
        incarnation.term += 1;
        incarnation.serial += 1;
        incarnation.tracker = tracker;
        if let Ok(mut admissions) = self.local.admissions.try_lock() {
            *admissions = Admissions::default();
        }
    }

    /// One reconcile, as kube-runtime's controller runs it. The Lease watch delivers first.
    pub async fn reconcile(&self) -> Result<Next, driver::Error> {
        let now = self.mono();
        let tracker = lock(&self.incarnation).tracker.clone();
        for (node, renewed) in self.world(|t| t.leases.clone()) {
            tracker.observe(&node, renewed, now);
        }
        let result = super::reconcile(self, &self.local, &self.name).await;
        if let Err(error) = &result {
            lock(&self.errors).push(error.to_string());
        }
        result
    }

    /// R4 and R1 past the remediation: the sweep a Node event runs for the lab's node
    /// ([`driver::orphans::sweep`]).
    pub async fn sweep(&self) -> Result<(), driver::Error> {
        driver::orphans::sweep(self, &self.local, &self.name).await
    }

    /// Runs the remediation until nothing would wake its controller (it ended, waits for a change no
    /// one makes, or is gone) and returns its status.
    pub async fn run(&self) -> CoronerRemediationStatus {
        self.run_until(|_| false).await
    }

    /// Reconciles as the controller would — at once after any change (coroner's own writes
    /// included), after the requeue's delay, after an error as coroner's error policy says
    /// ([`retry::retry_after`]) — until `until` holds
    /// after a reconcile, or nothing but the guard's timer would wake the controller. Panics past
    /// [`Lab::limit`].
    pub async fn run_until(&self, until: impl Fn(&CoronerRemediationStatus) -> bool) -> CoronerRemediationStatus {
        let deadline = self.clock.micros() + micros(self.limit);
        let mut failures = 0;
        for _ in 0..MAX_RECONCILES {
            self.world(|t| t.changes.clear());
            // The error policy judges the remediation the reconcile was given.
            let given = self.world(|t| t.remediation(&self.name));
            let within = given.and_then(|r| crate::fence::retry_within(&r.spec, r.status.as_ref()));
            let next = self.reconcile().await;
            failures = if next.is_ok() { 0 } else { failures + 1 };
            let decided = self.decided();
            {
                let mut history = lock(&self.decided);
                if history.last() != Some(&decided) {
                    history.push(decided.clone());
                }
            }
            if until(&decided) {
                return self.status();
            }
            let status = self.status();
            let changed = self.world(|t| !t.changes.is_empty());
            // A fence that ended waits for nothing but the guard's next reading of its released
            // machine: settled.
            let ended = crate::fence::phase_of(&status).is_terminal();
            let wait = match next {
                Ok(Next::Requeue(_)) if ended => None,
                Ok(Next::Requeue(after)) => Some(after),
                Ok(Next::AwaitChange) => None,
                Err(error) => retry::retry_after(retry::fence_class(&error), failures, within),
            };
            match (changed, wait) {
                (true, _) => {}
                (false, None) => return status,
                (false, Some(after)) => self.clock.sleep(after).await,
            }
            assert!(
                self.clock.micros() < deadline,
                "the remediation did not settle within {:?} (phase {:?}, errors {:?})",
                self.limit,
                status.phase,
                self.errors()
            );
        }
        panic!("{MAX_RECONCILES} reconciles and the remediation still changes: {:?}", self.status());
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<D: Target + Clone, L: Level + Clone> Finalizer for Lab<D, L> {
    async fn set_finalizer(&self, remediation: &CoronerRemediation, present: bool) -> ApiResult<()> {
        self.world(|t| t.set_finalizer(&remediation.name_any(), remediation.finalizers(), present))
    }
}

impl<D, L> Clock for Lab<D, L> {
    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn mono(&self) -> Mono {
        micros_to_mono(self.clock.micros() - *lock(&self.started))
    }

    fn sleep(&self, duration: StdDuration) -> impl Future<Output = ()> + Send {
        let clock = self.clock.clone();
        async move { clock.sleep(duration).await }
    }
}

fn micros_to_mono(micros: Micros) -> Mono {
    super::exec::duration(micros)
}

impl<D: Target + Clone, L: Level + Clone> Remediations for Lab<D, L> {
    async fn remediation(&self, name: &str) -> ApiResult<Option<CoronerRemediation>> {
        Ok(self.request(|t| t.remediation(name)))
    }

    async fn remediations(&self, from: Listing) -> ApiResult<Vec<CoronerRemediation>> {
        Ok(self.listing(from, |t| t.remediation_list()))
    }

    async fn write_status(
        &self,
        current: &CoronerRemediation,
        status: CoronerRemediationStatus,
    ) -> ApiResult<CoronerRemediation> {
        let expected = current.resource_version();
        let intent = status.guard.as_ref().and_then(|g| g.intent.as_ref()).is_some_and(|i| i.result.is_none());
        if intent && self.edit_at_guard_intent.swap(false, std::sync::atomic::Ordering::AcqRel) {
            let name = self.name.clone();
            self.world(|t| t.edit_binding(&name, super::scenario::BindingEdit::Endpoint));
        }
        let written = self.request(|t| t.write_status(&current.name_any(), expected.as_deref(), &status))?;
        lock(&self.history).push(written.status.clone().unwrap_or_default());
        lock(&self.decided).push(written.status.clone().unwrap_or_default());
        Ok(written)
    }
}

impl<D: Target + Clone, L: Level + Clone> Nodes for Lab<D, L> {
    async fn node(&self, name: &str) -> ApiResult<Option<Node>> {
        let releasing =
            || self.world(|t| t.remediation(&self.name).and_then(|r| r.status?.phase)) == Some(Phase::Releasing);
        if lock(&self.before_release).is_some() && releasing() {
            let change = lock(&self.before_release).take();
            if let Some(change) = change {
                self.world(change);
            }
        }
        let slow = self.slow_node_read.swap(0, std::sync::atomic::Ordering::AcqRel);
        if slow > 0 {
            self.clock.sleep(StdDuration::from_micros(slow.unsigned_abs())).await;
        }
        Ok(self.request(|t| t.node(name)))
    }

    async fn nodes(&self, from: Listing) -> ApiResult<Vec<Node>> {
        Ok(self.listing(from, |t| t.node_list()))
    }

    async fn system_uuids(&self, from: Listing) -> ApiResult<Vec<(String, String)>> {
        Ok(self.nodes(from).await?.iter().map(crate::driver::ports::system_uuid_of).collect())
    }

    async fn patch_node(&self, current: &Node, wanted: &Node) -> ApiResult<Node> {
        let taints = |n: &Node| {
            let taints = n.spec.as_ref().and_then(|s| s.taints.as_ref());
            taints.map_or(0, |t| t.iter().filter(|t| t.key == crate::taints::OUT_OF_SERVICE_KEY).count())
        };
        let owner = |n: &Node| crate::taints::ownership(n, crate::taints::CoronerTaint::OutOfService).map(|o| o.uid);
        // A release: the taint added, or one taken over (its owner record rewritten).
        let released = taints(wanted) > taints(current) || (taints(wanted) > 0 && owner(wanted) != owner(current));
        let written = self.request(|t| t.patch_node(current, wanted))?;
        if released && self.renew_after_taint.swap(false, std::sync::atomic::Ordering::AcqRel) {
            let now = self.clock.now();
            self.world(|t| t.renew_lease(&written.name_any(), now));
        }
        Ok(written)
    }
}

impl<D: Target + Clone, L: Level + Clone> NodeLeases for Lab<D, L> {
    async fn node_lease(&self, node: &str) -> ApiResult<Option<Option<Timestamp>>> {
        Ok(self.request(|t| t.node_lease(node)))
    }

    fn lease_sighting(&self, node: &str, now: Mono) -> LeaseSighting {
        lock(&self.incarnation).tracker.sighting(node, now)
    }
}

impl<D: Target + Clone, L: Level + Clone> Leadership for Lab<D, L> {
    fn instance(&self) -> String {
        format!("p{PID}/{}", lock(&self.incarnation).term)
    }

    fn own_node(&self) -> Option<&str> {
        None
    }

    fn leading(&self) -> bool {
        true
    }

    /// The lab's process is the only replica and always leads.
    async fn ensure_leader(&self, _need: StdDuration) -> Result<(), crate::leader::Refusal> {
        let slow = self.slow_after_leader_check.swap(0, std::sync::atomic::Ordering::AcqRel);
        self.slow_node_read.store(slow, std::sync::atomic::Ordering::Release);
        if self.edit_at_leader_check.swap(false, std::sync::atomic::Ordering::AcqRel) {
            let name = self.name.clone();
            self.world(|t| t.edit_binding(&name, super::scenario::BindingEdit::Endpoint));
        }
        Ok(())
    }

    async fn hand_over(&self, _node_to_fence: &str) -> ApiResult<bool> {
        Ok(false)
    }
}

impl<D: Target + Clone, L: Level + Clone> Attestations for Lab<D, L> {
    async fn attestation(&self, name: &str) -> ApiResult<Option<CoronerAttestation>> {
        Ok(self.request(|t| t.attestation(name)))
    }

    async fn attestations(&self) -> ApiResult<Vec<CoronerAttestation>> {
        Ok(self.request(|t| t.attestation_list()))
    }

    async fn write_attestation_status(
        &self,
        current: &CoronerAttestation,
        status: CoronerAttestationStatus,
    ) -> ApiResult<CoronerAttestation> {
        let expected = current.resource_version();
        self.request(|t| t.write_attestation_status(&current.name_any(), expected.as_deref(), &status))
    }

    async fn admission_policies(&self) -> ApiResult<Policies> {
        Ok(self.request(|t| t.policies.clone()))
    }
}

impl<D: Target + Clone, L: Level + Clone> Cluster for Lab<D, L> {
    async fn bindings(&self, from: Listing) -> ApiResult<Vec<BmcBinding>> {
        Ok(self.listing(from, |t| t.binding_list()))
    }

    async fn binding(&self, name: &str) -> ApiResult<Option<BmcBinding>> {
        Ok(self.request(|t| t.binding(name)))
    }

    async fn stored_binding(&self, name: &str) -> ApiResult<Option<BmcBinding>> {
        Ok(self.world(|t| t.binding(name)))
    }

    async fn kept_verification(&self, node: &str) -> ApiResult<Option<crate::verification::KeptVerification>> {
        Ok(self.request(|t| t.kept_verifications.get(node).cloned()))
    }

    async fn kept_record(
        &self,
        node: &str,
    ) -> ApiResult<(Option<crate::verification::KeptVerification>, Option<String>)> {
        Ok(self.request(|t| t.kept_record(node)))
    }

    async fn write_kept(
        &self,
        node: &str,
        kept: &crate::verification::KeptVerification,
        version: Option<&str>,
    ) -> ApiResult<()> {
        self.request(|t| t.write_kept(node, kept, version))
    }

    async fn templates(&self) -> ApiResult<Vec<crate::api::CoronerRemediationTemplate>> {
        Ok(self.request(|t| t.templates()))
    }

    async fn write_binding_status(
        &self,
        name: &str,
        _old: Option<&BmcBindingStatus>,
        status: &BmcBindingStatus,
    ) -> ApiResult<()> {
        if self.binding_writes_refused.load(std::sync::atomic::Ordering::Acquire) {
            return Err(driver::ApiError::Denied(format!("bmcbindings/{name}/status: forbidden")));
        }
        self.request(|t| t.write_binding_status(name, status))?;
        lock(&self.binding_history).push((name.to_owned(), status.clone()));
        Ok(())
    }

    async fn etcd_pods(&self, _: Listing) -> ApiResult<Vec<Pod>> {
        Ok(Vec::new())
    }

    async fn pods_on(&self, node: &str) -> ApiResult<Vec<Pod>> {
        Ok(self.request(|t| t.pods_on(node)))
    }

    async fn delete_pod(&self, pod: &Pod) -> ApiResult<()> {
        self.request(|t| t.delete_pod(pod))
    }

    async fn volume_attachments_on(&self, node: &str) -> ApiResult<usize> {
        Ok(self.request(|t| t.attachments_on(node)))
    }
}

impl<D: Target + Clone, L: Level + Clone> Events for Lab<D, L> {
    async fn publish(&self, regarding: &ObjectReference, notice: &Notice, _action: &str) {
        lock(&self.events).push((regarding.kind.clone().unwrap_or_default(), notice.clone()));
    }
}

impl<D: Target + Clone, L: Level + Clone> Devices for Lab<D, L> {
    type Target = D;
    type Level = L;

    fn seal_kept(&self, node: &str, kept: &crate::verification::KeptVerification) -> String {
        super::world::seal_kept(node, kept)
    }

    /// The lab's seal: a test that wants a confirmed level writes one with it.
    fn seal(&self, binding: &BmcBinding, confirmation: &crate::api::LevelConfirmation) -> String {
        format!("lab:{}:{}:{}", binding.uid().unwrap_or_default(), confirmation.level, confirmation.generation)
    }

    /// The test's level 2, once the binding names it.
    async fn level(&self, binding: &BmcBinding, level: u32) -> ApiResult<Result<(L, u64), Unusable>> {
        let serial = lock(&self.incarnation).serial;
        Ok(match (&self.level, level == 2 && !binding.spec.pdu_levels.is_empty()) {
            (Some(devices), true) => Ok((devices.clone(), serial)),
            _ => Err(Unusable::new(binding, Cause::NoSuchLevel { level })),
        })
    }

    /// The test's device, once the binding's credentials Secret exists.
    async fn target(&self, binding: &BmcBinding) -> ApiResult<Result<(D, u64), Unusable>> {
        let secret = &binding.spec.credentials_secret_ref.name;
        if self.secret_reads_refused.load(std::sync::atomic::Ordering::Acquire) {
            return Err(driver::ApiError::Denied(format!("secrets {secret:?} is forbidden")));
        }
        let serial = lock(&self.incarnation).serial;
        Ok(match self.world(|t| t.secret(secret)) {
            Some(_) => Ok((self.device.clone(), serial)),
            None => {
                let (namespace, name) = (binding.namespace().unwrap_or_default(), secret.clone());
                Err(Unusable::new(binding, Cause::SecretMissing { namespace, name }))
            }
        })
    }

    fn forget_target(&self, _binding: &BmcBinding) {
        lock(&self.incarnation).serial += 1;
    }
}

impl<D: Target + Clone, L: Level + Clone> World for Lab<D, L> {
    fn settings(&self) -> &LoopSettings {
        &self.settings
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
