//! A1: never after a sign of life, and what an acknowledgement clears.

use super::*;

#[test]
fn a_fence_that_ended_on_evidence_of_life_refuses_for_good() {
    for reason in ["NodeAliveAfterPowerOff", "NodeNotUnreachable", "OutletMappingWrong"] {
        let remediations = [failed("w1", reason, -300, None), failed("w1-x2", "BmcUnreachable", -60, None)];
        let refusal = fence_ended_without_proof(&attestation(0), &remediations).unwrap_err();
        assert_eq!(refusal.reason, AttestationReason::FenceSawLife, "{reason}");
        assert!(refusal.is_final());
    }
}

#[test]
fn an_attestation_never_follows_a_fence_whose_last_reading_found_the_machine_on() {
    let mut world = World::dead_node();
    last_read(&mut world, "On");
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BmcReportedOn), "{verdict:?}");
}

#[test]
fn an_attestation_may_follow_a_fence_whose_last_reading_was_off() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Release(_)));
}

#[test]
fn a_reading_whose_status_write_failed_still_refuses_the_attestation() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    world.remembered.insert("uid-w1".into(), "PoweringOn".into());
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BmcReportedOn), "{verdict:?}");
}

#[test]
fn an_attestation_never_follows_a_fence_whose_reader_stopped_before_it_recorded_its_reading() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap().reader = Some("p1/1".into());
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::ReadingUnrecorded), "{verdict:?}");
}

#[test]
fn an_attestation_never_follows_a_fence_whose_reader_was_taken_over_before_a_reading_was_recorded() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap().unrecorded_reader = Some("p3/1".into());
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::ReadingUnrecorded), "{verdict:?}");
}

#[test]
fn a_node_that_booted_since_its_fence_was_admitted_refuses_the_attestation() {
    let mut booted = node("Unknown");
    booted.status.as_mut().unwrap().node_info =
        Some(k8s_openapi::api::core::v1::NodeSystemInfo { boot_id: "boot-2".into(), ..Default::default() });
    assert!(no_new_boot("", &booted, None, None).is_ok(), "no bootID recorded: nothing to compare");
    assert!(no_new_boot("boot-2", &booted, None, None).is_ok());
    let refusal = no_new_boot("boot-1", &booted, None, None).unwrap_err();
    assert_eq!(refusal.reason, AttestationReason::FenceSawLife);
    assert!(refusal.message.contains("boot-2") && refusal.message.contains("boot-1"), "{}", refusal.message);
}

#[test]
fn life_reported_after_coroner_s_power_action_has_no_override() {
    // A boot the fence first saw before the power action may be acknowledged; after it, not.
    let mut booted = node("Unknown");
    let status = booted.status.as_mut().unwrap();
    status.node_info =
        Some(k8s_openapi::api::core::v1::NodeSystemInfo { boot_id: "boot-2".into(), ..Default::default() });
    let seen = || Some(("boot-2".to_owned(), t(-100)));
    assert_eq!(no_new_boot("boot-1", &booted, Some(t(-50)), seen()).unwrap_err().evidence_at, Some(t(-100)));
    // A boot other than the one the fence saw was never seen by it: after, whatever was seen before.
    let other = no_new_boot("boot-1", &booted, Some(t(-50)), Some(("boot-3".to_owned(), t(-100)))).unwrap_err();
    assert_eq!(other.evidence_at, None, "{}", other.message);
    let after = no_new_boot("boot-1", &booted, Some(t(-103)), seen()).unwrap_err();
    assert_eq!(after.evidence_at, None, "within the clock margin counts as after: {}", after.message);
    assert!(after.message.contains("no override"), "{}", after.message);

    // A Lease renewed after the first ForceOff was decided: the switched-off machine may be another.
    let mut world = World::dead_node();
    let status = world.remediations[0].status.as_mut().unwrap();
    let progress = status.progress.as_mut().unwrap();
    progress.lease_renew_time_at_failure = Some(MicroTime(t(-200)));
    progress.intent = Some(crate::api::Intent {
        action: crate::api::PowerAction::ForceOff,
        attempt: 1,
        decided_at: MicroTime(t(-250)),
        instance: "p1/1".into(),
        result: None,
    });
    world.lease = Some(Some(t(-200)));
    let (verdict, _) = world.evaluate(t(0));
    let Verdict::Refuse(refusal) = verdict else { panic!("{verdict:?}") };
    assert_eq!((refusal.reason, refusal.evidence_at), (AttestationReason::FenceSawLife, None), "{}", refusal.message);
    assert!(refusal.message.contains("after coroner's first power action"), "{}", refusal.message);
}

