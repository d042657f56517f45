//! Property tests of the state machine alone: arbitrary observation sequences through [`next`], each
//! status persisted (the apiserver's JSON round trip) before the next step, and after every step
//! what `next` must keep whatever it is fed. Two feeds: as the loop feeds it (the observation the
//! plan asks for, with arbitrary content; a reset's answer right after it, or never, as when the
//! process dies first; NHC's timeout, a vanished node, the leader on the node at any point), and
//! anything at all, in any phase.

use jiff::{SignedDuration, Timestamp};
use proptest::{prelude::*, strategy::ValueTree};

use super::*;
use crate::{
    api::{CoronerRemediationSpec, Duration, FenceAction, RemediationStrategy, Retry},
    bmc::{BmcError, PowerState, SystemReading},
    contract::Disposition,
    identity::Claim,
};

const NODE_UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";
/// What a BMC may report for a system: the node's UUID, byte-swapped, in capitals, another
/// machine's, a placeholder.
const UUIDS: [&str; 5] = [
    NODE_UUID,
    "1e0c3b7f-0000-0040-8000-000000000001",
    "7F3B0C1E-0000-4000-8000-000000000001",
    "7f3b0c1e-0000-4000-8000-000000000002",
    "03000200-0400-0500-0006-000700080009",
];
const INSTANCES: [&str; 3] = ["p1/1", "p1/2", "p2/1"];
/// A status larger than this is not one the apiserver should have to carry for a fence.
const MAX_STATUS_BYTES: usize = 16 * 1024;

/// The status as the apiserver stores it, and its size in bytes.
fn persisted(status: &CoronerRemediationStatus) -> (CoronerRemediationStatus, usize) {
    match serde_json::to_vec(status).and_then(|bytes| Ok((serde_json::from_slice(&bytes)?, bytes.len()))) {
        Ok(stored) => stored,
        Err(error) => panic!("a status does not survive the round trip: {error}"),
    }
}

fn json(status: &CoronerRemediationStatus) -> serde_json::Value {
    serde_json::to_value(status).unwrap_or_default()
}

// Generators, one per type ----------------------------------------------------------------------------

fn arb_spec() -> impl Strategy<Value = CoronerRemediationSpec> {
    (any::<bool>(), any::<bool>(), 1u64..=4, 100u64..=2_000, 1u64..=60, 1u32..=3, 0u64..=10, 1u64..=400, any::<bool>())
        .prop_map(|(off, deletion, settle, poll_ms, extra, count, interval, release, ready_false)| {
            CoronerRemediationSpec {
                action: if off { FenceAction::Off } else { FenceAction::Reboot },
                remediation_strategy: if deletion {
                    RemediationStrategy::ResourceDeletion
                } else {
                    RemediationStrategy::OutOfServiceTaint
                },
                // The CRD's rules: 0 < settle ≤ 10m, pollInterval ≥ 100ms, powerOffTimeout > settle.
                settle: Duration::from_secs(settle),
                poll_interval: Duration::from_millis(poll_ms),
                power_off_timeout: Duration::from_secs(settle + extra),
                retry: Retry { count, interval: Duration::from_secs(interval) },
                release_timeout: Duration::from_secs(release),
                remediate_ready_false: ready_false,
                ..CoronerRemediationSpec::default()
            }
        })
}

fn arb_reason(disposition: Disposition) -> impl Strategy<Value = Reason> {
    let reasons: Vec<Reason> = Reason::ALL.iter().copied().filter(|r| r.disposition() == disposition).collect();
    proptest::sample::select(reasons)
}

/// What the Redfish parser can hand out: the known states, and anything else as `Other`.
fn arb_power_state() -> impl Strategy<Value = PowerState> {
    prop_oneof![
        6 => Just(PowerState::Off),
        4 => Just(PowerState::On),
        1 => Just(PowerState::PoweringOff),
        1 => Just(PowerState::PoweringOn),
        1 => proptest::sample::select(vec!["Paused", "Standby", "", "off", "unknown"]).prop_map(PowerState::parse),
    ]
}

