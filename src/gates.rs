//! Safety gates: each a named pure function that admits a fence or says why not — waiting (may clear
//! by itself) or final. They run while a remediation is Pending; the lease gate runs again right
//! before the power action. The fence itself then proves identity and power.

use std::{collections::BTreeMap, time::Duration as StdDuration};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use crate::{
    api::{
        BmcBinding, ControlPlanePolicy, CoronerRemediation, CoronerRemediationStatus, Phase, ReleaseEvidence,
        RemediationStrategy, conditions,
    },
    contract::{self, Reason},
    identity,
    node::{NodeSnapshot, ready_status},
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Admit,
    Wait(Reason, String),
    Refuse(Reason, String),
}

/// What coroner has seen of the node's Lease in kube-node-lease, on its own monotonic clock (a step
/// of the wall clock ages no Lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseSighting {
    /// No Lease exists (recorded in the evidence; not a refusal by itself).
    Missing,
    /// coroner last saw the renewTime change (or first saw the Lease) this long ago.
    Seen { age: StdDuration },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StormLimits {
    pub max_concurrent: u32,
    pub max_per_window: u32,
    pub window: StdDuration,
}

/// Everything the gates look at for one remediation.
pub struct GateInputs<'a> {
    pub remediation: &'a CoronerRemediation,
    pub node: &'a Node,
    pub namespace: &'a str,
    pub now: Timestamp,
    pub lease: LeaseSighting,
    /// Every BmcBinding in coroner's namespace.
    pub bindings: &'a [BmcBinding],
    /// Every Node.
    pub nodes: &'a [Node],
    /// Pods labelled `component=etcd` in kube-system (static etcd members).
    pub etcd_pods: &'a [Pod],
    /// Every remediation in coroner's namespace, this one included.
    pub remediations: &'a [CoronerRemediation],
    /// When recent fences were admitted (each powers a machine off).
    pub recent_admissions: &'a [Timestamp],
    pub limits: StormLimits,
}

/// Stores trail coroner's own writes: a remediation this leader admitted (`admitted_here`, by UID)
/// may still read `Pending` in the store it was read from. The gates that count (concurrency, one
/// action per BMC, one fence per node, the control plane) count it as admitted: as
/// `VerifyingIdentity`, the first phase that holds a power slot. Any other phase is the store's (a
/// later one, or an end).
pub fn as_admitted(
    mut remediation: CoronerRemediation,
    admitted_here: &BTreeMap<String, Timestamp>,
) -> CoronerRemediation {
    let admitted = remediation.uid().is_some_and(|uid| admitted_here.contains_key(&uid));
    if admitted && Phase::of(&remediation) == Phase::Pending {
        remediation.status.get_or_insert_with(Default::default).phase = Some(Phase::VerifyingIdentity);
    }
    remediation
}

/// The gates in order; the first that does not admit decides. Final refusals come first so that a
/// remediation that can never proceed fails at once instead of waiting.
pub fn evaluate(inputs: &GateInputs<'_>) -> Gate {
    let spec = &inputs.remediation.spec;
    let node_name = inputs.node.name_any();
    let gates: [&dyn Fn() -> Gate; 9] = [
        &|| not_excluded(inputs.node),
        &|| unreachable_only(inputs.node, spec.remediate_ready_false),
        &|| binding_sane(&node_name, inputs.bindings, inputs.namespace),
        &|| levels_allow_action(spec.action, &node_name, inputs.bindings),
        &|| control_plane_allowed(spec.control_plane, inputs.node),
        &|| one_fence_per_node(inputs),
        &|| lease_stale(inputs.lease, spec.lease_freshness.get()),
        &|| control_plane_quorum(inputs),
        &|| storm(inputs),
    ];
    gates.iter().map(|gate| gate()).find(|gate| *gate != Gate::Admit).unwrap_or(Gate::Admit)
}

/// A node labelled `remediation.medik8s.io/exclude-from-remediation` (any value) is never fenced.
pub fn not_excluded(node: &Node) -> Gate {
    let excluded = node.labels().get(contract::EXCLUDE_LABEL);
    match excluded {
        Some(value) => Gate::Refuse(
            Reason::NodeExcluded,
            format!("node carries {}={value:?}; remove the label to allow fencing", contract::EXCLUDE_LABEL),
        ),
        None => Gate::Admit,
    }
}

