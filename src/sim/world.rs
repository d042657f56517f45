//! The simulated world's truth: the API objects the loop's traits touch (with resourceVersions),
//! the machines (real power, bootID), their BMCs, the kubelets, kube-controller-manager's node and
//! pod handling, NodeHealthCheck, the leader Lease, and a log of everything coroner did, which the
//! invariants judge against the truth, never against coroner's own beliefs.

mod apiserver;
mod machines;
mod objects;
mod record;

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::{
    api::{
        admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
        coordination::v1::{Lease, LeaseSpec},
        core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Pod, PodSpec, PodStatus, Taint},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time},
};
use serde::{Serialize, de::DeserializeOwned};

use super::exec::{Micros, SECOND};
use crate::{
    api::{
        BmcBinding, BmcBindingSpec, BmcBindingStatus, CaBundleKind, CaBundleRef, CoronerAttestation,
        CoronerAttestationSpec, CoronerAttestationStatus, CoronerRemediation, CoronerRemediationSpec,
        CoronerRemediationStatus, IpmiPrivilege, IpmiTarget, RedfishTarget, SecretRef, TlsPolicy, conditions,
    },
    contract,
    driver::{ApiError, ApiResult},
    ipmi::GuidLayout,
    taints::CoronerTaint,
};

pub use machines::*;
pub use record::*;

/// The origin a mistyped endpoint leads to: nothing answers there.
pub const NOWHERE: &str = "https://bmc-9.example:443";

/// Seconds from power-on to a running kubelet: longer than the guard's bound, as for real machines, so
/// a node's healthy return never excuses a guard that did nothing.
const BOOT: i64 = 60;

