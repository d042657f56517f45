//! Transition-by-transition tests of the fence state machine; sequences (decide, send, record the
//! answer, read again) run the real fence loop against a scripted BMC on virtual time
//! ([`crate::sim::lab`]), including reading sequences a real emulator cannot produce.

mod look;

use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::*;
use crate::{
    api::{CoronerRemediationSpec, FenceAction, UuidMatch},
    bmc::{BmcError, PowerState, SystemReading},
    identity::Claim,
    sim::{
        lab::{Lab, Setup},
        script::{Read, Request, ResetAnswer, Script, Scripted},
    },
};

const NODE_UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";
const SWAPPED: &str = "1e0c3b7f-0000-0040-8000-000000000001";
const OTHER_UUID: &str = "7f3b0c1e-0000-4000-8000-000000000002";
const ME: &str = "instance-b";

fn t(secs: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
}

fn node() -> NodeSnapshot {
    NodeSnapshot {
        name: "worker-1".into(),
        uid: "node-uid".into(),
        ready: Some("Unknown".into()),
        boot_id: "boot-1".into(),
        system_uuid: NODE_UUID.into(),
        lease_present: true,
        lease_renew_time: Some(t(-100)),
        ..NodeSnapshot::default()
    }
}

/// What a process that has just started knows of a fence: nothing.
static FORGOTTEN: Memory = Memory {
    run: None,
    proof: None,
    attempt_started: None,
    last_requested: None,
    not_before: None,
    through: None,
    last_power: None,
    guarded_at: None,
    guard_reads: 0,
    sighted_on: None,
    finalizer_reported: false,
    begun_untouched: false,
    spec_edit_announced: None,
    outlets: Vec::new(),
    bmc_after: None,
};

const TIMING: Timing = Timing { request_timeout: StdDuration::from_secs(5), read_retries: 1 };

/// This process's monotonic clock at wall time `t(secs)` (it started well before).
fn mono(secs: i64) -> Mono {
    StdDuration::from_secs(u64::try_from(secs + 1000).unwrap())
}

fn ctx(now: i64, node: &NodeSnapshot) -> Context<'_> {
    Context {
        now: t(now),
        mono: mono(now),
        instance: ME,
        node,
        hold_power_action: None,
        memory: &FORGOTTEN,
        timing: TIMING,
        levels: None,
        sabotage: crate::sabotage::Sabotage::None,
    }
}

/// What one process carries from step to step: the status as the API server hands it back, and what
/// it remembers.
#[derive(Clone, Debug, Default)]
struct State {
    status: CoronerRemediationStatus,
    memory: Memory,
}

impl From<&Decision> for State {
    fn from(decision: &Decision) -> Self {
        Self { status: decision.status.clone(), memory: decision.memory.clone() }
    }
}

/// One step of `state` with `observation` (a power reading sampled at the context's clock).
fn step(spec: &CoronerRemediationSpec, state: &State, observation: Observation, ctx: Context<'_>) -> Decision {
    let observation = match observation {
        Observation::Power(Ok(reading)) => Observation::Power(Ok(PowerReading {
            sampled: Sampled { requested: ctx.mono, answered: ctx.mono },
            ..reading
        })),
        other => other,
    };
    next(spec, &persisted(&state.status), observation, Context { memory: &state.memory, ..ctx })
}

/// The plan for `state` at `ctx`'s time.
fn plan_of(spec: &CoronerRemediationSpec, state: &State, ctx: Context<'_>) -> Plan {
    plan(spec, &state.status, Context { memory: &state.memory, ..ctx })
}

fn spec() -> CoronerRemediationSpec {
    CoronerRemediationSpec::default()
}

fn succeeded(status: &CoronerRemediationStatus) -> (String, String) {
    let c = conditions::find(&status.conditions, contract::SUCCEEDED).unwrap();
    (c.status.clone(), c.reason.clone())
}

fn processing(status: &CoronerRemediationStatus) -> String {
    conditions::status_of(&status.conditions, contract::PROCESSING).unwrap().to_owned()
}

fn system(uuid: &str, power: PowerState) -> SystemReading {
    SystemReading {
        id: uuid.into(),
        path: format!("/redfish/v1/Systems/{uuid}"),
        uuid: uuid.into(),
        power_state: power,
        reset_target: None,
        aliases: Vec::new(),
    }
}

fn found(uuid: &str) -> Observation {
    Observation::Identity(Ok(IdentityFound {
        binding: "worker-1".into(),
        endpoint: "https://127.0.0.1:8443".into(),
        tls_verified: Some(true),
        system: system(uuid, PowerState::On),
        claims: vec![],
        through: DeviceMark::default(),
        sampled: Sampled::default(),
        origin: "https://bmc:443".into(),
    }))
}

/// A reading of the node's machine ([`step`] stamps when it was taken).
fn power(state: PowerState) -> Observation {
    reading_of(NODE_UUID, state)
}

fn reading_of(uuid: &str, state: PowerState) -> Observation {
    Observation::Power(Ok(PowerReading {
        uuid: uuid.into(),
        power_state: state,
        sampled: Sampled::default(),
        through: DeviceMark::default(),
    }))
}

fn unreachable() -> BmcFailure {
    BmcFailure {
        transient: true,
        reason: Reason::BmcUnreachable,
        message: "BMC unreachable: connection refused".into(),
    }
}

/// Drives a remediation from Pending through admission and identity, at t=0.
fn verified(spec: &CoronerRemediationSpec) -> State {
    let node = node();
    let admitted = step(
        spec,
        &State::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    State::from(&step(spec, &State::from(&admitted), found(NODE_UUID), ctx(0, &node)))
}

/// The status as the API server hands it back: every decision is persisted and read again.
fn persisted(status: &CoronerRemediationStatus) -> CoronerRemediationStatus {
    serde_json::from_value(serde_json::to_value(status).unwrap()).unwrap()
}

/// ConfirmingOff after ForceOff was sent at t=1 and answered 204.
fn confirming(spec: &CoronerRemediationSpec) -> State {
    let node = node();
    let answer = Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) };
    State::from(&step(spec, &decided(spec), answer, ctx(1, &node)))
}

/// Right before the ForceOff is sent (its intent persisted, not yet answered).
fn decided(spec: &CoronerRemediationSpec) -> State {
    let node = node();
    let decision = step(spec, &verified(spec), power(PowerState::On), ctx(1, &node));
    assert_eq!(decision.reset, Some(ResetType::ForceOff));
    State::from(&decision)
}

/// The fence loop for node worker-1 (reporting `NODE_UUID`) against a BMC that answers from
/// `script`, on virtual time.
fn lab(spec: CoronerRemediationSpec, script: Script) -> Lab<Scripted> {
    Lab::scripted(&Setup::new(NODE_UUID, spec), script)
}

/// The node's machine on its BMC: system 1, reporting the node's UUID.
fn machine(on: bool) -> Script {
    Script::machine(NODE_UUID, on)
}

/// Runs the fence until its current run holds `count` Off readings.
fn run_until_off_readings(lab: &Lab<Scripted>, count: u32) {
    let reached = |s: &CoronerRemediationStatus| {
        s.progress.as_ref().and_then(|p| p.off_run.as_ref()).is_some_and(|run| run.count == count)
    };
    futures::executor::block_on(lab.run_until(reached));
}

fn run(lab: &Lab<Scripted>) -> CoronerRemediationStatus {
    futures::executor::block_on(lab.run())
}

fn off_spec() -> CoronerRemediationSpec {
    CoronerRemediationSpec { action: FenceAction::Off, ..spec() }
}

/// When the BMC received its resets.
fn reset_times(lab: &Lab<Scripted>) -> Vec<(Timestamp, ResetType)> {
    lab.device()
        .requests()
        .into_iter()
        .filter_map(|(at, r)| match r {
            Request::Reset(_, reset) => Some((at, reset)),
            _ => None,
        })
        .collect()
}

fn proof_of(status: &CoronerRemediationStatus) -> OffRun {
    status.evidence.as_ref().unwrap().power_off.as_ref().unwrap().proof.clone().unwrap()
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

#[test]
fn a_new_remediation_starts_processing_with_succeeded_unknown() {
    let decision = start(&CoronerRemediationStatus::default(), "worker-1", t(0)).unwrap();
    assert_eq!(decision.status.phase, Some(Phase::Pending));
    assert_eq!(
        (processing(&decision.status), succeeded(&decision.status)),
        ("True".into(), ("Unknown".into(), "RemediationStarted".into()))
    );
    assert!(start(&decision.status, "worker-1", t(1)).is_none());
}

// Pending --------------------------------------------------------------------------------------------

#[test]
fn admission_records_the_node_and_starts_identity() {
    let node = node();
    let decision = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    assert_eq!(decision.status.phase, Some(Phase::VerifyingIdentity));
    assert_eq!(decision.status.evidence.as_ref().unwrap().node.as_ref().unwrap().uid, "node-uid");
    assert_eq!((processing(&decision.status), succeeded(&decision.status).0), ("True".into(), "Unknown".into()));
    assert_eq!(decision.reset, None);
    assert!(fencing_taint_wanted(&spec(), &decision.status));
}

#[test]
fn a_waiting_gate_keeps_the_remediation_pending() {
    let node = node();
    let verdict = Verdict::Wait { reason: Reason::AttemptFailed, message: "wait".into(), recheck: None };
    let decision = next(&spec(), &CoronerRemediationStatus::default(), Observation::Admission(verdict), ctx(0, &node));
    assert_eq!(decision.status.phase, Some(Phase::Pending));
    assert_eq!(succeeded(&decision.status).0, "Unknown");
    assert!(decision.requeue.is_some());
    assert!(!fencing_taint_wanted(&spec(), &decision.status));
    // The same wait again is not announced twice.
    let again = next(
        &spec(),
        &decision.status,
        Observation::Admission(Verdict::Wait { reason: Reason::AttemptFailed, message: "wait".into(), recheck: None }),
        ctx(5, &node),
    );
    assert!(again.notices.is_empty());
}

#[test]
fn a_refusing_gate_fails_without_any_taint() {
    let node = node();
    let verdict = Verdict::Refuse { reason: Reason::NoBmcBinding, message: "no binding".into() };
    let decision = next(&spec(), &CoronerRemediationStatus::default(), Observation::Admission(verdict), ctx(0, &node));
    assert_eq!(decision.status.phase, Some(Phase::Failed));
    assert_eq!(succeeded(&decision.status), ("False".into(), "NoBmcBinding".into()));
    assert!(!fencing_taint_wanted(&spec(), &decision.status));
    assert!(decision.notices[0].warning);
}

// VerifyingIdentity ------------------------------------------------------------------------------------

#[test]
fn an_exact_uuid_proves_identity_and_its_reading_is_the_first_power_reading() {
    let decision = {
        let node = node();
        let admitted = step(
            &spec(),
            &State::default(),
            Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
            ctx(0, &node),
        );
        step(&spec(), &State::from(&admitted), found(NODE_UUID), ctx(0, &node))
    };
    // The identity read said On: the ForceOff is decided on it, with no second read before it.
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::ConfirmingOff), Some(ResetType::ForceOff)));
    let status = decision.status;
    let identity = status.evidence.unwrap().identity.unwrap();
    assert_eq!(
        (identity.match_kind, identity.system_path.as_str()),
        (UuidMatch::Exact, "/redfish/v1/Systems/7f3b0c1e-0000-4000-8000-000000000001")
    );
}

#[test]
fn a_byte_swapped_uuid_is_accepted_and_recorded() {
    let node = node();
    let admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    let decision = next(&spec(), &admitted.status, found(SWAPPED), ctx(0, &node));
    assert_eq!(decision.status.evidence.unwrap().identity.unwrap().match_kind, UuidMatch::ByteSwapped);
}

