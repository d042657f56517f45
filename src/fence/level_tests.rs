//! The fence at a PDU level (docs/safety.md L1–L7), transition by transition.

use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::{
    api::{MappingProof, PduLevel, ReleaseKind},
    bmc::{PowerState, SystemReading},
    levels::OutletOutcome,
    pdu::{OutletReading, OutletState, PduError},
};

const NODE_UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";
const ME: &str = "instance-b";
const TIMING: Timing = Timing { request_timeout: StdDuration::from_secs(5), read_retries: 1 };

fn t(millis: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000) + SignedDuration::from_millis(millis)
}

fn mono(millis: i64) -> Mono {
    StdDuration::from_millis(u64::try_from(millis + 1_000_000).unwrap())
}

fn node() -> NodeSnapshot {
    NodeSnapshot {
        name: "worker-1".into(),
        uid: "node-uid".into(),
        ready: Some("Unknown".into()),
        boot_id: "boot-1".into(),
        system_uuid: NODE_UUID.into(),
        lease_present: true,
        lease_renew_time: Some(t(-100_000)),
        ..NodeSnapshot::default()
    }
}

fn level(statement: bool, outlets: usize) -> PduLevel {
    let outlets: Vec<_> = (1..=outlets)
        .map(|n| {
            serde_json::json!({
                "snmp": {"address": "pdu-a", "outlet": n},
                "credentialsSecretRef": {"name": "pdu"},
            })
        })
        .collect();
    let mut level: PduLevel = serde_json::from_value(serde_json::json!({ "outlets": outlets })).unwrap();
    level.mapping_proof = statement.then_some(MappingProof::OperatorStatement);
    level
}

/// One step at `millis`, with the binding's `levels`.
struct Fence {
    spec: CoronerRemediationSpec,
    status: CoronerRemediationStatus,
    memory: Memory,
    levels: Vec<PduLevel>,
    confirmed: Vec<Option<i64>>,
    node: NodeSnapshot,
    /// A gate holding the power action.
    hold: Option<(Reason, String)>,
}

impl Fence {
    fn new(spec: CoronerRemediationSpec, levels: Vec<PduLevel>) -> Self {
        let status = CoronerRemediationStatus::default();
        Self { spec, status, memory: Memory::default(), levels, confirmed: Vec::new(), node: node(), hold: None }
    }

