//! A4: the failed fence's look through its device before an attested release.

use super::*;

#[test]
fn an_attestation_that_passes_everything_else_first_has_the_fence_look_through_its_device() {
    let mut world = World::dead_node();
    world.looked = false;
    let (verdict, checks) = world.evaluate(t(5));
    assert!(checks.contains(&(Precondition::DeviceLooked, "waiting")), "{checks:?}");
    let Verdict::Look(plan) = verdict else { panic!("{verdict:?}") };
    let asked = look_asked(&world.remediations[0], &world.attestation, &plan, t(5)).expect("asked");
    let look = asked.evidence.unwrap().attestation_look.unwrap();
    assert_eq!((look.attestation_uid.as_str(), look.looked_at.clone(), look.may_prove_again), ("att-uid", None, true));
    // Asked once: while it is pending, nothing more is written.
    set_look(&mut world, Some(look));
    assert_eq!(look_asked(&world.remediations[0], &world.attestation, &plan, t(6)), None);
    assert!(matches!(world.evaluate(t(6)).0, Verdict::Look(_)), "still waiting for it");
}

#[test]
fn an_attestation_that_waits_on_anything_else_asks_for_no_look() {
    let mut world = World::dead_node();
    world.looked = false;
    world.sighting = LeaseSighting::Seen { age: StdDuration::from_secs(1) };
    assert_eq!(reason(&world.evaluate(t(5)).0), AttestationReason::NodeLeaseFresh);
}

#[test]
fn a_look_without_an_answer_stands_for_the_fences_lease_freshness_only() {
    let mut world = World::dead_node();
    set_look(&mut world, Some(no_answer(t(0))));
    assert!(matches!(world.evaluate(t(5)).0, Verdict::Release(_)));
    let freshness = admitted_spec(&world.remediations[0]).lease_freshness.get().as_secs() as i64;
    let Verdict::Look(plan) = world.evaluate(t(freshness + 1)).0 else { panic!("an old look is asked again") };
    let asked = look_asked(&world.remediations[0], &world.attestation, &plan, t(freshness + 1)).expect("asked again");
    assert_eq!(asked.evidence.unwrap().attestation_look.unwrap().looked_at, None);
}

#[test]
fn another_attestations_look_counts_for_none_but_its_own() {
    let mut world = World::dead_node();
    set_look(&mut world, Some(AttestationLook { attestation_uid: "earlier".into(), ..no_answer(t(0)) }));
    assert!(matches!(world.evaluate(t(1)).0, Verdict::Look(_)));
}

#[test]
fn an_acknowledging_attestation_asks_for_a_look_that_may_not_make_the_fence_prove_again() {
    let mut world = World::dead_node();
    world.looked = false;
    let Verdict::Look(plan) = world.evaluate(t(5)).0 else { panic!() };
    let plan = ReleasePlan {
        acknowledged: vec![Acknowledgement { reason: AcknowledgedReason::FenceSawLife, at: Time(t(-200)) }],
        ..plan
    };
    let asked = look_asked(&world.remediations[0], &world.attestation, &plan, t(5)).unwrap();
    assert!(!asked.evidence.unwrap().attestation_look.unwrap().may_prove_again);
}

#[test]
fn the_look_records_nhcs_timeout_as_it_stands_when_asked() {
    let mut world = World::dead_node();
    world.looked = false;
    world.remediations[0].metadata.annotations =
        Some([(contract::TIMED_OUT_ANNOTATION.to_owned(), "2026-12-01T10:00:00Z".to_owned())].into());
    let Verdict::Look(plan) = world.evaluate(t(5)).0 else { panic!() };
    let asked = look_asked(&world.remediations[0], &world.attestation, &plan, t(5)).unwrap();
    assert_eq!(
        asked.evidence.unwrap().attestation_look.unwrap().nhc_timed_out.as_deref(),
        Some("2026-12-01T10:00:00Z")
    );
}

#[test]
fn a_look_that_found_the_machine_supersedes_the_attestation_for_good() {
    let mut world = World::dead_node();
    let proving = AttestationLook { found: Some(LookFound::ProvingAgain), ..no_answer(t(0)) };
    set_look(&mut world, Some(proving.clone()));
    // Reopened (the write that names this attestation), and before the attestation's own write.
    world.remediations[0].status.as_mut().unwrap().phase = Some(Phase::PoweringOff);
    let (verdict, _) = world.evaluate(t(1));
    assert_eq!(reason(&verdict), AttestationReason::Superseded);
    assert!(matches!(verdict, Verdict::Refuse(_)), "final");
    // Failed again: still superseded, never released on.
    world.remediations[0].status.as_mut().unwrap().phase = Some(Phase::Failed);
    assert_eq!(reason(&world.evaluate(t(1)).0), AttestationReason::Superseded);
    assert_eq!(look_of(&world).unwrap().found, Some(LookFound::ProvingAgain));
}

