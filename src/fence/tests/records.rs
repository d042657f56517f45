//! The fence's records: what a reading, a reader, a decision and a write leave in status and in
//! memory, and what is said of them (W1, A1's readings, the Events).

use super::{endings::unavailable, *};

#[test]
fn a_spec_edited_mid_fence_changes_nothing_the_fence_was_admitted_with() {
    let lab = lab(off_spec(), machine(true));
    run_until_off_readings(&lab, 1);
    lab.world(|t| {
        let remediation = t.remediations.values_mut().next().unwrap();
        remediation.spec.action = FenceAction::Reboot;
        remediation.metadata.generation = remediation.metadata.generation.map(|g| g + 1);
    });
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done);
    assert_eq!(lab.device().resets(), [ResetType::ForceOff], "no power-on: the fence was admitted with Off");
}

#[test]
fn a_reading_counts_in_the_run_even_when_its_status_write_failed() {
    let at = |ms: u64| Sampled { requested: Mono::from_millis(ms), answered: Mono::from_millis(ms + 10) };
    let run = |first: u64, last: u64, count: u32| Some(Run { first: at(first), last: at(last), count });
    let old = Memory { run: run(0, 1000, 2), proof: run(0, 1000, 2), ..Memory::default() };
    let broken = Memory { run: None, proof: None, last_requested: Some(Mono::from_millis(2000)), ..old.clone() };
    let kept = memory_after_failed_write(&old, &broken);
    assert_eq!((kept.run, kept.proof), (None, None), "the run ended by the reading is not kept");
    assert_eq!(kept.last_requested, Some(Mono::from_millis(2000)));

    let restarted = Memory { run: run(2000, 2000, 1), proof: None, ..old.clone() };
    assert_eq!(memory_after_failed_write(&old, &restarted).run, None, "nor is a run restarted by it");

    // Off readings live in memory (W1): one that extended the run stays in it, so the next reading is
    // judged against it, not against the one before (seed 129243: a dropped reading opened a gap).
    let extended = Memory { run: run(0, 2000, 3), ..old.clone() };
    assert_eq!(memory_after_failed_write(&old, &extended).run, extended.run, "an extension stays taken");

    let running = Memory { proof: None, ..old.clone() };
    let proven = Memory { run: None, proof: run(0, 2000, 3), ..old.clone() };
    let kept = memory_after_failed_write(&running, &proven);
    assert_eq!((kept.run, kept.proof), (proven.proof, None), "a run that became the proof goes on as the run");
}

#[test]
fn a_deposed_process_s_answer_never_marks_another_process_s_intent_answered() {
    let spec = spec();
    let node = node();
    // The intent is this process's (ME); another process's request was answered meanwhile.
    let mine = decided(&spec);
    let other = Context { instance: "p9/1", ..ctx(1, &node) };
    let answer = Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) };
    let after = step(&spec, &mine, answer, other);
    let intent = after.status.progress.as_ref().unwrap().intent.clone().unwrap();
    assert_eq!((intent.instance.as_str(), intent.result), (ME, None), "still to be sent, under its own checks");
    let resets = &after.status.evidence.as_ref().unwrap().power_off.as_ref().unwrap().resets;
    assert_eq!(resets.len(), 1, "the request that was sent is recorded all the same");
}

#[test]
fn the_node_gets_the_warnings_the_release_the_power_on_and_the_guard_not_every_step() {
    let notice = |warning, reason: &str| Notice { warning, reason: reason.into(), message: String::new() };
    for reason in ["NodeFenced", "PowerOnSent", "PoweredOn", "NodeRecovered", "GuardForceOffSent"] {
        assert!(for_the_node(&notice(false, reason)), "{reason}");
    }
    for reason in ["PowerOffNotConfirmed", "NodeLeaseFresh", crate::guard::POWERED_ON, crate::guard::BLIND] {
        assert!(for_the_node(&notice(true, reason)), "a warning: {reason}");
    }
    let steps = ["RemediationStarted", "VerifyingIdentity", "IdentityVerified", "ConfirmingOff", "ForceOffSent"];
    for reason in steps.into_iter().chain(["PowerOffProven"]) {
        assert!(!for_the_node(&notice(false, reason)), "a step, on the remediation only: {reason}");
    }
}

