use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::*;
use crate::{
    api::{Evidence, IdentityEvidence, NodeEvidence, ReleaseEvidence, ReleaseKind, RemediationStrategy, UuidMatch},
    contract::Reason,
    fence::{DeviceMark, Sampled},
};

const UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";

fn t(secs: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
}

fn released() -> CoronerRemediationStatus {
    CoronerRemediationStatus {
        evidence: Some(Evidence {
            node: Some(NodeEvidence {
                name: "worker-1".into(),
                uid: "node-uid".into(),
                system_uuid: UUID.into(),
                boot_id: "boot-1".into(),
                ready: "Unknown".into(),
                lease_present: true,
                lease_renew_time: None,
                admitted_at: MicroTime(t(0)),
                binding: None,
            }),
            identity: Some(IdentityEvidence {
                binding: "worker-1".into(),
                endpoint: "https://bmc".into(),
                system_id: "1".into(),
                system_path: "/redfish/v1/Systems/1".into(),
                bmc_uuid: UUID.into(),
                node_uuid: UUID.into(),
                match_kind: UuidMatch::Exact,
                verified_at: MicroTime(t(1)),
                tls_verified: true,
                binding_generation: None,
                binding_content: None,
            }),
            release: Some(ReleaseEvidence {
                release_id: None,
                kind: ReleaseKind::BmcProof,
                attestation: None,
                adopted_from: None,
                strategy: RemediationStrategy::OutOfServiceTaint,
                node_ready: "Unknown".into(),
                lease_renew_time: None,
                released_at: MicroTime(t(5)),
                taint_owned: true,
                pods_deleted: None,
                taint_removed_at: None,
                release_timed_out: false,
            }),
            ..Evidence::default()
        }),
        ..CoronerRemediationStatus::default()
    }
}

fn node(released: bool) -> NodeSnapshot {
    NodeSnapshot {
        name: "worker-1".into(),
        uid: "node-uid".into(),
        ready: Some("Unknown".into()),
        boot_id: "boot-1".into(),
        released_at: released.then(|| t(5)),
        ..NodeSnapshot::default()
    }
}

fn reading(uuid: &str, power: PowerState) -> Result<PowerReading, BmcFailure> {
    Ok(PowerReading {
        uuid: uuid.into(),
        power_state: power,
        sampled: Sampled::default(),
        through: DeviceMark::default(),
    })
}

/// The release id of `released()` for remediation `rem-uid`.
fn id() -> String {
    release_id("rem-uid", &released()).unwrap()
}

fn step(policy: GuardPolicy, status: &CoronerRemediationStatus, finding: &Finding, approval: Option<&str>) -> Decision {
    let id = release_id("rem-uid", status);
    let approval = super::approval(id.as_deref(), approval);
    let watch = Watch { policy, approval, instance: "p1/1", now: t(20), mono: StdDuration::from_secs(20) };
    next(status, &Memory::default(), finding, watch)
}

fn step_with(policy: GuardPolicy, status: &CoronerRemediationStatus, memory: &Memory, finding: &Finding) -> Decision {
    let watch =
        Watch { policy, approval: Approval::None, instance: "p1/1", now: t(20), mono: StdDuration::from_secs(20) };
    next(status, memory, finding, watch)
}

fn condition(status: &CoronerRemediationStatus) -> (String, String) {
    let c = conditions::find(&status.conditions, GUARD).unwrap();
    (c.status.clone(), c.reason.clone())
}

#[test]
fn a_release_stands_from_its_record_until_coroner_ends_it_for_the_on_or_the_node_is_ready() {
    assert!(release_stands(&released(), &node(true)));
    let ready = NodeSnapshot { ready: Some("True".into()), ..node(true) };
    assert!(!release_stands(&released(), &ready), "the node reports Ready=True: the release ends");
    let replaced = NodeSnapshot { uid: "another-node-uid".into(), ..ready };
    assert!(release_stands(&released(), &replaced), "a replaced Node's Ready is another kubelet's (R4)");
    assert!(release_stands(&released(), &node(false)), "a taint removed or rewritten by someone else ends nothing");
    assert!(!release_stands(&CoronerRemediationStatus::default(), &node(true)), "no release recorded yet");
    let mut ending = released();
    ending.evidence.as_mut().unwrap().release.as_mut().unwrap().taint_removed_at = Some(MicroTime(t(9)));
    assert!(release_stands(&ending, &node(true)), "coroner decided to take its taint off, but it is still there");
    assert!(release_stands(&ending, &node(false)), "Reboot took its taint off for the On, not yet answered");
    let on = |result: Option<&str>| crate::api::Progress {
        intent: Some(Intent {
            action: PowerAction::On,
            attempt: 1,
            decided_at: MicroTime(t(9)),
            instance: "p1/1".into(),
            result: result.map(str::to_owned),
        }),
        ..Default::default()
    };
    ending.progress = Some(on(Some("HTTP 204")));
    assert!(!release_stands(&ending, &node(false)), "its On answered: from then on the power-on is its own");
    let mut deleted_pods = released();
    deleted_pods.evidence.as_mut().unwrap().release.as_mut().unwrap().taint_owned = false;
    assert!(release_stands(&deleted_pods, &node(false)), "ResourceDeletion: no taint, and the release stands");
    deleted_pods.progress = Some(on(None));
    assert!(release_stands(&deleted_pods, &node(false)), "its On decided but unanswered: it may never have been sent");
    deleted_pods.progress = Some(on(Some("BMC unreachable: timed out")));
    assert!(!release_stands(&deleted_pods, &node(false)), "its On sent, even without a good answer");
    let ready = NodeSnapshot { ready: Some("True".into()), ..node(true) };
    assert!(!release_stands(&released(), &ready), "the node reports Ready=True");
}