#[test]
fn after_a_proof_taken_again_failed_only_the_fences_own_proof_releases() {
    let mut world = World::dead_node();
    let earlier = AttestationLook {
        attestation: "w1-older".into(),
        attestation_uid: "older".into(),
        found: Some(LookFound::ProvingAgain),
        ..no_answer(t(0))
    };
    set_look(&mut world, Some(earlier));
    let (verdict, _) = world.evaluate(t(1));
    assert_eq!(reason(&verdict), AttestationReason::ProvenAgain);
    assert!(matches!(verdict, Verdict::Refuse(_)), "final");
    let plan = plan_of(&world.attestation, &world.remediations[0]).unwrap();
    assert_eq!(look_asked(&world.remediations[0], &world.attestation, &plan, t(1)), None, "no second look");
}

#[test]
fn no_look_is_asked_of_a_fence_that_released_or_still_runs() {
    let world = World::dead_node();
    let plan = plan_of(&world.attestation, &world.remediations[0]).unwrap();
    let mut running = world.remediations[0].clone();
    running.status.as_mut().unwrap().phase = Some(Phase::PoweringOff);
    assert_eq!(look_asked(&running, &world.attestation, &plan, t(1)), None);
    let mut begun = world.remediations[0].clone();
    begun.status.as_mut().unwrap().progress.get_or_insert_with(Default::default).release_begun =
        world.remediations[0].status.as_ref().unwrap().evidence.as_ref().and_then(|e| e.release.clone()).or(Some(
            crate::api::ReleaseEvidence {
                kind: crate::api::ReleaseKind::BmcProof,
                release_id: None,
                attestation: None,
                adopted_from: None,
                strategy: Default::default(),
                node_ready: "Unknown".into(),
                lease_renew_time: None,
                released_at: MicroTime(t(0)),
                taint_owned: false,
                taint_removed_at: None,
                pods_deleted: None,
                release_timed_out: false,
            },
        ));
    assert_eq!(look_asked(&begun, &world.attestation, &plan, t(1)), None);
}

#[test]
fn the_reader_a_pending_look_names_makes_the_attestation_wait_for_the_look_not_refuse() {
    let mut world = World::dead_node();
    world.looked = false;
    let pending = AttestationLook { looked_at: None, found: None, ..no_answer(t(0)) };
    set_look(&mut world, Some(pending));
    world.remediations[0].status.as_mut().unwrap().progress.get_or_insert_with(Default::default).reader =
        Some("coroner-0/7".into());
    assert!(matches!(world.evaluate(t(1)).0, Verdict::Look(_)), "waits for the look");
    // Taken by another process than the one named first, without a reading: that reading is lost.
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    (progress.reader, progress.unrecorded_reader) = (None, Some("coroner-0/7".into()));
    set_look(&mut world, Some(no_answer(t(1))));
    assert_eq!(reason(&world.evaluate(t(2)).0), AttestationReason::ReadingUnrecorded);
}

#[test]
fn a_look_not_taken_never_counts_and_is_not_asked_for_again_by_the_same_attestation() {
    let mut world = World::dead_node();
    set_look(&mut world, Some(AttestationLook { found: None, ..no_answer(t(0)) }));
    let Verdict::Look(plan) = world.evaluate(t(1)).0 else { panic!("a look not taken counts for nothing") };
    assert_eq!(look_asked(&world.remediations[0], &world.attestation, &plan, t(1)), None, "no ask loop");
}

#[test]
fn a_pending_ask_is_answered_before_another_attestation_asks() {
    let mut world = World::dead_node();
    let theirs = AttestationLook { attestation_uid: "other".into(), looked_at: None, found: None, ..no_answer(t(0)) };
    set_look(&mut world, Some(theirs));
    let Verdict::Look(plan) = world.evaluate(t(1)).0 else { panic!("waits for a look of its own") };
    assert_eq!(look_asked(&world.remediations[0], &world.attestation, &plan, t(1)), None);
    // Taken: now this one asks.
    set_look(&mut world, Some(AttestationLook { attestation_uid: "other".into(), ..no_answer(t(1)) }));
    assert!(look_asked(&world.remediations[0], &world.attestation, &plan, t(2)).is_some());
}

#[test]
fn a_release_begun_on_a_look_that_no_longer_stands_waits_for_a_new_look() {
    let mut world = World::dead_node();
    set_look(&mut world, Some(no_answer(t(0))));
    let Verdict::Release(plan) = world.evaluate(t(1)).0 else { panic!("released") };
    let status = record_release(world.remediations[0].status.as_ref().unwrap(), &world.attestation, &plan, t(1));
    world.remediations[0].status = Some(status);
    assert!(device_looked(&world.remediations[0], "att-uid", t(2)).is_ok(), "resumed while the look stands");
    let old = device_looked(&world.remediations[0], "att-uid", t(10_000)).unwrap_err();
    assert_eq!(old.reason, AttestationReason::AwaitingDeviceLook, "an old look is taken again first");
}
