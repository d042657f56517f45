//! The fence state machine's tests: the contract's endings (NHC's timeout, a missing node, a leader on the node) and the fence's deadlines.

use super::deletion::{deletion_begun, deletion_spec};
use super::*;

// Contract-level endings --------------------------------------------------------------------------------

#[test]
fn a_leader_on_the_target_node_waits_in_its_phase() {
    let status = confirming(&spec()).status;
    let decision = leader_on_target(&status, "worker-1", t(5));
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::ConfirmingOff), None));
    assert_eq!(succeeded(&decision.status), ("Unknown".into(), "LeaderOnTargetNode".into()));
    assert_eq!(decision.notices.len(), 1);
    assert!(leader_on_target(&decision.status, "worker-1", t(10)).notices.is_empty(), "announced once");
}

#[test]
fn nhc_timeout_before_success_fails_and_sends_nothing() {
    let decision = timed_out(&confirming(&spec()).status, t(10)).unwrap();
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::Failed), None));
    assert_eq!(succeeded(&decision.status), ("False".into(), "TimedOutByNHC".into()));
    assert_eq!(processing(&decision.status), "False");
}

#[test]
fn nhc_timeout_after_success_keeps_succeeded_true() {
    let spec = spec();
    let decision = timed_out(&powering_on(&spec).status, t(10)).unwrap();
    assert_eq!(decision.status.phase, Some(Phase::Done));
    assert_eq!((processing(&decision.status), succeeded(&decision.status).0), ("False".into(), "True".into()));
    assert!(timed_out(&decision.status, t(11)).is_none(), "terminal phases are left alone");
}

#[test]
fn nhc_timeout_before_any_power_action_drops_the_fencing_taint() {
    let node = node();
    let admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    )
    .status;
    let decision = timed_out(&admitted, t(1)).unwrap();
    assert!(!fencing_taint_wanted(&spec(), &decision.status));
}

#[test]
fn a_missing_node_fails_before_success_and_completes_after() {
    let before = node_missing(&confirming(&spec()).status, "worker-1", t(5)).unwrap();
    assert_eq!(succeeded(&before.status), ("False".into(), "NodeNotFound".into()));
    let spec = spec();
    let after = node_missing(&powering_on(&spec).status, "worker-1", t(9)).unwrap();
    assert_eq!((after.status.phase, succeeded(&after.status).0), (Some(Phase::Done), "True".into()));
}

#[test]
fn proof_boundary_is_inclusive_at_exactly_settle() {
    let at = |secs| Sampled { requested: StdDuration::from_secs(secs), answered: StdDuration::from_secs(secs) };
    let run = |first, last| Run { first: at(first), last: at(last), count: 2 };
    assert!(spans_settle(&run(0, 2), StdDuration::from_secs(2)));
    assert!(!spans_settle(&run(0, 1), StdDuration::from_secs(2)));
}

#[test]
fn a_fence_dates_life_by_its_own_first_sight_of_it_never_by_the_nodes_clock() {
    let spec = spec();
    let verified = verified(&spec);
    // The kubelet's clock runs behind: a renewal coroner first sees at t(5) carries renewTime t(-400).
    let renewed = NodeSnapshot { lease_renew_time: Some(t(-400)), ..node() };
    let seen = step(&spec, &verified, power(PowerState::On), ctx(5, &renewed));
    let progress = seen.status.progress.clone().unwrap();
    assert_eq!(progress.lease_change_seen_at, Some(MicroTime(t(5))));
    assert_eq!(progress.boot_change_seen_at, None);
    // Later sights keep the first; a new boot is dated when first seen.
    let booted = NodeSnapshot { boot_id: "boot-2".into(), ..renewed };
    let later = step(&spec, &State::from(&seen), power(PowerState::On), ctx(9, &booted));
    let progress = later.status.progress.clone().unwrap();
    assert_eq!(
        (progress.lease_change_seen_at, progress.boot_change_seen_at),
        (Some(MicroTime(t(5))), Some(MicroTime(t(9))))
    );
    // Another new boot is dated when it is first seen, not when the first one was.
    let again = NodeSnapshot { boot_id: "boot-3".into(), ..node() };
    let third = step(&spec, &State::from(&later), power(PowerState::On), ctx(12, &again));
    let progress = third.status.progress.unwrap();
    assert_eq!((progress.boot_seen.as_deref(), progress.boot_change_seen_at), (Some("boot-3"), Some(MicroTime(t(12)))));
    // The Lease as admitted is no sight of anything.
    let quiet = step(&spec, &verified, power(PowerState::On), ctx(5, &node()));
    assert_eq!(quiet.status.progress.unwrap().lease_change_seen_at, None);
}

