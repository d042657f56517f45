use jiff::SignedDuration;
use k8s_openapi::{
    api::core::v1::{NodeCondition, NodeStatus, PodCondition, PodSpec, PodStatus},
    apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time},
};

use super::*;
use crate::api::{
    BmcBindingSpec, BmcBindingStatus, CoronerRemediationSpec, CoronerRemediationStatus, RedfishTarget, SecretRef,
    TlsPolicy,
};

fn t(secs: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
}

fn node(name: &str, ready: Option<&str>, labels: &[(&str, &str)]) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.into());
    node.metadata.uid = Some(format!("uid-node-{name}"));
    node.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    node.status = Some(NodeStatus {
        conditions: ready
            .map(|s| vec![NodeCondition { type_: "Ready".into(), status: s.into(), ..NodeCondition::default() }]),
        ..NodeStatus::default()
    });
    node
}

fn control_plane(name: &str, ready: &str) -> Node {
    node(name, Some(ready), &[("node-role.kubernetes.io/control-plane", "")])
}

fn binding(name: &str, node: &str, endpoint: &str, system: Option<&str>) -> BmcBinding {
    BmcBinding::new(
        name,
        BmcBindingSpec {
            node_name: node.into(),
            redfish: Some(RedfishTarget { endpoint: endpoint.into(), system_id: system.map(str::to_owned) }),
            ipmi: None,
            credentials_secret_ref: SecretRef { name: "bmc".into() },
            tls: Some(TlsPolicy::default()),
            pdu_levels: Vec::new(),
        },
    )
}

fn remediation(name: &str, node: &str, created: i64, phase: Phase, reason: Option<Reason>) -> CoronerRemediation {
    let mut r = CoronerRemediation::new(name, CoronerRemediationSpec::default());
    r.metadata.uid = Some(format!("uid-{name}"));
    r.metadata.creation_timestamp = Some(Time(t(created)));
    r.metadata.annotations = Some([(contract::NODE_NAME_ANNOTATION.to_owned(), node.to_owned())].into());
    let conditions = reason
        .map(|reason| {
            vec![Condition {
                type_: contract::SUCCEEDED.into(),
                status: "Unknown".into(),
                reason: reason.as_str().into(),
                message: "m".into(),
                last_transition_time: Time(t(0)),
                observed_generation: None,
            }]
        })
        .unwrap_or_default();
    r.status = Some(CoronerRemediationStatus { phase: Some(phase), conditions, ..CoronerRemediationStatus::default() });
    r
}

fn etcd(name: &str, node: &str, ready: bool) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    pod.metadata.labels = Some([("component".to_owned(), "etcd".to_owned())].into());
    pod.spec = Some(PodSpec { node_name: Some(node.into()), ..PodSpec::default() });
    pod.status = Some(PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    });
    pod
}

const LIMITS: StormLimits = StormLimits { max_concurrent: 3, max_per_window: 5, window: StdDuration::from_secs(600) };

struct World {
    me: CoronerRemediation,
    node: Node,
    bindings: Vec<BmcBinding>,
    nodes: Vec<Node>,
    etcd: Vec<Pod>,
    remediations: Vec<CoronerRemediation>,
    admissions: Vec<Timestamp>,
    lease: LeaseSighting,
    limits: StormLimits,
}

impl World {
    fn new(target: Node) -> Self {
        let name = target.name_any();
        let me = remediation(&format!("{name}-me"), &name, 100, Phase::Pending, None);
        Self {
            bindings: vec![binding(&name, &name, &format!("https://bmc-{name}:443"), None)],
            nodes: vec![target.clone()],
            node: target,
            remediations: vec![me.clone()],
            me,
            etcd: vec![],
            admissions: vec![],
            lease: LeaseSighting::Missing,
            limits: LIMITS,
        }
    }

    fn gate(&self, gate: fn(&GateInputs<'_>) -> Gate) -> Gate {
        gate(&self.inputs())
    }

    fn inputs(&self) -> GateInputs<'_> {
        GateInputs {
            remediation: &self.me,
            node: &self.node,
            namespace: "coroner",
            now: t(1000),
            lease: self.lease,
            bindings: &self.bindings,
            nodes: &self.nodes,
            etcd_pods: &self.etcd,
            remediations: &self.remediations,
            recent_admissions: &self.admissions,
            limits: self.limits,
        }
    }

    /// Another remediation of a node with its own BMC.
    fn other(&mut self, name: &str, created: i64, phase: Phase, reason: Option<Reason>) {
        self.bindings.push(binding(name, name, &format!("https://bmc-{name}:443"), None));
        self.remediations.push(remediation(&format!("{name}-r"), name, created, phase, reason));
    }
}

fn reason(gate: &Gate) -> Option<Reason> {
    match gate {
        Gate::Admit => None,
        Gate::Wait(reason, _) | Gate::Refuse(reason, _) => Some(*reason),
    }
}

fn waits(gate: &Gate, expected: Reason) -> bool {
    matches!(gate, Gate::Wait(reason, _) if *reason == expected)
}

// Ready=Unknown only ----------------------------------------------------------------------------------

#[test]
fn only_ready_unknown_is_admitted_by_default() {
    assert_eq!(unreachable_only(&node("n", Some("Unknown"), &[]), false), Gate::Admit);
    for ready in [Some("True"), Some("False"), None] {
        let gate = unreachable_only(&node("n", ready, &[]), false);
        assert!(matches!(gate, Gate::Refuse(Reason::NodeNotUnreachable, _)), "{ready:?}");
    }
}

