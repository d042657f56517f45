//! One coroner process in the simulated world: the fence loop's traits over the truth, with the
//! apiserver's and the BMCs' faults, and a crash point at every call, before its effect and after
//! it (its answer then never seen). What a process keeps in memory (its Lease sightings, admissions,
//! clients, leadership term) dies with it.

mod devices;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration as StdDuration,
};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::ResourceExt;

use super::{
    exec::{Micros, SECOND, Sched},
    world::{Answered, Caller, Policies, PowerAnswers, Record, Truth},
};
use crate::{
    access::{Cause, Unusable},
    api::{
        BmcBinding, BmcBindingStatus, CoronerAttestation, CoronerAttestationStatus, CoronerRemediation,
        CoronerRemediationStatus,
    },
    bmc::SetupError,
    bmc::{Bmc, BmcError, PowerState, ResetType, SystemReading},
    contract,
    controller::LeaseTracker,
    driver::{
        ApiError, ApiResult, Local, LoopSettings, World,
        ports::{
            Attestations, Clock, Cluster, Devices, Events, Leadership, Listing, NodeLeases, Nodes, Remediations, Target,
        },
    },
    fence::Notice,
    gates::LeaseSighting,
    ipmi::{Guid, GuidLayout},
    leader,
    telemetry::Metrics,
};

pub use devices::*;

/// Fault rates of one schedule (swarm testing: each seed turns a random subset on).
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Per call: the process dies before the call takes effect.
    pub crash_before: f64,
    /// Per call: the process dies after the call took effect, before it sees the answer.
    pub crash_after: f64,
    /// Per API call: a 5xx or a transport error, nothing done.
    pub api_error: f64,
    /// Per write: someone else wrote the object first (a conflict).
    pub conflict: f64,
    /// Per write: it took effect but the answer was lost (a timeout).
    pub lost_answer: f64,
    /// Per API call: a slow answer, seconds instead of milliseconds.
    pub slow: f64,
    /// How long a slow answer takes.
    pub slow_latency: Micros,
}

/// Counts for the report: how much one run explored.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Calls into the world (the API, the BMCs): each may crash before or after its effect.
    pub calls: u64,
    /// Crashes that happened.
    pub crashes: u64,
    /// Faults that happened (5xx, conflicts, lost answers, slow answers, BMC errors and timeouts).
    pub faults: u64,
    /// Remediations that released their node through a PDU level (`kind: LevelProof`).
    pub level_releases: u64,
    /// Attested releases that rest on an acknowledgement (A1, A2).
    pub acknowledged_releases: u64,
    /// Fences admitted on a binding verified only as an earlier object (A2's kept verification).
    pub kept_admissions: u64,
    /// A4: looks an attestation asked a failed fence for and the fence took.
    pub looks: u64,
    /// A4: looks that found the node's machine (the fence proved again), and how many of those
    /// proofs released the node.
    pub proven_again: u64,
    pub released_after_look: u64,
    /// L6: Offs sent to a shared outlet, and how many of those came after the target's release (the
    /// guard's).
    pub shared_offs: u64,
    pub shared_offs_after_release: u64,
}

/// What all processes and the runner share.
pub struct Shared {
    pub sched: Arc<Sched>,
    pub truth: Mutex<Truth>,
    pub rng: Mutex<fastrand::Rng>,
    /// What the binding verifier's calls draw (their faults, latencies): its own stream, so that
    /// running it leaves the fence's draws as they were.
    pub verifier_rng: Mutex<fastrand::Rng>,
    pub faults: Faults,
    pub stats: Mutex<Stats>,
    pub bmc_request_timeout: Micros,
    pub bmc_read_retries: u32,
    /// Test builds only: how this run's product is sabotaged ([`crate::sabotage`]).
    #[cfg(test)]
    pub sabotage: crate::sabotage::Sabotage,
}

