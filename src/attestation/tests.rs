//! The attestation's tests by concern, with the fixtures they share.

mod binding;
mod life;
mod look;
mod policy;
mod preconditions;
mod record;

use jiff::SignedDuration;
use k8s_openapi::{
    api::{
        admissionregistration::v1::{ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation},
        core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint},
    },
    apimachinery::pkg::apis::meta::v1::{Condition, ManagedFieldsEntry},
};

use super::*;
use crate::api::{CoronerAttestationSpec, CoronerRemediationSpec, Duration, NodeEvidence, Progress};

fn t(secs: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
}

const NODE_UID: &str = "node-uid-1";

fn attestation(created: i64) -> CoronerAttestation {
    let mut a = CoronerAttestation::new(
        "w1",
        CoronerAttestationSpec {
            node_name: "w1".into(),
            node_uid: NODE_UID.into(),
            reason: "PDU 4 lost power with the rack; I pulled the plugs of w1 at 10:02".into(),
            attested_by: "alice".into(),
            valid_for: Duration::from_secs(900),
            acknowledge: Vec::new(),
        },
    );
    a.metadata.uid = Some("att-uid".into());
    a.metadata.namespace = Some("coroner-system".into());
    a.metadata.creation_timestamp = Some(Time(t(created)));
    a
}

fn node(ready: &str) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some("w1".into());
    node.metadata.uid = Some(NODE_UID.into());
    node.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: ready.into(),
            ..NodeCondition::default()
        }]),
        ..NodeStatus::default()
    });
    node
}

fn succeeded(status: &str, reason: &str, at: i64) -> Condition {
    Condition {
        type_: contract::SUCCEEDED.into(),
        status: status.into(),
        reason: reason.into(),
        message: "m".into(),
        last_transition_time: Time(t(at)),
        observed_generation: None,
    }
}

/// w1's binding at admission: generation `generation`, last verified at generation 5 before then,
/// at the content it had at generation 5 (another generation is another spec: another content).
fn verified_binding(generation: i64) -> crate::api::BindingAtAdmission {
    crate::api::BindingAtAdmission {
        name: "w1".into(),
        generation,
        verified_at: Some(Time(t(-900))),
        verified_generation: Some(5),
        verified_content: Some("00000000000000c5".into()),
        content: Some(format!("00000000000000c{generation}")),
        verified_by_earlier_object: None,
    }
}

/// A remediation for w1 whose fence failed at `failed_at` with `reason`, the Lease then at `lease`.
fn failed(name: &str, reason: &str, failed_at: i64, lease: Option<i64>) -> CoronerRemediation {
    let mut r = CoronerRemediation::new(name, CoronerRemediationSpec::default());
    r.metadata.uid = Some(format!("uid-{name}"));
    r.metadata.creation_timestamp = Some(Time(t(-600)));
    r.metadata.annotations = Some([(contract::NODE_NAME_ANNOTATION.to_owned(), "w1".to_owned())].into());
    r.status = Some(CoronerRemediationStatus {
        phase: Some(Phase::Failed),
        conditions: vec![succeeded("False", reason, failed_at)],
        progress: Some(Progress {
            lease_renew_time_at_failure: Some(MicroTime(lease.map_or(Timestamp::UNIX_EPOCH, t))),
            ..Progress::default()
        }),
        evidence: Some(Evidence {
            node: Some(NodeEvidence {
                name: "w1".into(),
                uid: NODE_UID.into(),
                system_uuid: String::new(),
                boot_id: String::new(),
                ready: "Unknown".into(),
                lease_present: lease.is_some(),
                lease_renew_time: lease.map(|l| MicroTime(t(l))),
                admitted_at: MicroTime(t(-500)),
                binding: Some(verified_binding(5)),
            }),
            ..Evidence::default()
        }),
        ..CoronerRemediationStatus::default()
    });
    r
}

