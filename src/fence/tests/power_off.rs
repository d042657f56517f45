//! The fence state machine's tests: powering off and the proof (PoweringOff, ConfirmingOff): readings, resets, the run and its timing.

use super::*;

// PoweringOff / ConfirmingOff ----------------------------------------------------------------------------

#[test]
fn a_machine_that_is_on_gets_one_force_off_after_the_fresh_read() {
    let status = decided(&spec()).status;
    assert_eq!(status.phase, Some(Phase::ConfirmingOff));
    let progress = status.progress.unwrap();
    let intent = progress.intent.unwrap();
    assert_eq!(
        (intent.action, intent.attempt, intent.instance.as_str(), intent.result),
        (crate::api::PowerAction::ForceOff, 1, ME, None)
    );
    assert_eq!(progress.lease_renew_time_at_power_off, Some(MicroTime(t(-100))));
}

#[test]
fn a_fresh_lease_holds_the_power_action_but_not_the_reading() {
    let node = node();
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 3s ago".to_owned());
    let held = Context { hold_power_action: Some(&hold), ..ctx(1, &node) };
    let decision = step(&spec(), &verified(&spec()), power(PowerState::On), held);
    assert_eq!(decision.reset, None);
    assert_eq!(
        (decision.status.phase, succeeded(&decision.status)),
        (Some(Phase::PoweringOff), ("Unknown".into(), "NodeLeaseFresh".into()))
    );
    // A machine that already reads Off needs no power action: nothing to hold.
    let off = step(&spec(), &verified(&spec()), power(PowerState::Off), held);
    assert_eq!(off.status.phase, Some(Phase::ConfirmingOff));
    // Once the Lease is stale, the same reading sends ForceOff.
    let go = step(&spec(), &State::from(&decision), power(PowerState::On), ctx(30, &node));
    assert_eq!(go.reset, Some(ResetType::ForceOff));
}

#[test]
fn a_held_fence_reads_the_bmc_again_only_at_its_recheck_not_at_every_wake_up() {
    // Its own status write wakes it at once; a crash loop of leaders read the BMC every 100 ms so.
    let node = node();
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 3s ago".to_owned());
    let held = Context { hold_power_action: Some(&hold), ..ctx(1, &node) };
    let waiting = State::from(&step(&spec(), &verified(&spec()), power(PowerState::On), held));
    assert!(matches!(plan_of(&spec(), &waiting, ctx(1, &node)), Plan::Wait(_)), "woken by its own write");
    assert!(matches!(plan_of(&spec(), &waiting, ctx(6, &node)), Plan::ReadPower { .. }), "at the recheck");
}

#[test]
fn a_hold_that_never_lifts_ends_the_attempt_at_its_deadline() {
    // A slot held by a phase must always be freed: the wait counts against powerOffTimeout.
    let node = node();
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 3s ago".to_owned());
    let held = |at| Context { hold_power_action: Some(&hold), ..ctx(at, &node) };
    let waiting = State::from(&step(&spec(), &verified(&spec()), power(PowerState::On), held(1)));
    let still = step(&spec(), &waiting, power(PowerState::On), held(59));
    assert_eq!(still.status.phase, Some(Phase::PoweringOff));
    let over = step(&spec(), &State::from(&still), power(PowerState::On), held(61));
    assert_eq!(succeeded(&over.status), ("Unknown".into(), "AttemptFailed".into()));
    assert!(over.status.progress.as_ref().unwrap().last_error.as_deref().unwrap().contains("renewed 3s ago"));
}

#[test]
fn a_machine_already_off_gets_no_reset_but_is_still_confirmed() {
    let lab = lab(off_spec(), machine(false));
    let status = run(&lab);
    assert_eq!(lab.device().resets(), []);
    let confirming = lab.history().into_iter().find(|s| s.phase == Some(Phase::ConfirmingOff)).unwrap();
    assert!(confirming.evidence.unwrap().power_off.unwrap().already_off);
    assert_eq!(
        lab.phases(),
        [Phase::VerifyingIdentity, Phase::ConfirmingOff, Phase::Releasing, Phase::Done],
        "the identity read, Off, is the first reading of the run (and the gates' write carries the start)"
    );
    let power_off = status.evidence.unwrap().power_off.unwrap();
    assert!(power_off.already_off && power_off.resets.is_empty());
    assert_eq!(power_off.proof.unwrap().count, 3, "Off at the first reading and 1 s and 2 s later");
}

