//! The simulated world's truth: the API objects the loop's traits touch (with resourceVersions),
//! the machines (real power, bootID), their BMCs, the kubelets, kube-controller-manager's node and
//! pod handling, NodeHealthCheck, the leader Lease, and a log of everything coroner did, which the
//! invariants judge against the truth, never against coroner's own beliefs.

mod apiserver;
mod machines;
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

    // Objects -----------------------------------------------------------------------------------------

    pub fn add_machine(&mut self, node: &str, uuid: &str, on: bool, reach: Reach) -> usize {
        let machine = Machine {
            name: format!("machine-{node}"),
            uuid: uuid.into(),
            on,
            boot_id: format!("{node}-boot-1"),
            boots: 1,
            history: vec![(0, on)],
            pending: None,
            booted_at: on.then_some(0),
            node: node.into(),
            reach,
        };
        self.machines.push(machine);
        self.machines.len() - 1
    }

    /// The node of `machine`, silent for a while: `ready`, its Lease last renewed long ago.
    pub fn add_node(&mut self, name: &str, machine: usize, ready: &str, labels: &[(&str, &str)]) {
        let (uuid, boot_id) = (self.machines[machine].uuid.clone(), self.machines[machine].boot_id.clone());
        self.add_node_as(name, &uuid, &boot_id, ready, labels);
    }

    /// A Node whose kubelet reported `system_uuid` and `boot_id`, then `ready`; its Lease last renewed
    /// long ago.
    pub fn add_node_as(&mut self, name: &str, system_uuid: &str, boot_id: &str, ready: &str, labels: &[(&str, &str)]) {
        let uid = self.next_uid("node");
        let rv = self.next_rv();
        let stale = self.wall(-600 * SECOND);
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid),
                resource_version: Some(rv),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec { taints: Some(Vec::new()), ..NodeSpec::default() }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_heartbeat_time: Some(Time(stale)),
                    ..NodeCondition::default()
                }]),
                node_info: Some(NodeSystemInfo {
                    boot_id: boot_id.into(),
                    system_uuid: system_uuid.into(),
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        };
        self.nodes.insert(name.into(), roundtrip(&node));
        self.leases.insert(name.into(), Some(stale));
        self.ready_history.entry(name.into()).or_default().push((self.now, ready.into()));
    }

    /// A binding of `node` to the BMC at `origin`: an IPMI one for an `ipmi://host:port` origin, a
    /// Redfish one otherwise.
    pub fn add_binding(&mut self, name: &str, node: &str, origin: &str, system_id: Option<&str>) {
        let credentials_secret_ref = SecretRef { name: format!("{name}-credentials") };
        let spec = match ipmi_address(origin) {
            Some((address, port)) => BmcBindingSpec {
                node_name: node.into(),
                redfish: None,
                ipmi: Some(IpmiTarget { address, port, cipher_suite: None, privilege: None }),
                credentials_secret_ref,
                tls: None,
                pdu_levels: Vec::new(),
            },
            None => BmcBindingSpec {
                node_name: node.into(),
                redfish: Some(RedfishTarget {
                    endpoint: format!("{origin}/redfish/v1"),
                    system_id: system_id.map(str::to_owned),
                }),
                ipmi: None,
                credentials_secret_ref,
                tls: Some(TlsPolicy {
                    ca_bundle_ref: Some(CaBundleRef {
                        kind: CaBundleKind::ConfigMap,
                        name: format!("{name}-ca"),
                        key: "ca.crt".into(),
                    }),
                    ..TlsPolicy::default()
                }),
                pdu_levels: Vec::new(),
            },
        };
        let mut binding = BmcBinding::new(name, spec);
        binding.metadata.namespace = Some(self.namespace.clone());
        binding.metadata.uid = Some(self.next_uid("binding"));
        binding.metadata.resource_version = Some(self.next_rv());
        binding.metadata.generation = Some(1);
        self.secrets.insert(format!("{name}-credentials"), 1);
        let mut ca_bundle = Vec::new();
        if binding.spec.redfish.is_some() {
            self.config_maps.insert(format!("{name}-ca"), 1);
            ca_bundle = ca_bundle_bytes(1);
        }
        // Verified before the outage at its content, as the binding verifier does (an attestation
        // judges it, A2).
        binding.status = Some(BmcBindingStatus {
            last_verification_time: Some(Time(self.wall(self.now - SECOND))),
            observed_generation: Some(1),
            verified_content: Some(crate::words::digest::content_hex(content_of(&binding.spec, 1, &ca_bundle))),
            ..BmcBindingStatus::default()
        });
        self.bindings.insert(name.into(), roundtrip(&binding));
        self.note_binding_content(name);
        self.note_verified(name);
    }

    /// The world's binding verifier verified binding `name` at its content now.
    pub fn note_verified(&mut self, name: &str) {
        if let Some(content) = self.binding_content(name) {
            self.binding_verifications.push((self.now, name.into(), content));
            // The verifier keeps it beyond the binding object too (A2).
            if let Some(binding) = self.bindings.get(name) {
                let node = binding.spec.node_name.clone();
                let mut kept = crate::verification::KeptVerification {
                    content: crate::words::digest::content_hex(content),
                    at: self.wall(self.now),
                    uid: binding.metadata.uid.clone().unwrap_or_default(),
                    seal: String::new(),
                };
                kept.seal = seal_kept(&node, &kept);
                self.kept_verifications.insert(node, kept);
                self.kept_version += 1;
            }
        }
    }

    /// A verification coroner's verifier made of binding `name` (for `node`, by task `task` of
    /// process `pid`, begun at `began` when the binding was made of `content`) counts as the world's
    /// when coroner recorded it verified and the truth agrees: the BMC answered that task from the
    /// node's own machine, and the binding stayed made of `content` throughout.
    pub fn note_verification_if_true(
        &mut self,
        name: &str,
        node: &str,
        task: &str,
        pid: u32,
        began: Micros,
        content: Option<u64>,
    ) {
        let Some(content) = content.filter(|c| self.binding_content(name) == Some(*c)) else { return };
        let changed = self.binding_contents.iter().any(|(at, of, _)| of == name && *at > began);
        let status = self.bindings.get(name).and_then(|b| b.status.as_ref());
        let recorded = status.is_some_and(|s| {
            let verified = crate::api::conditions::find(&s.conditions, crate::verification::IDENTITY_VERIFIED);
            verified.is_some_and(|c| c.status == "True")
                && s.last_verification_time.as_ref().is_some_and(|t| t.0 >= self.wall(began))
        });
        let machine = self.machine_of_node(node);
        let answered = self.log.iter().any(|r| {
            matches!(r, Record::Answer { by, machine: m, answered, .. }
                if by.pid == pid && by.task == task && *answered >= began && m.is_some() && *m == machine)
        });
        if recorded && answered && !changed {
            self.binding_verifications.push((began, name.into(), content));
        }
    }

    /// What binding `name` is made of now: its spec, its Secret's value and its CA bundle's content.
    pub fn binding_content(&self, name: &str) -> Option<u64> {
        let spec = &self.bindings.get(name)?.spec;
        let secret = self.secrets.get(&spec.credentials_secret_ref.name).copied().unwrap_or_default();
        let ca = spec.tls.as_ref().and_then(|t| t.ca_bundle_ref.as_ref());
        let ca_bundle = ca.and_then(|r| self.config_maps.get(&r.name)).map(|v| ca_bundle_bytes(*v)).unwrap_or_default();
        Some(content_of(spec, secret, &ca_bundle))
    }

    /// Logs binding `name`'s content from now on, when it changed.
    pub fn note_binding_content(&mut self, name: &str) {
        let Some(content) = self.binding_content(name) else { return };
        let last = self.binding_contents.iter().rev().find(|(_, of, _)| of == name).map(|(_, _, c)| *c);
        if last != Some(content) {
            self.binding_contents.push((self.now, name.into(), content));
        }
    }

    /// Binding `name`'s content at `at`.
    pub fn binding_content_at(&self, name: &str, at: Micros) -> Option<u64> {
        self.binding_contents.iter().rev().find(|(since, of, _)| of == name && *since <= at).map(|(_, _, c)| *c)
    }

    pub fn add_pod(&mut self, node: &str, name: &str, tolerates: bool) {
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(self.next_uid("pod")),
                resource_version: Some(self.next_rv()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec { node_name: Some(node.into()), ..PodSpec::default() }),
            status: Some(PodStatus { phase: Some("Running".into()), ..PodStatus::default() }),
        };
        if tolerates && let Some(spec) = pod.spec.as_mut() {
            spec.tolerations = Some(vec![k8s_openapi::api::core::v1::Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]);
        }
        self.pods.push(pod);
    }

    /// NHC creates a remediation for `node` from the template.
    pub fn create_remediation(&mut self, name: &str, node: &str, spec: &CoronerRemediationSpec) {
        let mut remediation = CoronerRemediation::new(name, spec.clone());
        remediation.metadata.namespace = Some(self.namespace.clone());
        remediation.metadata.uid = Some(self.next_uid("remediation"));
        remediation.metadata.resource_version = Some(self.next_rv());
        remediation.metadata.generation = Some(1);
        remediation.metadata.creation_timestamp = Some(Time(self.wall(self.now)));
        remediation.metadata.annotations =
            Some([(contract::NODE_NAME_ANNOTATION.to_owned(), node.to_owned())].into_iter().collect());
        self.remediations.insert(name.into(), roundtrip(&remediation));
        self.changes.push(Change::Remediation(name.into()));
        self.created.push((name.into(), node.into(), self.now));
    }

    /// The node a remediation (alive or deleted) fences.
    pub fn remediation_node(&self, name: &str) -> Option<String> {
        self.created.iter().rev().find(|(of, ..)| of == name).map(|(_, node, _)| node.clone())
    }

    /// Whether remediation `older` was first created before `younger`.
    pub fn created_before(&self, older: &str, younger: &str) -> bool {
        let first = |name: &str| self.created.iter().find(|(of, ..)| of == name).map(|(.., at)| *at);
        matches!((first(older), first(younger)), (Some(a), Some(b)) if a < b)
    }

    /// NHC's or a person's delete: the object goes once no finalizer holds it.
    pub fn delete_remediation(&mut self, name: &str) {
        let now = self.wall(self.now);
        let Some(r) = self.remediations.get_mut(name) else { return };
        if r.metadata.deletion_timestamp.is_none() {
            let uid = r.metadata.uid.clone().unwrap_or_default();
            self.log.push(Record::Deleted { at: self.now, remediation: name.into(), uid });
        }
        if r.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
            self.remediations.remove(name);
        } else if r.metadata.deletion_timestamp.is_none() {
            r.metadata.deletion_timestamp = Some(Time(now));
            self.rv += 1;
            r.metadata.resource_version = Some(self.rv.to_string());
        }
        self.changes.push(Change::Remediation(name.into()));
    }

    pub fn annotate_remediation(&mut self, name: &str, key: &str, value: &str) {
        let rv = self.next_rv();
        let Some(r) = self.remediations.get_mut(name) else { return };
        if key == contract::TIMED_OUT_ANNOTATION && !contract::timed_out_by_nhc(&r.metadata) {
            self.log.push(Record::TimedOut { at: self.now, remediation: name.into() });
        }
        r.metadata.annotations.get_or_insert_with(Default::default).insert(key.into(), value.into());
        r.metadata.resource_version = Some(rv);
        self.changes.push(Change::Remediation(name.into()));
    }

    /// Someone else (a person, another remediator) adds a taint by hand.
    pub fn add_foreign_taint(&mut self, node: &str, key: &str, value: Option<&str>, effect: &str, who: &str) {
        let at = Time(self.wall(self.now));
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        let taint =
            Taint { key: key.into(), value: value.map(str::to_owned), effect: effect.into(), time_added: Some(at) };
        let stored: Taint = roundtrip(&taint);
        self.provenance.insert(taint_key(&stored), Adder::Someone(who.into()));
        self.taint_added.insert(taint_key(&stored), self.now);
        n.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new).push(stored);
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    /// Whether a remediation's exact out-of-service taint is on the node and its release recorded.
    pub fn released_by_coroner(&self, node: &str) -> bool {
        let Some(n) = self.nodes.get(node) else { return false };
        self.remediations.values().any(|r| {
            let released = r.status.as_ref().and_then(|s| s.evidence.as_ref()?.release.as_ref()).is_some();
            released && r.metadata.uid.as_deref().is_some_and(|uid| crate::taints::release_on_node(n, uid).is_some())
        })
    }

    /// A person annotates the Node.
    pub fn annotate_node(&mut self, node: &str, key: &str, value: &str) {
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        n.metadata.annotations.get_or_insert_with(Default::default).insert(key.into(), value.into());
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    /// Someone deletes `name`'s binding and creates it again, identical (a GitOps sync that replaces
    /// it): a new object (UID, generation 1) without a status. The world's verifier verified the first
    /// one before the outage and does not verify again: A2 keeps that verification beyond the object.
    pub fn recreate_binding(&mut self, name: &str) {
        let Some(old) = self.bindings.get(name) else { return };
        let mut binding = BmcBinding::new(name, old.spec.clone());
        binding.metadata.namespace = old.metadata.namespace.clone();
        binding.metadata.uid = Some(self.next_uid("binding"));
        binding.metadata.resource_version = Some(self.next_rv());
        binding.metadata.generation = Some(1);
        self.bindings.insert(name.into(), roundtrip(&binding));
    }

    /// Someone edits `name`'s binding (a new generation).
    pub fn edit_binding(&mut self, name: &str, edit: super::scenario::BindingEdit) {
        use super::scenario::BindingEdit;
        let rv = self.next_rv();
        let Some(binding) = self.bindings.get(name) else { return };
        let mut binding = binding.clone();
        if let Some(ipmi) = binding.spec.ipmi.as_mut() {
            match edit {
                BindingEdit::Endpoint => ipmi.address = "bmc-2.example".into(),
                BindingEdit::DeadEndpoint => {
                    (ipmi.address, ipmi.port) = ipmi_address(&ipmi_origin_of(NOWHERE)).unwrap_or_default();
                }
                BindingEdit::CredentialsSecret => {
                    let old = binding.spec.credentials_secret_ref.name.clone();
                    let value = self.secrets.get(&old).copied().unwrap_or(1);
                    let renamed = format!("{old}-copy");
                    self.secrets.insert(renamed.clone(), value);
                    binding.spec.credentials_secret_ref.name = renamed;
                }
                // An IPMI BMC has one chassis, nothing to pin: an edit that leads where it did.
                BindingEdit::SystemId => ipmi.privilege = Some(IpmiPrivilege::Operator),
            }
            binding.metadata.generation = Some(binding.metadata.generation.unwrap_or(1) + 1);
            binding.metadata.resource_version = Some(rv);
            self.record_binding_edit(&binding);
            self.bindings.insert(name.into(), roundtrip(&binding));
            self.note_binding_content(name);
            return;
        }
        let Some(redfish) = binding.spec.redfish.as_mut() else { return };
        match edit {
            BindingEdit::Endpoint => redfish.endpoint = "https://bmc-2.example:443/redfish/v1".into(),
            BindingEdit::DeadEndpoint => redfish.endpoint = format!("{NOWHERE}/redfish/v1"),
            BindingEdit::CredentialsSecret => {
                let old = binding.spec.credentials_secret_ref.name.clone();
                let value = self.secrets.get(&old).copied().unwrap_or(1);
                let renamed = format!("{old}-copy");
                self.secrets.insert(renamed.clone(), value);
                binding.spec.credentials_secret_ref.name = renamed;
            }
            BindingEdit::SystemId => {
                let origin = redfish.endpoint.clone();
                let node_uuid = self
                    .nodes
                    .get(&binding.spec.node_name)
                    .and_then(|n| n.status.as_ref()?.node_info.as_ref().map(|i| i.system_uuid.clone()));
                let bmc = self.bmcs.iter().find(|b| origin.starts_with(b.origin.as_str()));
                let id = bmc.and_then(|b| {
                    b.systems.iter().rev().find(|s| Some(&self.machines[s.machine].uuid) == node_uuid.as_ref())
                });
                redfish.system_id = id.map(|s| s.id.clone());
            }
        }
        binding.metadata.generation = Some(binding.metadata.generation.unwrap_or(1) + 1);
        binding.metadata.resource_version = Some(rv);
        self.record_binding_edit(&binding);
        self.bindings.insert(name.into(), roundtrip(&binding));
        self.note_binding_content(name);
    }

    /// Logs where an edited binding leads now, as a client built from it finds its BMC.
    fn record_binding_edit(&mut self, binding: &BmcBinding) {
        let endpoint = binding.spec.endpoint();
        let bmc = self.bmcs.iter().position(|b| endpoint.starts_with(&b.origin));
        self.log.push(Record::BindingEdited { at: self.now, node: binding.spec.node_name.clone(), bmc });
    }

    /// Something wrote `name`'s binding without changing its spec (its status): a new
    /// resourceVersion.
    pub fn touch_binding(&mut self, name: &str) {
        let rv = self.next_rv();
        if let Some(binding) = self.bindings.get_mut(name) {
            binding.metadata.resource_version = Some(rv);
        }
    }

    /// An admission webhook (or a person) rewrites the value of the out-of-service taint on the node;
    /// it stays the same taint of coroner's, as coroner recorded it no longer.
    pub fn rewrite_out_of_service(&mut self, node: &str) {
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        let Some(taints) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) else { return };
        for taint in taints.iter_mut().filter(|t| t.key == CoronerTaint::OutOfService.key()) {
            let old = taint_key(taint);
            taint.value = Some("rewritten".into());
            if let Some(adder) = self.provenance.get(&old).cloned() {
                self.provenance.insert(taint_key(taint), adder);
            }
        }
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    /// The Node object is deleted (a decommission).
    pub fn delete_node(&mut self, node: &str) {
        if self.nodes.remove(node).is_some() {
            self.changes.push(Change::Node(node.into()));
        }
    }

    /// A person labels the node to keep remediators off it.
    pub fn exclude_node(&mut self, node: &str) {
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        n.metadata.labels.get_or_insert_with(Default::default).insert(contract::EXCLUDE_LABEL.into(), "true".into());
        n.metadata.resource_version = Some(rv);
        self.life.entry(node.into()).or_default().push((self.now, Life::Excluded));
        self.changes.push(Change::Node(node.into()));
    }

    /// The Node object is deleted and the kubelet registers it again: a new UID.
    pub fn replace_node(&mut self, node: &str) {
        let uid = self.next_uid("node");
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        n.metadata.uid = Some(uid);
        n.metadata.resource_version = Some(rv);
        n.spec = Some(NodeSpec { taints: Some(Vec::new()), ..NodeSpec::default() });
        n.metadata.annotations = None;
        self.changes.push(Change::Node(node.into()));
        self.life.entry(node.into()).or_default().push((self.now, Life::Replaced));
    }

    /// Someone removes taints by key, leaving the annotations as they are.
    pub fn remove_taints_by_hand(&mut self, node: &str, key: &str) {
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        if let Some(taints) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) {
            taints.retain(|t| t.key != key);
        }
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    /// The node's kubelet reports `Ready=status` (and a new bootID, if given).
    pub fn set_ready(&mut self, node: &str, status: &str, boot_id: Option<&str>) {
        let now = Time(self.wall(self.now));
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        let Some(s) = n.status.as_mut() else { return };
        if let Some(condition) = s.conditions.as_mut().and_then(|c| c.iter_mut().find(|c| c.type_ == "Ready")) {
            let unchanged = condition.status == status;
            let boot_unchanged = boot_id.is_none_or(|b| s.node_info.as_ref().is_some_and(|i| i.boot_id == b));
            if unchanged && boot_unchanged {
                return;
            }
            condition.status = status.into();
            condition.last_heartbeat_time = Some(now);
            self.ready_history.entry(node.into()).or_default().push((self.now, status.into()));
        }
        if let (Some(boot), Some(info)) = (boot_id, s.node_info.as_mut()) {
            info.boot_id = boot.into();
        }
        if status == conditions::TRUE {
            self.life.entry(node.into()).or_default().push((self.now, Life::Ready));
        }
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    pub(super) fn renew_lease(&mut self, node: &str, wall: Timestamp) {
        // A kubelet whose clock runs behind writes a renewTime from its past (A1: coroner dates life
        // by its own first sight of it).
        let behind = self.kubelet_behind.get(node).copied().unwrap_or(0);
        let wall = wall.checked_sub(jiff::SignedDuration::from_micros(behind)).unwrap_or(wall);
        self.leases.insert(node.into(), Some(wall));
        self.lease_changes.push(node.into());
        self.life.entry(node.into()).or_default().push((self.now, Life::Lease));
    }

    pub fn ready_of(&self, node: &str) -> Option<String> {
        self.nodes.get(node).and_then(|n| crate::fence::ready_status(n)).map(str::to_owned)
    }

    // Machines ----------------------------------------------------------------------------------------

    /// One second of the cluster's own life.
    pub fn tick(&mut self, nhc: &NhcPolicy) {
        self.apply_power();
        let now = self.now;
        let wall = self.wall(now);
        for i in 0..self.machines.len() {
            let m = &self.machines[i];
            let node = m.node.clone();
            let kubelet_up = m.on && m.booted_at.is_some_and(|at| at <= now);
            let boot = m.boot_id.clone();
            // Heartbeats every 10 s, staggered by machine.
            let beat = (now / SECOND + i as i64) % 10 == 0;
            match (kubelet_up, m.reach) {
                (true, Reach::Connected) if beat || self.ready_of(&node).as_deref() != Some(conditions::TRUE) => {
                    self.renew_lease(&node, wall);
                    self.set_ready(&node, conditions::TRUE, Some(&boot));
                }
                (true, Reach::LeaseOnly) if beat => self.renew_lease(&node, wall),
                _ => {}
            }
            // kube-controller-manager: no heartbeat for 40 s → Unknown, by when it saw the Lease
            // change (its own clock), not the renewTime a kubelet's clock wrote.
            let renewed =
                self.life.get(&node).and_then(|l| l.iter().rev().find(|(_, k)| *k == Life::Lease)).map(|(t, _)| *t);
            // A Lease the world began with, no kubelet's renewal since: its renewTime is the world's.
            let initial = || {
                let at = self.leases.get(&node).copied().flatten()?;
                Some(at.duration_since(self.wall(0)).as_micros() as Micros)
            };
            let silent = renewed.or_else(initial).is_none_or(|renewed| now - renewed > 40 * SECOND);
            if silent && self.ready_of(&node).as_deref() == Some(conditions::TRUE) {
                self.set_ready(&node, conditions::UNKNOWN, None);
            }
        }
        self.evict_out_of_service();
        self.nhc(nhc);
    }

    /// kube-controller-manager with `node.kubernetes.io/out-of-service`: pods that do not tolerate it
    /// go, and volumes are detached.
    fn evict_out_of_service(&mut self) {
        let tainted: BTreeSet<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| taints_of(n).iter().any(|t| t.key == CoronerTaint::OutOfService.key()))
            .map(|(name, _)| name.clone())
            .collect();
        self.pods.retain(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            !(tainted.contains(&node) && crate::fence::pod_blocks_release(p))
        });
        for node in &tainted {
            self.attachments.remove(node);
        }
    }

    fn nhc(&mut self, policy: &NhcPolicy) {
        let now = self.now;
        // An unhealthy node without a remediation gets one (again, after a deletion).
        let watched: Vec<(String, u32)> = self.nhc_nodes.iter().map(|(n, c)| (n.clone(), *c)).collect();
        for (node, created) in watched {
            let has = self.remediations.values().any(|r| contract::node_name(&r.metadata) == Some(node.as_str()));
            let exists = self.nodes.contains_key(&node);
            if exists && !has && self.ready_of(&node).as_deref() != Some(conditions::TRUE) {
                let name = if created == 0 { node.clone() } else { format!("{node}-{}", created + 1) };
                let spec = self.nhc_spec.clone();
                self.create_remediation(&name, &node, &spec);
                self.nhc_nodes.insert(node, created + 1);
            }
        }
        let names: Vec<String> = self.remediations.keys().cloned().collect();
        for name in names {
            let Some(r) = self.remediations.get(&name).cloned() else { continue };
            let node = contract::node_name(&r.metadata).unwrap_or_default().to_owned();
            let created = r.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(self.epoch);
            let age = self.wall(now).duration_since(created);
            let succeeded = r
                .status
                .as_ref()
                .and_then(|s| conditions::status_of(&s.conditions, contract::SUCCEEDED).map(str::to_owned));
            let deleting = r.metadata.deletion_timestamp.is_some();
            // A remediation whose node is gone is an orphan: NHC deletes it.
            if !self.nodes.contains_key(&node) && !deleting {
                self.delete_remediation(&name);
                continue;
            }
            if self.ready_of(&node).as_deref() == Some(conditions::TRUE) {
                let since = *self.healthy_since.entry(name.clone()).or_insert(now);
                // NHC deletes the remediation about two seconds after the node is healthy.
                if now - since >= 2 * SECOND && !deleting {
                    self.delete_remediation(&name);
                }
            } else {
                self.healthy_since.remove(&name);
            }
            if let Some(timeout) = policy.timeout
                && age >= SignedDuration::from_micros(timeout)
                && succeeded.as_deref() != Some(conditions::TRUE)
                && !contract::timed_out_by_nhc(&r.metadata)
                && !deleting
            {
                let stamp = self.wall(now).to_string();
                self.annotate_remediation(&name, contract::TIMED_OUT_ANNOTATION, &stamp);
            }
        }
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
