//! e2e scenarios: the guard after the release, and the taint and approval by hand.

use crate::*;

/// The out-of-service taint by hand: the guard policy rejects an ordinary admin (even system:masters)
/// and admits the break-glass group. NoSchedule, so nothing on spare-1 is evicted; removal is free.
pub(crate) fn taint_and_approval_by_hand(world: &World) {
    let taint = "node.kubernetes.io/out-of-service=nodeshutdown:NoSchedule";
    let kubectl = |extra: &[&str], args: &[&str]| {
        let output = std::process::Command::new(world.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(&world.kubeconfig)
            .args(extra)
            .args(args)
            .output()
            .expect("kubectl");
        (
            output.status.success(),
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)),
        )
    };
    let (ok, out) = kubectl(&[], &["taint", "node", "spare-1", taint]);
    assert!(!ok && out.contains("reserved to coroner"), "an ordinary admin added the taint:\n{out}");
    log(format!("spare-1: the admin's hand taint rejected: {}", out.trim()));
    let break_glass = ["--as", "oncall", "--as-group", "coroner:break-glass", "--as-group", "system:masters"];
    let (ok, out) = kubectl(&break_glass, &["taint", "node", "spare-1", taint]);
    assert!(ok, "break-glass could not add the taint:\n{out}");
    let (ok, out) = kubectl(&[], &["taint", "node", "spare-1", "node.kubernetes.io/out-of-service:NoSchedule-"]);
    assert!(ok, "removing the taint:\n{out}");
    log("spare-1: the break-glass group added the taint; the admin removed it");

    // R3: only the approvers, the break-glass group and coroner may set an approval; anyone may remove it.
    let approval = format!("{}=uid@2026-01-01T00:00:00Z mallory: looks fine", coroner::guard::APPROVAL_ANNOTATION);
    let mallory = ["--as", "mallory", "--as-group", "system:masters"];
    let (ok, refused) = kubectl(&mallory, &["annotate", "node", "spare-1", &approval]);
    assert!(!ok && refused.contains("only the approvers"), "a non-approver set an approval:\n{refused}");
    let (ok, out) = kubectl(&break_glass, &["annotate", "node", "spare-1", &approval]);
    assert!(ok, "break-glass could not set an approval:\n{out}");
    let removal = format!("{}-", coroner::guard::APPROVAL_ANNOTATION);
    let (ok, out) = kubectl(&mallory, &["annotate", "node", "spare-1", &removal]);
    assert!(ok, "removing an approval must stay open:\n{out}");
    log(format!(
        "spare-1: a non-approver's approval rejected ({}); break-glass set one; anyone removes it",
        refused.trim()
    ));
}

