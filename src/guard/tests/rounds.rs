//! R2's tests: the guard's rounds, findings, identification and ForceOff.

use super::*;

#[test]
fn only_off_from_the_verified_system_is_off() {
    let status = released();
    assert_eq!(assess(&status, &reading(UUID, PowerState::Off)), Finding::Off);
    assert_eq!(assess(&status, &reading(UUID, PowerState::On)), Finding::NotOff(PowerState::On));
    assert_eq!(assess(&status, &reading(UUID, PowerState::PoweringOn)), Finding::NotOff(PowerState::PoweringOn));
    let other = "7f3b0c1e-0000-4000-8000-000000000002";
    assert!(matches!(assess(&status, &reading(other, PowerState::Off)), Finding::Blind(_)), "another system's Off");
    let failed =
        Err(BmcFailure { transient: true, reason: crate::contract::Reason::BmcUnreachable, message: "timeout".into() });
    assert!(matches!(assess(&status, &failed), Finding::Blind(_)), "an error never counts as Off");
}

#[test]
fn an_off_the_bmc_does_not_vouch_for_leaves_the_guard_blind_not_reassured_or_alarmed() {
    let status = released();
    let Finding::Blind(why) = assess(&status, &reading(UUID, PowerState::OffUnknown("Absent".into()))) else {
        panic!("an Off with Status.State Absent is neither Off nor a sign of life")
    };
    assert!(why.contains("Off with Status.State Absent"), "{why}");
}

#[test]
fn a_machine_powered_on_behind_coronors_back_is_switched_off_again_with_enforce() {
    let decision = step(GuardPolicy::Enforce, &released(), &Finding::NotOff(PowerState::On), None);
    assert_eq!(decision.reset, Some(ResetType::ForceOff));
    assert_eq!(condition(&decision.status), ("False".into(), POWERED_ON.into()));
    let intent = decision.status.guard.as_ref().unwrap().intent.as_ref().unwrap();
    assert_eq!((intent.action, intent.result.as_deref()), (PowerAction::ForceOff, None), "the intent comes first");
    assert!(decision.notices.iter().any(|n| n.warning && n.reason == POWERED_ON));
}

#[test]
fn an_outlet_of_the_proving_level_switched_on_again_is_switched_off_with_enforce_and_reported_with_alert() {
    let finding = Finding::OutletNotOff("outlet snmp:pdu-a:161|2 of level 2: the outlet reads On".into());
    let enforced = step(GuardPolicy::Enforce, &released(), &finding, None);
    assert_eq!(enforced.reset, Some(ResetType::ForceOff));
    assert_eq!(condition(&enforced.status), ("False".into(), POWERED_ON.into()));
    let seen = &enforced.status.guard.as_ref().unwrap().last_finding.as_ref().unwrap().seen;
    assert!(seen.contains("pdu-a:161|2"), "{seen}");
    let alerted = step(GuardPolicy::Alert, &released(), &finding, None);
    assert_eq!(alerted.reset, None);
    assert!(alerted.notices.iter().any(|n| n.warning && n.reason == POWERED_ON));
}

#[test]
fn the_guards_answer_from_the_outlets_says_where_it_went() {
    let decided = step(GuardPolicy::Enforce, &released(), &Finding::OutletNotOff("outlet x".into()), None);
    let answered = outlets_answered(&decided.status, &Memory::default(), &Ok(0), t(50), 2);
    assert_eq!(answered.notices[0].message, "the guard sent Off to the outlets of level 2: accepted");
    assert_eq!(answered.status.guard.unwrap().enforced, 1);
}

#[test]
fn a_machine_still_on_after_an_unanswered_intent_gets_a_new_one() {
    let first = step(GuardPolicy::Enforce, &released(), &Finding::NotOff(PowerState::On), None);
    let watch = Watch {
        policy: GuardPolicy::Enforce,
        approval: Approval::None,
        instance: "p2/1",
        now: t(40),
        mono: StdDuration::from_secs(40),
    };
    let again = next(&first.status, &Memory::default(), &Finding::NotOff(PowerState::On), watch);
    assert_eq!(again.reset, Some(ResetType::ForceOff), "sent or not, the machine still reads on");
    let intent = again.status.guard.as_ref().unwrap().intent.as_ref().unwrap();
    assert_eq!((intent.instance.as_str(), intent.decided_at.0, intent.result.as_deref()), ("p2/1", t(40), None));
}