#[test]
fn a_reading_of_life_outlives_the_attempt_it_ends() {
    let spec = spec();
    let node = node();
    // The machine reads On once the attempt's deadline has passed: the next attempt starts afresh,
    // but what the machine last read is this reading, not the Off before it (A1).
    let state = State::from(&step(&spec, &confirming(&spec), power(PowerState::Off), ctx(2, &node)));
    let late = step(&spec, &state, power(PowerState::On), ctx(500, &node));
    assert_eq!(late.status.progress.as_ref().unwrap().last_power_state.as_deref(), Some("On"));
    assert_eq!(late.memory.last_power.as_deref(), Some("On"), "the memory a failed status write falls back on");
}

#[test]
fn a_decision_taken_without_a_reading_keeps_the_last_one_in_status_and_memory() {
    let memory = Memory { last_power: Some("On".into()), ..Memory::default() };
    let decision = keeping_last_reading(timed_out(&confirming(&spec()).status, t(10)).unwrap(), &memory);
    assert_eq!(decision.status.progress.as_ref().unwrap().last_power_state.as_deref(), Some("On"));
    assert_eq!(decision.memory.last_power.as_deref(), Some("On"));
}

#[test]
fn a_reading_of_life_in_status_is_never_replaced_by_an_off_this_process_remembers() {
    // Another process recorded life (perhaps after this process's reading): an Off from memory
    // cannot say which came last, so the life stays (A1).
    assert_eq!(last_reading_kept(Some("Unknown"), Some("Off")).as_deref(), Some("Unknown"));
    assert_eq!(last_reading_kept(Some("On"), Some("Off")).as_deref(), Some("On"));
    // What this process remembers otherwise goes in: its reading may never have been persisted.
    assert_eq!(last_reading_kept(Some("Off"), Some("On")).as_deref(), Some("On"));
    assert_eq!(last_reading_kept(Some("On"), Some("PoweringOn")).as_deref(), Some("PoweringOn"));
    assert_eq!(last_reading_kept(None, Some("Off")).as_deref(), Some("Off"));
    assert_eq!(last_reading_kept(Some("Off"), None).as_deref(), Some("Off"));
}

#[test]
fn a_reading_of_life_whose_write_failed_is_written_into_the_latest_status_on_its_own() {
    let mut latest = confirming(&spec()).status;
    latest.progress.get_or_insert_with(Progress::default).last_power_state = Some("Off".into());
    let recorded = recording_life(&latest, Some("On")).expect("the On goes in");
    assert_eq!(recorded.progress.as_ref().unwrap().last_power_state.as_deref(), Some("On"));
    assert_eq!(recorded.phase, latest.phase, "nothing else changes");
    // Nothing to write: no life remembered, or the latest status already shows life.
    assert!(recording_life(&latest, Some("Off")).is_none());
    assert!(recording_life(&latest, None).is_none());
    assert!(recording_life(&recorded, Some("PoweringOn")).is_none());
}

#[test]
fn a_decision_without_a_reading_keeps_another_process_s_record_of_life() {
    let mut status = confirming(&spec()).status;
    status.progress.get_or_insert_with(Progress::default).last_power_state = Some("Unknown".into());
    let memory = Memory { last_power: Some("Off".into()), ..Memory::default() };
    let decision = keeping_last_reading(timed_out(&status, t(10)).unwrap(), &memory);
    assert_eq!(decision.status.progress.as_ref().unwrap().last_power_state.as_deref(), Some("Unknown"));
}

#[test]
fn a_process_is_named_the_fence_s_reader_before_it_reads_and_unnamed_when_it_ends_the_fence() {
    let reading = confirming(&spec()).status;
    assert!(reader_unnamed(&reading, ME), "no reader named yet");
    let named = with_reader(reading, ME);
    assert_eq!(named.progress.as_ref().unwrap().reader.as_deref(), Some(ME));
    assert!(!reader_unnamed(&named, ME));
    assert!(reader_unnamed(&named, "p9/1"), "another process names itself before its first reading");
    // The write that ends the fence holds this process's last reading: no reader stays named.
    let mut ended = named.clone();
    ended.phase = Some(Phase::Failed);
    assert_eq!(with_reader(ended.clone(), ME).progress.unwrap().reader, None);
    // Ended by another process: what the reader last read may be lost, and its name stays.
    assert_eq!(with_reader(ended, "p9/1").progress.unwrap().reader.as_deref(), Some(ME));
}