/// The guard after the release: a node fenced with `Off` and still partitioned is powered on through
/// its BMC; coroner reads it On within about a guard interval, warns (condition, Events, metric) and
/// switches it off again. With `coroner.dev/power-on-approved` on the Node, the next power-on is
/// reported and left alone. The partition then heals: the node returns to service, NHC deletes the
/// remediation and the finalizer removes coroner's taints and the approval.
pub(crate) async fn guard_switches_a_powered_on_machine_off(world: &mut World) {
    let node = GUARDED;
    let interval = format!("{}s", GUARD_INTERVAL.as_secs());
    world.restart_coroners(2, &["--guard-interval", &interval]);
    world.node(node).partition();
    let fenced = heal_once_fenced_off(world, node).await;
    let name = fenced.name_any();
    wait_for(&format!("{node}: the guard reads the released machine Off"), SHORT, || async {
        (guard_condition(world, node).await? == ("True".into(), "MachineOff".into())).then_some(())
    })
    .await;
    assert_eq!(resets(world, node, "ForceOff"), 1, "{:?}", world.node(node).machine.requests());

    let on = Instant::now();
    power_on_by_hand(world, node).await;
    for (namespace, regarding) in [(CORONER_NS, name.as_str()), ("default", node)] {
        wait_for(&format!("{namespace}/{regarding}: a ReleasedMachinePoweredOn Event"), SHORT, || async {
            let events = events_about(world, namespace, regarding, coroner::guard::POWERED_ON).await;
            events.into_iter().find(|e| e.type_.as_deref() == Some("Warning"))
        })
        .await;
    }
    let warned = on.elapsed();
    wait_for(&format!("{node}: switched off again"), SHORT, || async {
        (world.node(node).power_state() == "Off").then_some(())
    })
    .await;
    let off_again = on.elapsed();
    assert_eq!(resets(world, node, "ForceOff"), 2, "the guard's ForceOff: {:?}", world.node(node).machine.requests());
    // Its answer is recorded right after it.
    wait_for(&format!("{node}: a GuardForceOffSent Event"), SHORT, || async {
        events_about(world, CORONER_NS, &name, "GuardForceOffSent").await.pop()
    })
    .await;
    let remediation = remediations(world, node).await.pop().unwrap();
    let guard = remediation.status.as_ref().and_then(|s| s.guard.clone()).unwrap_or_default();
    assert_eq!(guard.enforced, 1, "{guard:?}");
    assert_eq!(succeeded(&remediation).unwrap().0, "True", "Succeeded stays True");
    let series = |metric: &str| format!("{metric}{{node=\"{node}\"}}");
    assert_eq!(metric(world, &series("coroner_released_machine_powered_on_total")).await, 1.0);
    assert_eq!(metric(world, &series("coroner_guard_force_offs_total")).await, 1.0);
    wait_for(&format!("{node}: the guard reads Off again"), SHORT, || async {
        (guard_condition(world, node).await? == ("True".into(), "MachineOff".into())).then_some(())
    })
    .await;
    log(format!(
        "{node}: powered on behind coroner's back → ReleasedMachinePoweredOn after {warned:.1?}, Off again after {off_again:.1?} (guard interval {interval})"
    ));

    // `coroner status` shows the release standing and what the guard sees.
    let (ok, out) = coroner_cli_as(&world.kubeconfig, &["status", "--namespace", CORONER_NS]);
    assert!(ok, "coroner status: {out}");
    let line = out.lines().find(|l| l.contains(&format!("node {node} release"))).unwrap_or_default().to_owned();
    assert!(line.contains("stands, guarded") && line.contains("Guard="), "coroner status: {out}");
    log(format!("{node}: coroner status: {}\n{out}", line.trim()));

    // An approval that names no release counts for nothing (R3): the guard switches it off again and
    // says why, once.
    let stale = "alice: returning it to service";
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.client.clone());
    let patch = json!({"metadata": {"annotations": {coroner::guard::APPROVAL_ANNOTATION: stale}}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    power_on_by_hand(world, node).await;
    wait_for(&format!("{node}: switched off despite an approval naming no release"), SHORT, || async {
        (world.node(node).power_state() == "Off" && resets(world, node, "ForceOff") == 3).then_some(())
    })
    .await;
    wait_for(&format!("{node}: the guard reads Off again"), SHORT, || async {
        (guard_condition(world, node).await? == ("True".into(), "MachineOff".into())).then_some(())
    })
    .await;
    let ignored = events_about(world, CORONER_NS, &name, coroner::guard::APPROVAL_NOT_FOR_THIS_RELEASE).await;
    assert_eq!(ignored.len(), 1, "reported once: {ignored:?}");
    log(format!("{node}: an approval naming no release ({stale:?}) → ApprovalNotForThisRelease, switched off again"));

    // The documented return to service: `coroner approve` names the release (who and why), then power on.
    let (ok, out) = coroner_approve(&world.kubeconfig, node, "disks checked after INC-4711");
    assert!(ok, "coroner approve: {out}");
    let approval = world::node_object(&world.client, node)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .remove(coroner::guard::APPROVAL_ANNOTATION)
        .expect("coroner approve wrote the approval");
    assert!(approval.contains(": disks checked after INC-4711"), "{approval}");
    log(format!("{node}: `coroner approve` wrote {approval:?}"));
    power_on_by_hand(world, node).await;
    let approved = wait_for(&format!("{node}: a PowerOnApproved Event"), SHORT, || async {
        events_about(world, CORONER_NS, &name, "PowerOnApproved").await.into_iter().find_map(|e| e.note)
    })
    .await;
    assert!(approved.contains("disks checked after INC-4711"), "the Event quotes the approval: {approved}");
    assert!(!events_about(world, "default", node, "PowerOnApproved").await.is_empty(), "on the Node too");
    // Three more guard readings: it stays on.
    tokio::time::sleep(GUARD_INTERVAL * 3).await;
    assert_eq!(world.node(node).power_state(), "On", "the guard switched an approved machine off");
    assert_eq!(resets(world, node, "ForceOff"), 3, "{:?}", world.node(node).machine.requests());
    assert_eq!(guard_condition(world, node).await, Some(("False".into(), coroner::guard::POWERED_ON.into())));
    assert_eq!(metric(world, &series("coroner_guard_force_offs_total")).await, 2.0);
    log(format!("{node}: approved ({approval:?}) and powered on: PowerOnApproved, left on"));

    // Back in service: the kubelet reports, NHC deletes the remediation, the finalizer cleans up.
    world.node(node).heal();
    wait_remediations_gone(world, node).await;
    let keys = taint_keys(world, node).await;
    assert!(
        !keys.iter().any(|k| k.starts_with("coroner.dev/") || k == "node.kubernetes.io/out-of-service"),
        "{keys:?}"
    );
    let annotations = world::node_object(&world.client, node).await.unwrap().metadata.annotations.unwrap_or_default();
    assert!(!annotations.keys().any(|k| k.starts_with("coroner.dev/")), "{annotations:?}");
    log(format!("{node}: back in service; coroner's taints and the approval are gone"));
    world.restart_coroners(2, &[]);
}

/// A partitioned node fenced with `action: Off`: Succeeded=True and its out-of-service taint on. The
/// partition stays (the machine is off, or says it is).
pub(crate) async fn heal_once_fenced_off(world: &World, node: &str) -> CoronerRemediation {
    let fenced =
        wait_remediation(world, node, "Succeeded=True", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "True")).await;
    wait_for(&format!("{node}: out-of-service taint on"), SHORT, || async {
        taint_keys(world, node).await.iter().any(|k| k == "node.kubernetes.io/out-of-service").then_some(())
    })
    .await;
    fenced
}

