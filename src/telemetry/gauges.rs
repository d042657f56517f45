//! The gauges, computed from lists of the objects they describe (pure); the controller lists the
//! objects every few seconds and sets what these functions return.

use jiff::Timestamp;
use kube::ResourceExt;

use super::{Metrics, NodeLabels, PhaseLabels, StateLabels};
use crate::{
    api::{BmcBinding, CoronerRemediation, FenceAction, Phase},
    contract, verification,
};

/// What the remediations say, as gauges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RemediationGauges {
    /// Remediations holding a power-action slot ([`Phase::holds_power_slot`]).
    pub in_flight: i64,
    /// Pending remediations waiting for a storm-limit slot (`Queued`).
    pub queued: i64,
    /// Seconds each remediation has been in its phase.
    pub phase_seconds: Vec<(PhaseLabels, f64)>,
    /// Seconds each node fenced with `Off` has been left off since its release.
    pub left_off_seconds: Vec<(NodeLabels, f64)>,
}

fn seconds_since(now: Timestamp, then: Timestamp) -> f64 {
    now.duration_since(then).as_secs_f64()
}

pub fn remediation_gauges(remediations: &[CoronerRemediation], now: Timestamp) -> RemediationGauges {
    let queued = |r: &CoronerRemediation| crate::gates::queued(r.status.as_ref());
    let mut gauges = RemediationGauges {
        in_flight: count(remediations.iter().filter(|r| Phase::of(r).holds_power_slot()).count()),
        queued: count(remediations.iter().filter(|r| queued(r)).count()),
        ..RemediationGauges::default()
    };
    for r in remediations {
        let Some(status) = r.status.as_ref() else { continue };
        if let Some(since) = status.phase_since.as_ref() {
            let labels = PhaseLabels { remediation: r.name_any(), phase: Phase::of(r).as_str().into() };
            gauges.phase_seconds.push((labels, seconds_since(now, since.0)));
        }
        let released = status.evidence.as_ref().and_then(|e| e.release.as_ref());
        if r.spec.action == FenceAction::Off
            && Phase::of(r) == Phase::Done
            && let Some(released) = released
        {
            let node = contract::node_name(&r.metadata).unwrap_or_default().to_owned();
            gauges.left_off_seconds.push((NodeLabels { node }, seconds_since(now, released.released_at.0)));
        }
    }
    gauges
}