#[test]
fn a_process_that_takes_over_as_reader_keeps_its_predecessor_named_until_it_records_a_reading() {
    let named = with_reader(confirming(&spec()).status, "p3/1");
    let taken_over = with_reader(named, ME);
    let progress = taken_over.progress.as_ref().unwrap();
    assert_eq!((progress.reader.as_deref(), progress.unrecorded_reader.as_deref()), (Some(ME), Some("p3/1")));
    // Ended by the new reader with no reading of its own: the predecessor's may be lost.
    let mut ended = taken_over.clone();
    ended.phase = Some(Phase::Failed);
    assert_eq!(with_reader(ended, ME).progress.unwrap().unrecorded_reader.as_deref(), Some("p3/1"));
    // A reading recorded after the takeover is the fence's last reading.
    let node = node();
    let state = State { status: taken_over, memory: Memory::default() };
    let read = step(&spec(), &state, power(PowerState::Off), ctx(3, &node));
    assert_eq!(read.status.progress.unwrap().unrecorded_reader, None);
}

#[test]
fn a_fence_proven_at_once_writes_its_status_once_per_phase_and_holds_its_readings_for_those_writes() {
    let lab = lab(off_spec(), machine(true));
    let status = run(&lab);
    let written: Vec<_> = lab.history().iter().map(|s| s.phase.unwrap_or_default()).collect();
    assert_eq!(
        written,
        [Phase::VerifyingIdentity, Phase::ConfirmingOff, Phase::Releasing, Phase::Done],
        "the start goes with the gates' write; the ForceOff's answer and the run's Off readings with the proof's"
    );
    let intent = lab.history()[1].progress.clone().unwrap().intent.unwrap();
    assert_eq!(
        (intent.action, intent.result),
        (PowerAction::ForceOff, None),
        "the intent, written before the ForceOff"
    );
    assert_eq!(proof_of(&status).count, 3, "the readings held back are all in the proof");
    assert_eq!(status.evidence.unwrap().power_off.unwrap().resets.len(), 1, "and so is the ForceOff's answer");
    let node_writes =
        lab.world(|t| t.log.iter().filter(|r| matches!(r, crate::sim::world::Record::NodeWrite { .. })).count());
    assert_eq!(node_writes, 2, "the fencing taint, then the out-of-service taint");
    assert_eq!(lab.reasons_on("Node"), ["NodeFenced"], "the guard's first reading agrees with the proof: no Event");
}

#[test]
fn a_decision_waits_for_the_next_write_only_when_it_adds_off_readings_or_an_answer() {
    let mut stored = confirming(&spec()).status;
    stored.progress.as_mut().unwrap().last_power_state = Some("Off".into());
    let mut reading = stored.clone();
    let progress = reading.progress.get_or_insert_with(Default::default);
    progress.last_power_state = Some("Off".into());
    progress.last_reading_at = Some(MicroTime(t(5)));
    assert!(may_wait_for_next_write(&stored, &reading), "an Off reading");
    let mut life = reading.clone();
    life.progress.as_mut().unwrap().last_power_state = Some("On".into());
    assert!(!may_wait_for_next_write(&stored, &life), "a reading of life is written at once (A1)");
    let mut stored_on = stored.clone();
    stored_on.progress.as_mut().unwrap().last_power_state = Some("On".into());
    let mut on_again = stored_on.clone();
    on_again.progress.as_mut().unwrap().last_reading_at = Some(MicroTime(t(9)));
    assert!(!may_wait_for_next_write(&stored_on, &on_again), "so is life read again, the same as stored");
    let mut error = reading.clone();
    error.progress.as_mut().unwrap().last_error = Some("BMC unreachable".into());
    assert!(!may_wait_for_next_write(&stored, &error), "an error");
    let mut phase = reading.clone();
    phase.phase = Some(Phase::Releasing);
    assert!(!may_wait_for_next_write(&stored, &phase), "a phase");
    let mut intent = reading;
    intent.progress.as_mut().unwrap().intent = Some(Intent {
        action: PowerAction::ForceOff,
        attempt: 1,
        decided_at: MicroTime(t(5)),
        instance: "p1/1".into(),
        result: None,
    });
    assert!(!may_wait_for_next_write(&stored, &intent), "an intent, written before its action");
    let mut answered = intent.clone();
    answered.progress.as_mut().unwrap().intent.as_mut().unwrap().result = Some("HTTP 204".into());
    assert!(may_wait_for_next_write(&intent, &answered), "the answer to a persisted intent");
    answered.progress.as_mut().unwrap().intent.as_mut().unwrap().attempt = 2;
    assert!(!may_wait_for_next_write(&intent, &answered), "another intent");
}