#[test]
fn ready_false_is_admitted_only_when_opted_in_and_true_never() {
    assert_eq!(unreachable_only(&node("n", Some("False"), &[]), true), Gate::Admit);
    assert_eq!(reason(&unreachable_only(&node("n", Some("True"), &[]), true)), Some(Reason::NodeNotUnreachable));
    let Gate::Refuse(_, message) = unreachable_only(&node("n", Some("False"), &[]), false) else { panic!() };
    assert!(message.contains("remediateReadyFalse"), "{message}");
}

// Exclusion ------------------------------------------------------------------------------------------------

#[test]
fn the_exclusion_label_refuses_whatever_its_value() {
    for value in ["true", "", "false"] {
        assert_eq!(
            reason(&not_excluded(&node("n", Some("Unknown"), &[(contract::EXCLUDE_LABEL, value)]))),
            Some(Reason::NodeExcluded)
        );
    }
    assert_eq!(not_excluded(&node("n", Some("Unknown"), &[("other", "x")])), Gate::Admit);
}

// Lease --------------------------------------------------------------------------------------------------

fn seen(ago: u64) -> LeaseSighting {
    LeaseSighting::Seen { age: StdDuration::from_secs(ago) }
}

#[test]
fn a_lease_renewal_seen_within_the_window_waits() {
    let window = StdDuration::from_secs(60);
    assert!(waits(&lease_stale(seen(59), window), Reason::NodeLeaseFresh));
    assert!(waits(&lease_stale(seen(1), window), Reason::NodeLeaseFresh));
}

#[test]
fn a_lease_renewal_seen_exactly_at_the_window_edge_is_stale() {
    let window = StdDuration::from_secs(60);
    assert_eq!(lease_stale(seen(60), window), Gate::Admit);
    let just_inside = LeaseSighting::Seen { age: StdDuration::from_secs(60) - StdDuration::from_millis(1) };
    assert!(waits(&lease_stale(just_inside, window), Reason::NodeLeaseFresh));
}

#[test]
fn a_missing_lease_does_not_refuse_by_itself() {
    assert_eq!(lease_stale(LeaseSighting::Missing, StdDuration::from_secs(60)), Gate::Admit);
}

// Control plane -----------------------------------------------------------------------------------------

#[test]
fn control_plane_never_refuses_control_plane_nodes_only() {
    assert_eq!(
        reason(&control_plane_allowed(ControlPlanePolicy::Never, &control_plane("cp-1", "Unknown"))),
        Some(Reason::ControlPlaneNever)
    );
    let master = node("m", Some("Unknown"), &[("node-role.kubernetes.io/master", "")]);
    assert_eq!(reason(&control_plane_allowed(ControlPlanePolicy::Never, &master)), Some(Reason::ControlPlaneNever));
    assert_eq!(control_plane_allowed(ControlPlanePolicy::Never, &node("w", Some("Unknown"), &[])), Gate::Admit);
    assert_eq!(control_plane_allowed(ControlPlanePolicy::QuorumSafe, &control_plane("cp-1", "Unknown")), Gate::Admit);
}

#[test]
fn workers_pass_the_quorum_rule() {
    let world = World::new(node("w-1", Some("Unknown"), &[]));
    assert_eq!(world.gate(control_plane_quorum), Gate::Admit);
}

#[test]
fn one_of_three_control_plane_nodes_may_be_fenced() {
    let mut world = World::new(control_plane("cp-1", "Unknown"));
    world.nodes.extend([control_plane("cp-2", "True"), control_plane("cp-3", "True")]);
    assert_eq!(world.gate(control_plane_quorum), Gate::Admit);
}

#[test]
fn two_of_three_down_keeps_the_third_waiting() {
    let mut world = World::new(control_plane("cp-1", "Unknown"));
    world.nodes.extend([control_plane("cp-2", "Unknown"), control_plane("cp-3", "True")]);
    assert!(waits(&world.gate(control_plane_quorum), Reason::ControlPlaneQuorumGuard));
}

#[test]
fn exactly_half_the_etcd_members_ready_is_not_a_majority() {
    let mut world = World::new(control_plane("cp-1", "Unknown"));
    world.nodes.extend([control_plane("cp-2", "True"), control_plane("cp-3", "True"), control_plane("cp-4", "True")]);
    // Four members, the target's own excluded: 2 of 4 Ready elsewhere is half, not a majority.
    world.etcd = vec![
        etcd("etcd-cp-1", "cp-1", true),
        etcd("etcd-cp-2", "cp-2", true),
        etcd("etcd-cp-3", "cp-3", true),
        etcd("etcd-cp-4", "cp-4", false),
    ];
    assert!(waits(&world.gate(control_plane_quorum), Reason::ControlPlaneQuorumGuard));
    world.etcd[3] = etcd("etcd-cp-4", "cp-4", true);
    assert_eq!(world.gate(control_plane_quorum), Gate::Admit);
}

#[test]
fn etcd_pods_decide_over_node_readiness_when_present() {
    let mut world = World::new(control_plane("cp-1", "Unknown"));
    world.nodes.extend([control_plane("cp-2", "True"), control_plane("cp-3", "True")]);
    world.etcd =
        vec![etcd("etcd-cp-1", "cp-1", true), etcd("etcd-cp-2", "cp-2", false), etcd("etcd-cp-3", "cp-3", true)];
    assert!(waits(&world.gate(control_plane_quorum), Reason::ControlPlaneQuorumGuard));
}