/// An attestation whose release was written into the remediation but not yet confirmed on the Node.
fn releasing_attestation() -> crate::api::AttestationEvidence {
    crate::api::AttestationEvidence {
        acknowledged: Vec::new(),
        name: "worker-1-abcde".into(),
        uid: "a-1".into(),
        attested_by: "alice".into(),
        reason: "dark rack".into(),
        attested_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(0)),
        state: crate::api::AttestedReleaseState::Releasing,
    }
}

#[test]
fn an_attested_record_still_releasing_stands_only_while_the_node_shows_its_update() {
    let mut unconfirmed = released();
    let release = unconfirmed.evidence.as_mut().and_then(|e| e.release.as_mut()).unwrap();
    release.kind = crate::api::ReleaseKind::OperatorAttested;
    release.attestation = Some(releasing_attestation());
    assert!(!release_stands(&unconfirmed, &node(false)), "its Node update never came: no release to guard");
    assert!(release_stands(&unconfirmed, &node(true)), "its taint is on the Node: the update took effect");
    let taint_removed = NodeSnapshot { release_recorded: true, ..node(false) };
    assert!(
        release_stands(&unconfirmed, &taint_removed),
        "its taint removed in the gap before the record was confirmed: its owner record shows the update was made"
    );
    let confirmed = unconfirmed.evidence.as_mut().and_then(|e| e.release.as_mut()).unwrap();
    confirmed.attestation.as_mut().unwrap().state = crate::api::AttestedReleaseState::Released;
    assert!(release_stands(&unconfirmed, &node(false)), "a confirmed record stands from its record (R4)");
}

#[test]
fn an_approval_counts_only_for_the_release_it_names() {
    let id = id();
    assert_eq!(approval(Some(&id), None), Approval::None);
    assert_eq!(
        approval(Some(&id), Some(&format!("{id} alice: disks checked"))),
        Approval::ForThisRelease("alice: disks checked")
    );
    assert_eq!(approval(Some(&id), Some("alice: disks checked")), Approval::NotForThisRelease("alice: disks checked"));
    let other = format!("other-uid@{} bob: yes", t(5).as_second());
    assert_eq!(approval(Some(&id), Some(&other)), Approval::NotForThisRelease(&other));
    assert_eq!(approval(None, Some(&format!("{id} alice"))), Approval::NotForThisRelease(&format!("{id} alice")));
}

#[test]
fn an_approval_for_another_release_is_reported_once_and_the_guard_enforces() {
    let decision =
        step(GuardPolicy::Enforce, &released(), &Finding::NotOff(PowerState::On), Some("alice: from before"));
    assert_eq!(decision.reset, Some(ResetType::ForceOff), "it counts for nothing");
    assert!(decision.notices.iter().any(|n| n.reason == APPROVAL_NOT_FOR_THIS_RELEASE));
    let again =
        step(GuardPolicy::Enforce, &decision.status, &Finding::NotOff(PowerState::On), Some("alice: from before"));
    assert!(!again.notices.iter().any(|n| n.reason == APPROVAL_NOT_FOR_THIS_RELEASE), "reported once");
}

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