#[test]
fn the_guard_sends_no_force_off_once_the_node_read_again_no_longer_calls_for_it() {
    let mut node = Node::default();
    node.metadata.name = Some("worker-1".into());
    node.metadata.uid = Some("node-uid".into());
    assert_eq!(may_enforce(&released(), None, "rem-uid"), Err(GuardHold::NodeGone));
    assert_eq!(may_enforce(&released(), Some(&node), "rem-uid"), Ok(()), "the release stands without its taint");
    let mut node =
        crate::taints::with_taint(&node, crate::taints::CoronerTaint::OutOfService, "rem-uid", t(5)).unwrap();
    assert_eq!(may_enforce(&released(), Some(&node), "rem-uid"), Ok(()));
    let annotations = node.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(APPROVAL_ANNOTATION.into(), "alice".into());
    assert_eq!(may_enforce(&released(), Some(&node), "rem-uid"), Ok(()), "an approval naming no release");
    let annotations = node.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(APPROVAL_ANNOTATION.into(), format!("{} alice", id()));
    assert_eq!(may_enforce(&released(), Some(&node), "rem-uid"), Ok(()), "who without why approves nothing");
    let annotations = node.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(APPROVAL_ANNOTATION.into(), format!("{} alice: checked", id()));
    assert_eq!(may_enforce(&released(), Some(&node), "rem-uid"), Err(GuardHold::Approved("alice: checked".into())));
    let decision = withheld(&first_intent(), &Memory::default(), &GuardHold::Approved("alice".into()), t(30));
    let intent = decision.status.guard.as_ref().unwrap().intent.as_ref().unwrap();
    assert!(intent.result.as_deref().is_some_and(|r| r.starts_with("not sent") && r.contains("alice")));
    assert_eq!(decision.status.guard.as_ref().unwrap().enforced, 0, "nothing was sent");
}

#[test]
fn with_alert_or_an_approval_the_guard_only_reports() {
    let alert = step(GuardPolicy::Alert, &released(), &Finding::NotOff(PowerState::On), None);
    assert_eq!(alert.reset, None);
    assert_eq!(condition(&alert.status), ("False".into(), POWERED_ON.into()));
    let approved = step(
        GuardPolicy::Enforce,
        &released(),
        &Finding::NotOff(PowerState::On),
        Some(&format!("{} alice: back to service, INC-7", id())),
    );
    assert_eq!(approved.reset, None);
    assert!(approved.notices.iter().any(|n| n.reason == "PowerOnApproved" && n.message.contains("INC-7")));
}

#[test]
fn a_blind_guard_says_so_and_never_takes_it_for_off() {
    let decision = step(GuardPolicy::Enforce, &released(), &Finding::Blind("timeout".into()), None);
    assert_eq!((decision.reset, condition(&decision.status)), (None, ("Unknown".into(), BLIND.into())));
    assert!(decision.notices.iter().any(|n| n.warning && n.reason == BLIND));
}

#[test]
fn the_guard_writes_status_only_when_it_finds_something_new() {
    let first = step(GuardPolicy::Enforce, &released(), &Finding::Off, None);
    let quiet = step(GuardPolicy::Enforce, &first.status, &Finding::Off, None);
    assert_eq!(quiet.status, first.status, "Off again: nothing to write");
    assert!(quiet.notices.is_empty());
    assert_eq!(quiet.memory.guard_reads, 1, "the read is remembered, not written");
}

#[test]
fn the_guard_period_is_jittered_within_ten_percent_and_reproducible() {
    let interval = StdDuration::from_secs(10);
    for read in 0..100 {
        let period = jittered(interval, "uid-1", read);
        assert!(period >= StdDuration::from_secs(9) && period <= StdDuration::from_secs(11), "{period:?}");
        assert_eq!(period, jittered(interval, "uid-1", read));
    }
    let memory = Memory { guarded_at: Some(StdDuration::from_secs(100)), ..Memory::default() };
    let status = released();
    assert!(due(&status, &memory, StdDuration::from_secs(101), interval, "uid-1").is_some());
    assert_eq!(due(&status, &memory, StdDuration::from_secs(112), interval, "uid-1"), None);
    assert_eq!(due(&status, &Memory::default(), StdDuration::ZERO, interval, "uid-1"), None, "never read: now");
}

