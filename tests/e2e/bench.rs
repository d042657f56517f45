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
//! * P3: 50 nodes dead at once, under the default limits (what waits, what the waiting costs) and
//!   with the limits raised (until all are released), and P2 after that storm; beforehand, the same
//!   50 emulators powered off by 50 `fence_redfish --action off` at once, timed (P3's other bound).
//!
//! * P2 by allocator: the raised storm again with mimalloc, with glibc's `MALLOC_ARENA_MAX=2`, with
//!   glibc's malloc thresholds fixed (`GLIBC_TUNABLES`), and with glibc's defaults (the build as
//!   shipped), each on a fresh replica: RSS idle and after the storm.
//!
//! What this does not measure yet (docs/benchmarks.md says so): FAR itself side by side.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use coroner::{api::CoronerRemediation, contract};
use kube::{Api, ResourceExt, api::PostParams};
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
    let replica = world.start_coroner(&[&QUIET[..], &["--max-fences-per-window", "1000"]].concat());
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
    let fences_only = std::env::var("CORONER_BENCH_ONLY").is_ok_and(|only| only == "fences");
    // The storm before the 1 000 Nodes: the node lifecycle controller works through those for minutes
    // (its API rate limit), and the storm's Nodes would wait behind them to turn Unknown.
    let storms = if fences_only {
        None
    } else {
        let storm = storm(&mut world).await;
        let (allocators, replica) = allocators(&mut world, &storm.names).await;
        let scale = at_scale(&world, world.coroner_pid(&replica).unwrap_or_default()).await;
        Some((storm, allocators, scale))
    };

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
    if let Some((storm, allocators, scale)) = &storms {
        out.push_str(&storms_report(storm, allocators, *scale));
    }
    println!("\n{out}");
    let _ = std::io::stdout().flush();
}

/// P3, P2 at scale and P2 by allocator, as `make bench` prints them.
fn storms_report(storm: &Storm, allocators: &[Allocator], scale: (u64, f64)) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "With {SCALE_NODES} more Nodes and {SCALE_PODS} Pods bound to them: RSS {} KiB, {:.2} CPU seconds in the {} s after they settled.\n",
        scale.0,
        scale.1,
        SCALE_IDLE.as_secs()
    ));
    out.push_str(&format!(
        "P3, {STORM} nodes dead at once (before the {SCALE_NODES} Nodes above were created; P2 at scale was measured on the last allocator run's replica, glibc's, after its storm): with the default limits, {} admitted and {} queued after {:.0} s; while they waited coroner made {} API reads in {} s (leader Lease apart). With the limits raised (--max-concurrent-fences {STORM}, --max-fences-per-window 1000): all {STORM} released {:.1} s after their remediations were created (first {:.1} s); {STORM} `fence_redfish --action off` at once against the same emulators took {:.1} s (1.5 × that: {:.1} s). RSS after the storm {} KiB.\n",
        storm.admitted,
        storm.queued,
        STORM_SETTLE.as_secs_f64(),
        storm.queue_reads,
        QUEUE_WATCH.as_secs(),
        storm.all_released.as_secs_f64(),
        storm.first_released.as_secs_f64(),
        storm.parallel_off.as_secs_f64(),
        1.5 * storm.parallel_off.as_secs_f64(),
        storm.rss_after
    ));
    out.push_str("\n| allocator (P2) | RSS idle | RSS after a 50-node storm (limits raised) | after / idle | all released |\n|---|---|---|---|---|\n");
    for a in allocators {
        out.push_str(&format!(
            "| {} | {:.1} MiB | {:.1} MiB | {:.2} | {:.1} s |\n",
            a.name,
            a.rss_idle as f64 / 1024.0,
            a.rss_after as f64 / 1024.0,
            a.rss_after as f64 / a.rss_idle.max(1) as f64,
            a.all_released.as_secs_f64()
        ));
    }
    out
}

