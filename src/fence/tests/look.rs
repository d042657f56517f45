//! A4: the failed fence's look for an attestation (docs/safety.md A4), transition by transition.

use super::*;
use crate::api::{AttestationLook, LookFound};

/// A fence that failed on a silent BMC at t=0, with attestation `att`'s look asked for at t=10.
fn failed_with_look(may_prove_again: bool, nhc_timed_out: Option<&str>) -> State {
    let node = node();
    let admitted = step(
        &spec(),
        &State::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    let silent = BmcFailure { transient: false, ..unreachable() };
    let failed =
        step(&spec(), &State::from(&admitted), Observation::Identity(Err(IdentityProblem::Bmc(silent))), ctx(0, &node));
    assert_eq!(succeeded(&failed.status), ("False".into(), "BmcUnreachable".into()));
    let mut state = State::from(&failed);
    state.status.evidence.get_or_insert_with(Default::default).attestation_look = Some(AttestationLook {
        attestation: "worker-1-x7k2p".into(),
        attestation_uid: "att".into(),
        requested_at: MicroTime(t(10)),
        may_prove_again,
        nhc_timed_out: nhc_timed_out.map(str::to_owned),
        looked_at: None,
        found: None,
        message: None,
    });
    state
}

fn look(status: &CoronerRemediationStatus) -> AttestationLook {
    status.evidence.as_ref().unwrap().attestation_look.clone().unwrap()
}

fn looked(found: Observation) -> Observation {
    let Observation::Identity(found) = found else { panic!("an identity observation") };
    Observation::Looked { found, nhc_timed_out: None }
}

fn silent() -> Observation {
    Observation::Looked { found: Err(IdentityProblem::Bmc(unreachable())), nhc_timed_out: None }
}

#[test]
fn a_look_asked_for_is_the_failed_fences_next_step_and_its_reader_is_named_first() {
    let node = node();
    let state = failed_with_look(true, None);
    assert_eq!(plan_of(&spec(), &state, ctx(11, &node)), Plan::Look);
    assert!(reader_unnamed(&state.status, ME));
    let named = with_reader(state.status.clone(), ME);
    assert!(!reader_unnamed(&named, ME));
    // Taken: nothing more to look at, and the fence names no reader any more.
    let done = step(&spec(), &State { status: named, ..state }, silent(), ctx(11, &node));
    assert_eq!(plan_of(&spec(), &State::from(&done), ctx(12, &node)), Plan::Idle);
    assert!(!reader_unnamed(&done.status, ME));
    assert_eq!(with_reader(done.status, ME).progress.unwrap().reader, None);
}

#[test]
fn a_look_without_an_answer_is_recorded_and_the_fence_stays_failed() {
    let node = node();
    let decision = step(&spec(), &failed_with_look(true, None), silent(), ctx(11, &node));
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::Failed), None));
    let look = look(&decision.status);
    assert_eq!((look.found, look.looked_at), (Some(LookFound::NoAnswer), Some(MicroTime(t(11)))));
    assert_eq!(succeeded(&decision.status), ("False".into(), "BmcUnreachable".into()));
    let progress = decision.status.progress.unwrap();
    assert_eq!(progress.last_reading_at, Some(MicroTime(t(11))), "a reading the BMC did not answer");
}

#[test]
fn the_nodes_machine_answering_makes_the_fence_prove_it_off_again_in_an_attempt_after_every_recorded_one() {
    let node = node();
    let state = failed_with_look(true, None);
    let before = state.status.progress.as_ref().unwrap().attempt;
    let decision = step(&spec(), &state, looked(found(NODE_UUID)), ctx(11, &node));
    // Reopened at its identity step, as a fence starts: nothing is sent on the look itself.
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::VerifyingIdentity), None));
    assert_eq!(decision.requeue, Some(StdDuration::ZERO));
    assert!(fencing_taint_wanted(&spec(), &decision.status), "its fencing taint goes back on first");
    assert_eq!(look(&decision.status).found, Some(LookFound::ProvingAgain));
    let progress = decision.status.progress.as_ref().unwrap();
    assert_eq!(progress.attempt, before + 1);
    assert_eq!(progress.last_power_state.as_deref(), Some("On"), "the look's reading is recorded");
    // Succeeded keeps the first failure (NHC acted on it); Processing says what happens now.
    assert_eq!(succeeded(&decision.status), ("False".into(), "BmcUnreachable".into()));
    assert_eq!(processing(&decision.status), "True");
    assert!(decision.notices.iter().any(|n| n.reason == LOOK_ANSWERED));
    assert!(proving_again(&decision.status));
    // Its identity step reads again, and the ForceOff is decided on that reading.
    let state = State::from(&decision);
    assert_eq!(plan_of(&spec(), &state, ctx(11, &node)), Plan::VerifyIdentity);
    let forced = step(&spec(), &state, found(NODE_UUID), ctx(11, &node));
    assert_eq!((forced.status.phase, forced.reset), (Some(Phase::ConfirmingOff), Some(ResetType::ForceOff)));
    assert_eq!(forced.status.progress.as_ref().unwrap().intent.as_ref().unwrap().attempt, before + 1);
}

