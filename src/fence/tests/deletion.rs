//! The fence state machine's tests: a `ResourceDeletion` release, begun, stopped, completed and
//! recorded (R1).

use super::*;

#[test]
fn a_deletion_release_stopped_after_some_pods_is_a_release_that_says_how_many() {
    let spec =
        CoronerRemediationSpec { remediation_strategy: crate::api::RemediationStrategy::ResourceDeletion, ..spec() };
    let partial = Observation::Release(Ok(Released {
        at: t(5),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: false,
        took_over_from: None,
        pods_deleted: Some(2),
        interrupted: Some(ReleaseRefusal::Node(NodeRefusal::LeaseRenewed { node: "worker-1".into(), renewed: t(4) })),
    }));
    let decision = release_step(&spec, partial);
    let release = decision.status.evidence.as_ref().and_then(|e| e.release.as_ref()).expect("a release is recorded");
    assert_eq!(release.pods_deleted, Some(2), "the pods deleted are a release, guarded like any other");
    assert_eq!(succeeded(&decision.status), ("False".into(), "NodeAliveAfterPowerOff".into()), "never a success");
    let message = &conditions::find(&decision.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("force-deleted 2 pods") && message.contains("stopped"), "{message}");
}

pub(super) fn deletion_spec() -> CoronerRemediationSpec {
    CoronerRemediationSpec { remediation_strategy: crate::api::RemediationStrategy::ResourceDeletion, ..spec() }
}

/// A `ResourceDeletion` fence whose node passed the check and whose release is recorded as begun.
pub(super) fn deletion_begun(spec: &CoronerRemediationSpec) -> State {
    let node = node();
    let state = releasing(spec);
    assert_eq!(plan_of(spec, &state, ctx(5, &node)), Plan::BeginDeletion, "no pod goes before the record");
    let cleared = Observation::DeletionMayBegin(Ok(Released {
        at: t(5),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: false,
        took_over_from: None,
        pods_deleted: None,
        interrupted: None,
    }));
    State::from(&step(spec, &state, cleared, ctx(5, &node)))
}

#[test]
fn a_deletion_release_is_recorded_as_begun_before_its_first_pod_is_deleted() {
    let spec = deletion_spec();
    let node = node();
    let begun = deletion_begun(&spec);
    let record = begun.status.progress.as_ref().and_then(|p| p.release_begun.as_ref()).expect("recorded as begun");
    assert_eq!(record.released_at, MicroTime(t(5)));
    assert!(begun.status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_none(), "not yet the release");
    assert_eq!(plan_of(&spec, &begun, ctx(5, &node)), Plan::Release, "then the pods go");
    // With the taint there is nothing to record first: the taint is the record on the Node.
    let taint = spec_with_taint();
    assert_eq!(plan_of(&taint, &releasing(&taint), ctx(5, &node)), Plan::Release);
}

fn spec_with_taint() -> CoronerRemediationSpec {
    CoronerRemediationSpec { remediation_strategy: crate::api::RemediationStrategy::OutOfServiceTaint, ..spec() }
}

#[test]
fn a_node_that_fails_the_check_before_the_deletion_begins_releases_nothing() {
    let spec = deletion_spec();
    let node = node();
    let refusal = NodeRefusal::Awake { node: "worker-1".into(), ready: "True".into() };
    let refused = step(
        &spec,
        &releasing(&spec),
        Observation::DeletionMayBegin(Err(ReleaseRefusal::Node(refusal))),
        ctx(5, &node),
    );
    assert_eq!(refused.status.phase, Some(Phase::Failed));
    assert!(refused.status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_none(), "no pod went");
    let message = &conditions::find(&refused.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("nothing released"), "{message}");
}

#[test]
fn a_fence_that_ends_after_its_deletion_began_records_the_release_and_never_says_nothing_released() {
    let spec = deletion_spec();
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec.retry }, ..spec };
    let node = node();
    // The pods went, the answer was lost; the proof went stale; the machine reads On in the last attempt.
    let begun = State { memory: Memory::default(), ..deletion_begun(&spec) };
    let failed = step(&spec, &begun, power(PowerState::On), ctx(30, &node));
    assert_eq!(failed.status.phase, Some(Phase::Failed));
    let release = failed.status.evidence.as_ref().and_then(|e| e.release.as_ref()).expect("the release is recorded");
    assert_eq!((release.released_at.clone(), release.pods_deleted), (MicroTime(t(5)), None), "from when it began");
    assert!(failed.status.progress.as_ref().is_some_and(|p| p.release_begun.is_none()), "moved, not copied");
    let message = &conditions::find(&failed.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(
        !message.contains("nothing released") && message.contains("are released, and the machine is guarded"),
        "{message}"
    );
    // NodeHealthCheck's timeout and a deleted Node record it the same way.
    for decision in [timed_out(&begun.status, t(30)), node_missing(&begun.status, "worker-1", t(30))] {
        let status = decision.expect("a terminal decision").status;
        assert!(status.evidence.as_ref().is_some_and(|e| e.release.is_some()), "recorded, guarded");
        let message = &conditions::find(&status.conditions, contract::SUCCEEDED).unwrap().message;
        assert!(!message.contains("nothing released"), "{message}");
    }
}

#[test]
fn a_deletion_that_completes_is_the_release_from_when_it_began() {
    let spec = deletion_spec();
    let node = node();
    let begun = deletion_begun(&spec);
    let done = Observation::Release(Ok(Released {
        at: t(6),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: false,
        took_over_from: None,
        pods_deleted: Some(3),
        interrupted: None,
    }));
    let released = step(&spec, &begun, done, ctx(6, &node));
    let release = released.status.evidence.as_ref().and_then(|e| e.release.as_ref()).expect("released");
    assert_eq!((release.released_at.clone(), release.pods_deleted), (MicroTime(t(5)), Some(3)));
    assert!(released.status.progress.as_ref().is_some_and(|p| p.release_begun.is_none()));
}

#[test]
fn a_begun_deletion_whose_proof_went_stale_is_recorded_with_no_pod_left_and_proven_again_otherwise() {
    // Seed 210372: the apiserver refused the status write after the pods went; by the next try the
    // proof was stale, and proving it again on a flaky apiserver outlasted the only attempt.
    let spec = deletion_spec();
    let node = node();
    let begun = deletion_begun(&spec);
    let stale = ctx(30, &node);
    let path = begun.status.evidence.as_ref().and_then(|e| e.identity.as_ref()).unwrap().system_path.clone();
    assert_eq!(plan_of(&spec, &begun, stale), Plan::FinishDeletion { system_path: path });
    // Nothing left to delete: recorded as it stands, from when it began, with no new proof.
    let none_left = Observation::Release(Ok(Released {
        at: t(30),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: false,
        took_over_from: None,
        pods_deleted: Some(0),
        interrupted: None,
    }));
    let recorded = step(&spec, &begun, none_left, stale);
    let release = recorded.status.evidence.as_ref().and_then(|e| e.release.as_ref()).expect("released");
    assert_eq!(release.released_at, MicroTime(t(5)));
    assert_eq!(succeeded(&recorded.status).0, "True");
    let message = &conditions::find(&recorded.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("left none to delete"), "{message}");
    // A pod left: the driver reads the machine instead, and the reading proves it again first.
    let read = step(&spec, &begun, power(PowerState::Off), stale);
    assert_eq!(read.status.phase, Some(Phase::ConfirmingOff));
    // Without a begun deletion a stale proof is read again, as ever.
    assert!(matches!(plan_of(&spec, &releasing(&spec), stale), Plan::ReadPower { .. }));
}