#[test]
fn a_lease_renewed_while_the_fence_ran_refuses_the_attestation() {
    let mut world = World::dead_node();
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.lease_renew_time_at_failure = Some(MicroTime(t(-200)));
    world.lease = Some(Some(t(-200)));
    let (verdict, _) = world.evaluate(t(0));
    assert!(matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::FenceSawLife), "{verdict:?}");
}

#[test]
fn life_is_dated_by_coroners_first_sight_of_it_never_by_the_kubelets_clock() {
    // The kubelet's clock runs two minutes behind: its renewal after coroner's ForceOff (decided at
    // t(-250)) carries renewTime t(-370), "before" it. The fence saw the change at t(-150): after.
    let mut world = renewed_while_the_fence_ran();
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.lease_renew_time_at_failure = Some(MicroTime(t(-370)));
    progress.lease_change_seen_at = Some(MicroTime(t(-150)));
    progress.intent = Some(crate::api::Intent {
        action: crate::api::PowerAction::ForceOff,
        attempt: 1,
        decided_at: MicroTime(t(-250)),
        instance: "p1/1".into(),
        result: None,
    });
    world.lease = Some(Some(t(-370)));
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("a renewal after the ForceOff") };
    assert_eq!((refusal.reason, refusal.evidence_at), (AttestationReason::FenceSawLife, None), "{}", refusal.message);
    // A change no step of the fence saw (it ended first, or its process restarted) is after it too.
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.lease_change_seen_at = None;
    progress.intent = None;
    let Verdict::Refuse(unseen) = world.evaluate(t(0)).0 else { panic!("unseen life") };
    assert_eq!((unseen.reason, unseen.evidence_at), (AttestationReason::FenceSawLife, None), "{}", unseen.message);
}

#[test]
fn life_seen_before_the_power_action_is_released_only_when_acknowledged_after_it_plus_lease_freshness() {
    let mut world = renewed_while_the_fence_ran();
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("refused without an acknowledgement") };
    assert_eq!(refusal.evidence_at, Some(t(-200)));
    assert!(refusal.message.contains("--acknowledge FenceSawLife="), "the refusal says how: {}", refusal.message);
    acknowledging(&mut world, AcknowledgedReason::FenceSawLife, -200);
    let Verdict::Release(plan) = world.evaluate(t(0)).0 else { panic!("acknowledged: released") };
    assert_eq!(plan.acknowledged, [Acknowledgement { reason: AcknowledgedReason::FenceSawLife, at: Time(t(-200)) }]);
    // Created before the evidence plus leaseFreshness (40 s): the node had no time to show more life.
    world.attestation.metadata.creation_timestamp = Some(Time(t(-170)));
    let Verdict::Refuse(early) = world.evaluate(t(0)).0 else { panic!("too early") };
    assert!(early.message.contains("create a new one"), "{}", early.message);
}

#[test]
fn an_acknowledgement_counts_only_for_the_evidence_it_names() {
    let mut world = renewed_while_the_fence_ran();
    acknowledging(&mut world, AcknowledgedReason::FenceSawLife, -250);
    acknowledging(&mut world, AcknowledgedReason::BindingUnverified, -200);
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Refuse(r) if r.reason == AttestationReason::FenceSawLife));
}

#[test]
fn an_on_reading_from_a_bmc_dark_since_may_be_acknowledged_and_one_from_a_bmc_that_still_answers_may_not() {
    let mut world = World::dead_node();
    last_read(&mut world, "On");
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.last_answer_at = Some(MicroTime(t(-90)));
    progress.last_reading_at = Some(MicroTime(t(-90)));
    acknowledging(&mut world, AcknowledgedReason::BmcReportedOn, -90);
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("the BMC's last answer was On") };
    assert_eq!((refusal.reason, refusal.evidence_at), (AttestationReason::BmcReportedOn, None), "no override");
    // Asked again later, it never answered: dark since its On, whose moment the attester names.
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.last_reading_at = Some(MicroTime(t(-70)));
    let Verdict::Release(plan) = world.evaluate(t(0)).0 else { panic!("acknowledged: released") };
    assert_eq!(plan.acknowledged, [Acknowledgement { reason: AcknowledgedReason::BmcReportedOn, at: Time(t(-90)) }]);
    world.attestation.spec.acknowledge.clear();
    let Verdict::Refuse(dark) = world.evaluate(t(0)).0 else { panic!("not acknowledged") };
    assert!(dark.message.contains("--acknowledge BmcReportedOn="), "the refusal says how: {}", dark.message);
    // Read after coroner's own ForceOff: life after the power action, no override however dark since.
    let status = world.remediations[0].status.as_mut().unwrap();
    let power_off = status.evidence.get_or_insert_with(Default::default).power_off.get_or_insert_with(Default::default);
    power_off.resets.push(crate::api::ResetRecord {
        attempt: 1,
        sent_at: MicroTime(t(-95)),
        result: "HTTP 204".into(),
        level: None,
        accepted: true,
    });
    acknowledging(&mut world, AcknowledgedReason::BmcReportedOn, -90);
    let Verdict::Refuse(after) = world.evaluate(t(0)).0 else { panic!("On after the ForceOff") };
    assert!(after.evidence_at.is_none() && after.message.contains("after coroner's ForceOff"), "{}", after.message);
    // An On only this process remembers (its write failed) has no moment to name: no override.
    last_read(&mut world, "Off");
    world.remembered.insert("uid-w1".into(), "On".into());
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Refuse(r) if r.evidence_at.is_none()));
}

