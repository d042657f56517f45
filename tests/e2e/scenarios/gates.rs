//! e2e scenarios: the gates: Ready=False, the control plane's quorum, storm limits.

use crate::*;

/// A kubelet that reports NotReady is alive: a remediation for it (created by hand here, as NHC is
/// configured for Ready=Unknown only) is refused for good.
pub(crate) async fn ready_false_node_not_fenced(world: &World) {
    let node = "f-1";
    world.node(node).partition();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.client.clone());
    let since = Timestamp::now().to_string();
    // A kubelet that keeps reporting NotReady: fresh heartbeats, so kube-controller-manager never
    // turns the node Unknown however long the test takes.
    let report_not_ready = || async {
        let now = Timestamp::now().to_string();
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "container runtime is down",
            "lastHeartbeatTime": now, "lastTransitionTime": since}]}});
        nodes.patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
    };
    report_not_ready().await;
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    let remediation: CoronerRemediation = serde_json::from_value(json!({
        "apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediation",
        "metadata": {"generateName": "f-1-", "namespace": CORONER_NS, "annotations": {contract::NODE_NAME_ANNOTATION: node}},
        "spec": {},
    }))
    .unwrap();
    api.create(&PostParams::default(), &remediation).await.unwrap();
    let refused = wait_for("f-1: refused", SHORT, || async {
        report_not_ready().await;
        remediations(world, node).await.into_iter().find(|r| succeeded(r).is_some_and(|s| s.0 == "False"))
    })
    .await;
    assert_eq!(succeeded(&refused).unwrap().1, "NodeNotUnreachable");
    let posts: Vec<_> = world.node(node).machine.requests().into_iter().filter(|r| r.starts_with("POST")).collect();
    assert!(posts.is_empty(), "a power action reached a Ready=False node: {posts:?}");
    log("f-1: Ready=False refused (NodeNotUnreachable), no power action");
    api.delete(&refused.name_any(), &Default::default()).await.unwrap();
    world.node(node).heal();
    wait_remediations_gone(world, node).await;
}

/// Three control-plane nodes: one partitioned is fenced; with two partitioned, none is until one of
/// them is back.
pub(crate) async fn control_plane_quorum_kept(world: &World) {
    world.node("cp-1").partition();
    let fenced = heal_once_fenced(world, "cp-1").await;
    log(format!("cp-1: one of three control-plane nodes fenced ({})", fenced.name_any()));
    wait_remediations_gone(world, "cp-1").await;
    wait_for("cp-1 Ready", SHORT, || async { (ready(world, "cp-1").await.as_deref() == Some("True")).then_some(()) })
        .await;

    let posts_before: usize = ["cp-2", "cp-3"]
        .iter()
        .map(|n| world.node(n).machine.requests().iter().filter(|r| r.starts_with("POST")).count())
        .sum();
    world.node("cp-2").partition();
    world.node("cp-3").partition();
    let guarded = wait_for("a control-plane remediation held by the quorum guard", LONG, || async {
        for node in ["cp-2", "cp-3"] {
            if let Some(r) = remediations(world, node)
                .await
                .into_iter()
                .find(|r| succeeded(r).is_some_and(|s| s.1 == "ControlPlaneQuorumGuard"))
            {
                return Some(r);
            }
        }
        None
    })
    .await;
    assert_eq!(succeeded(&guarded).unwrap().0, "Unknown", "waiting, not failed");
    // It keeps waiting: nothing reaches either BMC.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let posts_after: usize = ["cp-2", "cp-3"]
        .iter()
        .map(|n| world.node(n).machine.requests().iter().filter(|r| r.starts_with("POST")).count())
        .sum();
    assert_eq!(posts_after, posts_before, "a power action reached a control-plane node without quorum");
    for node in ["cp-2", "cp-3"] {
        assert!(remediations(world, node).await.iter().all(|r| succeeded(r).is_none_or(|s| s.0 != "True")));
    }
    log(format!("cp-2/cp-3: {} waits with ControlPlaneQuorumGuard; no power action", guarded.name_any()));
    // The other node comes back: quorum no longer depends on the held node, so its remediation goes
    // on. (Healing both at once would race: whichever reports Ready first restores quorum while the
    // other may not have reported yet.)
    let held = contract::node_name(&guarded.metadata).unwrap().to_owned();
    let other = if held == "cp-2" { "cp-3" } else { "cp-2" };
    world.node(other).heal();
    wait_for(&format!("{other} Ready"), SHORT, || async {
        (ready(world, other).await.as_deref() == Some("True")).then_some(())
    })
    .await;
    let fenced = heal_once_fenced(world, &held).await;
    log(format!("{held}: {} fenced once {other} was back", fenced.name_any()));
    wait_remediations_gone(world, other).await;
    wait_remediations_gone(world, &held).await;
}