fn arb_bmc_error() -> impl Strategy<Value = BmcError> {
    prop_oneof![
        3 => message().prop_map(BmcError::Unreachable),
        1 => message().prop_map(BmcError::Tls),
        1 => prop_oneof![Just(401u16), Just(403)].prop_map(BmcError::Unauthorized),
        2 => (prop_oneof![Just(400u16), Just(404), Just(408), Just(429), Just(500), Just(503)]).prop_map(|status| {
            BmcError::Status { method: "GET", path: "/redfish/v1/Systems/1".into(), status, detail: String::new() }
        }),
        1 => message().prop_map(|problem| BmcError::Protocol { path: "/redfish/v1/Systems/1".into(), problem }),
        1 => Just(BmcError::CrossHostRedirect("https://elsewhere:443".into())),
    ]
}

fn message() -> impl Strategy<Value = String> {
    proptest::sample::select(vec!["", "connection refused", "no answer before the timeout"]).prop_map(str::to_owned)
}

fn arb_failure() -> impl Strategy<Value = BmcFailure> {
    arb_bmc_error().prop_map(|error| BmcFailure::from(&error))
}

fn arb_uuid() -> impl Strategy<Value = String> {
    prop_oneof![8 => Just(NODE_UUID.to_owned()), 1 => proptest::sample::select(UUIDS.to_vec()).prop_map(str::to_owned)]
}

fn arb_reading() -> impl Strategy<Value = Result<PowerReading, BmcFailure>> {
    prop_oneof![
        8 => (arb_uuid(), arb_power_state()).prop_map(|(uuid, power_state)| Ok(PowerReading {
            uuid,
            power_state,
            sampled: Sampled::default(),
            through: DeviceMark::default(),
        })),
        1 => arb_failure().prop_map(Err),
    ]
}

fn arb_identity() -> impl Strategy<Value = Result<IdentityFound, IdentityProblem>> {
    let found = (arb_uuid(), any::<bool>(), proptest::option::weighted(0.1, arb_uuid()), 1u8..=2, any::<bool>())
        .prop_map(|(uuid, tls_verified, claim, system, off)| IdentityFound {
            binding: "worker-1".into(),
            endpoint: "https://bmc:443/redfish/v1".into(),
            tls_verified: Some(tls_verified || system == 1),
            system: SystemReading {
                id: system.to_string(),
                path: format!("/redfish/v1/Systems/{system}"),
                uuid,
                power_state: if off { PowerState::Off } else { PowerState::On },
                reset_target: None,
                aliases: Vec::new(),
            },
            claims: claim.into_iter().map(|uuid| Claim { owner: "Node worker-2".into(), uuid }).collect(),
            through: DeviceMark::default(),
            sampled: Sampled::default(),
            origin: "https://bmc:443".into(),
        });
    prop_oneof![
        8 => found.prop_map(Ok),
        1 => (arb_reason(Disposition::Final), message())
            .prop_map(|(reason, message)| Err(IdentityProblem::Binding { reason, message, seen_on: None })),
        2 => arb_failure().prop_map(|failure| Err(IdentityProblem::Bmc(failure))),
    ]
}

/// The gates' verdict; `Admit` records the node as the step sees it.
#[derive(Clone, Debug)]
enum VerdictInput {
    Admit,
    Wait(Reason, String),
    Refuse(Reason, String),
}

fn arb_verdict() -> impl Strategy<Value = VerdictInput> {
    prop_oneof![
        6 => Just(VerdictInput::Admit),
        2 => (arb_reason(Disposition::Waiting), message()).prop_map(|(r, m)| VerdictInput::Wait(r, m)),
        1 => (arb_reason(Disposition::Final), message()).prop_map(|(r, m)| VerdictInput::Refuse(r, m)),
    ]
}

/// The checked release: done (at the step's time), or why not.
fn arb_release() -> impl Strategy<Value = Result<(bool, Option<u32>), ReleaseRefusal>> {
    let node = || "worker-1".to_owned();
    prop_oneof![
        6 => (any::<bool>(), proptest::option::of(0u32..5)).prop_map(Ok),
        1 => Just(Err(ReleaseRefusal::Node(NodeRefusal::Awake { node: node(), ready: "True".into() }))),
        1 => Just(Err(ReleaseRefusal::Node(NodeRefusal::LeaseRenewed { node: node(), renewed: base() }))),
        1 => Just(Err(ReleaseRefusal::ProofExpired)),
        1 => message().prop_map(|why| Err(ReleaseRefusal::WriteRefused(why))),
        1 => Just(Err(ReleaseRefusal::DidNotTakeEffect { node: node(), renewed: base() })),
    ]
}

