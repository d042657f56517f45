//! The fence state machine's tests: the release, its workloads and a Reboot's power-on.

use super::*;

// Releasing and after ----------------------------------------------------------------------------------

/// Releasing: after the ForceOff at t=1, Off read at t=2, 3 and 4.
pub(super) fn releasing(spec: &CoronerRemediationSpec) -> State {
    let node = node();
    let read_off = |state: &State, at| State::from(&step(spec, state, power(PowerState::Off), ctx(at, &node)));
    let state = read_off(&read_off(&read_off(&confirming(spec), 2), 3), 4);
    assert_eq!(state.status.phase, Some(Phase::Releasing));
    state
}

#[test]
fn a_reading_of_life_after_the_proof_ends_the_proof_even_while_a_gate_holds_the_force_off() {
    let spec = spec();
    let node = node();
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 1s ago".to_owned());
    let held = Context { hold_power_action: Some(&hold), ..ctx(5, &node) };
    let on = step(&spec, &releasing(&spec), power(PowerState::Other("Unknown".into())), held);
    assert_eq!(on.reset, None, "the ForceOff is held");
    assert!(on.memory.proof.is_none() && on.memory.run.is_none(), "P3: the run is broken: {:?}", on.memory);
    // One Off reading afterwards is no proof: it starts a new run.
    let off = step(&spec, &State::from(&on), power(PowerState::Off), ctx(6, &node));
    assert_eq!(off.status.phase, Some(Phase::ConfirmingOff));
    assert_eq!(off.memory.run.map(|r| r.count), Some(1));
}

/// One step of the release phase at t=5 with `observation`.
pub(super) fn release_step(spec: &CoronerRemediationSpec, observation: Observation) -> Decision {
    let node = node();
    step(spec, &releasing(spec), observation, ctx(5, &node))
}

pub(super) fn released() -> Observation {
    Observation::Release(Ok(Released {
        at: t(5),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: true,
        took_over_from: None,
        pods_deleted: None,
        interrupted: None,
    }))
}

#[test]
fn a_release_with_reboot_succeeds_and_waits_for_the_workloads() {
    let decision = release_step(&spec(), released());
    assert_eq!(decision.status.phase, Some(Phase::WaitingForRelease));
    assert_eq!(
        (processing(&decision.status), succeeded(&decision.status)),
        ("True".into(), ("True".into(), "WaitingForRelease".into()))
    );
    assert!(!out_of_service_taint_ends(&decision.status));
    assert!(decision.notices.iter().any(|n| n.reason == "NodeFenced"));
}

#[test]
fn a_release_with_off_completes_and_keeps_both_taints() {
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..spec() };
    let decision = release_step(&spec, released());
    assert_eq!(decision.status.phase, Some(Phase::Done));
    assert_eq!((processing(&decision.status), succeeded(&decision.status).0), ("False".into(), "True".into()));
    assert!(!out_of_service_taint_ends(&decision.status));
    assert!(fencing_taint_wanted(&spec, &decision.status));
}

#[test]
fn a_node_alive_after_power_off_is_refused_for_good_with_its_own_reason() {
    let cases = [
        (NodeRefusal::LeaseRenewed { node: "worker-1".into(), renewed: t(4) }, "NodeAliveAfterPowerOff"),
        (NodeRefusal::Awake { node: "worker-1".into(), ready: "True".into() }, "NodeNotUnreachable"),
        (NodeRefusal::Gone { node: "worker-1".into() }, "NodeNotFound"),
    ];
    for (refusal, reason) in cases {
        let decision = release_step(&spec(), Observation::Release(Err(ReleaseRefusal::Node(refusal))));
        assert_eq!(succeeded(&decision.status), ("False".into(), reason.into()));
        assert!(decision.requeue.is_none());
        assert!(decision.status.evidence.as_ref().unwrap().release.is_none());
    }
}

