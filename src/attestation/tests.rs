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

#[test]
fn an_attestation_younger_than_valid_for_is_not_expired() {
    assert!(not_expired(t(0), StdDuration::from_secs(900), t(899)).is_ok());
}

#[test]
fn an_attestation_as_old_as_valid_for_has_expired() {
    let refusal = not_expired(t(0), StdDuration::from_secs(900), t(900)).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::AttestationExpired);
    assert!(refusal.is_final());
}

// PolicyInForce ----------------------------------------------------------------------------------

#[test]
fn the_shipped_policy_and_a_deny_binding_make_the_attester_unforgeable() {
    assert!(policy_in_force(&[good_policy()], &[good_binding()], t(0)).is_ok());
}

#[test]
fn without_any_policy_attestations_are_ignored() {
    let refusal = policy_in_force(&[], &[], t(0)).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::AttestationPolicyMissing);
    assert!(!refusal.is_final(), "installing the policy later lets a new attestation through");
}

#[test]
fn a_policy_without_a_binding_is_not_in_force() {
    let refusal = policy_in_force(&[good_policy()], &[], t(0)).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::AttestationPolicyMissing);
    assert!(refusal.message.contains("has no binding"), "{refusal}");
}

#[test]
fn a_binding_that_only_warns_or_audits_is_not_in_force() {
    for actions in [&["Warn"][..], &["Audit"], &["Warn", "Audit"]] {
        let bound = binding("coroner-attestation", actions, -3600);
        let refusal = policy_in_force(&[good_policy()], &[bound], t(0)).unwrap_err();
        assert!(refusal.message.contains("lack Deny"), "{actions:?}: {refusal}");
    }
}

#[test]
fn a_policy_missing_either_rule_is_not_in_force() {
    for rules in [&[CREATE_RULE][..], &[UPDATE_RULE], &["true"]] {
        let refusal = policy_in_force(&[policy(rules, -3600)], &[good_binding()], t(0)).unwrap_err();
        assert_eq!(refusal.reason, AttestationReason::AttestationPolicyMissing, "{rules:?}");
    }
}

#[test]
fn the_rules_are_compared_without_whitespace_but_with_their_string_literals() {
    let spaced = "request.operation != 'CREATE'\n  || object.spec.attestedBy ==request.userInfo.username";
    assert!(policy_in_force(&[policy(&[spaced, UPDATE_RULE], -3600)], &[good_binding()], t(0)).is_ok());
    let altered = "request.operation != 'CRE ATE' || object.spec.attestedBy == request.userInfo.username";
    assert!(policy_in_force(&[policy(&[altered, UPDATE_RULE], -3600)], &[good_binding()], t(0)).is_err());
}

#[test]
fn a_policy_that_fails_open_or_can_be_skipped_is_not_in_force() {
    let mut ignore = good_policy();
    ignore.spec.as_mut().unwrap().failure_policy = Some("Ignore".into());
    let mut conditional = good_policy();
    conditional.spec.as_mut().unwrap().match_conditions =
        Some(vec![k8s_openapi::api::admissionregistration::v1::MatchCondition {
            name: "sometimes".into(),
            expression: "false".into(),
        }]);
    let mut create_only = good_policy();
    create_only.spec.as_mut().unwrap().match_constraints.as_mut().unwrap().resource_rules.as_mut().unwrap()[0]
        .operations = Some(vec!["CREATE".into()]);
    let mut one_namespace = good_binding();
    one_namespace.spec.as_mut().unwrap().match_resources = Some(MatchResources {
        namespace_selector: Some(LabelSelector {
            match_labels: Some([("team".to_owned(), "x".to_owned())].into()),
            ..LabelSelector::default()
        }),
        ..MatchResources::default()
    });
    for (what, policies, bindings) in [
        ("failurePolicy Ignore", vec![ignore], vec![good_binding()]),
        ("matchConditions", vec![conditional], vec![good_binding()]),
        ("CREATE only", vec![create_only], vec![good_binding()]),
        ("a narrowed binding", vec![good_policy()], vec![one_namespace]),
    ] {
        let refusal = policy_in_force(&policies, &bindings, t(0)).unwrap_err();
        assert_eq!(refusal.reason, AttestationReason::AttestationPolicyMissing, "{what}: {refusal}");
    }
}

#[test]
fn an_attestation_created_before_the_policy_settled_is_refused_for_good() {
    let recent = policy(&[CREATE_RULE, UPDATE_RULE], -3);
    let refusal = policy_in_force(&[recent], &[good_binding()], t(0)).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::AttestationPredatesPolicy);
    assert!(refusal.is_final());
    let late_binding = binding("coroner-attestation", &["Deny"], 10);
    assert!(policy_in_force(&[good_policy()], &[late_binding], t(0)).is_err());
}

#[test]
fn a_later_write_to_the_policy_counts_as_a_change_but_its_status_does_not() {
    let mut edited = good_policy();
    edited.metadata.managed_fields = Some(vec![
        ManagedFieldsEntry { time: Some(Time(t(-2))), ..ManagedFieldsEntry::default() },
        ManagedFieldsEntry {
            time: Some(Time(t(30))),
            subresource: Some("status".into()),
            ..ManagedFieldsEntry::default()
        },
    ]);
    assert_eq!(
        policy_in_force(&[edited.clone()], &[good_binding()], t(0)).unwrap_err().reason,
        AttestationReason::AttestationPredatesPolicy
    );
    assert!(policy_in_force(&[edited], &[good_binding()], t(10)).is_ok(), "the status write at +30s is ignored");
}

// FenceEndedWithoutProof ---------------------------------------------------------------------------

#[test]
fn a_fence_that_failed_without_proof_is_the_one_the_attestation_completes() {
    let remediations = [failed("w1", "BmcUnreachable", -60, Some(-300))];
    assert_eq!(fence_ended_without_proof(&attestation(0), &remediations).unwrap().name_any(), "w1");
}

#[test]
fn a_fence_timed_out_by_nhc_counts_as_ended_without_proof() {
    let mut timed_out = failed("w1", "TimedOutByNHC", -60, None);
    timed_out.metadata.annotations.as_mut().unwrap().insert(contract::TIMED_OUT_ANNOTATION.into(), "x".into());
    assert!(fence_ended_without_proof(&attestation(0), &[timed_out]).is_ok());
}

#[test]
fn the_latest_failed_fence_is_chosen() {
    let remediations =
        [failed("w1", "BmcUnreachable", -300, Some(-400)), failed("w1-x2", "BmcUnreachable", -60, Some(-400))];
    assert_eq!(fence_ended_without_proof(&attestation(0), &remediations).unwrap().name_any(), "w1-x2");
}

#[test]
fn a_running_fence_makes_the_attestation_wait() {
    let mut running = failed("w1-x2", "BmcUnreachable", -60, None);
    running.status.as_mut().unwrap().phase = Some(Phase::VerifyingIdentity);
    let refusal =
        fence_ended_without_proof(&attestation(0), &[failed("w1", "BmcUnreachable", -300, None), running]).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::FenceInProgress);
    assert!(!refusal.is_final());
}

#[test]
fn no_failed_fence_waits_and_so_does_a_fence_for_another_node() {
    let mut other = failed("w2", "BmcUnreachable", -60, None);
    other.metadata.annotations = Some([(contract::NODE_NAME_ANNOTATION.to_owned(), "w2".to_owned())].into());
    let refusal = fence_ended_without_proof(&attestation(0), &[other]).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::NoFailedFence);
    assert!(!refusal.is_final());
}