#[test]
fn an_acknowledging_attestations_look_records_the_machines_reading_and_proves_nothing() {
    let node = node();
    let decision = step(&spec(), &failed_with_look(false, None), looked(found(NODE_UUID)), ctx(11, &node));
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::Failed), None));
    assert_eq!(look(&decision.status).found, Some(LookFound::NodeMachine));
    let progress = decision.status.progress.unwrap();
    assert_eq!(progress.last_power_state.as_deref(), Some("On"), "A1 judges it: an On from a BMC that answers");
    assert_eq!(progress.last_answer_at, Some(MicroTime(t(11))));
}

#[test]
fn a_timeout_nhc_stamped_after_the_ask_records_the_reading_and_proves_nothing() {
    let node = node();
    let Observation::Identity(found) = found(NODE_UUID) else { unreachable!() };
    let stamped = Observation::Looked { found, nhc_timed_out: Some("2026-12-06T05:00:00Z".into()) };
    let decision = step(&spec(), &failed_with_look(true, None), stamped, ctx(11, &node));
    assert_eq!(
        (decision.status.phase, look(&decision.status).found),
        (Some(Phase::Failed), Some(LookFound::NodeMachine))
    );
    // Stamped before the ask, and the same value now: the proof goes on past it.
    let Observation::Identity(found) = super::found(NODE_UUID) else { unreachable!() };
    let same = Observation::Looked { found, nhc_timed_out: Some("2026-12-06T05:00:00Z".into()) };
    let decision = step(&spec(), &failed_with_look(true, Some("2026-12-06T05:00:00Z")), same, ctx(11, &node));
    assert_eq!(look(&decision.status).found, Some(LookFound::ProvingAgain));
    assert!(runs_past_nhc_timeout(&decision.status, Some("2026-12-06T05:00:00Z")));
    assert!(!runs_past_nhc_timeout(&decision.status, Some("2026-12-06T05:09:00Z")), "a new value ends it");
}

#[test]
fn nhcs_timeout_stops_no_pending_look_and_nothing_after_the_proof_ended() {
    let state = failed_with_look(true, None);
    assert!(runs_past_nhc_timeout(&state.status, Some("2026-12-06T05:00:00Z")), "the look is a read");
    let node = node();
    let done = step(&spec(), &state, silent(), ctx(11, &node));
    assert!(!runs_past_nhc_timeout(&done.status, Some("2026-12-06T05:00:00Z")));
}

#[test]
fn a_machine_not_provably_the_nodes_is_recorded_and_proves_nothing() {
    let node = node();
    let decision = step(&spec(), &failed_with_look(true, None), looked(found(OTHER_UUID)), ctx(11, &node));
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::Failed), None));
    assert_eq!(look(&decision.status).found, Some(LookFound::NotTheNode));
    // Another node's claim on the UUID: answered as the node's machine, but not provably it.
    let Observation::Identity(Ok(mut claimed)) = found(NODE_UUID) else { unreachable!() };
    claimed.claims = vec![Claim { owner: "Node worker-2".into(), uuid: NODE_UUID.into() }];
    let observation = Observation::Looked { found: Ok(claimed), nhc_timed_out: None };
    let decision = step(&spec(), &failed_with_look(true, None), observation, ctx(11, &node));
    assert_eq!(
        (decision.status.phase, look(&decision.status).found),
        (Some(Phase::Failed), Some(LookFound::NotTheNode))
    );
    assert_eq!(
        decision.status.progress.unwrap().last_power_state.as_deref(),
        Some("On"),
        "its reading is life all the same"
    );
}

#[test]
fn a_refused_discovery_that_saw_the_machine_alive_records_that_life() {
    let node = node();
    let problem = IdentityProblem::Binding {
        reason: Reason::IdentityAmbiguous,
        message: "two systems report the node's UUID".into(),
        seen_on: Some("On".into()),
    };
    let observation = Observation::Looked { found: Err(problem), nhc_timed_out: None };
    let decision = step(&spec(), &failed_with_look(true, None), observation, ctx(11, &node));
    assert_eq!(look(&decision.status).found, Some(LookFound::NotTheNode));
    assert_eq!(decision.status.progress.unwrap().last_power_state.as_deref(), Some("On"));
}