#[test]
fn an_unbroken_run_spanning_settle_is_the_proof() {
    // ForceOff at f; Off read at once (the reading after an accepted ForceOff is not paced from the
    // identity read), then at f+1 and f+2: first and last 2 s apart = settle.
    let lab = lab(off_spec(), machine(true));
    let status = run(&lab);
    let [(force_off, ResetType::ForceOff)] = reset_times(&lab)[..] else { panic!("{:?}", reset_times(&lab)) };
    let evidence = status.evidence.unwrap().power_off.unwrap();
    let proof = evidence.proof.unwrap();
    assert_eq!(proof.count, 3);
    assert_eq!((proof.first[0].at.0, proof.latest().unwrap().at.0), (force_off, force_off + secs(2)));
    assert_eq!(evidence.proven_at, Some(MicroTime(force_off + secs(2))));
    assert!(lab.phases().ends_with(&[Phase::ConfirmingOff, Phase::Releasing, Phase::Done]), "{:?}", lab.phases());
}

#[test]
fn the_settle_span_is_measured_on_precise_times_after_persistence() {
    // Off at once after the ForceOff at f, then every 990 ms: f+0.99, and a third at f+1.98 would span
    // 1.98 s. Whole seconds (or rounded ones) would say 2 s and release on it; the third reading waits
    // the 20 ms the precise span still lacks (`next_reading_due`) and is taken at f+2, spanning 2 s.
    let spec = CoronerRemediationSpec { poll_interval: crate::api::Duration::from_millis(990), ..off_spec() };
    let lab = lab(spec, machine(true));
    let status = run(&lab);
    let [(force_off, _)] = reset_times(&lab)[..] else { panic!("{:?}", reset_times(&lab)) };
    let proof = proof_of(&status);
    let ms = SignedDuration::from_millis;
    assert_eq!(proof.count, 3);
    assert_eq!((proof.first[0].at.0, proof.latest().unwrap().at.0), (force_off, force_off + ms(2000)));
}

#[test]
fn the_lease_time_survives_persistence_to_the_microsecond() {
    let mut fresh = node();
    fresh.lease_renew_time = Some(t(-1) + SignedDuration::from_micros(221_120));
    let decision = step(&spec(), &verified(&spec()), power(PowerState::On), ctx(1, &fresh));
    let stored = persisted(&decision.status).progress.unwrap().lease_renew_time_at_power_off.unwrap();
    assert_eq!(stored.0, t(-1) + SignedDuration::from_micros(221_120));
}

#[test]
fn readings_less_than_settle_apart_prove_nothing() {
    // A BMC that accepts every ForceOff and does nothing: On, then Off twice 1 s apart, then On.
    let script = machine(true).resets([ResetAnswer::Ignored(204), ResetAnswer::Ignored(204)]).reads([
        Read::Truth,
        Read::Says(PowerState::Off),
        Read::Says(PowerState::Off),
    ]);
    let lab = lab(spec(), script);
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    assert!(
        lab.decided_history().iter().any(|s| s
            .progress
            .as_ref()
            .and_then(|p| p.off_run.as_ref())
            .is_some_and(|r| r.count == 2))
    );
    assert!(!lab.phases().contains(&Phase::Releasing));
    assert_eq!(lab.device().resets(), [ResetType::ForceOff, ResetType::ForceOff], "one per attempt");
}

#[test]
fn anything_but_off_breaks_the_run() {
    for breaker in [
        Read::Says(PowerState::On),
        Read::Says(PowerState::PoweringOff),
        Read::Says(PowerState::PoweringOn),
        Read::Says(PowerState::Paused),
        Read::Says(PowerState::Other("Standby".into())),
        Read::Fails(BmcError::Unreachable("connection refused".into())),
    ] {
        // ForceOff at f (on the identity read), then Off at once, <breaker> at f+1, Off from f+2: the
        // run restarts after the breaker, and the proof is f+2 … f+4.
        let lab = lab(off_spec(), machine(true).reads([Read::Truth, breaker.clone()]));
        let status = run(&lab);
        let [(force_off, _)] = reset_times(&lab)[..] else { panic!("{breaker:?}: {:?}", reset_times(&lab)) };
        let proof = proof_of(&status);
        assert_eq!((proof.count, proof.first[0].at.0), (3, force_off + secs(2)), "{breaker:?}");
        assert_eq!(phase_of(&status), Phase::Done, "{breaker:?}");
    }
}