#[test]
fn one_control_plane_node_at_a_time() {
    let mut world = World::new(control_plane("cp-1", "Unknown"));
    world.nodes.extend([
        control_plane("cp-2", "True"),
        control_plane("cp-3", "True"),
        control_plane("cp-4", "True"),
        control_plane("cp-5", "True"),
    ]);
    world.other("cp-2", 50, Phase::ConfirmingOff, None);
    let gate = world.gate(control_plane_quorum);
    assert!(matches!(&gate, Gate::Wait(Reason::ControlPlaneQuorumGuard, m) if m.contains("cp-2")), "{gate:?}");
    // A finished fence of another control-plane node does not block (quorum still counts it).
    world.remediations[1] = remediation("cp-2-r", "cp-2", 50, Phase::Done, None);
    assert_eq!(world.gate(control_plane_quorum), Gate::Admit);
}

// Bindings ------------------------------------------------------------------------------------------------

#[test]
fn a_node_needs_exactly_one_binding() {
    assert!(
        matches!(binding_sane("n", &[], "coroner"), Gate::Refuse(Reason::NoBmcBinding, m) if m.contains("create one"))
    );
    let two = [binding("a", "n", "https://a", None), binding("b", "n", "https://b", None)];
    assert_eq!(reason(&binding_sane("n", &two, "coroner")), Some(Reason::BindingConflict));
    assert_eq!(binding_sane("n", &two[..1], "coroner"), Gate::Admit);
}

#[test]
fn two_bindings_on_one_bmc_system_both_conflict() {
    let same = [
        binding("a", "n1", "https://10.0.0.1", Some("1")),
        binding("b", "n2", "https://10.0.0.1:443/redfish/v1", Some("1")),
    ];
    let conflicts = binding_conflicts(&same);
    assert_eq!(conflicts.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        conflicts["a"],
        [Conflict::SameOrigin {
            other: "b".into(),
            other_node: "n2".into(),
            origin: "https://10.0.0.1".into(),
            system: Some("1".into())
        }]
    );
    assert_eq!(conflicts["a"][0].to_string(), "conflicts with BmcBinding b: both reach system 1 at https://10.0.0.1");
    // Different systems of one BMC (a blade chassis) are fine; a different port is another BMC.
    let blades = [binding("a", "n1", "https://10.0.0.1", Some("1")), binding("b", "n2", "https://10.0.0.1", Some("2"))];
    assert!(binding_conflicts(&blades).is_empty());
    let ports = [binding("a", "n1", "https://10.0.0.1:8443", None), binding("b", "n2", "https://10.0.0.1:9443", None)];
    assert!(binding_conflicts(&ports).is_empty());
}

#[test]
fn an_unknown_system_on_a_shared_bmc_conflicts_until_pinned_or_verified() {
    let mut unpinned = [binding("a", "n1", "https://10.0.0.1", None), binding("b", "n2", "https://10.0.0.1", None)];
    assert_eq!(binding_conflicts(&unpinned).len(), 2);
    for (b, system) in unpinned.iter_mut().zip(["1", "2"]) {
        b.metadata.generation = Some(1);
        b.status = Some(BmcBindingStatus {
            system_id: Some(system.into()),
            observed_generation: Some(1),
            ..BmcBindingStatus::default()
        });
    }
    assert!(binding_conflicts(&unpinned).is_empty());
    // A spec change (new generation) makes what verification found stale.
    unpinned[1].metadata.generation = Some(2);
    assert_eq!(binding_conflicts(&unpinned).len(), 2);
}

#[test]
fn two_bindings_of_one_node_conflict_whatever_they_reach() {
    let two = [binding("a", "n", "https://10.0.0.1", None), binding("b", "n", "https://10.0.0.2", None)];
    assert_eq!(binding_conflicts(&two)["b"], [Conflict::SameNode { other: "a".into(), node: "n".into() }]);
    assert_eq!(binding_conflicts(&two)["b"][0].to_string(), "conflicts with BmcBinding a: both claim node n");
}

#[test]
fn the_gate_lets_an_origin_only_conflict_through_to_the_identity_step() {
    // n2's binding is mistyped: it points at n1's BMC. Neither node's fence is refused here.
    let mistyped = [binding("a", "n1", "https://10.0.0.1", None), binding("b", "n2", "https://10.0.0.1", None)];
    assert_eq!(binding_conflicts(&mistyped).len(), 2);
    assert_eq!(binding_sane("n1", &mistyped, "coroner"), Gate::Admit);
    assert_eq!(binding_sane("n2", &mistyped, "coroner"), Gate::Admit);
}

const N1_UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";
const N1_SWAPPED: &str = "1e0c3b7f-0000-0040-8000-000000000001";
const N2_UUID: &str = "7f3b0c1e-0000-4000-8000-000000000002";
const NOBODY_UUID: &str = "7f3b0c1e-0000-4000-8000-000000000003";

fn peer(binding: &str, node: &str, uuid: &str) -> OriginPeer {
    OriginPeer { binding: binding.into(), node: node.into(), node_uuid: uuid.into() }
}

#[test]
fn a_binding_whose_bmc_answers_with_its_own_node_s_uuid_keeps_working_despite_the_conflict() {
    let peers = [peer("b", "n2", N2_UUID)];
    assert_eq!(conflict_settled_by_identity("a", "n1", N1_UUID, N1_UUID, &peers), Ok(()));
    assert_eq!(conflict_settled_by_identity("a", "n1", N1_UUID, N1_SWAPPED, &peers), Ok(()), "either byte order");
    assert_eq!(
        conflict_settled_by_identity("a", "n1", N1_UUID, &N1_UUID.to_uppercase(), &peers),
        Ok(()),
        "the same UUID in another case"
    );
}