/// Only `Ready=Unknown` is fenced (and `False` when the template opts in): `True` or `False` come
/// from a kubelet that is still reporting.
pub fn unreachable_only(node: &Node, remediate_ready_false: bool) -> Gate {
    match ready_status(node) {
        Some("Unknown") => Gate::Admit,
        Some("False") if remediate_ready_false => Gate::Admit,
        other => {
            let hint =
                if other == Some("False") { "; set remediateReadyFalse: true to fence Ready=False nodes" } else { "" };
            Gate::Refuse(
                Reason::NodeNotUnreachable,
                format!(
                    "node is Ready={}: a kubelet is still reporting, so the node is not dead{hint}",
                    other.unwrap_or("absent")
                ),
            )
        }
    }
}

/// scheme://host:port of a BMC endpoint: two actions on one origin must not overlap.
pub fn origin(endpoint: &str) -> String {
    // An IPMI BMC's `ipmi://address:port` is its origin as it is (URL origins of unknown schemes
    // are all opaque, and would make every IPMI BMC one).
    if endpoint.starts_with("ipmi://") {
        return endpoint.to_owned();
    }
    url::Url::parse(endpoint).map(|u| u.origin().ascii_serialization()).unwrap_or_else(|_| endpoint.to_owned())
}

/// The system a binding uses: its pin, or what verification discovered for its current spec.
fn system_of(binding: &BmcBinding) -> Option<&str> {
    let discovered = binding.status.as_ref().filter(|s| s.observed_generation == binding.metadata.generation);
    binding.spec.system_id().or_else(|| discovered?.system_id.as_deref())
}

/// Why a binding conflicts with another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// Both name the same node: no reading can tell which one is meant. Final.
    SameNode { other: String, node: String },
    /// The other binding, of another node, reaches the same BMC origin and the two systems are not
    /// told apart (the same pinned or verified system, or at least one unknown). The identity step
    /// settles it ([`conflict_settled_by_identity`]).
    SameOrigin { other: String, other_node: String, origin: String, system: Option<String> },
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SameNode { other, node } => write!(f, "conflicts with BmcBinding {other}: both claim node {node}"),
            Self::SameOrigin { other, origin, system: Some(system), .. } => {
                write!(f, "conflicts with BmcBinding {other}: both reach system {system} at {origin}")
            }
            Self::SameOrigin { other, origin, system: None, .. } => write!(
                f,
                "conflicts with BmcBinding {other}: both reach {origin} and at least one does not pin spec.redfish.systemId"
            ),
        }
    }
}

/// For every binding in conflict: every conflict it is in. Two bindings conflict when they claim the
/// same node, or reach the same BMC origin and the same system (an unknown system counts as the
/// same: only a pin or a verification can tell two systems of one BMC apart).
pub fn binding_conflicts(bindings: &[BmcBinding]) -> BTreeMap<String, Vec<Conflict>> {
    let mut conflicts: BTreeMap<String, Vec<Conflict>> = BTreeMap::new();
    for (i, a) in bindings.iter().enumerate() {
        for b in &bindings[i + 1..] {
            let origin = origin(&a.spec.endpoint());
            let pair = if a.spec.node_name == b.spec.node_name {
                let node = a.spec.node_name.clone();
                Some((
                    Conflict::SameNode { other: b.name_any(), node: node.clone() },
                    Conflict::SameNode { other: a.name_any(), node },
                ))
            } else if origin == self::origin(&b.spec.endpoint()) {
                let system = match (system_of(a), system_of(b)) {
                    (Some(x), Some(y)) if x != y => None,
                    (Some(x), Some(_)) => Some(Some(x.to_owned())),
                    _ => Some(None),
                };
                system.map(|system| {
                    let with = |other: &BmcBinding| Conflict::SameOrigin {
                        other: other.name_any(),
                        other_node: other.spec.node_name.clone(),
                        origin: origin.clone(),
                        system: system.clone(),
                    };
                    (with(b), with(a))
                })
            } else {
                None
            };
            if let Some((of_a, of_b)) = pair {
                conflicts.entry(a.name_any()).or_default().push(of_a);
                conflicts.entry(b.name_any()).or_default().push(of_b);
            }
        }
    }
    conflicts
}