#[test]
fn a_proof_taken_again_that_fails_says_no_attestation_follows_and_is_not_proven_again() {
    let node = node();
    let reopened = State::from(&step(&spec(), &failed_with_look(true, None), looked(found(NODE_UUID)), ctx(11, &node)));
    let proving = State::from(&step(&spec(), &reopened, found(NODE_UUID), ctx(11, &node)));
    let answered = Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) };
    let mut state = State::from(&step(&spec(), &proving, answered, ctx(11, &node)));
    // The machine stays On past the attempt's deadline.
    let mut at = 12;
    while !fence_ended(&state.status) {
        state = State::from(&step(&spec(), &state, power(PowerState::On), ctx(at, &node)));
        at += 1;
        assert!(at < 400, "the attempt never ended");
    }
    assert_eq!(state.status.phase, Some(Phase::Failed));
    let processing = conditions::find(&state.status.conditions, contract::PROCESSING).unwrap();
    assert!(processing.message.contains(contract::PROVEN_AGAIN_LEVER), "{}", processing.message);
    assert!(!processing.message.contains("kubectl coroner attest"), "{}", processing.message);
    assert!(
        processing.message.contains("the proof taken again on an attestation's look")
            && !processing.message.contains("in any of"),
        "its own attempt, not the template's count: {}",
        processing.message
    );
    assert_eq!(succeeded(&state.status), ("False".into(), "BmcUnreachable".into()));
    // No second look: the look is taken, and the fence proved again once.
    assert_eq!(plan_of(&spec(), &state, ctx(at, &node)), Plan::Idle);
    assert!(proving_again(&state.status));
}

fn fence_ended(status: &CoronerRemediationStatus) -> bool {
    phase_of(status).is_terminal()
}

fn remediation(name: &str, uid: &str, status: CoronerRemediationStatus) -> crate::api::CoronerRemediation {
    let mut r = crate::api::CoronerRemediation::new(name, CoronerRemediationSpec::default());
    r.metadata.uid = Some(uid.into());
    r.metadata.annotations = Some([(contract::NODE_NAME_ANNOTATION.to_owned(), "worker-1".to_owned())].into());
    r.status = Some(status);
    r
}

fn asking(phase: crate::api::AttestationPhase) -> crate::api::CoronerAttestation {
    let spec = crate::api::CoronerAttestationSpec {
        node_name: "worker-1".into(),
        node_uid: "node-uid".into(),
        reason: "the rack went dark".into(),
        attested_by: "alice".into(),
        valid_for: crate::api::Duration::from_secs(900),
        acknowledge: Vec::new(),
    };
    let mut a = crate::api::CoronerAttestation::new("worker-1-x7k2p", spec);
    a.metadata.uid = Some("att".into());
    a.status = Some(crate::api::CoronerAttestationStatus { phase: Some(phase), ..Default::default() });
    a
}

#[test]
fn a_look_is_taken_only_for_its_pending_attestation_with_no_other_fence_of_the_node_when_the_storm_limits_allow() {
    use crate::{api::AttestationPhase, gates::Gate};
    let me = remediation("worker-1", "r1", failed_with_look(true, None).status);
    let pending = asking(AttestationPhase::Pending);
    let gate = |attestation, others: &[crate::api::CoronerRemediation], own: Option<&str>, storm| {
        look_may_be_taken(&me, "worker-1", attestation, others, own, storm)
    };
    let only_me = std::slice::from_ref(&me);
    assert_eq!(gate(Some(&pending), only_me, None, Gate::Admit), LookGate::Take);
    let (refused, released) = (asking(AttestationPhase::Refused), asking(AttestationPhase::Released));
    for gone in [None, Some(&refused), Some(&released)] {
        assert!(matches!(gate(gone, only_me, None, Gate::Admit), LookGate::Withdraw(_)), "{gone:?}");
    }
    let running = remediation(
        "worker-1-second",
        "r2",
        CoronerRemediationStatus { phase: Some(Phase::VerifyingIdentity), ..Default::default() },
    );
    assert!(matches!(gate(Some(&pending), &[me.clone(), running], None, Gate::Admit), LookGate::Withdraw(_)));
    assert!(matches!(gate(Some(&pending), only_me, Some("worker-1"), Gate::Admit), LookGate::Wait(_)), "own node");
    let queued = Gate::Wait(Reason::Queued, "place 2 in the queue".into());
    assert_eq!(gate(Some(&pending), only_me, None, queued), LookGate::Wait("place 2 in the queue".into()));
}