#[test]
fn a_binding_whose_bmc_answers_with_another_binding_s_node_s_uuid_is_the_one_refused() {
    // b (n2's) reached n1's machine: b is refused, and names the binding that keeps working.
    let refused = conflict_settled_by_identity("b", "n2", N2_UUID, N1_UUID, &[peer("a", "n1", N1_UUID)]).unwrap_err();
    assert!(refused.contains("BmcBinding b reaches the same BMC as BmcBinding a (node n1)"), "{refused}");
    assert!(refused.contains(&format!("reports UUID {N1_UUID}, node n1's")), "{refused}");
    assert!(refused.contains("fix its spec.redfish (BmcBinding a keeps working)"), "{refused}");
}

#[test]
fn a_binding_whose_bmc_answers_with_nobody_s_uuid_is_refused() {
    let refused = conflict_settled_by_identity("a", "n1", N1_UUID, NOBODY_UUID, &[peer("b", "n2", N2_UUID)]);
    assert!(refused.unwrap_err().contains("which is not node n1's systemUUID"));
    // A node whose UUID is unknown or unusable settles nothing either.
    assert!(conflict_settled_by_identity("a", "n1", "", NOBODY_UUID, &[peer("b", "n2", N2_UUID)]).is_err());
}

#[test]
fn a_uuid_both_nodes_report_settles_nothing() {
    let refused = conflict_settled_by_identity("a", "n1", N1_UUID, N1_UUID, &[peer("b", "n2", N1_SWAPPED)]);
    assert!(refused.unwrap_err().contains("which node n1 and node n2 both report"));
}

#[test]
fn without_a_conflict_the_rule_has_nothing_to_settle() {
    // The identity proof itself ([`crate::identity::prove`]) judges the UUID then.
    assert_eq!(conflict_settled_by_identity("a", "n1", N1_UUID, NOBODY_UUID, &[]), Ok(()));
}

// Storm limits --------------------------------------------------------------------------------------------

#[test]
fn the_concurrency_budget_queues_the_next_fence() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    world.other("w-1", 10, Phase::ConfirmingOff, None);
    world.other("w-2", 20, Phase::VerifyingIdentity, None);
    assert_eq!(world.gate(storm), Gate::Admit, "two of three slots taken");
    world.other("w-3", 30, Phase::PoweringOff, None);
    let gate = world.gate(storm);
    assert!(
        matches!(&gate, Gate::Wait(Reason::Queued, m) if m.starts_with("place 1 in the queue") && m.contains("--max-concurrent-fences 3")),
        "{gate:?}"
    );
}

#[test]
fn finished_fences_free_their_slot_and_a_pending_power_on_keeps_it() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    world.other("w-1", 10, Phase::WaitingForNode, None);
    world.other("w-2", 20, Phase::Done, None);
    world.other("w-3", 30, Phase::Failed, None);
    assert_eq!(world.gate(storm), Gate::Admit);
    world.other("w-4", 40, Phase::WaitingForRelease, None);
    world.other("w-5", 50, Phase::PoweringOn, None);
    world.other("w-6", 60, Phase::ConfirmingOff, None);
    assert!(waits(&world.gate(storm), Reason::Queued), "the power-ons to come hold their slots");
}

#[test]
fn the_window_budget_counts_power_offs_within_the_window() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    world.limits.max_per_window = 2;
    world.admissions = vec![t(1000 - 600), t(500)];
    assert_eq!(world.gate(storm), Gate::Admit, "one admission fell out of the window at its edge");
    world.admissions.push(t(900));
    let gate = world.gate(storm);
    assert!(matches!(&gate, Gate::Wait(Reason::Queued, m) if m.contains("next slot at")), "{gate:?}");
}

#[test]
fn two_remediations_for_one_bmc_never_act_at_once() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    world.bindings[0].spec.redfish.as_mut().unwrap().endpoint = "https://chassis:443/redfish/v1".into();
    world.bindings[0].spec.redfish.as_mut().unwrap().system_id = Some("blade-9".into());
    world.other("w-1", 10, Phase::ConfirmingOff, None);
    world.bindings[1].spec.redfish.as_mut().unwrap().endpoint = "https://chassis".into();
    world.bindings[1].spec.redfish.as_mut().unwrap().system_id = Some("blade-1".into());
    let gate = world.gate(storm);
    assert!(matches!(&gate, Gate::Wait(Reason::Queued, m) if m.contains("same BMC https://chassis")), "{gate:?}");
}

#[test]
fn the_queue_is_first_come_first_served_and_shows_the_place() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    world.other("w-1", 10, Phase::Pending, Some(Reason::Queued));
    world.other("w-2", 20, Phase::Pending, Some(Reason::Queued));
    world.other("w-3", 200, Phase::Pending, Some(Reason::Queued));
    let gate = world.gate(storm);
    assert!(matches!(&gate, Gate::Wait(Reason::Queued, m) if m.starts_with("place 3 in the queue")), "{gate:?}");
    // An older remediation waiting for another reason does not hold the queue.
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    world.other("w-1", 10, Phase::Pending, Some(Reason::NodeLeaseFresh));
    assert_eq!(world.gate(storm), Gate::Admit);
}

// Order -----------------------------------------------------------------------------------------------------

#[test]
fn final_refusals_come_before_waits() {
    let mut world = World::new(node("w-1", Some("True"), &[]));
    world.lease = seen(1);
    assert_eq!(reason(&world.gate(evaluate)), Some(Reason::NodeNotUnreachable));
    let mut world = World::new(node("w-1", Some("Unknown"), &[]));
    world.lease = seen(1);
    assert_eq!(reason(&world.gate(evaluate)), Some(Reason::NodeLeaseFresh));
    world.lease = LeaseSighting::Missing;
    assert_eq!(world.gate(evaluate), Gate::Admit);
}