#[test]
fn a_fence_of_an_earlier_node_object_of_the_same_name_does_not_count() {
    let mut earlier = failed("w1", "BmcUnreachable", -60, None);
    earlier.status.as_mut().unwrap().evidence.as_mut().unwrap().node.as_mut().unwrap().uid = "old-uid".into();
    assert_eq!(
        fence_ended_without_proof(&attestation(0), &[earlier]).unwrap_err().reason,
        AttestationReason::NoFailedFence
    );
}

#[test]
fn a_fence_that_ended_on_evidence_of_life_refuses_for_good() {
    for reason in ["NodeAliveAfterPowerOff", "NodeNotUnreachable", "OutletMappingWrong"] {
        let remediations = [failed("w1", reason, -300, None), failed("w1-x2", "BmcUnreachable", -60, None)];
        let refusal = fence_ended_without_proof(&attestation(0), &remediations).unwrap_err();
        assert_eq!(refusal.reason, AttestationReason::FenceSawLife, "{reason}");
        assert!(refusal.is_final());
    }
}

#[test]
fn a_node_released_already_is_not_released_again() {
    let mut released = failed("w1", "BmcUnreachable", -60, None);
    let other = attestation(-100);
    let plan = plan_for(&released);
    released.status = Some(record_release(
        released.status.as_ref().unwrap(),
        &{
            let mut o = other;
            o.metadata.uid = Some("another-attestation".into());
            o
        },
        &plan,
        t(-50),
    ));
    let refusal = fence_ended_without_proof(&attestation(0), &[released.clone()]).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::AlreadyReleased);
    assert!(refusal.is_final());
}

#[test]
fn an_attestation_resumes_its_own_release_after_a_restart() {
    let mut ours = failed("w1", "BmcUnreachable", -60, None);
    let plan = plan_for(&ours);
    ours.status = Some(record_release(ours.status.as_ref().unwrap(), &attestation(0), &plan, t(1)));
    assert_eq!(fence_ended_without_proof(&attestation(0), &[ours]).unwrap().name_any(), "w1");
}

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

#[test]
fn the_node_must_exist_and_have_the_attested_uid() {
    assert!(node_is_the_attested_one(Some(&node("Unknown")), "w1", NODE_UID).is_ok());
    assert_eq!(node_is_the_attested_one(None, "w1", NODE_UID).unwrap_err().reason, AttestationReason::NodeNotFound);
    let refusal = node_is_the_attested_one(Some(&node("Unknown")), "w1", "another-uid").unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::NodeUidMismatch);
    assert!(refusal.is_final());
}

#[test]
fn only_a_ready_unknown_node_is_unreachable_never_false_or_true() {
    assert!(node_unreachable(&node("Unknown")).is_ok());
    for ready in ["True", "False"] {
        let refusal = node_unreachable(&node(ready)).unwrap_err();
        assert_eq!(refusal.reason, AttestationReason::NodeNotUnreachable, "{ready}");
        assert!(refusal.is_final(), "a node that showed life voids the attestation");
    }
}

// LeaseUnchangedSinceFence / LeaseStale ---------------------------------------------------------------

#[test]
fn an_unchanged_lease_passes() {
    assert!(lease_unchanged_since_fence(Some(t(-300)), Some(Some(t(-300)))).is_ok());
    assert!(lease_unchanged_since_fence(Some(Timestamp::UNIX_EPOCH), None).is_ok(), "no Lease then, none now");
}

#[test]
fn a_renewed_created_or_deleted_lease_refuses_for_good() {
    for (then, now) in [
        (Some(t(-300)), Some(Some(t(-1)))),
        (Some(t(-300)), Some(Some(t(-400)))),
        (Some(Timestamp::UNIX_EPOCH), Some(Some(t(-1)))),
        (Some(t(-300)), None),
    ] {
        let refusal = lease_unchanged_since_fence(then, now).unwrap_err();
        assert_eq!(refusal.reason, AttestationReason::LeaseChangedSinceFence, "{then:?} → {now:?}");
        assert!(refusal.is_final(), "a renewing Lease is evidence of life: no override");
    }
}

#[test]
fn a_fence_that_recorded_no_lease_cannot_be_attested() {
    let refusal = lease_unchanged_since_fence(None, Some(Some(t(0)))).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::LeaseNotRecorded);
}

#[test]
fn without_a_failure_record_the_lease_at_admission_is_the_baseline() {
    let mut r = failed("w1", "TimedOutByNHC", -60, Some(-300));
    r.status.as_mut().unwrap().progress = None;
    assert_eq!(lease_at_fence_end(&r), Some(t(-300)));
    r.status.as_mut().unwrap().evidence = None;
    assert_eq!(lease_at_fence_end(&r), None);
}

#[test]
fn a_lease_coroner_saw_renewed_lately_makes_the_attestation_wait() {
    let fresh =
        lease_stale(LeaseSighting::Seen { age: StdDuration::from_secs(10) }, StdDuration::from_secs(60)).unwrap_err();
    assert_eq!(fresh.reason, AttestationReason::NodeLeaseFresh);
    assert!(!fresh.is_final());
    assert!(lease_stale(LeaseSighting::Seen { age: StdDuration::from_secs(60) }, StdDuration::from_secs(60)).is_ok());
}

// NoForeignOutOfServiceTaint ------------------------------------------------------------------------------

fn with_taint(mut node: Node, key: &str, effect: &str) -> Node {
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint { key: key.into(), effect: effect.into(), ..Taint::default() }]),
        ..NodeSpec::default()
    });
    node
}

#[test]
fn an_out_of_service_taint_someone_else_added_refuses_whatever_its_effect() {
    for effect in ["NoExecute", "NoSchedule"] {
        let tainted = with_taint(node("Unknown"), "node.kubernetes.io/out-of-service", effect);
        let refusal = no_foreign_out_of_service_taint(&tainted, "uid-w1").unwrap_err();
        assert_eq!(refusal.reason, AttestationReason::OutOfServiceTaintPresent, "{effect}");
    }
    let ours = taints::with_taint(&node("Unknown"), CoronerTaint::OutOfService, "uid-w1", t(0)).unwrap();
    assert!(no_foreign_out_of_service_taint(&ours, "uid-w1").is_ok());
    assert!(no_foreign_out_of_service_taint(&node("Unknown"), "uid-w1").is_ok());
}

// The evaluation ---------------------------------------------------------------------------------------

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

#[test]
fn an_attestation_that_passes_everything_else_first_has_the_fence_look_through_its_device() {
    let mut world = World::dead_node();
    world.looked = false;
    let (verdict, checks) = world.evaluate(t(5));
    assert!(checks.contains(&(Precondition::DeviceLooked, "waiting")), "{checks:?}");
    let Verdict::Look(plan) = verdict else { panic!("{verdict:?}") };
    let asked = look_asked(&world.remediations[0], &world.attestation, &plan, t(5)).expect("asked");
    let look = asked.evidence.unwrap().attestation_look.unwrap();
    assert_eq!((look.attestation_uid.as_str(), look.looked_at.clone(), look.may_prove_again), ("att-uid", None, true));
    // Asked once: while it is pending, nothing more is written.
    set_look(&mut world, Some(look));
    assert_eq!(look_asked(&world.remediations[0], &world.attestation, &plan, t(6)), None);
    assert!(matches!(world.evaluate(t(6)).0, Verdict::Look(_)), "still waiting for it");
}