impl Shared {
    pub fn with<T>(&self, f: impl FnOnce(&mut Truth) -> T) -> T {
        let mut truth = self.truth.lock().unwrap_or_else(PoisonError::into_inner);
        truth.now = self.sched.now();
        // The machines' power is what it is now, not what the last tick of the world made it.
        truth.apply_power();
        truth.note_stored();
        f(&mut truth)
    }

    /// The stream the current task draws from.
    fn stream(&self) -> std::sync::MutexGuard<'_, fastrand::Rng> {
        let rng = match super::task::is_verification(&self.sched.current()) {
            true => &self.verifier_rng,
            false => &self.rng,
        };
        rng.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn chance(&self, p: f64) -> bool {
        p > 0.0 && self.stream().f64() < p
    }

    fn between(&self, (low, high): (Micros, Micros)) -> Micros {
        if high <= low {
            return low;
        }
        self.stream().i64(low..high)
    }

    fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

fn dead() -> ApiError {
    ApiError::Unavailable("this process has died".into())
}

pub struct Process {
    pub pid: u32,
    shared: Arc<Shared>,
    settings: LoopSettings,
    metrics: Metrics,
    pub tracker: LeaseTracker,
    /// Devices by binding UID, with the binding resourceVersion and when they were built (the
    /// production client cache: reused for 60 s while the binding is unchanged).
    clients: Mutex<BTreeMap<String, (String, Micros, SimTarget, u64)>>,
    /// What the loop keeps in memory in this process.
    pub local: Local,
    /// Its last successful leader Lease renewal: the term, when it was sent on this process's clock
    /// and the version it wrote.
    renewed: Mutex<Option<(u64, crate::fence::Mono, String)>>,
    /// The bindings whose references changed since their last verification (production's binding
    /// controller keeps the same marks).
    references_changed: Mutex<std::collections::BTreeSet<String>>,
}

impl Process {
    pub fn new(pid: u32, shared: Arc<Shared>, settings: LoopSettings) -> Self {
        Self {
            pid,
            shared,
            settings,
            metrics: Metrics::new().0,
            tracker: LeaseTracker::default(),
            clients: Mutex::default(),
            local: Local::default(),
            renewed: Mutex::default(),
            references_changed: Mutex::default(),
        }
    }

    pub fn mark_references_changed(&self, binding: &str) {
        self.references_changed.lock().unwrap_or_else(PoisonError::into_inner).insert(binding.to_owned());
    }

    /// Whether the binding's references changed since its last verification (and clears the mark).
    pub fn take_references_changed(&self, binding: &str) -> bool {
        self.references_changed.lock().unwrap_or_else(PoisonError::into_inner).remove(binding)
    }

    fn alive(&self) -> bool {
        self.shared.with(|t| t.processes.get(&self.pid).is_some_and(|p| p.alive))
    }

    fn die(&self) {
        self.shared.count(|s| s.crashes += 1);
        self.shared.with(|t| {
            if let Some(p) = t.processes.get_mut(&self.pid) {
                p.alive = false;
            }
        });
    }

    /// One API call: a scheduling point, then maybe a crash, a fault or a slow answer, then the
    /// effect, then maybe a crash or a lost answer.
    async fn api<T>(&self, write: bool, effect: impl FnOnce(&mut Truth) -> ApiResult<T>) -> ApiResult<T> {
        let shared = &self.shared;
        shared.sched.point().await;
        if !self.alive() {
            return Err(dead());
        }
        shared.count(|s| s.calls += 1);
        let faults = &shared.faults;
        if shared.chance(faults.crash_before) {
            self.die();
            return Err(dead());
        }
        let sent = shared.sched.now();
        let slowed = shared.with(|t| t.now < t.api_slow_until);
        let latency = if slowed || shared.chance(faults.slow) {
            shared.count(|s| s.faults += 1);
            faults.slow_latency
        } else {
            shared.between((500, 20_000))
        };
        shared.sched.sleep(latency / 2).await;
        if shared.chance(faults.api_error) {
            shared.count(|s| s.faults += 1);
            self.fault_recorded();
            return Err(ApiError::Unavailable("the apiserver answered 503".into()));
        }
        if write && shared.chance(faults.conflict) {
            shared.count(|s| s.faults += 1);
            self.fault_recorded();
            return Err(ApiError::Conflict("the object was modified".into()));
        }
        let caller = self.caller_now();
        let result = shared.with(|t| {
            t.call_started = sent;
            t.caller = caller;
            effect(t)
        });
        shared.sched.sleep(latency / 2).await;
        if shared.chance(faults.crash_after) {
            self.die();
            return Err(dead());
        }
        if write && result.is_ok() && shared.chance(faults.lost_answer) {
            shared.count(|s| s.faults += 1);
            self.fault_recorded();
            return Err(ApiError::Unavailable("no answer before the timeout".into()));
        }
        result
    }