#[test]
fn a_guard_force_off_that_did_not_take_makes_the_guard_read_again_within_a_second() {
    let interval = StdDuration::from_secs(10);
    let memory = Memory { guarded_at: Some(StdDuration::from_secs(100)), ..Memory::default() };
    let soon = StdDuration::from_secs(100) + GUARD_RETRY;
    assert!(due(&first_intent(), &memory, StdDuration::from_secs(100), interval, "uid-1").is_some());
    assert_eq!(due(&first_intent(), &memory, soon, interval, "uid-1"), None, "a check before the request failed");
    let failure = BmcFailure { transient: true, reason: Reason::BmcUnreachable, message: "HTTP 503".into() };
    let failed = answered(&first_intent(), &memory, &Err(failure), t(21));
    assert_eq!(due(&failed.status, &memory, soon, interval, "uid-1"), None, "failed at the BMC: as unanswered");
    assert_eq!(failed.status.guard.as_ref().unwrap().enforced, 0, "a failed ForceOff enforced nothing");
    assert!(failed.notices[0].message.contains("failed: HTTP 503"), "{:?}", failed.notices);
    let off_again = step_with(GuardPolicy::Enforce, &failed.status, &memory, &Finding::Off);
    assert_eq!(off_again.reset, Some(ResetType::ForceOff), "seen on, and the ForceOff did not take: sent again");
    let took = answered(&first_intent(), &memory, &Ok(204), t(21));
    assert!(due(&took.status, &memory, soon, interval, "uid-1").is_some(), "answered: the interval paces it");
}

#[test]
fn after_an_attested_release_the_guard_records_the_system_whose_uuid_names_the_node() {
    let (status, notice) = identify(&attested(), Ok(found(UUID, Vec::new())), UUID, t(30)).unwrap();
    let identity = status.evidence.unwrap().identity.unwrap();
    assert_eq!((identity.system_path.as_str(), identity.bmc_uuid.as_str()), ("/redfish/v1/Systems/1", UUID));
    assert_eq!(identity.verified_at, MicroTime(t(30)));
    assert_eq!(notice.reason, "GuardIdentityVerified");
    assert!(!notice.warning);
}

#[test]
fn the_guard_acts_on_the_power_its_identity_read_found_even_when_its_next_reading_finds_the_machine_off() {
    let found = Ok(found(UUID, Vec::new()));
    let memory = identified_sighting(&Memory::default(), &found);
    let (status, _) = identify(&attested(), found, UUID, t(30)).unwrap();
    assert!(status.guard.as_ref().unwrap().sighted_at.is_some(), "recorded for a process that takes over");
    // The glitch is over by the next reading: the identity read saw the machine on, and that stands.
    let decision = step_with(GuardPolicy::Enforce, &status, &memory, &Finding::Off);
    assert_eq!(decision.reset, Some(crate::bmc::ResetType::ForceOff));
    assert_eq!(condition(&decision.status), ("False".into(), POWERED_ON.into()));
    // A machine the identity read found Off is no sighting.
    let mut off = self::found(UUID, Vec::new());
    off.system.power_state = PowerState::Off;
    assert_eq!(identified_sighting(&Memory::default(), &Ok(off.clone())).sighted_on, None);
    let (status, _) = identify(&attested(), Ok(off), UUID, t(30)).unwrap();
    assert!(status.guard.as_ref().is_none_or(|g| g.sighted_at.is_none()));
}

#[test]
fn after_an_attested_release_the_guard_stays_blind_on_another_machine_a_claimed_uuid_or_no_answer() {
    let other = "7f3b0c1e-0000-4000-8000-000000000002";
    let why = identify(&attested(), Ok(found(other, Vec::new())), UUID, t(30)).unwrap_err();
    assert!(why.to_string().contains("not the node's systemUUID"), "{why}");
    let claimed = vec![identity::Claim { owner: "Node worker-2".into(), uuid: UUID.into() }];
    let why = identify(&attested(), Ok(found(UUID, claimed)), UUID, t(30)).unwrap_err();
    assert!(why.to_string().contains("worker-2"), "{why}");
    let dead = BmcFailure {
        transient: true,
        reason: crate::contract::Reason::BmcUnreachable,
        message: "BMC unreachable: connection refused".into(),
    };
    let why = identify(&attested(), Err(IdentityProblem::Bmc(dead)), UUID, t(30)).unwrap_err();
    assert_eq!(why.to_string(), "BMC unreachable: connection refused");
    let decision = step(GuardPolicy::Enforce, &attested(), &Finding::Blind(why.to_string()), None);
    assert_eq!(condition(&decision.status), ("Unknown".into(), BLIND.into()));
    assert_eq!(decision.reset, None);
}