#[test]
fn an_attestation_that_waits_on_anything_else_asks_for_no_look() {
    let mut world = World::dead_node();
    world.looked = false;
    world.sighting = LeaseSighting::Seen { age: StdDuration::from_secs(1) };
    assert_eq!(reason(&world.evaluate(t(5)).0), AttestationReason::NodeLeaseFresh);
}

#[test]
fn a_look_without_an_answer_stands_for_the_fences_lease_freshness_only() {
    let mut world = World::dead_node();
    set_look(&mut world, Some(no_answer(t(0))));
    assert!(matches!(world.evaluate(t(5)).0, Verdict::Release(_)));
    let freshness = admitted_spec(&world.remediations[0]).lease_freshness.get().as_secs() as i64;
    let Verdict::Look(plan) = world.evaluate(t(freshness + 1)).0 else { panic!("an old look is asked again") };
    let asked = look_asked(&world.remediations[0], &world.attestation, &plan, t(freshness + 1)).expect("asked again");
    assert_eq!(asked.evidence.unwrap().attestation_look.unwrap().looked_at, None);
}

#[test]
fn another_attestations_look_counts_for_none_but_its_own() {
    let mut world = World::dead_node();
    set_look(&mut world, Some(AttestationLook { attestation_uid: "earlier".into(), ..no_answer(t(0)) }));
    assert!(matches!(world.evaluate(t(1)).0, Verdict::Look(_)));
}

#[test]
fn an_acknowledging_attestation_asks_for_a_look_that_may_not_make_the_fence_prove_again() {
    let mut world = World::dead_node();
    world.looked = false;
    let Verdict::Look(plan) = world.evaluate(t(5)).0 else { panic!() };
    let plan = ReleasePlan {
        acknowledged: vec![Acknowledgement { reason: AcknowledgedReason::FenceSawLife, at: Time(t(-200)) }],
        ..plan
    };
    let asked = look_asked(&world.remediations[0], &world.attestation, &plan, t(5)).unwrap();
    assert!(!asked.evidence.unwrap().attestation_look.unwrap().may_prove_again);
}

#[test]
fn the_look_records_nhcs_timeout_as_it_stands_when_asked() {
    let mut world = World::dead_node();
    world.looked = false;
    world.remediations[0].metadata.annotations =
        Some([(contract::TIMED_OUT_ANNOTATION.to_owned(), "2026-12-01T10:00:00Z".to_owned())].into());
    let Verdict::Look(plan) = world.evaluate(t(5)).0 else { panic!() };
    let asked = look_asked(&world.remediations[0], &world.attestation, &plan, t(5)).unwrap();
    assert_eq!(
        asked.evidence.unwrap().attestation_look.unwrap().nhc_timed_out.as_deref(),
        Some("2026-12-01T10:00:00Z")
    );
}

#[test]
fn a_look_that_found_the_machine_supersedes_the_attestation_for_good() {
    let mut world = World::dead_node();
    let proving = AttestationLook { found: Some(LookFound::ProvingAgain), ..no_answer(t(0)) };
    set_look(&mut world, Some(proving.clone()));
    // Reopened (the write that names this attestation), and before the attestation's own write.
    world.remediations[0].status.as_mut().unwrap().phase = Some(Phase::PoweringOff);
    let (verdict, _) = world.evaluate(t(1));
    assert_eq!(reason(&verdict), AttestationReason::Superseded);
    assert!(matches!(verdict, Verdict::Refuse(_)), "final");
    // Failed again: still superseded, never released on.
    world.remediations[0].status.as_mut().unwrap().phase = Some(Phase::Failed);
    assert_eq!(reason(&world.evaluate(t(1)).0), AttestationReason::Superseded);
    assert_eq!(look_of(&world).unwrap().found, Some(LookFound::ProvingAgain));
}

#[test]
fn after_a_proof_taken_again_failed_only_the_fences_own_proof_releases() {
    let mut world = World::dead_node();
    let earlier = AttestationLook {
        attestation: "w1-older".into(),
        attestation_uid: "older".into(),
        found: Some(LookFound::ProvingAgain),
        ..no_answer(t(0))
    };
    set_look(&mut world, Some(earlier));
    let (verdict, _) = world.evaluate(t(1));
    assert_eq!(reason(&verdict), AttestationReason::ProvenAgain);
    assert!(matches!(verdict, Verdict::Refuse(_)), "final");
    let plan = plan_of(&world.attestation, &world.remediations[0]).unwrap();
    assert_eq!(look_asked(&world.remediations[0], &world.attestation, &plan, t(1)), None, "no second look");
}

#[test]
fn no_look_is_asked_of_a_fence_that_released_or_still_runs() {
    let world = World::dead_node();
    let plan = plan_of(&world.attestation, &world.remediations[0]).unwrap();
    let mut running = world.remediations[0].clone();
    running.status.as_mut().unwrap().phase = Some(Phase::PoweringOff);
    assert_eq!(look_asked(&running, &world.attestation, &plan, t(1)), None);
    let mut begun = world.remediations[0].clone();
    begun.status.as_mut().unwrap().progress.get_or_insert_with(Default::default).release_begun =
        world.remediations[0].status.as_ref().unwrap().evidence.as_ref().and_then(|e| e.release.clone()).or(Some(
            crate::api::ReleaseEvidence {
                kind: crate::api::ReleaseKind::BmcProof,
                release_id: None,
                attestation: None,
                adopted_from: None,
                strategy: Default::default(),
                node_ready: "Unknown".into(),
                lease_renew_time: None,
                released_at: MicroTime(t(0)),
                taint_owned: false,
                taint_removed_at: None,
                pods_deleted: None,
                release_timed_out: false,
            },
        ));
    assert_eq!(look_asked(&begun, &world.attestation, &plan, t(1)), None);
}

#[test]
fn a_dead_node_whose_fence_failed_is_released_when_every_precondition_holds() {
    let (verdict, checks) = World::dead_node().evaluate(t(5));
    assert_eq!(checks.len(), Precondition::ALL.len());
    assert!(checks.iter().all(|(_, what)| *what == "passed"), "{checks:?}");
    let Verdict::Release(plan) = verdict else { panic!("{verdict:?}") };
    assert_eq!(
        plan,
        ReleasePlan {
            acknowledged: Vec::new(),
            node_name: "w1".into(),
            node_uid: NODE_UID.into(),
            boot_id: String::new(),
            remediation: "w1".into(),
            remediation_uid: "uid-w1".into(),
            lease_baseline: t(-300),
            power_action: first_power_action(&World::dead_node().remediations[0]),
            boot_seen: None,
        }
    );
}

#[test]
fn a_stale_lease_alone_releases_nothing() {
    // The Lease is stale and unchanged, the node Unknown, but no fence of it ever failed.
    let mut world = World::dead_node();
    world.remediations.clear();
    let (verdict, _) = world.evaluate(t(5));
    assert!(!matches!(verdict, Verdict::Release(_)), "{verdict:?}");
    // And without a person's attestation nothing is evaluated at all: only attestations release.
}