#[test]
fn on_a_bmc_with_several_systems_only_the_nodes_is_read_and_reset() {
    let script = Script::machine(OTHER_UUID, true).system("2", NODE_UUID, true);
    let lab = lab(off_spec(), script);
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done);
    assert_eq!(status.evidence.unwrap().identity.unwrap().system_path, "/redfish/v1/Systems/2");
    for (_, request) in lab.device().requests() {
        if let Request::Read(path) | Request::Reset(path, _) = request {
            assert_eq!(path, "/redfish/v1/Systems/2");
        }
    }
    assert!(lab.device().is_on("1") && !lab.device().is_on("2"));
}

#[test]
fn a_slow_bmc_still_proves_the_power_off_on_readings_spanning_settle() {
    // Every request takes 700 ms of the fence's time.
    let lab = lab(off_spec(), machine(true).latency(StdDuration::from_millis(700)));
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done);
    let proof = proof_of(&status);
    let span = proof.latest().unwrap().at.0.duration_since(proof.first[0].at.0);
    assert!(span >= secs(2), "{proof:?}");
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
}

pub(super) fn busy() -> BmcError {
    BmcError::Status { method: "POST", path: "/redfish/v1/Systems/1".into(), status: 503, detail: String::new() }
}

#[test]
fn a_failed_force_off_is_recorded_and_sent_again_after_the_next_reading_that_is_not_off() {
    let lab = lab(off_spec(), machine(true).resets([ResetAnswer::Fails(busy())]));
    let status = run(&lab);
    assert_eq!(lab.device().resets(), [ResetType::ForceOff, ResetType::ForceOff]);
    let power_off = status.evidence.unwrap().power_off.unwrap();
    let results: Vec<_> = power_off.resets.iter().map(|r| (r.attempt, r.result.contains("503"))).collect();
    assert_eq!(results, [(1, true), (1, false)], "within the attempt");
    assert_eq!((phase_of(&lab.status()), power_off.proof.map(|p| p.count)), (Phase::Done, Some(3)));
}

#[test]
fn only_a_force_off_the_bmc_accepted_is_read_at_once() {
    assert!(read_at_once_after(ResetType::ForceOff, true));
    assert!(!read_at_once_after(ResetType::ForceOff, false), "a failed one waits for the pace (P7)");
    assert!(!read_at_once_after(ResetType::On, true), "a power-on is read at the pace");
}

#[test]
fn the_reading_after_a_failed_force_off_keeps_the_pace_so_it_is_not_sent_again_at_once() {
    let lab = lab(off_spec(), machine(true).resets([ResetAnswer::Fails(busy())]));
    run(&lab);
    let [(first, _), (again, _)] = reset_times(&lab)[..] else { panic!("{:?}", reset_times(&lab)) };
    assert_eq!(again.duration_since(first), secs(1), "one pollInterval after the identity read, which read On");
}

#[test]
fn a_force_off_lost_on_the_way_is_sent_again_in_the_only_attempt() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..off_spec() };
    let lost = BmcError::Unreachable("no answer before the request timeout".into());
    let lab = lab(spec, machine(true).resets([ResetAnswer::Fails(lost)]));
    assert_eq!(phase_of(&run(&lab)), Phase::Done);
    assert_eq!(lab.device().resets(), [ResetType::ForceOff, ResetType::ForceOff]);
}

#[test]
fn a_force_off_refused_for_rotated_credentials_is_sent_again_and_a_forbidden_one_waits_for_the_next_attempt() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..off_spec() };
    let rotated = lab(spec.clone(), machine(true).resets([ResetAnswer::Fails(BmcError::Unauthorized(401))]));
    assert_eq!(phase_of(&run(&rotated)), Phase::Done);
    assert_eq!(rotated.device().resets(), [ResetType::ForceOff, ResetType::ForceOff]);
    let forbidden = lab(spec, machine(true).resets([ResetAnswer::Fails(BmcError::Unauthorized(403))]));
    assert_eq!(succeeded(&run(&forbidden)), ("False".into(), "PowerOffNotConfirmed".into()));
    assert_eq!(forbidden.device().resets(), [ResetType::ForceOff]);
}

