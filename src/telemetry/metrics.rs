//! Prometheus metrics (prefix `coroner_`), served as OpenMetrics text on the admin port.

use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::{
    api::{CoronerRemediationStatus, Evidence, Phase, conditions},
    contract,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BmcLabels {
    pub binding: String,
    pub operation: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub remediation: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabels {
    pub category: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric coroner exports; cheap to clone (the metrics are shared handles).
#[derive(Clone)]
pub struct Metrics {
    pub remediations_started: Counter,
    pub remediations_finished: Family<OutcomeLabels, Counter>,
    pub proofs_taken_again: Family<OutcomeLabels, Counter>,
    pub fence_stage_seconds: Family<StageLabels, Histogram>,
    pub bmc_requests: Family<BmcLabels, Counter>,
    pub remediations_in_flight: Gauge,
    pub remediations_queued: Gauge,
    pub bmc_bindings: Family<StateLabels, Gauge>,
    pub nodes_left_off_seconds: Family<NodeLabels, FloatGauge>,
    pub remediation_phase_seconds: Family<PhaseLabels, FloatGauge>,
    pub reconcile_errors: Family<CategoryLabels, Counter>,
    pub leader: Gauge,
    pub leader_changes: Counter,
    /// The guard after the release: a released machine read anything but Off.
    pub released_machine_powered_on: Family<NodeLabels, Counter>,
    /// Guard readings that could not tell (an error, another system's answer).
    pub guard_blind_reads: Family<NodeLabels, Counter>,
    /// ForceOffs the guard sent to a released machine.
    pub guard_force_offs: Family<NodeLabels, Counter>,
    /// A released node reported back with its pre-fence bootID: the fence did not take effect.
    pub fence_did_not_take_effect: Family<NodeLabels, Counter>,
    pub returned_without_approval: Family<NodeLabels, Counter>,
    /// Every way around a rule that was taken, by kind (`ApprovalPolicyMissing`,
    /// `Acknowledged<Reason>`, `ReturnedWithoutApproval`).
    pub safety_overrides: Family<KindLabels, Counter>,
    /// 1 while a CRD coroner serves is older than it needs: it acts on nothing.
    pub crd_outdated: Gauge,
    /// Nodes a NodeHealthCheck using a coroner template selects that no BmcBinding names.
    pub nodes_unprotected: Gauge,
}

fn stage_histogram() -> Histogram {
    // 0.1 s to about 7 min: a proof takes seconds, a release can take minutes.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.1, 2.0, 13))
}

impl Metrics {
    pub fn new() -> (Self, Registry) {
        let metrics = Self {
            remediations_started: Counter::default(),
            remediations_finished: Family::default(),
            proofs_taken_again: Family::default(),
            fence_stage_seconds: Family::new_with_constructor(stage_histogram),
            bmc_requests: Family::default(),
            remediations_in_flight: Gauge::default(),
            remediations_queued: Gauge::default(),
            bmc_bindings: Family::default(),
            nodes_left_off_seconds: Family::default(),
            remediation_phase_seconds: Family::default(),
            reconcile_errors: Family::default(),
            leader: Gauge::default(),
            leader_changes: Counter::default(),
            released_machine_powered_on: Family::default(),
            guard_blind_reads: Family::default(),
            guard_force_offs: Family::default(),
            fence_did_not_take_effect: Family::default(),
            returned_without_approval: Family::default(),
            safety_overrides: Family::default(),
            crd_outdated: Gauge::default(),
            nodes_unprotected: Gauge::default(),
        };
        let mut registry = Registry::with_prefix("coroner");
        let m = metrics.clone();
        registry.register("remediations_started", "Remediations coroner began working on", m.remediations_started);
        registry.register(
            "remediations_finished",
            "Remediations whose outcome was decided (Succeeded True or False), by outcome and reason",
            m.remediations_finished,
        );
        registry.register(
            "proofs_taken_again",
            "Proofs taken again on an attestation's look (A4) that ended, by outcome and reason (Succeeded keeps the first failure: remediations_finished counted it)",
            m.proofs_taken_again,
        );
        registry.register(
            "fence_stage_seconds",
            "Time each fence stage took (identity, power_off, proof, release, power_on)",
            m.fence_stage_seconds,
        );
        registry.register(
            "bmc_requests",
            "BMC operations by binding, operation (read, reset) and result",
            m.bmc_requests,
        );
        registry.register(
            "remediations_in_flight",
            "Remediations holding a power-action slot",
            m.remediations_in_flight,
        );
        registry.register("remediations_queued", "Remediations waiting for a storm-limit slot", m.remediations_queued);
        registry.register(
            "bmc_bindings",
            "BmcBindings by verification state (verified, unverified, invalid)",
            m.bmc_bindings,
        );
        registry.register(
            "nodes_left_off_seconds",
            "Seconds since a node fenced with action Off was released (it stays off)",
            m.nodes_left_off_seconds,
        );
        registry.register(
            "remediation_phase_seconds",
            "Seconds a remediation has been in its current phase",
            m.remediation_phase_seconds,
        );
        registry.register("reconcile_errors", "Reconcile errors by category", m.reconcile_errors);
        registry.register("leader", "1 while this replica is the leader", m.leader);
        registry.register("leader_changes", "Times this replica became the leader", m.leader_changes);
        registry.register(
            "released_machine_powered_on",
            "Times a released machine read anything but Off that coroner did not cause, by node",
            m.released_machine_powered_on,
        );
        registry.register(
            "guard_blind_reads",
            "Guard readings of a released machine that could not tell (errors count here, never as Off), by node",
            m.guard_blind_reads,
        );
        registry.register(
            "guard_force_offs",
            "ForceOffs the guard sent to a released machine, by node",
            m.guard_force_offs,
        );
        registry.register(
            "fence_did_not_take_effect",
            "Released nodes that reported back with their pre-fence bootID (they never went down), by node",
            m.fence_did_not_take_effect,
        );
        registry.register(
            "returned_without_approval",
            "Released nodes that reported Ready=True again with no approval of their release (R1), by node",
            m.returned_without_approval,
        );
        registry.register(
            "crd_outdated",
            "1 while a CRD coroner serves lacks the schema revision this version needs: it acts on nothing (CrdOutdated)",
            m.crd_outdated,
        );
        registry.register(
            "nodes_unprotected",
            "Nodes a NodeHealthCheck using a coroner template selects that no BmcBinding names: if one dies, nothing is proven and nothing released",
            m.nodes_unprotected,
        );
        registry.register(
            "safety_overrides",
            "Ways around a safety rule that were taken, by kind (ApprovalPolicyMissing: an approval honoured with no admission policy guarding it; Acknowledged<Reason>: an attestation released on evidence its attester acknowledged; ReturnedWithoutApproval)",
            m.safety_overrides,
        );
        (metrics, registry)
    }

    /// One way around a rule, of `kind`, was taken.
    pub fn safety_override(&self, kind: &str) {
        self.safety_overrides.get_or_create(&KindLabels { kind: kind.into() }).inc();
    }

    pub fn bmc(&self, binding: &str, operation: &str, result: &str) {
        self.bmc_requests
            .get_or_create(&BmcLabels { binding: binding.into(), operation: operation.into(), result: result.into() })
            .inc();
    }
}

fn seconds(
    from: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>,
    to: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>,
) -> Option<f64> {
    let (from, to) = (from?.0, to?.0);
    Some(to.duration_since(from).as_secs_f64()).filter(|s| *s >= 0.0)
}

/// The fence stages that `new` completed and `old` had not: (stage, seconds). Stages: identity
/// (admission → identity proven), power_off (→ last ForceOff sent, or identity → first Off reading
/// when already off), proof (→ power proven Off), release (→ workloads released), power_on (taint
/// removed → power reads On).
pub fn stage_durations(old: &CoronerRemediationStatus, new: &CoronerRemediationStatus) -> Vec<(&'static str, f64)> {
    let empty = Evidence::default();
    let before = old.evidence.as_ref().unwrap_or(&empty);
    let after = new.evidence.as_ref().unwrap_or(&empty);
    let mut stages = Vec::new();
    let admitted = after.node.as_ref().map(|n| &n.admitted_at);
    let verified = after.identity.as_ref().map(|i| &i.verified_at);
    // An identity found after the release (the guard's, after an attested one) is no fence stage.
    if before.identity.is_none()
        && before.release.is_none()
        && let Some(s) = seconds(admitted, verified)
    {
        stages.push(("identity", s));
    }
    let proof = after.power_off.as_ref();
    if before.power_off.as_ref().and_then(|p| p.proven_at.as_ref()).is_none()
        && let Some(proof) = proof
        && let Some(proven) = proof.proven_at.as_ref()
    {
        let off_from = proof
            .resets
            .last()
            .map(|r| &r.sent_at)
            .or_else(|| proof.proof.as_ref().and_then(|p| p.first.first()).map(|r| &r.at));
        if let Some(s) = seconds(verified, off_from) {
            stages.push(("power_off", s));
        }
        if let Some(s) = seconds(off_from, Some(proven)) {
            stages.push(("proof", s));
        }
    }
    if before.release.is_none()
        && let Some(release) = after.release.as_ref()
    {
        let proven = proof.and_then(|p| p.proven_at.as_ref());
        if let Some(s) = seconds(proven, Some(&release.released_at)) {
            stages.push(("release", s));
        }
    }
    let was_on = before.power_on.as_ref().and_then(|p| p.confirmed_at.as_ref()).is_some();
    if !was_on && let Some(confirmed) = after.power_on.as_ref().and_then(|p| p.confirmed_at.as_ref()) {
        let removed = after.release.as_ref().and_then(|r| r.taint_removed_at.as_ref());
        if let Some(s) = seconds(removed, Some(confirmed)) {
            stages.push(("power_on", s));
        }
    }
    stages
}

/// The outcome NodeHealthCheck sees, counted once: when `Succeeded` first leaves `Unknown`. Not
/// the terminal phase: NHC deletes a remediation as soon as its node is healthy again, which can
/// come before coroner sees the node back and writes `Done`. A success is counted as `NodeFenced`
/// whatever the action: with `Reboot`, `Succeeded` turns `True` on the step after the release
/// (`WaitingForRelease`), which names what happens next, not what succeeded.
pub fn decided_outcome(old: &CoronerRemediationStatus, new: &CoronerRemediationStatus) -> Option<OutcomeLabels> {
    let decided = |status: &CoronerRemediationStatus| {
        conditions::find(&status.conditions, contract::SUCCEEDED)
            .filter(|c| c.status == conditions::TRUE || c.status == conditions::FALSE)
            .cloned()
    };
    if decided(old).is_some() {
        return None;
    }
    let succeeded = decided(new)?;
    Some(if succeeded.status == conditions::TRUE {
        OutcomeLabels { outcome: "succeeded".into(), reason: contract::Reason::NodeFenced.as_str().into() }
    } else {
        OutcomeLabels { outcome: "failed".into(), reason: succeeded.reason }
    })
}

/// A4: how a proof taken again on an attestation's look ended, counted once: its release written
/// (`succeeded`, `NodeFenced`), or the fence failed again (`failed`, the reason `Processing` names),
/// a release settled by that failure included (a `ResourceDeletion` that deleted some pods).
/// `remediations_finished` cannot count it: `Succeeded` stays the first failure.
pub fn proven_again_outcome(old: &CoronerRemediationStatus, new: &CoronerRemediationStatus) -> Option<OutcomeLabels> {
    let released = |s: &CoronerRemediationStatus| s.evidence.as_ref().is_some_and(|e| e.release.is_some());
    let failed = |s: &CoronerRemediationStatus| s.phase == Some(Phase::Failed);
    if !crate::fence::proving_again(new) || released(old) {
        return None;
    }
    // The look's ask is written on a Failed remediation: only a proof that ran and failed again counts.
    if failed(new) && !failed(old) && crate::fence::proving_again(old) {
        let reason = conditions::find(&new.conditions, contract::PROCESSING).map(|c| c.reason.clone());
        return Some(OutcomeLabels { outcome: "failed".into(), reason: reason.unwrap_or_default() });
    }
    released(new)
        .then(|| OutcomeLabels { outcome: "succeeded".into(), reason: contract::Reason::NodeFenced.as_str().into() })
}

#[cfg(test)]
mod tests {
    use jiff::{SignedDuration, Timestamp};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;
    use crate::api::{
        IdentityEvidence, NodeEvidence, OffRun, PowerOffEvidence, ReleaseEvidence, RemediationStrategy, ResetRecord,
        UuidMatch,
    };

    fn t(millis: i64) -> MicroTime {
        MicroTime(Timestamp::UNIX_EPOCH + SignedDuration::from_millis(1_800_000_000_000 + millis))
    }

    fn evidence() -> Evidence {
        Evidence {
            node: Some(NodeEvidence {
                name: "n".into(),
                uid: "u".into(),
                system_uuid: "x".into(),
                boot_id: "b".into(),
                ready: "Unknown".into(),
                lease_present: true,
                lease_renew_time: None,
                admitted_at: t(0),
                binding: None,
            }),
            identity: Some(IdentityEvidence {
                binding: "b".into(),
                endpoint: "e".into(),
                system_id: "s".into(),
                system_path: "/p".into(),
                bmc_uuid: "x".into(),
                node_uuid: "x".into(),
                match_kind: UuidMatch::Exact,
                verified_at: t(300),
                tls_verified: true,
                binding_generation: None,
                binding_content: None,
            }),
            ..Evidence::default()
        }
    }

    #[test]
    fn each_stage_is_measured_once_when_it_completes() {
        let start = CoronerRemediationStatus::default();
        let verified = CoronerRemediationStatus { evidence: Some(evidence()), ..CoronerRemediationStatus::default() };
        assert_eq!(stage_durations(&start, &verified), [("identity", 0.3)]);
        assert!(stage_durations(&verified, &verified).is_empty(), "not again on the next write");

        let mut proven = verified.clone();
        let run = OffRun { instance: "i".into(), count: 3, first: vec![], last: vec![] };
        proven.evidence.as_mut().unwrap().power_off = Some(PowerOffEvidence {
            attempts: 1,
            resets: vec![ResetRecord {
                attempt: 1,
                sent_at: t(400),
                result: "HTTP 204".into(),
                level: None,
                accepted: true,
            }],
            already_off: false,
            proof: Some(run),
            proven_at: Some(t(2500)),
            level: None,
        });
        assert_eq!(stage_durations(&verified, &proven), [("power_off", 0.1), ("proof", 2.1)]);

        let mut released = proven.clone();
        released.evidence.as_mut().unwrap().release = Some(ReleaseEvidence {
            release_id: None,
            kind: crate::api::ReleaseKind::BmcProof,
            attestation: None,
            adopted_from: None,
            strategy: RemediationStrategy::OutOfServiceTaint,
            node_ready: "Unknown".into(),
            lease_renew_time: None,
            released_at: t(2600),
            taint_owned: true,
            pods_deleted: None,
            taint_removed_at: None,
            release_timed_out: false,
        });
        let stages = stage_durations(&proven, &released);
        assert_eq!(stages.len(), 1);
        assert!((stages[0].1 - 0.1).abs() < 1e-9 && stages[0].0 == "release");
    }

    #[test]
    fn the_outcome_is_counted_once_when_succeeded_is_decided() {
        let now = Timestamp::UNIX_EPOCH;
        let with = |reason: contract::Reason, before: &CoronerRemediationStatus| {
            let mut status = before.clone();
            contract::record(&mut status.conditions, reason, "m", now);
            status
        };
        let started = with(contract::Reason::RemediationStarted, &CoronerRemediationStatus::default());
        assert_eq!(decided_outcome(&CoronerRemediationStatus::default(), &started), None, "Unknown decides nothing");
        let fenced = with(contract::Reason::NodeFenced, &started);
        assert_eq!(
            decided_outcome(&started, &fenced),
            Some(OutcomeLabels { outcome: "succeeded".into(), reason: "NodeFenced".into() })
        );
        let rebooting = with(contract::Reason::WaitingForRelease, &started);
        assert_eq!(
            decided_outcome(&started, &rebooting),
            Some(OutcomeLabels { outcome: "succeeded".into(), reason: "NodeFenced".into() }),
            "a Reboot's success is a fence's success, not the step after it"
        );
        let complete = with(contract::Reason::RemediationComplete, &fenced);
        assert_eq!(decided_outcome(&fenced, &complete), None, "not again when the remediation completes");
        let refused = with(contract::Reason::IdentityMismatch, &started);
        assert_eq!(
            decided_outcome(&started, &refused),
            Some(OutcomeLabels { outcome: "failed".into(), reason: "IdentityMismatch".into() })
        );
    }

    #[test]
    fn a_proof_taken_again_on_a_look_is_counted_once_when_it_releases_or_fails_again() {
        let status = |phase: Phase, found: Option<crate::api::LookFound>, released: bool| {
            let mut status: CoronerRemediationStatus = serde_json::from_value(serde_json::json!({"evidence": {
                "attestationLook": {"attestation": "a", "attestationUid": "a-1", "requestedAt": "2026-12-01T10:00:00.000000Z",
                                    "mayProveAgain": true}}}))
            .unwrap();
            status.phase = Some(phase);
            let evidence = status.evidence.as_mut().unwrap();
            evidence.attestation_look.as_mut().unwrap().found = found;
            if released {
                evidence.release = serde_json::from_value(serde_json::json!({"strategy": "OutOfServiceTaint",
                    "releasedAt": "2026-12-01T10:00:00Z", "nodeReady": "Unknown", "taintOwned": true}))
                .unwrap();
            }
            status
        };
        let again = Some(crate::api::LookFound::ProvingAgain);
        let asked = status(Phase::Failed, None, false);
        let proving = status(Phase::ConfirmingOff, again, false);
        assert_eq!(proven_again_outcome(&asked, &proving), None, "the look taken: nothing ended yet");
        let mut failed = status(Phase::Failed, again, false);
        contract::record(&mut failed.conditions, contract::Reason::PowerOffNotConfirmed, "m", Timestamp::UNIX_EPOCH);
        assert_eq!(
            proven_again_outcome(&proving, &failed),
            Some(OutcomeLabels { outcome: "failed".into(), reason: "PowerOffNotConfirmed".into() })
        );
        assert_eq!(proven_again_outcome(&failed, &failed), None, "once");
        let released = status(Phase::Releasing, again, true);
        assert_eq!(
            proven_again_outcome(&proving, &released),
            Some(OutcomeLabels { outcome: "succeeded".into(), reason: "NodeFenced".into() })
        );
        assert_eq!(proven_again_outcome(&released, &status(Phase::Done, again, true)), None, "once");
        let mut settled = status(Phase::Failed, again, true);
        contract::record(&mut settled.conditions, contract::Reason::ReleaseNotWritten, "m", Timestamp::UNIX_EPOCH);
        assert_eq!(
            proven_again_outcome(&proving, &settled),
            Some(OutcomeLabels { outcome: "failed".into(), reason: "ReleaseNotWritten".into() }),
            "a release settled by the failure is the failure's"
        );
        assert_eq!(proven_again_outcome(&released, &settled), None, "counted when the release was written");
        let no_answer = status(Phase::Failed, Some(crate::api::LookFound::NoAnswer), false);
        assert_eq!(proven_again_outcome(&asked, &no_answer), None, "a look that found nothing proves nothing again");
    }

    #[test]
    fn metric_names_carry_the_prefix() {
        let (metrics, registry) = Metrics::new();
        metrics.bmc("worker-1", "read", "ok");
        metrics.fence_stage_seconds.get_or_create(&StageLabels { stage: "proof".into() }).observe(2.0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("coroner_bmc_requests_total{binding=\"worker-1\",operation=\"read\",result=\"ok\"} 1"),
            "{text}"
        );
        assert!(text.contains("coroner_fence_stage_seconds_bucket{le=\"3.2\",stage=\"proof\"} 1"), "{text}");
        assert!(text.contains("# EOF"));
    }
}