fn arb_workloads() -> impl Strategy<Value = Workloads> {
    prop_oneof![
        2 => Just(Workloads::default()),
        1 => (0u32..3, 0u32..3).prop_map(|(blocking_pods, volume_attachments)| Workloads { blocking_pods, volume_attachments }),
    ]
}

/// The node as a step sees it: mostly the silent node that was admitted.
fn arb_node() -> impl Strategy<Value = NodeSnapshot> {
    let ready = prop_oneof![
        6 => Just(Some("Unknown".to_owned())),
        1 => Just(Some("True".to_owned())),
        1 => Just(Some("False".to_owned())),
        1 => Just(None),
    ];
    let lease = prop_oneof![4 => Just(Some(-600i64)), 1 => Just(None), 1 => (-600i64..600).prop_map(Some)];
    (
        ready,
        prop_oneof![3 => Just("boot-1"), 1 => Just("boot-2")],
        lease,
        any::<bool>(),
        proptest::bool::weighted(0.1),
        prop_oneof![9 => Just("node-uid"), 1 => Just("node-uid-2")],
    )
        .prop_map(|(ready, boot, lease, out_of_service, released, uid)| NodeSnapshot {
            name: "worker-1".into(),
            uid: uid.into(),
            ready,
            boot_id: boot.into(),
            system_uuid: NODE_UUID.into(),
            lease_present: lease.is_some(),
            lease_renew_time: lease.map(|secs| base() + SignedDuration::from_secs(secs)),
            out_of_service: out_of_service.then(|| "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute".into()),
            released_at: released.then(base),
            ..NodeSnapshot::default()
        })
}

fn base() -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000)
}

/// Something outside the fence steps, decided by the standalone functions as the loop calls them.
#[derive(Clone, Copy, Debug)]
enum Event {
    TimedOutByNhc,
    NodeGone,
    LeaderOnTarget,
}

/// Which observation an unrestricted feed hands over, whatever the plan says.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Nothing,
    Wait,
    Admission,
    Identity,
    Power,
    Answer(ResetType),
    Release,
    DeletionCheck,
    Workloads,
}

#[derive(Clone, Debug)]
struct Step {
    /// Microseconds since the previous step (the apiserver keeps microseconds).
    dt: i64,
    /// Which of the case's node snapshots the step sees (0 mostly), which process runs it.
    node: usize,
    instance: usize,
    hold: bool,
    event: Option<Event>,
    kind: Kind,
    /// Whether the answer of a reset decided in this step is recorded (else the process died), and
    /// how long after the decision.
    answered: bool,
    answer_dt: i64,
    verdict: VerdictInput,
    identity: Result<IdentityFound, IdentityProblem>,
    reading: Result<PowerReading, BmcFailure>,
    reset_result: Result<u16, BmcFailure>,
    release: Result<(bool, Option<u32>), ReleaseRefusal>,
    workloads: Workloads,
}

fn arb_step() -> impl Strategy<Value = Step> {
    // Mostly a dense run (a pause within the request bound), sometimes far apart.
    let dt = prop_oneof![9 => 1_000i64..1_000_000, 1 => 1_000_000i64..400_000_000];
    let node = prop_oneof![8 => Just(0usize), 1 => 1usize..3];
    let instance = prop_oneof![20 => Just(0usize), 1 => 1usize..3];
    let event = proptest::option::weighted(
        0.03,
        prop_oneof![Just(Event::TimedOutByNhc), Just(Event::NodeGone), Just(Event::LeaderOnTarget)],
    );
    let kind = proptest::sample::select(vec![
        Kind::Nothing,
        Kind::Wait,
        Kind::Admission,
        Kind::Identity,
        Kind::Power,
        Kind::Answer(ResetType::ForceOff),
        Kind::Answer(ResetType::On),
        Kind::Release,
        Kind::DeletionCheck,
        Kind::Workloads,
    ]);
    let reset_result = prop_oneof![4 => prop_oneof![Just(200u16), Just(202), Just(204)].prop_map(Ok), 1 => arb_failure().prop_map(Err)];
    (
        (
            dt,
            node,
            instance,
            proptest::bool::weighted(0.1),
            event,
            kind,
            proptest::bool::weighted(0.9),
            0i64..2_000_000,
        ),
        (arb_verdict(), arb_identity(), arb_reading(), reset_result, arb_release(), arb_workloads()),
    )
        .prop_map(
            |(
                (dt, node, instance, hold, event, kind, answered, answer_dt),
                (verdict, identity, reading, reset_result, release, workloads),
            )| Step {
                dt,
                node,
                instance,
                hold,
                event,
                kind,
                answered,
                answer_dt,
                verdict,
                identity,
                reading,
                reset_result,
                release,
                workloads,
            },
        )
}