#[test]
fn a_machine_already_off_is_judged_against_the_lease_admission_saw() {
    let spec = spec();
    let renewed = NodeSnapshot { lease_renew_time: Some(t(0)), ..node() };
    // Admitted at t(-100)'s Lease; it was renewed before the first reading found the machine Off.
    let decision = step(&spec, &verified(&spec), power(PowerState::Off), ctx(1, &renewed));
    let baseline = decision.status.progress.as_ref().unwrap().lease_renew_time_at_power_off.clone();
    assert_eq!(baseline, Some(MicroTime(t(-100))), "the renewal since admission is not the baseline");
    let status = persisted(&decision.status);
    assert!(matches!(lease_unrenewed_since_power_off(&status, &renewed), Err(NodeRefusal::LeaseRenewed { .. })));
}

#[test]
fn an_adopted_release_with_reboot_ends_as_an_off_release_and_never_waits_for_a_power_on() {
    let spec = CoronerRemediationSpec { action: FenceAction::Reboot, ..spec() };
    let node = node();
    let adopt = Verdict::Adopt(crate::gates::Adoptable {
        from: "worker-1-first".into(),
        released_at: t(-5),
        strategy: crate::api::RemediationStrategy::ResourceDeletion,
    });
    let decision = step(&spec, &State::default(), Observation::Admission(adopt), ctx(0, &node));
    let phase = decision.status.phase.unwrap();
    assert_eq!(phase, Phase::Done, "the sibling left the machine off; nobody sends On");
    assert!(!phase.being_fenced(), "a later remediation of the node is not blocked by it");
    assert_eq!(succeeded(&decision.status), ("True".into(), "PowerOnNotOwned".into()));
    assert_eq!(conditions::status_of(&decision.status.conditions, contract::POWERED_ON), Some("False"));
    assert_eq!(decision.reset, None);
    let release = decision.status.evidence.as_ref().unwrap().release.as_ref().unwrap();
    assert_eq!((release.kind, release.adopted_from.as_deref()), (ReleaseKind::Adopted, Some("worker-1-first")));
    assert_eq!(
        release.strategy,
        crate::api::RemediationStrategy::ResourceDeletion,
        "the record says how the sibling released, whatever this remediation's own strategy"
    );
}

#[test]
fn a_release_on_the_node_that_status_does_not_record_outlives_the_attempts_deadline() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let releasing = releasing(&spec);
    // The process that wrote the release stopped before its status write; the next one's look at the
    // Node finds the release, long past the attempt's deadline, and its reads then fail.
    let on_node = NodeSnapshot { released_at: Some(t(5)), ..node() };
    let late = ctx(600, &on_node);
    assert_eq!(plan_of(&spec, &releasing, late), Plan::RecordRelease);
    let failed = step(&spec, &releasing, Observation::Unavailable("the apiserver answered 503".into()), late);
    assert_eq!(failed.status.phase, Some(Phase::Releasing), "the release stands: recorded first, never forgotten");
    let recorded = step(&spec, &State::from(&failed), released(), late);
    assert!(recorded.status.evidence.as_ref().unwrap().release.is_some());
    // Without the release on the Node, the same failure at that time ends the attempt.
    let none = step(&spec, &releasing, Observation::Unavailable("503".into()), ctx(600, &node()));
    assert_eq!(succeeded(&none.status).1, "ReleaseNotWritten");
}

#[test]
fn a_release_that_keeps_expiring_ends_the_attempt_at_its_deadline() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let expired = Observation::Release(Err(ReleaseRefusal::ProofExpired));
    let releasing = State::from(&release_step(&spec, expired.clone()));
    assert_eq!(releasing.status.phase, Some(Phase::Releasing));
    let late = step(&spec, &releasing, expired, ctx(62, &node()));
    assert_eq!(succeeded(&late.status), ("False".into(), "ReleaseNotWritten".into()));
}

#[test]
fn a_proof_that_lapses_once_the_attempt_is_up_ends_the_release_not_written_and_is_not_proven_again() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let node = node();
    let releasing = releasing(&spec);
    // Within the attempt, Off after a gap proves the machine off again; if time runs out before the
    // new proof, the release's reason still ends the attempt.
    let early = step(&spec, &releasing, power(PowerState::Off), ctx(30, &node));
    assert_eq!(early.status.phase, Some(Phase::ConfirmingOff));
    let out = step(&spec, &State::from(&early), power(PowerState::Off), ctx(62, &node));
    assert_eq!(succeeded(&out.status), ("False".into(), "ReleaseNotWritten".into()));
    // A reading of anything but Off after the lapse: the power-off is the cause again.
    let on = step(&spec, &State::from(&early), power(PowerState::On), ctx(31, &node));
    let late = step(&spec, &State::from(&on), power(PowerState::Off), ctx(62, &node));
    assert_eq!(succeeded(&late.status), ("False".into(), "PowerOffNotConfirmed".into()));
    // Past it, the release ran out of time: the cause is the release, not the power-off.
    let late = step(&spec, &releasing, power(PowerState::Off), ctx(62, &node));
    assert_eq!(succeeded(&late.status), ("False".into(), "ReleaseNotWritten".into()));
    assert_eq!(late.reset, None);
}

