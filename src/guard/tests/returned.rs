//! R1's tests: a machine back while its release stood, in the loop, the finalizer and the sweep.

use super::*;

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