// The run and what it must keep ------------------------------------------------------------------------

/// A power observation that was fed: when, by which process, and whether it read Off.
struct Fed {
    at: Timestamp,
    instance: &'static str,
    off: bool,
}

struct Run<'a> {
    spec: &'a CoronerRemediationSpec,
    /// Why a gate holds power actions, when a step says one does.
    hold: &'a (Reason, String),
    nodes: &'a [NodeSnapshot],
    /// As the last decision returned it (the round-trip property compares it with its persisted form).
    status: CoronerRemediationStatus,
    /// As the apiserver stored it.
    stored: CoronerRemediationStatus,
    /// What the process running the steps remembers; another process starts with nothing.
    memory: Memory,
    memory_of: usize,
    now: Timestamp,
    fed: Vec<Fed>,
    resets_decided: Vec<Timestamp>,
}

fn succeeded_of(status: &CoronerRemediationStatus) -> Option<String> {
    conditions::status_of(&status.conditions, contract::SUCCEEDED).map(str::to_owned)
}

/// The proof's first and last readings are at least settle apart (measured here, not by `proven`).
fn spans_settle(proof: &OffRun, spec: &CoronerRemediationSpec) -> bool {
    match (proof.first.first(), proof.latest()) {
        (Some(first), Some(last)) => {
            let span = last.at.0.as_microsecond() - first.at.0.as_microsecond();
            span >= i64::try_from(spec.settle.get().as_micros()).unwrap_or(i64::MAX)
        }
        _ => false,
    }
}

fn proof_of(status: &CoronerRemediationStatus) -> Option<&OffRun> {
    status.evidence.as_ref()?.power_off.as_ref()?.proof.as_ref()
}

const TIMING: Timing = Timing { request_timeout: std::time::Duration::from_secs(5), read_retries: 1 };

impl<'a> Run<'a> {
    /// The process's monotonic clock: the time since the run began (every process started then).
    fn mono(&self) -> Mono {
        std::time::Duration::from_micros(u64::try_from(self.now.duration_since(base()).as_micros()).unwrap_or(0))
    }

    fn ctx<'b>(&self, step: &Step, node: &'b NodeSnapshot, memory: &'b Memory) -> Context<'b>
    where
        'a: 'b,
    {
        Context {
            now: self.now,
            mono: self.mono(),
            instance: INSTANCES[step.instance],
            node,
            hold_power_action: step.hold.then_some(self.hold),
            memory,
            timing: TIMING,
            levels: None,
            sabotage: crate::sabotage::Sabotage::None,
        }
    }

    /// Another process runs this step: it knows nothing the previous one remembered.
    fn process(&mut self, step: &Step) {
        if step.instance != self.memory_of {
            self.memory = Memory::default();
            self.memory_of = step.instance;
        }
    }

