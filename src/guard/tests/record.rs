//! R1/R4's tests: when a release stands, and what its record on the Node says when they diverge.

use super::*;

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
fn a_node_deleted_under_a_standing_release_is_reported_on_its_binding_with_the_machine_s_identity() {
    let (binding, notice) = unguarded_by_node_deletion(&released(), "worker-1").unwrap();
    assert_eq!((binding.as_str(), notice.reason.as_str()), ("worker-1", UNGUARDED_NODE_DELETED));
    assert!(notice.warning && notice.message.contains(UUID), "{}", notice.message);
    let mut ended = released();
    ended.evidence.as_mut().unwrap().release.as_mut().unwrap().taint_removed_at = Some(MicroTime(t(9)));
    assert!(unguarded_by_node_deletion(&ended, "worker-1").is_none(), "coroner ended the release for its On");
    assert!(unguarded_by_node_deletion(&CoronerRemediationStatus::default(), "worker-1").is_none());
}