/// bootID continuity: the BMC accepts the ForceOff and reads Off, but the machine never went down.
/// The node is released on that lie; once the partition heals its kubelet reports Ready with the
/// bootID it had before: `FenceDidNotTakeEffect` on the Node (its remediation, if NHC has not
/// deleted it yet) and in the metric.
pub(crate) async fn boot_id_continuity(world: &World) {
    let node = LIAR;
    let before = boot_id(world, node).await;
    world.node(node).partition();
    let fenced = heal_once_fenced_off(world, node).await;
    assert_eq!(world.node(node).power_state(), "On", "the machine never went off");
    assert_eq!(resets(world, node, "ForceOff"), 1);
    assert!(world.node(node).machine.power_changes().is_empty(), "{:?}", world.node(node).machine.power_changes());
    log(format!("{node}: released by {} on a BMC that lied (it read Off, the machine ran on)", fenced.name_any()));

    let healed = Instant::now();
    world.node(node).heal();
    // Until NHC deletes it (about 2 s after Ready), the remediation shows the condition too.
    let seen = std::cell::RefCell::new(None);
    let event = wait_for(&format!("{node}: FenceDidNotTakeEffect on the Node"), SHORT, || async {
        let remediation = remediations(world, node).await.pop();
        if let Some(c) = remediation.and_then(|r| condition(&r, coroner::guard::FENCE_TOOK_EFFECT)) {
            *seen.borrow_mut() = Some(c);
        }
        let events = events_about(world, "default", node, coroner::guard::DID_NOT_TAKE_EFFECT).await;
        events.into_iter().find(|e| e.type_.as_deref() == Some("Warning"))
    })
    .await;
    let seen_condition = seen.into_inner();
    let after = healed.elapsed();
    assert_eq!(boot_id(world, node).await, before, "the node is back with the bootID it had before the fence");
    assert!(event.note.as_deref().is_some_and(|n| n.contains(&before)), "{event:?}");
    if let Some(condition) = &seen_condition {
        assert_eq!(condition, &("False".into(), coroner::guard::DID_NOT_TAKE_EFFECT.into()));
    }
    let series = format!("coroner_fence_did_not_take_effect_total{{node=\"{node}\"}}");
    wait_for(&format!("{series} counted"), SHORT, || async { (metric(world, &series).await > 0.0).then_some(()) })
        .await;
    wait_remediations_gone(world, node).await;
    assert_eq!(metric(world, &series).await, 1.0, "one incident, counted once");
    let events = events_about(world, "default", node, coroner::guard::DID_NOT_TAKE_EFFECT).await;
    let count: i32 = events.iter().map(|e| e.series.as_ref().map_or(1, |s| s.count)).sum();
    assert_eq!(count, 1, "one Event on the Node: {events:?}");
    log(format!(
        "{node}: back Ready with its old bootID → FenceDidNotTakeEffect on the Node after {after:.1?} (condition on the remediation: {})",
        seen_condition.map_or("not seen before NHC deleted it".to_owned(), |c| format!("{c:?}"))
    ));
}