#[test]
fn a_look_let_through_counts_as_a_fence_holding_a_power_slot_until_the_store_shows_it_taken() {
    let asked = remediation("worker-1", "r1", failed_with_look(true, None).status);
    let through: std::collections::BTreeMap<String, Timestamp> = [("r1".to_owned(), t(10))].into();
    assert_eq!(Phase::of(&as_proving_again(asked.clone(), &through)), Phase::VerifyingIdentity);
    assert_eq!(Phase::of(&as_proving_again(asked.clone(), &Default::default())), Phase::Failed, "not let through here");
    let mut behind = asked.clone();
    behind.status.as_mut().unwrap().evidence.as_mut().unwrap().attestation_look = None;
    assert_eq!(Phase::of(&as_proving_again(behind, &through)), Phase::VerifyingIdentity, "a store behind the ask");
    let node = node();
    let taken = step(&spec(), &failed_with_look(true, None), silent(), ctx(11, &node));
    let taken = remediation("worker-1", "r1", taken.status);
    assert_eq!(Phase::of(&as_proving_again(taken, &through)), Phase::Failed, "the store shows the look taken");
    let mut later = asked;
    let look = later.status.as_mut().unwrap().evidence.as_mut().unwrap().attestation_look.as_mut().unwrap();
    look.requested_at = MicroTime(t(20));
    assert_eq!(Phase::of(&as_proving_again(later, &through)), Phase::Failed, "a later ask: this one is past");
}

#[test]
fn a_look_not_taken_is_recorded_with_nothing_found() {
    let node = node();
    let decision = step(
        &spec(),
        &failed_with_look(true, None),
        Observation::LookNotTaken("attestation gone".into()),
        ctx(11, &node),
    );
    let look = look(&decision.status);
    assert_eq!((look.found, look.looked_at.is_some()), (None, true));
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::Failed), None));
    assert_eq!(plan_of(&spec(), &State::from(&decision), ctx(12, &node)), Plan::Idle);
}

#[test]
fn a_proof_taken_again_that_released_is_done_when_nhc_times_it_out_or_its_node_goes() {
    // Released on the proof taken again: Succeeded stayed False (the first failure's), the release is
    // recorded.
    let mut status = failed_with_look(true, None).status;
    status.phase = Some(Phase::WaitingForNode);
    status.evidence.as_mut().unwrap().release = Some(crate::api::ReleaseEvidence {
        kind: crate::api::ReleaseKind::BmcProof,
        release_id: None,
        attestation: None,
        adopted_from: None,
        strategy: Default::default(),
        node_ready: "Unknown".into(),
        lease_renew_time: None,
        released_at: MicroTime(t(20)),
        taint_owned: true,
        taint_removed_at: None,
        pods_deleted: None,
        release_timed_out: false,
    });
    // Released: NHC's timeout ends what follows the release (a Reboot's On) as ever.
    status.evidence.as_mut().unwrap().attestation_look.as_mut().unwrap().found = Some(LookFound::ProvingAgain);
    assert!(!runs_past_nhc_timeout(&status, None));
    assert_eq!(timed_out(&status, t(30)).unwrap().status.phase, Some(Phase::Done));
    assert_eq!(node_missing(&status, "worker-1", t(30)).unwrap().status.phase, Some(Phase::Done));
}

/// A1 (soak seed 710896): the look's discovery read the pinned system, the node's, On, then the
/// Systems collection failed: no identity, but the machine was seen alive, and that is recorded as
/// the look's reading (an attestation then refuses on it).
#[test]
fn a_look_whose_bmc_failed_after_the_nodes_system_answered_on_records_that_life() {
    let node = node();
    let seen = Observation::Looked {
        found: Err(IdentityProblem::SeenThenFailed { failure: unreachable(), seen_on: "On".into() }),
        nhc_timed_out: None,
    };
    let decision = step(&spec(), &failed_with_look(true, None), seen, ctx(11, &node));
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::Failed), None), "nothing proven, nothing sent");
    assert_eq!(look(&decision.status).found, Some(LookFound::NoAnswer));
    let progress = decision.status.progress.unwrap();
    assert_eq!(progress.last_power_state.as_deref(), Some("On"), "the life seen is the look's reading");
    assert_eq!(progress.last_answer_at, Some(MicroTime(t(11))));
}