#[test]
fn piraeus_taints_change_no_decision() {
    // drbd.linbit.com taints mean "lost DRBD quorum", not "dead": they must neither admit nor refuse.
    let mut tainted = node("w-1", Some("Unknown"), &[]);
    tainted.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        taints: Some(vec![
            k8s_openapi::api::core::v1::Taint {
                key: "drbd.linbit.com/lost-quorum".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
            k8s_openapi::api::core::v1::Taint {
                key: "drbd.linbit.com/force-io-error".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    });
    for ready in ["Unknown", "True", "False"] {
        let plain = World::new(node("w-1", Some(ready), &[]));
        let mut with_taints = World::new(tainted.clone());
        with_taints.node.status = plain.node.status.clone();
        assert_eq!(with_taints.gate(evaluate), plain.gate(evaluate), "Ready={ready}");
    }
}

// One fence per node -------------------------------------------------------------------------------------

/// Another remediation of the target node itself.
fn sibling(world: &mut World, created: i64, phase: Phase) -> usize {
    let node = world.node.name_any();
    world.remediations.push(remediation(&format!("{node}-sib-{created}"), &node, created, phase, None));
    world.remediations.len() - 1
}

#[test]
fn the_oldest_live_remediation_of_a_node_fences_it_and_the_others_wait() {
    for (created, phase, waits_for_it) in [
        (50, Phase::Pending, true),
        (200, Phase::ConfirmingOff, true),
        (200, Phase::WaitingForNode, true),
        (200, Phase::Pending, false),
        (50, Phase::Done, false),
        (50, Phase::Failed, false),
    ] {
        let mut world = World::new(node("w-9", Some("Unknown"), &[]));
        sibling(&mut world, created, phase);
        let gate = world.gate(one_fence_per_node);
        assert_eq!(waits(&gate, Reason::NodeAlreadyBeingFenced), waits_for_it, "{created} {phase:?}: {gate:?}");
    }
}

#[test]
fn a_node_powered_on_by_a_sibling_waits_out_the_boot_grace_unless_it_is_back() {
    let power_on = |sent: i64, back: bool| {
        let mut world = World::new(node("w-9", Some("Unknown"), &[]));
        let i = sibling(&mut world, 50, Phase::Done);
        let status = world.remediations[i].status.get_or_insert_with(Default::default);
        status.evidence.get_or_insert_with(Default::default).power_on = Some(crate::api::PowerOnEvidence {
            sent_at: Some(MicroTime(t(sent))),
            new_boot_id: back.then(|| "boot-2".into()),
            ..Default::default()
        });
        world.gate(one_fence_per_node)
    };
    // The gate's clock is t(1000); the grace is 600 s.
    assert!(waits(&power_on(401, false), Reason::NodeAlreadyBeingFenced), "599 s after the On");
    assert_eq!(power_on(400, false), Gate::Admit, "600 s after the On");
    assert_eq!(power_on(990, true), Gate::Admit, "the node is back with a new bootID");
}

/// The sibling `i` proved the node off and released it at t(900) with `strategy` (a taint it owns,
/// or pods it deleted).
fn released_at_900(world: &mut World, i: usize, strategy: crate::api::RemediationStrategy) {
    let taint = strategy == crate::api::RemediationStrategy::OutOfServiceTaint;
    let status = world.remediations[i].status.get_or_insert_with(Default::default);
    status.evidence.get_or_insert_with(Default::default).release = Some(crate::api::ReleaseEvidence {
        release_id: None,
        kind: crate::api::ReleaseKind::BmcProof,
        attestation: None,
        adopted_from: None,
        strategy,
        node_ready: "Unknown".into(),
        lease_renew_time: None,
        released_at: MicroTime(t(900)),
        taint_owned: taint,
        pods_deleted: (!taint).then_some(3),
        taint_removed_at: None,
        release_timed_out: false,
    });
}

/// The sibling `i` admitted the world's Node as it is (same UID).
fn admitted_here(world: &mut World, i: usize) {
    let uid = world.node.metadata.uid.clone().unwrap_or_default();
    let status = world.remediations[i].status.get_or_insert_with(Default::default);
    status.evidence.get_or_insert_with(Default::default).node = Some(crate::api::NodeEvidence {
        name: "w-9".into(),
        uid,
        system_uuid: String::new(),
        boot_id: String::new(),
        ready: "Unknown".into(),
        lease_present: false,
        lease_renew_time: None,
        admitted_at: MicroTime(t(800)),
        binding: None,
    });
}

#[test]
fn a_siblings_release_is_adopted_only_while_its_exact_taint_is_on_the_node() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    let i = sibling(&mut world, 50, Phase::Done);
    let uid = world.remediations[i].metadata.uid.clone().unwrap();
    released_at_900(&mut world, i, crate::api::RemediationStrategy::OutOfServiceTaint);
    admitted_here(&mut world, i);
    assert_eq!(release_to_adopt(&world.inputs()), None, "the taint is not on the node");
    world.node =
        crate::taints::with_taint(&world.node, crate::taints::CoronerTaint::OutOfService, &uid, t(900)).unwrap();
    let adopted = release_to_adopt(&world.inputs());
    let strategy = crate::api::RemediationStrategy::OutOfServiceTaint;
    assert_eq!(adopted, Some(Adoptable { from: "w-9-sib-50".into(), released_at: t(900), strategy }));
    // Someone else's out-of-service taint is not a release to stand on.
    let mut world_foreign = World::new(node("w-9", Some("Unknown"), &[]));
    world_foreign.remediations.push(world.remediations[i].clone());
    world_foreign.node = crate::taints::with_taint(
        &world_foreign.node,
        crate::taints::CoronerTaint::OutOfService,
        "uid-someone",
        t(900),
    )
    .unwrap();
    assert_eq!(release_to_adopt(&world_foreign.inputs()), None);
}

#[test]
fn a_siblings_standing_release_whose_taint_is_off_the_node_is_waited_on_never_fenced_again() {
    // Seed 190781: a webhook rewrote the sibling's taint, its Reboot's On was blocked, and its release
    // stands under guard: Alert; a second fence would switch the released machine off.
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    let i = sibling(&mut world, 50, Phase::Done);
    released_at_900(&mut world, i, crate::api::RemediationStrategy::OutOfServiceTaint);
    admitted_here(&mut world, i);
    assert_eq!(release_to_adopt(&world.inputs()), None, "not adoptable: the taint is not on the node");
    let gate = world.gate(one_fence_per_node);
    assert!(waits(&gate, Reason::NodeAlreadyBeingFenced), "{gate:?}");
    assert!(format!("{gate:?}").contains("deleting w-9-sib-50 ends that release"), "{gate:?}");
    // Once it no longer stands (its On answered after its taint came off), nothing holds a new fence back.
    world.remediations[i]
        .status
        .as_mut()
        .unwrap()
        .evidence
        .as_mut()
        .unwrap()
        .release
        .as_mut()
        .unwrap()
        .taint_removed_at = Some(MicroTime(t(950)));
    let status = world.remediations[i].status.as_mut().unwrap();
    status.progress.get_or_insert_with(Default::default).intent = Some(crate::api::Intent {
        action: crate::api::PowerAction::On,
        attempt: 1,
        decided_at: MicroTime(t(950)),
        instance: "p1/1".into(),
        result: Some("HTTP 204".into()),
    });
    assert_eq!(world.gate(one_fence_per_node), Gate::Admit, "its On answered ended it");
}

#[test]
fn a_failed_siblings_standing_release_is_waited_on_never_adopted_nor_fenced_again() {
    // An attested release, or a deletion interrupted after some pods: the fence Failed, its release
    // stands and its guard watches the machine.
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    let i = sibling(&mut world, 50, Phase::Failed);
    released_at_900(&mut world, i, crate::api::RemediationStrategy::ResourceDeletion);
    admitted_here(&mut world, i);
    assert_eq!(release_to_adopt(&world.inputs()), None, "only a fence that succeeded is stood on");
    assert!(waits(&world.gate(one_fence_per_node), Reason::NodeAlreadyBeingFenced));
}

#[test]
fn a_siblings_resource_deletion_release_is_adopted_while_its_record_says_it_stands() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    let i = sibling(&mut world, 50, Phase::Done);
    released_at_900(&mut world, i, crate::api::RemediationStrategy::ResourceDeletion);
    admitted_here(&mut world, i);
    let strategy = crate::api::RemediationStrategy::ResourceDeletion;
    let adopted = Adoptable { from: "w-9-sib-50".into(), released_at: t(900), strategy };
    assert_eq!(release_to_adopt(&world.inputs()), Some(adopted), "no taint: the record is the release");
    // A Node re-created under the same name is not the one the sibling released (R4).
    let admitted = world.node.clone();
    world.node.metadata.uid = Some("uid-node-w-9-new".into());
    assert_eq!(release_to_adopt(&world.inputs()), None, "another Node object");
    world.node = admitted;
    // The node reporting Ready ends the release (R1): nothing stands to adopt.
    world.node = node("w-9", Some("True"), &[]);
    assert_eq!(release_to_adopt(&world.inputs()), None);
    // Nor does one its own Reboot ended with an answered On.
    world.node = node("w-9", Some("Unknown"), &[]);
    let status = world.remediations[i].status.as_mut().unwrap();
    status.evidence.as_mut().unwrap().power_on =
        Some(crate::api::PowerOnEvidence { sent_at: Some(MicroTime(t(950))), ..Default::default() });
    assert_eq!(release_to_adopt(&world.inputs()), None);
}