    /// The world's record of a request it failed (the liveness oracle reads it: R/P, `ReleaseNotWritten`).
    fn fault_recorded(&self) {
        let by = self.caller_now();
        self.shared.with(|t| t.log.push(Record::ApiFault { at: t.now, by }));
    }

    /// Who makes the call taking effect now.
    fn caller_now(&self) -> Caller {
        let term = self.term();
        Caller { pid: self.pid, term, task: self.shared.sched.current() }
    }

    fn wall(&self, truth: &Truth) -> Timestamp {
        let offset = truth.processes.get(&self.pid).map_or(0, |p| p.clock_offset);
        truth.wall(truth.now + offset)
    }

    fn term(&self) -> u64 {
        self.shared.with(|t| t.processes.get(&self.pid).map_or(0, |p| p.term))
    }
}

impl super::Finalizer for Process {
    async fn set_finalizer(&self, remediation: &CoronerRemediation, present: bool) -> ApiResult<()> {
        let name = remediation.name_any();
        let read = remediation.finalizers().to_vec();
        self.api(true, |t| t.set_finalizer(&name, &read, present)).await
    }
}

impl Clock for Process {
    fn now(&self) -> Timestamp {
        self.shared.with(|t| self.wall(t))
    }

    fn mono(&self) -> crate::fence::Mono {
        self.shared.with(|t| {
            let started = t.processes.get(&self.pid).map_or(0, |p| p.started);
            super::exec::duration(t.now - started)
        })
    }

    async fn sleep(&self, duration: std::time::Duration) {
        self.shared.sched.sleep(super::exec::micros(duration)).await;
    }
}

impl Remediations for Process {
    async fn remediation(&self, name: &str) -> ApiResult<Option<CoronerRemediation>> {
        let reader = (self.pid, self.shared.sched.current(), name.to_owned());
        self.api(false, |t| {
            t.remediation_reads.entry(reader).or_default().push(t.now);
            Ok(t.remediation(name))
        })
        .await
    }

    // Served from a reflector store in production: the truth as it was the watch's delay ago.
    async fn remediations(&self, from: Listing) -> ApiResult<Vec<CoronerRemediation>> {
        let pid = self.pid;
        self.api(false, |t| {
            Ok(if from == Listing::Stored { t.stored_view(pid).remediations.clone() } else { t.remediation_list() })
        })
        .await
    }

    async fn write_status(
        &self,
        current: &CoronerRemediation,
        status: CoronerRemediationStatus,
    ) -> ApiResult<CoronerRemediation> {
        let name = current.name_any();
        let expected = current.resource_version();
        self.api(true, |t| t.write_status(&name, expected.as_deref(), &status)).await
    }
}

impl Nodes for Process {
    async fn node(&self, name: &str) -> ApiResult<Option<Node>> {
        let reader = (self.pid, self.shared.sched.current(), name.to_owned());
        self.api(false, |t| {
            t.node_reads.entry(reader).or_default().push(t.now);
            Ok(t.node(name))
        })
        .await
    }