pub(super) fn off_through(through: DeviceMark) -> Observation {
    match power(PowerState::Off) {
        Observation::Power(Ok(reading)) => Observation::Power(Ok(PowerReading { through, ..reading })),
        other => other,
    }
}

#[test]
fn a_binding_change_after_the_reset_ends_the_attempt_and_the_next_proves_the_identity_again() {
    let spec = spec();
    let node = node();
    let first = step(&spec, &confirming(&spec), off_through(DeviceMark::default()), ctx(2, &node));
    assert_eq!(first.memory.run.map(|r| r.count), Some(1));
    let changed =
        step(&spec, &State::from(&first), off_through(DeviceMark { generation: 1, serial: 1 }), ctx(3, &node));
    assert_eq!(changed.status.phase, Some(Phase::VerifyingIdentity), "a proof comes from where the reset went");
    assert_eq!(succeeded(&changed.status), ("Unknown".into(), "AttemptFailed".into()));
    assert!(changed.status.evidence.as_ref().unwrap().identity.is_none());
    assert_eq!(changed.reset, None);
}

#[test]
fn new_credentials_restart_the_run_at_the_next_reading() {
    let spec = spec();
    let node = node();
    let first = step(&spec, &confirming(&spec), off_through(DeviceMark::default()), ctx(2, &node));
    let second = step(&spec, &State::from(&first), off_through(DeviceMark::default()), ctx(3, &node));
    assert_eq!(second.memory.run.map(|r| r.count), Some(2));
    // The Secret changed: a client built anew answers; its reading is the first of a new run.
    let rebuilt =
        step(&spec, &State::from(&second), off_through(DeviceMark { generation: 0, serial: 1 }), ctx(4, &node));
    assert_eq!(rebuilt.status.phase, Some(Phase::ConfirmingOff));
    assert_eq!(rebuilt.memory.run.map(|r| r.count), Some(1));
}

#[test]
fn a_phase_deadline_runs_on_this_process_clock_and_twice_as_long_on_the_wall_clock() {
    let deadline = StdDuration::from_secs(60);
    let wall = |secs: i64| Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs);
    let mono = StdDuration::from_secs;
    // This process's own clock: the deadline itself.
    assert!(!past_deadline(Some(mono(10)), mono(69), None, wall(0), deadline));
    assert!(past_deadline(Some(mono(10)), mono(70), None, wall(0), deadline));
    // A process that resumed the phase starts afresh: a failover does not eat the attempt...
    assert!(!past_deadline(Some(mono(0)), mono(5), Some(wall(0)), wall(100), deadline));
    // ...but the wall clock since the persisted start bounds the whole, even for no process at all.
    assert!(past_deadline(Some(mono(0)), mono(5), Some(wall(0)), wall(120), deadline));
    assert!(past_deadline(None, mono(0), Some(wall(0)), wall(120), deadline));
    assert!(!past_deadline(None, mono(0), None, wall(10_000), deadline), "nothing started, nothing elapses");
}

#[test]
fn a_lease_renewed_right_after_the_release_write_takes_the_taint_back_at_once() {
    let lab = lab(off_spec(), machine(true));
    lab.renew_lease_right_after_the_release();
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "FenceDidNotTakeEffect".into()));
    assert!(status.evidence.as_ref().unwrap().release.is_none(), "no release is recorded");
    let node = lab.world(|t| t.nodes["worker-1"].clone());
    let keys: Vec<String> = node.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.key).collect();
    assert!(!keys.iter().any(|k| k == crate::taints::OUT_OF_SERVICE_KEY), "the taint is taken back: {keys:?}");
}

#[test]
fn the_exclusion_label_before_the_taint_goes_ends_a_reboot_as_an_off_release() {
    let spec = spec();
    let waiting = State::from(&release_step(&spec, released()));
    let mut excluded = node();
    excluded.excluded = Some("maintenance".into());
    let done = step(&spec, &waiting, Observation::Workloads(Workloads::default()), ctx(7, &excluded));
    assert_eq!((done.status.phase, done.reset), (Some(Phase::Done), None));
    assert!(!out_of_service_taint_ends(&done.status), "the out-of-service taint stays, as after action Off");
    assert_eq!(succeeded(&done.status), ("True".into(), "PowerOnExcluded".into()));
    assert_eq!(conditions::status_of(&done.status.conditions, contract::POWERED_ON), Some("False"));
}