    fn observation(&self, kind: Kind, step: &Step, node: &NodeSnapshot) -> Observation {
        match kind {
            Kind::Nothing => Observation::Nothing,
            Kind::Wait => Observation::Wait,
            Kind::Admission => Observation::Admission(match &step.verdict {
                VerdictInput::Admit => Verdict::Admit(Box::new(node.evidence(self.now))),
                VerdictInput::Wait(reason, message) => {
                    Verdict::Wait { reason: *reason, message: message.clone(), recheck: None }
                }
                VerdictInput::Refuse(reason, message) => Verdict::Refuse { reason: *reason, message: message.clone() },
            }),
            Kind::Identity => Observation::Identity(step.identity.clone().map(|found| IdentityFound {
                sampled: Sampled { requested: self.mono(), answered: self.mono() },
                ..found
            })),
            Kind::Power => Observation::Power(step.reading.clone().map(|reading| PowerReading {
                sampled: Sampled { requested: self.mono(), answered: self.mono() },
                ..reading
            })),
            Kind::Answer(action) => Observation::ResetAnswered { action, result: step.reset_result.clone() },
            Kind::Release => Observation::Release(step.release.clone().map(|(taint_owned, pods_deleted)| Released {
                at: self.now,
                node_ready: node.ready.clone().unwrap_or_default(),
                lease_renew_time: node.lease_renew_time,
                taint_owned,
                took_over_from: None,
                pods_deleted,
                interrupted: None,
            })),
            Kind::DeletionCheck => Observation::DeletionMayBegin(step.release.clone().map(|_| Released {
                at: self.now,
                node_ready: node.ready.clone().unwrap_or_default(),
                lease_renew_time: node.lease_renew_time,
                taint_owned: false,
                took_over_from: None,
                pods_deleted: None,
                interrupted: None,
            })),
            Kind::Workloads => Observation::Workloads(step.workloads),
        }
    }

    /// The kind of observation the loop gathers for `plan`.
    fn planned(plan: &Plan) -> Kind {
        match plan {
            Plan::Wait(_) => Kind::Wait,
            Plan::Admit => Kind::Admission,
            Plan::VerifyIdentity => Kind::Identity,
            Plan::ReadPower { .. } | Plan::FinishDeletion { .. } => Kind::Power,
            Plan::Release | Plan::RecordRelease => Kind::Release,
            Plan::BeginDeletion => Kind::DeletionCheck,
            Plan::CheckWorkloads => Kind::Workloads,
            // These properties give the fence no PDU levels (it never plans their readings) and no
            // attestation (it never plans a look: the look's tests are in fence/tests.rs).
            Plan::Idle | Plan::ReadOutlets { .. } | Plan::AskBmcAfterOutlets | Plan::Look => Kind::Nothing,
        }
    }

    /// One step: `next` on the status as the apiserver hands it back, checked; the status moves on.
    fn step(&mut self, observation: Observation, step: &Step, node: &NodeSnapshot) -> Result<Decision, TestCaseError> {
        self.process(step);
        let memory = self.memory.clone();
        let ctx = self.ctx(step, node, &memory);
        let old = self.stored.clone();
        let decision = next(self.spec, &old, observation.clone(), ctx);
        // The same decision whether the status came from the process or from the apiserver.
        let from_memory = next(self.spec, &self.status, observation.clone(), ctx);
        prop_assert_eq!(json(&from_memory.status), json(&decision.status));
        prop_assert_eq!(
            (&from_memory.reset, &from_memory.requeue, &from_memory.notices),
            (&decision.reset, &decision.requeue, &decision.notices)
        );
        let fed_power = match &observation {
            Observation::Power(reading) => Some(reading.as_ref().is_ok_and(|r| r.power_state == PowerState::Off)),
            Observation::Identity(found) => Some(found.as_ref().is_ok_and(|f| f.system.power_state == PowerState::Off)),
            _ => None,
        };
        if let Some(off) = fed_power {
            self.fed.push(Fed { at: self.now, instance: INSTANCES[step.instance], off });
        }
        if decision.reset.is_some() {
            self.resets_decided.push(self.now);
        }
        self.keeps(&old, &decision, &observation, ctx)?;
        self.memory = decision.memory.clone();
        self.set(decision.status.clone())?;
        Ok(decision)
    }

    fn set(&mut self, status: CoronerRemediationStatus) -> Result<(), TestCaseError> {
        let (stored, size) = persisted(&status);
        prop_assert!(size <= MAX_STATUS_BYTES, "status of {} bytes", size);
        (self.status, self.stored) = (status, stored);
        Ok(())
    }