#[test]
fn credentials_rejected_after_an_accepted_force_off_are_read_again_until_the_deadline_but_not_before_any() {
    use crate::sim::script::Read;
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..off_spec() };
    let rejected = || Read::Fails(BmcError::Unauthorized(401));
    // The password rotated right after the ForceOff; the Secret follows the BMC three readings later.
    let rotated = lab(spec.clone(), machine(true).reads(std::iter::repeat_with(rejected).take(6)));
    let status = run(&rotated);
    assert_eq!(phase_of(&status), Phase::Done, "{:?}", succeeded(&status));
    assert_eq!(rotated.device().resets(), [ResetType::ForceOff]);
    // Before any ForceOff the BMC accepted, a rejection read again from the Secret is final at once.
    let wrong = lab(spec, machine(false).reads(std::iter::repeat_with(rejected).take(6)));
    let status = run(&wrong);
    assert_eq!(succeeded(&status), ("False".into(), "BmcAuthenticationFailed".into()));
}

#[test]
fn a_bmc_that_fails_every_force_off_gets_three_per_attempt_and_the_fence_fails() {
    let lab = lab(off_spec(), machine(true).resets(std::iter::repeat_with(|| ResetAnswer::Fails(busy())).take(20)));
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    let power_off = status.evidence.unwrap().power_off.unwrap();
    let attempts: Vec<_> = power_off.resets.iter().map(|r| r.attempt).collect();
    let count = spec().retry.count;
    let expected: Vec<_> = (1..=count).flat_map(|a| [a; FORCE_OFFS_PER_ATTEMPT]).collect();
    assert_eq!(attempts, expected);
}

#[test]
fn a_force_off_is_sent_again_only_after_a_failure_that_passes_and_fewer_than_three_in_the_attempt() {
    let failed: Result<u16, BmcFailure> = Err(unreachable());
    assert!(force_off_again(&failed, 1));
    assert!(force_off_again(&failed, 2));
    assert!(!force_off_again(&failed, 3), "the third failure ends the attempt's resets");
    assert!(!force_off_again(&Ok::<u16, BmcFailure>(204), 1), "an accepted one: only readings tell");
    let rejected: Result<u16, BmcFailure> =
        Err(BmcFailure { transient: false, reason: Reason::BmcProtocolError, message: "HTTP 400".into() });
    assert!(!force_off_again(&rejected, 1), "a rejection is the next attempt's");
    let forbidden: Result<u16, BmcFailure> = Err(BmcFailure {
        transient: false,
        reason: Reason::BmcAuthenticationFailed,
        message: "BMC rejected the credentials (HTTP 403)".into(),
    });
    assert!(!force_off_again(&forbidden, 1), "no power privilege: the next attempt's");
}

#[test]
fn readings_from_before_a_restart_never_count() {
    let lab = lab(off_spec(), machine(true));
    run_until_off_readings(&lab, 2);
    let restarted_at = lab.clock().now();
    // Another coroner process: its first Off reading starts a run of its own.
    lab.restart();
    let status = run(&lab);
    let proof = proof_of(&status);
    assert_eq!((proof.instance.as_str(), proof.count), ("p1/2", 3));
    assert!(proof.first[0].at.0 >= restarted_at, "{proof:?}");
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
}

#[test]
fn a_force_off_persisted_but_never_answered_is_sent_after_a_fresh_read() {
    // The intent was persisted; no answer was recorded (the process stopped before sending).
    let node = node();
    let state = decided(&spec());
    let status = State { memory: Memory::default(), ..state.clone() };
    assert_eq!(status.status.progress.as_ref().unwrap().intent.as_ref().unwrap().result, None);
    let restarted = Context { instance: "instance-c", ..ctx(3, &node) };
    let decision = step(&spec(), &status, power(PowerState::On), restarted);
    assert_eq!(decision.reset, Some(ResetType::ForceOff));
    let intent = decision.status.progress.unwrap().intent.unwrap();
    assert_eq!((intent.instance.as_str(), intent.attempt), ("instance-c", 1));
    // The same after a restart whose Lease tracker holds power actions: it waits in PoweringOff with
    // the hold's reason, and the attempt's clock stops until it may act.
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 0s ago".to_owned());
    let held = Context { instance: "instance-c", hold_power_action: Some(&hold), ..ctx(3, &node) };
    let waiting = step(&spec(), &status, power(PowerState::On), held);
    assert_eq!(waiting.reset, None);
    assert_eq!(
        (waiting.status.phase, succeeded(&waiting.status)),
        (Some(Phase::PoweringOff), ("Unknown".into(), "NodeLeaseFresh".into()))
    );
    // Once answered, On readings just keep the attempt polling.
    let answered = step(
        &spec(),
        &state,
        Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) },
        ctx(1, &node),
    );
    let polled = step(&spec(), &State::from(&answered), power(PowerState::On), ctx(3, &node));
    assert_eq!(polled.reset, None);
}