#[test]
fn the_exclusion_label_in_powering_on_means_no_on_and_no_wait() {
    let spec = spec();
    let state = powering_on(&spec);
    let mut excluded = node();
    excluded.excluded = Some(String::new());
    let done = step(&spec, &state, power(PowerState::Off), ctx(8, &excluded));
    assert_eq!((done.status.phase, done.reset), (Some(Phase::Done), None), "no On, no wait for one");
    assert_eq!(succeeded(&done.status), ("True".into(), "PowerOnExcluded".into()));
    // Checked again right before the request: a refusal there ends it the same way.
    let decided = step(&spec, &state, power(PowerState::Off), ctx(8, &node()));
    assert_eq!(decided.reset, Some(ResetType::On));
    let refusal = NodeRefusal::Excluded { node: "worker-1".into(), value: String::new() };
    let refused = step(&spec, &State::from(&decided), Observation::ActionRefused(refusal), ctx(8, &excluded));
    assert_eq!((refused.status.phase, refused.reset), (Some(Phase::Done), None));
    assert!(refused.status.progress.as_ref().and_then(|p| p.intent.as_ref()).is_none(), "the unsent On is withdrawn");
}

#[test]
fn an_off_whose_status_state_says_the_bmc_does_not_know_breaks_the_run_and_is_named() {
    let spec = spec();
    let node = node();
    let state = State::from(&step(&spec, &confirming(&spec), power(PowerState::Off), ctx(2, &node)));
    assert!(state.memory.run.is_some());
    let unknown = step(&spec, &state, power(PowerState::OffUnknown("Absent".into())), ctx(3, &node));
    assert_eq!((unknown.status.phase, unknown.memory.run), (Some(Phase::ConfirmingOff), None));
    let progress = unknown.status.progress.unwrap();
    assert_eq!(progress.last_error.as_deref(), Some("power reads Off with Status.State Absent"));
    assert_eq!(progress.last_power_state.as_deref(), Some("Off with Status.State Absent"));
}

pub(super) fn unavailable() -> Observation {
    Observation::Unavailable("Kubernetes API unavailable: Secret bmc-worker-1 is forbidden".into())
}

pub(super) fn last_error(status: &CoronerRemediationStatus) -> String {
    status.progress.as_ref().and_then(|p| p.last_error.clone()).unwrap_or_default()
}

#[test]
fn a_phase_whose_reads_keep_failing_ends_at_its_deadline_with_the_cause() {
    let spec = spec();
    let node = node();
    let early = step(&spec, &confirming(&spec), unavailable(), ctx(2, &node));
    assert_eq!(early.status.phase, Some(Phase::ConfirmingOff));
    assert!(last_error(&early.status).contains("Secret bmc-worker-1 is forbidden"));
    let over = step(&spec, &State::from(&early), unavailable(), ctx(62, &node));
    assert_eq!(succeeded(&over.status), ("Unknown".into(), "AttemptFailed".into()));
    let message = &conditions::find(&over.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("Secret bmc-worker-1 is forbidden"), "{message}");
    assert!(over.reset.is_none());
}

#[test]
fn an_identity_check_whose_reads_keep_failing_ends_its_attempt_at_the_deadline() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let node = node();
    let admitted = step(
        &spec,
        &State::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    let early = step(&spec, &State::from(&admitted), unavailable(), ctx(30, &node));
    assert_eq!(early.status.phase, Some(Phase::VerifyingIdentity));
    let over = step(&spec, &State::from(&early), unavailable(), ctx(61, &node));
    assert_eq!(succeeded(&over.status), ("False".into(), "ApiUnavailable".into()));
    let message = &conditions::find(&over.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("Secret bmc-worker-1 is forbidden") && message.contains("no power action"), "{message}");
}

#[test]
fn workloads_that_cannot_be_listed_wait_until_the_release_timeout_then_power_on_with_the_cause() {
    let spec = spec();
    let node = node();
    let waiting = State::from(&release_step(&spec, released()));
    let still = step(&spec, &waiting, unavailable(), ctx(6, &node));
    assert_eq!(still.status.phase, Some(Phase::WaitingForRelease));
    let timed_out = step(&spec, &waiting, unavailable(), ctx(5 + 300, &node));
    assert_eq!(timed_out.status.phase, Some(Phase::PoweringOn));
    let notice = timed_out.notices.iter().find(|n| n.reason == "ReleaseTimeout").unwrap();
    assert!(notice.message.contains("is unknown") && notice.message.contains("forbidden"), "{}", notice.message);
}

#[test]
fn a_power_on_whose_reads_keep_failing_leaves_the_node_fenced_at_the_deadline() {
    let spec = spec();
    let node = node();
    let state = powering_on(&spec);
    let early = step(&spec, &state, unavailable(), ctx(7, &node));
    assert_eq!(early.status.phase, Some(Phase::PoweringOn));
    let over = step(&spec, &State::from(&early), unavailable(), ctx(6 + 61, &node));
    assert_eq!(over.status.phase, Some(Phase::Done), "no On was sent: it ends as an Off release does");
    assert_eq!(conditions::status_of(&over.status.conditions, contract::POWERED_ON), Some("False"));
    assert!(over.reset.is_none());
}