    fn ctx(&self, millis: i64) -> Context<'_> {
        Context {
            now: t(millis),
            mono: mono(millis),
            instance: ME,
            node: &self.node,
            hold_power_action: self.hold.as_ref(),
            memory: &self.memory,
            timing: TIMING,
            levels: Some(LevelsView {
                binding: "worker-1",
                generation: Some(4),
                levels: &self.levels,
                confirmed: &self.confirmed,
            }),
            sabotage: crate::sabotage::Sabotage::None,
        }
    }

    fn step(&mut self, millis: i64, observation: Observation) -> Decision {
        // The status as the API server hands it back.
        let stored: CoronerRemediationStatus =
            serde_json::from_value(serde_json::to_value(&self.status).unwrap()).unwrap();
        let decision = next(&self.spec, &stored, observation, self.ctx(millis));
        self.status = decision.status.clone();
        self.memory = decision.memory.clone();
        decision
    }

    fn plan(&self, millis: i64) -> Plan {
        plan(&self.spec, &self.status, self.ctx(millis))
    }

    fn phase(&self) -> Phase {
        phase_of(&self.status)
    }

    fn reason(&self) -> String {
        conditions::find(&self.status.conditions, contract::SUCCEEDED).unwrap().reason.clone()
    }

    fn message(&self) -> String {
        conditions::find(&self.status.conditions, contract::SUCCEEDED).unwrap().message.clone()
    }

    /// Admitted before 0; the BMC unreachable in every identity attempt, the last at 100 ms.
    fn bmc_silent(&mut self) -> Decision {
        let count = i64::from(self.spec.retry.count);
        let apart = 10_000;
        let start = -apart * count;
        let admitted = Observation::Admission(Verdict::Admit(Box::new(self.node.evidence(t(start)))));
        self.step(start, admitted);
        let mut decision = None;
        for attempt in 1..=count {
            let failure = BmcFailure {
                transient: true,
                reason: Reason::BmcUnreachable,
                message: "BMC unreachable: timed out".into(),
            };
            decision = Some(
                self.step(start + apart * attempt + 100, Observation::Identity(Err(IdentityProblem::Bmc(failure)))),
            );
        }
        decision.unwrap()
    }

    fn outlets(&mut self, millis: i64, states: &[OutletState]) -> Decision {
        let outcomes = states
            .iter()
            .enumerate()
            .map(|(i, state)| OutletOutcome {
                outlet: format!("snmp:pdu-a:161|{}", i + 1),
                floor_watts: 5.0,
                reading: Ok(OutletReading { state: state.clone(), pending: false, watts: None, metered: false }),
            })
            .collect();
        let sampled = Sampled { requested: mono(millis), answered: mono(millis) };
        let through = DeviceMark { generation: 4, serial: 9 };
        self.step(millis, Observation::Outlets(Ok(LevelReading { level: 2, outcomes, sampled, through })))
    }

    fn bmc_after(&mut self, millis: i64, answer: Result<PowerState, BmcFailure>) -> Decision {
        let found = answer.map_err(IdentityProblem::Bmc).map(|power| IdentityFound {
            binding: "worker-1".into(),
            endpoint: "https://bmc".into(),
            tls_verified: Some(true),
            system: SystemReading {
                id: "1".into(),
                path: "/redfish/v1/Systems/1".into(),
                uuid: NODE_UUID.into(),
                power_state: power,
                reset_target: None,
                aliases: Vec::new(),
            },
            claims: Vec::new(),
            through: DeviceMark::default(),
            sampled: Sampled::default(),
            origin: "https://bmc".into(),
        });
        self.step(millis, Observation::BmcAfterOutlets(AskedAfterOutlets::Answered(Box::new(found))))
    }

    /// One step at `millis` with the binding at `generation` in the store (edited since, when not 4).
    fn step_at_generation(&self, millis: i64, generation: i64, observation: Observation) -> Decision {
        let mut ctx = self.ctx(millis);
        let view = ctx.levels.map(|v| LevelsView { generation: Some(generation), ..v });
        ctx.levels = view;
        let stored: CoronerRemediationStatus =
            serde_json::from_value(serde_json::to_value(&self.status).unwrap()).unwrap();
        next(&self.spec, &stored, observation, ctx)
    }

    /// L7: a fresh connection to the BMC's address heard nothing.
    fn bmc_silent_after(&mut self, millis: i64) -> Decision {
        self.step(millis, Observation::BmcAfterOutlets(AskedAfterOutlets::Silent))
    }
}

fn off_once() -> CoronerRemediationSpec {
    CoronerRemediationSpec {
        action: FenceAction::Off,
        retry: crate::api::Retry { count: 1, ..crate::api::Retry::default() },
        ..CoronerRemediationSpec::default()
    }
}

use OutletState::{Off, On};

fn unreachable() -> BmcFailure {
    BmcFailure { transient: true, reason: Reason::BmcUnreachable, message: "BMC unreachable: timed out".into() }
}

#[test]
fn a_bmc_that_stayed_silent_hands_the_fence_to_the_next_pdu_level() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    let decision = fence.bmc_silent();
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    assert_eq!(fence.reason(), Reason::PoweringOffOutlets.as_str());
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(2));
    assert!(fence.message().contains("level 1 (the BMC) could not prove Off (BmcUnreachable"), "{}", fence.message());
    // The statement is a Warning every time it is relied on.
    assert!(decision.notices.iter().any(|n| n.reason == OUTLET_MAPPING_UNPROVEN && n.warning));
    assert_eq!(fence.plan(100), Plan::ReadOutlets { level: 2 });
}