fn policy(validations: &[&str], changed: i64) -> ValidatingAdmissionPolicy {
    let mut p = ValidatingAdmissionPolicy::default();
    p.metadata.name = Some("coroner-attestation".into());
    p.metadata.creation_timestamp = Some(Time(t(changed)));
    p.spec = Some(ValidatingAdmissionPolicySpec {
        failure_policy: Some("Fail".into()),
        match_constraints: Some(MatchResources {
            resource_rules: Some(vec![NamedRuleWithOperations {
                api_groups: Some(vec!["coroner.dev".into()]),
                api_versions: Some(vec!["*".into()]),
                operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                resources: Some(vec!["coronerattestations".into()]),
                ..NamedRuleWithOperations::default()
            }]),
            ..MatchResources::default()
        }),
        validations: Some(
            validations.iter().map(|e| Validation { expression: (*e).into(), ..Validation::default() }).collect(),
        ),
        ..ValidatingAdmissionPolicySpec::default()
    });
    p
}

fn good_policy() -> ValidatingAdmissionPolicy {
    policy(&[CREATE_RULE, UPDATE_RULE], -3600)
}

fn binding(policy: &str, actions: &[&str], changed: i64) -> ValidatingAdmissionPolicyBinding {
    let mut b = ValidatingAdmissionPolicyBinding::default();
    b.metadata.name = Some(format!("{policy}-binding"));
    b.metadata.creation_timestamp = Some(Time(t(changed)));
    b.spec = Some(ValidatingAdmissionPolicyBindingSpec {
        policy_name: Some(policy.into()),
        validation_actions: Some(actions.iter().map(|a| (*a).to_owned()).collect()),
        ..ValidatingAdmissionPolicyBindingSpec::default()
    });
    b
}

fn good_binding() -> ValidatingAdmissionPolicyBinding {
    binding("coroner-attestation", &["Deny"], -3600)
}

// NotExpired -------------------------------------------------------------------------------------

fn plan_for(r: &CoronerRemediation) -> ReleasePlan {
    ReleasePlan {
        acknowledged: Vec::new(),
        node_name: "w1".into(),
        node_uid: NODE_UID.into(),
        boot_id: admitted_boot_id(r).to_owned(),
        remediation: r.name_any(),
        remediation_uid: r.uid().unwrap(),
        lease_baseline: lease_at_fence_end(r).unwrap(),
        power_action: first_power_action(r),
        boot_seen: boot_seen(r),
    }
}

// NodeIsTheAttestedOne / NodeUnreachable ---------------------------------------------------------------

fn with_taint(mut node: Node, key: &str, effect: &str) -> Node {
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint { key: key.into(), effect: effect.into(), ..Taint::default() }]),
        ..NodeSpec::default()
    });
    node
}

fn reason(verdict: &Verdict) -> AttestationReason {
    match verdict {
        Verdict::Wait(r) | Verdict::Refuse(r) => r.reason,
        Verdict::Release(_) | Verdict::Look(_) => panic!("released: {verdict:?}"),
    }
}

fn no_answer(at: Timestamp) -> AttestationLook {
    AttestationLook {
        attestation: "w1".into(),
        attestation_uid: "att-uid".into(),
        requested_at: MicroTime(at),
        may_prove_again: true,
        nhc_timed_out: None,
        looked_at: Some(MicroTime(at)),
        found: Some(LookFound::NoAnswer),
        message: Some("BMC https://10.0.0.1 timed out".into()),
    }
}

fn look_of(world: &World) -> Option<AttestationLook> {
    world.remediations[0].status.as_ref()?.evidence.as_ref()?.attestation_look.clone()
}

fn set_look(world: &mut World, look: Option<AttestationLook>) {
    world.remediations[0].status.as_mut().unwrap().evidence.get_or_insert_with(Default::default).attestation_look =
        look;
}

// A4: a device that answers again ------------------------------------------------------------------