#[test]
fn a_fence_whose_secret_reads_are_refused_frees_its_slot_at_the_deadlines_with_the_cause() {
    // RBAC on the credentials Secret taken away after the ForceOff: no reading can be taken.
    let lab = lab(spec(), machine(true));
    run_until_off_readings(&lab, 1);
    lab.refuse_secret_reads();
    let status = run(&lab);
    assert!(phase_of(&status).is_terminal(), "{:?}", lab.phases());
    let failed = conditions::find(&status.conditions, contract::SUCCEEDED).unwrap();
    assert_eq!((failed.status.as_str(), failed.reason.as_str()), ("False", "PowerOffNotConfirmed"));
    assert!(failed.message.contains("secrets") && failed.message.contains("forbidden"), "{}", failed.message);
    assert!(lab.reasons().contains(&"AttemptFailed".to_owned()));
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
}

#[test]
fn a_power_on_read_before_coroner_s_on_was_answered_is_not_taken_for_its_own_and_goes_to_the_guard() {
    let spec = spec();
    let node = node();
    // The taint is off and the On decided (its intent persisted), but no answer came: a failover, or
    // the apiserver failing before the request.
    let decided = step(&spec, &powering_on(&spec), power(PowerState::Off), ctx(7, &node));
    assert_eq!(decided.reset, Some(ResetType::On));
    let seen = step(&spec, &State::from(&decided), power(PowerState::On), ctx(8, &node));
    assert_eq!(seen.status.phase, Some(Phase::PoweringOn), "not PoweredOn");
    assert_eq!(conditions::status_of(&seen.status.conditions, contract::POWERED_ON), None);
    assert_eq!((seen.reset, seen.memory.sighted_on.clone()), (None, Some(PowerState::On)));
    assert!(seen.memory.guarded_at.is_none(), "the guard reads at once");
    // Once the On is answered, On is coroner's own.
    let answered = Observation::ResetAnswered { action: ResetType::On, result: Ok(204) };
    let sent = step(&spec, &State::from(&decided), answered, ctx(8, &node));
    let on = step(&spec, &State::from(&sent), power(PowerState::On), ctx(9, &node));
    assert_eq!(on.status.phase, Some(Phase::WaitingForNode));
    assert_eq!(conditions::status_of(&on.status.conditions, contract::POWERED_ON), Some("True"));
}

#[test]
fn an_endpoint_edited_between_the_reading_and_the_force_off_gets_no_request_and_identity_is_proven_again() {
    let lab = lab(off_spec(), machine(true));
    lab.edit_endpoint_before_the_next_power_action();
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done, "{:?}", lab.reasons());
    let reasons = lab.reasons();
    let verified = reasons.iter().filter(|r| *r == "IdentityVerified").count();
    assert_eq!(verified, 2, "proven again through the edited binding: {reasons:?}");
    assert!(reasons.contains(&"AttemptFailed".to_owned()));
    // The one ForceOff went after the second proof: the first decision sent nothing.
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
    let second_proof = reasons.iter().rposition(|r| r == "IdentityVerified").unwrap();
    let sent = reasons.iter().position(|r| r == "ForceOffSent").unwrap();
    assert!(sent > second_proof, "{reasons:?}");
}

#[test]
fn new_credential_values_between_the_reading_and_the_request_restart_the_run_and_the_next_reading_decides() {
    let spec = spec();
    let node = node();
    let decided = decided(&spec);
    let proven = DeviceMark { generation: 1, serial: 7 };
    let rotated = Observation::DeviceChanged { proven, now: DeviceMark { serial: 8, ..proven } };
    let after = step(&spec, &decided, rotated, ctx(1, &node));
    assert_eq!(after.status.phase, Some(Phase::PoweringOff), "the next reading decides again");
    assert!(after.status.progress.as_ref().unwrap().intent.is_none(), "the unsent ForceOff is withdrawn");
    assert_eq!((after.reset, after.requeue), (None, Some(StdDuration::ZERO)));
    assert!(last_error(&after.status).contains("credentials changed"));
    // The next reading, through the new credentials, reads On: the ForceOff is decided again.
    let again = step(&spec, &State::from(&after), power(PowerState::On), ctx(2, &node));
    assert_eq!(again.reset, Some(ResetType::ForceOff));
    // So it is after a ForceOff that found no device to go to.
    let unsent = Observation::ActionUnsent(unreachable());
    let withdrawn = step(&spec, &decided, unsent, ctx(1, &node));
    assert_eq!(withdrawn.status.phase, Some(Phase::PoweringOff));
    let again = step(&spec, &State::from(&withdrawn), power(PowerState::On), ctx(2, &node));
    assert_eq!(again.reset, Some(ResetType::ForceOff));
    let edited = Observation::DeviceChanged { proven, now: DeviceMark { generation: 2, ..proven } };
    let ended = step(&spec, &decided, edited, ctx(1, &node));
    assert_eq!(succeeded(&ended.status), ("Unknown".into(), "AttemptFailed".into()));
    assert_eq!(ended.status.phase, Some(Phase::VerifyingIdentity));
}