    // A store in production, as `remediations`.
    async fn nodes(&self, from: Listing) -> ApiResult<Vec<Node>> {
        let pid = self.pid;
        self.api(false, |t| Ok(if from == Listing::Stored { t.stored_view(pid).nodes.clone() } else { t.node_list() }))
            .await
    }

    async fn system_uuids(&self, from: Listing) -> ApiResult<Vec<(String, String)>> {
        Ok(self.nodes(from).await?.iter().map(crate::driver::ports::system_uuid_of).collect())
    }

    async fn patch_node(&self, current: &Node, wanted: &Node) -> ApiResult<Node> {
        let pid = self.pid;
        let written = self.api(true, |t| t.patch_node(current, wanted)).await;
        if self.shared.with(|t| t.crash_after_node_write.take_if(|p| *p == pid).is_some()) {
            self.die();
            return Err(dead());
        }
        written
    }
}

impl NodeLeases for Process {
    async fn node_lease(&self, node: &str) -> ApiResult<Option<Option<Timestamp>>> {
        self.api(false, |t| Ok(t.node_lease(node))).await
    }

    fn lease_sighting(&self, node: &str, now: crate::fence::Mono) -> LeaseSighting {
        self.tracker.sighting(node, now)
    }
}

impl Leadership for Process {
    fn instance(&self) -> String {
        format!("p{}/{}", self.pid, self.term())
    }

    fn own_node(&self) -> Option<&str> {
        None
    }

    fn leading(&self) -> bool {
        self.shared.with(|t| t.processes.get(&self.pid).is_some_and(|p| p.leading))
    }

    /// As production's: the pre-check by what this process knows, its own renewal, the check from
    /// when the renewal was sent.
    async fn ensure_leader(&self, need: StdDuration) -> Result<(), leader::Refusal> {
        let (pid, term) = (self.pid, self.term());
        let identity = format!("p{pid}");
        let lease = self.api(false, |t| Ok(t.leader_lease())).await.map_err(leader::Refusal::Unreadable)?;
        let renewed = self.renewed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let last = renewed
            .as_ref()
            .filter(|(of, _, _)| *of == term)
            .map(|(_, sent, version)| (self.mono().saturating_sub(*sent), version.as_str()));
        leader::may_mutate(Some(&lease), &identity, leader::held(Some(&lease), last, self.now()), StdDuration::ZERO)?;
        let sent = self.mono();
        let lease = self.api(true, |t| t.renew_leader(pid)).await.map_err(leader::Refusal::NotRenewed)?;
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        *self.renewed.lock().unwrap_or_else(PoisonError::into_inner) = Some((term, sent, version));
        leader::may_mutate(Some(&lease), &identity, leader::Held::Since(self.mono().saturating_sub(sent)), need)
    }

    async fn hand_over(&self, _node_to_fence: &str) -> ApiResult<bool> {
        Ok(false)
    }
}

impl Attestations for Process {
    async fn attestation(&self, name: &str) -> ApiResult<Option<CoronerAttestation>> {
        self.api(false, |t| Ok(t.attestation(name))).await
    }

    async fn attestations(&self) -> ApiResult<Vec<CoronerAttestation>> {
        self.api(false, |t| Ok(t.attestation_list())).await
    }

    async fn write_attestation_status(
        &self,
        current: &CoronerAttestation,
        status: CoronerAttestationStatus,
    ) -> ApiResult<CoronerAttestation> {
        let name = current.name_any();
        let expected = current.resource_version();
        self.api(true, |t| t.write_attestation_status(&name, expected.as_deref(), &status)).await
    }

    async fn admission_policies(&self) -> ApiResult<Policies> {
        self.api(false, |t| Ok(t.policies.clone())).await
    }
}

impl Cluster for Process {
    // A store in production, as `remediations`.
    async fn bindings(&self, from: Listing) -> ApiResult<Vec<BmcBinding>> {
        let pid = self.pid;
        self.api(false, |t| {
            Ok(if from == Listing::Stored { t.stored_view(pid).bindings.clone() } else { t.binding_list() })
        })
        .await
    }

