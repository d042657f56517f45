//! `coroner status` (also `kubectl coroner status`): what coroner is doing now, read from the API
//! server only — fences in flight and why they wait, releases that stand and what the guard sees,
//! bindings not verified, attestations, and the leader. Read-only; it needs no BMC access.

use jiff::Timestamp;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use kube::{Api, ResourceExt, api::ListParams};

use super::{ApiArgs, CliError, kube_client};
use crate::{
    api::{BmcBinding, CoronerAttestation, CoronerRemediation, conditions},
    contract,
    fence::{self, NodeSnapshot},
    guard, verification,
};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub api: ApiArgs,

    /// The leader Lease, in the namespace.
    #[arg(long, env = "CORONER_LEASE_NAME", default_value = "coroner-leader")]
    pub lease_name: String,
}

/// Everything `status` reads.
pub struct Seen {
    pub now: Timestamp,
    pub remediations: Vec<CoronerRemediation>,
    pub nodes: Vec<Node>,
    pub bindings: Vec<BmcBinding>,
    pub attestations: Vec<CoronerAttestation>,
    pub leader: Option<Lease>,
    /// The NodeHealthChecks (untyped), or why they could not be read.
    pub nhcs: Result<Vec<serde_json::Value>, String>,
}

fn age(now: Timestamp, then: Option<Timestamp>) -> String {
    let Some(then) = then else { return "-".into() };
    let secs = now.duration_since(then).as_secs().max(0);
    match secs {
        0..120 => format!("{secs}s"),
        120..7200 => format!("{}m", secs / 60),
        7200..172_800 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

fn condition_text(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], type_: &str) -> String {
    conditions::find(conditions, type_).map_or("-".into(), |c| format!("{}={} {}", c.type_, c.status, c.reason))
}

/// The report, as printed.
pub fn render(seen: &Seen) -> String {
    let now = seen.now;
    let mut out = String::new();
    let node_of = |r: &CoronerRemediation| contract::node_name(&r.metadata).unwrap_or_default().to_owned();

    out.push_str("Fences in flight:\n");
    let mut any = false;
    for r in &seen.remediations {
        let status = r.status.clone().unwrap_or_default();
        let phase = fence::phase_of(&status);
        if phase.is_terminal() || status.evidence.as_ref().and_then(|e| e.release.as_ref()).is_some() {
            continue;
        }
        any = true;
        // Processing says what happens now (Succeeded keeps a first failure while a fence proves
        // again on an attestation's look, A4).
        let why = conditions::find(&status.conditions, contract::PROCESSING)
            .map_or_else(String::new, |c| format!("{}: {}", c.reason, c.message));
        let created = r.metadata.creation_timestamp.as_ref().map(|t| t.0);
        out.push_str(&format!(
            "  {} node {} {} age {} — {why}\n",
            r.name_any(),
            node_of(r),
            phase.as_str(),
            age(now, created)
        ));
    }
    if !any {
        out.push_str("  none\n");
    }

    out.push_str("Releases (workloads released; the machine must stay off):\n");
    let mut any = false;
    for r in &seen.remediations {
        let Some(status) = r.status.as_ref() else { continue };
        let Some(release) = status.evidence.as_ref().and_then(|e| e.release.as_ref()) else { continue };
        any = true;
        let uid = r.uid().unwrap_or_default();
        let node = seen.nodes.iter().find(|n| n.name_any() == node_of(r));
        let stands = node.is_some_and(|n| guard::release_stands(status, &NodeSnapshot::new(n, None, &uid)));
        let id = guard::release_id(&uid, status).unwrap_or_default();
        out.push_str(&format!(
            "  node {} release {id} ({:?}, {:?}) since {} ({} ago): {}; {}\n",
            node_of(r),
            release.kind,
            release.strategy,
            release.released_at.0,
            age(now, Some(release.released_at.0)),
            match (stands, &release.adopted_from) {
                (true, Some(sibling)) => format!("stands, guarded by {sibling}'s guard while it exists"),
                (true, None) => "stands, guarded".to_owned(),
                (false, _) => "ended".to_owned(),
            },
            condition_text(&status.conditions, guard::GUARD),
        ));
    }
    if !any {
        out.push_str("  none\n");
    }

    out.push_str("Bindings not verified:\n");
    let unverified: Vec<&BmcBinding> = seen
        .bindings
        .iter()
        .filter(|b| {
            let conditions = b.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
            conditions::status_of(conditions, verification::IDENTITY_VERIFIED) != Some(conditions::TRUE)
        })
        .collect();
    for b in &unverified {
        let conditions = b.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
        out.push_str(&format!(
            "  {} (node {}): {} — `kubectl describe bmcbinding {}` says why\n",
            b.name_any(),
            b.spec.node_name,
            condition_text(conditions, verification::IDENTITY_VERIFIED),
            b.name_any()
        ));
    }
    if unverified.is_empty() {
        out.push_str("  none\n");
    }

    out.push_str("Nodes nothing could fence (a NodeHealthCheck using a coroner template selects them, no BmcBinding names them):\n");
    match &seen.nhcs {
        Ok(nhcs) => {
            let (selected, _) = crate::verify::selection(nhcs, seen.nodes.iter().map(|n| &n.metadata));
            let unprotected = crate::verify::unprotected(&selected, &seen.bindings);
            for node in &unprotected {
                out.push_str(&format!("  {node} — add a BmcBinding, then `kubectl coroner verify {node}`\n"));
            }
            if unprotected.is_empty() {
                out.push_str("  none\n");
            }
        }
        Err(why) => out.push_str(&format!("  unknown: {why}\n")),
    }

    out.push_str("Attestations:\n");
    for a in &seen.attestations {
        let phase = a.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
        let created = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        out.push_str(&format!(
            "  {} node {} by {}: {} (age {})\n",
            a.name_any(),
            a.spec.node_name,
            a.spec.attested_by,
            phase.as_str(),
            age(now, created)
        ));
        // What the attester accepted is a way around a rule: always in sight.
        if !a.spec.acknowledge.is_empty() {
            let acknowledged: Vec<String> = a.spec.acknowledge.iter().map(ToString::to_string).collect();
            out.push_str(&format!("    acknowledges {}\n", acknowledged.join(", ")));
        }
    }
    if seen.attestations.is_empty() {
        out.push_str("  none\n");
    }

    let leader = seen.leader.as_ref().and_then(|l| l.spec.as_ref());
    match leader.and_then(|s| s.holder_identity.clone()) {
        Some(holder) => {
            let renewed = leader.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
            let acquired = leader.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0);
            out.push_str(&format!(
                "Leader: {holder} (leading for {}, renewed {} ago)\n",
                age(now, acquired),
                age(now, renewed)
            ));
        }
        None => out.push_str("Leader: none (no replica holds the leader Lease: nothing is fenced or guarded)\n"),
    }
    out
}

