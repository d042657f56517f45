//! e2e scenarios: leadership: the leader never fences its own node, hands over, stops.

use crate::*;

/// A single replica that runs on the node to fence (--node-name) and has no sibling to hand over to
/// waits with LeaderOnTargetNode and sends nothing; a replica elsewhere then fences the node.
pub(crate) async fn leader_never_fences_its_own_node(world: &mut World) {
    let node = "c-1";
    world.restart_coroners(1, &["--node-name", node]);
    // Scenario c fenced this machine before: only what reaches it from now on counts.
    let before = world.node(node).machine.requests().len();
    world.node(node).partition();
    let waiting = wait_remediation(world, node, "LeaderOnTargetNode", LONG, |r| {
        succeeded(r).is_some_and(|s| s == ("Unknown".into(), "LeaderOnTargetNode".into()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let posts: Vec<_> =
        world.node(node).machine.requests().into_iter().skip(before).filter(|r| r.starts_with("POST")).collect();
    assert!(posts.is_empty(), "the leader powered off its own node: {posts:?}");
    log(format!("{node}: {} waits with LeaderOnTargetNode; no power action", waiting.name_any()));
    world.restart_coroners(2, &[]);
    let fenced = heal_once_fenced(world, node).await;
    log(format!("{node}: {} fenced by a leader elsewhere", fenced.name_any()));
    wait_remediations_gone(world, node).await;
}

/// The leader runs on the node to fence and a Ready replica runs on another node: the leader steps
/// down instead of waiting, the other replica fences the node, and the first never sends a reset.
pub(crate) async fn leader_on_the_node_hands_over(world: &mut World) {
    let (node, elsewhere) = ("c-1", "a-1");
    world.restart_coroners(0, &[]);
    let on_target = world.start_coroner(&["--node-name", node]);
    wait_for(&format!("{on_target} leads"), SHORT, || async {
        world.leader().await.filter(|r| r.name == on_target).map(drop)
    })
    .await;
    let standby = world.start_coroner(&["--node-name", elsewhere]);
    world.replica_pod(&on_target, node).await;
    world.replica_pod(&standby, elsewhere).await;
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), CORONER_NS);
    wait_for("both replica pods Ready", SHORT, || async {
        let list = pods.list(&ListParams::default().labels("app.kubernetes.io/instance=e2e")).await.ok()?.items;
        let ready = list.iter().filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        (ready.count() == 2).then_some(())
    })
    .await;
    world.node(node).partition();
    let fenced = heal_once_fenced(world, node).await;
    let leader = world.leader().await.map(|r| r.name.clone());
    assert_eq!(leader.as_deref(), Some(standby.as_str()), "leadership passed to the replica elsewhere");
    let reset = format!("coroner_bmc_requests_total{{binding=\"{node}\",operation=\"reset\"");
    let replica = |name: &str| world.coroners.iter().find(|r| r.name == name).expect("replica");
    assert!(!replica(&on_target).metrics().await.contains(&reset), "{on_target} sent a reset to its own node");
    assert!(replica(&standby).metrics().await.contains(&reset), "{standby} fenced {node}");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), CORONER_NS);
    let waited = events.list(&ListParams::default()).await.unwrap().items.into_iter().any(|e| {
        e.reason.as_deref() == Some("LeaderOnTargetNode")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(fenced.name_any().as_str())
    });
    assert!(!waited, "the remediation waited with LeaderOnTargetNode although a replica elsewhere was Ready");
    log(format!("{node}: {on_target} (on {node}) handed over; {standby} (on {elsewhere}) fenced it"));
    wait_remediations_gone(world, node).await;
    for name in [&on_target, &standby] {
        let _ = pods.delete(name, &Default::default()).await;
    }
}

/// /metrics after the fences: the stage histogram and the counters. Every replica is read, as
/// leadership may have changed hands during the fences; exactly one says it leads.
pub(crate) async fn check_metrics(world: &World) {
    const NEEDLES: [&str; 5] = [
        "coroner_fence_stage_seconds_count{stage=\"proof\"}",
        "coroner_fence_stage_seconds_count{stage=\"identity\"}",
        "coroner_remediations_started_total",
        "coroner_remediations_finished_total{outcome=\"succeeded\"",
        "coroner_bmc_requests_total{binding=",
    ];
    let started = Instant::now();
    let pages = loop {
        let mut pages = Vec::new();
        for replica in &world.coroners {
            pages.push((replica.name.clone(), replica.metrics().await));
        }
        let missing: Vec<_> = NEEDLES.iter().filter(|n| !pages.iter().any(|(_, page)| page.contains(**n))).collect();
        let leaders = pages.iter().filter(|(_, page)| page.lines().any(|l| l == "coroner_leader 1")).count();
        if missing.is_empty() && leaders == 1 {
            break pages;
        }
        // A moment without a leader (a hand-over) passes; anything else is reported with every page.
        if started.elapsed() > SHORT {
            let all = pages.iter().map(|(name, page)| format!("--- {name}\n{page}")).collect::<Vec<_>>().join("\n");
            panic!("/metrics: missing {missing:?}, {leaders} replicas report coroner_leader 1:\n{all}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let proofs: f64 = pages
        .iter()
        .filter_map(|(_, page)| {
            page.lines().find(|l| l.starts_with("coroner_fence_stage_seconds_count{stage=\"proof\"}"))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    log(format!("/metrics of {} replicas: the fence histogram and counters ({proofs} proofs)", pages.len()));
}

/// SIGTERM right after a replica became the leader, before its controllers' caches filled: it exits
/// (kube-runtime alone would wait for stores that nothing feeds any more). `stop_coroners` fails the
/// scenario if a replica outlives its bound. Once: the 5-ms poll meets the window every time.
pub(crate) async fn leader_stopped_while_caches_fill_exits(world: &mut World) {
    world.restart_coroners(0, &[]);
    let name = world.start_coroner(&[]);
    let log_file = world.dir.join(format!("{name}.log"));
    // Polled often: the caches fill within a tenth of a second.
    let started = Instant::now();
    while !std::fs::read_to_string(&log_file).unwrap_or_default().contains("controllers started") {
        assert!(started.elapsed() < SHORT, "{name}: its controllers never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    world.stop_coroners();
    let text = std::fs::read_to_string(&log_file).unwrap_or_default();
    let how = if text.contains("did not stop within the grace") {
        "after the grace, its reconciles aborted"
    } else {
        "its controllers stopped"
    };
    log(format!("{name}: SIGTERM as its controllers started: exited ({how})"));
    world.restart_coroners(2, &[]);
}