/// Exactly one BmcBinding must name the node. A binding that reaches the same BMC as another
/// node's binding, without a distinct system, passes: one mistyped binding must not stop another
/// node's fence, and the identity step tells which of the two is wrong
/// ([`conflict_settled_by_identity`]).
pub fn binding_sane(node: &str, bindings: &[BmcBinding], namespace: &str) -> Gate {
    let mine: Vec<_> = bindings.iter().filter(|b| b.spec.node_name == node).collect();
    match mine.as_slice() {
        [_] => Gate::Admit,
        [] => Gate::Refuse(
            Reason::NoBmcBinding,
            format!(
                "no BmcBinding in namespace {namespace} has spec.nodeName {node}; create one with the node's Redfish endpoint, a credentials Secret and a CA bundle or certificate pin (see config/samples/bmc_binding.yaml)"
            ),
        ),
        several => {
            let names: Vec<_> = several.iter().map(|b| b.name_any()).collect();
            Gate::Refuse(
                Reason::BindingConflict,
                format!("BmcBindings {} all claim node {node}; keep exactly one", names.join(", ")),
            )
        }
    }
}

/// L3: a `Reboot` is not admitted through a binding with PDU levels (`levels::action_allowed`).
pub fn levels_allow_action(action: crate::api::FenceAction, node: &str, bindings: &[BmcBinding]) -> Gate {
    let refused = bindings
        .iter()
        .filter(|b| b.spec.node_name == node)
        .find_map(|b| crate::levels::action_allowed(action, &b.name_any(), &b.spec).err());
    match refused {
        Some(refusal) => Gate::Refuse(Reason::RebootWithPduLevels, refusal.to_string()),
        None => Gate::Admit,
    }
}

/// Another binding that reaches the same BMC without a distinct system ([`Conflict::SameOrigin`]),
/// with the systemUUID its node's kubelet reports now (empty when the Node or its UUID is missing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginPeer {
    pub binding: String,
    pub node: String,
    pub node_uuid: String,
}

/// The identity step's rule for a binding in an origin conflict: it keeps working only when the
/// system its BMC answered with, in this fence, reports the binding's own node's UUID (either byte
/// order) and no peer's node's. Otherwise it is the binding in the wrong, and refused
/// (`BindingConflict`) — its peers are not: each is judged by what its own fence reads. A stored
/// verification (a binding's status) does not decide; only the UUID read now and the Nodes'
/// systemUUIDs do.
pub fn conflict_settled_by_identity(
    binding: &str,
    node: &str,
    node_uuid: &str,
    read_uuid: &str,
    peers: &[OriginPeer],
) -> Result<(), String> {
    if peers.is_empty() {
        return Ok(());
    }
    let names = |uuid: &str| {
        identity::parse(uuid)
            .zip(identity::parse(read_uuid))
            .is_some_and(|(a, b)| identity::same_machine(a, b).is_some())
    };
    let owners: Vec<&OriginPeer> = peers.iter().filter(|p| names(&p.node_uuid)).collect();
    let others: Vec<String> = peers.iter().map(|p| format!("BmcBinding {} (node {})", p.binding, p.node)).collect();
    let shared =
        format!("BmcBinding {binding} reaches the same BMC as {} without a distinct system", others.join(", "));
    match (names(node_uuid), owners.as_slice()) {
        (true, []) => Ok(()),
        (false, [owner, ..]) => Err(format!(
            "{shared}, and the system it reached reports UUID {read_uuid}, node {}'s: BmcBinding {binding} points at the wrong BMC or system; fix its spec.redfish (BmcBinding {} keeps working)",
            owner.node, owner.binding
        )),
        (true, [owner, ..]) => Err(format!(
            "{shared}, and the system it reached reports UUID {read_uuid}, which node {node} and node {} both report; coroner will not guess which machine it powers",
            owner.node
        )),
        (false, []) => Err(format!(
            "{shared}, and the system it reached reports UUID {read_uuid}, which is not node {node}'s systemUUID {node_uuid:?} (in either byte order); coroner will not guess which machine it powers"
        )),
    }
}