fn control_plane(name: &str, ready: &str) -> Node {
    let mut n = node(ready);
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some([("node-role.kubernetes.io/control-plane".to_owned(), String::new())].into());
    n
}

fn last_read(world: &mut World, power: &str) {
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.last_power_state = Some(power.into());
}

/// `world` with the failed fence's Lease renewed at t(-200), after its admission at t(-300).
fn renewed_while_the_fence_ran() -> World {
    let mut world = World::dead_node();
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.lease_renew_time_at_failure = Some(MicroTime(t(-200)));
    progress.lease_change_seen_at = Some(MicroTime(t(-200)));
    world.lease = Some(Some(t(-200)));
    world
}

fn acknowledging(world: &mut World, reason: AcknowledgedReason, at: i64) {
    world.attestation.spec.acknowledge.push(Acknowledgement { reason, at: Time(t(at)) });
}

fn binding_at_admission(world: &mut World, binding: Option<crate::api::BindingAtAdmission>) {
    let evidence = world.remediations[0].status.as_mut().unwrap().evidence.as_mut().unwrap();
    evidence.node.as_mut().unwrap().binding = binding;
}

struct World {
    attestation: CoronerAttestation,
    policies: Vec<ValidatingAdmissionPolicy>,
    bindings: Vec<ValidatingAdmissionPolicyBinding>,
    remediations: Vec<CoronerRemediation>,
    node: Option<Node>,
    lease: Option<Option<Timestamp>>,
    sighting: LeaseSighting,
    nodes: Vec<Node>,
    remembered: std::collections::BTreeMap<String, String>,
    /// A4: the failed fence took this attestation's look just now and its device did not answer
    /// (unless the test sets a look of its own).
    looked: bool,
}

impl World {
    fn dead_node() -> Self {
        Self {
            attestation: attestation(0),
            policies: vec![good_policy()],
            bindings: vec![good_binding()],
            remediations: vec![failed("w1", "BmcUnreachable", -60, Some(-300))],
            node: Some(node("Unknown")),
            lease: Some(Some(t(-300))),
            sighting: LeaseSighting::Seen { age: StdDuration::from_secs(290) },
            nodes: vec![node("Unknown")],
            remembered: Default::default(),
            looked: true,
        }
    }

    /// The remediations, each with this attestation's look taken at `now` (no answer) unless it has
    /// a look of its own.
    fn looked_at(&self, now: Timestamp) -> Vec<CoronerRemediation> {
        let mut remediations = self.remediations.clone();
        for r in remediations.iter_mut().filter(|_| self.looked) {
            let Some(status) = r.status.as_mut() else { continue };
            let evidence = status.evidence.get_or_insert_with(Default::default);
            evidence.attestation_look.get_or_insert_with(|| no_answer(now));
        }
        remediations
    }

    fn evaluate(&self, now: Timestamp) -> (Verdict, Vec<(Precondition, &'static str)>) {
        let remediations = self.looked_at(now);
        let inputs = Inputs {
            attestation: &self.attestation,
            now,
            policies: Some((&self.policies, &self.bindings)),
            remediations: &remediations,
            node: self.node.as_ref(),
            lease: self.lease,
            sighting: Some(self.sighting),
            cluster: Some(ClusterView {
                namespace: "coroner-system",
                nodes: &self.nodes,
                etcd_pods: &[],
                bmc_bindings: &[],
                remembered_power: &self.remembered,
            }),
        };
        let evaluation = evaluate(&inputs);
        let summary = evaluation
            .checks
            .iter()
            .map(|c| {
                let what = match &c.outcome {
                    Outcome::Passed(_) => "passed",
                    Outcome::Refused(r) if r.is_final() => "refused",
                    Outcome::Refused(_) => "waiting",
                    Outcome::NotChecked(_) => "not checked",
                };
                (c.precondition, what)
            })
            .collect();
        (evaluation.verdict, summary)
    }
}