#[test]
fn identity_refusals_are_final_and_touch_no_power() {
    let node = node();
    let admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    )
    .status;
    let ambiguous = Observation::Identity(Ok(IdentityFound {
        claims: vec![Claim { owner: "Node worker-2".into(), uuid: SWAPPED.into() }],
        ..match found(NODE_UUID) {
            Observation::Identity(Ok(f)) => f,
            _ => unreachable!(),
        }
    }));
    let mut placeholder_node = node.clone();
    placeholder_node.system_uuid = "03000200-0400-0500-0006-000700080009".into();
    let placeholder_admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(placeholder_node.evidence(t(0))))),
        ctx(0, &placeholder_node),
    )
    .status;
    let cases = [
        (admitted.clone(), found(OTHER_UUID), "IdentityMismatch"),
        (admitted.clone(), ambiguous, "IdentityAmbiguous"),
        (placeholder_admitted, found("03000200-0400-0500-0006-000700080009"), "NodeUuidUnusable"),
        (
            admitted.clone(),
            Observation::Identity(Err(IdentityProblem::Bmc(BmcFailure {
                transient: false,
                reason: Reason::BmcAuthenticationFailed,
                message: "401".into(),
            }))),
            "BmcAuthenticationFailed",
        ),
        (
            admitted.clone(),
            Observation::Identity(Err(IdentityProblem::Binding {
                reason: Reason::BindingInvalid,
                message: "no Secret".into(),
                seen_on: None,
            })),
            "BindingInvalid",
        ),
    ];
    for (status, observation, reason) in cases {
        let decision = next(&spec(), &status, observation, ctx(1, &node));
        assert_eq!(succeeded(&decision.status), ("False".into(), reason.into()));
        assert_eq!(decision.status.phase, Some(Phase::Failed));
        assert_eq!(decision.reset, None);
        assert!(
            !fencing_taint_wanted(&spec(), &decision.status),
            "{reason}: refusal before power action drops the taint"
        );
        assert!(decision.notices.iter().any(|n| n.warning && n.reason == reason));
    }
}

#[test]
fn an_unreachable_bmc_uses_the_retry_budget_then_fails() {
    let spec = spec();
    let node = node();
    let admitted = next(
        &spec,
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    )
    .status;
    let first = next(&spec, &admitted, Observation::Identity(Err(IdentityProblem::Bmc(unreachable()))), ctx(1, &node));
    assert_eq!(succeeded(&first.status), ("Unknown".into(), "AttemptFailed".into()));
    assert_eq!(first.status.progress.as_ref().unwrap().attempt, 2);
    let first = State::from(&first);
    assert_eq!(plan_of(&spec, &first, ctx(2, &node)), Plan::Wait(StdDuration::from_secs(4)));
    assert_eq!(plan_of(&spec, &first, ctx(6, &node)), Plan::VerifyIdentity);
    let second = step(&spec, &first, Observation::Identity(Err(IdentityProblem::Bmc(unreachable()))), ctx(6, &node));
    assert_eq!(succeeded(&second.status), ("False".into(), "BmcUnreachable".into()));
    assert_eq!(second.reset, None);
}

#[test]
fn insecure_tls_is_a_warning_condition_and_event() {
    let node = node();
    let admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    )
    .status;
    let mut observation = match found(NODE_UUID) {
        Observation::Identity(Ok(f)) => f,
        _ => unreachable!(),
    };
    observation.tls_verified = Some(false);
    let decision = next(&spec(), &admitted, Observation::Identity(Ok(observation)), ctx(0, &node));
    assert_eq!(conditions::status_of(&decision.status.conditions, contract::TLS_VERIFIED), Some("False"));
    assert!(decision.notices.iter().any(|n| n.warning && n.reason == "InsecureSkipVerify"));
}

// PoweringOff / ConfirmingOff ----------------------------------------------------------------------------

#[test]
fn a_machine_that_is_on_gets_one_force_off_after_the_fresh_read() {
    let status = decided(&spec()).status;
    assert_eq!(status.phase, Some(Phase::ConfirmingOff));
    let progress = status.progress.unwrap();
    let intent = progress.intent.unwrap();
    assert_eq!(
        (intent.action, intent.attempt, intent.instance.as_str(), intent.result),
        (crate::api::PowerAction::ForceOff, 1, ME, None)
    );
    assert_eq!(progress.lease_renew_time_at_power_off, Some(MicroTime(t(-100))));
}

#[test]
fn a_fresh_lease_holds_the_power_action_but_not_the_reading() {
    let node = node();
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 3s ago".to_owned());
    let held = Context { hold_power_action: Some(&hold), ..ctx(1, &node) };
    let decision = step(&spec(), &verified(&spec()), power(PowerState::On), held);
    assert_eq!(decision.reset, None);
    assert_eq!(
        (decision.status.phase, succeeded(&decision.status)),
        (Some(Phase::PoweringOff), ("Unknown".into(), "NodeLeaseFresh".into()))
    );
    // A machine that already reads Off needs no power action: nothing to hold.
    let off = step(&spec(), &verified(&spec()), power(PowerState::Off), held);
    assert_eq!(off.status.phase, Some(Phase::ConfirmingOff));
    // Once the Lease is stale, the same reading sends ForceOff.
    let go = step(&spec(), &State::from(&decision), power(PowerState::On), ctx(30, &node));
    assert_eq!(go.reset, Some(ResetType::ForceOff));
}

#[test]
fn a_held_fence_reads_the_bmc_again_only_at_its_recheck_not_at_every_wake_up() {
    // Its own status write wakes it at once; a crash loop of leaders read the BMC every 100 ms so.
    let node = node();
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 3s ago".to_owned());
    let held = Context { hold_power_action: Some(&hold), ..ctx(1, &node) };
    let waiting = State::from(&step(&spec(), &verified(&spec()), power(PowerState::On), held));
    assert!(matches!(plan_of(&spec(), &waiting, ctx(1, &node)), Plan::Wait(_)), "woken by its own write");
    assert!(matches!(plan_of(&spec(), &waiting, ctx(6, &node)), Plan::ReadPower { .. }), "at the recheck");
}

#[test]
fn a_hold_that_never_lifts_ends_the_attempt_at_its_deadline() {
    // A slot held by a phase must always be freed: the wait counts against powerOffTimeout.
    let node = node();
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 3s ago".to_owned());
    let held = |at| Context { hold_power_action: Some(&hold), ..ctx(at, &node) };
    let waiting = State::from(&step(&spec(), &verified(&spec()), power(PowerState::On), held(1)));
    let still = step(&spec(), &waiting, power(PowerState::On), held(59));
    assert_eq!(still.status.phase, Some(Phase::PoweringOff));
    let over = step(&spec(), &State::from(&still), power(PowerState::On), held(61));
    assert_eq!(succeeded(&over.status), ("Unknown".into(), "AttemptFailed".into()));
    assert!(over.status.progress.as_ref().unwrap().last_error.as_deref().unwrap().contains("renewed 3s ago"));
}

#[test]
fn a_machine_already_off_gets_no_reset_but_is_still_confirmed() {
    let lab = lab(off_spec(), machine(false));
    let status = run(&lab);
    assert_eq!(lab.device().resets(), []);
    let confirming = lab.history().into_iter().find(|s| s.phase == Some(Phase::ConfirmingOff)).unwrap();
    assert!(confirming.evidence.unwrap().power_off.unwrap().already_off);
    assert_eq!(
        lab.phases(),
        [Phase::VerifyingIdentity, Phase::ConfirmingOff, Phase::Releasing, Phase::Done],
        "the identity read, Off, is the first reading of the run (and the gates' write carries the start)"
    );
    let power_off = status.evidence.unwrap().power_off.unwrap();
    assert!(power_off.already_off && power_off.resets.is_empty());
    assert_eq!(power_off.proof.unwrap().count, 3, "Off at the first reading and 1 s and 2 s later");
}

#[test]
fn an_unbroken_run_spanning_settle_is_the_proof() {
    // ForceOff at f; Off read at once (the reading after an accepted ForceOff is not paced from the
    // identity read), then at f+1 and f+2: first and last 2 s apart = settle.
    let lab = lab(off_spec(), machine(true));
    let status = run(&lab);
    let [(force_off, ResetType::ForceOff)] = reset_times(&lab)[..] else { panic!("{:?}", reset_times(&lab)) };
    let evidence = status.evidence.unwrap().power_off.unwrap();
    let proof = evidence.proof.unwrap();
    assert_eq!(proof.count, 3);
    assert_eq!((proof.first[0].at.0, proof.latest().unwrap().at.0), (force_off, force_off + secs(2)));
    assert_eq!(evidence.proven_at, Some(MicroTime(force_off + secs(2))));
    assert!(lab.phases().ends_with(&[Phase::ConfirmingOff, Phase::Releasing, Phase::Done]), "{:?}", lab.phases());
}

#[test]
fn the_settle_span_is_measured_on_precise_times_after_persistence() {
    // Off at once after the ForceOff at f, then every 990 ms: f+0.99, and a third at f+1.98 would span
    // 1.98 s. Whole seconds (or rounded ones) would say 2 s and release on it; the third reading waits
    // the 20 ms the precise span still lacks (`next_reading_due`) and is taken at f+2, spanning 2 s.
    let spec = CoronerRemediationSpec { poll_interval: crate::api::Duration::from_millis(990), ..off_spec() };
    let lab = lab(spec, machine(true));
    let status = run(&lab);
    let [(force_off, _)] = reset_times(&lab)[..] else { panic!("{:?}", reset_times(&lab)) };
    let proof = proof_of(&status);
    let ms = SignedDuration::from_millis;
    assert_eq!(proof.count, 3);
    assert_eq!((proof.first[0].at.0, proof.latest().unwrap().at.0), (force_off, force_off + ms(2000)));
}

#[test]
fn the_lease_time_survives_persistence_to_the_microsecond() {
    let mut fresh = node();
    fresh.lease_renew_time = Some(t(-1) + SignedDuration::from_micros(221_120));
    let decision = step(&spec(), &verified(&spec()), power(PowerState::On), ctx(1, &fresh));
    let stored = persisted(&decision.status).progress.unwrap().lease_renew_time_at_power_off.unwrap();
    assert_eq!(stored.0, t(-1) + SignedDuration::from_micros(221_120));
}

#[test]
fn readings_less_than_settle_apart_prove_nothing() {
    // A BMC that accepts every ForceOff and does nothing: On, then Off twice 1 s apart, then On.
    let script = machine(true).resets([ResetAnswer::Ignored(204), ResetAnswer::Ignored(204)]).reads([
        Read::Truth,
        Read::Says(PowerState::Off),
        Read::Says(PowerState::Off),
    ]);
    let lab = lab(spec(), script);
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    assert!(
        lab.decided_history().iter().any(|s| s
            .progress
            .as_ref()
            .and_then(|p| p.off_run.as_ref())
            .is_some_and(|r| r.count == 2))
    );
    assert!(!lab.phases().contains(&Phase::Releasing));
    assert_eq!(lab.device().resets(), [ResetType::ForceOff, ResetType::ForceOff], "one per attempt");
}