pub fn is_control_plane(node: &Node) -> bool {
    let labels = node.labels();
    labels.contains_key("node-role.kubernetes.io/control-plane")
        || labels.contains_key("node-role.kubernetes.io/master")
}

/// Which remediations a change of `node` may concern, so that only they are woken: those of that
/// node, and, when it is a control-plane node, every pending one (the quorum gate counts the other
/// control-plane nodes). Another worker's heartbeat changes nothing any gate reads.
pub fn woken_by_node_change(node: &Node, remediation: &CoronerRemediation) -> bool {
    let name = node.name_any();
    contract::node_name(&remediation.metadata) == Some(name.as_str())
        || (is_control_plane(node) && Phase::of(remediation) == Phase::Pending)
}

/// `controlPlane: Never` refuses control-plane nodes for good.
pub fn control_plane_allowed(policy: ControlPlanePolicy, node: &Node) -> Gate {
    if policy == ControlPlanePolicy::Never && is_control_plane(node) {
        Gate::Refuse(
            Reason::ControlPlaneNever,
            "node is a control-plane node and the template sets controlPlane: Never".into(),
        )
    } else {
        Gate::Admit
    }
}

/// The node's Lease must not have been renewed within `freshness`, as seen on coroner's monotonic
/// clock. A renewal seen exactly `freshness` ago no longer counts as fresh.
pub fn lease_stale(lease: LeaseSighting, freshness: StdDuration) -> Gate {
    match lease {
        LeaseSighting::Missing => Gate::Admit,
        LeaseSighting::Seen { age } => {
            if age >= freshness {
                Gate::Admit
            } else {
                let wait = freshness.saturating_sub(age);
                Gate::Wait(
                    Reason::NodeLeaseFresh,
                    format!(
                        "coroner saw the node's Lease renewed {:.0}s ago (leaseFreshness {}s): waiting {:.0}s more",
                        age.as_secs_f64(),
                        freshness.as_secs(),
                        wait.as_secs_f64().ceil()
                    ),
                )
            }
        }
    }
}

fn node_of(remediation: &CoronerRemediation) -> &str {
    contract::node_name(&remediation.metadata).unwrap_or_default()
}

/// How long after coroner powered a node on another remediation of it waits for the boot.
pub const BOOT_GRACE: StdDuration = StdDuration::from_secs(600);

/// The other remediations of the same node (NHC re-creating one, a second template, a person).
fn siblings<'a>(inputs: &'a GateInputs<'_>) -> impl Iterator<Item = &'a CoronerRemediation> {
    let me = inputs.remediation;
    let node = inputs.node.name_any();
    inputs.remediations.iter().filter(move |r| r.uid() != me.uid() && node_of(r) == node)
}