fn first_intent() -> CoronerRemediationStatus {
    step(GuardPolicy::Enforce, &released(), &Finding::NotOff(PowerState::On), None).status
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
fn a_node_back_with_its_old_boot_id_never_went_down() {
    let status = released();
    let mut back = node(true);
    back.ready = Some("True".into());
    assert!(fence_did_not_take_effect(&status, &back).unwrap().contains("boot-1"));
    back.boot_id = "boot-2".into();
    assert_eq!(fence_did_not_take_effect(&status, &back), None, "a new boot: it did go down");
    let silent = node(true);
    assert_eq!(fence_did_not_take_effect(&status, &silent), None, "not reporting yet");
    assert_eq!(fence_did_not_take_effect(&CoronerRemediationStatus::default(), &back), None, "nothing released");
    let decision = record_did_not_take_effect(&status, &Memory::default(), "never went down", t(9)).unwrap();
    assert_eq!(conditions::status_of(&decision.status.conditions, FENCE_TOOK_EFFECT), Some("False"));
    assert!(
        record_did_not_take_effect(&decision.status, &Memory::default(), "never went down", t(10)).is_none(),
        "once"
    );
}

#[test]
fn the_finalizer_reports_a_fence_that_did_not_take_effect_only_if_no_reconcile_did() {
    let status = released();
    let mut back = node(true);
    back.ready = Some("True".into());
    let decided = at_deletion(&status, &back, None, "worker-1", "rem-uid", false);
    assert!(decided.report.is_some() && decided.watch.is_none());
    let recorded = record_did_not_take_effect(&status, &Memory::default(), "never went down", t(9)).unwrap().status;
    let decided = at_deletion(&recorded, &back, None, "worker-1", "rem-uid", false);
    assert_eq!(decided, AtDeletion { report: None, watch: None }, "the reconcile published and counted it");
    let decided = at_deletion(&status, &back, None, "worker-1", "rem-uid", true);
    assert_eq!(decided, AtDeletion { report: None, watch: None }, "this process reported it");
}

#[test]
fn a_retried_finalizer_judges_the_record_its_earlier_try_left_when_the_rest_of_the_evidence_went_with_it() {
    // The earlier try removed the taint; the status never recorded the release (its write was lost).
    let unrecorded = CoronerRemediationStatus {
        evidence: released().evidence.map(|e| crate::api::Evidence { release: None, ..e }),
        ..released()
    };
    let silent = node(false);
    assert_eq!(watched_after_deletion(&unrecorded, &silent, "worker-1", "rem-uid"), None, "nothing else shows it");
    let own = watched();
    let decided = at_deletion(&unrecorded, &silent, Some(&own), "worker-1", "rem-uid", false);
    assert_eq!(decided, AtDeletion { report: None, watch: Some(own.clone()) }, "kept");
    let mut back = node(false);
    back.ready = Some("True".into());
    let decided = at_deletion(&unrecorded, &back, Some(&own), "worker-1", "rem-uid", false);
    assert!(decided.report.unwrap().contains("boot-1"), "back on its old boot: reported");
    back.boot_id = "boot-2".into();
    assert_eq!(
        at_deletion(&unrecorded, &back, Some(&own), "worker-1", "rem-uid", false),
        AtDeletion { report: None, watch: None }
    );
    let theirs = UnconfirmedRelease { uid: "another-uid".into(), ..watched() };
    let decided = at_deletion(&unrecorded, &silent, Some(&theirs), "worker-1", "rem-uid", false);
    assert_eq!(decided.watch, None, "another remediation's record is the sweep's");
}

#[test]
fn a_finalizer_leaves_a_release_to_watch_only_while_its_node_has_not_reported_on_its_old_boot() {
    let silent = node(true);
    let watched = watched_after_deletion(&released(), &silent, "worker-1", "rem-uid").unwrap();
    assert_eq!(watched.boot_id, "boot-1");
    assert_eq!((watched.remediation.as_str(), watched.uid.as_str()), ("worker-1", "rem-uid"));
    let mut back = node(true);
    back.ready = Some("True".into());
    assert_eq!(watched_after_deletion(&released(), &back, "worker-1", "rem-uid"), None, "the finalizer reports it");
    let mut booted = node(true);
    booted.boot_id = "boot-2".into();
    assert_eq!(watched_after_deletion(&released(), &booted, "worker-1", "rem-uid"), None, "it went down");
    let nothing = CoronerRemediationStatus::default();
    assert_eq!(watched_after_deletion(&nothing, &silent, "worker-1", "rem-uid"), None, "nothing released");
    let reported = record_did_not_take_effect(&released(), &Memory::default(), "never went down", t(9)).unwrap().status;
    let decided = at_deletion(&reported, &silent, None, "worker-1", "rem-uid", false);
    assert_eq!(decided.watch, None, "already reported");
}

#[test]
fn a_release_watched_past_its_remediation_is_reported_when_the_node_returns_on_its_old_boot() {
    let record = watched();
    assert_eq!(after_deletion(&record, &node(false), &[]), AfterDeletion::Waits, "not reporting yet");
    let mut back = node(false);
    back.ready = Some("False".into());
    let AfterDeletion::NeverWentDown(message) = after_deletion(&record, &back, &[]) else { panic!("not reported") };
    assert!(message.contains("boot-1") && message.contains("rem-uid"), "{message}");
    let listed = ["rem-uid".to_owned()];
    assert_eq!(after_deletion(&record, &back, &listed), AfterDeletion::Waits, "still listed: its finalizer judges");
    back.boot_id = "boot-2".into();
    assert_eq!(after_deletion(&record, &back, &[]), AfterDeletion::BootedSince);
    let mut unknown = node(false);
    unknown.boot_id = String::new();
    assert_eq!(after_deletion(&record, &unknown, &[]), AfterDeletion::Waits, "no bootID says nothing");
}

fn watched() -> UnconfirmedRelease {
    UnconfirmedRelease { uid: "rem-uid".into(), remediation: "worker-1".into(), boot_id: "boot-1".into() }
}

fn booted(boot_id: &str, annotations: &[(&str, &str)]) -> Node {
    let mut node = k8s_node(annotations);
    node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
        node_info: Some(k8s_openapi::api::core::v1::NodeSystemInfo { boot_id: boot_id.into(), ..Default::default() }),
        ..Default::default()
    });
    node
}