#[test]
fn anything_but_off_breaks_the_run() {
    for breaker in [
        Read::Says(PowerState::On),
        Read::Says(PowerState::PoweringOff),
        Read::Says(PowerState::PoweringOn),
        Read::Says(PowerState::Paused),
        Read::Says(PowerState::Other("Standby".into())),
        Read::Fails(BmcError::Unreachable("connection refused".into())),
    ] {
        // ForceOff at f (on the identity read), then Off at once, <breaker> at f+1, Off from f+2: the
        // run restarts after the breaker, and the proof is f+2 … f+4.
        let lab = lab(off_spec(), machine(true).reads([Read::Truth, breaker.clone()]));
        let status = run(&lab);
        let [(force_off, _)] = reset_times(&lab)[..] else { panic!("{breaker:?}: {:?}", reset_times(&lab)) };
        let proof = proof_of(&status);
        assert_eq!((proof.count, proof.first[0].at.0), (3, force_off + secs(2)), "{breaker:?}");
        assert_eq!(phase_of(&status), Phase::Done, "{breaker:?}");
    }
}

#[test]
fn on_a_bmc_with_several_systems_only_the_nodes_is_read_and_reset() {
    let script = Script::machine(OTHER_UUID, true).system("2", NODE_UUID, true);
    let lab = lab(off_spec(), script);
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done);
    assert_eq!(status.evidence.unwrap().identity.unwrap().system_path, "/redfish/v1/Systems/2");
    for (_, request) in lab.device().requests() {
        if let Request::Read(path) | Request::Reset(path, _) = request {
            assert_eq!(path, "/redfish/v1/Systems/2");
        }
    }
    assert!(lab.device().is_on("1") && !lab.device().is_on("2"));
}

// The binding's status, from the fence -----------------------------------------------------------

fn identity_verified(status: &crate::api::BmcBindingStatus) -> (String, String) {
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
fn second_binding_on_the_same_bmc(lab: &Lab<Scripted>, uuid: &str) {
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

#[test]
fn a_slow_bmc_still_proves_the_power_off_on_readings_spanning_settle() {
    // Every request takes 700 ms of the fence's time.
    let lab = lab(off_spec(), machine(true).latency(StdDuration::from_millis(700)));
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done);
    let proof = proof_of(&status);
    let span = proof.latest().unwrap().at.0.duration_since(proof.first[0].at.0);
    assert!(span >= secs(2), "{proof:?}");
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
}

fn busy() -> BmcError {
    BmcError::Status { method: "POST", path: "/redfish/v1/Systems/1".into(), status: 503, detail: String::new() }
}

#[test]
fn a_failed_force_off_is_recorded_and_sent_again_after_the_next_reading_that_is_not_off() {
    let lab = lab(off_spec(), machine(true).resets([ResetAnswer::Fails(busy())]));
    let status = run(&lab);
    assert_eq!(lab.device().resets(), [ResetType::ForceOff, ResetType::ForceOff]);
    let power_off = status.evidence.unwrap().power_off.unwrap();
    let results: Vec<_> = power_off.resets.iter().map(|r| (r.attempt, r.result.contains("503"))).collect();
    assert_eq!(results, [(1, true), (1, false)], "within the attempt");
    assert_eq!((phase_of(&lab.status()), power_off.proof.map(|p| p.count)), (Phase::Done, Some(3)));
}

#[test]
fn only_a_force_off_the_bmc_accepted_is_read_at_once() {
    assert!(read_at_once_after(ResetType::ForceOff, true));
    assert!(!read_at_once_after(ResetType::ForceOff, false), "a failed one waits for the pace (P7)");
    assert!(!read_at_once_after(ResetType::On, true), "a power-on is read at the pace");
}

#[test]
fn the_reading_after_a_failed_force_off_keeps_the_pace_so_it_is_not_sent_again_at_once() {
    let lab = lab(off_spec(), machine(true).resets([ResetAnswer::Fails(busy())]));
    run(&lab);
    let [(first, _), (again, _)] = reset_times(&lab)[..] else { panic!("{:?}", reset_times(&lab)) };
    assert_eq!(again.duration_since(first), secs(1), "one pollInterval after the identity read, which read On");
}

#[test]
fn a_force_off_lost_on_the_way_is_sent_again_in_the_only_attempt() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..off_spec() };
    let lost = BmcError::Unreachable("no answer before the request timeout".into());
    let lab = lab(spec, machine(true).resets([ResetAnswer::Fails(lost)]));
    assert_eq!(phase_of(&run(&lab)), Phase::Done);
    assert_eq!(lab.device().resets(), [ResetType::ForceOff, ResetType::ForceOff]);
}

#[test]
fn a_force_off_refused_for_rotated_credentials_is_sent_again_and_a_forbidden_one_waits_for_the_next_attempt() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..off_spec() };
    let rotated = lab(spec.clone(), machine(true).resets([ResetAnswer::Fails(BmcError::Unauthorized(401))]));
    assert_eq!(phase_of(&run(&rotated)), Phase::Done);
    assert_eq!(rotated.device().resets(), [ResetType::ForceOff, ResetType::ForceOff]);
    let forbidden = lab(spec, machine(true).resets([ResetAnswer::Fails(BmcError::Unauthorized(403))]));
    assert_eq!(succeeded(&run(&forbidden)), ("False".into(), "PowerOffNotConfirmed".into()));
    assert_eq!(forbidden.device().resets(), [ResetType::ForceOff]);
}

#[test]
fn credentials_rejected_after_an_accepted_force_off_are_read_again_until_the_deadline_but_not_before_any() {
    use crate::sim::script::Read;
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..off_spec() };
    let rejected = || Read::Fails(BmcError::Unauthorized(401));
    // The password rotated right after the ForceOff; the Secret follows the BMC three readings later.
    let rotated = lab(spec.clone(), machine(true).reads(std::iter::repeat_with(rejected).take(6)));
    let status = run(&rotated);
    assert_eq!(phase_of(&status), Phase::Done, "{:?}", succeeded(&status));
    assert_eq!(rotated.device().resets(), [ResetType::ForceOff]);
    // Before any ForceOff the BMC accepted, a rejection read again from the Secret is final at once.
    let wrong = lab(spec, machine(false).reads(std::iter::repeat_with(rejected).take(6)));
    let status = run(&wrong);
    assert_eq!(succeeded(&status), ("False".into(), "BmcAuthenticationFailed".into()));
}

#[test]
fn a_bmc_that_fails_every_force_off_gets_three_per_attempt_and_the_fence_fails() {
    let lab = lab(off_spec(), machine(true).resets(std::iter::repeat_with(|| ResetAnswer::Fails(busy())).take(20)));
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    let power_off = status.evidence.unwrap().power_off.unwrap();
    let attempts: Vec<_> = power_off.resets.iter().map(|r| r.attempt).collect();
    let count = spec().retry.count;
    let expected: Vec<_> = (1..=count).flat_map(|a| [a; FORCE_OFFS_PER_ATTEMPT]).collect();
    assert_eq!(attempts, expected);
}

#[test]
fn a_force_off_is_sent_again_only_after_a_failure_that_passes_and_fewer_than_three_in_the_attempt() {
    let failed: Result<u16, BmcFailure> = Err(unreachable());
    assert!(force_off_again(&failed, 1));
    assert!(force_off_again(&failed, 2));
    assert!(!force_off_again(&failed, 3), "the third failure ends the attempt's resets");
    assert!(!force_off_again(&Ok::<u16, BmcFailure>(204), 1), "an accepted one: only readings tell");
    let rejected: Result<u16, BmcFailure> =
        Err(BmcFailure { transient: false, reason: Reason::BmcProtocolError, message: "HTTP 400".into() });
    assert!(!force_off_again(&rejected, 1), "a rejection is the next attempt's");
    let forbidden: Result<u16, BmcFailure> = Err(BmcFailure {
        transient: false,
        reason: Reason::BmcAuthenticationFailed,
        message: "BMC rejected the credentials (HTTP 403)".into(),
    });
    assert!(!force_off_again(&forbidden, 1), "no power privilege: the next attempt's");
}

#[test]
fn readings_from_before_a_restart_never_count() {
    let lab = lab(off_spec(), machine(true));
    run_until_off_readings(&lab, 2);
    let restarted_at = lab.clock().now();
    // Another coroner process: its first Off reading starts a run of its own.
    lab.restart();
    let status = run(&lab);
    let proof = proof_of(&status);
    assert_eq!((proof.instance.as_str(), proof.count), ("p1/2", 3));
    assert!(proof.first[0].at.0 >= restarted_at, "{proof:?}");
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
}

#[test]
fn a_force_off_persisted_but_never_answered_is_sent_after_a_fresh_read() {
    // The intent was persisted; no answer was recorded (the process stopped before sending).
    let node = node();
    let state = decided(&spec());
    let status = State { memory: Memory::default(), ..state.clone() };
    assert_eq!(status.status.progress.as_ref().unwrap().intent.as_ref().unwrap().result, None);
    let restarted = Context { instance: "instance-c", ..ctx(3, &node) };
    let decision = step(&spec(), &status, power(PowerState::On), restarted);
    assert_eq!(decision.reset, Some(ResetType::ForceOff));
    let intent = decision.status.progress.unwrap().intent.unwrap();
    assert_eq!((intent.instance.as_str(), intent.attempt), ("instance-c", 1));
    // The same after a restart whose Lease tracker holds power actions: it waits in PoweringOff with
    // the hold's reason, and the attempt's clock stops until it may act.
    let hold = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 0s ago".to_owned());
    let held = Context { instance: "instance-c", hold_power_action: Some(&hold), ..ctx(3, &node) };
    let waiting = step(&spec(), &status, power(PowerState::On), held);
    assert_eq!(waiting.reset, None);
    assert_eq!(
        (waiting.status.phase, succeeded(&waiting.status)),
        (Some(Phase::PoweringOff), ("Unknown".into(), "NodeLeaseFresh".into()))
    );
    // Once answered, On readings just keep the attempt polling.
    let answered = step(
        &spec(),
        &state,
        Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) },
        ctx(1, &node),
    );
    let polled = step(&spec(), &State::from(&answered), power(PowerState::On), ctx(3, &node));
    assert_eq!(polled.reset, None);
}

#[test]
fn a_reset_decided_in_a_step_that_ends_the_attempt_is_not_sent() {
    // An unanswered ForceOff intent, then a reading after powerOffTimeout: the attempt ends, and the
    // step must not also ask to send the ForceOff whose intent it just cleared.
    let node = node();
    let status = decided(&spec());
    let late = step(&spec(), &status, power(PowerState::On), ctx(62, &node));
    assert_eq!(late.status.phase, Some(Phase::PoweringOff));
    assert_eq!(late.reset, None);
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let last = step(&spec, &decided(&spec), power(PowerState::On), ctx(62, &node));
    assert_eq!((last.status.phase, last.reset), (Some(Phase::Failed), None));
}

#[test]
fn a_proof_from_an_earlier_process_does_not_release() {
    let spec = spec();
    let state = releasing(&spec);
    let node = node();
    // Another process: the proof is in the status, not in its memory; a forged status is no proof.
    let restarted = State { memory: Memory::default(), ..state.clone() };
    let other = Context { instance: "instance-c", ..ctx(5, &node) };
    assert!(matches!(plan_of(&spec, &restarted, other), Plan::ReadPower { .. }), "re-prove, not release");
    let decision = step(&spec, &restarted, power(PowerState::Off), other);
    assert_eq!(decision.status.phase, Some(Phase::ConfirmingOff));
    assert_eq!(decision.status.evidence.as_ref().unwrap().power_off.as_ref().unwrap().proof, None);
    assert_eq!(decision.status.progress.as_ref().unwrap().off_run.as_ref().unwrap().instance, "instance-c");
    assert_eq!(plan_of(&spec, &state, ctx(5, &node)), Plan::Release, "the process that proved it releases");
}