/// One node, one fence: while another remediation of the node is fencing it, or an older one is still
/// pending, or coroner powered the node on within [`BOOT_GRACE`] and it is not back yet, this one
/// waits and sends no reset of its own.
pub fn one_fence_per_node(inputs: &GateInputs<'_>) -> Gate {
    let node = inputs.node.name_any();
    let me = inputs.remediation;
    let older = |r: &CoronerRemediation| {
        (r.metadata.creation_timestamp.as_ref().map(|t| t.0), r.name_any())
            < (me.metadata.creation_timestamp.as_ref().map(|t| t.0), me.name_any())
    };
    // The oldest live remediation of the node fences it; the others wait for it to end.
    if let Some(other) =
        siblings(inputs).find(|r| Phase::of(r).being_fenced() || (Phase::of(r) == Phase::Pending && older(r)))
    {
        return Gate::Wait(
            Reason::NodeAlreadyBeingFenced,
            format!(
                "remediation {} of node {node} came first (phase {}): one fence per node",
                other.name_any(),
                Phase::of(other).as_str()
            ),
        );
    }
    // A finished sibling's release that stands is never fenced again: adopted when it can be
    // (`release_to_adopt`, which the driver prefers to this wait), else waited on (its out-of-service
    // taint is no longer on the node as it wrote it, yet its record and its guard stand).
    if let Some(other) = siblings(inputs).find(|r| standing_release(r, inputs).is_some()) {
        return Gate::Wait(
            Reason::NodeAlreadyBeingFenced,
            format!(
                "remediation {} released node {node} and its release stands (its guard watches the machine), but this remediation cannot stand on it (that fence failed, or its out-of-service taint is not on the node as it wrote it: taken off for an On that never came, or removed or rewritten by someone else) and does not fence the released machine again; deleting {} ends that release",
                other.name_any(),
                other.name_any()
            ),
        );
    }
    let booting = siblings(inputs).find_map(|r| {
        let power_on = r.status.as_ref()?.evidence.as_ref()?.power_on.as_ref()?;
        let sent = power_on.sent_at.as_ref()?.0;
        let waited = StdDuration::try_from(inputs.now.duration_since(sent)).unwrap_or_default();
        (power_on.new_boot_id.is_none() && waited < BOOT_GRACE).then(|| (r.name_any(), sent))
    });
    match booting {
        Some((other, sent)) => Gate::Wait(
            Reason::NodeAlreadyBeingFenced,
            format!(
                "remediation {other} powered node {node} on at {sent}; waiting up to {}s for it to boot",
                BOOT_GRACE.as_secs()
            ),
        ),
        None => Gate::Admit,
    }
}

/// A release another remediation of the node made, for a new remediation to stand on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adoptable {
    pub from: String,
    pub released_at: Timestamp,
    /// How that release was made: the adopter's record says the same.
    pub strategy: RemediationStrategy,
}

/// Another remediation of the node finished its fence and its release still stands (R1: judged from
/// its record, [`crate::release::release_stands`]); with `OutOfServiceTaint`, its exact taint is still
/// on the node. A new remediation stands on it ([`crate::fence::Verdict::Adopt`]) rather than fencing
/// the machine again: under `guard: Alert` a second fence would switch off a released machine the
/// guard only reports, and under `Enforce` the sibling's guard already switches it off.
pub fn release_to_adopt(inputs: &GateInputs<'_>) -> Option<Adoptable> {
    siblings(inputs).find_map(|r| {
        // Only a fence that succeeded is stood on: a failed one's standing release (an attested
        // release, an interrupted deletion) is waited on (`one_fence_per_node`).
        if Phase::of(r) != Phase::Done {
            return None;
        }
        let release = standing_release(r, inputs)?;
        let uid = r.uid()?;
        let released_at = match release.strategy {
            RemediationStrategy::OutOfServiceTaint => {
                let on_node = crate::taints::release_on_node(inputs.node, &uid)?;
                (release.taint_owned && release.taint_removed_at.is_none()).then_some(on_node)?
            }
            RemediationStrategy::ResourceDeletion => release.released_at.0,
        };
        Some(Adoptable { from: r.name_any(), released_at, strategy: release.strategy })
    })
}

/// The release of a sibling whose fence ended (`Done`, or `Failed` with a release: attested, or a
/// deletion interrupted after some pods), while it stands (R1: judged from its record,
/// [`crate::release::release_stands`]) on the Node object it admitted (not one re-created under its
/// name, R4).
fn standing_release<'a>(sibling: &'a CoronerRemediation, inputs: &GateInputs<'_>) -> Option<&'a ReleaseEvidence> {
    if !Phase::of(sibling).is_terminal() || sibling.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = sibling.status.as_ref()?;
    let release = status.evidence.as_ref()?.release.as_ref()?;
    let admitted = status.evidence.as_ref()?.node.as_ref()?.uid.as_str();
    if inputs.node.metadata.uid.as_deref() != Some(admitted) {
        return None;
    }
    let uid = sibling.uid()?;
    crate::release::release_stands(status, &NodeSnapshot::new(inputs.node, None, &uid)).then_some(release)
}