#[test]
fn a_finalizer_records_its_release_to_watch_only_on_the_boot_it_was_judged_on_and_takes_back_its_own_old_record() {
    let record = watched();
    let written = with_watch(&booted("boot-1", &[]), Some(&record), "rem-uid").unwrap();
    assert_eq!(unconfirmed_release(&written), Some(record.clone()));
    assert_eq!(with_watch(&written, Some(&record), "rem-uid"), None, "already there");
    assert_eq!(with_watch(&booted("boot-2", &[]), Some(&record), "rem-uid"), None, "booted since the read");
    // A retried finalizer that reported it (or found a new boot) takes its earlier record back.
    let taken = with_watch(&written, None, "rem-uid").unwrap();
    assert_eq!(unconfirmed_release(&taken), None);
    assert_eq!(with_watch(&written, None, "another-uid"), None, "another remediation's record stays");
    assert_eq!(with_watch(&booted("boot-1", &[]), None, "rem-uid"), None, "nothing to change");
}

#[test]
fn an_attested_release_whose_node_update_never_came_leaves_nothing_to_watch() {
    let mut status = attested();
    status.evidence.as_mut().unwrap().release.as_mut().unwrap().attestation = Some(releasing_attestation());
    let silent = node(false);
    assert_eq!(watched_after_deletion(&status, &silent, "worker-1", "rem-uid"), None);
    let mut back = node(false);
    back.ready = Some("True".into());
    assert_eq!(fence_did_not_take_effect(&status, &back), None, "nothing was released");
    let mut made = node(false);
    made.release_recorded = true;
    assert!(watched_after_deletion(&status, &made, "worker-1", "rem-uid").is_some(), "the Node shows the update");
}

fn k8s_node(annotations: &[(&str, &str)]) -> Node {
    let mut node = Node::default();
    node.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    node
}

#[test]
fn an_approval_ends_with_the_release_it_names() {
    let value = format!("{} alice: disks checked", id());
    let approved = k8s_node(&[(APPROVAL_ANNOTATION, value.as_str())]);
    assert!(approval_ends(&released(), &approved, "rem-uid"));
    assert!(!approval_ends(&released(), &k8s_node(&[]), "rem-uid"), "nothing to remove");
    assert!(!approval_ends(&released(), &approved, "another-uid"), "another release's approval is left alone");
    assert!(
        !approval_ends(&CoronerRemediationStatus::default(), &approved, "rem-uid"),
        "a remediation that released nothing leaves another's approval alone"
    );
}

/// Through the loop: a node fenced with `Off`, its return approved, the remediation deleted (as NHC
/// does once the node is healthy): the finalizer takes the approval with the taints, so the node's
/// next fence is guarded again.
#[test]
fn the_finalizer_removes_the_approval_with_the_taints() {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        sim::{
            lab::{Lab, Setup},
            script::Script,
        },
    };
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
    let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
    let fenced = futures::executor::block_on(lab.run());
    assert!(fenced.evidence.as_ref().and_then(|e| e.release.as_ref()).is_some(), "{fenced:?}");
    let uid = lab.world(|t| t.remediation("worker-1")).and_then(|r| r.metadata.uid).unwrap();
    let value = format!("{} alice: disks checked", release_id(&uid, &fenced).unwrap());
    lab.world(|t| t.annotate_node("worker-1", APPROVAL_ANNOTATION, &value));
    lab.world(|t| t.delete_remediation("worker-1"));
    futures::executor::block_on(lab.run());
    assert!(lab.world(|t| t.remediation("worker-1")).is_none(), "the finalizer let go");
    let node = lab.world(|t| t.node("worker-1")).unwrap();
    assert!(!node.annotations().contains_key(APPROVAL_ANNOTATION), "{:?}", node.metadata.annotations);
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(!taints.iter().any(|t| t.key.starts_with("coroner.dev/") || t.key == "node.kubernetes.io/out-of-service"));
}

#[test]
fn an_out_of_service_taint_left_by_a_gone_remediation_is_removed_once_the_node_is_ready_on_a_new_boot() {
    use crate::driver::orphans::{HELD, REMOVED};
    let lab = fenced_off();
    // A deposed leader's release landed after the finalizer ran: the taint stays, its owner gone.
    lab.world(|t| t.remediations.remove("worker-1"));
    let sweep = || futures::executor::block_on(lab.sweep()).unwrap();
    let on_node = || {
        let node = lab.world(|t| t.node("worker-1")).unwrap();
        node.spec.and_then(|s| s.taints).unwrap_or_default().iter().any(|t| t.key == crate::taints::OUT_OF_SERVICE_KEY)
    };
    let events = |reason: &str| lab.reasons_on("Node").into_iter().filter(|r| r == reason).count();
    sweep();
    sweep();
    assert!(on_node(), "not Ready: the taint stays");
    assert_eq!(events(HELD), 1, "reported once per cause");
    assert_eq!(events(REMOVED), 1, "the fencing taint goes at once");
    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, None));
    sweep();
    assert!(on_node(), "Ready on the boot it had when released: it may never have gone down");
    assert_eq!(events(HELD), 2, "a new cause is reported");
    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, Some("worker-1-boot-2")));
    sweep();
    assert!(!on_node(), "Ready on a new boot: removed");
    assert_eq!(events(REMOVED), 2);
    let node = lab.world(|t| t.node("worker-1")).unwrap();
    assert!(!node.annotations().contains_key("coroner.dev/out-of-service-owner"));
}