/// The apiserver hands back what it stored: JSON, with its time precision.
pub fn roundtrip<T: Serialize + DeserializeOwned>(value: &T) -> T {
    match serde_json::to_value(value).and_then(serde_json::from_value) {
        Ok(back) => back,
        Err(error) => panic!("the simulated apiserver cannot store an object: {error}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderLease {
    pub holder: Option<u32>,
    pub renewed: Micros,
    pub duration: Micros,
}

#[derive(Clone, Debug)]
pub struct ProcState {
    pub alive: bool,
    pub leading: bool,
    pub started: Micros,
    /// Its wall clock minus the true time.
    pub clock_offset: Micros,
    /// Its leadership term: readings of an earlier term never count.
    pub term: u64,
}

pub struct Truth {
    pub epoch: Timestamp,
    rv: u64,
    uid: u64,
    pub namespace: String,
    pub remediations: BTreeMap<String, CoronerRemediation>,
    pub nodes: BTreeMap<String, Node>,
    /// Node Leases: renewTime (`None` inside: a Lease without one).
    pub leases: BTreeMap<String, Option<Timestamp>>,
    pub bindings: BTreeMap<String, BmcBinding>,
    pub attestations: BTreeMap<String, CoronerAttestation>,
    /// The ValidatingAdmissionPolicy and binding coroner ships (config/admission), in force for an hour.
    pub policies: Policies,
    /// Credentials Secrets: their version.
    pub secrets: BTreeMap<String, u32>,
    /// CA bundle ConfigMaps of Redfish bindings: the version of their content.
    pub config_maps: BTreeMap<String, u32>,
    pub pods: Vec<Pod>,
    pub attachments: BTreeMap<String, usize>,
    pub machines: Vec<Machine>,
    pub bmcs: Vec<BmcModel>,
    /// The rack's PDU outlets, and which BMC sits on which machine's supply: (machine, BMC).
    pub outlets: Vec<SimOutlet>,
    pub supplied_bmcs: Vec<(usize, usize)>,
    /// BMCs that died because their supply's last outlet went off (an outlet back on revives them).
    pub unpowered_bmcs: BTreeSet<usize>,
    /// Each binding's content over time (its spec and the credential and CA values it leads to, as
    /// `access::device_digest` takes them): (since, binding, content), for A2's judge.
    pub binding_contents: Vec<(Micros, String, u64)>,
    /// The world's binding verifier's successful verifications: (when, binding, the content verified).
    pub binding_verifications: Vec<(Micros, String, u64)>,
    /// The ConfigMap of verifications kept beyond their binding objects, by node (A2).
    pub kept_verifications: BTreeMap<String, crate::verification::KeptVerification>,
    /// That ConfigMap's resourceVersion (it exists once it holds an entry).
    pub kept_version: u64,
    /// Chance an outlet request gets no answer (the seed's).
    pub pdu_timeout_rate: f64,
    pub leader: LeaderLease,
    pub processes: BTreeMap<u32, ProcState>,
    pub provenance: BTreeMap<String, Adder>,
    pub log: Vec<Record>,
    /// Admission-time denial of Node writes (a webhook, a policy) until then.
    pub node_writes_denied_until: Micros,
    /// Every API call is slow until then.
    pub api_slow_until: Micros,
    /// When the API call taking effect now was sent, and by whom.
    pub call_started: Micros,
    pub caller: Caller,
    /// The process that dies right after its next Node write.
    pub crash_after_node_write: Option<u32>,
    /// When coroner first admitted a fence of each remediation (true time), for the liveness bound.
    pub admitted: BTreeMap<String, Micros>,
    /// Objects changed since the controllers last looked: (kind, name).
    pub changes: Vec<Change>,
    pub now: Micros,
    /// When each node's kubelet reported: signs of life.
    pub life: BTreeMap<String, Vec<(Micros, Life)>>,
    /// When each process read each Node, by (process, the remediation it reconciled, Node): what it
    /// could have known before acting.
    pub node_reads: BTreeMap<(u32, String, String), Vec<Micros>>,
    /// The `Ready` status each Node showed, from when (its kubelet's reports and
    /// kube-controller-manager's `Unknown`): what a read of the Node at a moment saw.
    pub ready_history: BTreeMap<String, Vec<(Micros, String)>>,
    /// Every remediation created: its name, its node and when (kept past its deletion).
    pub created: Vec<(String, String, Micros)>,
    /// How far each node's kubelet clock runs behind the world's.
    pub kubelet_behind: BTreeMap<String, Micros>,
    /// When a BMC that lied `Off` began to tell the truth.
    pub bmc_truthful_at: Option<Micros>,
    /// The BMC a node's binding led to when the world began, where it is not its machine's own (a
    /// mistyped copy of another node's binding).
    pub bound_at_start: BTreeMap<String, usize>,
    /// When each process read each remediation, by (process, task, remediation), as `node_reads`.
    pub remediation_reads: BTreeMap<(u32, String, String), Vec<Micros>>,
    /// When each taint (by `key=value:effect@time`) was put on its Node, in true time.
    pub taint_added: BTreeMap<String, Micros>,
    /// The bootID each Node showed when coroner released it: what a node that never went down
    /// comes back with (a reboot the Node never reported before the fence is invisible to coroner).
    pub boot_at_release: BTreeMap<String, String>,
    /// When each BMC-mutation intent was first persisted, by (remediation, `instance/attempt/decided`).
    pub intents: BTreeMap<(String, String), Micros>,
    /// Process deaths and leadership changes: a guard cannot report while nobody leads.
    pub disruptions: Vec<Micros>,
    /// Node Leases written since the processes' watches last heard of them.
    pub lease_changes: Vec<String>,
    /// NHC's deletions of remediations whose node turned healthy: when it became healthy.
    healthy_since: BTreeMap<String, Micros>,
    /// The nodes NHC watches, and how many remediations it created for each.
    pub nhc_nodes: BTreeMap<String, u32>,
    pub nhc_spec: CoronerRemediationSpec,
    /// How far the reflector stores production reads (remediations, Nodes, bindings) trail the
    /// truth: the seed's watch delay.
    pub store_lag: Micros,
    /// Past states of what those stores hold, each with when it began and the resourceVersion
    /// counter then (kept for `store_lag` and one before).
    stored: Vec<(Micros, u64, std::sync::Arc<Stored>)>,
}

/// What the reflector stores hold at one moment.
pub struct Stored {
    pub remediations: Vec<CoronerRemediation>,
    pub nodes: Vec<Node>,
    pub bindings: Vec<BmcBinding>,
}

/// A sign of life from a node's kubelet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Life {
    /// It renewed its Lease (coroner hears of it through a watch, a moment later).
    Lease,
    /// It reported `Ready=True` on the Node (coroner reads the Node right before acting).
    Ready,
    /// A person labelled the Node excluded from remediation.
    Excluded,
    /// A person approved the released machine's power-on (`coroner.dev/power-on-approved`).
    Approved,
    /// The Node object was replaced under the same name (a new UID): not a sign of life by itself,
    /// but what coroner's next read of the Node can see.
    Replaced,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Remediation(String),
    Node(String),
    Attestation(String),
}

/// Every ValidatingAdmissionPolicy and binding.
pub type Policies = (Vec<ValidatingAdmissionPolicy>, Vec<ValidatingAdmissionPolicyBinding>);

/// The attestation and approval policies and bindings of config/admission, as an apiserver serves
/// them an hour after they were applied.
fn shipped_policies() -> Policies {
    let applied = Some(Time(Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_900_000_000 - 3600)));
    let mut shipped: Policies = (Vec::new(), Vec::new());
    for (file, text) in [
        ("attestation_policy.yaml", include_str!("../../config/admission/attestation_policy.yaml")),
        ("approval_policy.yaml", include_str!("../../config/admission/approval_policy.yaml")),
    ] {
        let mut documents = text.split("\n---\n");
        let parsed = (documents.next().map(serde_saphyr::from_str), documents.next().map(serde_saphyr::from_str));
        let (Some(Ok(mut policy)), Some(Ok(mut binding))) = parsed else {
            panic!("config/admission/{file} is not a policy and its binding");
        };
        let (p, b): (&mut ValidatingAdmissionPolicy, &mut ValidatingAdmissionPolicyBinding) =
            (&mut policy, &mut binding);
        p.metadata.creation_timestamp.clone_from(&applied);
        b.metadata.creation_timestamp.clone_from(&applied);
        shipped.0.push(policy);
        shipped.1.push(binding);
    }
    shipped
}