#[test]
fn no_on_goes_through_a_binding_whose_endpoint_changed_after_the_release() {
    let spec = spec();
    let node = node();
    let decided = State::from(&step(&spec, &powering_on(&spec), power(PowerState::Off), ctx(7, &node)));
    assert!(decided.status.progress.as_ref().unwrap().intent.is_some());
    let proven = DeviceMark { generation: 1, serial: 7 };
    let edited = Observation::DeviceChanged { proven, now: DeviceMark { generation: 2, ..proven } };
    let stopped = step(&spec, &decided, edited, ctx(8, &node));
    assert_eq!(stopped.status.phase, Some(Phase::WaitingForNode));
    assert_eq!(stopped.reset, None);
    let powered_on = conditions::find(&stopped.status.conditions, contract::POWERED_ON).unwrap();
    assert_eq!((powered_on.status.as_str(), powered_on.reason.as_str()), ("False", "BindingChanged"));
}

#[test]
fn a_bmc_fits_the_gap_rule_while_each_read_and_the_loop_s_own_time_take_at_most_poll_interval_and_one_second() {
    let second = StdDuration::from_secs(1);
    // The loop's own 250 ms between readings leaves 1.75 s for a read at pollInterval 1 s.
    assert!(read_fits(StdDuration::from_millis(1750), second));
    assert!(!read_fits(StdDuration::from_millis(1751), second));
    assert!(read_fits(StdDuration::from_millis(2500), 2 * second));
}

#[test]
fn an_on_that_found_no_device_to_go_to_is_withdrawn_and_the_release_still_stands() {
    let spec = spec();
    let node = node();
    let decided = State::from(&step(&spec, &powering_on(&spec), power(PowerState::Off), ctx(7, &node)));
    let failure = BmcFailure {
        transient: false,
        reason: Reason::BindingInvalid,
        message: "BmcBinding worker-1 was deleted during the fence".into(),
    };
    let unsent = step(&spec, &decided, Observation::ActionUnsent(failure), ctx(8, &node));
    let progress = unsent.status.progress.as_ref().unwrap();
    assert!(progress.intent.is_none(), "withdrawn: nothing was sent");
    assert!(unsent.status.evidence.as_ref().unwrap().power_on.as_ref().and_then(|p| p.sent_at.clone()).is_none());
    assert!(crate::guard::release_stands(&unsent.status, &node), "no On answered: the guard still guards");
    assert!(progress.last_error.as_deref().unwrap().contains("nothing sent"));
}

#[test]
fn after_the_release_a_reading_through_an_edited_binding_sends_no_on_even_in_a_new_process() {
    let spec = spec();
    let node = node();
    let state = powering_on(&spec);
    assert_eq!(state.status.evidence.as_ref().unwrap().identity.as_ref().unwrap().binding_generation, Some(0));
    // A new process: nothing in memory but what status records.
    let fresh = State { memory: Memory::default(), ..state };
    let edited = Observation::Power(Ok(PowerReading {
        uuid: NODE_UUID.into(),
        power_state: PowerState::Off,
        sampled: Sampled::default(),
        through: DeviceMark { generation: 5, serial: 0 },
    }));
    let stopped = step(&spec, &fresh, edited, ctx(7, &node));
    assert_eq!((stopped.status.phase, stopped.reset), (Some(Phase::WaitingForNode), None));
    let powered_on = conditions::find(&stopped.status.conditions, contract::POWERED_ON).unwrap();
    assert_eq!((powered_on.status.as_str(), powered_on.reason.as_str()), ("False", "BindingChanged"));
}

#[test]
fn a_release_time_written_by_a_clock_that_ran_ahead_cannot_hold_the_wait_for_release() {
    let spec = spec();
    let node = node();
    let mut waiting = State::from(&release_step(&spec, released()));
    assert_eq!(waiting.status.phase, Some(Phase::WaitingForRelease));
    // The releasing process's clock ran an hour ahead; this process starts with no memory of it.
    let release = waiting.status.evidence.as_mut().and_then(|e| e.release.as_mut()).unwrap();
    release.released_at = MicroTime(t(3600));
    waiting.memory = Memory::default();
    let holding = || Observation::Workloads(Workloads { blocking_pods: 1, volume_attachments: 0 });
    let first = step(&spec, &waiting, holding(), ctx(10, &node));
    assert_eq!(first.status.phase, Some(Phase::WaitingForRelease), "it waits releaseTimeout itself");
    let timeout = i64::try_from(spec.release_timeout.get().as_secs()).unwrap();
    let later = step(&spec, &State::from(&first), holding(), ctx(10 + timeout, &node));
    assert_eq!(later.status.phase, Some(Phase::PoweringOn), "then powers on regardless, as at the timeout");
}

#[test]
fn a_refusal_before_any_pod_went_drops_the_begun_record_and_releases_nothing() {
    let spec = deletion_spec();
    let node = node();
    let begun = deletion_begun(&spec);
    assert!(begun.memory.begun_untouched, "this process wrote it and sent nothing since");
    let renewed = NodeRefusal::LeaseRenewed { node: "worker-1".into(), renewed: t(4) };
    let refused = step(&spec, &begun, Observation::Release(Err(ReleaseRefusal::Node(renewed))), ctx(5, &node));
    assert_eq!(refused.status.phase, Some(Phase::Failed));
    assert!(refused.status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_none(), "no pod went: no release");
    let message = &conditions::find(&refused.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("nothing released"), "{message}");
}

