//! A3: the release record, the Node update and what the attestation and the remediation say.

use super::*;

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

#[test]
fn the_lease_read_again_after_the_release_takes_the_taint_back_when_it_changed() {
    let plan = plan_for(&failed("w1", "BmcUnreachable", -60, Some(-300)));
    assert!(lease_held_after_release(&plan, Some(Some(t(-300)))).is_ok());
    let refusal = lease_held_after_release(&plan, Some(Some(t(2)))).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::LeaseChangedSinceFence);
    assert!(refusal.message.ends_with("the out-of-service taint was taken back"), "{}", refusal.message);
}

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