#[test]
fn a_renewing_lease_refuses_even_while_everything_else_holds() {
    let mut world = World::dead_node();
    world.lease = Some(Some(t(4)));
    world.sighting = LeaseSighting::Seen { age: StdDuration::ZERO };
    let (verdict, checks) = world.evaluate(t(5));
    assert_eq!(reason(&verdict), AttestationReason::LeaseChangedSinceFence);
    assert!(matches!(verdict, Verdict::Refuse(_)), "final before the waiting NodeLeaseFresh");
    assert!(checks.contains(&(Precondition::LeaseStale, "waiting")));
}

#[test]
fn a_final_refusal_wins_over_an_earlier_waiting_one() {
    let mut world = World::dead_node();
    world.policies.clear();
    world.node = Some(node("True"));
    let (verdict, _) = world.evaluate(t(5));
    assert_eq!(reason(&verdict), AttestationReason::NodeNotUnreachable);
}

#[test]
fn a_missing_policy_makes_an_otherwise_valid_attestation_wait() {
    let mut world = World::dead_node();
    world.bindings.clear();
    let (verdict, _) = world.evaluate(t(5));
    assert!(
        matches!(&verdict, Verdict::Wait(r) if r.reason == AttestationReason::AttestationPolicyMissing),
        "{verdict:?}"
    );
}

#[test]
fn an_expired_attestation_is_refused_whatever_else_holds() {
    let (verdict, _) = World::dead_node().evaluate(t(900));
    assert_eq!(reason(&verdict), AttestationReason::AttestationExpired);
}

#[test]
fn an_excluded_node_is_refused() {
    let mut world = World::dead_node();
    world.node.as_mut().unwrap().metadata.labels =
        Some([(contract::EXCLUDE_LABEL.to_owned(), "true".to_owned())].into());
    let (verdict, _) = world.evaluate(t(5));
    assert_eq!(reason(&verdict), AttestationReason::NodeExcluded);
}

fn control_plane(name: &str, ready: &str) -> Node {
    let mut n = node(ready);
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some([("node-role.kubernetes.io/control-plane".to_owned(), String::new())].into());
    n
}

#[test]
fn a_control_plane_node_is_released_only_with_quorum_and_never_under_control_plane_never() {
    let mut world = World::dead_node();
    let target = {
        let mut n = control_plane("w1", "Unknown");
        n.metadata.uid = Some(NODE_UID.into());
        n
    };
    world.node = Some(target.clone());
    world.nodes = vec![target.clone(), control_plane("cp-2", "True"), control_plane("cp-3", "True")];
    assert!(matches!(world.evaluate(t(5)).0, Verdict::Release(_)));
    world.nodes[2] = control_plane("cp-3", "Unknown");
    let (verdict, _) = world.evaluate(t(5));
    assert_eq!(reason(&verdict), AttestationReason::ControlPlaneQuorumGuard);
    assert!(matches!(verdict, Verdict::Wait(_)));
    world.remediations[0].spec.control_plane = crate::api::ControlPlanePolicy::Never;
    assert_eq!(reason(&world.evaluate(t(5)).0), AttestationReason::ControlPlaneNever);
}

#[test]
fn the_preconditions_judge_the_failed_fence_s_template_as_admitted_not_as_edited_since() {
    let mut world = World::dead_node();
    let admitted = world.remediations[0].spec.clone();
    world.remediations[0].status.as_mut().unwrap().admitted_spec = Some(admitted);
    // Edited after admission to ask for an hour of Lease silence: not judged.
    world.remediations[0].spec.lease_freshness = crate::api::Duration::from_secs(3600);
    assert!(matches!(world.evaluate(t(5)).0, Verdict::Release(_)), "the template as admitted");
}

#[test]
fn the_lease_read_again_after_the_release_takes_the_taint_back_when_it_changed() {
    let plan = plan_for(&failed("w1", "BmcUnreachable", -60, Some(-300)));
    assert!(lease_held_after_release(&plan, Some(Some(t(-300)))).is_ok());
    let refusal = lease_held_after_release(&plan, Some(Some(t(2)))).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::LeaseChangedSinceFence);
    assert!(refusal.message.ends_with("the out-of-service taint was taken back"), "{}", refusal.message);
}

#[test]
fn the_preflight_without_coroner_s_view_lists_what_it_could_not_check() {
    let world = World::dead_node();
    let inputs = Inputs {
        attestation: &world.attestation,
        now: t(5),
        policies: None,
        remediations: &world.remediations,
        node: world.node.as_ref(),
        lease: world.lease,
        sighting: None,
        cluster: None,
    };
    let evaluation = evaluate(&inputs);
    let unchecked: Vec<_> = evaluation
        .checks
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::NotChecked(_)))
        .map(|c| c.precondition)
        .collect();
    assert_eq!(
        unchecked,
        [
            Precondition::PolicyInForce,
            Precondition::LeaseStale,
            Precondition::ControlPlaneQuorum,
            Precondition::DeviceLooked
        ]
    );
    assert!(matches!(evaluation.verdict, Verdict::Release(_)), "nothing refused what it could see");
}

// The re-check in the Node update --------------------------------------------------------------------------

#[test]
fn the_node_update_rechecks_the_node_and_its_lease() {
    let plan = plan_for(&failed("w1", "BmcUnreachable", -60, Some(-300)));
    assert_eq!(recheck_node(&plan, Some(&node("Unknown")), Some(Some(t(-300)))), Ok(()));
    let cases = [
        (None, Some(Some(t(-300))), AttestationReason::NodeNotFound),
        (Some(node("True")), Some(Some(t(-300))), AttestationReason::NodeNotUnreachable),
        (Some(node("Unknown")), Some(Some(t(1))), AttestationReason::LeaseChangedSinceFence),
        (
            Some(with_taint(node("Unknown"), "node.kubernetes.io/out-of-service", "NoExecute")),
            Some(Some(t(-300))),
            AttestationReason::OutOfServiceTaintPresent,
        ),
    ];
    for (node, lease, expected) in cases {
        assert_eq!(recheck_node(&plan, node.as_ref(), lease).unwrap_err().reason, expected);
    }
}

// Records ---------------------------------------------------------------------------------------------------