/// A taint's identity for provenance: key, value, effect and timeAdded.
pub fn taint_key(taint: &Taint) -> String {
    format!(
        "{}={}:{}@{}",
        taint.key,
        taint.value.as_deref().unwrap_or_default(),
        taint.effect,
        taint.time_added.as_ref().map(|t| t.0.to_string()).unwrap_or_default()
    )
}

pub fn taints_of(node: &Node) -> Vec<Taint> {
    node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default()
}

impl Truth {
    pub fn new(namespace: &str) -> Self {
        Self {
            epoch: Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_900_000_000),
            rv: 1,
            uid: 0,
            namespace: namespace.into(),
            remediations: BTreeMap::new(),
            nodes: BTreeMap::new(),
            leases: BTreeMap::new(),
            bindings: BTreeMap::new(),
            attestations: BTreeMap::new(),
            policies: shipped_policies(),
            secrets: BTreeMap::new(),
            config_maps: BTreeMap::new(),
            pods: Vec::new(),
            attachments: BTreeMap::new(),
            machines: Vec::new(),
            bmcs: Vec::new(),
            outlets: Vec::new(),
            supplied_bmcs: Vec::new(),
            unpowered_bmcs: BTreeSet::new(),
            binding_contents: Vec::new(),
            binding_verifications: Vec::new(),
            kept_verifications: BTreeMap::new(),
            kept_version: 0,
            pdu_timeout_rate: 0.0,
            leader: LeaderLease { holder: None, renewed: 0, duration: 15 * SECOND },
            processes: BTreeMap::new(),
            provenance: BTreeMap::new(),
            log: Vec::new(),
            node_writes_denied_until: 0,
            api_slow_until: 0,
            call_started: 0,
            caller: Caller::default(),
            crash_after_node_write: None,
            admitted: BTreeMap::new(),
            changes: Vec::new(),
            now: 0,
            life: BTreeMap::new(),
            node_reads: BTreeMap::new(),
            ready_history: BTreeMap::new(),
            created: Vec::new(),
            kubelet_behind: BTreeMap::new(),
            bmc_truthful_at: None,
            bound_at_start: BTreeMap::new(),
            remediation_reads: BTreeMap::new(),
            boot_at_release: BTreeMap::new(),
            taint_added: BTreeMap::new(),
            intents: BTreeMap::new(),
            disruptions: Vec::new(),
            lease_changes: Vec::new(),
            healthy_since: BTreeMap::new(),
            nhc_nodes: BTreeMap::new(),
            nhc_spec: CoronerRemediationSpec::default(),
            store_lag: 0,
            stored: Vec::new(),
        }
    }

    /// Notes the stores' state now, when anything changed since the last note (every write takes a
    /// resourceVersion), and forgets states no view can reach any more.
    pub fn note_stored(&mut self) {
        if self.stored.last().is_some_and(|(_, rv, _)| *rv == self.rv) {
            return;
        }
        let state =
            Stored { remediations: self.remediation_list(), nodes: self.node_list(), bindings: self.binding_list() };
        self.stored.push((self.now, self.rv, std::sync::Arc::new(state)));
        let horizon = self.now - self.store_lag;
        let reachable = self.stored.iter().rposition(|(at, _, _)| *at <= horizon).unwrap_or(0);
        self.stored.drain(..reachable);
    }

    /// What process `pid`'s stores hold now: the truth `store_lag` ago, but never from before the
    /// process started (its first list was fresh then).
    pub fn stored_view(&self, pid: u32) -> std::sync::Arc<Stored> {
        let started = self.processes.get(&pid).map_or(0, |p| p.started);
        let at = (self.now - self.store_lag).max(started);
        let found = self.stored.iter().rev().find(|(when, _, _)| *when <= at).or(self.stored.first());
        match found {
            Some((_, _, state)) => state.clone(),
            None => std::sync::Arc::new(Stored {
                remediations: self.remediation_list(),
                nodes: self.node_list(),
                bindings: self.binding_list(),
            }),
        }
    }

    /// True wall time (the apiserver's and NHC's clock).
    pub fn wall(&self, at: Micros) -> Timestamp {
        self.epoch + SignedDuration::from_micros(at)
    }

    pub fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    pub fn next_uid(&mut self, what: &str) -> String {
        self.uid += 1;
        format!("{what}-uid-{}", self.uid)
    }

    pub fn machine_of_node(&self, node: &str) -> Option<usize> {
        self.machines.iter().position(|m| m.node == node)
    }
}