    async fn binding(&self, name: &str) -> ApiResult<Option<BmcBinding>> {
        self.api(false, |t| Ok(t.binding(name))).await
    }

    async fn kept_verification(&self, node: &str) -> ApiResult<Option<crate::verification::KeptVerification>> {
        self.api(false, |t| Ok(t.kept_verifications.get(node).cloned())).await
    }

    async fn kept_record(
        &self,
        node: &str,
    ) -> ApiResult<(Option<crate::verification::KeptVerification>, Option<String>)> {
        self.api(false, |t| Ok(t.kept_record(node))).await
    }

    async fn write_kept(
        &self,
        node: &str,
        kept: &crate::verification::KeptVerification,
        version: Option<&str>,
    ) -> ApiResult<()> {
        self.api(true, |t| t.write_kept(node, kept, version)).await
    }

    async fn templates(&self) -> ApiResult<Vec<crate::api::CoronerRemediationTemplate>> {
        self.api(false, |t| Ok(t.templates())).await
    }

    async fn stored_binding(&self, name: &str) -> ApiResult<Option<BmcBinding>> {
        let pid = self.pid;
        self.api(false, |t| Ok(t.stored_view(pid).bindings.iter().find(|b| b.name_any() == name).cloned())).await
    }

    async fn write_binding_status(
        &self,
        name: &str,
        _old: Option<&BmcBindingStatus>,
        status: &BmcBindingStatus,
    ) -> ApiResult<()> {
        self.api(true, |t| t.write_binding_status(name, status)).await
    }

    async fn etcd_pods(&self, _: Listing) -> ApiResult<Vec<Pod>> {
        self.api(false, |_| Ok(Vec::new())).await
    }

    async fn pods_on(&self, node: &str) -> ApiResult<Vec<Pod>> {
        self.api(false, |t| Ok(t.pods_on(node))).await
    }

    async fn delete_pod(&self, pod: &Pod) -> ApiResult<()> {
        self.api(true, |t| t.delete_pod(pod)).await
    }

    async fn volume_attachments_on(&self, node: &str) -> ApiResult<usize> {
        self.api(false, |t| Ok(t.attachments_on(node))).await
    }
}

impl Events for Process {
    async fn publish(&self, regarding: &ObjectReference, notice: &Notice, _action: &str) {
        // Recording an Event is a call like any other: the process may die in it.
        let kind = regarding.kind.clone().unwrap_or_default();
        let _ = self
            .api(true, |t| {
                t.log.push(Record::Event { at: t.now, by: t.caller.clone(), kind, reason: notice.reason.clone() });
                Ok(())
            })
            .await;
    }
}

impl Devices for Process {
    type Target = SimTarget;
    type Level = SimLevel;

    /// A level's outlets as the binding names them (SNMP outlets, by PDU `host:port` and number),
    /// found in the world's rack; the digest of the level's spec and its Secrets' versions (P2).
    async fn level(&self, binding: &BmcBinding, level: u32) -> ApiResult<Result<(SimLevel, u64), Unusable>> {
        let Some(spec) = level.checked_sub(2).and_then(|i| binding.spec.pdu_levels.get(i as usize)).cloned() else {
            return Ok(Err(Unusable::new(binding, Cause::NoSuchLevel { level })));
        };
        let mut versions = Vec::new();
        for outlet in &spec.outlets {
            let secret = outlet.credentials_secret_ref.name.clone();
            let Some(version) = self.api(false, |t| Ok(t.secret(&secret))).await? else {
                let namespace = binding.namespace().unwrap_or_default();
                return Ok(Err(Unusable::new(binding, Cause::SecretMissing { namespace, name: secret })));
            };
            versions.push(version);
        }
        let outlets = self.shared.with(|t| {
            spec.outlets
                .iter()
                .map(|o| {
                    let found = o.snmp.as_ref().and_then(|snmp| {
                        let pdu = crate::api::host_port(&snmp.address, snmp.port.unwrap_or(161));
                        t.outlets.iter().position(|w| w.pdu == pdu && w.number == snmp.outlet)
                    });
                    (o.key(), o.floor(), found)
                })
                .collect()
        });
        let serial = super::world::level_content_of(&spec, &versions);
        Ok(Ok((SimLevel { shared: self.shared.clone(), pid: self.pid, outlets }, serial)))
    }