#[test]
fn acknowledging_an_on_reading_clears_no_other_sign_of_life_in_the_same_fence() {
    let mut world = renewed_while_the_fence_ran();
    last_read(&mut world, "On");
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.last_answer_at = Some(MicroTime(t(-250)));
    progress.last_reading_at = Some(MicroTime(t(-240)));
    acknowledging(&mut world, AcknowledgedReason::BmcReportedOn, -250);
    let Verdict::Refuse(refusal) = world.evaluate(t(0)).0 else { panic!("the Lease's renewal is not acknowledged") };
    assert_eq!(refusal.reason, AttestationReason::FenceSawLife);
    acknowledging(&mut world, AcknowledgedReason::FenceSawLife, -200);
    let Verdict::Release(plan) = world.evaluate(t(0)).0 else { panic!("both acknowledged: released") };
    assert_eq!(plan.acknowledged.len(), 2);
    // A reading nobody recorded keeps no override, whatever else is acknowledged.
    let progress = world.remediations[0].status.as_mut().unwrap().progress.as_mut().unwrap();
    progress.unrecorded_reader = Some("p1/1".into());
    assert!(matches!(world.evaluate(t(0)).0, Verdict::Refuse(r) if r.reason == AttestationReason::ReadingUnrecorded));
}

#[test]
fn an_acknowledgement_reads_as_the_preflight_prints_it() {
    let ack: Acknowledgement = "FenceSawLife=2026-12-05T01:00:00Z".parse().unwrap();
    assert_eq!(ack.to_string(), "FenceSawLife=2026-12-05T01:00:00Z");
    assert!(
        "NodeNotUnreachable=2026-12-05T01:00:00Z"
            .parse::<Acknowledgement>()
            .unwrap_err()
            .contains("cannot be acknowledged")
    );
    assert!("FenceSawLife".parse::<Acknowledgement>().is_err());
    assert!("FenceSawLife=yesterday".parse::<Acknowledgement>().unwrap_err().contains("RFC 3339"));
}

proptest::proptest! {
    #[test]
    fn an_acknowledgement_prints_and_parses_back_to_itself(secs in 0i64..4_000_000_000, which in 0usize..3) {
        let ack = Acknowledgement {
            reason: AcknowledgedReason::ALL[which],
            at: Time(Timestamp::from_second(secs).unwrap()),
        };
        proptest::prop_assert_eq!(ack.to_string().parse::<Acknowledgement>().unwrap(), ack);
    }

    #[test]
    fn any_text_parses_or_is_refused_with_a_reason(text in ".{0,80}") {
        if let Err(why) = text.parse::<Acknowledgement>() {
            proptest::prop_assert!(!why.is_empty());
        }
    }
}

#[test]
fn an_attestation_never_follows_a_guard_whose_last_reading_found_the_released_machine_on() {
    let mut world = World::dead_node();
    last_read(&mut world, "Off");
    let status = world.remediations[0].status.as_mut().unwrap();
    let message = "the released machine reads On: it may be running while its workloads run elsewhere";
    crate::api::conditions::set(
        &mut status.conditions,
        crate::guard::GUARD,
        crate::api::conditions::FALSE,
        crate::guard::POWERED_ON,
        message,
        t(-10),
    );
    let (verdict, _) = world.evaluate(t(0));
    assert!(
        matches!(&verdict, Verdict::Refuse(r) if r.reason == AttestationReason::BmcReportedOn && r.message.contains("guard")),
        "{verdict:?}"
    );
}