/// Every replica of the bench: a guard that reads only once in a measurement (its reads are the
/// guard's, not the fence's), bindings verified at the start only, and the harness's Lease and BMC
/// timeouts.
const QUIET: [&str; 8] =
    ["--guard-interval", "1h", "--verify-interval", "10m", "--lease-duration", "15s", "--bmc-request-timeout", "5s"];
/// The storm's limits raised: every machine at once.
const RAISED: [&str; 4] = ["--max-concurrent-fences", "50", "--max-fences-per-window", "1000"];

/// P3: how many machines die at once.
const STORM: usize = 50;
/// How long the default limits' queue is left to settle before its reads are counted: the burst of
/// the 50 creations, then the first fallback round a minute later (a look taken while the others
/// still wrote their first status saw a queue that moved since, and looks once more).
const STORM_SETTLE: Duration = Duration::from_secs(75);
/// How long the queue's reads are counted.
const QUEUE_WATCH: Duration = Duration::from_secs(60);

struct Storm {
    admitted: usize,
    queued: usize,
    queue_reads: u64,
    first_released: Duration,
    all_released: Duration,
    rss_after: u64,
    names: Vec<String>,
    /// The same machines powered off by as many `fence_redfish --action off` at once (P3's other bound).
    parallel_off: Duration,
}