#[test]
fn a_proof_is_fresh_for_poll_interval_plus_the_request_timeout() {
    // The last Off reading at t=4; pollInterval 1 s + request timeout 5 s: fresh until t=10.
    let spec = spec();
    let state = releasing(&spec);
    let node = node();
    assert_eq!(proof_deadline(&spec, &state.memory, TIMING), Some(mono(10)));
    assert_eq!(plan_of(&spec, &state, ctx(9, &node)), Plan::Release);
    assert!(matches!(plan_of(&spec, &state, ctx(10, &node)), Plan::ReadPower { .. }), "stale: read first");
}

#[test]
fn a_stale_proof_is_kept_by_an_unbroken_off_reading_and_ended_by_anything_else() {
    let spec = spec();
    let state = releasing(&spec);
    let node = node();
    // Off again at t=6: requested within pollInterval + 1 s of the t=4 reading, answered within the
    // gap bound (2 × (1 s + 1 s)): fresh again.
    let kept = step(&spec, &state, power(PowerState::Off), ctx(6, &node));
    assert_eq!(kept.status.phase, Some(Phase::Releasing));
    assert_eq!(plan_of(&spec, &State::from(&kept), ctx(6, &node)), Plan::Release);
    // Off after a longer gap: the machine may have been on unseen; the proof starts over.
    let gap = step(&spec, &state, power(PowerState::Off), ctx(20, &node));
    assert_eq!(gap.status.phase, Some(Phase::ConfirmingOff));
    // On: it came back on; a new attempt switches it off again.
    let back = step(&spec, &state, power(PowerState::On), ctx(12, &node));
    assert_eq!((back.status.phase, back.reset), (Some(Phase::ConfirmingOff), Some(ResetType::ForceOff)));
    assert_eq!(back.status.progress.as_ref().unwrap().attempt, 2);
}

fn sampled_ms(requested: u64, answered: u64) -> Sampled {
    Sampled { requested: StdDuration::from_millis(requested), answered: StdDuration::from_millis(answered) }
}

#[test]
fn at_the_defaults_no_proof_rests_on_readings_requested_further_apart_than_settle() {
    // settle 2 s, pollInterval 1 s: requests at most settle apart, answers within 2 × (1 s + 1 s).
    let spec = spec();
    assert_eq!((request_bound(&spec), gap_bound(&spec)), (spec.settle.get(), StdDuration::from_secs(4)));
    assert_eq!(dense(&sampled_ms(0, 100), &sampled_ms(2000, 2100), &spec), Ok(()));
    assert_eq!(
        dense(&sampled_ms(0, 100), &sampled_ms(2001, 2100), &spec),
        Err(Gap::Requests { apart: StdDuration::from_millis(2001), bound: StdDuration::from_secs(2) })
    );
    // From the earlier request to the later answer, at most the gap bound.
    assert_eq!(dense(&sampled_ms(0, 1900), &sampled_ms(1900, 4000), &spec), Ok(()));
    assert_eq!(
        dense(&sampled_ms(0, 1900), &sampled_ms(1900, 4001), &spec),
        Err(Gap::Answer { apart: StdDuration::from_millis(4001), bound: StdDuration::from_secs(4) })
    );
}

#[test]
fn at_the_defaults_an_honest_bmc_slower_than_poll_interval_still_proves() {
    // Every read takes 1.8 s, more than pollInterval: the next request goes at the answer.
    let lab = lab(off_spec(), machine(true).latency(StdDuration::from_millis(1800)));
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done, "{:?}", lab.reasons());
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
    assert!(proof_of(&status).count >= 3);
}

#[test]
fn however_long_settle_is_the_gap_bound_stays_within_twice_poll_interval_and_one_read() {
    for settle in [2, 60, 600] {
        let spec = CoronerRemediationSpec { settle: crate::api::Duration::from_secs(settle), ..spec() };
        assert_eq!(gap_bound(&spec), 2 * spec.poll_interval.get() + 2 * READ_ALLOWANCE, "settle {settle}s");
        assert_eq!(READ_ALLOWANCE, StdDuration::from_secs(1));
        assert!(request_bound(&spec) <= gap_bound(&spec));
    }
    // A settle shorter than what an honest BMC needs between requests still proves on one.
    for (settle_ms, poll_ms, bound_ms) in
        [(500, 1000, 2000), (1000, 1000, 2000), (3000, 1000, 3000), (9000, 1000, 4000)]
    {
        let spec = CoronerRemediationSpec {
            settle: crate::api::Duration::from_millis(settle_ms),
            poll_interval: crate::api::Duration::from_millis(poll_ms),
            ..spec()
        };
        assert_eq!(request_bound(&spec), StdDuration::from_millis(bound_ms), "settle {settle_ms} ms");
    }
}

#[test]
fn a_run_broken_by_the_gap_says_by_how_much_and_what_to_change() {
    let gap = dense(&sampled_ms(0, 100), &sampled_ms(1000, 7900), &spec()).unwrap_err();
    assert_eq!(
        gap.advice(&spec()),
        "readings 7.9s apart, from one request to the next answer, above the gap bound 4.0s: the BMC answers too slowly for pollInterval 1s (the gap bound is 2 × (pollInterval + 1.0s)); raise pollInterval"
    );
    // Through the loop: a BMC that takes 3 s per read never proves, and the final message says why.
    let lab = lab(off_spec(), machine(true).latency(StdDuration::from_secs(3)));
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    let message = conditions::find(&status.conditions, contract::SUCCEEDED).unwrap().message.clone();
    assert!(message.contains("apart") && message.contains("raise pollInterval"), "{message}");
}

#[test]
fn a_run_spans_from_the_first_answer_to_the_last_request() {
    let sampled = |requested: u64, answered: u64| Sampled {
        requested: StdDuration::from_millis(requested),
        answered: StdDuration::from_millis(answered),
    };
    // First answered at 0.5 s, last requested at 2.4 s: 1.9 s, not 2 s, although the requests are
    // 2.4 s apart and the answers 2.5 s.
    let run = Run { first: sampled(0, 500), last: sampled(2400, 3000), count: 3 };
    assert!(!spans_settle(&run, StdDuration::from_secs(2)));
    let run = Run { first: sampled(0, 400), last: sampled(2400, 3000), count: 3 };
    assert!(spans_settle(&run, StdDuration::from_secs(2)));
}

#[test]
fn a_changed_uuid_stops_the_fence() {
    let changed = reading_of(OTHER_UUID, PowerState::Off);
    let node = node();
    for state in [verified(&spec()), confirming(&spec())] {
        let decision = step(&spec(), &state, changed.clone(), ctx(2, &node));
        assert_eq!(succeeded(&decision.status), ("False".into(), "IdentityChanged".into()));
        assert_eq!(decision.reset, None);
    }
    // The same UUID in another case is the same UUID.
    let upper = reading_of(&NODE_UUID.to_uppercase(), PowerState::Off);
    assert_eq!(step(&spec(), &confirming(&spec()), upper, ctx(2, &node)).status.phase, Some(Phase::ConfirmingOff));
}

#[test]
fn no_proof_within_the_timeout_starts_the_next_attempt_then_fails() {
    let spec = spec();
    let node = node();
    // Still On at t=61 (ForceOff sent at t=1, powerOffTimeout 60s).
    let first_attempt_over = step(&spec, &confirming(&spec), power(PowerState::On), ctx(61, &node));
    let status = &first_attempt_over.status;
    assert_eq!(
        (status.phase, succeeded(status)),
        (Some(Phase::PoweringOff), ("Unknown".into(), "AttemptFailed".into()))
    );
    let progress = status.progress.as_ref().unwrap();
    assert_eq!((progress.attempt, progress.intent.is_none()), (2, true));
    let over = State::from(&first_attempt_over);
    assert_eq!(plan_of(&spec, &over, ctx(62, &node)), Plan::Wait(StdDuration::from_secs(4)));
    // Second attempt: fresh read first, then a new ForceOff.
    let second = step(&spec, &over, power(PowerState::On), ctx(66, &node));
    assert_eq!(second.reset, Some(ResetType::ForceOff));
    let second = step(
        &spec,
        &State::from(&second),
        Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) },
        ctx(66, &node),
    );
    let failed = step(&spec, &State::from(&second), power(PowerState::On), ctx(126, &node));
    assert_eq!(succeeded(&failed.status), ("False".into(), "PowerOffNotConfirmed".into()));
    assert_eq!(failed.reset, None);
    assert!(fencing_taint_wanted(&spec, &failed.status), "after a ForceOff the node keeps coroner's NoSchedule taint");
    assert!(!out_of_service_taint_ends(&failed.status));
}

#[test]
fn polling_is_paced_by_the_poll_interval() {
    let spec = spec();
    let node = node();
    let state = State::from(&step(&spec, &confirming(&spec), power(PowerState::Off), ctx(2, &node)));
    let soon = Context { mono: mono(2) + StdDuration::from_millis(300), ..ctx(2, &node) };
    assert_eq!(plan_of(&spec, &state, soon), Plan::Wait(StdDuration::from_millis(700)));
    assert!(matches!(plan_of(&spec, &state, ctx(3, &node)), Plan::ReadPower { .. }));
}

#[test]
fn the_reset_answer_is_recorded_but_proves_nothing() {
    let node = node();
    let status = decided(&spec());
    let rejected = Err(BmcFailure { transient: false, reason: Reason::BmcProtocolError, message: "HTTP 400".into() });
    let decision = step(
        &spec(),
        &status,
        Observation::ResetAnswered { action: ResetType::ForceOff, result: rejected },
        ctx(1, &node),
    );
    assert_eq!(decision.status.phase, Some(Phase::ConfirmingOff));
    let resets = decision.status.evidence.unwrap().power_off.unwrap().resets;
    assert_eq!((resets.len(), resets[0].result.as_str()), (1, "HTTP 400"));
    assert!(decision.notices.iter().any(|n| n.warning && n.reason == "ForceOffSent"));
    assert_eq!(decision.status.progress.unwrap().intent.unwrap().result.as_deref(), Some("HTTP 400"));
    // P7: a failure that passes stays to be sent again; an accepted one is answered.
    let busy = Err(BmcFailure { transient: true, reason: Reason::BmcUnreachable, message: "HTTP 503".into() });
    let failed =
        step(&spec(), &status, Observation::ResetAnswered { action: ResetType::ForceOff, result: busy }, ctx(1, &node));
    assert!(failed.notices.iter().any(|n| n.warning && n.message.contains("sent again")));
    assert_eq!(failed.status.progress.unwrap().intent.unwrap().result, None);
    let accepted = step(
        &spec(),
        &status,
        Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(204) },
        ctx(1, &node),
    );
    assert_eq!(accepted.status.progress.unwrap().intent.unwrap().result.as_deref(), Some("HTTP 204"));
}

// Releasing and after ----------------------------------------------------------------------------------