/// Whether a release to adopt ([`release_to_adopt`]) may be adopted now: adoption reports the node
/// fenced, so it waits on the evidence a fence waits on before it acts — a Lease renewed within
/// leaseFreshness is life. Storm limits, the quorum rule and a sibling's fence do not hold it: it
/// sends nothing and takes no slot.
pub fn adoption_waits(inputs: &GateInputs<'_>) -> Option<(Reason, String)> {
    match lease_stale(inputs.lease, inputs.remediation.spec.lease_freshness.get()) {
        Gate::Admit => None,
        Gate::Wait(reason, message) | Gate::Refuse(reason, message) => Some((reason, message)),
    }
}

fn is_pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == conditions::TRUE))
}

/// A control-plane node is fenced only if no other control-plane node is being fenced and quorum
/// survives without it: with static etcd pods, the Ready etcd pods on other nodes must be a strict
/// majority of all etcd pods; otherwise the other Ready control-plane nodes must be a strict majority
/// of all control-plane nodes.
pub fn control_plane_quorum(inputs: &GateInputs<'_>) -> Gate {
    let target = inputs.node.name_any();
    if !is_control_plane(inputs.node) {
        return Gate::Admit;
    }
    let control_plane: BTreeMap<String, &Node> =
        inputs.nodes.iter().filter(|n| is_control_plane(n)).map(|n| (n.name_any(), n)).collect();
    let other_fence = inputs.remediations.iter().find(|r| {
        r.uid() != inputs.remediation.uid()
            && Phase::of(r).being_fenced()
            && node_of(r) != target
            && control_plane.contains_key(node_of(r))
    });
    if let Some(other) = other_fence {
        return Gate::Wait(
            Reason::ControlPlaneQuorumGuard,
            format!(
                "remediation {} is fencing control-plane node {}: one control-plane node at a time",
                other.name_any(),
                node_of(other)
            ),
        );
    }
    let etcd: Vec<&Pod> =
        inputs.etcd_pods.iter().filter(|p| p.labels().get("component").map(String::as_str) == Some("etcd")).collect();
    let (healthy, total, what) = if etcd.is_empty() {
        let mut all: Vec<&Node> = control_plane.values().copied().collect();
        if !control_plane.contains_key(&target) {
            all.push(inputs.node);
        }
        let ready = all.iter().filter(|n| n.name_any() != target && ready_status(n) == Some(conditions::TRUE)).count();
        (ready, all.len(), "Ready control-plane nodes")
    } else {
        let ready = etcd
            .iter()
            .filter(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(target.as_str()) && is_pod_ready(p)
            })
            .count();
        (ready, etcd.len(), "Ready etcd members")
    };
    if healthy * 2 > total {
        Gate::Admit
    } else {
        Gate::Wait(
            Reason::ControlPlaneQuorumGuard,
            format!(
                "without this node only {healthy} of {total} {what} remain; a strict majority is needed to keep quorum"
            ),
        )
    }
}

/// Whether a status says the storm limits queued its fence: `Pending`, `Succeeded` reason `Queued`.
pub fn queued(status: Option<&CoronerRemediationStatus>) -> bool {
    status.is_some_and(|s| {
        s.phase.unwrap_or_default() == Phase::Pending
            && conditions::find(&s.conditions, contract::SUCCEEDED).is_some_and(|c| c.reason == Reason::Queued.as_str())
    })
}

