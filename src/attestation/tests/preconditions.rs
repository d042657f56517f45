//! The other preconditions: which fence, the node, its Lease, its taints, the control plane.

use super::*;

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
fn an_excluded_node_is_refused() {
    let mut world = World::dead_node();
    world.node.as_mut().unwrap().metadata.labels =
        Some([(contract::EXCLUDE_LABEL.to_owned(), "true".to_owned())].into());
    let (verdict, _) = world.evaluate(t(5));
    assert_eq!(reason(&verdict), AttestationReason::NodeExcluded);
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