/// Releasing: after the ForceOff at t=1, Off read at t=2, 3 and 4.
fn releasing(spec: &CoronerRemediationSpec) -> State {
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
fn release_step(spec: &CoronerRemediationSpec, observation: Observation) -> Decision {
    let node = node();
    step(spec, &releasing(spec), observation, ctx(5, &node))
}

fn released() -> Observation {
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
fn powering_on(spec: &CoronerRemediationSpec) -> State {
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

fn remediation_uid(lab: &Lab<Scripted>) -> String {
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

// Contract-level endings --------------------------------------------------------------------------------

#[test]
fn a_leader_on_the_target_node_waits_in_its_phase() {
    let status = confirming(&spec()).status;
    let decision = leader_on_target(&status, "worker-1", t(5));
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::ConfirmingOff), None));
    assert_eq!(succeeded(&decision.status), ("Unknown".into(), "LeaderOnTargetNode".into()));
    assert_eq!(decision.notices.len(), 1);
    assert!(leader_on_target(&decision.status, "worker-1", t(10)).notices.is_empty(), "announced once");
}

#[test]
fn nhc_timeout_before_success_fails_and_sends_nothing() {
    let decision = timed_out(&confirming(&spec()).status, t(10)).unwrap();
    assert_eq!((decision.status.phase, decision.reset), (Some(Phase::Failed), None));
    assert_eq!(succeeded(&decision.status), ("False".into(), "TimedOutByNHC".into()));
    assert_eq!(processing(&decision.status), "False");
}

#[test]
fn nhc_timeout_after_success_keeps_succeeded_true() {
    let spec = spec();
    let decision = timed_out(&powering_on(&spec).status, t(10)).unwrap();
    assert_eq!(decision.status.phase, Some(Phase::Done));
    assert_eq!((processing(&decision.status), succeeded(&decision.status).0), ("False".into(), "True".into()));
    assert!(timed_out(&decision.status, t(11)).is_none(), "terminal phases are left alone");
}

#[test]
fn nhc_timeout_before_any_power_action_drops_the_fencing_taint() {
    let node = node();
    let admitted = next(
        &spec(),
        &CoronerRemediationStatus::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    )
    .status;
    let decision = timed_out(&admitted, t(1)).unwrap();
    assert!(!fencing_taint_wanted(&spec(), &decision.status));
}

#[test]
fn a_missing_node_fails_before_success_and_completes_after() {
    let before = node_missing(&confirming(&spec()).status, "worker-1", t(5)).unwrap();
    assert_eq!(succeeded(&before.status), ("False".into(), "NodeNotFound".into()));
    let spec = spec();
    let after = node_missing(&powering_on(&spec).status, "worker-1", t(9)).unwrap();
    assert_eq!((after.status.phase, succeeded(&after.status).0), (Some(Phase::Done), "True".into()));
}

#[test]
fn proof_boundary_is_inclusive_at_exactly_settle() {
    let at = |secs| Sampled { requested: StdDuration::from_secs(secs), answered: StdDuration::from_secs(secs) };
    let run = |first, last| Run { first: at(first), last: at(last), count: 2 };
    assert!(spans_settle(&run(0, 2), StdDuration::from_secs(2)));
    assert!(!spans_settle(&run(0, 1), StdDuration::from_secs(2)));
}

#[test]
fn a_fence_dates_life_by_its_own_first_sight_of_it_never_by_the_nodes_clock() {
    let spec = spec();
    let verified = verified(&spec);
    // The kubelet's clock runs behind: a renewal coroner first sees at t(5) carries renewTime t(-400).
    let renewed = NodeSnapshot { lease_renew_time: Some(t(-400)), ..node() };
    let seen = step(&spec, &verified, power(PowerState::On), ctx(5, &renewed));
    let progress = seen.status.progress.clone().unwrap();
    assert_eq!(progress.lease_change_seen_at, Some(MicroTime(t(5))));
    assert_eq!(progress.boot_change_seen_at, None);
    // Later sights keep the first; a new boot is dated when first seen.
    let booted = NodeSnapshot { boot_id: "boot-2".into(), ..renewed };
    let later = step(&spec, &State::from(&seen), power(PowerState::On), ctx(9, &booted));
    let progress = later.status.progress.clone().unwrap();
    assert_eq!(
        (progress.lease_change_seen_at, progress.boot_change_seen_at),
        (Some(MicroTime(t(5))), Some(MicroTime(t(9))))
    );
    // Another new boot is dated when it is first seen, not when the first one was.
    let again = NodeSnapshot { boot_id: "boot-3".into(), ..node() };
    let third = step(&spec, &State::from(&later), power(PowerState::On), ctx(12, &again));
    let progress = third.status.progress.unwrap();
    assert_eq!((progress.boot_seen.as_deref(), progress.boot_change_seen_at), (Some("boot-3"), Some(MicroTime(t(12)))));
    // The Lease as admitted is no sight of anything.
    let quiet = step(&spec, &verified, power(PowerState::On), ctx(5, &node()));
    assert_eq!(quiet.status.progress.unwrap().lease_change_seen_at, None);
}

#[test]
fn a_machine_already_off_is_judged_against_the_lease_admission_saw() {
    let spec = spec();
    let renewed = NodeSnapshot { lease_renew_time: Some(t(0)), ..node() };
    // Admitted at t(-100)'s Lease; it was renewed before the first reading found the machine Off.
    let decision = step(&spec, &verified(&spec), power(PowerState::Off), ctx(1, &renewed));
    let baseline = decision.status.progress.as_ref().unwrap().lease_renew_time_at_power_off.clone();
    assert_eq!(baseline, Some(MicroTime(t(-100))), "the renewal since admission is not the baseline");
    let status = persisted(&decision.status);
    assert!(matches!(lease_unrenewed_since_power_off(&status, &renewed), Err(NodeRefusal::LeaseRenewed { .. })));
}

#[test]
fn an_adopted_release_with_reboot_ends_as_an_off_release_and_never_waits_for_a_power_on() {
    let spec = CoronerRemediationSpec { action: FenceAction::Reboot, ..spec() };
    let node = node();
    let adopt = Verdict::Adopt(crate::gates::Adoptable {
        from: "worker-1-first".into(),
        released_at: t(-5),
        strategy: crate::api::RemediationStrategy::ResourceDeletion,
    });
    let decision = step(&spec, &State::default(), Observation::Admission(adopt), ctx(0, &node));
    let phase = decision.status.phase.unwrap();
    assert_eq!(phase, Phase::Done, "the sibling left the machine off; nobody sends On");
    assert!(!phase.being_fenced(), "a later remediation of the node is not blocked by it");
    assert_eq!(succeeded(&decision.status), ("True".into(), "PowerOnNotOwned".into()));
    assert_eq!(conditions::status_of(&decision.status.conditions, contract::POWERED_ON), Some("False"));
    assert_eq!(decision.reset, None);
    let release = decision.status.evidence.as_ref().unwrap().release.as_ref().unwrap();
    assert_eq!((release.kind, release.adopted_from.as_deref()), (ReleaseKind::Adopted, Some("worker-1-first")));
    assert_eq!(
        release.strategy,
        crate::api::RemediationStrategy::ResourceDeletion,
        "the record says how the sibling released, whatever this remediation's own strategy"
    );
}

#[test]
fn a_release_on_the_node_that_status_does_not_record_outlives_the_attempts_deadline() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let releasing = releasing(&spec);
    // The process that wrote the release stopped before its status write; the next one's look at the
    // Node finds the release, long past the attempt's deadline, and its reads then fail.
    let on_node = NodeSnapshot { released_at: Some(t(5)), ..node() };
    let late = ctx(600, &on_node);
    assert_eq!(plan_of(&spec, &releasing, late), Plan::RecordRelease);
    let failed = step(&spec, &releasing, Observation::Unavailable("the apiserver answered 503".into()), late);
    assert_eq!(failed.status.phase, Some(Phase::Releasing), "the release stands: recorded first, never forgotten");
    let recorded = step(&spec, &State::from(&failed), released(), late);
    assert!(recorded.status.evidence.as_ref().unwrap().release.is_some());
    // Without the release on the Node, the same failure at that time ends the attempt.
    let none = step(&spec, &releasing, Observation::Unavailable("503".into()), ctx(600, &node()));
    assert_eq!(succeeded(&none.status).1, "ReleaseNotWritten");
}

#[test]
fn a_release_that_keeps_expiring_ends_the_attempt_at_its_deadline() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let expired = Observation::Release(Err(ReleaseRefusal::ProofExpired));
    let releasing = State::from(&release_step(&spec, expired.clone()));
    assert_eq!(releasing.status.phase, Some(Phase::Releasing));
    let late = step(&spec, &releasing, expired, ctx(62, &node()));
    assert_eq!(succeeded(&late.status), ("False".into(), "ReleaseNotWritten".into()));
}

#[test]
fn a_proof_that_lapses_once_the_attempt_is_up_ends_the_release_not_written_and_is_not_proven_again() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let node = node();
    let releasing = releasing(&spec);
    // Within the attempt, Off after a gap proves the machine off again; if time runs out before the
    // new proof, the release's reason still ends the attempt.
    let early = step(&spec, &releasing, power(PowerState::Off), ctx(30, &node));
    assert_eq!(early.status.phase, Some(Phase::ConfirmingOff));
    let out = step(&spec, &State::from(&early), power(PowerState::Off), ctx(62, &node));
    assert_eq!(succeeded(&out.status), ("False".into(), "ReleaseNotWritten".into()));
    // A reading of anything but Off after the lapse: the power-off is the cause again.
    let on = step(&spec, &State::from(&early), power(PowerState::On), ctx(31, &node));
    let late = step(&spec, &State::from(&on), power(PowerState::Off), ctx(62, &node));
    assert_eq!(succeeded(&late.status), ("False".into(), "PowerOffNotConfirmed".into()));
    // Past it, the release ran out of time: the cause is the release, not the power-off.
    let late = step(&spec, &releasing, power(PowerState::Off), ctx(62, &node));
    assert_eq!(succeeded(&late.status), ("False".into(), "ReleaseNotWritten".into()));
    assert_eq!(late.reset, None);
}

fn off_through(through: DeviceMark) -> Observation {
    match power(PowerState::Off) {
        Observation::Power(Ok(reading)) => Observation::Power(Ok(PowerReading { through, ..reading })),
        other => other,
    }
}

#[test]
fn a_binding_change_after_the_reset_ends_the_attempt_and_the_next_proves_the_identity_again() {
    let spec = spec();
    let node = node();
    let first = step(&spec, &confirming(&spec), off_through(DeviceMark::default()), ctx(2, &node));
    assert_eq!(first.memory.run.map(|r| r.count), Some(1));
    let changed =
        step(&spec, &State::from(&first), off_through(DeviceMark { generation: 1, serial: 1 }), ctx(3, &node));
    assert_eq!(changed.status.phase, Some(Phase::VerifyingIdentity), "a proof comes from where the reset went");
    assert_eq!(succeeded(&changed.status), ("Unknown".into(), "AttemptFailed".into()));
    assert!(changed.status.evidence.as_ref().unwrap().identity.is_none());
    assert_eq!(changed.reset, None);
}

#[test]
fn new_credentials_restart_the_run_at_the_next_reading() {
    let spec = spec();
    let node = node();
    let first = step(&spec, &confirming(&spec), off_through(DeviceMark::default()), ctx(2, &node));
    let second = step(&spec, &State::from(&first), off_through(DeviceMark::default()), ctx(3, &node));
    assert_eq!(second.memory.run.map(|r| r.count), Some(2));
    // The Secret changed: a client built anew answers; its reading is the first of a new run.
    let rebuilt =
        step(&spec, &State::from(&second), off_through(DeviceMark { generation: 0, serial: 1 }), ctx(4, &node));
    assert_eq!(rebuilt.status.phase, Some(Phase::ConfirmingOff));
    assert_eq!(rebuilt.memory.run.map(|r| r.count), Some(1));
}