pub async fn run(args: StatusArgs) -> Result<(), CliError> {
    let client = kube_client(args.api.kubeconfig.as_deref(), args.api.context.as_deref()).await?;
    let fail = |what: &str, e: kube::Error| CliError::Status(format!("reading {what} in {}: {e}", args.api.namespace));
    let list = ListParams::default();
    let ns = args.api.namespace.as_str();
    let seen = Seen {
        now: Timestamp::now(),
        remediations: Api::<CoronerRemediation>::namespaced(client.clone(), ns)
            .list(&list)
            .await
            .map_err(|e| fail("CoronerRemediations", e))?
            .items,
        nodes: Api::<Node>::all(client.clone()).list(&list).await.map_err(|e| fail("Nodes", e))?.items,
        bindings: Api::<BmcBinding>::namespaced(client.clone(), ns)
            .list(&list)
            .await
            .map_err(|e| fail("BmcBindings", e))?
            .items,
        attestations: Api::<CoronerAttestation>::namespaced(client.clone(), ns)
            .list(&list)
            .await
            .map_err(|e| fail("CoronerAttestations", e))?
            .items,
        leader: Api::<Lease>::namespaced(client.clone(), ns)
            .get_opt(&args.lease_name)
            .await
            .map_err(|e| fail("the leader Lease", e))?,
        nhcs: crate::cluster::node_health_checks(&client)
            .await
            .map_err(|e| format!("cannot list NodeHealthChecks: {e}")),
    };
    print!("{}", render(&seen));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Seen {
        Seen {
            now: Timestamp::from_second(1_800_000_000).unwrap(),
            remediations: vec![],
            nodes: vec![],
            bindings: vec![],
            attestations: vec![],
            leader: None,
            nhcs: Ok(vec![]),
        }
    }

    #[test]
    fn a_quiet_cluster_says_none_everywhere_and_that_no_leader_means_no_fencing() {
        let text = render(&empty());
        assert!(text.contains("Fences in flight:\n  none\n"), "{text}");
        assert!(text.contains("Releases (workloads released; the machine must stay off):\n  none\n"), "{text}");
        assert!(text.contains("Leader: none"), "{text}");
    }

    #[test]
    fn a_selected_node_no_binding_names_is_listed_as_one_nothing_could_fence() {
        let mut seen = empty();
        let mut node = k8s_openapi::api::core::v1::Node::default();
        node.metadata.name = Some("worker-9".into());
        node.metadata.labels = Some([("pool".to_owned(), "main".to_owned())].into());
        seen.nodes.push(node);
        seen.nhcs = Ok(vec![serde_json::json!({"spec": {"selector": {"matchLabels": {"pool": "main"}},
            "remediationTemplate": {"kind": "CoronerRemediationTemplate", "name": "t", "namespace": "coroner-system"}}})]);
        let text = render(&seen);
        assert!(text.contains("  worker-9 — add a BmcBinding"), "{text}");
        seen.nhcs = Err("cannot list NodeHealthChecks: forbidden".into());
        assert!(render(&seen).contains("unknown: cannot list NodeHealthChecks"));
    }

    #[test]
    fn an_attestation_lists_the_evidence_its_attester_acknowledged() {
        let mut seen = empty();
        let spec = crate::api::CoronerAttestationSpec {
            node_name: "worker-3".into(),
            node_uid: "uid-3".into(),
            reason: "rack B dark".into(),
            attested_by: "alice".into(),
            valid_for: crate::api::Duration::from_secs(900),
            acknowledge: vec!["FenceSawLife=2026-12-05T01:00:00Z".parse().unwrap()],
        };
        seen.attestations.push(CoronerAttestation::new("worker-3-abcde", spec));
        let text = render(&seen);
        assert!(text.contains("    acknowledges FenceSawLife=2026-12-05T01:00:00Z\n"), "{text}");
    }

    #[test]
    fn a_fence_in_flight_shows_its_phase_and_why_it_waits() {
        let mut seen = empty();
        let mut r = CoronerRemediation::new("worker-1", Default::default());
        r.metadata.annotations = Some([(contract::NODE_NAME_ANNOTATION.to_owned(), "worker-1".to_owned())].into());
        let mut status = crate::api::CoronerRemediationStatus {
            phase: Some(crate::api::Phase::ConfirmingOff),
            ..Default::default()
        };
        // A proof taken again on an attestation's look (A4): Succeeded keeps the first failure,
        // Processing says what happens now.
        conditions::set(
            &mut status.conditions,
            contract::SUCCEEDED,
            conditions::FALSE,
            "BmcUnreachable",
            "silent",
            seen.now,
        );
        contract::record(&mut status.conditions, contract::Reason::ConfirmingOff, "collecting Off readings", seen.now);
        r.status = Some(status);
        seen.remediations.push(r);
        let text = render(&seen);
        assert!(text.contains("worker-1 node worker-1 ConfirmingOff"), "{text}");
        assert!(text.contains("ConfirmingOff: collecting Off readings"), "{text}");
        assert!(!text.contains("BmcUnreachable"), "{text}");
    }
}