pub(crate) const STORM: [&str; 5] = ["s-1", "s-2", "s-3", "s-4", "s-5"];

/// Five partitioned workers: with --max-concurrent-fences 3 no more than three power actions overlap
/// (from the phase timestamps in status); with a window budget of 2, three stay Queued.
pub(crate) async fn storm_limits(world: &mut World) {
    world.restart_coroners(2, &["--max-concurrent-fences", "3", "--max-fences-per-window", "100"]);
    for node in STORM {
        world.node(node).partition();
    }
    // Keep the last status of every remediation: NHC deletes them once their node is back.
    let mut statuses: std::collections::BTreeMap<String, CoronerRemediation> = Default::default();
    let started = Instant::now();
    let mut healed = std::collections::BTreeSet::new();
    loop {
        let mut remaining = 0;
        for node in STORM {
            for r in remediations(world, node).await {
                statuses.insert(r.name_any(), r);
                remaining += 1;
            }
            if !healed.contains(node) && world.node(node).power_state() == "Off" {
                world.node(node).heal();
                healed.insert(node);
            }
        }
        if healed.len() == STORM.len() && remaining == 0 {
            break;
        }
        assert!(started.elapsed() < LONG, "storm fences did not finish: {:?}", statuses.keys());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Each power action: from admission to the release.
    let mut intervals = Vec::new();
    for r in statuses.values() {
        let evidence = r.status.as_ref().and_then(|s| s.evidence.clone()).unwrap_or_default();
        if let (Some(node), Some(release)) = (evidence.node, evidence.release) {
            intervals.push((node.admitted_at.0, release.released_at.0));
        }
    }
    assert_eq!(intervals.len(), 5, "every storm node was fenced once: {intervals:?}");
    let most = intervals
        .iter()
        .map(|(start, _)| intervals.iter().filter(|(s, e)| s <= start && start < e).count())
        .max()
        .unwrap_or(0);
    assert!(most <= 3, "{most} power actions overlapped: {intervals:?}");
    log(format!("storm: 5 fences, at most {most} power actions at once"));
    check_metrics(world).await;

    world.restart_coroners(2, &["--max-fences-per-window", "2"]);
    for node in STORM {
        wait_for(&format!("{node} Ready"), LONG, || async {
            (ready(world, node).await.as_deref() == Some("True")).then_some(())
        })
        .await;
    }
    for node in STORM {
        world.node(node).partition();
    }
    wait_for("two fenced, three Queued", LONG, || async {
        let mut fenced = 0;
        let mut queued = 0;
        for node in STORM {
            for r in remediations(world, node).await {
                match succeeded(&r).map(|s| s.1) {
                    Some(reason) if reason == "Queued" => queued += 1,
                    _ if r
                        .status
                        .as_ref()
                        .and_then(|s| s.evidence.as_ref())
                        .and_then(|e| e.node.as_ref())
                        .is_some() =>
                    {
                        fenced += 1
                    }
                    _ => {}
                }
            }
        }
        (fenced == 2 && queued == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut queued = Vec::new();
    for node in STORM {
        for r in remediations(world, node).await {
            if succeeded(&r).is_some_and(|s| s.1 == "Queued") {
                queued.push(format!(
                    "{}: {}",
                    r.name_any(),
                    r.status
                        .as_ref()
                        .and_then(|s| conditions::find(&s.conditions, contract::SUCCEEDED))
                        .map(|c| c.message.clone())
                        .unwrap_or_default()
                ));
            }
        }
    }
    assert_eq!(queued.len(), 3, "{queued:#?}");
    log(format!("window budget 2: three stay Queued, e.g. {}", queued[0]));
    for node in STORM {
        world.node(node).heal();
    }
    for node in STORM {
        wait_remediations_gone(world, node).await;
    }
    world.restart_coroners(2, &[]);
}