#[test]
fn a_phase_deadline_runs_on_this_process_clock_and_twice_as_long_on_the_wall_clock() {
    let deadline = StdDuration::from_secs(60);
    let wall = |secs: i64| Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs);
    let mono = StdDuration::from_secs;
    // This process's own clock: the deadline itself.
    assert!(!past_deadline(Some(mono(10)), mono(69), None, wall(0), deadline));
    assert!(past_deadline(Some(mono(10)), mono(70), None, wall(0), deadline));
    // A process that resumed the phase starts afresh: a failover does not eat the attempt...
    assert!(!past_deadline(Some(mono(0)), mono(5), Some(wall(0)), wall(100), deadline));
    // ...but the wall clock since the persisted start bounds the whole, even for no process at all.
    assert!(past_deadline(Some(mono(0)), mono(5), Some(wall(0)), wall(120), deadline));
    assert!(past_deadline(None, mono(0), Some(wall(0)), wall(120), deadline));
    assert!(!past_deadline(None, mono(0), None, wall(10_000), deadline), "nothing started, nothing elapses");
}

#[test]
fn a_lease_renewed_right_after_the_release_write_takes_the_taint_back_at_once() {
    let lab = lab(off_spec(), machine(true));
    lab.renew_lease_right_after_the_release();
    let status = run(&lab);
    assert_eq!(succeeded(&status), ("False".into(), "FenceDidNotTakeEffect".into()));
    assert!(status.evidence.as_ref().unwrap().release.is_none(), "no release is recorded");
    let node = lab.world(|t| t.nodes["worker-1"].clone());
    let keys: Vec<String> = node.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.key).collect();
    assert!(!keys.iter().any(|k| k == crate::taints::OUT_OF_SERVICE_KEY), "the taint is taken back: {keys:?}");
}

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
fn the_exclusion_label_before_the_taint_goes_ends_a_reboot_as_an_off_release() {
    let spec = spec();
    let waiting = State::from(&release_step(&spec, released()));
    let mut excluded = node();
    excluded.excluded = Some("maintenance".into());
    let done = step(&spec, &waiting, Observation::Workloads(Workloads::default()), ctx(7, &excluded));
    assert_eq!((done.status.phase, done.reset), (Some(Phase::Done), None));
    assert!(!out_of_service_taint_ends(&done.status), "the out-of-service taint stays, as after action Off");
    assert_eq!(succeeded(&done.status), ("True".into(), "PowerOnExcluded".into()));
    assert_eq!(conditions::status_of(&done.status.conditions, contract::POWERED_ON), Some("False"));
}

#[test]
fn the_exclusion_label_in_powering_on_means_no_on_and_no_wait() {
    let spec = spec();
    let state = powering_on(&spec);
    let mut excluded = node();
    excluded.excluded = Some(String::new());
    let done = step(&spec, &state, power(PowerState::Off), ctx(8, &excluded));
    assert_eq!((done.status.phase, done.reset), (Some(Phase::Done), None), "no On, no wait for one");
    assert_eq!(succeeded(&done.status), ("True".into(), "PowerOnExcluded".into()));
    // Checked again right before the request: a refusal there ends it the same way.
    let decided = step(&spec, &state, power(PowerState::Off), ctx(8, &node()));
    assert_eq!(decided.reset, Some(ResetType::On));
    let refusal = NodeRefusal::Excluded { node: "worker-1".into(), value: String::new() };
    let refused = step(&spec, &State::from(&decided), Observation::ActionRefused(refusal), ctx(8, &excluded));
    assert_eq!((refused.status.phase, refused.reset), (Some(Phase::Done), None));
    assert!(refused.status.progress.as_ref().and_then(|p| p.intent.as_ref()).is_none(), "the unsent On is withdrawn");
}

#[test]
fn a_deletion_release_stopped_after_some_pods_is_a_release_that_says_how_many() {
    let spec =
        CoronerRemediationSpec { remediation_strategy: crate::api::RemediationStrategy::ResourceDeletion, ..spec() };
    let partial = Observation::Release(Ok(Released {
        at: t(5),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: false,
        took_over_from: None,
        pods_deleted: Some(2),
        interrupted: Some(ReleaseRefusal::Node(NodeRefusal::LeaseRenewed { node: "worker-1".into(), renewed: t(4) })),
    }));
    let decision = release_step(&spec, partial);
    let release = decision.status.evidence.as_ref().and_then(|e| e.release.as_ref()).expect("a release is recorded");
    assert_eq!(release.pods_deleted, Some(2), "the pods deleted are a release, guarded like any other");
    assert_eq!(succeeded(&decision.status), ("False".into(), "NodeAliveAfterPowerOff".into()), "never a success");
    let message = &conditions::find(&decision.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("force-deleted 2 pods") && message.contains("stopped"), "{message}");
}

fn deletion_spec() -> CoronerRemediationSpec {
    CoronerRemediationSpec { remediation_strategy: crate::api::RemediationStrategy::ResourceDeletion, ..spec() }
}

/// A `ResourceDeletion` fence whose node passed the check and whose release is recorded as begun.
fn deletion_begun(spec: &CoronerRemediationSpec) -> State {
    let node = node();
    let state = releasing(spec);
    assert_eq!(plan_of(spec, &state, ctx(5, &node)), Plan::BeginDeletion, "no pod goes before the record");
    let cleared = Observation::DeletionMayBegin(Ok(Released {
        at: t(5),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: false,
        took_over_from: None,
        pods_deleted: None,
        interrupted: None,
    }));
    State::from(&step(spec, &state, cleared, ctx(5, &node)))
}

#[test]
fn a_deletion_release_is_recorded_as_begun_before_its_first_pod_is_deleted() {
    let spec = deletion_spec();
    let node = node();
    let begun = deletion_begun(&spec);
    let record = begun.status.progress.as_ref().and_then(|p| p.release_begun.as_ref()).expect("recorded as begun");
    assert_eq!(record.released_at, MicroTime(t(5)));
    assert!(begun.status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_none(), "not yet the release");
    assert_eq!(plan_of(&spec, &begun, ctx(5, &node)), Plan::Release, "then the pods go");
    // With the taint there is nothing to record first: the taint is the record on the Node.
    let taint = spec_with_taint();
    assert_eq!(plan_of(&taint, &releasing(&taint), ctx(5, &node)), Plan::Release);
}

fn spec_with_taint() -> CoronerRemediationSpec {
    CoronerRemediationSpec { remediation_strategy: crate::api::RemediationStrategy::OutOfServiceTaint, ..spec() }
}

#[test]
fn a_node_that_fails_the_check_before_the_deletion_begins_releases_nothing() {
    let spec = deletion_spec();
    let node = node();
    let refusal = NodeRefusal::Awake { node: "worker-1".into(), ready: "True".into() };
    let refused = step(
        &spec,
        &releasing(&spec),
        Observation::DeletionMayBegin(Err(ReleaseRefusal::Node(refusal))),
        ctx(5, &node),
    );
    assert_eq!(refused.status.phase, Some(Phase::Failed));
    assert!(refused.status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_none(), "no pod went");
    let message = &conditions::find(&refused.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("nothing released"), "{message}");
}

#[test]
fn a_fence_that_ends_after_its_deletion_began_records_the_release_and_never_says_nothing_released() {
    let spec = deletion_spec();
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec.retry }, ..spec };
    let node = node();
    // The pods went, the answer was lost; the proof went stale; the machine reads On in the last attempt.
    let begun = State { memory: Memory::default(), ..deletion_begun(&spec) };
    let failed = step(&spec, &begun, power(PowerState::On), ctx(30, &node));
    assert_eq!(failed.status.phase, Some(Phase::Failed));
    let release = failed.status.evidence.as_ref().and_then(|e| e.release.as_ref()).expect("the release is recorded");
    assert_eq!((release.released_at.clone(), release.pods_deleted), (MicroTime(t(5)), None), "from when it began");
    assert!(failed.status.progress.as_ref().is_some_and(|p| p.release_begun.is_none()), "moved, not copied");
    let message = &conditions::find(&failed.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(
        !message.contains("nothing released") && message.contains("are released, and the machine is guarded"),
        "{message}"
    );
    // NodeHealthCheck's timeout and a deleted Node record it the same way.
    for decision in [timed_out(&begun.status, t(30)), node_missing(&begun.status, "worker-1", t(30))] {
        let status = decision.expect("a terminal decision").status;
        assert!(status.evidence.as_ref().is_some_and(|e| e.release.is_some()), "recorded, guarded");
        let message = &conditions::find(&status.conditions, contract::SUCCEEDED).unwrap().message;
        assert!(!message.contains("nothing released"), "{message}");
    }
}

#[test]
fn a_deletion_that_completes_is_the_release_from_when_it_began() {
    let spec = deletion_spec();
    let node = node();
    let begun = deletion_begun(&spec);
    let done = Observation::Release(Ok(Released {
        at: t(6),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: false,
        took_over_from: None,
        pods_deleted: Some(3),
        interrupted: None,
    }));
    let released = step(&spec, &begun, done, ctx(6, &node));
    let release = released.status.evidence.as_ref().and_then(|e| e.release.as_ref()).expect("released");
    assert_eq!((release.released_at.clone(), release.pods_deleted), (MicroTime(t(5)), Some(3)));
    assert!(released.status.progress.as_ref().is_some_and(|p| p.release_begun.is_none()));
}

#[test]
fn a_begun_deletion_whose_proof_went_stale_is_recorded_with_no_pod_left_and_proven_again_otherwise() {
    // Seed 210372: the apiserver refused the status write after the pods went; by the next try the
    // proof was stale, and proving it again on a flaky apiserver outlasted the only attempt.
    let spec = deletion_spec();
    let node = node();
    let begun = deletion_begun(&spec);
    let stale = ctx(30, &node);
    let path = begun.status.evidence.as_ref().and_then(|e| e.identity.as_ref()).unwrap().system_path.clone();
    assert_eq!(plan_of(&spec, &begun, stale), Plan::FinishDeletion { system_path: path });
    // Nothing left to delete: recorded as it stands, from when it began, with no new proof.
    let none_left = Observation::Release(Ok(Released {
        at: t(30),
        node_ready: "Unknown".into(),
        lease_renew_time: Some(t(-100)),
        taint_owned: false,
        took_over_from: None,
        pods_deleted: Some(0),
        interrupted: None,
    }));
    let recorded = step(&spec, &begun, none_left, stale);
    let release = recorded.status.evidence.as_ref().and_then(|e| e.release.as_ref()).expect("released");
    assert_eq!(release.released_at, MicroTime(t(5)));
    assert_eq!(succeeded(&recorded.status).0, "True");
    let message = &conditions::find(&recorded.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("left none to delete"), "{message}");
    // A pod left: the driver reads the machine instead, and the reading proves it again first.
    let read = step(&spec, &begun, power(PowerState::Off), stale);
    assert_eq!(read.status.phase, Some(Phase::ConfirmingOff));
    // Without a begun deletion a stale proof is read again, as ever.
    assert!(matches!(plan_of(&spec, &releasing(&spec), stale), Plan::ReadPower { .. }));
}

#[test]
fn an_off_whose_status_state_says_the_bmc_does_not_know_breaks_the_run_and_is_named() {
    let spec = spec();
    let node = node();
    let state = State::from(&step(&spec, &confirming(&spec), power(PowerState::Off), ctx(2, &node)));
    assert!(state.memory.run.is_some());
    let unknown = step(&spec, &state, power(PowerState::OffUnknown("Absent".into())), ctx(3, &node));
    assert_eq!((unknown.status.phase, unknown.memory.run), (Some(Phase::ConfirmingOff), None));
    let progress = unknown.status.progress.unwrap();
    assert_eq!(progress.last_error.as_deref(), Some("power reads Off with Status.State Absent"));
    assert_eq!(progress.last_power_state.as_deref(), Some("Off with Status.State Absent"));
}

fn unavailable() -> Observation {
    Observation::Unavailable("Kubernetes API unavailable: Secret bmc-worker-1 is forbidden".into())
}