#[test]
fn a_phase_change_leaves_the_error_of_the_phase_before_behind() {
    let node = node();
    let admit = Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0)))));
    let admitted = step(&spec(), &State::default(), admit, ctx(0, &node));
    let failed = step(&spec(), &State::from(&admitted), unavailable(), ctx(1, &node));
    assert!(failed.status.progress.as_ref().unwrap().last_error.is_some(), "the identity step's error");
    let verified = step(&spec(), &State::from(&failed), found(NODE_UUID), ctx(2, &node));
    assert_ne!(verified.status.phase, failed.status.phase);
    assert_eq!(verified.status.progress.unwrap().last_error, None, "not shown in the next phase");
}

#[test]
fn a_proof_shows_each_reading_once_as_wall_clock_times() {
    // Every read takes 300 ms: the request went out 300 ms before the answer.
    let lab = lab(off_spec(), machine(true).latency(StdDuration::from_millis(300)));
    let proof = proof_of(&run(&lab));
    // Settle counts from the first answer to the last request: a fourth reading is needed.
    assert_eq!((proof.count, proof.first.len(), proof.last.len()), (4, 3, 1), "no reading twice: {proof:?}");
    for reading in proof.first.iter().chain(&proof.last) {
        let requested = reading.requested_at.as_ref().unwrap().0;
        assert_eq!(reading.at.0.duration_since(requested), SignedDuration::from_millis(300));
    }
    assert_eq!(proof.latest(), proof.last.last());
}

#[test]
fn a_spec_edited_after_admission_is_said_to_be_ignored_once_per_generation() {
    let node = node();
    let admitted = step(
        &spec(),
        &State::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    let edited = CoronerRemediationSpec { settle: "30s".parse().unwrap(), ..spec() };
    let notice = ignored_spec_edit(&edited, &admitted.status, Some(2), None).unwrap();
    assert!(notice.warning && notice.message.contains("generation 2"), "{notice:?}");
    assert_eq!(ignored_spec_edit(&edited, &admitted.status, Some(2), Some(2)), None, "said once");
    assert_eq!(ignored_spec_edit(&spec(), &admitted.status, Some(2), None), None, "no change of the spec");
    assert_eq!(
        ignored_spec_edit(&edited, &CoronerRemediationStatus::default(), Some(2), None),
        None,
        "not admitted yet"
    );

    // Through the loop: the edit comes mid-proof; the fence goes on with the spec it was admitted with.
    let lab = lab(off_spec(), machine(true));
    run_until_off_readings(&lab, 1);
    lab.world(|t| {
        let rv = t.next_rv();
        let remediation = t.remediations.get_mut("worker-1").unwrap();
        remediation.spec.settle = "30s".parse().unwrap();
        remediation.metadata.generation = Some(2);
        remediation.metadata.resource_version = Some(rv);
    });
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done);
    assert_eq!(proof_of(&status).count, 3, "settle as admitted (2s), not 30s");
    assert_eq!(lab.reasons().iter().filter(|r| *r == "SpecEditIgnored").count(), 1, "{:?}", lab.reasons());
}