#[test]
fn an_attempt_that_ends_while_a_gate_holds_its_power_action_ends_on_the_hold_and_hands_no_level_on() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    fence.step(-20_000, Observation::Admission(Verdict::Admit(Box::new(node().evidence(t(-20_000))))));
    fence.hold = Some((Reason::NodeLeaseFresh, "coroner saw the node's Lease renewed 2s ago".into()));
    let identity = |power| {
        Observation::Identity(Ok(IdentityFound {
            binding: "worker-1".into(),
            endpoint: "https://bmc".into(),
            tls_verified: Some(true),
            system: SystemReading {
                id: "1".into(),
                path: "/redfish/v1/Systems/1".into(),
                uuid: NODE_UUID.into(),
                power_state: power,
                reset_target: None,
                aliases: Vec::new(),
            },
            claims: Vec::new(),
            through: DeviceMark::default(),
            sampled: Sampled::default(),
            origin: "https://bmc".into(),
        }))
    };
    let held = fence.step(-19_800, identity(PowerState::On));
    assert_eq!((fence.phase(), held.reset), (Phase::PoweringOff, None), "the gate holds the ForceOff");
    let power = |power| {
        Observation::Power(Ok(PowerReading::of(
            &SystemReading {
                id: "1".into(),
                path: "/redfish/v1/Systems/1".into(),
                uuid: NODE_UUID.into(),
                power_state: power,
                reset_target: None,
                aliases: Vec::new(),
            },
            Sampled::default(),
            DeviceMark::default(),
        )))
    };
    // The hold never lifts: the only attempt runs out on it.
    let over = fence.step(200_000, power(PowerState::On));
    assert_eq!(over.reset, None);
    assert_eq!(fence.phase(), Phase::Failed);
    assert_eq!(fence.reason(), Reason::PowerActionHeld.as_str());
    assert_eq!(fence.status.progress.as_ref().unwrap().level, None, "no level: the BMC answered, the gate held");
    assert!(fence.message().contains("renewed 2s ago"), "{}", fence.message());
}

#[test]
fn a_level_whose_mapping_nothing_confirmed_or_stated_is_not_tried() {
    let mut fence = Fence::new(off_once(), vec![level(false, 1)]);
    fence.bmc_silent();
    assert_eq!(fence.phase(), Phase::Failed);
    assert_eq!(fence.reason(), Reason::BmcUnreachable.as_str());
    assert!(fence.message().contains("level 2 not tried: nothing confirmed"), "{}", fence.message());
}

#[test]
fn a_level_the_machine_confirmed_by_observation_alone_is_not_tried_in_this_version() {
    let mut fence = Fence::new(off_once(), vec![level(false, 1)]);
    fence.confirmed = vec![Some(4)];
    fence.bmc_silent();
    assert_eq!(fence.phase(), Phase::Failed);
    assert!(fence.message().contains("no level rests on a passive confirmation"), "{}", fence.message());
    // Confirmed at another generation: the binding was edited since.
    let mut edited = Fence::new(off_once(), vec![level(false, 1)]);
    edited.confirmed = vec![Some(3)];
    edited.bmc_silent();
    assert_eq!(edited.phase(), Phase::Failed);
}

#[test]
fn an_identity_mismatch_never_moves_on_to_the_outlets() {
    let mut fence = Fence::new(off_once(), vec![level(true, 1)]);
    fence.step(0, Observation::Admission(Verdict::Admit(Box::new(node().evidence(t(0))))));
    let problem = IdentityProblem::Binding {
        reason: Reason::IdentityMismatch,
        message: "the BMC's system is another machine".into(),
        seen_on: None,
    };
    fence.step(100, Observation::Identity(Err(problem)));
    assert_eq!(fence.phase(), Phase::Failed);
    assert_eq!(fence.reason(), Reason::IdentityMismatch.as_str());
    assert!(fence.message().contains("showed its mapping wrong"), "{}", fence.message());
}

#[test]
fn a_reboot_never_ends_at_a_pdu_level() {
    let spec = CoronerRemediationSpec { action: FenceAction::Reboot, ..off_once() };
    let mut fence = Fence::new(spec, vec![level(true, 1)]);
    fence.bmc_silent();
    assert_eq!(fence.phase(), Phase::Failed);
}

#[test]
fn an_outlet_that_reads_on_is_switched_off_once_the_intent_is_persisted() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    fence.bmc_silent();
    let decision = fence.outlets(1_000, &[Off, On]);
    assert_eq!(decision.reset, Some(ResetType::ForceOff));
    let intent = fence.status.progress.as_ref().unwrap().intent.clone().unwrap();
    assert_eq!((intent.action, intent.result), (PowerAction::ForceOff, None));
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    // Answered: one Event, named for the outlets.
    let answered = fence.step(1_100, Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(0) });
    assert!(answered.notices.iter().any(|n| n.reason == "OutletsOffSent"), "{:?}", answered.notices);
    // Still on at the next reading: no second Off in the attempt (its answer came).
    assert_eq!(fence.outlets(2_000, &[Off, On]).reset, None);
}