fn last_error(status: &CoronerRemediationStatus) -> String {
    status.progress.as_ref().and_then(|p| p.last_error.clone()).unwrap_or_default()
}

#[test]
fn a_phase_whose_reads_keep_failing_ends_at_its_deadline_with_the_cause() {
    let spec = spec();
    let node = node();
    let early = step(&spec, &confirming(&spec), unavailable(), ctx(2, &node));
    assert_eq!(early.status.phase, Some(Phase::ConfirmingOff));
    assert!(last_error(&early.status).contains("Secret bmc-worker-1 is forbidden"));
    let over = step(&spec, &State::from(&early), unavailable(), ctx(62, &node));
    assert_eq!(succeeded(&over.status), ("Unknown".into(), "AttemptFailed".into()));
    let message = &conditions::find(&over.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("Secret bmc-worker-1 is forbidden"), "{message}");
    assert!(over.reset.is_none());
}

#[test]
fn an_identity_check_whose_reads_keep_failing_ends_its_attempt_at_the_deadline() {
    let spec = CoronerRemediationSpec { retry: crate::api::Retry { count: 1, ..spec().retry }, ..spec() };
    let node = node();
    let admitted = step(
        &spec,
        &State::default(),
        Observation::Admission(Verdict::Admit(Box::new(node.evidence(t(0))))),
        ctx(0, &node),
    );
    let early = step(&spec, &State::from(&admitted), unavailable(), ctx(30, &node));
    assert_eq!(early.status.phase, Some(Phase::VerifyingIdentity));
    let over = step(&spec, &State::from(&early), unavailable(), ctx(61, &node));
    assert_eq!(succeeded(&over.status), ("False".into(), "ApiUnavailable".into()));
    let message = &conditions::find(&over.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("Secret bmc-worker-1 is forbidden") && message.contains("no power action"), "{message}");
}

#[test]
fn workloads_that_cannot_be_listed_wait_until_the_release_timeout_then_power_on_with_the_cause() {
    let spec = spec();
    let node = node();
    let waiting = State::from(&release_step(&spec, released()));
    let still = step(&spec, &waiting, unavailable(), ctx(6, &node));
    assert_eq!(still.status.phase, Some(Phase::WaitingForRelease));
    let timed_out = step(&spec, &waiting, unavailable(), ctx(5 + 300, &node));
    assert_eq!(timed_out.status.phase, Some(Phase::PoweringOn));
    let notice = timed_out.notices.iter().find(|n| n.reason == "ReleaseTimeout").unwrap();
    assert!(notice.message.contains("is unknown") && notice.message.contains("forbidden"), "{}", notice.message);
}

#[test]
fn a_power_on_whose_reads_keep_failing_leaves_the_node_fenced_at_the_deadline() {
    let spec = spec();
    let node = node();
    let state = powering_on(&spec);
    let early = step(&spec, &state, unavailable(), ctx(7, &node));
    assert_eq!(early.status.phase, Some(Phase::PoweringOn));
    let over = step(&spec, &State::from(&early), unavailable(), ctx(6 + 61, &node));
    assert_eq!(over.status.phase, Some(Phase::Done), "no On was sent: it ends as an Off release does");
    assert_eq!(conditions::status_of(&over.status.conditions, contract::POWERED_ON), Some("False"));
    assert!(over.reset.is_none());
}

#[test]
fn a_fence_whose_secret_reads_are_refused_frees_its_slot_at_the_deadlines_with_the_cause() {
    // RBAC on the credentials Secret taken away after the ForceOff: no reading can be taken.
    let lab = lab(spec(), machine(true));
    run_until_off_readings(&lab, 1);
    lab.refuse_secret_reads();
    let status = run(&lab);
    assert!(phase_of(&status).is_terminal(), "{:?}", lab.phases());
    let failed = conditions::find(&status.conditions, contract::SUCCEEDED).unwrap();
    assert_eq!((failed.status.as_str(), failed.reason.as_str()), ("False", "PowerOffNotConfirmed"));
    assert!(failed.message.contains("secrets") && failed.message.contains("forbidden"), "{}", failed.message);
    assert!(lab.reasons().contains(&"AttemptFailed".to_owned()));
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
}

#[test]
fn a_power_on_read_before_coroner_s_on_was_answered_is_not_taken_for_its_own_and_goes_to_the_guard() {
    let spec = spec();
    let node = node();
    // The taint is off and the On decided (its intent persisted), but no answer came: a failover, or
    // the apiserver failing before the request.
    let decided = step(&spec, &powering_on(&spec), power(PowerState::Off), ctx(7, &node));
    assert_eq!(decided.reset, Some(ResetType::On));
    let seen = step(&spec, &State::from(&decided), power(PowerState::On), ctx(8, &node));
    assert_eq!(seen.status.phase, Some(Phase::PoweringOn), "not PoweredOn");
    assert_eq!(conditions::status_of(&seen.status.conditions, contract::POWERED_ON), None);
    assert_eq!((seen.reset, seen.memory.sighted_on.clone()), (None, Some(PowerState::On)));
    assert!(seen.memory.guarded_at.is_none(), "the guard reads at once");
    // Once the On is answered, On is coroner's own.
    let answered = Observation::ResetAnswered { action: ResetType::On, result: Ok(204) };
    let sent = step(&spec, &State::from(&decided), answered, ctx(8, &node));
    let on = step(&spec, &State::from(&sent), power(PowerState::On), ctx(9, &node));
    assert_eq!(on.status.phase, Some(Phase::WaitingForNode));
    assert_eq!(conditions::status_of(&on.status.conditions, contract::POWERED_ON), Some("True"));
}

#[test]
fn an_endpoint_edited_between_the_reading_and_the_force_off_gets_no_request_and_identity_is_proven_again() {
    let lab = lab(off_spec(), machine(true));
    lab.edit_endpoint_before_the_next_power_action();
    let status = run(&lab);
    assert_eq!(phase_of(&status), Phase::Done, "{:?}", lab.reasons());
    let reasons = lab.reasons();
    let verified = reasons.iter().filter(|r| *r == "IdentityVerified").count();
    assert_eq!(verified, 2, "proven again through the edited binding: {reasons:?}");
    assert!(reasons.contains(&"AttemptFailed".to_owned()));
    // The one ForceOff went after the second proof: the first decision sent nothing.
    assert_eq!(lab.device().resets(), [ResetType::ForceOff]);
    let second_proof = reasons.iter().rposition(|r| r == "IdentityVerified").unwrap();
    let sent = reasons.iter().position(|r| r == "ForceOffSent").unwrap();
    assert!(sent > second_proof, "{reasons:?}");
}

#[test]
fn new_credential_values_between_the_reading_and_the_request_restart_the_run_and_the_next_reading_decides() {
    let spec = spec();
    let node = node();
    let decided = decided(&spec);
    let proven = DeviceMark { generation: 1, serial: 7 };
    let rotated = Observation::DeviceChanged { proven, now: DeviceMark { serial: 8, ..proven } };
    let after = step(&spec, &decided, rotated, ctx(1, &node));
    assert_eq!(after.status.phase, Some(Phase::PoweringOff), "the next reading decides again");
    assert!(after.status.progress.as_ref().unwrap().intent.is_none(), "the unsent ForceOff is withdrawn");
    assert_eq!((after.reset, after.requeue), (None, Some(StdDuration::ZERO)));
    assert!(last_error(&after.status).contains("credentials changed"));
    // The next reading, through the new credentials, reads On: the ForceOff is decided again.
    let again = step(&spec, &State::from(&after), power(PowerState::On), ctx(2, &node));
    assert_eq!(again.reset, Some(ResetType::ForceOff));
    // So it is after a ForceOff that found no device to go to.
    let unsent = Observation::ActionUnsent(unreachable());
    let withdrawn = step(&spec, &decided, unsent, ctx(1, &node));
    assert_eq!(withdrawn.status.phase, Some(Phase::PoweringOff));
    let again = step(&spec, &State::from(&withdrawn), power(PowerState::On), ctx(2, &node));
    assert_eq!(again.reset, Some(ResetType::ForceOff));
    let edited = Observation::DeviceChanged { proven, now: DeviceMark { generation: 2, ..proven } };
    let ended = step(&spec, &decided, edited, ctx(1, &node));
    assert_eq!(succeeded(&ended.status), ("Unknown".into(), "AttemptFailed".into()));
    assert_eq!(ended.status.phase, Some(Phase::VerifyingIdentity));
}

#[test]
fn no_on_goes_through_a_binding_whose_endpoint_changed_after_the_release() {
    let spec = spec();
    let node = node();
    let decided = State::from(&step(&spec, &powering_on(&spec), power(PowerState::Off), ctx(7, &node)));
    assert!(decided.status.progress.as_ref().unwrap().intent.is_some());
    let proven = DeviceMark { generation: 1, serial: 7 };
    let edited = Observation::DeviceChanged { proven, now: DeviceMark { generation: 2, ..proven } };
    let stopped = step(&spec, &decided, edited, ctx(8, &node));
    assert_eq!(stopped.status.phase, Some(Phase::WaitingForNode));
    assert_eq!(stopped.reset, None);
    let powered_on = conditions::find(&stopped.status.conditions, contract::POWERED_ON).unwrap();
    assert_eq!((powered_on.status.as_str(), powered_on.reason.as_str()), ("False", "BindingChanged"));
}

#[test]
fn a_bmc_fits_the_gap_rule_while_each_read_and_the_loop_s_own_time_take_at_most_poll_interval_and_one_second() {
    let second = StdDuration::from_secs(1);
    // The loop's own 250 ms between readings leaves 1.75 s for a read at pollInterval 1 s.
    assert!(read_fits(StdDuration::from_millis(1750), second));
    assert!(!read_fits(StdDuration::from_millis(1751), second));
    assert!(read_fits(StdDuration::from_millis(2500), 2 * second));
}

#[test]
fn an_on_that_found_no_device_to_go_to_is_withdrawn_and_the_release_still_stands() {
    let spec = spec();
    let node = node();
    let decided = State::from(&step(&spec, &powering_on(&spec), power(PowerState::Off), ctx(7, &node)));
    let failure = BmcFailure {
        transient: false,
        reason: Reason::BindingInvalid,
        message: "BmcBinding worker-1 was deleted during the fence".into(),
    };
    let unsent = step(&spec, &decided, Observation::ActionUnsent(failure), ctx(8, &node));
    let progress = unsent.status.progress.as_ref().unwrap();
    assert!(progress.intent.is_none(), "withdrawn: nothing was sent");
    assert!(unsent.status.evidence.as_ref().unwrap().power_on.as_ref().and_then(|p| p.sent_at.clone()).is_none());
    assert!(crate::guard::release_stands(&unsent.status, &node), "no On answered: the guard still guards");
    assert!(progress.last_error.as_deref().unwrap().contains("nothing sent"));
}

