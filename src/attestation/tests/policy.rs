//! The attester's policy (its admission policy in force, the attestation's validity).

use super::*;

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
