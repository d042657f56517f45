//! The fence state machine's tests: what a fence records on its binding.

use super::*;

// The binding's status, from the fence -----------------------------------------------------------

pub(super) fn identity_verified(status: &crate::api::BmcBindingStatus) -> (String, String) {
    let c = conditions::find(&status.conditions, crate::verification::IDENTITY_VERIFIED).unwrap();
    (c.status.clone(), c.reason.clone())
}

#[test]
fn a_proven_fence_records_the_off_power_of_the_system_it_proved_on_its_binding_once() {
    let lab = lab(off_spec(), machine(true));
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done);
    let [(binding, written)] = &lab.binding_history()[..] else { panic!("{:?}", lab.binding_history()) };
    assert_eq!(binding, "worker-1");
    assert_eq!(
        (written.system_id.as_deref(), written.uuid.as_deref(), written.power_state.as_deref()),
        (Some("1"), Some(NODE_UUID), Some("Off"))
    );
    assert_eq!(identity_verified(written), ("True".into(), "UuidMatched".into()));
    let proven_at = status.evidence.unwrap().power_off.unwrap().proven_at.unwrap().0;
    assert_eq!(written.last_power_check_time.as_ref().map(|t| t.0), Some(proven_at), "the power is the proof's");
}

#[test]
fn a_fence_refused_by_identity_records_the_refusal_on_its_binding_and_no_power() {
    let lab = lab(off_spec(), Script::machine(OTHER_UUID, true));
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "IdentityMismatch".into()));
    let [(_, written)] = &lab.binding_history()[..] else { panic!("{:?}", lab.binding_history()) };
    assert_eq!(identity_verified(written), ("False".into(), "IdentityMismatch".into()));
    assert_eq!((written.power_state.as_deref(), written.last_power_check_time.as_ref()), (None, None));
    let message = &conditions::find(&written.conditions, crate::verification::IDENTITY_VERIFIED).unwrap().message;
    assert!(!message.contains(contract::RETRY_LEVER), "no NHC retry lever on a binding: {message}");
    assert!(lab.device().resets().is_empty());
}

#[test]
fn a_binding_status_write_the_api_server_refuses_never_fails_the_fence() {
    let lab = lab(off_spec(), machine(true));
    lab.refuse_binding_status_writes();
    let status = run(&lab);
    assert_eq!((phase_of(&status), succeeded(&status).0), (Phase::Done, "True".into()));
    assert!(lab.binding_history().is_empty());
    assert!(lab.errors().is_empty(), "{:?}", lab.errors());
}

/// Node worker-2, reporting `uuid`, healthy, with a binding that reaches the lab's BMC too.
pub(super) fn second_binding_on_the_same_bmc(lab: &Lab<Scripted>, uuid: &str) {
    let origin = crate::driver::ports::Target::origin(lab.device());
    lab.world(|t| {
        t.add_node_as("worker-2", uuid, "worker-2-boot-1", conditions::TRUE, &[]);
        t.add_binding("worker-2", "worker-2", &origin, None);
    });
}

#[test]
fn a_mistyped_binding_on_this_node_s_bmc_does_not_stop_this_node_s_fence() {
    // worker-2's binding was copied from worker-1's and points at worker-1's BMC.
    let lab = lab(off_spec(), machine(true));
    second_binding_on_the_same_bmc(&lab, OTHER_UUID);
    let status = run(&lab);
    assert_eq!((phase_of(&status), succeeded(&status).0), (Phase::Done, "True".into()));
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
}

#[test]
fn the_mistyped_binding_s_own_fence_is_refused_whatever_its_stored_verification_says() {
    // worker-1's binding is the mistyped one: the BMC it reaches is worker-2's machine.
    let lab = Lab::scripted(&Setup::new(OTHER_UUID, off_spec()), machine(true));
    second_binding_on_the_same_bmc(&lab, NODE_UUID);
    // A stale verification on worker-1's binding claims its machine; the read decides.
    lab.world(|t| {
        let mut status = crate::api::BmcBindingStatus {
            uuid: Some(OTHER_UUID.into()),
            system_id: Some("1".into()),
            observed_generation: Some(1),
            ..Default::default()
        };
        crate::api::conditions::set_observed(
            &mut status.conditions,
            crate::verification::IDENTITY_VERIFIED,
            conditions::TRUE,
            "UuidMatched",
            "an earlier verification",
            Some(1),
            t.wall(0),
        );
        t.write_binding_status("worker-1", &status).unwrap();
    });
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "BindingConflict".into()));
    let message = &conditions::find(&status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("node worker-2's"), "{message}");
    assert!(message.contains("BmcBinding worker-2 keeps working"), "{message}");
    assert!(lab.device().resets().is_empty(), "no power action on another node's machine");
    let [(binding, written)] = &lab.binding_history()[..] else { panic!("{:?}", lab.binding_history()) };
    assert_eq!(binding, "worker-1");
    assert_eq!(identity_verified(written), ("False".into(), "BindingConflict".into()));
}