#[test]
fn a_reset_decided_in_a_step_that_ends_the_attempt_is_not_sent() {
    // An unanswered ForceOff intent, then a reading after powerOffTimeout: the attempt ends, and the
    // step must not also ask to send the ForceOff whose intent it just cleared.
    let node = node();
    let status = decided(&spec());
    let late = step(&spec(), &status, power(PowerState::On), ctx(62, &node));
    assert_eq!(late.status.phase, Some(Phase::PoweringOff));
    assert_eq!(late.reset, None);
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let last = step(&spec, &decided(&spec), power(PowerState::On), ctx(62, &node));
    assert_eq!((last.status.phase, last.reset), (Some(Phase::Failed), None));
}

#[test]
fn a_proof_from_an_earlier_process_does_not_release() {
    let spec = spec();
    let state = releasing(&spec);
    let node = node();
    // Another process: the proof is in the status, not in its memory; a forged status is no proof.
    let restarted = State { memory: Memory::default(), ..state.clone() };
    let other = Context { instance: "instance-c", ..ctx(5, &node) };
    assert!(matches!(plan_of(&spec, &restarted, other), Plan::ReadPower { .. }), "re-prove, not release");
    let decision = step(&spec, &restarted, power(PowerState::Off), other);
    assert_eq!(decision.status.phase, Some(Phase::ConfirmingOff));
    assert_eq!(decision.status.evidence.as_ref().unwrap().power_off.as_ref().unwrap().proof, None);
    assert_eq!(decision.status.progress.as_ref().unwrap().off_run.as_ref().unwrap().instance, "instance-c");
    assert_eq!(plan_of(&spec, &state, ctx(5, &node)), Plan::Release, "the process that proved it releases");
}

#[test]
fn a_proof_is_fresh_for_poll_interval_plus_the_request_timeout() {
    // The last Off reading at t=4; pollInterval 1 s + request timeout 5 s: fresh until t=10.
    let spec = spec();
    let state = releasing(&spec);
    let node = node();
    assert_eq!(proof_deadline(&spec, &state.memory, TIMING), Some(mono(10)));
    assert_eq!(plan_of(&spec, &state, ctx(9, &node)), Plan::Release);
    assert!(matches!(plan_of(&spec, &state, ctx(10, &node)), Plan::ReadPower { .. }), "stale: read first");
}

#[test]
fn a_stale_proof_is_kept_by_an_unbroken_off_reading_and_ended_by_anything_else() {
    let spec = spec();
    let state = releasing(&spec);
    let node = node();
    // Off again at t=6: requested within pollInterval + 1 s of the t=4 reading, answered within the
    // gap bound (2 × (1 s + 1 s)): fresh again.
    let kept = step(&spec, &state, power(PowerState::Off), ctx(6, &node));
    assert_eq!(kept.status.phase, Some(Phase::Releasing));
    assert_eq!(plan_of(&spec, &State::from(&kept), ctx(6, &node)), Plan::Release);
    // Off after a longer gap: the machine may have been on unseen; the proof starts over.
    let gap = step(&spec, &state, power(PowerState::Off), ctx(20, &node));
    assert_eq!(gap.status.phase, Some(Phase::ConfirmingOff));
    // On: it came back on; a new attempt switches it off again.
    let back = step(&spec, &state, power(PowerState::On), ctx(12, &node));
    assert_eq!((back.status.phase, back.reset), (Some(Phase::ConfirmingOff), Some(ResetType::ForceOff)));
    assert_eq!(back.status.progress.as_ref().unwrap().attempt, 2);
}

pub(super) fn sampled_ms(requested: u64, answered: u64) -> Sampled {
    Sampled { requested: StdDuration::from_millis(requested), answered: StdDuration::from_millis(answered) }
}