#[test]
fn a_release_the_api_server_refuses_is_retried_on_a_fresh_proof_until_the_deadline() {
    let spec = spec();
    let refused = Observation::Release(Err(ReleaseRefusal::WriteRefused("denied by a webhook".into())));
    let decision = release_step(&spec, refused.clone());
    assert_eq!(decision.status.phase, Some(Phase::Releasing));
    let late = step(&spec, &State::from(&decision), refused, ctx(62, &node()));
    assert_eq!(succeeded(&late.status), ("Unknown".into(), "AttemptFailed".into()));
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec.retry }, ..spec };
    let refused = Observation::Release(Err(ReleaseRefusal::WriteRefused("denied by a webhook".into())));
    let last = step(&spec, &State::from(&release_step(&spec, refused.clone())), refused, ctx(62, &node()));
    assert_eq!(succeeded(&last.status), ("False".into(), "ReleaseNotWritten".into()));
}

#[test]
fn workloads_hold_the_power_on_until_released_or_timed_out() {
    let spec = spec();
    let node = node();
    let waiting = State::from(&release_step(&spec, released()));
    let held = Observation::Workloads(Workloads { blocking_pods: 1, volume_attachments: 1 });
    let still = step(&spec, &waiting, held.clone(), ctx(6, &node));
    assert_eq!(still.status.phase, Some(Phase::WaitingForRelease));

    let clear = step(&spec, &waiting, Observation::Workloads(Workloads::default()), ctx(7, &node));
    assert_eq!(clear.status.phase, Some(Phase::PoweringOn));
    assert!(out_of_service_taint_ends(&clear.status), "the out-of-service taint goes before power-on");
    assert_eq!(conditions::status_of(&clear.status.conditions, contract::WORKLOADS_RELEASED), Some("True"));

    let timed_out = step(&spec, &waiting, held, ctx(5 + 300, &node));
    assert_eq!(timed_out.status.phase, Some(Phase::PoweringOn));
    assert_eq!(conditions::status_of(&timed_out.status.conditions, contract::WORKLOADS_RELEASED), Some("False"));
    assert!(timed_out.notices.iter().any(|n| n.warning && n.reason == "ReleaseTimeout"));
    assert_eq!(succeeded(&timed_out.status).0, "True");
}

/// PoweringOn: released at t=5, the workloads gone at t=6.
pub(super) fn powering_on(spec: &CoronerRemediationSpec) -> State {
    let node = node();
    let waiting = State::from(&release_step(spec, released()));
    State::from(&step(spec, &waiting, Observation::Workloads(Workloads::default()), ctx(6, &node)))
}

#[test]
fn no_on_while_any_out_of_service_taint_is_on_the_node_and_powered_on_false_at_the_deadline() {
    let spec = spec();
    let state = powering_on(&spec);
    let mut tainted = node();
    tainted.out_of_service = Some("node.kubernetes.io/out-of-service=manual:NoSchedule".into());
    let waiting = step(&spec, &state, power(PowerState::Off), ctx(8, &tainted));
    assert_eq!(waiting.reset, None, "no On while someone's out-of-service taint is there");
    assert_eq!(succeeded(&waiting.status), ("True".into(), "OutOfServiceTaintPresent".into()));
    assert!(waiting.notices.iter().any(|n| n.warning && n.reason == "OutOfServiceTaintPresent"));
    // Gone: the On goes out after a fresh reading.
    let go = step(&spec, &State::from(&waiting), power(PowerState::Off), ctx(9, &node()));
    assert_eq!(go.reset, Some(ResetType::On));
    // Still there at the deadline (powerOffTimeout from entering PoweringOn at t=6): left off, and
    // the fence ends as an Off release does, with its reason (no wait for a node that cannot return).
    let late = step(&spec, &State::from(&waiting), power(PowerState::Off), ctx(66, &tainted));
    assert_eq!((late.status.phase, late.reset), (Some(Phase::Done), None));
    assert_eq!(conditions::status_of(&late.status.conditions, contract::POWERED_ON), Some("False"));
    assert_eq!(succeeded(&late.status), ("True".into(), "PowerOnBlocked".into()));
}

#[test]
fn a_power_on_that_never_gets_a_reading_still_frees_its_slot() {
    let spec = spec();
    let state = powering_on(&spec);
    let down = || Observation::Power(Err(unreachable()));
    let early = step(&spec, &state, down(), ctx(30, &node()));
    assert_eq!(early.status.phase, Some(Phase::PoweringOn));
    let late = step(&spec, &State::from(&early), down(), ctx(66, &node()));
    assert_eq!(late.status.phase, Some(Phase::Done), "PoweringOn holds a slot: its deadline elapses");
    assert_eq!(
        succeeded(&late.status),
        ("True".into(), "PowerOnBlocked".into()),
        "no On was sent: the machine stays off"
    );
}