/// Storm limits, in the order a queue needs them: first come, first served; at most
/// `max_concurrent` power actions at once; never two on one BMC origin; at most `max_per_window`
/// fences admitted per `window` (counted at admission: each one may power a node off).
pub fn storm(inputs: &GateInputs<'_>) -> Gate {
    let me = inputs.remediation;
    let my_created = me.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let older = |r: &CoronerRemediation| {
        let created = r.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (created, r.name_any()) < (my_created, me.name_any())
    };
    let ahead: Vec<&CoronerRemediation> =
        inputs.remediations.iter().filter(|r| r.uid() != me.uid() && queued(r.status.as_ref()) && older(r)).collect();
    let place = ahead.len() + 1;
    let queued = |why: String| Gate::Wait(Reason::Queued, format!("place {place} in the queue: {why}"));
    if let Some(first) = ahead.first() {
        return queued(format!("{} older remediations wait first (oldest: {})", ahead.len(), first.name_any()));
    }
    let others: Vec<&CoronerRemediation> =
        inputs.remediations.iter().filter(|r| r.uid() != me.uid() && Phase::of(r).holds_power_slot()).collect();
    if others.len() >= count(inputs.limits.max_concurrent) {
        let names: Vec<_> = others.iter().map(|r| r.name_any()).collect();
        return queued(format!(
            "{} power actions already running ({}); --max-concurrent-fences {}",
            others.len(),
            names.join(", "),
            inputs.limits.max_concurrent
        ));
    }
    let origin_of_node =
        |node: &str| inputs.bindings.iter().find(|b| b.spec.node_name == node).map(|b| origin(&b.spec.endpoint()));
    if let Some(mine) = origin_of_node(&inputs.node.name_any())
        && let Some(busy) = others.iter().find(|r| origin_of_node(node_of(r)).as_deref() == Some(mine.as_str()))
    {
        return queued(format!("remediation {} is acting on the same BMC {mine}", busy.name_any()));
    }
    if let Some(next_slot) = window_frees_at(inputs) {
        let window_start = inputs.now - inputs.limits.window;
        let recent = inputs.recent_admissions.iter().filter(|t| **t > window_start).count();
        return queued(format!(
            "{recent} fences admitted in the last {}s (--max-fences-per-window {}); next slot at {next_slot}",
            inputs.limits.window.as_secs(),
            inputs.limits.max_per_window
        ));
    }
    Gate::Admit
}

/// The admission's answer, before the driver fills an admission's evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    Admit,
    /// Another remediation of this node released it and that release stands: stand on it.
    Adopt(Adoptable),
    /// Such a release stands, and the node's Lease holds the adoption back ([`adoption_waits`]).
    AdoptionWaits {
        reason: Reason,
        message: String,
    },
    Wait {
        reason: Reason,
        message: String,
        /// A queued remediation: when to look again ([`queued_recheck`]), and when the window frees
        /// ([`window_frees_at`]).
        recheck: Option<StdDuration>,
        frees_at: Option<Timestamp>,
    },
    Refuse {
        reason: Reason,
        message: String,
    },
}

/// The admission verdict from what the gates answered (`gate`, [`evaluate`] on `inputs`): a final
/// refusal wins; else a release another remediation of the node made stands ([`release_to_adopt`]),
/// whatever a storm limit says, unless the node's Lease holds it ([`adoption_waits`]); else the gates'
/// own answer, a queued wait saying when to look again.
pub fn verdict(gate: Gate, inputs: &GateInputs<'_>) -> Admission {
    match (gate, release_to_adopt(inputs)) {
        (Gate::Refuse(reason, message), _) => Admission::Refuse { reason, message },
        (_, Some(adoptable)) => match adoption_waits(inputs) {
            Some((reason, message)) => Admission::AdoptionWaits { reason, message },
            None => Admission::Adopt(adoptable),
        },
        (Gate::Admit, None) => Admission::Admit,
        (Gate::Wait(reason, message), None) => {
            let queued = reason == Reason::Queued;
            let recheck = queued.then(|| queued_recheck(inputs));
            let frees_at = window_frees_at(inputs).filter(|_| queued);
            Admission::Wait { reason, message, recheck, frees_at }
        }
    }
}

/// When the fence window has room again, if it is full now: the moment the oldest admission that
/// fills it leaves the window.
pub fn window_frees_at(inputs: &GateInputs<'_>) -> Option<Timestamp> {
    let window_start = inputs.now - inputs.limits.window;
    let mut recent: Vec<Timestamp> = inputs.recent_admissions.iter().copied().filter(|t| *t > window_start).collect();
    if recent.len() < count(inputs.limits.max_per_window) {
        return None;
    }
    recent.sort();
    Some(recent[recent.len() - count(inputs.limits.max_per_window)] + inputs.limits.window)
}

/// A queued remediation is woken when the queue moves ([`moves_the_queue`], the remediation
/// controller's watch) and, for the window, when the window frees; this is only the recheck should a
/// wake-up be lost, so that waiting costs next to no reads.
pub const QUEUED_RECHECK: StdDuration = StdDuration::from_secs(60);