#[test]
fn the_remediation_records_the_attestation_verbatim_and_succeeded_stays_false() {
    let remediation = failed("w1", "BmcUnreachable", -60, Some(-300));
    let mut attestation = attestation(0);
    attestation.spec.reason = "naïve \"quotes\"\nsecond line — kept".into();
    let status = record_release(remediation.status.as_ref().unwrap(), &attestation, &plan_for(&remediation), t(1));
    let release = status.evidence.as_ref().unwrap().release.as_ref().unwrap();
    assert_eq!(release.kind, ReleaseKind::OperatorAttested);
    let record = release.attestation.as_ref().unwrap();
    assert_eq!((record.reason.as_str(), record.attested_by.as_str()), (attestation.spec.reason.as_str(), "alice"));
    assert_eq!(record.state, AttestedReleaseState::Releasing);
    assert!(release.taint_owned, "the remediation wants (and its finalizer removes) the taint");
    assert!(!crate::fence::out_of_service_taint_ends(&status));
    assert_eq!(conditions::status_of(&status.conditions, contract::SUCCEEDED), Some("False"));

    let released = AttestedRelease {
        remediation: "w1".into(),
        remediation_uid: "uid-w1".into(),
        node_uid: NODE_UID.into(),
        taint_key: "node.kubernetes.io/out-of-service".into(),
        taint_value: "nodeshutdown".into(),
        taint_effect: "NoExecute".into(),
        taint_time_added: Time(t(2)),
        lease_renew_time: Some(MicroTime(t(-300))),
        released_at: MicroTime(t(2)),
    };
    let mut status = status;
    let lever = contract::final_message(contract::Reason::BmcUnreachable, "BMC unreachable");
    status.conditions.iter_mut().for_each(|c| c.message.clone_from(&lever));
    let confirmed = confirm_release(&status, &released);
    let release = confirmed.evidence.as_ref().unwrap().release.as_ref().unwrap();
    assert_eq!(release.attestation.as_ref().unwrap().state, AttestedReleaseState::Released);
    assert_eq!(release.released_at, MicroTime(t(2)));
    // A3: it says it was released by attestation, Succeeded stays False, and no retry is asked for.
    let said = conditions::find(&confirmed.conditions, RELEASED).unwrap();
    assert_eq!((said.status.as_str(), said.reason.as_str()), ("True", OPERATOR_ATTESTED));
    assert!(said.message.contains("alice"), "{}", said.message);
    let failed = conditions::find(&confirmed.conditions, contract::SUCCEEDED).unwrap();
    assert_eq!(failed.status, "False");
    assert!(!failed.message.contains(contract::RETRY_LEVER), "{}", failed.message);
    assert!(failed.message.ends_with("nothing to retry"), "{}", failed.message);
    assert_eq!(withdraw_release(&confirmed, "att-uid"), None, "a confirmed release is never withdrawn");
    let withdrawn = withdraw_release(&status, "att-uid").unwrap();
    assert!(withdrawn.evidence.unwrap().release.is_none());
    assert_eq!(withdraw_release(&status, "someone-else"), None);
}

#[test]
fn a_releasing_record_left_by_a_crash_is_confirmed_if_its_update_shows_on_the_node_else_withdrawn_once_the_attestation_is_gone()
 {
    let mut remediation = failed("w1", "BmcUnreachable", -60, Some(-300));
    assert_eq!(dangling_record(&remediation, false, Some(&node("Unknown"))), Dangling::Keep);
    let plan = plan_for(&remediation);
    remediation.status = Some(record_release(remediation.status.as_ref().unwrap(), &attestation(0), &plan, t(1)));
    let tainted = taints::with_taint(&node("Unknown"), CoronerTaint::OutOfService, "uid-w1", t(1)).unwrap();
    assert_eq!(dangling_record(&remediation, false, Some(&tainted)), Dangling::Confirm);
    // Its taint rewritten by a webhook on the way in, or removed since: the owner record shows the
    // update was made, and the release is confirmed, never withdrawn.
    let mut rewritten = tainted.clone();
    let taint = rewritten.spec.as_mut().and_then(|s| s.taints.as_mut()).and_then(|t| t.last_mut()).unwrap();
    taint.value = Some("webhook".into());
    assert_eq!(dangling_record(&remediation, false, Some(&rewritten)), Dangling::Confirm);
    let release = release_on_node(&rewritten, "w1", "uid-w1", None, None).expect("the release as the Node shows it");
    assert_eq!(release.taint_value, "webhook");
    assert!(no_foreign_out_of_service_taint(&rewritten, "uid-w1").is_ok());
    let mut removed = tainted.clone();
    removed.spec.as_mut().unwrap().taints.as_mut().unwrap().retain(|t| t.key != taints::OUT_OF_SERVICE_KEY);
    assert_eq!(dangling_record(&remediation, false, Some(&removed)), Dangling::Confirm);
    assert_eq!(dangling_record(&remediation, true, Some(&node("Unknown"))), Dangling::Keep);
    assert_eq!(dangling_record(&remediation, false, Some(&node("Unknown"))), Dangling::Withdraw);
    assert_eq!(dangling_record(&remediation, false, None), Dangling::Withdraw);
}

#[test]
fn the_event_carries_the_reason_verbatim_within_an_event_note() {
    let mut a = attestation(0);
    assert!(release_message(&a).ends_with(&a.spec.reason));
    a.spec.reason = "é".repeat(512);
    let message = release_message(&a);
    assert!(message.len() <= 900 && message.ends_with('…'), "{}", message.len());
}

#[test]
fn the_attestation_waits_pending_or_is_refused_with_the_reason_in_its_condition() {
    let waiting = Refusal::new(AttestationReason::NodeLeaseFresh, "seen 3s ago");
    let status = refused_status(&CoronerAttestationStatus::default(), &[], &waiting, t(0));
    assert_eq!(status.phase, Some(AttestationPhase::Pending));
    let condition = conditions::find(&status.conditions, RELEASED).unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "NodeLeaseFresh"));
    let refused = Refusal::new(AttestationReason::AttestationExpired, "old");
    assert_eq!(refused_status(&status, &[], &refused, t(1)).phase, Some(AttestationPhase::Refused));
}

#[test]
fn every_reason_has_a_meaning_and_a_unique_name() {
    let mut names: Vec<_> = AttestationReason::ALL.iter().map(|r| r.as_str()).collect();
    assert!(AttestationReason::ALL.iter().all(|r| !r.meaning().is_empty()));
    names.sort();
    names.dedup();
    assert_eq!(names.len(), AttestationReason::ALL.len());
}

#[test]
fn a_failed_fence_records_the_lease_as_it_was_when_it_failed() {
    let snapshot = crate::fence::NodeSnapshot {
        name: "w1".into(),
        uid: NODE_UID.into(),
        ready: Some("Unknown".into()),
        lease_present: true,
        lease_renew_time: Some(t(-300)),
        ..crate::fence::NodeSnapshot::default()
    };
    let status = CoronerRemediationStatus { phase: Some(Phase::Pending), ..CoronerRemediationStatus::default() };
    let memory = crate::fence::Memory::default();
    let ctx = crate::fence::Context {
        now: t(0),
        mono: StdDuration::ZERO,
        instance: "i",
        node: &snapshot,
        hold_power_action: None,
        memory: &memory,
        timing: crate::fence::Timing { request_timeout: StdDuration::from_secs(5), read_retries: 1 },
        levels: None,
        sabotage: crate::sabotage::Sabotage::None,
    };
    let refused = crate::fence::Verdict::Refuse { reason: Reason::NoBmcBinding, message: "none".into() };
    let decision = crate::fence::next(
        &CoronerRemediationSpec::default(),
        &status,
        crate::fence::Observation::Admission(refused),
        ctx,
    );
    assert_eq!(decision.status.phase, Some(Phase::Failed));
    let recorded = decision.status.progress.and_then(|p| p.lease_renew_time_at_failure);
    assert_eq!(recorded, Some(MicroTime(t(-300))));
}

fn last_read(world: &mut World, power: &str) {
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.last_power_state = Some(power.into());
}

#[test]
fn an_attestation_never_follows_a_fence_whose_last_reading_found_the_machine_on() {
    let mut world = World::dead_node();
    last_read(&mut world, "On");
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BmcReportedOn), "{verdict:?}");
}

#[test]
fn an_attestation_may_follow_a_fence_whose_last_reading_was_off() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Release(_)));
}