#[test]
fn power_on_is_sent_after_a_fresh_read_and_read_back() {
    // Every reset takes 2.5 s: after the On, the machine still reads Off twice before it reads On.
    let lab = lab(spec(), machine(true).reset_delay(StdDuration::from_millis(2500)));
    let status = run(&lab);
    assert_eq!(
        lab.device().resets(),
        [ResetType::ForceOff, ResetType::On],
        "On is sent once per power-on, not per reading"
    );
    let before_on =
        lab.device().requests().into_iter().take_while(|(_, r)| !matches!(r, Request::Reset(_, ResetType::On)));
    assert!(matches!(before_on.last(), Some((_, Request::Read(_)))), "a fresh reading right before the On");
    let answered_still_off = lab.decided_history().into_iter().filter(|s| {
        let progress = s.progress.clone().unwrap_or_default();
        s.phase == Some(Phase::PoweringOn)
            && progress.intent.is_some_and(|i| i.result.is_some())
            && progress.last_error.as_deref() == Some("power reads Off")
    });
    assert_eq!(answered_still_off.count(), 2);
    assert_eq!(status.phase, Some(Phase::WaitingForNode));
    assert_eq!(conditions::status_of(&status.conditions, contract::POWERED_ON), Some("True"));
}

#[test]
fn a_power_on_that_never_reads_on_leaves_the_node_fenced_and_the_fence_succeeded() {
    let lab = lab(spec(), machine(true).resets([ResetAnswer::Done(204), ResetAnswer::Ignored(204)]));
    let status = run(&lab);
    assert_eq!(lab.device().resets(), [ResetType::ForceOff, ResetType::On]);
    assert_eq!(status.phase, Some(Phase::WaitingForNode));
    assert_eq!(conditions::status_of(&status.conditions, contract::POWERED_ON), Some("False"));
    assert_eq!(succeeded(&status).0, "True", "a failed power-on does not undo the fence");
    let node = lab.world(|t| t.node("worker-1")).unwrap();
    assert!(crate::taints::owns(&node, crate::taints::CoronerTaint::Fencing, &remediation_uid(&lab)));
}

pub(super) fn remediation_uid(lab: &Lab<Scripted>) -> String {
    lab.world(|t| t.remediation("worker-1")).and_then(|r| r.metadata.uid).unwrap()
}

#[test]
fn a_changed_uuid_after_the_release_stops_only_the_power_on() {
    let spec = spec();
    let changed = reading_of(OTHER_UUID, PowerState::Off);
    let decision = step(&spec, &powering_on(&spec), changed, ctx(8, &node()));
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::WaitingForNode), None));
    assert_eq!(succeeded(&decision.status).0, "True");
    assert_eq!(conditions::status_of(&decision.status.conditions, contract::POWERED_ON), Some("False"));
}

#[test]
fn the_node_returns_with_a_new_boot_id() {
    use crate::taints::{self, CoronerTaint};
    let lab = lab(spec(), machine(true));
    assert_eq!(run(&lab).phase, Some(Phase::WaitingForNode));
    let fencing =
        || taints::owns(&lab.world(|t| t.node("worker-1")).unwrap(), CoronerTaint::Fencing, &remediation_uid(&lab));
    // Ready again, with the bootID it had when it was admitted: not the machine that was rebooted.
    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, None));
    assert_eq!(run(&lab).phase, Some(Phase::WaitingForNode));
    assert!(fencing());

    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, Some("worker-1-boot-2")));
    let done = run(&lab);
    assert_eq!(done.phase, Some(Phase::Done));
    assert_eq!((processing(&done), succeeded(&done).0), ("False".into(), "True".into()));
    assert_eq!(done.evidence.unwrap().power_on.unwrap().new_boot_id.as_deref(), Some("worker-1-boot-2"));
    assert!(!fencing(), "coroner's taints are removed");
}