#[test]
fn adoption_waits_while_the_node_s_lease_is_fresh_and_never_for_a_storm_limit() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    world.lease = LeaseSighting::Seen { age: StdDuration::from_secs(5) };
    assert!(matches!(adoption_waits(&world.inputs()), Some((Reason::NodeLeaseFresh, _))), "a renewing Lease is life");
    world.lease = LeaseSighting::Seen { age: StdDuration::from_secs(3600) };
    world.limits.max_concurrent = 0;
    assert_eq!(adoption_waits(&world.inputs()), None, "adoption takes no slot");
}

#[test]
fn a_remediation_this_leader_admitted_counts_as_admitted_while_its_store_still_shows_it_pending() {
    let mut world = World::new(node("w", Some("Unknown"), &[]));
    world.limits = StormLimits { max_concurrent: 1, ..LIMITS };
    // Admitted here a moment ago; the store read still shows it Pending.
    world.other("w2", 50, Phase::Pending, None);
    let admitted_here: BTreeMap<String, Timestamp> = [("uid-w2-r".to_owned(), t(999))].into();
    assert_eq!(world.gate(storm), Gate::Admit, "as the store shows it, no slot is taken");
    world.remediations = world.remediations.into_iter().map(|r| as_admitted(r, &admitted_here)).collect();
    assert!(matches!(world.gate(storm), Gate::Wait(Reason::Queued, m) if m.contains("w2-r")), "it holds the slot");
    // A later phase the store shows is the store's; so is a remediation this leader never admitted.
    let done = remediation("w3-r", "w3", 60, Phase::Done, None);
    assert_eq!(Phase::of(&as_admitted(done, &[("uid-w3-r".to_owned(), t(999))].into())), Phase::Done);
    let other = remediation("w4-r", "w4", 60, Phase::Pending, None);
    assert_eq!(Phase::of(&as_admitted(other, &admitted_here)), Phase::Pending);
}