#[test]
fn after_the_deletion_began_a_machine_that_reads_on_is_the_guards_at_once() {
    let spec = deletion_spec();
    let node = node();
    // Another process: it cannot know whether pods went. Attempts are left, yet the fence ends so
    // that the guard (which no hold delays) switches the machine off.
    let begun = State { memory: Memory::default(), ..deletion_begun(&spec) };
    assert!(spec.retry.count > 1);
    let on = step(&spec, &begun, power(PowerState::On), ctx(6, &node));
    assert_eq!((on.status.phase, on.reset), (Some(Phase::Failed), None));
    assert!(on.status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_some(), "recorded: the guard's now");
}

#[test]
fn a_machine_off_after_a_force_off_whose_answer_was_never_recorded_is_not_called_already_off() {
    let node = node();
    // A new attempt reads Off while the ForceOff decided earlier has no recorded answer (W1: held,
    // then lost with its process): it may have gone out.
    let mut state = decided(&spec());
    state.status.phase = Some(Phase::PoweringOff);
    let off = step(&spec(), &state, power(PowerState::Off), ctx(2, &node));
    assert_eq!(off.status.phase, Some(Phase::ConfirmingOff));
    assert!(!off.status.evidence.unwrap().power_off.unwrap().already_off);
}

#[test]
fn the_reading_that_completes_settle_waits_for_the_moment_it_does_instead_of_needing_another_poll() {
    let spec = CoronerRemediationSpec::default();
    let ms = StdDuration::from_millis;
    let run = Run {
        first: Sampled { requested: ms(1000), answered: ms(1010) },
        last: Sampled { requested: ms(2000), answered: ms(2008) },
        count: 2,
    };
    let memory = Memory { run: Some(run), last_requested: Some(ms(2000)), ..Memory::default() };
    // A poll after the last request (3.000 s) the run would span 1.990 s of settle's 2 s: the reading
    // waits until 3.010 s, and completes the proof.
    assert_eq!(next_reading_due(&spec, &memory), Some(ms(3010)));
    // No run: a poll after the last request.
    let bare = Memory { last_requested: Some(ms(2000)), ..Memory::default() };
    assert_eq!(next_reading_due(&spec, &bare), Some(ms(3000)));
    // Short of settle by more than a tenth of the poll: a poll at a time, the cadence asked for.
    let long = CoronerRemediationSpec { settle: crate::api::Duration::from_secs(60), ..spec.clone() };
    assert_eq!(next_reading_due(&long, &memory), Some(ms(3000)));
    let late = Memory { last_requested: Some(ms(1500)), ..memory };
    assert_eq!(next_reading_due(&spec, &late), Some(ms(2500)), "the run would span settle only 510 ms later");
}

/// Whether the gates queued the fence.
pub(super) fn queued(status: &CoronerRemediationStatus) -> bool {
    conditions::find(&status.conditions, contract::SUCCEEDED).is_some_and(|c| c.reason == Reason::Queued.as_str())
}

/// One reconcile of worker-1 from the cached remediation, and the requests it sent the API server.
async fn apply_counted(lab: &Lab<Scripted>) -> (crate::driver::Next, u64) {
    let cached = lab.world(|t| t.remediation("worker-1")).unwrap();
    let before = lab.requests();
    let next = crate::driver::apply(lab, lab.local(), &cached).await.unwrap();
    (next, lab.requests() - before)
}

/// Issue 23 (P3): a remediation queued behind three running fences sends the API server nothing while
/// nothing its place depends on moved; a slot freeing in the store, or a wake-up on purpose, makes it
/// look (and a freed slot admits it).
#[tokio::test]
async fn a_queued_remediation_sends_no_request_until_something_its_place_depends_on_moves() {
    let lab = lab(off_spec(), machine(true));
    lab.world(|t| {
        for n in ["w-1", "w-2", "w-3"] {
            t.add_node_as(n, "uuid", &format!("{n}-boot"), conditions::UNKNOWN, &[]);
            t.create_remediation(n, n, &off_spec());
            let holding = CoronerRemediationStatus { phase: Some(Phase::ConfirmingOff), ..Default::default() };
            let version = t.remediation(n).and_then(|r| r.metadata.resource_version);
            t.write_status(n, version.as_deref(), &holding).unwrap();
        }
    });
    lab.run_until(queued).await;
    let apply = || apply_counted(&lab);
    // The look that queued it is remembered: the next finds nothing moved.
    assert_eq!(apply().await, (crate::driver::Next::Requeue(crate::gates::QUEUED_RECHECK), 0));
    assert_eq!(apply().await.1, 0);

    lab.local().poke("worker-1");
    assert!(apply().await.1 > 0, "a wake-up on purpose looks");
    assert_eq!(apply().await.1, 0);

    // A slot frees; no wake-up reached it (lost): the store shows it, so the fallback looks.
    lab.world(|t| {
        let version = t.remediation("w-1").and_then(|r| r.metadata.resource_version);
        let done = CoronerRemediationStatus { phase: Some(Phase::Done), ..Default::default() };
        t.write_status("w-1", version.as_deref(), &done).unwrap();
    });
    let (_, looked) = apply().await;
    assert!(looked > 0);
    assert_admitted(&lab.status());
}

