//! `coroner approve NODE --reason "…"` (also `kubectl coroner approve`): a person's approval that a
//! released machine may run again. It writes `coroner.dev/power-on-approved` as
//! `<release-id> <who>: <why>` (docs/safety.md R3), naming the release that stands on the node, with
//! the approver from a SelfSubjectReview. `--clear` removes the approval, which re-arms the guard.

use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

use super::{ApiArgs, CliError, kube_client, whoami};
use crate::{
    api::{CoronerRemediation, MAX_REASON_BYTES},
    contract,
    fence::NodeSnapshot,
    guard::{self, APPROVAL_ANNOTATION},
};

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The released node whose machine may run again.
    pub node: String,

    /// Why it may run again: what you checked (e.g. "disks of vm-17 checked, INC-4711"). Copied into
    /// the PowerOnApproved Event; at most 1 KiB. Required.
    #[arg(long, env = "CORONER_APPROVE_REASON", required_unless_present = "clear")]
    pub reason: Option<String>,

    /// Remove the node's approval instead: the guard switches the machine off again if it is on.
    #[arg(long, env = "CORONER_APPROVE_CLEAR", conflicts_with = "reason")]
    pub clear: bool,

    #[command(flatten)]
    pub api: ApiArgs,
}

/// Why there is nothing to approve.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NothingToApprove {
    #[error("no CoronerRemediation of node {0} has released it: there is no release to approve")]
    NoRelease(String),
    #[error(
        "node {node} reports Ready=True: its release by remediation {remediation} has ended, there is nothing to approve"
    )]
    ReleaseEnded { node: String, remediation: String },
}

/// The release that stands on `node`, as (remediation, release id): the one an approval must name.
pub fn standing_release(
    remediations: &[CoronerRemediation],
    node: &Node,
) -> Result<(String, String), NothingToApprove> {
    let name = node.name_any();
    let mut ended = None;
    for remediation in remediations.iter().filter(|r| contract::node_name(&r.metadata) == Some(name.as_str())) {
        let uid = remediation.uid().unwrap_or_default();
        let Some(status) = remediation.status.as_ref() else { continue };
        let Some(id) = guard::release_id(&uid, status) else { continue };
        if guard::release_stands(status, &NodeSnapshot::new(node, None, &uid)) {
            return Ok((remediation.name_any(), id));
        }
        ended = Some(remediation.name_any());
    }
    Err(match ended {
        Some(remediation) => NothingToApprove::ReleaseEnded { node: name, remediation },
        None => NothingToApprove::NoRelease(name),
    })
}

/// The annotation's value for one release (docs/safety.md R3).
pub fn approval_value(release_id: &str, who: &str, why: &str) -> String {
    format!("{release_id} {who}: {}", why.trim())
}

pub async fn run(args: ApproveArgs) -> Result<(), CliError> {
    let client = kube_client(args.api.kubeconfig.as_deref(), args.api.context.as_deref()).await?;
    let nodes = Api::<Node>::all(client.clone());
    if args.clear {
        let patch = json!({"metadata": {"annotations": {APPROVAL_ANNOTATION: null}}});
        nodes.patch(&args.node, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(fail("patching"))?;
        println!("removed {APPROVAL_ANNOTATION} from node {}: the guard is armed again", args.node);
        return Ok(());
    }
    let reason = args.reason.clone().unwrap_or_default();
    if reason.trim().is_empty() {
        return Err(CliError::Approve("--reason must say why the machine may run again; it may not be blank".into()));
    }
    if reason.len() > MAX_REASON_BYTES {
        return Err(CliError::Approve(format!("--reason has {} bytes; at most {MAX_REASON_BYTES}", reason.len())));
    }
    approve(&client, &args, &reason).await
}

async fn approve(client: &Client, args: &ApproveArgs, reason: &str) -> Result<(), CliError> {
    let who = whoami(client).await.map_err(CliError::Approve)?;
    let nodes = Api::<Node>::all(client.clone());
    let node = nodes
        .get_opt(&args.node)
        .await
        .map_err(fail("reading"))?
        .ok_or_else(|| CliError::Approve(format!("Node {} does not exist", args.node)))?;
    let remediations = Api::<CoronerRemediation>::namespaced(client.clone(), &args.api.namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| CliError::Approve(format!("listing CoronerRemediations in {}: {e}", args.api.namespace)))?
        .items;
    let (remediation, id) = standing_release(&remediations, &node).map_err(|e| CliError::Approve(e.to_string()))?;
    let value = approval_value(&id, &who, reason);
    let patch = json!({"metadata": {"annotations": {APPROVAL_ANNOTATION: value}}});
    nodes.patch(&args.node, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(fail("patching"))?;
    println!(
        "approved release {id} of node {} (remediation {}/{remediation}), as {who}",
        args.node, args.api.namespace
    );
    println!(
        "The guard leaves the machine on while this release stands; `coroner approve {} --clear` re-arms it.",
        args.node
    );
    Ok(())
}

fn fail(doing: &'static str) -> impl Fn(kube::Error) -> CliError {
    move |e| CliError::Approve(format!("{doing} the Node: {e}"))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use kube::api::ObjectMeta;

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use crate::api::{CoronerRemediationStatus, Evidence, ReleaseEvidence, ReleaseKind, RemediationStrategy};

    fn node(ready: &str) -> Node {
        Node {
            metadata: ObjectMeta { name: Some("w1".into()), uid: Some("node-uid".into()), ..ObjectMeta::default() },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn remediation(released_at: Option<i64>) -> CoronerRemediation {
        let mut r = CoronerRemediation::new("w1", Default::default());
        r.metadata.uid = Some("rem-uid".into());
        r.status = Some(CoronerRemediationStatus {
            evidence: released_at.map(|secs| Evidence {
                release: Some(ReleaseEvidence {
                    release_id: None,
                    kind: ReleaseKind::BmcProof,
                    attestation: None,
                    adopted_from: None,
                    strategy: RemediationStrategy::OutOfServiceTaint,
                    node_ready: "Unknown".into(),
                    lease_renew_time: None,
                    released_at: MicroTime(jiff::Timestamp::from_second(secs).unwrap()),
                    taint_owned: true,
                    pods_deleted: None,
                    taint_removed_at: None,
                    release_timed_out: false,
                }),
                ..Evidence::default()
            }),
            ..CoronerRemediationStatus::default()
        });
        r
    }

    #[test]
    fn an_approval_names_the_release_that_stands_on_the_node() {
        let (name, id) = standing_release(&[remediation(Some(1_700_000_000))], &node("Unknown")).unwrap();
        assert_eq!((name.as_str(), id.as_str()), ("w1", "rem-uid@1700000000"));
        let value = approval_value(&id, "alice", " disks checked ");
        assert_eq!(value, "rem-uid@1700000000 alice: disks checked");
        assert!(matches!(
            guard::approval(Some(&id), Some(&value)),
            guard::Approval::ForThisRelease("alice: disks checked")
        ));
    }

    #[test]
    fn a_node_without_a_release_has_nothing_to_approve() {
        assert_eq!(
            standing_release(&[remediation(None)], &node("Unknown")),
            Err(NothingToApprove::NoRelease("w1".into()))
        );
    }

    #[test]
    fn a_node_back_in_service_has_nothing_to_approve() {
        assert!(matches!(
            standing_release(&[remediation(Some(1_700_000_000))], &node("True")),
            Err(NothingToApprove::ReleaseEnded { .. })
        ));
    }
}
