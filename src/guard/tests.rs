//! The guard's tests by concern (as the guard's files), with the fixtures they share.

mod approval;
mod record;
mod returned;
mod rounds;

use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::*;
use crate::{
    api::{Evidence, IdentityEvidence, NodeEvidence, ReleaseEvidence, ReleaseKind, RemediationStrategy, UuidMatch},
    contract::Reason,
    fence::{DeviceMark, Sampled},
};

const UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";

fn t(secs: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
}

fn released() -> CoronerRemediationStatus {
    CoronerRemediationStatus {
        evidence: Some(Evidence {
            node: Some(NodeEvidence {
                name: "worker-1".into(),
                uid: "node-uid".into(),
                system_uuid: UUID.into(),
                boot_id: "boot-1".into(),
                ready: "Unknown".into(),
                lease_present: true,
                lease_renew_time: None,
                admitted_at: MicroTime(t(0)),
                binding: None,
            }),
            identity: Some(IdentityEvidence {
                binding: "worker-1".into(),
                endpoint: "https://bmc".into(),
                system_id: "1".into(),
                system_path: "/redfish/v1/Systems/1".into(),
                bmc_uuid: UUID.into(),
                node_uuid: UUID.into(),
                match_kind: UuidMatch::Exact,
                verified_at: MicroTime(t(1)),
                tls_verified: true,
                binding_generation: None,
                binding_content: None,
            }),
            release: Some(ReleaseEvidence {
                release_id: None,
                kind: ReleaseKind::BmcProof,
                attestation: None,
                adopted_from: None,
                strategy: RemediationStrategy::OutOfServiceTaint,
                node_ready: "Unknown".into(),
                lease_renew_time: None,
                released_at: MicroTime(t(5)),
                taint_owned: true,
                pods_deleted: None,
                taint_removed_at: None,
                release_timed_out: false,
            }),
            ..Evidence::default()
        }),
        ..CoronerRemediationStatus::default()
    }
}

fn node(released: bool) -> NodeSnapshot {
    NodeSnapshot {
        name: "worker-1".into(),
        uid: "node-uid".into(),
        ready: Some("Unknown".into()),
        boot_id: "boot-1".into(),
        released_at: released.then(|| t(5)),
        ..NodeSnapshot::default()
    }
}

fn reading(uuid: &str, power: PowerState) -> Result<PowerReading, BmcFailure> {
    Ok(PowerReading {
        uuid: uuid.into(),
        power_state: power,
        sampled: Sampled::default(),
        through: DeviceMark::default(),
    })
}

/// The release id of `released()` for remediation `rem-uid`.
fn id() -> String {
    release_id("rem-uid", &released()).unwrap()
}

fn step(policy: GuardPolicy, status: &CoronerRemediationStatus, finding: &Finding, approval: Option<&str>) -> Decision {
    let id = release_id("rem-uid", status);
    let approval = super::approval(id.as_deref(), approval);
    let watch = Watch { policy, approval, instance: "p1/1", now: t(20), mono: StdDuration::from_secs(20) };
    next(status, &Memory::default(), finding, watch)
}

fn step_with(policy: GuardPolicy, status: &CoronerRemediationStatus, memory: &Memory, finding: &Finding) -> Decision {
    let watch =
        Watch { policy, approval: Approval::None, instance: "p1/1", now: t(20), mono: StdDuration::from_secs(20) };
    next(status, memory, finding, watch)
}

fn condition(status: &CoronerRemediationStatus) -> (String, String) {
    let c = conditions::find(&status.conditions, GUARD).unwrap();
    (c.status.clone(), c.reason.clone())
}

/// An attestation whose release was written into the remediation but not yet confirmed on the Node.
fn releasing_attestation() -> crate::api::AttestationEvidence {
    crate::api::AttestationEvidence {
        acknowledged: Vec::new(),
        name: "worker-1-abcde".into(),
        uid: "a-1".into(),
        attested_by: "alice".into(),
        reason: "dark rack".into(),
        attested_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(0)),
        state: crate::api::AttestedReleaseState::Releasing,
    }
}

fn first_intent() -> CoronerRemediationStatus {
    step(GuardPolicy::Enforce, &released(), &Finding::NotOff(PowerState::On), None).status
}

fn watched() -> UnconfirmedRelease {
    UnconfirmedRelease { uid: "rem-uid".into(), remediation: "worker-1".into(), boot_id: "boot-1".into() }
}

fn booted(boot_id: &str, annotations: &[(&str, &str)]) -> Node {
    let mut node = k8s_node(annotations);
    node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
        node_info: Some(k8s_openapi::api::core::v1::NodeSystemInfo { boot_id: boot_id.into(), ..Default::default() }),
        ..Default::default()
    });
    node
}

fn k8s_node(annotations: &[(&str, &str)]) -> Node {
    let mut node = Node::default();
    node.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    node
}

/// A lab whose machine, on, was fenced with `action: Off` (proven off and released) through the loop.
fn fenced_off() -> crate::sim::lab::Lab<crate::sim::script::Scripted> {
    use crate::{
        api::{CoronerRemediationSpec, FenceAction},
        sim::{
            lab::{Lab, Setup},
            script::Script,
        },
    };
    let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
    let lab = Lab::scripted(&Setup::new(UUID, spec), Script::machine(UUID, true));
    futures::executor::block_on(lab.run());
    lab
}

/// Through the loop: the node reports back with its old bootID; the reconcile records it (a Warning
/// on the remediation and the Node, the metric); NHC's delete follows, and the finalizer does not
/// report it a second time.
/// A node fenced Off (its machine proven off and released) that comes back Ready with the bootID it
/// had before the fence.
fn fenced_and_back_with_its_old_boot_id() -> crate::sim::lab::Lab<crate::sim::script::Scripted> {
    let lab = fenced_off();
    lab.world(|t| t.set_ready("worker-1", conditions::TRUE, Some("worker-1-boot-1")));
    lab
}

fn attested() -> CoronerRemediationStatus {
    let mut status = released();
    let evidence = status.evidence.as_mut().unwrap();
    evidence.identity = None;
    evidence.release.as_mut().unwrap().kind = ReleaseKind::OperatorAttested;
    status
}

fn found(uuid: &str, claims: Vec<identity::Claim>) -> IdentityFound {
    IdentityFound {
        binding: "worker-1".into(),
        endpoint: "https://bmc".into(),
        tls_verified: Some(true),
        system: crate::bmc::SystemReading {
            id: "1".into(),
            path: "/redfish/v1/Systems/1".into(),
            uuid: uuid.into(),
            power_state: PowerState::On,
            reset_target: None,
            aliases: Vec::new(),
        },
        claims,
        through: DeviceMark::default(),
        sampled: Sampled::default(),
        origin: "https://bmc:443".into(),
    }
}