#[test]
fn a_reading_whose_status_write_failed_still_refuses_the_attestation() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    world.remembered.insert("uid-w1".into(), "PoweringOn".into());
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BmcReportedOn), "{verdict:?}");
}

#[test]
fn an_attestation_never_follows_a_fence_whose_reader_stopped_before_it_recorded_its_reading() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap().reader = Some("p1/1".into());
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::ReadingUnrecorded), "{verdict:?}");
}

#[test]
fn an_attestation_never_follows_a_fence_whose_reader_was_taken_over_before_a_reading_was_recorded() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap().unrecorded_reader = Some("p3/1".into());
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::ReadingUnrecorded), "{verdict:?}");
}

#[test]
fn a_node_that_booted_since_its_fence_was_admitted_refuses_the_attestation() {
    let mut booted = node("Unknown");
    booted.status.as_mut().unwrap().node_info =
        Some(k8s_openapi::api::core::v1::NodeSystemInfo { boot_id: "boot-2".into(), ..Default::default() });
    assert!(no_new_boot("", &booted, None, None).is_ok(), "no bootID recorded: nothing to compare");
    assert!(no_new_boot("boot-2", &booted, None, None).is_ok());
    let refusal = no_new_boot("boot-1", &booted, None, None).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::FenceSawLife);
    assert!(refusal.message.contains("boot-2") && refusal.message.contains("boot-1"), "{}", refusal.message);
}

#[test]
fn life_reported_after_coroner_s_power_action_has_no_override() {
    // A boot the fence first saw before the power action may be acknowledged; after it, not.
    let mut booted = node("Unknown");
    let status = booted.status.as_mut().unwrap();
    status.node_info =
        Some(k8s_openapi::api::core::v1::NodeSystemInfo { boot_id: "boot-2".into(), ..Default::default() });
    let seen = || Some(("boot-2".to_owned(), t(-100)));
    assert_eq!(no_new_boot("boot-1", &booted, Some(t(-50)), seen()).unwrap_err().evidence_at, Some(t(-100)));
    // A boot other than the one the fence saw was never seen by it: after, whatever was seen before.
    let other = no_new_boot("boot-1", &booted, Some(t(-50)), Some(("boot-3".to_owned(), t(-100)))).unwrap_err();
    assert_eq!(other.evidence_at, None, "{}", other.message);
    let after = no_new_boot("boot-1", &booted, Some(t(-103)), seen()).unwrap_err();
    assert_eq!(after.evidence_at, None, "within the clock margin counts as after: {}", after.message);
    assert!(after.message.contains("no override"), "{}", after.message);

    // A Lease renewed after the first ForceOff was decided: the switched-off machine may be another.
    let mut world = World::dead_node();
    let status = world.remediations[0].status.as_mut().unwrap();
    let progress = status.progress.as_mut().unwrap();
    progress.lease_renew_time_at_failure = Some(MicroTime(t(-200)));
    progress.intent = Some(crate::api::Intent {
        action: crate::api::PowerAction::ForceOff,
        attempt: 1,
        decided_at: MicroTime(t(-250)),
        instance: "p1/1".into(),
        result: None,
    });
    world.lease = Some(Some(t(-200)));
    let (verdict, _) = world.evaluate(t(0));
    let Verdict::Refuse(refusal) = verdict else { panic!("{verdict:?}") };
    assert_eq!((refusal.reason, refusal.evidence_at), (AttestationReason::FenceSawLife, None), "{}", refusal.message);
    assert!(refusal.message.contains("after coroner's first power action"), "{}", refusal.message);
}

#[test]
fn a_lease_renewed_while_the_fence_ran_refuses_the_attestation() {
    let mut world = World::dead_node();
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.lease_renew_time_at_failure = Some(MicroTime(t(-200)));
    world.lease = Some(Some(t(-200)));
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::FenceSawLife), "{verdict:?}");
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

#[test]
fn life_is_dated_by_coroners_first_sight_of_it_never_by_the_kubelets_clock() {
    // The kubelet's clock runs two minutes behind: its renewal after coroner's ForceOff (decided at
    // t(-250)) carries renewTime t(-370), "before" it. The fence saw the change at t(-150): after.
    let mut world = renewed_while_the_fence_ran();
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.lease_renew_time_at_failure = Some(MicroTime(t(-370)));
    progress.lease_change_seen_at = Some(MicroTime(t(-150)));
    progress.intent = Some(crate::api::Intent {
        action: crate::api::PowerAction::ForceOff,
        attempt: 1,
        decided_at: MicroTime(t(-250)),
        instance: "p1/1".into(),
        result: None,
    });
    world.lease = Some(Some(t(-370)));
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("a renewal after the ForceOff") };
    assert_eq!((refusal.reason, refusal.evidence_at), (AttestationReason::FenceSawLife, None), "{}", refusal.message);
    // A change no step of the fence saw (it ended first, or its process restarted) is after it too.
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.lease_change_seen_at = None;
    progress.intent = None;
    let Verdict::Refuse(unseen) = world.evaluate(t(0)).0 else { panic!("unseen life") };
    assert_eq!((unseen.reason, unseen.evidence_at), (AttestationReason::FenceSawLife, None), "{}", unseen.message);
}

fn acknowledging(world: &mut World, reason: AcknowledgedReason, at: i64) {
    world.attestation.spec.acknowledge.push(Acknowledgement { reason, at: Time(t(at)) });
}

#[test]
fn life_seen_before_the_power_action_is_released_only_when_acknowledged_after_it_plus_lease_freshness() {
    let mut world = renewed_while_the_fence_ran();
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("refused without an acknowledgement") };
    assert_eq!(refusal.evidence_at, Some(t(-200)));
    assert!(refusal.message.contains("--acknowledge FenceSawLife="), "the refusal says how: {}", refusal.message);
    acknowledging(&mut world, AcknowledgedReason::FenceSawLife, -200);
    let Verdict::Release(plan) = world.evaluate(t(0)).0 else { panic!("acknowledged: released") };
    assert_eq!(plan.acknowledged, [Acknowledgement { reason: AcknowledgedReason::FenceSawLife, at: Time(t(-200)) }]);
    // Created before the evidence plus leaseFreshness (40 s): the node had no time to show more life.
    world.attestation.metadata.creation_timestamp = Some(Time(t(-170)));
    let Verdict::Refuse(early) = world.evaluate(t(0)).0 else { panic!("too early") };
    assert!(early.message.contains("create a new one"), "{}", early.message);
}

#[test]
fn an_acknowledgement_counts_only_for_the_evidence_it_names() {
    let mut world = renewed_while_the_fence_ran();
    acknowledging(&mut world, AcknowledgedReason::FenceSawLife, -250);
    acknowledging(&mut world, AcknowledgedReason::BindingUnverified, -200);
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Refuse(r) if r.reason == AttestationReason::FenceSawLife));
}