#[test]
fn the_guard_looks_for_the_uuid_admitted_and_only_while_the_node_still_reports_it() {
    let status = attested();
    let mut now = node(true);
    now.system_uuid = UUID.into();
    assert_eq!(identity_target(&status, &now), Ok(UUID.to_owned()));
    now.system_uuid = "7f3b0c1e-0000-4000-8000-000000000009".into();
    let why = identity_target(&status, &now).unwrap_err();
    assert!(
        why.to_string().contains("not 7f3b0c1e-0000-4000-8000-000000000001"),
        "other hardware under the name: {why}"
    );
    let mut unrecorded = status;
    unrecorded.evidence.as_mut().unwrap().node.as_mut().unwrap().system_uuid = String::new();
    assert_eq!(identity_target(&unrecorded, &now), Err(Unidentified::NoAdmittedUuid));
}

#[test]
fn a_power_on_the_fence_read_while_the_release_stood_is_the_guard_s_even_when_its_own_reading_is_off() {
    let memory = Memory { sighted_on: Some(PowerState::On), ..Memory::default() };
    assert_eq!(with_sighting(&released(), &Finding::Off, &memory), Finding::NotOff(PowerState::On));
    assert_eq!(with_sighting(&released(), &Finding::Off, &Memory::default()), Finding::Off);
    let decision = step_with(GuardPolicy::Enforce, &released(), &memory, &Finding::Off);
    assert_eq!(decision.reset, Some(ResetType::ForceOff), "the glitch ended; the ForceOff still goes");
    assert_eq!(decision.memory.sighted_on, None, "acted on once");
    let blind = Finding::Blind("BMC unreachable".into());
    let waiting = step_with(GuardPolicy::Enforce, &released(), &memory, &blind);
    assert_eq!(
        (waiting.reset, waiting.memory.sighted_on),
        (None, Some(PowerState::On)),
        "kept for a reading that can act"
    );
}

/// Through the loop: the binding is edited after the release, then the machine comes on. The guard
/// does not take a reading through the edited binding for its proof's machine: it finds and proves the
/// machine again through the binding as it is now (`GuardIdentityVerified`), and only then enforces.
#[test]
fn after_a_binding_edit_the_guard_proves_the_machine_again_before_it_enforces() {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        sim::{
            lab::{Lab, Setup},
            scenario::BindingEdit,
            script::Script,
        },
    };
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
    let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
    let fenced = futures::executor::block_on(lab.run());
    assert!(fenced.evidence.as_ref().and_then(|e| e.release.as_ref()).is_some(), "{fenced:?}");
    lab.world(|t| t.edit_binding("worker-1", BindingEdit::Endpoint));
    lab.device().switch_on("1");
    for _ in 0..3 {
        futures::executor::block_on(lab.clock().sleep(StdDuration::from_secs(15)));
        let _ = futures::executor::block_on(lab.reconcile());
    }
    let reasons = lab.reasons();
    let proven = reasons.iter().position(|r| r == "GuardIdentityVerified").expect("proven again");
    let enforced = reasons.iter().rposition(|r| r == "GuardForceOffSent").expect("then switched off");
    assert!(proven < enforced, "{reasons:?}");
    assert_eq!(lab.device().resets(), [crate::bmc::ResetType::ForceOff, crate::bmc::ResetType::ForceOff]);
    let identity = lab.status().evidence.unwrap().identity.unwrap();
    assert_eq!(identity.binding_generation, Some(2), "the proof now rests on the binding as it is");
}