#[test]
fn one_outlet_left_on_proves_nothing_however_long_the_other_reads_off() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    fence.bmc_silent();
    for second in 1..=5 {
        fence.outlets(second * 1_000, &[Off, On]);
        assert!(fence.memory.run.is_none());
        assert_ne!(fence.plan(second * 1_000 + 1), Plan::AskBmcAfterOutlets);
    }
}

/// Every outlet Off from 1 s to 3 s (settle 2 s): the run spans settle.
fn off_for_settle(fence: &mut Fence) {
    fence.bmc_silent();
    for second in 1..=3 {
        fence.outlets(second * 1_000, &[Off, Off]);
    }
    assert_eq!(fence.plan(3_000), Plan::AskBmcAfterOutlets);
}

#[test]
fn every_outlet_off_for_settle_and_a_silent_bmc_prove_the_machine_off() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    off_for_settle(&mut fence);
    fence.bmc_silent_after(3_500);
    assert_eq!(fence.phase(), Phase::Releasing);
    let proof = fence.status.evidence.as_ref().unwrap().power_off.as_ref().unwrap().level.clone().unwrap();
    assert_eq!((proof.level, proof.mapping.as_str(), proof.bmc_after.as_str()), (2, "OperatorStatement", "no answer"));
    assert_eq!(proof.outlets.len(), 2);
    assert_eq!(fence.plan(3_600), Plan::Release);
    // The release records what it rests on.
    let released = Released::checked(&fence.node, t(3_700));
    fence.step(3_700, Observation::Release(Ok(Released { taint_owned: true, ..released })));
    let release = fence.status.evidence.as_ref().unwrap().release.clone().unwrap();
    assert_eq!(release.kind, ReleaseKind::LevelProof);
    assert_eq!(fence.phase(), Phase::Done);
}

#[test]
fn a_bmc_that_reads_its_machine_off_agrees_with_the_outlets() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    off_for_settle(&mut fence);
    fence.bmc_after(3_500, Ok(PowerState::Off));
    assert_eq!(fence.phase(), Phase::Releasing);
}

#[test]
fn a_bmc_still_reading_on_after_the_outlets_went_off_shows_them_to_feed_another_machine() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    off_for_settle(&mut fence);
    fence.bmc_after(3_500, Ok(PowerState::On));
    assert_eq!(fence.phase(), Phase::Failed);
    assert_eq!(fence.reason(), Reason::OutletMappingWrong.as_str());
    // The next level comes from the same inventory: not tried.
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(2));
    // What the BMC read is kept for an attestation to see (A1).
    assert_eq!(fence.status.progress.as_ref().unwrap().last_power_state.as_deref(), Some("On"));
}

#[test]
fn a_bmc_that_answers_without_a_reading_after_the_outlets_went_off_releases_nothing() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    off_for_settle(&mut fence);
    let tls = BmcFailure { transient: false, reason: Reason::BmcAuthenticationFailed, message: "HTTP 401".into() };
    fence.bmc_after(3_500, Err(tls));
    assert_eq!((fence.phase(), fence.reason()), (Phase::Failed, Reason::OutletMappingWrong.as_str().to_owned()));
}

#[test]
fn a_level_that_cannot_prove_off_by_its_deadline_hands_on_to_the_next_level() {
    let mut fence = Fence::new(off_once(), vec![level(true, 1), level(true, 2)]);
    fence.bmc_silent();
    fence.outlets(1_000, &[On]);
    fence.step(1_100, Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(0) });
    // Still on when powerOffTimeout (60 s) has passed.
    fence.outlets(61_000, &[On]);
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(3));
    assert!(fence.message().contains("level 2 (PDU outlets) could not prove Off (PowerOffNotConfirmed"));
    // And the last level's end is the fence's.
    fence.outlets(62_000, &[On, On]);
    fence.step(62_100, Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(0) });
    fence.outlets(123_000, &[On, On]);
    assert_eq!((fence.phase(), fence.reason()), (Phase::Failed, Reason::PowerOffNotConfirmed.as_str().to_owned()));
}

