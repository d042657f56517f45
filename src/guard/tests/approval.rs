//! R3's tests: approvals of a release's power-on and the policy that keeps them to the approvers.

use super::*;

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