#[test]
fn a_force_off_an_earlier_guard_decided_and_left_unanswered_goes_even_when_the_machine_reads_off_again() {
    let mut status = released();
    status.guard.get_or_insert_with(GuardStatus::default).intent = Some(Intent {
        action: PowerAction::ForceOff,
        attempt: 1,
        decided_at: MicroTime(t(10)),
        instance: "p3/1".into(),
        result: None,
    });
    let decision = step_with(GuardPolicy::Enforce, &status, &Memory::default(), &Finding::Off);
    assert_eq!(decision.reset, Some(crate::bmc::ResetType::ForceOff), "its process died: the sighting stands");
    let answered = answered(&decision.status, &decision.memory, &Ok(204), t(21));
    let next = step_with(GuardPolicy::Enforce, &answered.status, &Memory::default(), &Finding::Off);
    assert_eq!(next.reset, None, "once answered, an Off reading is Off");
}

#[test]
fn a_sighting_the_fence_recorded_is_acted_on_by_a_process_that_takes_over_until_a_guard_round_has() {
    let mut status = released();
    status.guard.get_or_insert_with(GuardStatus::default).sighted_at = Some(MicroTime(t(10)));
    let fresh = Memory::default();
    assert_eq!(with_sighting(&status, &Finding::Off, &fresh), Finding::NotOff(PowerState::On), "not in this memory");
    let decision = step_with(GuardPolicy::Enforce, &status, &fresh, &with_sighting(&status, &Finding::Off, &fresh));
    assert_eq!(decision.reset, Some(crate::bmc::ResetType::ForceOff), "switched off even though it reads Off now");
    // A blind round after it acts on nothing: the sighting still stands.
    let mut blind = status.clone();
    blind.guard.as_mut().unwrap().last_finding = Some(GuardFinding { at: MicroTime(t(15)), seen: "timeout".into() });
    conditions::set(&mut blind.conditions, GUARD, conditions::UNKNOWN, BLIND, "no answer", t(15));
    assert_eq!(with_sighting(&blind, &Finding::Off, &fresh), Finding::NotOff(PowerState::On));
    // Once a guard round acted on it (its ForceOff decided after it, and answered), Off is Off.
    let handled = answered(&decision.status, &decision.memory, &Ok(204), t(21)).status;
    assert_eq!(with_sighting(&handled, &Finding::Off, &fresh), Finding::Off);
}

/// R2, through the loop (soak seed 800655): NHC times the remediation out while its `Reboot`'s
/// taint removal is denied by an admission webhook, and someone switches the released machine on.
/// Every reconcile then fails on the denied Node write; the guard still reads the machine and sends
/// its ForceOff.
#[test]
fn the_guard_switches_a_released_machine_off_while_a_timed_out_fence_cannot_write_its_node() {
    use crate::{
        api::{CoronerRemediationSpec, Phase},
        sim::{
            lab::{Lab, Setup},
            script::Script,
        },
    };
    let lab = Lab::scripted(&Setup::new(UUID, CoronerRemediationSpec::default()), Script::machine(UUID, true));
    futures::executor::block_on(async {
        lab.run_until(|s| s.phase == Some(Phase::WaitingForRelease)).await;
        lab.world(|t| t.node_writes_denied_until = i64::MAX);
        let _ = lab.reconcile().await;
        assert_eq!(lab.status().phase, Some(Phase::PoweringOn), "its taint removal was decided, then denied");
        lab.world(|t| t.annotate_remediation("worker-1", crate::contract::TIMED_OUT_ANNOTATION, "now"));
        lab.device().switch_on("1");
        for _ in 0..3 {
            let ended = lab.reconcile().await;
            assert!(matches!(ended, Err(crate::driver::Error::Api(_))), "the Node write is still denied: {ended:?}");
        }
    });
    assert_eq!(lab.status().phase, Some(Phase::Done), "NHC's timeout ended the fence");
    assert!(!lab.device().is_on("1"), "the guard switched the machine off: {:?}", lab.device().resets());
}