#[test]
fn an_out_of_service_taint_left_by_a_gone_remediation_is_taken_over_by_the_nodes_next_fence() {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        bmc::ResetType,
    };
    let lab = fenced_off();
    let gone = lab.world(|t| t.remediation("worker-1")).and_then(|r| r.metadata.uid).unwrap();
    // A deposed leader's release landed after the finalizer ran; NHC then remediates the node again.
    lab.world(|t| t.remediations.remove("worker-1"));
    let spec = CoronerRemediationSpec { action: FenceAction::Reboot, ..CoronerRemediationSpec::default() };
    lab.world(|t| t.create_remediation("worker-1", "worker-1", &spec));
    let uid = lab.world(|t| t.remediation("worker-1")).and_then(|r| r.metadata.uid).unwrap();
    let status = futures::executor::block_on(lab.run());
    let release = status.evidence.as_ref().and_then(|e| e.release.as_ref()).unwrap();
    assert!(release.taint_owned, "its own proof, then the stale taint taken over as its release");
    assert!(lab.reasons_on("Node").iter().any(|r| r == crate::fence::STALE_TAINT_ADOPTED));
    let message = status.conditions.iter().map(|c| c.message.as_str()).collect::<Vec<_>>().join(" | ");
    let fenced = crate::api::conditions::find(&status.conditions, crate::contract::SUCCEEDED).unwrap();
    assert_eq!(fenced.status, conditions::TRUE, "{message}");
    // As its own: the Reboot took it off and powered the machine on (no stale taint blocks the On).
    assert_eq!(lab.device().resets().last(), Some(&ResetType::On));
    let node = lab.world(|t| t.node("worker-1")).unwrap();
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(!taints.iter().any(|t| t.key == crate::taints::OUT_OF_SERVICE_KEY), "{taints:?}");
    assert_eq!(
        crate::taints::ownership(
            &lab.world(|t| t.node("worker-1")).unwrap(),
            crate::taints::CoronerTaint::OutOfService
        ),
        None
    );
    // The gone remediation's fencing taint is the sweep's: it goes at once.
    futures::executor::block_on(lab.sweep()).unwrap();
    assert_eq!(crate::taints::record_owners(&lab.world(|t| t.node("worker-1")).unwrap()), Vec::<String>::new());
    assert_ne!(uid, gone);
}

#[test]
fn a_taken_over_taint_whose_release_is_taken_back_goes_back_to_the_gone_remediation() {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        taints::{CoronerTaint, ownership},
    };
    let lab = fenced_off();
    let orphan = lab.world(|t| t.node("worker-1")).and_then(|n| ownership(&n, CoronerTaint::OutOfService)).unwrap();
    lab.world(|t| t.remediations.remove("worker-1"));
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
    lab.world(|t| t.create_remediation("worker-1", "worker-1", &spec));
    // The kubelet renews its Lease right after the take-over: the machine is not dead after all.
    lab.renew_lease_right_after_the_release();
    let status = futures::executor::block_on(lab.run());
    let failed = crate::api::conditions::find(&status.conditions, crate::contract::SUCCEEDED).unwrap();
    assert_eq!((failed.status.as_str(), failed.reason.as_str()), ("False", "FenceDidNotTakeEffect"));
    // The taint stays, recorded again as the gone remediation's: the sweep judges it as before.
    let node = lab.world(|t| t.node("worker-1")).unwrap();
    assert_eq!(ownership(&node, CoronerTaint::OutOfService), Some(orphan.clone()));
    assert_eq!(crate::taints::release_on_node(&node, &orphan.uid), Some(orphan.time_added.0));
}

/// A lab whose machine, on, was fenced with `action: Off` (proven off and released) through the loop.
fn fenced_off() -> crate::sim::lab::Lab<crate::sim::script::Scripted> {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        sim::{
            lab::{Lab, Setup},
            script::Script,
        },
    };
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
    let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
    futures::executor::block_on(lab.run());
    lab
}

/// Through the loop: the node reports back with its old bootID; the reconcile records it (a Warning
/// on the remediation and the Node, the metric); NHC's delete follows, and the finalizer does not
/// report it a second time.
/// A node fenced Off (its machine proven off and released) that comes back Ready with the bootID it
/// had before the fence.
fn fenced_and_back_with_its_old_boot_id() -> crate::sim::lab::Lab<crate::sim::script::Scripted> {
    let lab = fenced_off();
    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, Some("worker-1-boot-1")));
    lab
}

#[test]
fn a_fence_that_did_not_take_effect_is_reported_once_on_the_node() {
    use crate::{driver::World, telemetry::NodeLabels};
    let lab = fenced_and_back_with_its_old_boot_id();
    let back = futures::executor::block_on(lab.run());
    assert_eq!(
        conditions::find(&back.conditions, FENCE_TOOK_EFFECT).map(|c| c.reason.as_str()),
        Some(DID_NOT_TAKE_EFFECT)
    );
    lab.world(|t| t.delete_remediation("worker-1"));
    futures::executor::block_on(lab.run());
    assert!(lab.world(|t| t.remediation("worker-1")).is_none());
    let on_node: Vec<String> = lab.reasons_on("Node").into_iter().filter(|r| r == DID_NOT_TAKE_EFFECT).collect();
    assert_eq!(on_node.len(), 1, "{:?}", lab.reasons_on("Node"));
    let counted = lab.metrics().fence_did_not_take_effect.get_or_create(&NodeLabels { node: "worker-1".into() }).get();
    assert_eq!(counted, 1);
}