#[test]
fn after_the_release_a_reading_through_an_edited_binding_sends_no_on_even_in_a_new_process() {
    let spec = spec();
    let node = node();
    let state = powering_on(&spec);
    assert_eq!(state.status.evidence.as_ref().unwrap().identity.as_ref().unwrap().binding_generation, Some(0));
    // A new process: nothing in memory but what status records.
    let fresh = State { memory: Memory::default(), ..state };
    let edited = Observation::Power(Ok(PowerReading {
        uuid: NODE_UUID.into(),
        power_state: PowerState::Off,
        sampled: Sampled::default(),
        through: DeviceMark { generation: 5, serial: 0 },
    }));
    let stopped = step(&spec, &fresh, edited, ctx(7, &node));
    assert_eq!((stopped.status.phase, stopped.reset), (Some(Phase::WaitingForNode), None));
    let powered_on = conditions::find(&stopped.status.conditions, contract::POWERED_ON).unwrap();
    assert_eq!((powered_on.status.as_str(), powered_on.reason.as_str()), ("False", "BindingChanged"));
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
fn a_release_time_written_by_a_clock_that_ran_ahead_cannot_hold_the_wait_for_release() {
    let spec = spec();
    let node = node();
    let mut waiting = State::from(&release_step(&spec, released()));
    assert_eq!(waiting.status.phase, Some(Phase::WaitingForRelease));
    // The releasing process's clock ran an hour ahead; this process starts with no memory of it.
    let release = waiting.status.evidence.as_mut().and_then(|e| e.release.as_mut()).unwrap();
    release.released_at = MicroTime(t(3600));
    waiting.memory = Memory::default();
    let holding = || Observation::Workloads(Workloads { blocking_pods: 1, volume_attachments: 0 });
    let first = step(&spec, &waiting, holding(), ctx(10, &node));
    assert_eq!(first.status.phase, Some(Phase::WaitingForRelease), "it waits releaseTimeout itself");
    let timeout = i64::try_from(spec.release_timeout.get().as_secs()).unwrap();
    let later = step(&spec, &State::from(&first), holding(), ctx(10 + timeout, &node));
    assert_eq!(later.status.phase, Some(Phase::PoweringOn), "then powers on regardless, as at the timeout");
}

#[test]
fn a_refusal_before_any_pod_went_drops_the_begun_record_and_releases_nothing() {
    let spec = deletion_spec();
    let node = node();
    let begun = deletion_begun(&spec);
    assert!(begun.memory.begun_untouched, "this process wrote it and sent nothing since");
    let renewed = NodeRefusal::LeaseRenewed { node: "worker-1".into(), renewed: t(4) };
    let refused = step(&spec, &begun, Observation::Release(Err(ReleaseRefusal::Node(renewed))), ctx(5, &node));
    assert_eq!(refused.status.phase, Some(Phase::Failed));
    assert!(refused.status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_none(), "no pod went: no release");
    let message = &conditions::find(&refused.status.conditions, contract::SUCCEEDED).unwrap().message;
    assert!(message.contains("nothing released"), "{message}");
}

#[test]
fn after_the_deletion_began_a_machine_that_reads_on_is_the_guards_at_once() {
    let spec = deletion_spec();
    let node = node();
    // Another process: it cannot know whether pods went. Attempts are left, yet the fence ends so
    // that the guard (which no hold delays) switches the machine off.
    let begun = State { memory: Memory::default(), ..deletion_begun(&spec) };
    assert!(spec.retry.count > 1);
    let on = step(&spec, &begun, power(PowerState::On), ctx(6, &node));
    assert_eq!((on.status.phase, on.reset), (Some(Phase::Failed), None));
    assert!(on.status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_some(), "recorded: the guard's now");
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

#[test]
fn a_machine_off_after_a_force_off_whose_answer_was_never_recorded_is_not_called_already_off() {
    let node = node();
    // A new attempt reads Off while the ForceOff decided earlier has no recorded answer (W1: held,
    // then lost with its process): it may have gone out.
    let mut state = decided(&spec());
    state.status.phase = Some(Phase::PoweringOff);
    let off = step(&spec(), &state, power(PowerState::Off), ctx(2, &node));
    assert_eq!(off.status.phase, Some(Phase::ConfirmingOff));
    assert!(!off.status.evidence.unwrap().power_off.unwrap().already_off);
}

#[test]
fn the_reading_that_completes_settle_waits_for_the_moment_it_does_instead_of_needing_another_poll() {
    let spec = CoronerRemediationSpec::default();
    let ms = StdDuration::from_millis;
    let run = Run {
        first: Sampled { requested: ms(1000), answered: ms(1010) },
        last: Sampled { requested: ms(2000), answered: ms(2008) },
        count: 2,
    };
    let memory = Memory { run: Some(run), last_requested: Some(ms(2000)), ..Memory::default() };
    // A poll after the last request (3.000 s) the run would span 1.990 s of settle's 2 s: the reading
    // waits until 3.010 s, and completes the proof.
    assert_eq!(next_reading_due(&spec, &memory), Some(ms(3010)));
    // No run: a poll after the last request.
    let bare = Memory { last_requested: Some(ms(2000)), ..Memory::default() };
    assert_eq!(next_reading_due(&spec, &bare), Some(ms(3000)));
    // Short of settle by more than a tenth of the poll: a poll at a time, the cadence asked for.
    let long = CoronerRemediationSpec { settle: crate::api::Duration::from_secs(60), ..spec.clone() };
    assert_eq!(next_reading_due(&long, &memory), Some(ms(3000)));
    let late = Memory { last_requested: Some(ms(1500)), ..memory };
    assert_eq!(next_reading_due(&spec, &late), Some(ms(2500)), "the run would span settle only 510 ms later");
}

/// Whether the gates queued the fence.
fn queued(status: &CoronerRemediationStatus) -> bool {
    conditions::find(&status.conditions, contract::SUCCEEDED).is_some_and(|c| c.reason == Reason::Queued.as_str())
}

/// One reconcile of worker-1 from the cached remediation, and the requests it sent the API server.
async fn apply_counted(lab: &Lab<Scripted>) -> (crate::driver::Next, u64) {
    let cached = lab.world(|t| t.remediation("worker-1")).unwrap();
    let before = lab.requests();
    let next = crate::driver::apply(lab, lab.local(), &cached).await.unwrap();
    (next, lab.requests() - before)
}

/// Issue 23 (P3): a remediation queued behind three running fences sends the API server nothing while
/// nothing its place depends on moved; a slot freeing in the store, or a wake-up on purpose, makes it
/// look (and a freed slot admits it).
#[tokio::test]
async fn a_queued_remediation_sends_no_request_until_something_its_place_depends_on_moves() {
    let lab = lab(off_spec(), machine(true));
    lab.world(|t| {
        for n in ["w-1", "w-2", "w-3"] {
            t.add_node_as(n, "uuid", &format!("{n}-boot"), conditions::UNKNOWN, &[]);
            t.create_remediation(n, n, &off_spec());
            let holding = CoronerRemediationStatus { phase: Some(Phase::ConfirmingOff), ..Default::default() };
            let version = t.remediation(n).and_then(|r| r.metadata.resource_version);
            t.write_status(n, version.as_deref(), &holding).unwrap();
        }
    });
    lab.run_until(queued).await;
    let apply = || apply_counted(&lab);
    // The look that queued it is remembered: the next finds nothing moved.
    assert_eq!(apply().await, (crate::driver::Next::Requeue(crate::gates::QUEUED_RECHECK), 0));
    assert_eq!(apply().await.1, 0);

    lab.local().poke("worker-1");
    assert!(apply().await.1 > 0, "a wake-up on purpose looks");
    assert_eq!(apply().await.1, 0);

    // A slot frees; no wake-up reached it (lost): the store shows it, so the fallback looks.
    lab.world(|t| {
        let version = t.remediation("w-1").and_then(|r| r.metadata.resource_version);
        let done = CoronerRemediationStatus { phase: Some(Phase::Done), ..Default::default() };
        t.write_status("w-1", version.as_deref(), &done).unwrap();
    });
    let (_, looked) = apply().await;
    assert!(looked > 0);
    assert_admitted(&lab.status());
}

/// Admitted and under way: past the gates, not failed.
fn assert_admitted(status: &CoronerRemediationStatus) {
    let phase = status.phase.unwrap_or_default();
    assert!(!matches!(phase, Phase::Pending | Phase::Failed), "{phase:?}");
    assert!(status.evidence.as_ref().and_then(|e| e.node.as_ref()).is_some());
}

/// Issue 23 (P3): a remediation queued by a full fence window sleeps without requests until the
/// moment the window frees, however far away (nothing else wakes it then), and is admitted then.
#[tokio::test]
async fn a_remediation_the_window_queues_looks_when_the_window_frees() {
    let lab = lab(off_spec(), machine(true));
    // Five fences admitted a minute ago, done: the window (5 per 10 minutes) is full for 9 more.
    lab.world(|t| {
        let admitted = t.wall(t.now) - SignedDuration::from_secs(60);
        for n in ["w-1", "w-2", "w-3", "w-4", "w-5"] {
            t.add_node_as(n, "uuid", &format!("{n}-boot"), conditions::UNKNOWN, &[]);
            t.create_remediation(n, n, &off_spec());
            let node = crate::api::NodeEvidence {
                name: n.into(),
                uid: n.into(),
                system_uuid: "uuid".into(),
                boot_id: String::new(),
                ready: "Unknown".into(),
                lease_present: false,
                lease_renew_time: None,
                admitted_at: MicroTime(admitted),
                binding: None,
            };
            let done = CoronerRemediationStatus {
                phase: Some(Phase::Done),
                evidence: Some(crate::api::Evidence { node: Some(node), ..Default::default() }),
                ..Default::default()
            };
            let version = t.remediation(n).and_then(|r| r.metadata.resource_version);
            t.write_status(n, version.as_deref(), &done).unwrap();
        }
    });
    lab.run_until(queued).await;
    let apply = || apply_counted(&lab);
    // Each fallback a minute apart finds nothing moved, for nine minutes.
    for _ in 0..8 {
        assert_eq!(apply().await, (crate::driver::Next::Requeue(crate::gates::QUEUED_RECHECK), 0));
        lab.clock().sleep(crate::gates::QUEUED_RECHECK).await;
    }
    let (_, quiet) = apply().await;
    assert_eq!(quiet, 0, "still within the window");
    lab.clock().sleep(crate::gates::QUEUED_RECHECK).await;
    let (_, looked) = apply().await;
    assert!(looked > 0, "the window freed: it looks");
    assert_admitted(&lab.status());
}

/// A2: a binding deleted and re-created identically (a new object without a status) keeps, at
/// admission, the verification kept for its node at exactly that content under coroner's seal; a
/// forged seal, or a verification of another content, counts for nothing.
#[test]
fn a_binding_re_created_identically_keeps_its_kept_verification_and_a_forged_one_counts_for_nothing() {
    use crate::verification::KeptVerification;
    for (sealed, same_content, counts) in [(true, true, true), (false, true, false), (true, false, false)] {
        let lab = lab(off_spec(), machine(true));
        let content = lab.device_content() + u64::from(!same_content);
        lab.world(|t| {
            let mut kept = KeptVerification {
                content: crate::words::digest::content_hex(content),
                at: t.wall(t.now) - secs(600),
                uid: "uid-of-the-deleted-binding".into(),
                seal: String::new(),
            };
            kept.seal = if sealed { crate::sim::world::seal_kept("worker-1", &kept) } else { "0123abcd".into() };
            t.kept_verifications.insert("worker-1".into(), kept);
            // Re-created: another object, never verified.
            t.bindings.get_mut("worker-1").unwrap().status = None;
        });
        let admitted = |s: &CoronerRemediationStatus| s.evidence.as_ref().and_then(|e| e.node.as_ref()).is_some();
        let status = futures::executor::block_on(lab.run_until(admitted));
        let binding = status.evidence.unwrap().node.unwrap().binding.unwrap();
        let earlier = binding.verified_by_earlier_object.as_deref();
        assert_eq!(earlier.is_some(), counts, "sealed {sealed}, same content {same_content}: {binding:?}");
        if counts {
            assert_eq!(earlier, Some("uid-of-the-deleted-binding"));
            assert_eq!(binding.verified_content, binding.content);
        } else {
            assert_eq!(binding.verified_at, None);
        }
    }
}
