//! A2: the binding verified at the content it had when the fence was admitted.

use super::*;

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