/// Admitted and under way: past the gates, not failed.
pub(super) fn assert_admitted(status: &CoronerRemediationStatus) {
    let phase = status.phase.unwrap_or_default();
    assert!(!matches!(phase, Phase::Pending | Phase::Failed), "{phase:?}");
    assert!(status.evidence.as_ref().and_then(|e| e.node.as_ref()).is_some());
}

/// Issue 23 (P3): a remediation queued by a full fence window sleeps without requests until the
/// moment the window frees, however far away (nothing else wakes it then), and is admitted then.
#[tokio::test]
async fn a_remediation_the_window_queues_looks_when_the_window_frees() {
    let lab = lab(off_spec(), machine(true));
    // Five fences admitted a minute ago, done: the window (5 per 10 minutes) is full for 9 more.
    lab.world(|t| {
        let admitted = t.wall(t.now) - SignedDuration::from_secs(60);
        for n in ["w-1", "w-2", "w-3", "w-4", "w-5"] {
            t.add_node_as(n, "uuid", &format!("{n}-boot"), conditions::UNKNOWN, &[]);
            t.create_remediation(n, n, &off_spec());
            let node = crate::api::NodeEvidence {
                name: n.into(),
                uid: n.into(),
                system_uuid: "uuid".into(),
                boot_id: String::new(),
                ready: "Unknown".into(),
                lease_present: false,
                lease_renew_time: None,
                admitted_at: MicroTime(admitted),
                binding: None,
            };
            let done = CoronerRemediationStatus {
                phase: Some(Phase::Done),
                evidence: Some(crate::api::Evidence { node: Some(node), ..Default::default() }),
                ..Default::default()
            };
            let version = t.remediation(n).and_then(|r| r.metadata.resource_version);
            t.write_status(n, version.as_deref(), &done).unwrap();
        }
    });
    lab.run_until(queued).await;
    let apply = || apply_counted(&lab);
    // Each fallback a minute apart finds nothing moved, for nine minutes.
    for _ in 0..8 {
        assert_eq!(apply().await, (crate::driver::Next::Requeue(crate::gates::QUEUED_RECHECK), 0));
        lab.clock().sleep(crate::gates::QUEUED_RECHECK).await;
    }
    let (_, quiet) = apply().await;
    assert_eq!(quiet, 0, "still within the window");
    lab.clock().sleep(crate::gates::QUEUED_RECHECK).await;
    let (_, looked) = apply().await;
    assert!(looked > 0, "the window freed: it looks");
    assert_admitted(&lab.status());
}

/// A2: a binding deleted and re-created identically (a new object without a status) keeps, at
/// admission, the verification kept for its node at exactly that content under coroner's seal; a
/// forged seal, or a verification of another content, counts for nothing.
#[test]
fn a_binding_re_created_identically_keeps_its_kept_verification_and_a_forged_one_counts_for_nothing() {
    use crate::verification::KeptVerification;
    for (sealed, same_content, counts) in [(true, true, true), (false, true, false), (true, false, false)] {
        let lab = lab(off_spec(), machine(true));
        let content = lab.device_content() + u64::from(!same_content);
        lab.world(|t| {
            let mut kept = KeptVerification {
                content: crate::words::digest::content_hex(content),
                at: t.wall(t.now) - secs(600),
                uid: "uid-of-the-deleted-binding".into(),
                seal: String::new(),
            };
            kept.seal = if sealed { crate::sim::world::seal_kept("worker-1", &kept) } else { "0123abcd".into() };
            t.kept_verifications.insert("worker-1".into(), kept);
            // Re-created: another object, never verified.
            t.bindings.get_mut("worker-1").unwrap().status = None;
        });
        let admitted = |s: &CoronerRemediationStatus| s.evidence.as_ref().and_then(|e| e.node.as_ref()).is_some();
        let status = futures::executor::block_on(lab.run_until(admitted));
        let binding = status.evidence.unwrap().node.unwrap().binding.unwrap();
        let earlier = binding.verified_by_earlier_object.as_deref();
        assert_eq!(earlier.is_some(), counts, "sealed {sealed}, same content {same_content}: {binding:?}");
        if counts {
            assert_eq!(earlier, Some("uid-of-the-deleted-binding"));
            assert_eq!(binding.verified_content, binding.content);
        } else {
            assert_eq!(binding.verified_at, None);
        }
    }
}