#[test]
fn an_on_reading_from_a_bmc_dark_since_may_be_acknowledged_and_one_from_a_bmc_that_still_answers_may_not() {
    let mut world = World::dead_node();
    last_read(&mut world, "On");
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.last_answer_at = Some(MicroTime(t(-90)));
    progress.last_reading_at = Some(MicroTime(t(-90)));
    acknowledging(&mut world, AcknowledgedReason::BmcReportedOn, -90);
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("the BMC's last answer was On") };
    assert_eq!((refusal.reason, refusal.evidence_at), (AttestationReason::BmcReportedOn, None), "no override");
    // Asked again later, it never answered: dark since its On, whose moment the attester names.
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.last_reading_at = Some(MicroTime(t(-70)));
    let Verdict::Release(plan) = world.evaluate(t(0)).0 else { panic!("acknowledged: released") };
    assert_eq!(plan.acknowledged, [Acknowledgement { reason: AcknowledgedReason::BmcReportedOn, at: Time(t(-90)) }]);
    world.attestation.spec.acknowledge.clear();
    let Verdict::Refuse(dark) = world.evaluate(t(0)).0 else { panic!("not acknowledged") };
    assert!(dark.message.contains("--acknowledge BmcReportedOn="), "the refusal says how: {}", dark.message);
    // Read after coroner's own ForceOff: life after the power action, no override however dark since.
    let status = world.remediations[0].status.as_mut().unwrap();
    let power_off = status.evidence.get_or_insert_with(Default::default).power_off.get_or_insert_with(Default::default);
    power_off.resets.push(crate::api::ResetRecord {
        attempt: 1,
        sent_at: MicroTime(t(-95)),
        result: "HTTP 204".into(),
        level: None,
        accepted: true,
    });
    acknowledging(&mut world, AcknowledgedReason::BmcReportedOn, -90);
    let Verdict::Refuse(after) = world.evaluate(t(0)).0 else { panic!("On after the ForceOff") };
    assert!(after.evidence_at.is_none() && after.message.contains("after coroner's ForceOff"), "{}", after.message);
    // An On only this process remembers (its write failed) has no moment to name: no override.
    last_read(&mut world, "Off");
    world.remembered.insert("uid-w1".into(), "On".into());
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Refuse(r) if r.evidence_at.is_none()));
}

#[test]
fn acknowledging_an_on_reading_clears_no_other_sign_of_life_in_the_same_fence() {
    let mut world = renewed_while_the_fence_ran();
    last_read(&mut world, "On");
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.last_answer_at = Some(MicroTime(t(-250)));
    progress.last_reading_at = Some(MicroTime(t(-240)));
    acknowledging(&mut world, AcknowledgedReason::BmcReportedOn, -250);
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("the Lease's renewal is not acknowledged") };
    assert_eq!(refusal.reason, AttestationReason::FenceSawLife);
    acknowledging(&mut world, AcknowledgedReason::FenceSawLife, -200);
    let Verdict::Release(plan) = world.evaluate(t(0)).0 else { panic!("both acknowledged: released") };
    assert_eq!(plan.acknowledged.len(), 2);
    // A reading nobody recorded keeps no override, whatever else is acknowledged.
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.unrecorded_reader = Some("p1/1".into());
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Refuse(r) if r.reason == AttestationReason::ReadingUnrecorded));
}

#[test]
fn a_binding_unverified_at_admission_may_be_acknowledged_at_the_admission() {
    let mut world = World::dead_node();
    let node = world.remediations[0].status.as_mut().unwrap().evidence.as_mut().unwrap().node.as_mut().unwrap();
    node.binding = Some(verified_binding(6));
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("unverified") };
    assert_eq!((refusal.reason, refusal.evidence_at), (AttestationReason::BindingUnverified, Some(t(-500))));
    acknowledging(&mut world, AcknowledgedReason::BindingUnverified, -500);
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Release(_)));
}

#[test]
fn an_acknowledgement_reads_as_the_preflight_prints_it() {
    let ack: Acknowledgement = "FenceSawLife=2026-12-05T01:00:00Z".parse().unwrap();
    assert_eq!(ack.to_string(), "FenceSawLife=2026-12-05T01:00:00Z");
    assert!(
        "NodeNotUnreachable=2026-12-05T01:00:00Z"
            .parse::<Acknowledgement>()
            .unwrap_err()
            .contains("cannot be acknowledged")
    );
    assert!("FenceSawLife".parse::<Acknowledgement>().is_err());
    assert!("FenceSawLife=yesterday".parse::<Acknowledgement>().unwrap_err().contains("RFC 3339"));
}

proptest::proptest! {
    #[test]
    fn an_acknowledgement_prints_and_parses_back_to_itself(secs in 0i64..4_000_000_000, which in 0usize..3) {
        let ack = Acknowledgement {
            reason: AcknowledgedReason::ALL[which],
            at: Time(Timestamp::from_second(secs).unwrap()),
        };
        proptest::prop_assert_eq!(ack.to_string().parse::<Acknowledgement>().unwrap(), ack);
    }

    #[test]
    fn any_text_parses_or_is_refused_with_a_reason(text in ".{0,80}") {
        if let Err(why) = text.parse::<Acknowledgement>() {
            proptest::prop_assert!(!why.is_empty());
        }
    }
}

#[test]
fn an_attestation_never_follows_a_guard_whose_last_reading_found_the_released_machine_on() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    let status = world.remediations[0].status.as_mut().unwrap();
    let message = "the released machine reads On: it may be running while its workloads run elsewhere";
    crate::api::conditions::set(
        &mut status.conditions,
        crate::guard::GUARD,
        crate::api::conditions::FALSE,
        crate::guard::POWERED_ON,
        message,
        t(-10),
    );
    let (verdict, _) = world.evaluate(t(0));
    assert!(
        matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BmcReportedOn && r.message.contains("guard")),
        "{verdict:?}"
    );
}

fn binding_at_admission(world: &mut World, binding: Option<crate::api::BindingAtAdmission>) {
    let evidence = world.remediations[0].status.as_mut().unwrap().evidence.as_mut().unwrap();
    evidence.node.as_mut().unwrap().binding = binding;
}

#[test]
fn a_binding_edited_since_its_last_verification_is_no_evidence_and_refuses_the_attestation() {
    let mut world = World::dead_node();
    binding_at_admission(&mut world, Some(verified_binding(6)));
    let (verdict, _) = world.evaluate(t(0));
    let Verdict::Refuse(refusal) = &verdict else { panic!("{verdict:?}") };
    assert_eq!(refusal.reason, AttestationReason::BindingUnverified);
    assert!(refusal.message.contains("at generation 5") && refusal.message.contains("generation 6"), "{refusal}");
}

#[test]
fn a_binding_whose_credentials_or_ca_bundle_changed_since_its_verification_refuses_the_attestation() {
    let mut world = World::dead_node();
    let rotated = crate::api::BindingAtAdmission { content: Some("00000000000000d5".into()), ..verified_binding(5) };
    binding_at_admission(&mut world, Some(rotated));
    let (verdict, _) = world.evaluate(t(0));
    let Verdict::Refuse(refusal) = &verdict else { panic!("{verdict:?}") };
    assert_eq!(refusal.reason, AttestationReason::BindingUnverified);
    assert!(refusal.message.contains("credentials or CA bundle changed"), "{refusal}");
    assert_eq!(refusal.evidence_at, Some(t(-500)), "acknowledgeable, named by the admission");
}

#[test]
fn a_binding_recreated_or_relabelled_at_the_same_content_keeps_its_verification() {
    // A new generation number (the binding re-created and verified again) or metadata edits change
    // nothing that is compared: the contents are equal.
    let mut world = World::dead_node();
    let recreated = crate::api::BindingAtAdmission {
        generation: 1,
        verified_generation: Some(1),
        content: Some("00000000000000c5".into()),
        ..verified_binding(5)
    };
    binding_at_admission(&mut world, Some(recreated));
    let checks = world.evaluate(t(0)).1;
    assert!(checks.contains(&(Precondition::BindingVerifiedAtAdmission, "passed")), "{checks:?}");
}