#[test]
fn a_node_change_wakes_that_node_s_remediations_and_only_for_a_control_plane_node_every_pending_one() {
    let worker = node("w", Some("True"), &[]);
    let pending_elsewhere = remediation("r1", "other", 10, Phase::Pending, None);
    let of_worker = remediation("r2", "w", 10, Phase::ConfirmingOff, None);
    assert!(woken_by_node_change(&worker, &of_worker));
    assert!(!woken_by_node_change(&worker, &pending_elsewhere), "another worker's heartbeat changes no gate");
    let cp = control_plane("cp", "True");
    assert!(woken_by_node_change(&cp, &pending_elsewhere), "the quorum gate counts control-plane nodes");
    let fencing_elsewhere = remediation("r3", "other", 10, Phase::PoweringOff, None);
    assert!(!woken_by_node_change(&cp, &fencing_elsewhere), "past its gates");
}

#[test]
fn the_queue_moves_when_one_leaves_pending_or_a_power_slot_or_is_gone_and_not_on_status_writes() {
    use Phase::*;
    assert!(moves_the_queue(Some(Pending), Some(VerifyingIdentity)), "admitted: those behind move up");
    assert!(moves_the_queue(Some(WaitingForRelease), Some(Done)), "its slot frees");
    assert!(moves_the_queue(Some(PoweringOff), Some(Failed)));
    assert!(moves_the_queue(Some(Done), None), "being deleted");
    assert!(moves_the_queue(None, None), "gone (its deletion was already seen)");
    assert!(!moves_the_queue(Some(ConfirmingOff), Some(ConfirmingOff)), "a status write within a phase");
    assert!(!moves_the_queue(Some(VerifyingIdentity), Some(PoweringOff)), "still holds its slot");
    assert!(!moves_the_queue(None, Some(Pending)), "a new one is reconciled itself");
    assert!(!moves_the_queue(Some(Done), Some(Done)));
}

#[test]
fn a_queued_remediation_looks_again_when_the_window_frees_and_at_most_after_a_minute() {
    let mut world = World::new(node("w", Some("Unknown"), &[]));
    world.admissions = (0..5).map(|i| t(990 - 10 * i)).collect();
    let inputs = world.inputs();
    // The oldest of the five leaves the 600 s window at 950 + 600.
    assert_eq!(window_frees_at(&inputs), Some(t(1550)));
    assert_eq!(queued_recheck(&inputs), QUEUED_RECHECK);
    world.admissions = (0..5).map(|i| t(420 - i)).collect();
    assert_eq!(queued_recheck(&world.inputs()), StdDuration::from_secs(16));
    world.admissions.clear();
    assert_eq!(window_frees_at(&world.inputs()), None);
}

// L3: PDU levels only with action Off ------------------------------------------------------------------

#[test]
fn a_reboot_through_a_binding_with_pdu_levels_is_refused_before_any_bmc_request() {
    let mut world = World::new(node("n", Some("Unknown"), &[]));
    world.bindings[0].spec.pdu_levels = vec![
        serde_json::from_value(serde_json::json!({
            "outlets": [{"snmp": {"address": "pdu-1", "outlet": 3}, "credentialsSecretRef": {"name": "pdu"}}],
        }))
        .unwrap(),
    ];
    world.me.spec.action = crate::api::FenceAction::Reboot;
    assert_eq!(reason(&evaluate(&world.inputs())), Some(Reason::RebootWithPduLevels));
    world.me.spec.action = crate::api::FenceAction::Off;
    assert_eq!(evaluate(&world.inputs()), Gate::Admit);
}

mod queue_looks {
    use super::*;

    fn look(version: &str, fingerprint: u64, until: Option<u64>) -> QueueLook {
        QueueLook { resource_version: Some(version.into()), fingerprint, until: until.map(StdDuration::from_secs) }
    }

    const MONO: StdDuration = StdDuration::from_secs(100);

    #[test]
    fn a_queued_remediation_sleeps_through_a_look_that_would_see_what_its_last_look_saw() {
        let last = look("7", 42, None);
        assert_eq!(queued_look_skipped(Some(&last), Some("7"), 42, false, MONO), Some(QUEUED_RECHECK));
    }

    #[test]
    fn a_remediation_with_no_look_of_its_own_yet_looks() {
        assert_eq!(queued_look_skipped(None, Some("7"), 42, false, MONO), None);
    }

    #[test]
    fn a_wake_up_on_purpose_its_own_change_or_another_queue_in_the_stores_makes_it_look() {
        let last = look("7", 42, None);
        assert_eq!(queued_look_skipped(Some(&last), Some("7"), 42, true, MONO), None, "poked");
        assert_eq!(queued_look_skipped(Some(&last), Some("8"), 42, false, MONO), None, "its own object changed");
        assert_eq!(queued_look_skipped(Some(&last), Some("7"), 43, false, MONO), None, "the stores moved");
    }

