//! Transition-by-transition tests of the fence state machine; sequences (decide, send, record the
//! answer, read again) run the real fence loop against a scripted BMC on virtual time
//! ([`crate::sim::lab`]), including reading sequences a real emulator cannot produce.

mod admission;
mod binding_status;
mod deletion;
mod endings;
mod look;
mod power_off;
mod records;
mod release;

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
use release::*;

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