#[test]
fn an_outlet_that_could_not_be_read_is_read_again_and_switches_nothing() {
    let mut fence = Fence::new(off_once(), vec![level(true, 1)]);
    fence.bmc_silent();
    let outcome = OutletOutcome {
        outlet: "snmp:pdu-a:161|1".into(),
        floor_watts: 5.0,
        reading: Err(PduError::Timeout { elapsed: StdDuration::from_secs(2), tries: 3 }),
    };
    let sampled = Sampled { requested: mono(1_000), answered: mono(3_000) };
    let reading = LevelReading { level: 2, outcomes: vec![outcome], sampled, through: DeviceMark::default() };
    let decision = fence.step(3_000, Observation::Outlets(Ok(reading)));
    assert_eq!(decision.reset, None);
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    assert!(decision.requeue.is_some());
}

/// Seed 754431: the first process read both outlets metered and lost its write; the next read outlet
/// 1 not at all and outlet 2 On, switched both off, and outlet 1's meter fell silent once it was off.
#[test]
fn outlets_are_switched_off_only_once_every_outlets_meter_is_on_record() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    fence.bmc_silent();
    let reading = |millis: i64, first: Result<OutletReading, PduError>| {
        let on = OutletReading { state: On, pending: false, watts: Some(180.0), metered: true };
        let outcomes = [first, Ok(on)]
            .into_iter()
            .enumerate()
            .map(|(i, reading)| OutletOutcome {
                outlet: format!("snmp:pdu-a:161|{}", i + 1),
                floor_watts: 5.0,
                reading,
            })
            .collect();
        let sampled = Sampled { requested: mono(millis), answered: mono(millis) };
        Observation::Outlets(Ok(LevelReading { level: 2, outcomes, sampled, through: DeviceMark::default() }))
    };
    let timeout = || Err(PduError::Timeout { elapsed: StdDuration::from_secs(2), tries: 1 });
    let decision = fence.step(1_000, reading(1_000, timeout()));
    assert_eq!(decision.reset, None, "outlet 1 unread and its meter not on record");
    assert!(fence.status.progress.as_ref().unwrap().intent.is_none());
    let metered = OutletReading { state: On, pending: false, watts: Some(180.0), metered: true };
    let decision = fence.step(2_000, reading(2_000, Ok(metered)));
    assert_eq!(decision.reset, Some(ResetType::ForceOff));
    let progress = fence.status.progress.clone().unwrap();
    assert_eq!(progress.metered_outlets, ["snmp:pdu-a:161|2", "snmp:pdu-a:161|1"], "on record with the intent");
    // Once on record, an outlet that cannot be read at a later reading does not stop a P7 send again.
    assert_eq!(rules_meters(&fence, timeout()), Ok(()));
}

fn rules_meters(fence: &Fence, first: Result<OutletReading, PduError>) -> Result<(), crate::levels::LevelNotOff> {
    let outcome = OutletOutcome { outlet: "snmp:pdu-a:161|1".into(), floor_watts: 5.0, reading: first };
    crate::levels::meters_on_record(&[outcome], &fence.status.progress.clone().unwrap().metered_outlets)
}

#[test]
fn a_stale_proof_is_proven_again_through_the_outlets_not_the_bmc() {
    let twice =
        CoronerRemediationSpec { retry: crate::api::Retry { count: 2, ..crate::api::Retry::default() }, ..off_once() };
    let mut fence = Fence::new(twice, vec![level(true, 2)]);
    off_for_settle(&mut fence);
    fence.bmc_silent_after(3_500);
    // Long after the proof: the release reads the outlets again.
    assert_eq!(fence.plan(30_000), Plan::ReadOutlets { level: 2 });
    fence.outlets(30_000, &[Off, On]);
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    assert_eq!(fence.status.progress.as_ref().unwrap().attempt, 2);
    assert!(fence.status.evidence.as_ref().unwrap().power_off.as_ref().unwrap().level.is_none());
    // The new attempt switches them off again.
    assert_eq!(fence.outlets(31_000, &[Off, On]).reset, Some(ResetType::ForceOff));
}