/// How long a remediation the gates queued sleeps before it looks again: until the window frees
/// when that is what holds it, never longer than [`QUEUED_RECHECK`].
pub fn queued_recheck(inputs: &GateInputs<'_>) -> StdDuration {
    let frees = window_frees_at(inputs)
        .and_then(|at| StdDuration::try_from(at.duration_since(inputs.now)).ok())
        .unwrap_or(QUEUED_RECHECK);
    frees.min(QUEUED_RECHECK)
}

/// What a queued remediation's last full look (its reads and a fresh list of the remediations) saw:
/// its own resourceVersion, the [`queue_fingerprint`] of the stores then, and when the fence window
/// frees, on the monotonic clock, when the window is full (however far away).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueLook {
    pub resource_version: Option<String>,
    pub fingerprint: u64,
    pub until: Option<crate::words::Mono>,
}

/// What the place of `me` in the queue depends on, as the stores show it (no request): each other
/// remediation's phase, `Succeeded` reason, deletion, node, creation and admission, each binding's
/// node and generation, and when coroner last saw the node's Lease change. Only compared, so a hash.
/// A binding's status (the verifier writes it) and a fence's readings within a phase leave it as it is.
pub fn queue_fingerprint(
    me: &CoronerRemediation,
    remediations: &[CoronerRemediation],
    bindings: &[BmcBinding],
    lease_changed: Option<crate::words::Mono>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    // Fixed keys: the same stores give the same number in every process (and every simulator run).
    let mut hasher = std::hash::DefaultHasher::new();
    let mut others: Vec<&CoronerRemediation> = remediations.iter().filter(|r| r.uid() != me.uid()).collect();
    others.sort_by_key(|r| r.uid());
    for r in others {
        let succeeded = r.status.as_ref().and_then(|s| conditions::find(&s.conditions, contract::SUCCEEDED));
        let admitted = r.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()).map(|n| n.admitted_at.0);
        (r.uid(), r.name_any(), r.metadata.creation_timestamp.as_ref().map(|t| t.0), Phase::of(r).as_str())
            .hash(&mut hasher);
        (succeeded.map(|c| (&c.status, &c.reason)), r.metadata.deletion_timestamp.is_some(), node_of(r), admitted)
            .hash(&mut hasher);
    }
    let mut named: Vec<(&str, String, Option<i64>)> =
        bindings.iter().map(|b| (b.spec.node_name.as_str(), b.name_any(), b.metadata.generation)).collect();
    named.sort();
    named.hash(&mut hasher);
    lease_changed.hash(&mut hasher);
    hasher.finish()
}

/// A queued remediation's look that would see what its last look saw is not taken: how long to
/// sleep instead (`None`: look). It looks when something woke it on purpose (`poked`: its node, an
/// etcd Pod, the queue moving), its own object changed, the stores show another place in the queue
/// (a wake-up lost, or a store that showed a move only after the wake-up), or the window frees; so
/// waiting in the queue costs no request, and the fallback recheck stays.
pub fn queued_look_skipped(
    last: Option<&QueueLook>,
    resource_version: Option<&str>,
    fingerprint: u64,
    poked: bool,
    mono: crate::words::Mono,
) -> Option<StdDuration> {
    let last = last?;
    if poked || last.resource_version.as_deref() != resource_version || last.fingerprint != fingerprint {
        return None;
    }
    match last.until {
        Some(until) if mono >= until => None,
        Some(until) => Some((until - mono).min(QUEUED_RECHECK)),
        None => Some(QUEUED_RECHECK),
    }
}

/// Whether a remediation going from phase `before` to `after` (`None`: not seen; gone or being
/// deleted) may move the queue, so that the pending remediations are woken: one leaves `Pending`
/// (those behind it move up), leaves a phase that holds a power slot (the slot frees), or is going
/// (each of its events: its deletion begins, its finalizer ends, it is gone). A status write within a
/// phase, or a queued one's own, wakes nobody.
pub fn moves_the_queue(before: Option<Phase>, after: Option<Phase>) -> bool {
    let holds = |phase: Option<Phase>| phase.is_some_and(Phase::holds_power_slot);
    after.is_none() || (before != after && (before == Some(Phase::Pending) || (holds(before) && !holds(after))))
}

fn count(limit: u32) -> usize {
    usize::try_from(limit).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests;