/// Through the loop: a remediation deleted by hand while its partitioned node has not reported; the
/// node returns later on the boot it had before the fence. The finalizer leaves the
/// release on the Node, and the sweep of the node's next event reports it, once.
#[test]
fn a_release_whose_remediation_was_deleted_before_its_node_returned_is_still_reported() {
    use crate::{driver::World, telemetry::NodeLabels};
    let lab = fenced_off();
    lab.world(|t| t.delete_remediation("worker-1"));
    futures::executor::block_on(lab.run());
    assert!(lab.world(|t| t.remediation("worker-1")).is_none());
    let node = lab.world(|t| t.node("worker-1")).unwrap();
    let record = unconfirmed_release(&node).expect("the release is left to watch");
    assert_eq!(record.boot_id, "worker-1-boot-1");
    let sweep = || futures::executor::block_on(lab.sweep()).unwrap();
    sweep();
    assert!(lab.reasons_on("Node").iter().all(|r| r != DID_NOT_TAKE_EFFECT), "not back yet");
    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, Some("worker-1-boot-1")));
    sweep();
    sweep();
    let on_node = lab.reasons_on("Node").into_iter().filter(|r| r == DID_NOT_TAKE_EFFECT).count();
    assert_eq!(on_node, 1, "{:?}", lab.reasons_on("Node"));
    let counted = lab.metrics().fence_did_not_take_effect.get_or_create(&NodeLabels { node: "worker-1".into() }).get();
    assert_eq!(counted, 1);
    assert_eq!(unconfirmed_release(&lab.world(|t| t.node("worker-1")).unwrap()), None, "judged: the record goes");
}

/// A finalizer that wrote the record and did not finish (its process stopped) runs again in another
/// process once the node is back: the Warning goes out once, from the finalizer, which takes its
/// record back; the sweep leaves a listed remediation's record to it.
#[test]
fn a_retried_finalizer_and_the_sweep_report_a_release_that_did_not_take_effect_once() {
    let lab = fenced_off();
    lab.world(|t| t.delete_remediation("worker-1"));
    let deleting = lab.world(|t| t.remediation("worker-1")).unwrap();
    futures::executor::block_on(crate::driver::cleanup(&lab, lab.local(), &deleting)).unwrap();
    assert!(unconfirmed_release(&lab.world(|t| t.node("worker-1")).unwrap()).is_some());
    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, Some("worker-1-boot-1")));
    futures::executor::block_on(lab.sweep()).unwrap();
    let reported = || lab.reasons_on("Node").into_iter().filter(|r| r == DID_NOT_TAKE_EFFECT).count();
    assert_eq!(reported(), 0, "still listed: its finalizer judges");
    lab.restart();
    futures::executor::block_on(lab.run());
    assert!(lab.world(|t| t.remediation("worker-1")).is_none());
    assert_eq!(reported(), 1, "the finalizer reported it: {:?}", lab.reasons_on("Node"));
    assert_eq!(unconfirmed_release(&lab.world(|t| t.node("worker-1")).unwrap()), None, "and took its record back");
    futures::executor::block_on(lab.sweep()).unwrap();
    assert_eq!(reported(), 1, "{:?}", lab.reasons_on("Node"));
}

#[test]
fn a_release_watched_past_its_remediation_ends_quietly_when_the_node_boots_anew() {
    let lab = fenced_off();
    lab.world(|t| t.delete_remediation("worker-1"));
    futures::executor::block_on(lab.run());
    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, Some("worker-1-boot-2")));
    futures::executor::block_on(lab.sweep()).unwrap();
    assert!(lab.reasons_on("Node").iter().all(|r| r != DID_NOT_TAKE_EFFECT));
    assert_eq!(unconfirmed_release(&lab.world(|t| t.node("worker-1")).unwrap()), None);
}

fn attested() -> CoronerRemediationStatus {
    let mut status = released();
    let evidence = status.evidence.as_mut().unwrap();
    evidence.identity = None;
    evidence.release.as_mut().unwrap().kind = ReleaseKind::OperatorAttested;
    status
}