/// P3 and P2 after a storm: [`STORM`] more machines, whose nodes go `Ready=Unknown` together. First
/// under coroner's default limits (3 at once, 5 per 10 minutes): what is admitted, what waits, and
/// the API reads the waiting costs; those remediations are then deleted, and the same nodes fenced
/// again by a replica with the limits raised, timed until every one is released.
async fn storm(world: &mut World) -> Storm {
    let names: Vec<String> = (0..STORM).map(|i| format!("storm-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        world.add_node(name, &storm_uuid(i), &[("bench.coroner.dev/pool", "storm")], 0.0).await;
    }
    let all_ready = || async {
        for name in &names {
            wait_for(&format!("{name} Ready"), Duration::from_secs(180), || async {
                (crate::ready(world, name).await.as_deref() == Some("True")).then_some(())
            })
            .await;
        }
    };
    all_ready().await;
    // P3's other bound: the time these emulators take for as many `fence_redfish --action off` at once;
    // then they are switched on again, before the outage.
    let parallel_off = fence_redfish_all(world, &names, "off");
    fence_redfish_all(world, &names, "on");
    all_ready().await;
    world.stop_coroners();
    // coroner's own default limits (the harness raises the window for its scenarios).
    world.start_coroner(&[&QUIET[..], &["--max-concurrent-fences", "3", "--max-fences-per-window", "5"]].concat());
    // Every binding verified before the outage.
    tokio::time::sleep(Duration::from_secs(20)).await;
    for name in &names {
        world.node(name).partition();
    }
    for name in &names {
        wait_for(&format!("{name} Ready=Unknown"), Duration::from_secs(120), || async {
            (crate::ready(world, name).await.as_deref() == Some("Unknown")).then_some(())
        })
        .await;
    }
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    create_all(&api, &names, "queued").await;
    tokio::time::sleep(STORM_SETTLE).await;
    let before = flow_counts(world);
    tokio::time::sleep(QUEUE_WATCH).await;
    let queue_reads = flow_counts(world)[2].saturating_sub(before[2]);
    let ours = |r: &CoronerRemediation| r.name_any().starts_with("storm-");
    let all = api.list(&Default::default()).await.unwrap().items;
    let phase = |r: &CoronerRemediation| r.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
    let pending = all.iter().filter(|r| ours(r) && phase(r) == coroner::api::Phase::Pending).count();
    let admitted = all.iter().filter(|r| ours(r)).count() - pending;
    log(format!(
        "storm, default limits: {admitted} admitted, {pending} waiting; {queue_reads} API reads in {QUEUE_WATCH:?} of waiting"
    ));
    for r in all.iter().filter(|r| ours(r)) {
        let _ = api.delete(&r.name_any(), &Default::default()).await;
    }
    wait_for("the storm's first remediations gone", Duration::from_secs(120), || async {
        let left = api.list(&Default::default()).await.ok()?.items;
        (!left.iter().any(ours)).then_some(())
    })
    .await;
    world.stop_coroners();
    let replica = world.start_coroner(&[&QUIET[..], &RAISED[..]].concat());
    tokio::time::sleep(Duration::from_secs(20)).await;
    let created = Instant::now();
    create_all(&api, &names, "raised").await;
    let mut released = std::collections::BTreeMap::new();
    while released.len() < names.len() {
        assert!(
            created.elapsed() < Duration::from_secs(300),
            "the storm was not released within 5 minutes: {released:?}"
        );
        let waiting: Vec<&String> = names.iter().filter(|n| !released.contains_key(*n)).collect();
        for name in waiting {
            if crate::taint_keys(world, name).await.iter().any(|k| k == "node.kubernetes.io/out-of-service") {
                released.insert(name.clone(), created.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_released = released.values().min().copied().unwrap_or_default();
    let all_released = released.values().max().copied().unwrap_or_default();
    log(format!(
        "storm, limits raised: first released after {first_released:.1?}, all {STORM} after {all_released:.1?}"
    ));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (rss_after, _) = usage(world.coroner_pid(&replica).unwrap_or_default());
    Storm { admitted, queued: pending, queue_reads, first_released, all_released, rss_after, names, parallel_off }
}

/// One allocator's P2: resident memory 20 s after the start (the bindings verified) and 10 s after a
/// storm, and how long that storm took.
struct Allocator {
    name: &'static str,
    rss_idle: u64,
    rss_after: u64,
    all_released: Duration,
}

/// An allocator to measure: its name, the build (none given: skipped) and the environment it runs with.
type Variant = (&'static str, Option<std::path::PathBuf>, &'static [(&'static str, &'static str)]);

/// P2 by allocator: the raised-limits storm again on the same machines, once for each — glibc's (the
/// build as shipped), glibc's with `MALLOC_ARENA_MAX=2` or fixed thresholds, and mimalloc (`make bench` builds coroner
/// with its `mimalloc` feature into `CORONER_BIN_MIMALLOC`). Each replica stays up after its storm,
/// and the next storm's fences end the last one's releases first (their remediations deleted).
async fn allocators(world: &mut World, names: &[String]) -> (Vec<Allocator>, String) {
    let mimalloc = std::env::var_os("CORONER_BIN_MIMALLOC").map(std::path::PathBuf::from);
    let glibc = crate::world::coroner_binary();
    // The build as shipped last: P2 at scale is measured on its replica, after its storm.
    let variants: [Variant; 4] = [
        ("mimalloc", mimalloc, &[]),
        ("glibc, MALLOC_ARENA_MAX=2", Some(glibc.clone()), &[("MALLOC_ARENA_MAX", "2")]),
        // Fixed thresholds (glibc's own would rise to the largest block freed): a block of 32 KiB or
        // more is its own mapping, returned when freed, and a heap's free top is given back past 128 KiB.
        (
            "glibc, mmap_threshold 32 KiB, trim_threshold 128 KiB",
            Some(glibc.clone()),
            &[("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=32768:glibc.malloc.trim_threshold=131072")],
        ),
        ("glibc", Some(glibc), &[]),
    ];
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    let flags = [&QUIET[..], &RAISED[..]].concat();
    let (mut measured, mut last) = (Vec::new(), String::new());
    for (i, (name, binary, env)) in variants.into_iter().enumerate() {
        let Some(binary) = binary else {
            log(format!("allocator {name}: no build given (CORONER_BIN_MIMALLOC), skipped"));
            continue;
        };
        // The last storm's releases end, its machines are switched on and their nodes come back.
        let ours = |r: &CoronerRemediation| r.name_any().starts_with("storm-");
        for r in api.list(&Default::default()).await.unwrap().items.iter().filter(|r| ours(r)) {
            let _ = api.delete(&r.name_any(), &Default::default()).await;
        }
        wait_for("the last storm's remediations gone", Duration::from_secs(120), || async {
            let left = api.list(&Default::default()).await.ok()?.items;
            (!left.iter().any(ours)).then_some(())
        })
        .await;
        world.stop_coroners();
        for (n, node) in names.iter().enumerate() {
            let machine = &world.node(node).machine;
            if machine.power_state() != "On" {
                machine.fence_redfish("on", &storm_uuid(n));
            }
            world.node(node).heal();
        }
        for node in names {
            wait_for(&format!("{node} Ready"), Duration::from_secs(180), || async {
                (crate::ready(world, node).await.as_deref() == Some("True")).then_some(())
            })
            .await;
        }
        let replica = world.start_coroner_as(&flags, &binary, env);
        let pid = world.coroner_pid(&replica).unwrap_or_default();
        tokio::time::sleep(Duration::from_secs(20)).await;
        let (rss_idle, _) = usage(pid);
        for node in names {
            world.node(node).partition();
        }
        for node in names {
            wait_for(&format!("{node} Ready=Unknown"), Duration::from_secs(120), || async {
                (crate::ready(world, node).await.as_deref() == Some("Unknown")).then_some(())
            })
            .await;
        }
        let created = Instant::now();
        create_all(&api, names, &format!("allocator-{i}")).await;
        for node in names {
            wait_for(&format!("{node} released"), Duration::from_secs(300), || async {
                let keys = crate::taint_keys(world, node).await;
                keys.iter().any(|k| k == "node.kubernetes.io/out-of-service").then_some(())
            })
            .await;
        }
        let all_released = created.elapsed();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (rss_after, _) = usage(pid);
        log(format!(
            "allocator {name}: RSS {rss_idle} KiB idle, {rss_after} KiB after the storm (all released in {all_released:.1?})"
        ));
        measured.push(Allocator { name, rss_idle, rss_after, all_released });
        last = replica;
    }
    (measured, last)
}

/// Creates one remediation per node at once, as NodeHealthCheck does when they all turn unhealthy.
async fn create_all(api: &Api<CoronerRemediation>, names: &[String], tag: &str) {
    let create = names.iter().map(|name| {
        let remediation: CoronerRemediation = serde_json::from_value(json!({
            "apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediation",
            "metadata": {"name": format!("{name}-{tag}"), "namespace": CORONER_NS,
                         "annotations": {contract::NODE_NAME_ANNOTATION: name}},
            "spec": {"action": "Off", "remediationStrategy": "OutOfServiceTaint",
                     "powerOffTimeout": "60s", "leaseFreshness": "5s", "retry": {"count": 1, "interval": "1s"}},
        }))
        .unwrap();
        async move { api.create(&PostParams::default(), &remediation).await.unwrap() }
    });
    futures::future::join_all(create).await;
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

/// The systemUUID of the storm's `i`-th machine.
fn storm_uuid(i: usize) -> String {
    uuid(u32::try_from(400 + i).unwrap_or(400))
}

/// `fence_redfish --action ACTION` against each of the storm's machines at once, timed until the last
/// one exits.
fn fence_redfish_all(world: &World, names: &[String], action: &str) -> Duration {
    let started = Instant::now();
    let children: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| world.node(name).machine.spawn_fence_redfish(action, &storm_uuid(i)))
        .collect();
    for mut child in children {
        assert_eq!(child.wait().expect("fence_redfish ran").code(), Some(0), "fence_redfish --action {action} failed");
    }
    let elapsed = started.elapsed();
    log(format!("{} fence_redfish --action {action} at once: {:.1} s", names.len(), elapsed.as_secs_f64()));
    elapsed
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