    fn seal_kept(&self, node: &str, kept: &crate::verification::KeptVerification) -> String {
        super::world::seal_kept(node, kept)
    }

    /// No verifier runs in the simulator: nothing it seals exists in its world.
    fn seal(&self, binding: &BmcBinding, confirmation: &crate::api::LevelConfirmation) -> String {
        format!("sim:{}:{}:{}", binding.uid().unwrap_or_default(), confirmation.level, confirmation.generation)
    }

    async fn target(&self, binding: &BmcBinding) -> ApiResult<Result<(SimTarget, u64), Unusable>> {
        let uid = binding.uid().unwrap_or_default();
        let version = binding.resource_version().unwrap_or_default();
        let now = self.shared.sched.now();
        if let Some((built_for, built_at, device, serial)) =
            self.clients.lock().unwrap_or_else(PoisonError::into_inner).get(&uid)
            && *built_for == version
            && now - built_at < 60 * SECOND
        {
            return Ok(Ok((device.clone(), *serial)));
        }
        let secret = binding.spec.credentials_secret_ref.name.clone();
        let endpoint = binding.spec.endpoint();
        let credentials = self.api(false, |t| Ok(t.secret(&secret))).await?;
        let Some(credentials) = credentials else {
            let namespace = binding.namespace().unwrap_or_default();
            return Ok(Err(Unusable::new(binding, Cause::SecretMissing { namespace, name: secret })));
        };
        let bmc = self.shared.with(|t| t.bmcs.iter().position(|b| endpoint.starts_with(&b.origin)));
        let Some(bmc) = bmc else {
            let cause = SetupError::Endpoint(format!("endpoint {endpoint} leads nowhere"));
            return Ok(Err(Unusable::new(binding, cause)));
        };
        // The CA bundle a Redfish binding names, read as production reads it (its content: a version).
        let mut ca_bundle = Vec::new();
        if let Some(reference) = binding.spec.tls.as_ref().and_then(|t| t.ca_bundle_ref.clone()) {
            let Some(version) = self.api(false, |t| Ok(t.config_map(&reference.name))).await? else {
                let namespace = binding.namespace().unwrap_or_default();
                let cause = Cause::CaBundleMissing { kind: reference.kind, namespace, name: reference.name };
                return Ok(Err(Unusable::new(binding, cause)));
            };
            ca_bundle = super::world::ca_bundle_bytes(version);
        }
        let device = SimDevice { shared: self.shared.clone(), pid: self.pid, bmc, credentials };
        let device = match self.shared.with(|t| t.bmcs[bmc].ipmi) {
            Some(_) => SimTarget::Ipmi(device),
            None => SimTarget::Redfish(device),
        };
        // The production client's device digest (P2, A2): the same spec and credential values are
        // the same device, however often the client is rebuilt.
        let serial = super::world::content_of(&binding.spec, credentials, &ca_bundle);
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        clients.insert(uid, (version, now, device.clone(), serial));
        Ok(Ok((device, serial)))
    }

    fn forget_target(&self, binding: &BmcBinding) {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner).remove(&binding.uid().unwrap_or_default());
    }
}

impl World for Process {
    #[cfg(test)]
    fn sabotage(&self) -> crate::sabotage::Sabotage {
        self.shared.sabotage
    }

    fn settings(&self) -> &LoopSettings {
        &self.settings
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