/// The guard's plan: a round when due and leading; nothing for a release its sibling guards or in a
/// deposed process; a wait while not due; a level release's outlets first (L9).
#[test]
fn the_guard_s_plan_reads_when_due_and_leads_and_leaves_an_adopted_release_to_its_sibling() {
    let (now, interval) = (StdDuration::from_secs(100), StdDuration::from_secs(10));
    let timing = (now, interval, "uid");
    let fresh = Memory::default();
    assert_eq!(plan(&released(), &fresh, false, true, timing), Plan::Round { outlets: None });
    assert_eq!(plan(&released(), &fresh, true, true, timing), Plan::Nothing, "the sibling guards it");
    assert_eq!(plan(&released(), &fresh, false, false, timing), Plan::Nothing, "deposed: the new leader reads");
    let read_just_now = Memory { guarded_at: Some(now), ..Memory::default() };
    assert!(matches!(plan(&released(), &read_just_now, false, true, timing), Plan::Wait(_)));
    let mut through_level = released();
    let evidence = through_level.evidence.as_mut().unwrap();
    evidence.power_off = Some(crate::api::PowerOffEvidence {
        level: Some(crate::api::LevelProof {
            level: 2,
            binding: "worker-1".into(),
            binding_generation: 1,
            mapping: "OperatorStatement".into(),
            outlets: Vec::new(),
            bmc_after: "no answer".into(),
        }),
        ..crate::api::PowerOffEvidence::default()
    });
    assert_eq!(plan(&through_level, &fresh, false, true, timing), Plan::Round { outlets: Some(2) });
}

/// The guard reaches the machine through the proof's system; after an attested release (no such
/// system) or an edit of the binding since the proof (P1), it finds the machine first.
#[test]
fn the_guard_reads_the_proofs_system_unless_the_release_was_attested_or_the_binding_changed() {
    let mut proven = released();
    proven.evidence.as_mut().unwrap().identity.as_mut().unwrap().binding_generation = Some(3);
    let path = Machine::Read("/redfish/v1/Systems/1".into());
    assert_eq!(machine(&proven, Some(3)), path);
    assert_eq!(machine(&proven, None), path, "a binding gone: judged on the reading");
    assert_eq!(machine(&proven, Some(4)), Machine::Identify, "edited since the proof");
    assert_eq!(machine(&released(), Some(1)), Machine::Identify, "a proof that recorded no generation");
    let mut attested = released();
    attested.evidence.as_mut().unwrap().identity = None;
    assert_eq!(machine(&attested, Some(1)), Machine::Identify);
}

/// A1/R2 through the loop (a review of 710896's fix): after an attested release the guard finds the
/// machine first; its pinned system answers On, then the Systems collection fails. The sighting is
/// the guard's: once the identification succeeds, the machine is switched off even though it reads
/// Off again by then.
#[test]
fn a_machine_the_guards_identification_saw_on_before_the_bmc_failed_is_switched_off_once_it_is_found() {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction, ReleaseKind},
        bmc::{BmcError, ResetType},
        sim::{
            lab::{Lab, Setup},
            script::Script,
        },
    };
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
    let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
    futures::executor::block_on(lab.run());
    // As an attested release leaves it: no proof's system to read.
    lab.world(|t| {
        let remediation = t.remediations.get_mut("worker-1").unwrap();
        let evidence = remediation.status.as_mut().unwrap().evidence.as_mut().unwrap();
        evidence.identity = None;
        evidence.release.as_mut().unwrap().kind = ReleaseKind::OperatorAttested;
        let binding = t.bindings.get_mut("worker-1").unwrap();
        binding.spec.redfish.as_mut().unwrap().system_id = Some("1".into());
    });
    lab.device().switch_on("1");
    lab.device().fail_listing(Some(BmcError::Unreachable("timed out".into())));
    lab.restart();
    let _ = futures::executor::block_on(lab.reconcile());
    let sighted = lab.status().guard.and_then(|g| g.sighted_at);
    assert!(sighted.is_some(), "the sighting is recorded for a process that takes over");
    assert!(
        lab.device().resets().is_empty() || lab.device().resets() == vec![ResetType::ForceOff],
        "nothing else sent"
    );
    // The glitch ends and the BMC answers again.
    lab.device().fail_listing(None);
    let off_again = lab.device().resets().len();
    lab.device().reset_to_off("1");
    for _ in 0..3 {
        futures::executor::block_on(async {
            lab.clock().sleep(StdDuration::from_secs(11)).await;
            let _ = lab.reconcile().await;
        });
    }
    let resets = lab.device().resets();
    assert!(
        resets.len() > off_again && resets.last() == Some(&ResetType::ForceOff),
        "no ForceOff after the sighting: {resets:?}"
    );
}