#[test]
fn a_level_proof_that_lapses_once_the_attempt_is_up_ends_the_release_not_written_and_tries_no_next_level() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    off_for_settle(&mut fence);
    fence.bmc_silent_after(3_500);
    assert_eq!(fence.plan(62_000), Plan::ReadOutlets { level: 2 });
    fence.outlets(62_000, &[Off, Off]);
    assert_eq!(fence.phase(), Phase::Failed);
    assert_eq!(fence.reason(), "ReleaseNotWritten", "the proof stood; the release ran out of time");
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(2), "no next level after a proof");
}

#[test]
fn an_outlet_on_after_a_lapsed_level_proof_makes_the_power_off_the_cause_again() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    off_for_settle(&mut fence);
    fence.bmc_silent_after(3_500);
    // Within the attempt: the stale proof is proven again, then an outlet reads On.
    fence.outlets(30_000, &[Off, Off]);
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    fence.outlets(31_000, &[Off, On]);
    fence.outlets(62_000, &[Off, Off]);
    assert_ne!(fence.reason(), "ReleaseNotWritten", "the machine read on since: no release's end");
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(3), "a silent BMC and level 2 failed: level 3");
}

#[test]
fn a_machine_back_on_after_the_level_proof_in_the_last_attempt_tries_the_next_level() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    off_for_settle(&mut fence);
    fence.bmc_silent_after(3_500);
    fence.outlets(30_000, &[Off, On]);
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(3));
}

#[test]
fn only_an_end_between_admission_and_the_written_release_may_hand_the_fence_to_a_level() {
    for phase in [Phase::VerifyingIdentity, Phase::PoweringOff, Phase::ConfirmingOff, Phase::PoweringOffOutlets] {
        assert!(may_end_in_a_level(phase), "{phase:?}");
    }
    assert!(may_end_in_a_level(Phase::Releasing), "nothing is released until the Node write");
    for phase in
        [Phase::Pending, Phase::WaitingForRelease, Phase::PoweringOn, Phase::WaitingForNode, Phase::Done, Phase::Failed]
    {
        assert!(!may_end_in_a_level(phase), "{phase:?}");
    }
}

fn deletion(spec: CoronerRemediationSpec) -> CoronerRemediationSpec {
    CoronerRemediationSpec { remediation_strategy: crate::api::RemediationStrategy::ResourceDeletion, ..spec }
}

/// Proven Off through level 2 at 3.5 s, and the deletion of the node's pods begun at 3.7 s (its
/// first pod sent for deletion: this process no longer knows that nothing went).
fn deletion_begun_at_a_level(spec: CoronerRemediationSpec, levels: Vec<PduLevel>) -> Fence {
    let mut fence = Fence::new(deletion(spec), levels);
    off_for_settle(&mut fence);
    fence.bmc_silent_after(3_500);
    assert_eq!(fence.plan(3_600), Plan::BeginDeletion);
    fence.step(3_700, Observation::DeletionMayBegin(Ok(Released::checked(&fence.node, t(3_700)))));
    fence.memory.begun_untouched = false;
    fence
}

#[test]
fn an_outlet_on_again_after_the_deletion_began_ends_the_fence_at_once_and_leaves_the_guard_its_outlets() {
    let twice =
        CoronerRemediationSpec { retry: crate::api::Retry { count: 3, ..crate::api::Retry::default() }, ..off_once() };
    let mut fence = deletion_begun_at_a_level(twice, vec![level(true, 2), level(true, 1)]);
    fence.outlets(30_000, &[Off, On]);
    // No new attempt and no next level: the release may have taken effect, and the guard acts now.
    assert_eq!((fence.phase(), fence.reason()), (Phase::Failed, Reason::PowerOffNotConfirmed.as_str().to_owned()));
    let evidence = fence.status.evidence.clone().unwrap();
    assert!(evidence.release.is_some(), "the begun release is recorded");
    let proof = evidence.power_off.unwrap().level.expect("the guard reads the outlets of the level that proved it");
    assert_eq!(proof.level, 2);
}

#[test]
fn a_begun_release_proven_again_keeps_its_level_for_the_guard() {
    let mut fence = deletion_begun_at_a_level(off_once(), vec![level(true, 2)]);
    // The proof went stale (another process, a gap): proven again, and the machine goes on meanwhile.
    fence.outlets(30_000, &[Off, Off]);
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    fence.outlets(31_000, &[On, Off]);
    assert_eq!(fence.phase(), Phase::Failed);
    let evidence = fence.status.evidence.clone().unwrap();
    assert!(evidence.release.is_some() && evidence.power_off.unwrap().level.is_some());
}