/// R1 for a `ResourceDeletion` release (no taint on the Node): the fence deletes the node's pods
/// and ends; its machine powered on by hand is switched off again by the guard within its bound,
/// as for a release with the out-of-service taint (scenario r).
pub(crate) async fn resource_deletion_release_guarded(world: &mut World) {
    let node = DELETED_RELEASE;
    let interval = format!("{}s", GUARD_INTERVAL.as_secs());
    world.restart_coroners(2, &["--guard-interval", &interval]);
    world.node(node).partition();
    let fenced =
        wait_remediation(world, node, "Succeeded=True", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "True")).await;
    let release = fenced.status.as_ref().and_then(|s| s.evidence.as_ref()?.release.clone()).unwrap();
    assert_eq!(release.strategy, coroner::api::RemediationStrategy::ResourceDeletion);
    assert!(!taint_keys(world, node).await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    wait_for(&format!("{node}: the guard reads the released machine Off"), SHORT, || async {
        (guard_condition(world, node).await? == ("True".into(), "MachineOff".into())).then_some(())
    })
    .await;
    assert_eq!(resets(world, node, "ForceOff"), 1);
    let on = Instant::now();
    power_on_by_hand(world, node).await;
    let name = fenced.name_any();
    wait_for(&format!("{node}: a ReleasedMachinePoweredOn Event"), SHORT, || async {
        events_about(world, CORONER_NS, &name, coroner::guard::POWERED_ON).await.pop()
    })
    .await;
    wait_for(&format!("{node}: switched off again"), SHORT, || async {
        (resets(world, node, "ForceOff") == 2 && world.node(node).power_state() == "Off").then_some(())
    })
    .await;
    let off_again = on.elapsed();
    log(format!(
        "{node}: a ResourceDeletion release ({} pods deleted) powered on by hand → Off again after {off_again:.1?} (guard interval {interval})",
        release.pods_deleted.unwrap_or_default()
    ));
    world.node(node).heal();
    let (ok, out) = coroner_approve(&world.kubeconfig, node, "rd-1 back after its deletion release");
    assert!(ok, "coroner approve: {out}");
    power_on_by_hand(world, node).await;
    wait_remediations_gone(world, node).await;
}
