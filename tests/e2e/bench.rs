//! `make bench` (never part of `make test`): what one fence costs, measured on the harness — a real
//! control plane, emulated machines, the release build of coroner, one fence at a time, no
//! NodeHealthCheck (the remediations are created as NHC creates them, so its own latency is not
//! counted).
//!
//! * P1: from the CoronerRemediation's creation to the out-of-service taint on the Node, minus
//!   `settle`, over several fences, at the default settle/pollInterval and at the fastest the schema
//!   allows;
//! * P2 (idle): the replica's resident memory and CPU seconds before any fence;
//! * P4: the BMC requests of one fence (the emulator's log) and the API server requests coroner's
//!   ServiceAccount made for it until `Succeeded=True` + 3 s, from FlowSchemas that sort them into
//!   reads (get, list), writes (create, update, patch, delete), Events, and the leader Lease's
//!   renewals (which go on whether anything is fenced or not);
//! * the baseline: `fence_redfish --action off` against one of the same emulators, timed.
//!
//! * P2 at scale: with 1 000 more Nodes and 10 000 Pods bound to them (objects only), coroner's RSS and
//!   its CPU seconds over 30 s.
//!
//! What this does not measure yet (docs/benchmarks.md says so): P2 after a 50-node storm, P3, and FAR
//! itself side by side.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use coroner::{api::CoronerRemediation, contract};
use kube::{Api, api::PostParams};
use serde_json::json;

use crate::{
    uuid,
    world::{CORONER_NS, World, log, wait_for},
};

const FENCES_PER_CONFIG: usize = 5;
/// The FlowSchemas that sort coroner's API requests, and the verbs each takes.
/// The leader Lease's renewals are sorted apart: they go on whether or not anything is fenced.
const FLOWS: [(&str, &[&str], &[&str], u32); 4] = [
    ("coroner-bench-events", &["*"], &["events"], 100),
    ("coroner-bench-lease-writes", &["create", "update", "patch", "delete"], &["leases"], 101),
    ("coroner-bench-reads", &["get", "list"], &["*"], 102),
    ("coroner-bench-writes", &["create", "update", "patch", "delete"], &["*"], 103),
];

struct Fence {
    config: &'static str,
    settle: Duration,
    to_taint: Duration,
    bmc_requests: usize,
    reads: u64,
    writes: u64,
    events: u64,
    lease_writes: u64,
}