/// How NodeHealthCheck behaves in this world.
#[derive(Clone, Copy, Debug, Default)]
pub struct NhcPolicy {
    /// Stamps `nhc-timed-out` this long after creating a remediation that has not succeeded.
    pub timeout: Option<Micros>,
}

/// The simulated content key's seal on a kept verification (the simulator's processes and lab
/// worlds seal alike; only what production seals is keyed).
pub fn seal_kept(node: &str, kept: &crate::verification::KeptVerification) -> String {
    format!("sim:{}", kept.sealed_parts(node).join("|"))
}

/// The IPMI origin of a BMC host the world names by its Redfish origin (`https://host:443`).
pub fn ipmi_origin_of(redfish_origin: &str) -> String {
    let host = redfish_origin.trim_start_matches("https://").split(':').next().unwrap_or_default();
    crate::api::ipmi_origin(host, 623)
}

/// The address and port of an `ipmi://host:port` origin.
fn ipmi_address(origin: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = origin.strip_prefix("ipmi://")?.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()))
}

/// The simulated process's content key: the simulator's digests need only be equal for equal
/// content, as production's are.
fn sim_key() -> &'static crate::access::ContentKey {
    static KEY: std::sync::OnceLock<crate::access::ContentKey> = std::sync::OnceLock::new();
    KEY.get_or_init(|| crate::access::ContentKey::new(b"the simulator's content key"))
}

/// A CA bundle ConfigMap's content at `version`.
pub fn ca_bundle_bytes(version: u32) -> Vec<u8> {
    format!("ca bundle version {version}").into_bytes()
}

/// The device digest of a binding whose credentials Secret is at `secret_version`, as the
/// production client computes it ([`crate::access::device_digest`]).
/// The digest of a PDU level's spec and its Secrets' versions: equal values, the same devices (P2).
pub fn level_content_of(level: &crate::api::PduLevel, secret_versions: &[u32]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(level).unwrap_or_default().hash(&mut hasher);
    secret_versions.hash(&mut hasher);
    hasher.finish()
}

pub fn content_of(spec: &BmcBindingSpec, secret_version: u32, ca_bundle: &[u8]) -> u64 {
    let credentials = crate::bmc::Credentials {
        username: "sim".into(),
        password: crate::bmc::Password::new(secret_version.to_string()),
    };
    crate::access::device_digest(sim_key(), spec, ca_bundle, &credentials, None)
}