#[test]
fn at_the_defaults_no_proof_rests_on_readings_requested_further_apart_than_settle() {
    // settle 2 s, pollInterval 1 s: requests at most settle apart, answers within 2 × (1 s + 1 s).
    let spec = spec();
    assert_eq!((request_bound(&spec), gap_bound(&spec)), (spec.settle.get(), StdDuration::from_secs(4)));
    assert_eq!(dense(&sampled_ms(0, 100), &sampled_ms(2000, 2100), &spec), Ok(()));
    assert_eq!(
        dense(&sampled_ms(0, 100), &sampled_ms(2001, 2100), &spec),
        Err(Gap::Requests { apart: StdDuration::from_millis(2001), bound: StdDuration::from_secs(2) })
    );
    // From the earlier request to the later answer, at most the gap bound.
    assert_eq!(dense(&sampled_ms(0, 1900), &sampled_ms(1900, 4000), &spec), Ok(()));
    assert_eq!(
        dense(&sampled_ms(0, 1900), &sampled_ms(1900, 4001), &spec),
        Err(Gap::Answer { apart: StdDuration::from_millis(4001), bound: StdDuration::from_secs(4) })
    );
}

#[test]
fn at_the_defaults_an_honest_bmc_slower_than_poll_interval_still_proves() {
    // Every read takes 1.8 s, more than pollInterval: the next request goes at the answer.
    let lab = lab(off_spec(), machine(true).latency(StdDuration::from_millis(1800)));
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done, "{:?}", lab.reasons());
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
    assert!(proof_of(&status).count >= 3);
}

#[test]
fn however_long_settle_is_the_gap_bound_stays_within_twice_poll_interval_and_one_read() {
    for settle in [2, 60, 600] {
        let spec = CoronerRemediationSpec { settle: crate::api::Duration::from_secs(settle), ..spec() };
        assert_eq!(gap_bound(&spec), 2 * spec.poll_interval.get() + 2 * READ_ALLOWANCE, "settle {settle}s");
        assert_eq!(READ_ALLOWANCE, StdDuration::from_secs(1));
        assert!(request_bound(&spec) <= gap_bound(&spec));
    }
    // A settle shorter than what an honest BMC needs between requests still proves on one.
    for (settle_ms, poll_ms, bound_ms) in
        [(500, 1000, 2000), (1000, 1000, 2000), (3000, 1000, 3000), (9000, 1000, 4000)]
    {
        let spec = CoronerRemediationSpec {
            settle: crate::api::Duration::from_millis(settle_ms),
            poll_interval: crate::api::Duration::from_millis(poll_ms),
            ..spec()
        };
        assert_eq!(request_bound(&spec), StdDuration::from_millis(bound_ms), "settle {settle_ms} ms");
    }
}

#[test]
fn a_run_broken_by_the_gap_says_by_how_much_and_what_to_change() {
    let gap = dense(&sampled_ms(0, 100), &sampled_ms(1000, 7900), &spec()).unwrap_err();
    assert_eq!(
        gap.advice(&spec()),
        "readings 7.9s apart, from one request to the next answer, above the gap bound 4.0s: the BMC answers too slowly for pollInterval 1s (the gap bound is 2 × (pollInterval + 1.0s)); raise pollInterval"
    );
    // Through the loop: a BMC that takes 3 s per read never proves, and the final message says why.
    let lab = lab(off_spec(), machine(true).latency(StdDuration::from_secs(3)));
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    let message = conditions::find(&status.conditions, contract::SUCCEEDED).unwrap().message.clone();
    assert!(message.contains("apart") && message.contains("raise pollInterval"), "{message}");
}

#[test]
fn a_run_spans_from_the_first_answer_to_the_last_request() {
    let sampled = |requested: u64, answered: u64| Sampled {
        requested: StdDuration::from_millis(requested),
        answered: StdDuration::from_millis(answered),
    };
    // First answered at 0.5 s, last requested at 2.4 s: 1.9 s, not 2 s, although the requests are
    // 2.4 s apart and the answers 2.5 s.
    let run = Run { first: sampled(0, 500), last: sampled(2400, 3000), count: 3 };
    assert!(!spans_settle(&run, StdDuration::from_secs(2)));
    let run = Run { first: sampled(0, 400), last: sampled(2400, 3000), count: 3 };
    assert!(spans_settle(&run, StdDuration::from_secs(2)));
}