pub async fn run() {
    println!("coroner bench: the harness, the release build, one fence at a time\n");
    let mut world = World::up().await;
    install_flow_schemas(&world);
    // coroner's defaults, but for the window budget (ten fences in a row) and a guard that reads only
    // once in the measurement (its reads are the guard's, not the fence's).
    let replica = world.start_coroner(&[
        "--max-fences-per-window",
        "1000",
        "--guard-interval",
        "1h",
        "--verify-interval",
        "10m",
        "--lease-duration",
        "15s",
        "--bmc-request-timeout",
        "5s",
    ]);
    let nodes: Vec<String> = (0..2 * FENCES_PER_CONFIG).map(|i| format!("bench-{i}")).collect();
    for (i, name) in nodes.iter().enumerate() {
        let n = u32::try_from(300 + i).unwrap_or(300);
        world.add_node(name, &uuid(n), &[("bench.coroner.dev/pool", "bench")], 0.0).await;
    }
    for name in &nodes {
        wait_for(&format!("{name} Ready"), Duration::from_secs(120), || async {
            (crate::ready(&world, name).await.as_deref() == Some("True")).then_some(())
        })
        .await;
    }
    let pid = world.coroner_pid(&replica).unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (rss_idle, cpu_idle) = usage(pid);
    log(format!("idle after the bindings verified: RSS {rss_idle} KiB, CPU {cpu_idle:.2} s since start"));

    for name in &nodes {
        world.node(name).partition();
    }
    for name in &nodes {
        wait_for(&format!("{name} Ready=Unknown"), Duration::from_secs(120), || async {
            (crate::ready(&world, name).await.as_deref() == Some("Unknown")).then_some(())
        })
        .await;
    }
    let configs = [
        ("default (settle 2s, pollInterval 1s)", "2s", "1s"),
        ("fastest (settle 1ms, pollInterval 100ms)", "1ms", "100ms"),
    ];
    let mut fences = Vec::new();
    for (i, name) in nodes.iter().enumerate() {
        let (config, settle, poll) = configs[i / FENCES_PER_CONFIG];
        fences.push(fence(&world, name, config, settle, poll).await);
    }
    let (rss_after, cpu_after) = usage(pid);
    let baseline = fence_redfish_off(&mut world).await;
    let scale = at_scale(&world, pid).await;

    let mut out = String::new();
    out.push_str("| configuration | P1: CR → taint − settle, min / median / max | BMC requests per fence | API reads | API writes | Events | leader Lease renewals |\n|---|---|---|---|---|---|---|\n");
    for (config, _, _) in configs {
        let of: Vec<&Fence> = fences.iter().filter(|f| f.config == config).collect();
        let mut beyond: Vec<Duration> = of.iter().map(|f| f.to_taint.saturating_sub(f.settle)).collect();
        beyond.sort();
        let range = |values: Vec<u64>| {
            let (min, max) = (values.iter().min().copied().unwrap_or(0), values.iter().max().copied().unwrap_or(0));
            if min == max { format!("{min}") } else { format!("{min}–{max}") }
        };
        out.push_str(&format!(
            "| {config} | {:.0} / {:.0} / {:.0} ms | {} | {} | {} | {} | {} |\n",
            ms(beyond[0]),
            ms(beyond[beyond.len() / 2]),
            ms(beyond[beyond.len() - 1]),
            range(of.iter().map(|f| f.bmc_requests as u64).collect()),
            range(of.iter().map(|f| f.reads).collect()),
            range(of.iter().map(|f| f.writes).collect()),
            range(of.iter().map(|f| f.events).collect()),
            range(of.iter().map(|f| f.lease_writes).collect()),
        ));
    }
    out.push_str(&format!(
        "\nRSS {rss_idle} KiB idle (CPU {cpu_idle:.2} s since start), {rss_after} KiB after {} fences (CPU {cpu_after:.2} s).\n",
        fences.len()
    ));
    out.push_str(&format!(
        "fence_redfish --action off against the same emulator: {:.0} ms, {} BMC requests.\n",
        ms(baseline.0),
        baseline.1
    ));
    out.push_str(&format!(
        "With {SCALE_NODES} more Nodes and {SCALE_PODS} Pods bound to them: RSS {} KiB, {:.2} CPU seconds in the {} s after they settled.\n",
        scale.0,
        scale.1,
        SCALE_IDLE.as_secs()
    ));
    println!("\n{out}");
    let _ = std::io::stdout().flush();
}

const SCALE_NODES: usize = 1000;
const SCALE_PODS: usize = 10_000;
const SCALE_IDLE: Duration = Duration::from_secs(30);