    #[test]
    fn the_window_freeing_makes_it_look_and_until_then_it_sleeps_only_that_long() {
        let last = look("7", 42, Some(130));
        assert_eq!(queued_look_skipped(Some(&last), Some("7"), 42, false, MONO), Some(StdDuration::from_secs(30)));
        let at = StdDuration::from_secs(130);
        assert_eq!(queued_look_skipped(Some(&last), Some("7"), 42, false, at), None);
        // Nine minutes away: it sleeps a minute at a time (the fallback), and looks at the moment.
        let far = look("7", 42, Some(640));
        assert_eq!(queued_look_skipped(Some(&far), Some("7"), 42, false, MONO), Some(QUEUED_RECHECK));
        let at = StdDuration::from_secs(640);
        assert_eq!(queued_look_skipped(Some(&far), Some("7"), 42, false, at), None);
    }

    #[test]
    fn the_queue_fingerprint_changes_with_a_place_or_a_slot_and_not_with_a_fences_readings_or_a_bindings_status() {
        let me = remediation("me", "w-9", 50, Phase::Pending, Some(Reason::Queued));
        let older = remediation("a", "w-1", 10, Phase::Pending, Some(Reason::Queued));
        let running = remediation("b", "w-2", 20, Phase::ConfirmingOff, None);
        let bindings = vec![binding("w-1", "w-1", "https://10.0.0.1", None)];
        let all = vec![me.clone(), older.clone(), running.clone()];
        let base = queue_fingerprint(&me, &all, &bindings, Some(MONO));

        let mut read = running.clone();
        read.status.as_mut().unwrap().last_update_time = Some(Time(t(30)));
        read.metadata.resource_version = Some("99".into());
        let mut verified = bindings.clone();
        verified[0].status = Some(BmcBindingStatus { power_state: Some("On".into()), ..BmcBindingStatus::default() });
        let mut mine = me.clone();
        mine.metadata.resource_version = Some("5".into());
        assert_eq!(
            queue_fingerprint(&mine, &[mine.clone(), older.clone(), read], &verified, Some(MONO)),
            base,
            "a fence's readings, a binding's status and the remediation's own changes leave it"
        );

        let released = remediation("b", "w-2", 20, Phase::Done, None);
        assert_ne!(queue_fingerprint(&me, &[me.clone(), older.clone(), released], &bindings, Some(MONO)), base);
        let waiting = remediation("a", "w-1", 10, Phase::Pending, Some(Reason::NodeLeaseFresh));
        assert_ne!(queue_fingerprint(&me, &[me.clone(), waiting, running.clone()], &bindings, Some(MONO)), base);
        assert_ne!(queue_fingerprint(&me, &[me.clone(), running.clone()], &bindings, Some(MONO)), base, "one gone");
        let mut edited = bindings.clone();
        edited[0].metadata.generation = Some(2);
        assert_ne!(queue_fingerprint(&me, &all, &edited, Some(MONO)), base);
        assert_ne!(queue_fingerprint(&me, &all, &bindings, Some(MONO + MONO)), base, "the Lease changed");
    }
}

#[test]
fn only_a_pending_fence_whose_succeeded_reason_is_queued_counts_as_queued() {
    let status = |phase: Phase, reason: Reason| {
        let mut status = CoronerRemediationStatus { phase: Some(phase), ..CoronerRemediationStatus::default() };
        contract::record(&mut status.conditions, reason, "place 2 in the queue", t(0));
        status
    };
    assert!(queued(Some(&status(Phase::Pending, Reason::Queued))));
    assert!(!queued(Some(&status(Phase::Pending, Reason::NodeLeaseFresh))), "a gate's wait is no place in the queue");
    assert!(!queued(Some(&status(Phase::PoweringOff, Reason::Queued))), "admitted since: the reason is stale");
    assert!(!queued(None));
}

#[test]
fn a_final_refusal_wins_over_a_release_to_adopt() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    let i = sibling(&mut world, 50, Phase::Done);
    released_at_900(&mut world, i, crate::api::RemediationStrategy::ResourceDeletion);
    admitted_here(&mut world, i);
    let refused = Gate::Refuse(Reason::NodeNotFound, "gone".into());
    assert_eq!(
        verdict(refused, &world.inputs()),
        Admission::Refuse { reason: Reason::NodeNotFound, message: "gone".into() }
    );
}

#[test]
fn a_standing_release_is_adopted_whatever_a_storm_limit_says_unless_the_lease_holds_it() {
    let mut world = World::new(node("w-9", Some("Unknown"), &[]));
    let i = sibling(&mut world, 50, Phase::Done);
    released_at_900(&mut world, i, crate::api::RemediationStrategy::ResourceDeletion);
    admitted_here(&mut world, i);
    let queued = Gate::Wait(Reason::Queued, "the window is full".into());
    assert!(matches!(verdict(queued.clone(), &world.inputs()), Admission::Adopt(a) if a.from == "w-9-sib-50"));
    world.lease = LeaseSighting::Seen { age: StdDuration::from_secs(5) };
    assert!(matches!(
        verdict(queued, &world.inputs()),
        Admission::AdoptionWaits { reason: Reason::NodeLeaseFresh, .. }
    ));
}

#[test]
fn only_a_queued_wait_says_when_to_look_again() {
    let world = World::new(node("w", Some("Unknown"), &[]));
    let fresh = verdict(Gate::Wait(Reason::NodeLeaseFresh, "renewing".into()), &world.inputs());
    assert!(matches!(fresh, Admission::Wait { recheck: None, frees_at: None, .. }), "{fresh:?}");
    let queued = verdict(Gate::Wait(Reason::Queued, "full".into()), &world.inputs());
    assert!(matches!(queued, Admission::Wait { recheck: Some(_), .. }), "{queued:?}");
    assert_eq!(verdict(Gate::Admit, &world.inputs()), Admission::Admit);
}