fn found(uuid: &str, claims: Vec<identity::Claim>) -> IdentityFound {
    IdentityFound {
        binding: "worker-1".into(),
        endpoint: "https://bmc".into(),
        tls_verified: Some(true),
        system: crate::bmc::SystemReading {
            id: "1".into(),
            path: "/redfish/v1/Systems/1".into(),
            uuid: uuid.into(),
            power_state: PowerState::On,
            reset_target: None,
            aliases: Vec::new(),
        },
        claims,
        through: DeviceMark::default(),
        sampled: Sampled::default(),
        origin: "https://bmc:443".into(),
    }
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
fn a_finalizer_retried_after_a_conflict_reports_a_fence_that_did_not_take_effect_once() {
    use crate::{
        driver::{self, World},
        telemetry::NodeLabels,
    };
    // Deleted by NHC before any reconcile saw the old bootID: the finalizer reports.
    let lab = fenced_and_back_with_its_old_boot_id();
    let remediation = lab.world(|t| t.remediation("worker-1")).unwrap();
    for _ in 0..2 {
        futures::executor::block_on(driver::cleanup(&lab, lab.local(), &remediation)).unwrap();
    }
    let on_node: Vec<String> = lab.reasons_on("Node").into_iter().filter(|r| r == DID_NOT_TAKE_EFFECT).collect();
    assert_eq!(on_node.len(), 1, "{:?}", lab.reasons_on("Node"));
    let counted = lab.metrics().fence_did_not_take_effect.get_or_create(&NodeLabels { node: "worker-1".into() }).get();
    assert_eq!(counted, 1);
}

#[test]
fn a_node_back_ready_with_no_approval_of_its_release_is_reported_once() {
    let ready = NodeSnapshot { ready: Some("True".into()), ..node(true) };
    let reported = returned_without_approval(&released(), &ready, Approval::None, t(20)).expect("reported");
    assert_eq!(reported.guard.as_ref().and_then(|g| g.returned_without_approval.clone()), Some(MicroTime(t(20))));
    assert_eq!(returned_without_approval(&reported, &ready, Approval::None, t(30)), None, "once");
    let stale = Approval::NotForThisRelease("alice: an old one");
    assert!(returned_without_approval(&released(), &ready, stale, t(20)).is_some(), "an approval of another release");
    let approved = Approval::ForThisRelease("alice: disks checked");
    assert_eq!(returned_without_approval(&released(), &ready, approved, t(20)), None, "approved: nothing to report");
    assert_eq!(returned_without_approval(&released(), &node(true), Approval::None, t(20)), None, "not Ready yet");
    let mut rebooted = released();
    rebooted.evidence.as_mut().unwrap().release.as_mut().unwrap().taint_removed_at = Some(MicroTime(t(9)));
    assert_eq!(returned_without_approval(&rebooted, &ready, Approval::None, t(20)), None, "coroner's own power-on");
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

/// Through the loop: the released node reports Ready=True with a new bootID (someone powered it on,
/// nobody approved) and NHC deletes the remediation before any reconcile of it runs: the finalizer
/// reports the return, once.
#[test]
fn a_return_only_the_finalizer_sees_is_reported_once() {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        driver::World,
        sim::{
            lab::{Lab, Setup},
            script::Script,
        },
        telemetry::NodeLabels,
    };
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
    let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
    futures::executor::block_on(lab.run());
    lab.world(|t| {
        t.set_ready("worker-1", conditions::TRUE, Some("worker-1-boot-2"));
        t.delete_remediation("worker-1");
    });
    futures::executor::block_on(lab.run());
    assert!(lab.world(|t| t.remediation("worker-1")).is_none(), "the finalizer let go");
    let on_node: Vec<String> = lab.reasons_on("Node").into_iter().filter(|r| r == RETURNED_WITHOUT_APPROVAL).collect();
    assert_eq!(on_node.len(), 1, "{:?}", lab.reasons_on("Node"));
    let counted = lab.metrics().returned_without_approval.get_or_create(&NodeLabels { node: "worker-1".into() }).get();
    assert_eq!(counted, 1);
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
fn a_release_whose_taint_was_removed_or_rewritten_or_whose_node_was_replaced_is_said_to_diverge_once() {
    let status = released();
    assert_eq!(record_diverged(&status, &node(true)), None, "the record and the Node agree");
    let removed = record_diverged(&status, &node(false)).unwrap();
    assert!(removed.contains("removed by someone else"), "{removed}");
    let rewritten =
        NodeSnapshot { out_of_service: Some("node.kubernetes.io/out-of-service=x:NoExecute".into()), ..node(false) };
    assert!(record_diverged(&status, &rewritten).unwrap().contains("rewritten"));
    let replaced = NodeSnapshot { uid: "new-uid".into(), ..node(false) };
    assert!(record_diverged(&status, &replaced).unwrap().contains("replaced"));
    // Reported once per cause; a Node that agrees again clears the record without a notice.
    let (diverged, notice) = diverged_record(&status, &node(false)).unwrap();
    assert_eq!(notice.unwrap().reason, RECORD_DIVERGED);
    assert_eq!(diverged_record(&diverged, &node(false)), None);
    let (agreed, notice) = diverged_record(&diverged, &node(true)).unwrap();
    assert!(notice.is_none() && agreed.guard.unwrap().record_diverged.is_none());
}

#[test]
fn an_approval_without_a_policy_guarding_it_is_honoured_and_said_once() {
    assert!(approval_policy_problem(&[], &[]).unwrap().contains("no ValidatingAdmissionPolicy"));
    let (missing, notice) = approval_policy_record(&released(), Some("no policy"), t(10)).unwrap();
    assert_eq!(notice.unwrap().reason, APPROVAL_POLICY_MISSING);
    let condition = crate::api::conditions::find(&missing.conditions, APPROVAL_POLICY).unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", APPROVAL_POLICY_MISSING));
    assert_eq!(approval_policy_record(&missing, Some("no policy"), t(20)), None, "said once");
    let (in_force, notice) = approval_policy_record(&missing, None, t(30)).unwrap();
    assert!(notice.is_none());
    assert_eq!(crate::api::conditions::status_of(&in_force.conditions, APPROVAL_POLICY), Some("True"));
}

#[test]
fn a_node_deleted_under_a_standing_release_is_reported_on_its_binding_with_the_machine_s_identity() {
    let (binding, notice) = unguarded_by_node_deletion(&released(), "worker-1").unwrap();
    assert_eq!((binding.as_str(), notice.reason.as_str()), ("worker-1", UNGUARDED_NODE_DELETED));
    assert!(notice.warning && notice.message.contains(UUID), "{}", notice.message);
    let mut ended = released();
    ended.evidence.as_mut().unwrap().release.as_mut().unwrap().taint_removed_at = Some(MicroTime(t(9)));
    assert!(unguarded_by_node_deletion(&ended, "worker-1").is_none(), "coroner ended the release for its On");
    assert!(unguarded_by_node_deletion(&CoronerRemediationStatus::default(), "worker-1").is_none());
}

#[test]
fn a_release_gets_its_id_when_it_is_written_and_an_earlier_versions_record_keeps_none() {
    let none = CoronerRemediationStatus::default();
    let stamped = with_release_id(released(), &none, "rem-uid");
    let recorded = |s: &CoronerRemediationStatus| s.evidence.as_ref()?.release.as_ref()?.release_id.clone();
    assert_eq!(recorded(&stamped), Some(id()), "the write that makes the release records its id");
    assert_eq!(recorded(&with_release_id(released(), &released(), "rem-uid")), None, "an earlier version's record");
    // An attested release confirmed at its Node update moves its time, and its id with it.
    let mut confirmed = stamped.clone();
    confirmed.evidence.as_mut().unwrap().release.as_mut().unwrap().released_at = MicroTime(t(9));
    assert_eq!(recorded(&with_release_id(confirmed, &stamped, "rem-uid")), Some(release_id_at("rem-uid", t(9))));
}

/// R3: an approval that names no release is never honoured, however long after the release it was
/// written (no build predates release ids: there is no earlier rule to carry over); it is reported
/// once, and the guard switches the machine off at every power-on.
#[test]
fn an_approval_that_names_no_release_is_never_honoured_whenever_it_was_written() {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        sim::{
            lab::{Lab, Setup},
            script::Script,
        },
    };
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
    let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
    let fenced = futures::executor::block_on(lab.run());
    assert!(fenced.evidence.as_ref().and_then(|e| e.release.as_ref()).is_some(), "released");
    futures::executor::block_on(lab.clock().sleep(StdDuration::from_secs(5)));
    // The shape the removed upgrade step acted on: a record without its id, and an approval naming no
    // release written (managedFields) after the release.
    let now = lab.clock().now();
    lab.world(|t| {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
        let rv = t.next_rv();
        let r = t.remediations.get_mut("worker-1").unwrap();
        r.status.as_mut().unwrap().evidence.as_mut().unwrap().release.as_mut().unwrap().release_id = None;
        r.metadata.resource_version = Some(rv);
        t.annotate_node("worker-1", APPROVAL_ANNOTATION, "alice: disks checked");
        t.nodes.get_mut("worker-1").unwrap().metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl-annotate".into()),
            fields_v1: Some(FieldsV1(
                serde_json::json!({"f:metadata": {"f:annotations": {"f:coroner.dev/power-on-approved": {}}}}),
            )),
            time: Some(Time(now)),
            ..ManagedFieldsEntry::default()
        }]);
    });
    let before = lab.device().resets().len();
    lab.device().switch_on("1");
    for _ in 0..2 {
        futures::executor::block_on(lab.clock().sleep(StdDuration::from_secs(15)));
        let _ = futures::executor::block_on(lab.reconcile());
    }
    let value = lab.world(|t| t.node("worker-1")).unwrap().annotations()[APPROVAL_ANNOTATION].clone();
    assert_eq!(value, "alice: disks checked", "left as written: nothing rewrites it");
    assert_eq!(lab.device().resets()[before..], [crate::bmc::ResetType::ForceOff], "{:?}", lab.reasons());
    assert_eq!(lab.reasons().iter().filter(|r| *r == APPROVAL_NOT_FOR_THIS_RELEASE).count(), 1, "{:?}", lab.reasons());
}

#[test]
fn a_node_back_on_its_old_boot_counts_against_a_release_whose_status_write_has_not_landed() {
    let mut unrecorded = released();
    unrecorded.evidence.as_mut().unwrap().release = None;
    let back = |released: bool| NodeSnapshot { ready: Some(conditions::TRUE.into()), ..node(released) };
    assert!(fence_did_not_take_effect(&unrecorded, &back(false)).is_none(), "nothing was released");
    assert!(fence_did_not_take_effect(&unrecorded, &back(true)).is_some(), "its exact taint is on the Node");
    let mut begun = unrecorded.clone();
    begun.progress.get_or_insert_with(Default::default).release_begun = released().evidence.unwrap().release;
    assert!(fence_did_not_take_effect(&begun, &back(false)).is_some(), "its pod deletions may have begun");
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