#[test]
fn a_changed_uuid_stops_the_fence() {
    let changed = reading_of(OTHER_UUID, PowerState::Off);
    let node = node();
    for state in [verified(&spec()), confirming(&spec())] {
        let decision = step(&spec(), &state, changed.clone(), ctx(2, &node));
        assert_eq!(succeeded(&decision.status), ("False".into(), "IdentityChanged".into()));
        assert_eq!(decision.reset, None);
    }
    // The same UUID in another case is the same UUID.
    let upper = reading_of(&NODE_UUID.to_uppercase(), PowerState::Off);
    assert_eq!(step(&spec(), &confirming(&spec()), upper, ctx(2, &node)).status.phase, Some(Phase::ConfirmingOff));
}

#[test]
fn no_proof_within_the_timeout_starts_the_next_attempt_then_fails() {
    let spec = spec();
    let node = node();
    // Still On at t=61 (ForceOff sent at t=1, powerOffTimeout 60s).
    let first_attempt_over = step(&spec, &confirming(&spec), power(PowerState::On), ctx(61, &node));
    let status = &first_attempt_over.status;
    assert_eq!(
        (status.phase, succeeded(status)),
        (Some(Phase::PoweringOff), ("Unknown".into(), "AttemptFailed".into()))
    );
    let progress = status.progress.as_ref().unwrap();
    assert_eq!((progress.attempt, progress.intent.is_none()), (2, true));
    let over = State::from(&first_attempt_over);
    assert_eq!(plan_of(&spec, &over, ctx(62, &node)), Plan::Wait(StdDuration::from_secs(4)));
    // Second attempt: fresh read first, then a new ForceOff.
    let second = step(&spec, &over, power(PowerState::On), ctx(66, &node));
    assert_eq!(second.reset, Some(ResetType::ForceOff));
    let second = step(
        &spec,
        &State::from(&second),
        Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) },
        ctx(66, &node),
    );
    let failed = step(&spec, &State::from(&second), power(PowerState::On), ctx(126, &node));
    assert_eq!(succeeded(&failed.status), ("False".into(), "PowerOffNotConfirmed".into()));
    assert_eq!(failed.reset, None);
    assert!(fencing_taint_wanted(&spec, &failed.status), "after a ForceOff the node keeps coroner's NoSchedule taint");
    assert!(!out_of_service_taint_ends(&failed.status));
}

#[test]
fn polling_is_paced_by_the_poll_interval() {
    let spec = spec();
    let node = node();
    let state = State::from(&step(&spec, &confirming(&spec), power(PowerState::Off), ctx(2, &node)));
    let soon = Context { mono: mono(2) + StdDuration::from_millis(300), ..ctx(2, &node) };
    assert_eq!(plan_of(&spec, &state, soon), Plan::Wait(StdDuration::from_millis(700)));
    assert!(matches!(plan_of(&spec, &state, ctx(3, &node)), Plan::ReadPower { .. }));
}

#[test]
fn the_reset_answer_is_recorded_but_proves_nothing() {
    let node = node();
    let status = decided(&spec());
    let rejected = Err(BmcFailure { transient: false, reason: Reason::BmcProtocolError, message: "HTTP 400".into() });
    let decision = step(
        &spec(),
        &status,
        Observation::ResetAnswered { action: ResetType::ForceOff, result: rejected },
        ctx(1, &node),
    );
    assert_eq!(decision.status.phase, Some(Phase::ConfirmingOff));
    let resets = decision.status.evidence.unwrap().power_off.unwrap().resets;
    assert_eq!((resets.len(), resets[0].result.as_str()), (1, "HTTP 400"));
    assert!(decision.notices.iter().any(|n| n.warning && n.reason == "ForceOffSent"));
    assert_eq!(decision.status.progress.unwrap().intent.unwrap().result.as_deref(), Some("HTTP 400"));
    // P7: a failure that passes stays to be sent again; an accepted one is answered.
    let busy = Err(BmcFailure { transient: true, reason: Reason::BmcUnreachable, message: "HTTP 503".into() });
    let failed =
        step(&spec(), &status, Observation::ResetAnswered { action: ResetType::ForceOff, result: busy }, ctx(1, &node));
    assert!(failed.notices.iter().any(|n| n.warning && n.message.contains("sent again")));
    assert_eq!(failed.status.progress.unwrap().intent.unwrap().result, None);
    let accepted = step(
        &spec(),
        &status,
        Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) },
        ctx(1, &node),
    );
    assert_eq!(accepted.status.progress.unwrap().intent.unwrap().result.as_deref(), Some("HTTP 204"));
}