#[test]
fn a_binding_re_created_and_not_verified_again_passes_on_its_earlier_object_s_kept_verification() {
    let mut world = World::dead_node();
    let kept = crate::api::BindingAtAdmission {
        generation: 1,
        verified_generation: None,
        content: Some("00000000000000c5".into()),
        verified_by_earlier_object: Some("uid-deleted".into()),
        ..verified_binding(5)
    };
    binding_at_admission(&mut world, Some(kept.clone()));
    let checks = world.evaluate(t(0)).1;
    assert!(checks.contains(&(Precondition::BindingVerifiedAtAdmission, "passed")), "{checks:?}");
    let remediation = world.remediations[0].clone();
    let said = binding_verified_at_admission(&remediation).unwrap();
    assert!(said.contains("earlier BmcBinding object of the node (UID uid-deleted, no longer its binding)"), "{said}");
}

#[test]
fn a_verification_or_an_admission_with_no_content_recorded_refuses_the_attestation() {
    let mut world = World::dead_node();
    let old_verifier = crate::api::BindingAtAdmission { verified_content: None, ..verified_binding(5) };
    binding_at_admission(&mut world, Some(old_verifier));
    let (verdict, _) = world.evaluate(t(0));
    assert!(
        matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BindingUnverified && r.message.contains("earlier coroner version")),
        "{verdict:?}"
    );
    let unusable = crate::api::BindingAtAdmission { content: None, ..verified_binding(5) };
    binding_at_admission(&mut world, Some(unusable));
    let (verdict, _) = world.evaluate(t(0));
    assert!(
        matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BindingUnverified && r.message.contains("could not be read")),
        "{verdict:?}"
    );
}

#[test]
fn a_binding_never_verified_or_not_recorded_at_admission_refuses_the_attestation() {
    let mut world = World::dead_node();
    let never = crate::api::BindingAtAdmission { verified_at: None, verified_generation: None, ..verified_binding(1) };
    binding_at_admission(&mut world, Some(never));
    assert!(matches!(&world.evaluate(t(0)).0, Verdict::Refuse(r) if r.reason == AttestationReason::BindingUnverified));
    binding_at_admission(&mut world, None);
    assert!(matches!(&world.evaluate(t(0)).0, Verdict::Refuse(r) if r.reason == AttestationReason::BindingUnverified));
}

#[test]
fn a_fence_that_found_no_binding_needs_no_verified_one() {
    let mut world = World::dead_node();
    world.remediations[0] = failed("w1-abc", "NoBmcBinding", -60, Some(-400));
    binding_at_admission(&mut world, None);
    let checks = world.evaluate(t(0)).1;
    assert!(checks.contains(&(Precondition::BindingVerifiedAtAdmission, "passed")), "{checks:?}");
}

#[test]
fn an_identity_read_with_other_credentials_than_the_verified_ones_refuses_the_attestation() {
    let mut world = World::dead_node();
    let identity = |content: &str| crate::api::IdentityEvidence {
        binding: "w1".into(),
        endpoint: "https://bmc-w1".into(),
        system_id: "1".into(),
        system_path: "/redfish/v1/Systems/1".into(),
        bmc_uuid: "u".into(),
        node_uuid: "u".into(),
        match_kind: crate::api::UuidMatch::Exact,
        verified_at: MicroTime(t(-450)),
        tls_verified: true,
        binding_generation: Some(5),
        binding_content: Some(content.into()),
    };
    // The fence's client was built again from the Secret after a rejection: another content.
    let evidence = world.remediations[0].status.as_mut().unwrap().evidence.as_mut().unwrap();
    evidence.identity = Some(identity("00000000000000d5"));
    let (verdict, _) = world.evaluate(t(0));
    assert!(
        matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BindingUnverified && r.message.contains("other credentials")),
        "{verdict:?}"
    );
    // Read through the verified content: A2 holds.
    let evidence = world.remediations[0].status.as_mut().unwrap().evidence.as_mut().unwrap();
    evidence.identity = Some(identity("00000000000000c5"));
    let checks = world.evaluate(t(0)).1;
    assert!(checks.contains(&(Precondition::BindingVerifiedAtAdmission, "passed")), "{checks:?}");
}

#[test]
fn the_reader_a_pending_look_names_makes_the_attestation_wait_for_the_look_not_refuse() {
    let mut world = World::dead_node();
    world.looked = false;
    let pending = AttestationLook { looked_at: None, found: None, ..no_answer(t(0)) };
    set_look(&mut world, Some(pending));
    world.remediations[0].status.as_mut().unwrap().progress.get_or_insert_with(Default::default).reader =
        Some("coroner-0/7".into());
    assert!(matches!(world.evaluate(t(1)).0, Verdict::Look(_)), "waits for the look");
    // Taken by another process than the one named first, without a reading: that reading is lost.
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    (progress.reader, progress.unrecorded_reader) = (None, Some("coroner-0/7".into()));
    set_look(&mut world, Some(no_answer(t(1))));
    assert_eq!(reason(&world.evaluate(t(2)).0), AttestationReason::ReadingUnrecorded);
}

#[test]
fn a_look_not_taken_never_counts_and_is_not_asked_for_again_by_the_same_attestation() {
    let mut world = World::dead_node();
    set_look(&mut world, Some(AttestationLook { found: None, ..no_answer(t(0)) }));
    let Verdict::Look(plan) = world.evaluate(t(1)).0 else { panic!("a look not taken counts for nothing") };
    assert_eq!(look_asked(&world.remediations[0], &world.attestation, &plan, t(1)), None, "no ask loop");
}

#[test]
fn a_pending_ask_is_answered_before_another_attestation_asks() {
    let mut world = World::dead_node();
    let theirs = AttestationLook { attestation_uid: "other".into(), looked_at: None, found: None, ..no_answer(t(0)) };
    set_look(&mut world, Some(theirs));
    let Verdict::Look(plan) = world.evaluate(t(1)).0 else { panic!("waits for a look of its own") };
    assert_eq!(look_asked(&world.remediations[0], &world.attestation, &plan, t(1)), None);
    // Taken: now this one asks.
    set_look(&mut world, Some(AttestationLook { attestation_uid: "other".into(), ..no_answer(t(1)) }));
    assert!(look_asked(&world.remediations[0], &world.attestation, &plan, t(2)).is_some());
}

#[test]
fn a_release_begun_on_a_look_that_no_longer_stands_waits_for_a_new_look() {
    let mut world = World::dead_node();
    set_look(&mut world, Some(no_answer(t(0))));
    let Verdict::Release(plan) = world.evaluate(t(1)).0 else { panic!("released") };
    let status = record_release(world.remediations[0].status.as_ref().unwrap(), &world.attestation, &plan, t(1));
    world.remediations[0].status = Some(status);
    assert!(device_looked(&world.remediations[0], "att-uid", t(2)).is_ok(), "resumed while the look stands");
    let old = device_looked(&world.remediations[0], "att-uid", t(10_000)).unwrap_err();
    assert_eq!(old.reason, AttestationReason::AwaitingDeviceLook, "an old look is taken again first");
}