    /// A decision outside the fence steps (the loop calls these, and only these, instead).
    fn standalone(&mut self, decision: Option<Decision>) -> Result<(), TestCaseError> {
        if let Some(decision) = decision {
            prop_assert_eq!(decision.reset, None);
            Self::keeps_succeeded_and_endings(&self.stored, &decision)?;
            self.set(decision.status)?;
        }
        Ok(())
    }

    fn keeps_succeeded_and_endings(old: &CoronerRemediationStatus, decision: &Decision) -> Result<(), TestCaseError> {
        let (before, after) = (succeeded_of(old), succeeded_of(&decision.status));
        if matches!(before.as_deref(), Some(conditions::TRUE | conditions::FALSE)) {
            prop_assert_eq!(&after, &before, "Succeeded left {:?}", before);
        }
        let phase = phase_of(old);
        if phase.is_terminal() {
            prop_assert_eq!(phase_of(&decision.status), phase, "a terminal phase was left");
            prop_assert_eq!(decision.reset, None, "a terminal phase sent a reset");
        }
        Ok(())
    }

    /// What `next` alone must keep, for the step from `old` to `decision`.
    fn keeps(
        &self,
        old: &CoronerRemediationStatus,
        decision: &Decision,
        observation: &Observation,
        ctx: Context<'_>,
    ) -> Result<(), TestCaseError> {
        let new = &decision.status;
        Self::keeps_succeeded_and_endings(old, decision)?;
        // A reset goes out only as the persisted, unanswered intent of this process, decided now,
        // right after a fresh reading of the verified system that asks for it.
        if let Some(reset) = decision.reset {
            let intent = new.progress.as_ref().and_then(|p| p.intent.as_ref());
            prop_assert!(intent.is_some(), "{:?} without an intent", reset);
            let intent = intent.unwrap();
            prop_assert_eq!(intent.action.as_str(), reset.as_str());
            prop_assert_eq!(&intent.result, &None);
            prop_assert_eq!((intent.instance.as_str(), intent.decided_at.0), (ctx.instance, ctx.now));
            // The identity read is a fresh reading too (the fence's first).
            let reading = match observation {
                Observation::Power(Ok(reading)) => reading.clone(),
                Observation::Identity(Ok(found)) => PowerReading::of(&found.system, found.sampled, found.through),
                _ => return Err(TestCaseError::fail(format!("{reset:?} without a fresh reading: {observation:?}"))),
            };
            let verified = new.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.bmc_uuid.clone());
            prop_assert_eq!(
                crate::identity::parse(&reading.uuid),
                verified.as_deref().and_then(crate::identity::parse),
                "a reset to a system that is not the verified one"
            );
            match reset {
                ResetType::ForceOff => {
                    prop_assert!(reading.power_state != PowerState::Off);
                    prop_assert!(ctx.hold_power_action.is_none(), "ForceOff while a gate holds power actions");
                    prop_assert_eq!(phase_of(new), Phase::ConfirmingOff);
                }
                ResetType::On => {
                    prop_assert!(reading.power_state != PowerState::On);
                    prop_assert_eq!(phase_of(new), Phase::PoweringOn);
                    let succeeded = succeeded_of(new);
                    prop_assert_eq!(succeeded.as_deref(), Some(conditions::TRUE));
                }
            }
        }
        // Releasing needs a proof of this process: an unbroken run of Off readings it was fed,
        // spanning settle, with no reset decided inside it.
        if phase_of(new) == Phase::Releasing && phase_of(old) != Phase::Releasing {
            let proof = proof_of(new);
            prop_assert!(proof.is_some(), "Releasing without a proof");
            let proof = proof.unwrap();
            prop_assert!(spans_settle(proof, self.spec), "a proof shorter than settle: {:?}", proof);
            prop_assert_eq!(proof.instance.as_str(), ctx.instance);
            let (first, last) = (proof.first[0].at.0, proof.latest().map_or(proof.first[0].at.0, |r| r.at.0));
            for reading in proof.first.iter().chain(&proof.last) {
                prop_assert_eq!(reading.power_state.as_str(), "Off");
                prop_assert!(
                    self.fed.iter().any(|f| f.at == reading.at.0 && f.off && f.instance == ctx.instance),
                    "a proof reading at {} that was never fed",
                    reading.at.0
                );
            }
            for fed in self.fed.iter().filter(|f| f.at >= first && f.at <= last) {
                prop_assert!(fed.off && fed.instance == ctx.instance, "the run was broken at {}", fed.at);
            }
            prop_assert!(!self.resets_decided.iter().any(|at| *at >= first && *at <= last), "a reset inside the run");
        }
        // The release is accepted only from Releasing with a proof spanning settle.
        let released = |s: &CoronerRemediationStatus| s.evidence.as_ref().is_some_and(|e| e.release.is_some());
        // R1: so is the record of a deletion begun; a release may also be that record, settled
        // when the fence ends after it.
        let begun = |s: &CoronerRemediationStatus| s.progress.as_ref().and_then(|p| p.release_begun.clone());
        if begun(new).is_some() && begun(old).is_none() {
            prop_assert_eq!(phase_of(old), Phase::Releasing);
            prop_assert!(proof_of(old).is_some_and(|p| spans_settle(p, self.spec)));
        }
        if released(new) && !released(old) {
            let release = new.evidence.as_ref().and_then(|e| e.release.clone());
            let settled = begun(old).is_some_and(|b| release.is_some_and(|r| r.released_at == b.released_at));
            if !settled {
                prop_assert_eq!(phase_of(old), Phase::Releasing);
                prop_assert!(proof_of(old).is_some_and(|p| spans_settle(p, self.spec)));
            }
        }
        // Bounded: the readings kept, and the whole status.
        if let Some(run) = new.progress.as_ref().and_then(|p| p.off_run.as_ref()) {
            prop_assert!(run.first.len() <= 3 && run.last.len() <= 5);
        }
        Ok(())
    }

    /// Feeds `steps`: the observation the plan asks for (`conforming`) or the step's own kind.
    fn feed(&mut self, steps: &[Step], conforming: bool) -> Result<(), TestCaseError> {
        for step in steps {
            self.now += SignedDuration::from_micros(step.dt);
            let node = &self.nodes[step.node];
            match step.event {
                Some(Event::TimedOutByNhc) => self.standalone(timed_out(&self.stored, self.now))?,
                Some(Event::NodeGone) => {
                    self.standalone(node_missing(&self.stored, &node.name, self.now))?;
                }
                Some(Event::LeaderOnTarget) if !phase_of(&self.status).is_terminal() => {
                    self.standalone(Some(leader_on_target(&self.stored, &node.name, self.now)))?;
                }
                Some(Event::LeaderOnTarget) => {}
                None => {
                    self.process(step);
                    let old = self.stored.clone();
                    let memory = self.memory.clone();
                    let plan = plan(self.spec, &old, self.ctx(step, node, &memory));
                    // Only this process's own proof, spanning settle and still fresh, lets the plan
                    // release.
                    if plan == Plan::Release {
                        let ours = |p: &OffRun| p.instance == INSTANCES[step.instance] && spans_settle(p, self.spec);
                        prop_assert!(
                            proof_of(&old).is_some_and(ours) && self.memory.proof.is_some(),
                            "Release planned without a proof of this process"
                        );
                        let deadline = proof_deadline(self.spec, &self.memory, TIMING);
                        prop_assert!(deadline.is_some_and(|d| self.mono() < d), "Release planned on a stale proof");
                    }
                    let kind = if conforming { Self::planned(&plan) } else { step.kind };
                    let decision = self.step(self.observation(kind, step, node), step, node)?;
                    // The loop sends the reset and records its answer, unless the process dies first.
                    if let Some(action) = decision.reset
                        && step.answered
                    {
                        self.now += SignedDuration::from_micros(step.answer_dt);
                        let answer = Observation::ResetAnswered { action, result: step.reset_result.clone() };
                        let unheld = Step { hold: false, ..step.clone() };
                        self.step(answer, &unheld, node)?;
                    }
                    // A wait ends when the controller's requeue comes due.
                    if let Plan::Wait(wait) = plan {
                        self.now += SignedDuration::try_from(wait).unwrap_or_default();
                    }
                }
            }
            if conforming {
                // P7: one ForceOff per attempt, and another only after the one before it failed.
                let resets = self.status.evidence.as_ref().and_then(|e| e.power_off.as_ref()).map(|p| &p.resets);
                for pair in resets.into_iter().flatten().collect::<Vec<_>>().windows(2) {
                    let accepted = pair[0].result.starts_with("HTTP 2") || pair[0].result.starts_with("accepted");
                    prop_assert!(
                        pair[0].attempt != pair[1].attempt || !accepted,
                        "a ForceOff sent again after an accepted one in attempt {}",
                        pair[1].attempt
                    );
                }
                for attempt in 1..=self.spec.retry.count {
                    let sent = resets.into_iter().flatten().filter(|r| r.attempt == attempt).count();
                    prop_assert!(sent <= FORCE_OFFS_PER_ATTEMPT, "{} ForceOffs in attempt {}", sent, attempt);
                }
            }
        }
        Ok(())
    }
}

