//! The fence state machine's tests: admission and identity (Pending, VerifyingIdentity).

use super::*;

// Pending --------------------------------------------------------------------------------------------

#[test]
fn admission_records_the_node_and_starts_identity() {
    let node = node();
    let decision = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    assert_eq!(decision.status.phase, Some(Phase::VerifyingIdentity));
    assert_eq!(decision.status.evidence.as_ref().unwrap().node.as_ref().unwrap().uid, "node-uid");
    assert_eq!((processing(&decision.status), succeeded(&decision.status).0), ("True".into(), "Unknown".into()));
    assert_eq!(decision.reset, None);
    assert!(fencing_taint_wanted(&spec(), &decision.status));
}

#[test]
fn a_waiting_gate_keeps_the_remediation_pending() {
    let node = node();
    let verdict = Verdict::Wait { reason: Reason::AttemptFailed, message: "wait".into(), recheck: None };
    let decision = next(&spec(), &CoronerRemediationStatus::default(), Observation::Admission(verdict), ctx(0, &node));
    assert_eq!(decision.status.phase, Some(Phase::Pending));
    assert_eq!(succeeded(&decision.status).0, "Unknown");
    assert!(decision.requeue.is_some());
    assert!(!fencing_taint_wanted(&spec(), &decision.status));
    // The same wait again is not announced twice.
    let again = next(
        &spec(),
        &decision.status,
        Observation::Admission(Verdict::Wait { reason: Reason::AttemptFailed, message: "wait".into(), recheck: None }),
        ctx(5, &node),
    );
    assert!(again.notices.is_empty());
}

#[test]
fn a_refusing_gate_fails_without_any_taint() {
    let node = node();
    let verdict = Verdict::Refuse { reason: Reason::NoBmcBinding, message: "no binding".into() };
    let decision = next(&spec(), &CoronerRemediationStatus::default(), Observation::Admission(verdict), ctx(0, &node));
    assert_eq!(decision.status.phase, Some(Phase::Failed));
    assert_eq!(succeeded(&decision.status), ("False".into(), "NoBmcBinding".into()));
    assert!(!fencing_taint_wanted(&spec(), &decision.status));
    assert!(decision.notices[0].warning);
}

// VerifyingIdentity ------------------------------------------------------------------------------------

#[test]
fn an_exact_uuid_proves_identity_and_its_reading_is_the_first_power_reading() {
    let decision = {
        let node = node();
        let admitted = step(
            &spec(),
            &State::default(),
            Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
            ctx(0, &node),
        );
        step(&spec(), &State::from(&admitted), found(NODE_UUID), ctx(0, &node))
    };
    // The identity read said On: the ForceOff is decided on it, with no second read before it.
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::ConfirmingOff), Some(ResetType::ForceOff)));
    let status = decision.status;
    let identity = status.evidence.unwrap().identity.unwrap();
    assert_eq!(
        (identity.match_kind, identity.system_path.as_str()),
        (UuidMatch::Exact, "/redfish/v1/Systems/7f3b0c1e-0000-4000-8000-000000000001")
    );
}

#[test]
fn a_byte_swapped_uuid_is_accepted_and_recorded() {
    let node = node();
    let admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    let decision = next(&spec(), &admitted.status, found(SWAPPED), ctx(0, &node));
    assert_eq!(decision.status.evidence.unwrap().identity.unwrap().match_kind, UuidMatch::ByteSwapped);
}

#[test]
fn identity_refusals_are_final_and_touch_no_power() {
    let node = node();
    let admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    )
    .status;
    let ambiguous = Observation::Identity(Ok(IdentityFound {
        claims: vec![Claim { owner: "Node worker-2".into(), uuid: SWAPPED.into() }],
        ..match found(NODE_UUID) {
            Observation::Identity(Ok(f)) => f,
            _ => unreachable!(),
        }
    }));
    let mut placeholder_node = node.clone();
    placeholder_node.system_uuid = "03000200-0400-0500-0006-000700080009".into();
    let placeholder_admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(placeholder_node.evidence(t(0))))),
        ctx(0, &placeholder_node),
    )
    .status;
    let cases = [
        (admitted.clone(), found(OTHER_UUID), "IdentityMismatch"),
        (admitted.clone(), ambiguous, "IdentityAmbiguous"),
        (placeholder_admitted, found("03000200-0400-0500-0006-000700080009"), "NodeUuidUnusable"),
        (
            admitted.clone(),
            Observation::Identity(Err(IdentityProblem::Bmc(BmcFailure {
                transient: false,
                reason: Reason::BmcAuthenticationFailed,
                message: "401".into(),
            }))),
            "BmcAuthenticationFailed",
        ),
        (
            admitted.clone(),
            Observation::Identity(Err(IdentityProblem::Binding {
                reason: Reason::BindingInvalid,
                message: "no Secret".into(),
                seen_on: None,
            })),
            "BindingInvalid",
        ),
    ];
    for (status, observation, reason) in cases {
        let decision = next(&spec(), &status, observation, ctx(1, &node));
        assert_eq!(succeeded(&decision.status), ("False".into(), reason.into()));
        assert_eq!(decision.status.phase, Some(Phase::Failed));
        assert_eq!(decision.reset, None);
        assert!(
            !fencing_taint_wanted(&spec(), &decision.status),
            "{reason}: refusal before power action drops the taint"
        );
        assert!(decision.notices.iter().any(|n| n.warning && n.reason == reason));
    }
}

#[test]
fn an_unreachable_bmc_uses_the_retry_budget_then_fails() {
    let spec = spec();
    let node = node();
    let admitted = next(
        &spec,
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    )
    .status;
    let first = next(&spec, &admitted, Observation::Identity(Err(IdentityProblem::Bmc(unreachable()))), ctx(1, &node));
    assert_eq!(succeeded(&first.status), ("Unknown".into(), "AttemptFailed".into()));
    assert_eq!(first.status.progress.as_ref().unwrap().attempt, 2);
    let first = State::from(&first);
    assert_eq!(plan_of(&spec, &first, ctx(2, &node)), Plan::Wait(StdDuration::from_secs(4)));
    assert_eq!(plan_of(&spec, &first, ctx(6, &node)), Plan::VerifyIdentity);
    let second = step(&spec, &first, Observation::Identity(Err(IdentityProblem::Bmc(unreachable()))), ctx(6, &node));
    assert_eq!(succeeded(&second.status), ("False".into(), "BmcUnreachable".into()));
    assert_eq!(second.reset, None);
}

#[test]
fn insecure_tls_is_a_warning_condition_and_event() {
    let node = node();
    let admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    )
    .status;
    let mut observation = match found(NODE_UUID) {
        Observation::Identity(Ok(f)) => f,
        _ => unreachable!(),
    };
    observation.tls_verified = Some(false);
    let decision = next(&spec(), &admitted, Observation::Identity(Ok(observation)), ctx(0, &node));
    assert_eq!(conditions::status_of(&decision.status.conditions, contract::TLS_VERIFIED), Some("False"));
    assert!(decision.notices.iter().any(|n| n.warning && n.reason == "InsecureSkipVerify"));
}
