//! `make demo`: three emulated machines, a small workload, NodeHealthCheck and coroner on a local
//! control plane. One node goes silent; the story of its fence is printed as it happens.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod, events::v1::Event};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};
use serde_json::json;

use crate::world::{CORONER_NS, World, node_object};

const POOL: &str = "demo.coroner.dev/pool";

fn say(start: Instant, line: impl AsRef<str>) {
    println!("  [{:>6.1}s] {}", start.elapsed().as_secs_f64(), line.as_ref());
}

pub async fn run() {
    println!("coroner demo: a real control plane, NodeHealthCheck v0.12.0, three emulated machines\n");
    let mut world = World::up().await;
    let templates: Api<coroner::api::CoronerRemediationTemplate> = Api::namespaced(world.client.clone(), CORONER_NS);
    let template = crate::template("coroner-reboot", json!({"action": "Reboot"}));
    templates.create(&PostParams::default(), &template).await.unwrap();
    world.start_nhc();
    world.start_coroner(&[]);
    for (i, name) in ["worker-1", "worker-2", "worker-3"].into_iter().enumerate() {
        world
            .add_node(
                name,
                &format!("d3e00000-0000-4000-8000-00000000000{}", i + 1),
                &[(POOL, "workers"), ("demo.coroner.dev/name", name)],
                0.0,
            )
            .await;
    }
    world
        .create_nhc(json!({
            "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "metadata": {"name": "workers"},
            "spec": {"selector": {"matchLabels": {POOL: "workers"}},
                     "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "2s"}],
                     "maxUnhealthy": 1,
                     "remediationTemplate": crate::template_ref("coroner-reboot")},
        }))
        .await;
    let deployments: Api<Deployment> = Api::namespaced(world.client.clone(), "default");
    let web = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}],
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "demo.coroner.dev/name", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]}}},
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &web).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "default");
    let vm = serde_json::from_value(json!({
        "metadata": {"name": "virt-launcher-vm1"},
        "spec": {"nodeName": "worker-2", "containers": [{"name": "compute", "image": "registry.invalid/virt-launcher:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &vm).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!("\nworkload: {}\n", placement(&world).await.join(", "));

    let story = tell(&world);
    tokio::select! {
        () = story => println!("\ndone: the node was proven dead, its workloads moved, and it came back."),
        _ = tokio::signal::ctrl_c() => println!("\ninterrupted: cleaning up"),
    }
    world.stop_all();
}

async fn placement(world: &World) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "default");
    let list = pods.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_else(|| "-".into());
            let state = if p.metadata.deletion_timestamp.is_some() {
                "Terminating".to_owned()
            } else {
                p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
            };
            format!("{} on {node} ({state})", p.name_any())
        })
        .collect()
}

/// Cuts worker-2 off and narrates every change until it is back and the remediation is gone: the
/// node as kube-controller-manager sees it, coroner's Events, the taints, the BMC's power log and
/// where the pods run.
async fn tell(world: &World) {
    let node = "worker-2";
    let start = Instant::now();
    let old_boot =
        node_object(&world.client, node).await.and_then(|n| n.status?.node_info).map(|i| i.boot_id).unwrap_or_default();
    world.node(node).partition();
    say(
        start,
        "worker-2 stops answering: its heartbeats stop, but its power stays on (a partition looks exactly like a dead node)",
    );
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "default");
    let _ = pods.delete("virt-launcher-vm1", &Default::default()).await;
    say(start, "the VM's virt-launcher pod is deleted: it stays Terminating, because no kubelet will ever confirm it");
    let events: Api<Event> = Api::namespaced(world.client.clone(), CORONER_NS);
    let mut seen = BTreeSet::new();
    let mut ready = "True".to_owned();
    let mut power_lines = 0;
    let mut created = false;
    let mut healed = false;
    let mut pods_seen = BTreeSet::new();
    let mut out_of_service = false;
    loop {
        let mut tell_once = |key: String, line: String| {
            if seen.insert(key) {
                say(start, line);
            }
        };
        if let Some(n) = node_object(&world.client, node).await {
            let now = coroner::fence::ready_status(&n).unwrap_or("absent").to_owned();
            let boot =
                n.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.clone()).unwrap_or_default();
            if now != ready {
                let rebooted = if boot != old_boot { format!(" (new bootID {boot})") } else { String::new() };
                say(start, format!("kube-controller-manager: worker-2 Ready={now}{rebooted}"));
                ready = now;
            }
            for taint in n.spec.and_then(|s| s.taints).unwrap_or_default() {
                out_of_service |= taint.key == "node.kubernetes.io/out-of-service";
                if taint.key == "node.kubernetes.io/out-of-service" || taint.key == "coroner.dev/fencing" {
                    let value = taint.value.map(|v| format!("={v}")).unwrap_or_default();
                    tell_once(
                        format!("taint+{}", taint.key),
                        format!("taint added: {}{value}:{}", taint.key, taint.effect),
                    );
                }
            }
        }
        // Retried on API errors: an empty answer here ends the story.
        let mine = crate::remediations(world, node).await;
        for remediation in &mine {
            created = true;
            tell_once(
                format!("cr-{}", remediation.name_any()),
                format!("NodeHealthCheck created CoronerRemediation {}", remediation.name_any()),
            );
        }
        let mut notes: Vec<_> = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
        notes.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        for event in
            notes.iter().filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("CoronerRemediation"))
        {
            let reason = event.reason.clone().unwrap_or_default();
            let note = event.note.clone().unwrap_or_default();
            tell_once(format!("event-{}", event.name_any()), format!("coroner Event {reason}: {note}"));
        }
        let log = world.node(node).machine.log();
        for entry in log
            .iter()
            .filter(|e| e["event"] == "power" || (e["event"] == "request" && e["method"] == "POST"))
            .skip(power_lines)
        {
            power_lines += 1;
            let line = if entry["event"] == "power" {
                format!(
                    "BMC: the machine's power really changed {} → {}",
                    entry["from"].as_str().unwrap_or_default(),
                    entry["to"].as_str().unwrap_or_default()
                )
            } else {
                format!(
                    "BMC: received ComputerSystem.Reset {} (HTTP {})",
                    entry["reset_type"].as_str().unwrap_or_default(),
                    entry["status"]
                )
            };
            say(start, line);
        }
        let now_placed = placement(world).await;
        for pod in &now_placed {
            tell_once(format!("pod-{pod}"), format!("pod {pod}"));
        }
        // What became of a pod: the Terminating virt-launcher is the point of the story.
        let names: BTreeSet<String> =
            now_placed.iter().filter_map(|p| p.split(' ').next()).map(str::to_owned).collect();
        for gone in pods_seen.difference(&names) {
            let what = if gone.starts_with("virt-launcher") { "its VM" } else { "its replacement" };
            let how = if out_of_service {
                format!(
                    "kube-controller-manager force-deleted it once the out-of-service taint was on the node, so {what} can start elsewhere and its volumes detach"
                )
            } else {
                "deleted".to_owned()
            };
            say(start, format!("pod {gone} is gone: {how}"));
        }
        pods_seen = names;
        // The fault was in the machine: once its power is really off, it will come back healthy.
        if !healed && world.node(node).power_state() == "Off" {
            healed = true;
            world.node(node).heal();
        }
        if created && mine.is_empty() {
            say(
                start,
                "NodeHealthCheck saw worker-2 healthy and deleted the remediation; coroner's finalizer removed its taints",
            );
            break;
        }
        if start.elapsed() > Duration::from_secs(300) {
            say(start, "giving up after 5 minutes");
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