#[test]
fn a_bmc_that_refuses_the_connection_after_the_outlets_went_off_is_no_silence() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    off_for_settle(&mut fence);
    // The connection was refused, or it answered 503: the BMC has power.
    fence.bmc_after(3_500, Err(unreachable()));
    assert_eq!((fence.phase(), fence.reason()), (Phase::Failed, Reason::OutletMappingWrong.as_str().to_owned()));
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(2), "no next level after an answer");
    // It answered: an attestation sees when (A1).
    assert!(fence.status.progress.as_ref().unwrap().last_answer_at.is_some());
}

#[test]
fn an_answer_naming_another_system_after_the_outlets_went_off_ends_the_fence_at_this_level() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    off_for_settle(&mut fence);
    let problem = IdentityProblem::Binding {
        reason: Reason::IdentityAmbiguous,
        message: "a member could not be read".into(),
        seen_on: Some("On".into()),
    };
    fence.step(3_500, Observation::BmcAfterOutlets(AskedAfterOutlets::Answered(Box::new(Err(problem)))));
    assert_eq!((fence.phase(), fence.reason()), (Phase::Failed, Reason::OutletMappingWrong.as_str().to_owned()));
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(2));
    assert_eq!(fence.status.progress.as_ref().unwrap().last_power_state.as_deref(), Some("On"));
    // A binding that cannot be used asked nothing: its own reason, and still no next level.
    let mut unusable = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    off_for_settle(&mut unusable);
    let problem = IdentityProblem::Binding {
        reason: Reason::BindingInvalid,
        message: "Secret bmc missing".into(),
        seen_on: None,
    };
    unusable.step(3_500, Observation::BmcAfterOutlets(AskedAfterOutlets::Answered(Box::new(Err(problem)))));
    assert_eq!((unusable.phase(), unusable.reason()), (Phase::Failed, Reason::BindingInvalid.as_str().to_owned()));
    assert_eq!(unusable.status.progress.as_ref().unwrap().level, Some(2));
}

#[test]
fn the_mapping_is_judged_at_the_generation_the_outlets_were_read_through() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    fence.confirmed = vec![Some(4)];
    off_for_settle(&mut fence);
    // The binding was edited (generation 5, its confirmation gone) while the BMC was asked.
    fence.confirmed = vec![Some(5)];
    let decision = fence.step_at_generation(3_500, 5, Observation::BmcAfterOutlets(AskedAfterOutlets::Silent));
    // Not proven on generation 4's readings: the outlets are read again, through generation 5.
    assert_eq!(phase_of(&decision.status), Phase::PoweringOffOutlets);
    assert!(decision.memory.run.is_none());
    assert!(
        decision.status.evidence.as_ref().and_then(|e| e.power_off.as_ref()).and_then(|p| p.level.as_ref()).is_none()
    );
}

#[test]
fn a_passively_confirmed_level_is_passed_over_for_the_next_stated_one() {
    let mut fence = Fence::new(off_once(), vec![level(false, 2), level(true, 1)]);
    fence.confirmed = vec![Some(4), None];
    fence.bmc_silent();
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(3), "{}", fence.message());
}

#[test]
fn a_proof_gone_stale_while_the_bmc_was_asked_is_proven_again_without_asking_it_again() {
    let twice =
        CoronerRemediationSpec { retry: crate::api::Retry { count: 2, ..crate::api::Retry::default() }, ..off_once() };
    let mut fence = Fence::new(twice, vec![level(true, 2)]);
    off_for_settle(&mut fence);
    // The BMC's silence took a request timeout: by its answer the run is old.
    fence.bmc_silent_after(13_500);
    assert_eq!(fence.phase(), Phase::Releasing);
    fence.outlets(30_000, &[Off, Off]);
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets, "proven again");
    fence.outlets(31_000, &[Off, Off]);
    fence.outlets(32_000, &[Off, Off]);
    // Settle spanned again: L7 answered for this level and device, so the level is proven at once.
    assert_eq!(fence.phase(), Phase::Releasing);
    assert_eq!(fence.plan(32_100), Plan::Release);
}