/// P2 at scale: Node objects (no kubelet behind them) and Pods bound to them (never running), created
/// 32 at a time; then coroner's resident memory, and its CPU seconds over [`SCALE_IDLE`] once the
/// watch events they caused have settled.
async fn at_scale(world: &World, pid: u32) -> (u64, f64) {
    use futures::StreamExt;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.client.clone());
    let started = Instant::now();
    futures::stream::iter(0..SCALE_NODES)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let node = serde_json::from_value(json!({"metadata": {"name": format!("scale-{i}"),
                    "labels": {"bench.coroner.dev/pool": "scale"}}}))
                .unwrap();
                nodes.create(&PostParams::default(), &node).await.unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    world.kubectl(&["create", "namespace", "bench-scale"]);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(world.client.clone(), "bench-scale");
    futures::stream::iter(0..SCALE_PODS)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod = serde_json::from_value(json!({"metadata": {"name": format!("p-{i}")},
                    "spec": {"nodeName": format!("scale-{}", i % SCALE_NODES),
                             "containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}}))
                .unwrap();
                pods.create(&PostParams::default(), &pod).await.unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    log(format!("created {SCALE_NODES} Nodes and {SCALE_PODS} Pods in {:.1?}", started.elapsed()));
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (_, cpu_before) = usage(pid);
    tokio::time::sleep(SCALE_IDLE).await;
    let (rss, cpu_after) = usage(pid);
    log(format!("at scale: RSS {rss} KiB, {:.2} CPU s in {SCALE_IDLE:?}", cpu_after - cpu_before));
    (rss, cpu_after - cpu_before)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One fence of `name`, as NodeHealthCheck would create it: action Off, the out-of-service taint.
async fn fence(world: &World, name: &str, config: &'static str, settle: &str, poll: &str) -> Fence {
    let machine = &world.node(name).machine;
    let (bmc_before, api_before) = (machine.requests().len(), flow_counts(world));
    let remediations: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    let remediation: CoronerRemediation = serde_json::from_value(json!({
        "apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediation",
        "metadata": {"name": format!("{name}-bench"), "namespace": CORONER_NS,
                     "annotations": {contract::NODE_NAME_ANNOTATION: name}},
        "spec": {"action": "Off", "remediationStrategy": "OutOfServiceTaint", "settle": settle, "pollInterval": poll,
                 "powerOffTimeout": "30s", "leaseFreshness": "5s", "retry": {"count": 1, "interval": "1s"}},
    }))
    .unwrap();
    let created = Instant::now();
    remediations.create(&PostParams::default(), &remediation).await.unwrap();
    // Polled every 10 ms (wait_for's 250 ms would blur P1).
    let to_taint = loop {
        if crate::taint_keys(world, name).await.iter().any(|k| k == "node.kubernetes.io/out-of-service") {
            break created.elapsed();
        }
        assert!(created.elapsed() < Duration::from_secs(60), "{name}: no out-of-service taint within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    wait_for(&format!("{name}: Succeeded=True"), Duration::from_secs(60), || async {
        let r = remediations.get_opt(&format!("{name}-bench")).await.ok()??;
        (crate::succeeded(&r)?.0 == "True").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let api_after = flow_counts(world);
    let delta = |i: usize| api_after[i].saturating_sub(api_before[i]);
    let settle = settle.parse::<coroner::api::Duration>().map(|d| d.get()).unwrap_or_default();
    let fence = Fence {
        config,
        settle,
        to_taint,
        bmc_requests: machine.requests().len() - bmc_before,
        events: delta(0),
        lease_writes: delta(1),
        reads: delta(2),
        writes: delta(3),
    };
    log(format!(
        "{name} ({config}): taint after {:.0} ms; {} BMC requests; API {} reads, {} writes, {} Events, {} leader Lease renewals",
        ms(fence.to_taint),
        fence.bmc_requests,
        fence.reads,
        fence.writes,
        fence.events,
        fence.lease_writes
    ));
    fence
}

/// Sorts coroner's ServiceAccount's requests into [`FLOWS`] (the lowest matchingPrecedence first).
fn install_flow_schemas(world: &World) {
    for (name, verbs, resources, precedence) in FLOWS {
        let schema = json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": "workload-high"}, "matchingPrecedence": precedence,
                     "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": "coroner", "namespace": CORONER_NS}}],
                                "resourceRules": [{"verbs": verbs, "apiGroups": ["*"], "resources": resources,
                                                   "clusterScope": true, "namespaces": ["*"]}]}]},
        });
        let file = world.dir.join(format!("{name}.json"));
        std::fs::write(&file, schema.to_string()).unwrap();
        world.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    }
}

/// The API server's dispatched-request counters of [`FLOWS`], in their order.
fn flow_counts(world: &World) -> [u64; 4] {
    let metrics = world.kubectl(&["get", "--raw", "/metrics"]);
    FLOWS.map(|(name, _, _, _)| {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_flowcontrol_dispatched_requests_total{")
                    && l.contains(&format!("flow_schema=\"{name}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    })
}

/// Resident memory (KiB) and CPU seconds (user + system) of process `pid`.
fn usage(pid: u32) -> (u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or_default().split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of /proc/PID/stat; after the ") " split, 11 and 12.
    (rss, (ticks(11) + ticks(12)) / 100.0)
}

/// `fence_redfish --action off` (Debian's fence-agents) against a fresh emulated machine: the FAR-style
/// baseline, timed, and the BMC requests it made.
async fn fence_redfish_off(world: &mut World) -> (Duration, usize) {
    world.add_node("bench-far", &uuid(399), &[("bench.coroner.dev/pool", "far")], 0.0).await;
    let machine = &world.node("bench-far").machine;
    let before = machine.requests().len();
    let started = Instant::now();
    let code = machine.fence_redfish("off", &uuid(399));
    let elapsed = started.elapsed();
    assert_eq!(code, Some(0), "fence_redfish --action off failed");
    (elapsed, machine.requests().len() - before)
}
