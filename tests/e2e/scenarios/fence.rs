//! e2e scenarios: a fence through a BMC, from partition to release and power-on.

use crate::*;

pub(crate) async fn partition_fenced_and_rebooted(world: &World) {
    let node = "a-1";
    let deployments: Api<Deployment> = Api::namespaced(world.client.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}],
                     "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 100, "preference": {"matchExpressions": [{"key": NAME, "operator": "In", "values": [node]}]}}]}}}}},
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &deployment).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "default");
    let web_running = |on_a1: bool| {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels("app=web")).await.ok()?.items;
            list.into_iter().find(|p| {
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.metadata.deletion_timestamp.is_none();
                let there = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
                running && there == on_a1
            })
        }
    };
    wait_for("web pod Running on a-1", SHORT, || web_running(true)).await;
    let launcher: Pod = serde_json::from_value(json!({
        "metadata": {"name": "virt-launcher-vm1", "labels": {"app": "vm1"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30, "containers": [{"name": "compute", "image": "registry.invalid/virt-launcher:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &launcher).await.unwrap();
    wait_for("virt-launcher Running on a-1", SHORT, || async {
        let pod = pods.get_opt("virt-launcher-vm1").await.ok()??;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let old_boot = boot_id(world, node).await;

    let cut = Instant::now();
    world.node(node).partition();
    pods.delete("virt-launcher-vm1", &Default::default()).await.unwrap();
    log("a-1: virt-launcher deleted while partitioned: it stays Terminating (no kubelet confirms)");
    let created = wait_remediation(world, node, "NHC creates a CoronerRemediation", SHORT, |_| true).await;
    log(format!("a-1: NHC created {} after {:.1?}", created.name_any(), cut.elapsed()));
    let fenced = heal_once_fenced(world, node).await;
    log(format!("a-1: fenced after {:.1?} (phase {})", cut.elapsed(), phase(&fenced)));
    let evidence = fenced.status.as_ref().unwrap().evidence.clone().unwrap();
    let identity = evidence.identity.unwrap();
    assert_eq!(identity.bmc_uuid, uuid(11));
    let power_off = evidence.power_off.unwrap();
    assert!(power_off.proof.is_some() && power_off.proven_at.is_some(), "{power_off:?}");
    let release = evidence.release.unwrap();
    assert!(release.taint_owned && release.node_ready == "Unknown", "{release:?}");

    let moved = wait_for("web pod Running on another node", LONG, || web_running(false)).await;
    log(format!(
        "a-1: node cut off → web pod Running on {} after {:.1?}",
        moved.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
        cut.elapsed()
    ));
    wait_for("virt-launcher force-deleted", LONG, || async {
        pods.get_opt("virt-launcher-vm1").await.ok()?.is_none().then_some(())
    })
    .await;
    log(format!("a-1: stuck Terminating pod gone after {:.1?}", cut.elapsed()));
    let recovered_boot = wait_for("a-1 Ready with a new bootID", LONG, || async {
        let boot = boot_id(world, node).await;
        (ready(world, node).await.as_deref() == Some("True") && boot != old_boot && !boot.is_empty()).then_some(boot)
    })
    .await;
    log(format!("a-1: back Ready with bootID {recovered_boot} after {:.1?}", cut.elapsed()));
    wait_remediations_gone(world, node).await;
    let keys = taint_keys(world, node).await;
    assert!(
        !keys.iter().any(|k| k.starts_with("coroner.dev/") || k == "node.kubernetes.io/out-of-service"),
        "{keys:?}"
    );
    let node_object = world::node_object(&world.client, node).await.unwrap();
    let annotations = node_object.metadata.annotations.unwrap_or_default();
    assert!(!annotations.keys().any(|k| k.starts_with("coroner.dev/")), "{annotations:?}");
    let requests = world.node(node).machine.requests();
    let resets: Vec<_> = requests.iter().filter(|r| r.starts_with("POST")).collect();
    assert_eq!(resets.len(), 2, "one ForceOff and one On: {resets:?}");
    assert!(resets[0].ends_with("ForceOff") && resets[1].ends_with(" On"), "{resets:?}");
    log(format!("a-1: done in {:.1?}; BMC requests: {}", cut.elapsed(), requests.len()));
}

pub(crate) async fn unreachable_bmc_fails_then_retries_once_fixed(world: &mut World) {
    world.node_mut("c-1").machine.stop();
    log("c-1: BMC stopped (connection refused)");
    world.node("c-1").partition();
    // `coroner status` during the fence: in flight, with the reason it waits.
    let in_flight = wait_for("c-1 in flight in coroner status", LONG, || async {
        let (ok, out) = coroner_cli_as(&world.kubeconfig, &["status", "--namespace", CORONER_NS]);
        let section = out.split("Fences in flight:\n").nth(1)?.split("Releases").next()?.to_owned();
        (ok && section.contains(" node c-1 ")).then_some(out)
    })
    .await;
    log(format!("c-1: coroner status during the fence\n{in_flight}"));
    let failed =
        wait_remediation(world, "c-1", "Succeeded=False", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "False")).await;
    assert_eq!(succeeded(&failed).unwrap().1, "BmcUnreachable");
    let progress = failed.status.as_ref().unwrap().progress.clone().unwrap();
    assert_eq!(progress.attempt, 2, "retry.count attempts");
    // Refused before any power action: the fencing taint goes right after the refusal is written.
    wait_for("c-1 without coroner's taints", SHORT, || async {
        let keys = taint_keys(world, "c-1").await;
        (!keys.iter().any(|k| k == "node.kubernetes.io/out-of-service" || k.starts_with("coroner.dev/"))).then_some(())
    })
    .await;
    log("c-1: refused after 2 attempts, nothing released");
    let message = succeeded_message(&failed);
    assert!(message.contains(contract::RETRY_LEVER), "the final message says how to retry: {message}");

    // The lever with a single remediationTemplate, on NHC v0.12.0: the cause fixed, the failed
    // remediation deleted, NHC creates a new one at once (the node is still unhealthy).
    world.node_mut("c-1").restart_bmc();
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    api.delete(&failed.name_any(), &Default::default()).await.unwrap();
    let retried =
        wait_remediation(world, "c-1", "NHC creates a new remediation", SHORT, |r| r.uid() != failed.uid()).await;
    log(format!("c-1: BMC back, {} deleted: NHC created {}", failed.name_any(), retried.name_any()));
    let fenced = wait_remediation(world, "c-1", "the retry fences the node", LONG, |r| {
        r.uid() == retried.uid() && succeeded(r).is_some_and(|s| s.0 == "True")
    })
    .await;

    // Fenced and not back yet: coroner's finalizer still has taints to remove, so uninstalling
    // coroner now would strand them. The check (the chart's pre-delete hook) refuses, saying what to do.
    let (passed, output) = world.uninstall_check();
    assert!(!passed, "uninstall-check passed while {} holds the finalizer:\n{output}", fenced.name_any());
    for needle in [fenced.name_any().as_str(), "node c-1", "pauseRequests", "kubectl delete coronerremediation"] {
        assert!(output.contains(needle), "uninstall-check does not say {needle:?}:\n{output}");
    }
    log(format!("c-1: uninstall-check refuses while {} is fenced", fenced.name_any()));
    world.node("c-1").heal();
    wait_remediations_gone(world, "c-1").await;
    let (passed, output) = world.uninstall_check();
    assert!(passed, "uninstall-check refused with no remediation left:\n{output}");
    log("c-1: back and remediation gone: uninstall-check passes");
}

pub(crate) fn succeeded_message(remediation: &CoronerRemediation) -> String {
    remediation
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, contract::SUCCEEDED))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

pub(crate) async fn nhc_timeout_stops_bmc_mutations(world: &World) {
    world.node("d-1").partition();
    let confirming = wait_remediation(world, "d-1", "ConfirmingOff", SHORT, |r| phase(r) == "ConfirmingOff").await;
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    let stamped = Timestamp::now();
    let patch = json!({"metadata": {"annotations": {contract::TIMED_OUT_ANNOTATION: stamped.to_string()}}});
    let stamped_object =
        api.patch(&confirming.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // The stamp and coroner's status writes are ordered by resourceVersion: the patched object says
    // whether the fence had already succeeded when the stamp landed (a slow test may be that late).
    let stopped = if succeeded(&stamped_object).is_some_and(|s| s.0 == "True") {
        log(format!("d-1: nhc-timed-out stamped after the fence succeeded (phase {})", phase(&stamped_object)));
        let done = wait_remediation(world, "d-1", "Processing=False TimedOutByNHC", SHORT, |r| {
            condition(r, contract::PROCESSING) == Some(("False".into(), "TimedOutByNHC".into()))
        })
        .await;
        assert_eq!(succeeded(&done).unwrap().0, "True", "Succeeded never leaves True");
        assert_eq!(phase(&done), "Done");
        done
    } else {
        log("d-1: nhc-timed-out stamped while ConfirmingOff");
        let failed = wait_remediation(world, "d-1", "TimedOutByNHC", SHORT, |r| {
            succeeded(r).is_some_and(|s| s == ("False".into(), "TimedOutByNHC".into()))
        })
        .await;
        assert_eq!(phase(&failed), "Failed");
        failed
    };
    // Once coroner has seen the stamp (it wrote the remediation Failed), nothing more reaches the
    // BMC. A POST already past its last check when the stamp landed may still arrive before that.
    let seen = stopped.status.as_ref().and_then(|s| s.phase_since.as_ref()).map(|t| t.0).unwrap_or(stamped);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let late_posts: Vec<_> = world
        .node("d-1")
        .machine
        .log()
        .into_iter()
        .filter(|e| e["event"] == "request" && e["method"] == "POST")
        .filter(|e| e["t"].as_str().and_then(|t| t.parse::<Timestamp>().ok()).is_some_and(|t| t > seen))
        .collect();
    assert!(late_posts.is_empty(), "BMC mutations after nhc-timed-out: {late_posts:?}");
    // The ForceOff may or may not have left before the stamp (coroner re-reads the remediation
    // right before sending). Bring the machine back by hand, as an administrator would.
    world.node("d-1").heal();
    if world.node("d-1").power_state() == "Off" {
        let bmc = bmc_client(world, "d-1");
        let system = bmc.system(&uuid(41)).await.unwrap();
        bmc.reset(&system, ResetType::On).await.unwrap();
    }
    wait_remediations_gone(world, "d-1").await;
}

/// Two replicas: the leader is killed (SIGKILL) while the remediation is ConfirmingOff; the standby
/// takes the Lease over and completes the fence from status; a new replica replaces the dead one.
pub(crate) async fn killed_mid_confirming_off_resumes(world: &mut World) {
    world.node("e-1").partition();
    wait_remediation(world, "e-1", "ConfirmingOff", SHORT, |r| phase(r) == "ConfirmingOff").await;
    let leader = world.leader().await.expect("a leader").name.clone();
    world.kill_coroner(&leader);
    let killed = Timestamp::now();
    world.start_coroner(&[]);
    let fenced = heal_once_fenced(world, "e-1").await;
    let new_leader = world.lease_holder().await.unwrap_or_default();
    assert!(!new_leader.is_empty() && new_leader != leader, "the Lease still names the killed {leader}");
    let proof = fenced.status.as_ref().unwrap().evidence.clone().unwrap().power_off.unwrap().proof.unwrap();
    assert!(proof.first[0].at.0 >= killed, "the proof used readings from before the takeover: {proof:?}");
    // Every reset the BMC received came after a read of the same system, with no other reset between
    // (the periodic binding verification may read the Systems collection in between).
    let requests = world.node("e-1").machine.requests();
    let system_read = format!("GET /redfish/v1/Systems/{}", uuid(51));
    for (i, _) in requests.iter().enumerate().filter(|(_, r)| r.starts_with("POST")) {
        let read = requests[..i].iter().rev().take_while(|r| !r.starts_with("POST")).any(|r| *r == system_read);
        assert!(read, "reset without a fresh read: {requests:?}");
    }
    let resets = requests.iter().filter(|r| r.starts_with("POST")).count();
    log(format!(
        "e-1: {leader} killed mid-fence, {new_leader} completed it; {} BMC requests, {resets} resets, each after a fresh read",
        requests.len()
    ));
    wait_remediations_gone(world, "e-1").await;
}

/// A settle longer than the lifetime of a BMC client in coroner's cache (60 s), through the
/// production path (the client built from the binding and its Secret, rebuilt as it expires): the
/// rebuilt client carries the same endpoint, TLS material and credential values, so the run goes on
/// (docs/safety.md P2); a change of the Secret's metadata mid-run restarts nothing either.
pub(crate) async fn long_settle_proven(world: &World) {
    let node = LONG_SETTLED;
    world.node(node).partition();
    let confirming = wait_remediation(world, node, "ConfirmingOff", LONG, |r| phase(r) == "ConfirmingOff").await;
    log(format!("{node}: {} confirming Off over a settle of {LONG_SETTLE:?}", confirming.name_any()));
    tokio::time::sleep(Duration::from_secs(20)).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let label = json!({"metadata": {"labels": {"e2e.coroner.dev/rotated-by": "secret-sync"}}});
    secrets.patch(&format!("{node}-bmc"), &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    log(format!("{node}: its Secret's metadata changed mid-run"));
    let fenced = heal_once_fenced_off(world, node).await;
    let evidence = fenced.status.as_ref().and_then(|s| s.evidence.clone()).unwrap();
    let power_off = evidence.power_off.unwrap();
    let proof = power_off.proof.clone().unwrap();
    let span = proof.latest().unwrap().at.0.duration_since(proof.first[0].at.0);
    assert!(span >= jiff::SignedDuration::try_from(LONG_SETTLE).unwrap(), "{proof:?}");
    assert_eq!(resets(world, node, "ForceOff"), 1);
    // The proving run began right after the ForceOff: a client rebuild (at 60 s) did not restart it.
    let sent = power_off.resets[0].sent_at.0;
    let began = proof.first[0].at.0.duration_since(sent);
    assert!(began < jiff::SignedDuration::from_secs(15), "the run began {began:#} after the ForceOff: {proof:?}");
    log(format!("{node}: proven Off over {span:#} by one unbroken run, across client rebuilds"));
    // Back to service as documented: approve the release, then power on.
    world.node(node).heal();
    let (ok, out) = coroner_approve(&world.kubeconfig, node, "y-1 back after its long-settle fence");
    assert!(ok, "coroner approve: {out}");
    power_on_by_hand(world, node).await;
    wait_remediations_gone(world, node).await;
}

/// R5: the exclusion label set after the release and before a `Reboot`'s `On` stops the `On`. A pod
/// held by a finalizer keeps the fence in WaitingForRelease while the node is labelled; once the pod
/// goes, the fence ends as an `Off` release does (`PowerOnExcluded`), no `On` reaches the BMC, and the
/// out-of-service taint stays.
pub(crate) async fn excluded_before_power_on(world: &World) {
    let node = EXCLUDED;
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "default");
    let held: Pod = serde_json::from_value(json!({
        "metadata": {"name": "held-on-excl-1", "finalizers": ["e2e.coroner.dev/hold"]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/held:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &held).await.unwrap();
    let before = world.node(node).machine.requests().len();
    world.node(node).partition();
    let released =
        wait_remediation(world, node, "released, waiting for its pods", LONG, |r| phase(r) == "WaitingForRelease")
            .await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.client.clone());
    let label = json!({"metadata": {"labels": {contract::EXCLUDE_LABEL: "true"}}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    log(format!("{node}: labelled {} while {} waits for its pods", contract::EXCLUDE_LABEL, released.name_any()));
    let unhold = json!({"metadata": {"finalizers": null}});
    pods.patch("held-on-excl-1", &PatchParams::default(), &Patch::Merge(&unhold)).await.unwrap();
    let done = wait_remediation(world, node, "Done PowerOnExcluded", LONG, |r| phase(r) == "Done").await;
    assert_eq!(
        condition(&done, contract::POWERED_ON).map(|c| c.1),
        Some("PowerOnExcluded".into()),
        "{:?}",
        done.status
    );
    assert_eq!(succeeded(&done).unwrap().0, "True", "it ends as an Off release does");
    let on: Vec<String> =
        world.node(node).machine.requests().into_iter().skip(before).filter(|r| r.ends_with("Reset On")).collect();
    assert!(on.is_empty(), "an On reached the excluded node's BMC: {on:?}");
    assert!(taint_keys(world, node).await.iter().any(|k| k == "node.kubernetes.io/out-of-service"), "the taint stays");
    log(format!("{node}: {} ended PowerOnExcluded; no On, the taint stays", done.name_any()));

    let unlabel = json!({"metadata": {"labels": {contract::EXCLUDE_LABEL: null}}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&unlabel)).await.unwrap();
    world.node(node).heal();
    let (ok, out) = coroner_approve(&world.kubeconfig, node, "excl-1 back after its excluded reboot");
    assert!(ok, "coroner approve: {out}");
    power_on_by_hand(world, node).await;
    wait_remediations_gone(world, node).await;
}

/// The node is labelled `remediation.medik8s.io/exclude-from-remediation` after admission and
/// before the ForceOff (its BMC answers each request a second late, so identity and the first power
/// reading take seconds): the check right before the reset refuses, the remediation ends
/// `NodeExcluded`, and the BMC sees no reset at all.
pub(crate) async fn excluded_mid_fence(world: &World) {
    let node = EXCLUDED;
    let before = world.node(node).machine.requests().len();
    world.node(node).partition();
    let admitted = wait_remediation(world, node, "admitted", LONG, |r| {
        r.status.as_ref().and_then(|s| s.evidence.as_ref()).and_then(|e| e.node.as_ref()).is_some()
    })
    .await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.client.clone());
    let label = json!({"metadata": {"labels": {contract::EXCLUDE_LABEL: "true"}}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    let posts = |from: usize| -> Vec<String> {
        world.node(node).machine.requests().into_iter().skip(from).filter(|r| r.starts_with("POST")).collect()
    };
    assert!(
        posts(before).is_empty(),
        "the ForceOff left before the label landed (phase {}): the slow BMC did not hold the fence long enough",
        phase(&admitted)
    );
    log(format!("{node}: labelled {} while {}", contract::EXCLUDE_LABEL, phase(&admitted)));
    let refused = wait_remediation(world, node, "Succeeded=False NodeExcluded", SHORT, |r| {
        succeeded(r).is_some_and(|s| s.0 == "False")
    })
    .await;
    assert_eq!(succeeded(&refused).unwrap().1, "NodeExcluded", "{:?}", refused.status);
    assert!(succeeded_message(&refused).contains("no power action taken"), "{}", succeeded_message(&refused));
    // Nothing more reaches the BMC, and nothing was released.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(posts(before), Vec::<String>::new(), "a reset reached the excluded node");
    assert_eq!(world.node(node).power_state(), "On");
    assert!(!taint_keys(world, node).await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    log(format!("{node}: {} ended NodeExcluded; the BMC saw no reset", refused.name_any()));

    let unlabel = json!({"metadata": {"labels": {contract::EXCLUDE_LABEL: null}}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&unlabel)).await.unwrap();
    world.node(node).heal();
    wait_remediations_gone(world, node).await;
}

pub(crate) async fn ipmi_machine_fenced(world: &mut World) {
    let node = "v-1";
    world
        .add_ipmi_node(
            node,
            &uuid(121),
            coroner::ipmi::GuidLayout::Ipmi,
            &[(POOL, "ipmi"), (NAME, node), ("e2e.coroner.dev/worker", "")],
        )
        .await;
    wait_for(&format!("{node} Ready"), SHORT, || async {
        (ready(world, node).await.as_deref() == Some("True")).then_some(())
    })
    .await;
    world
        .create_nhc(json!({
            "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "metadata": {"name": "e2e-ipmi"},
            "spec": {"selector": {"matchLabels": {POOL: "ipmi"}},
                     "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "2s"}],
                     "maxUnhealthy": 1, "remediationTemplate": template_ref("coroner-reboot")},
        }))
        .await;
    let old_boot = boot_id(world, node).await;
    let cut = Instant::now();
    world.ipmi_nodes[node].partition();
    log(format!("{node}: network cut (heartbeats stop, power stays on)"));
    let created = wait_remediation(world, node, "NHC creates a CoronerRemediation", SHORT, |_| true).await;
    log(format!("{node}: NHC created {} after {:.1?}", created.name_any(), cut.elapsed()));
    wait_for(&format!("{node}: machine really off"), LONG, || async {
        (world.ipmi_nodes[node].bmc.0.power() == "Off").then_some(())
    })
    .await;
    let off_after = cut.elapsed();
    let fenced =
        wait_remediation(world, node, "Succeeded=True", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "True")).await;
    let fenced_after = cut.elapsed();
    world.ipmi_nodes[node].heal();
    let evidence = fenced.status.as_ref().unwrap().evidence.clone().unwrap();
    let identity = evidence.identity.unwrap();
    assert_eq!(identity.node_uuid, uuid(121), "{identity:?}");
    assert!(identity.endpoint.starts_with("ipmi://127.0.0.1:"), "{identity:?}");
    assert!(!identity.tls_verified, "IPMI has no TLS: {identity:?}");
    let power_off = evidence.power_off.unwrap();
    assert!(power_off.proof.is_some() && power_off.proven_at.is_some(), "{power_off:?}");
    assert!(evidence.release.is_some_and(|r| r.taint_owned && r.node_ready == "Unknown"));
    let recovered = wait_for(&format!("{node} Ready with a new bootID"), LONG, || async {
        let boot = boot_id(world, node).await;
        (ready(world, node).await.as_deref() == Some("True") && boot != old_boot && !boot.is_empty()).then_some(boot)
    })
    .await;
    wait_remediations_gone(world, node).await;
    let keys = taint_keys(world, node).await;
    assert!(
        !keys.iter().any(|k| k.starts_with("coroner.dev/") || k == "node.kubernetes.io/out-of-service"),
        "{keys:?}"
    );
    // Chassis Control power down, then power up: nothing else ever reaches the chassis.
    let controls = world.ipmi_nodes[node].bmc.controls();
    assert_eq!(controls, ["set power 0", "set power 1"], "{controls:?}");
    log(format!(
        "{node}: IPMI fence: machine off after {off_after:.1?}, released (Succeeded=True) after {fenced_after:.1?}, back Ready with bootID {recovered} after {:.1?}; chassis controls {controls:?}",
        cut.elapsed()
    ));
}

/// Scenario A: a machine whose supply failed takes its BMC with it; its binding's level 2 is the two
/// outlets of an APC rPDU (snmpsim, SNMPv3 authPriv) that feed it, their mapping stated by an operator.
/// NHC creates the remediation from the Off template; the BMC stays silent through level 1's attempts,
/// the outlets are switched off and read Off for settle, the BMC is asked once more (silent), and the
/// node is released with the level's evidence. With no levels, the same death ends Succeeded=False
/// (scenario p: the attestation path).
/// A node whose binding's level 2 is outlets 1 and 2 of its own APC rPDU (snmpsim, SNMPv3 authPriv,
/// the mapping stated by an operator), Ready, watched by a NodeHealthCheck of its own (template
/// `coroner-off`).
pub(crate) async fn pdu_level_node(world: &mut World, node: &str, machine: MachineSpec) -> support::pdu::SnmpPduPeer {
    use support::pdu::{SnmpPduPeer, SnmpPduSpec, V3_AUTH_KEY, V3_CONTEXT, V3_PRIV_KEY, V3_USER};
    world.add_node_with(node, machine, &[(POOL, node), (NAME, node), ("e2e.coroner.dev/worker", "")]).await;
    let pdu = SnmpPduPeer::start(&SnmpPduSpec { outlets: 2, ..SnmpPduSpec::default() });
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let secret_name = format!("{node}-pdu");
    let secret = serde_json::from_value(json!({
        "metadata": {"name": secret_name},
        "stringData": {"username": V3_USER, "authKey": V3_AUTH_KEY, "privKey": V3_PRIV_KEY},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let outlet = |n: u32| {
        json!({"snmp": {"address": "127.0.0.1", "port": pdu.port, "outlet": n, "authProtocol": "SHA1",
                        "privProtocol": "AES128", "contextName": V3_CONTEXT},
               "credentialsSecretRef": {"name": secret_name}})
    };
    let levels =
        json!({"spec": {"pduLevels": [{"mappingProof": "OperatorStatement", "outlets": [outlet(1), outlet(2)]}]}});
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    bindings.patch(node, &PatchParams::default(), &Patch::Merge(&levels)).await.unwrap();
    log(format!("{node}: level 2 is outlets 1 and 2 of an APC rPDU (snmpsim on UDP {}, SNMPv3 authPriv)", pdu.port));
    wait_for(&format!("{node} Ready"), SHORT, || async {
        (ready(world, node).await.as_deref() == Some("True")).then_some(())
    })
    .await;
    let mapping = wait_for(&format!("{node}: the binding reports the stated mapping"), SHORT, || async {
        let binding = bindings.get(node).await.ok()?;
        let conditions = binding.status?.conditions;
        let c = conditions.iter().find(|c| c.type_ == "OutletMappingProven")?;
        (c.reason == "OutletMappingUnproven").then(|| c.message.clone())
    })
    .await;
    assert!(mapping.contains("stated by an operator"), "{mapping}");
    world
        .create_nhc(json!({
            "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "metadata": {"name": format!("e2e-{node}")},
            "spec": {"selector": {"matchLabels": {POOL: node}},
                     "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "2s"}],
                     "maxUnhealthy": 1, "remediationTemplate": template_ref("coroner-off")},
        }))
        .await;
    pdu
}