#[test]
fn a_bmc_force_off_decided_and_never_answered_is_recorded_when_a_level_takes_over() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2)]);
    fence.step(0, Observation::Admission(Verdict::Admit(Box::new(node().evidence(t(0))))));
    fence.status.progress.as_mut().unwrap().intent = Some(Intent {
        action: PowerAction::ForceOff,
        attempt: 1,
        decided_at: MicroTime(t(50)),
        instance: "instance-a".into(),
        result: None,
    });
    fence.step(60_100, Observation::Identity(Err(IdentityProblem::Bmc(unreachable()))));
    assert_eq!(fence.phase(), Phase::PoweringOffOutlets);
    let resets = fence.status.evidence.as_ref().unwrap().power_off.as_ref().unwrap().resets.clone();
    assert_eq!(resets.len(), 1, "{resets:?}");
    assert!(resets[0].result.contains("may have been sent"), "{resets:?}");
    // The level's own attempt counts only its own resets (P7): a failed Off to the outlets goes again.
    fence.outlets(61_000, &[On, On]);
    let failed = unreachable();
    fence.step(61_100, Observation::ResetAnswered { action: ResetType::ForceOff, result: Err(failed) });
    assert!(fence.status.progress.as_ref().unwrap().intent.as_ref().is_some_and(|i| i.result.is_none()));
}

#[test]
fn a_bmc_that_could_not_be_asked_after_the_outlets_went_off_ends_the_fence_without_a_next_level() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    off_for_settle(&mut fence);
    let asked = AskedAfterOutlets::NotAsked("bmc-1.example does not resolve".into());
    fence.step(3_500, Observation::BmcAfterOutlets(asked));
    assert_eq!((fence.phase(), fence.reason()), (Phase::Failed, Reason::BmcUnreachable.as_str().to_owned()));
    assert_eq!(fence.status.progress.as_ref().unwrap().level, Some(2));
    // No sign of life: nothing recorded as an answer.
    assert!(fence.status.progress.as_ref().unwrap().last_answer_at.is_none());
}

#[test]
fn a_begun_release_whose_bmc_answers_when_proven_again_leaves_the_guard_no_outlets_to_trust() {
    let mut fence = deletion_begun_at_a_level(off_once(), vec![level(true, 2)]);
    // A new process proves the level again, and this time the BMC answers.
    fence.memory = Memory::default();
    for millis in [30_000, 31_000, 32_000] {
        fence.outlets(millis, &[Off, Off]);
    }
    fence.bmc_after(32_500, Err(unreachable()));
    assert_eq!(fence.reason(), Reason::OutletMappingWrong.as_str());
    let evidence = fence.status.evidence.clone().unwrap();
    assert!(evidence.release.is_some(), "the begun release is recorded");
    assert!(evidence.power_off.unwrap().level.is_none(), "outlets the BMC just disowned prove nothing to the guard");
}

#[test]
fn a_binding_edited_under_a_level_at_its_deadline_ends_the_fence_without_a_next_level() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    fence.bmc_silent();
    fence.outlets(1_000, &[Off, On]);
    fence.step(1_100, Observation::ResetAnswered { action: ResetType::ForceOff, result: Ok(0) });
    // The store holds generation 5 while the readings came through 4, and the deadline passes.
    let decision = fence.step_at_generation(61_000, 5, Observation::Unavailable("a list failed".into()));
    assert_eq!(phase_of(&decision.status), Phase::Failed);
    assert_eq!(decision.status.progress.as_ref().unwrap().level, Some(2), "no next level after an edit");
}

#[test]
fn a_level_entered_at_one_generation_and_ended_at_another_hands_on_to_no_level_even_after_a_restart() {
    let mut fence = Fence::new(off_once(), vec![level(true, 2), level(true, 1)]);
    fence.bmc_silent();
    assert_eq!(fence.status.progress.as_ref().unwrap().level_generation, Some(4));
    // A new process, which never read the outlets, sees the deadline pass (on the wall clock: twice
    // powerOffTimeout) with the binding at 5.
    fence.memory = Memory::default();
    let decision = fence.step_at_generation(125_000, 5, Observation::Unavailable("a list failed".into()));
    assert_eq!(phase_of(&decision.status), Phase::Failed);
    assert_eq!(decision.status.progress.as_ref().unwrap().level, Some(2));
}