/// Bindings by state (verified, unverified, invalid; [`verification::state`]), every state listed.
pub fn binding_gauges(bindings: &[BmcBinding]) -> Vec<(StateLabels, i64)> {
    ["verified", "unverified", "invalid"]
        .into_iter()
        .map(|state| {
            let n = bindings.iter().filter(|b| verification::state(b.status.as_ref()) == state).count();
            (StateLabels { state: state.into() }, count(n))
        })
        .collect()
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// Sets the remediation gauges; series of remediations and nodes no longer listed go.
    pub fn set_remediation_gauges(&self, gauges: &RemediationGauges) {
        self.remediations_in_flight.set(gauges.in_flight);
        self.remediations_queued.set(gauges.queued);
        self.remediation_phase_seconds.clear();
        for (labels, seconds) in &gauges.phase_seconds {
            self.remediation_phase_seconds.get_or_create(labels).set(*seconds);
        }
        self.nodes_left_off_seconds.clear();
        for (labels, seconds) in &gauges.left_off_seconds {
            self.nodes_left_off_seconds.get_or_create(labels).set(*seconds);
        }
    }

    pub fn set_binding_gauges(&self, gauges: &[(StateLabels, i64)]) {
        self.bmc_bindings.clear();
        for (labels, n) in gauges {
            self.bmc_bindings.get_or_create(labels).set(*n);
        }
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;
    use crate::{
        api::{
            BmcBindingSpec, BmcBindingStatus, CoronerRemediationSpec, CoronerRemediationStatus, Evidence,
            RedfishTarget, ReleaseEvidence, ReleaseKind, RemediationStrategy, SecretRef, TlsPolicy,
        },
        contract::Reason,
        verification::Check,
    };

    fn at(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
    }

    fn remediation(name: &str, action: FenceAction, phase: Phase, reason: Reason, since: i64) -> CoronerRemediation {
        let mut r =
            CoronerRemediation::new(name, CoronerRemediationSpec { action, ..CoronerRemediationSpec::default() });
        r.annotations_mut().insert(contract::NODE_NAME_ANNOTATION.into(), format!("node-{name}"));
        let mut status = CoronerRemediationStatus {
            phase: Some(phase),
            phase_since: Some(MicroTime(at(since))),
            ..CoronerRemediationStatus::default()
        };
        contract::record(&mut status.conditions, reason, "m", at(since));
        r.status = Some(status);
        r
    }

    fn released(mut r: CoronerRemediation, at_secs: i64) -> CoronerRemediation {
        r.status.as_mut().unwrap().evidence = Some(Evidence {
            release: Some(ReleaseEvidence {
                release_id: None,
                kind: ReleaseKind::BmcProof,
                attestation: None,
                adopted_from: None,
                strategy: RemediationStrategy::OutOfServiceTaint,
                node_ready: "Unknown".into(),
                lease_renew_time: None,
                released_at: MicroTime(at(at_secs)),
                taint_owned: true,
                pods_deleted: None,
                taint_removed_at: None,
                release_timed_out: false,
            }),
            ..Evidence::default()
        });
        r
    }

    #[test]
    fn slots_the_queue_time_in_phase_and_nodes_left_off_come_from_the_remediations() {
        let list = [
            remediation("a", FenceAction::Off, Phase::Pending, Reason::Queued, 90),
            remediation("b", FenceAction::Off, Phase::Pending, Reason::NodeLeaseFresh, 95),
            remediation("c", FenceAction::Off, Phase::ConfirmingOff, Reason::ConfirmingOff, 80),
            remediation("d", FenceAction::Reboot, Phase::PoweringOn, Reason::PoweringOn, 70),
            remediation("e", FenceAction::Reboot, Phase::WaitingForNode, Reason::WaitingForNode, 60),
            released(remediation("f", FenceAction::Off, Phase::Done, Reason::NodeFenced, 50), 40),
            released(remediation("g", FenceAction::Reboot, Phase::Done, Reason::RemediationComplete, 50), 40),
            CoronerRemediation::new("h", CoronerRemediationSpec::default()),
        ];
        let gauges = remediation_gauges(&list, at(100));
        assert_eq!(gauges.in_flight, 2, "ConfirmingOff and PoweringOn hold a slot; WaitingForNode does not");
        assert_eq!(gauges.queued, 1, "only a Pending remediation waiting for a slot is queued");
        let phase = |name: &str| {
            gauges.phase_seconds.iter().find(|(l, _)| l.remediation == name).map(|(l, s)| (l.phase.as_str(), *s))
        };
        assert_eq!(phase("a"), Some(("Pending", 10.0)));
        assert_eq!(phase("c"), Some(("ConfirmingOff", 20.0)));
        assert_eq!(phase("h"), None, "no status yet");
        assert_eq!(gauges.phase_seconds.len(), 7);
        assert_eq!(
            gauges.left_off_seconds,
            [(NodeLabels { node: "node-f".into() }, 60.0)],
            "a Reboot's node is not left off"
        );
    }

    #[test]
    fn every_binding_state_is_counted_even_at_zero() {
        let binding = |check: Option<Check>| {
            let mut b = BmcBinding::new(
                "b",
                BmcBindingSpec {
                    node_name: "n".into(),
                    redfish: Some(RedfishTarget { endpoint: "https://bmc".into(), system_id: None }),
                    ipmi: None,
                    credentials_secret_ref: SecretRef { name: "s".into() },
                    tls: Some(TlsPolicy::default()),
                    pdu_levels: Vec::new(),
                },
            );
            b.status = check.map(|check| {
                let mut status = BmcBindingStatus::default();
                verification::record(&mut status, &check, &b, None, at(0));
                status
            });
            b
        };
        let read = Check::Read {
            system_id: "1".into(),
            uuid: "u".into(),
            power_state: "On".into(),
            identity: Ok(crate::api::UuidMatch::Exact),
        };
        let list = [binding(Some(read.clone())), binding(Some(read)), binding(None)];
        let counts: Vec<_> = binding_gauges(&list).into_iter().map(|(l, n)| (l.state, n)).collect();
        assert_eq!(counts, [("verified".to_owned(), 2), ("unverified".to_owned(), 1), ("invalid".to_owned(), 0)]);
    }
}