/// Why a gate holds power actions, when a step says one does.
const HOLD: (Reason, &str) = (Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed lately");

impl<'a> Run<'a> {
    /// A remediation NHC just created, started (as the loop starts it) at [`base`].
    fn new(spec: &'a CoronerRemediationSpec, hold: &'a (Reason, String), nodes: &'a [NodeSnapshot]) -> Self {
        let status = start(&CoronerRemediationStatus::default(), "worker-1", base()).map(|d| d.status);
        let status = status.unwrap_or_default();
        let (stored, _) = persisted(&status);
        Run {
            spec,
            hold,
            nodes,
            status,
            stored,
            memory: Memory::default(),
            memory_of: 0,
            now: base(),
            fed: Vec::new(),
            resets_decided: Vec::new(),
        }
    }
}

fn run(
    spec: &CoronerRemediationSpec,
    nodes: &[NodeSnapshot],
    steps: &[Step],
    conforming: bool,
) -> Result<(), TestCaseError> {
    let hold = (HOLD.0, HOLD.1.to_owned());
    Run::new(spec, &hold, nodes).feed(steps, conforming)
}

fn arb_nodes() -> impl Strategy<Value = Vec<NodeSnapshot>> {
    let admitted = NodeSnapshot {
        name: "worker-1".into(),
        uid: "node-uid".into(),
        ready: Some("Unknown".into()),
        boot_id: "boot-1".into(),
        system_uuid: NODE_UUID.into(),
        lease_present: true,
        lease_renew_time: Some(base() - SignedDuration::from_secs(600)),
        ..NodeSnapshot::default()
    };
    proptest::collection::vec(arb_node(), 2).prop_map(move |others| {
        let mut nodes = vec![admitted.clone()];
        nodes.extend(others);
        nodes
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn next_keeps_its_rules_on_what_the_loop_feeds_it(
        spec in arb_spec(),
        nodes in arb_nodes(),
        steps in proptest::collection::vec(arb_step(), 1..48),
    ) {
        run(&spec, &nodes, &steps, true)?;
    }

    #[test]
    fn next_keeps_its_rules_on_anything_in_any_phase(
        spec in arb_spec(),
        nodes in arb_nodes(),
        steps in proptest::collection::vec(arb_step(), 1..48),
    ) {
        run(&spec, &nodes, &steps, false)?;
    }
}

/// Not a property: the loop-shaped feed must reach every phase, or the properties above say little.
#[test]
fn the_loop_shaped_feed_reaches_every_phase() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (arb_spec(), arb_nodes(), proptest::collection::vec(arb_step(), 40..48));
    let mut seen = std::collections::BTreeSet::new();
    // Enough sequences that a Reboot reaches its power-on (most end earlier, on a random refusal).
    for _ in 0..320 {
        let Ok(tree) = strategy.new_tree(&mut runner) else { continue };
        let (spec, nodes, steps) = tree.current();
        let hold = (HOLD.0, HOLD.1.to_owned());
        let mut run = Run::new(&spec, &hold, &nodes);
        for step in &steps {
            let _ = run.feed(std::slice::from_ref(step), true);
            seen.insert(phase_of(&run.status).as_str());
        }
    }
    for phase in [
        "VerifyingIdentity",
        "PoweringOff",
        "ConfirmingOff",
        "WaitingForRelease",
        "PoweringOn",
        "WaitingForNode",
        "Done",
        "Failed",
    ] {
        assert!(seen.contains(phase), "no generated sequence reached {phase}: {seen:?}");
    }
}
