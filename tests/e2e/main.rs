//! End-to-end suite: coroner with the real NodeHealthCheck on a real control plane and emulated
//! machines. Run by `make e2e` (part of `make test`); `make demo` runs the demo mode.
//!
//! Scenarios (issue: "A real local control plane, …"):
//!   a. a partitioned node with a Deployment pod and a pod stuck Terminating is fenced, its pods move,
//!      it is powered on again and recovers; NHC deletes the remediation and coroner's taints go;
//!   b. a wrong mapping is refused and the escalated second coroner template is refused too;
//!   c. an unreachable BMC ends in Succeeded=False after retry.count attempts, nothing released;
//!   d. nhc-timed-out mid-fence stops all further BMC mutations;
//!   e. coroner killed while ConfirmingOff and restarted completes the fence, every reset after a read;
//!   f. over the whole run: taints follow proven power states, no Node deleted, no password in logs;
//!   g–m. Ready=False refused, control-plane quorum, storm limits, stale bindings, and a leader on the
//!      node to fence (waits alone, hands over to a replica elsewhere);
//!   n–o. admission's messages for bad bindings; bindings verified again when their Secret or CA
//!      bundle appears or changes, with TLS errors in words;
//!   p. machines whose BMC lost power with them: Succeeded=False, then an audited attestation releases
//!      one (forged attester and spec updates rejected by the API server; a renewing Lease and an
//!      expired attestation refused); its BMC back with the machine on and no approval, the guard
//!      proves the machine through the binding and switches it off; another's BMC back before an
//!      attestation: the fence's look finds the machine and releases on its own proof (Superseded);
//!   q. the out-of-service taint by hand: rejected for an ordinary admin, allowed for break-glass;
//!   r. the guard after the release: a machine fenced with Off and powered on behind coroner's back is
//!      switched off again; with `coroner.dev/power-on-approved` on the Node it is left on;
//!   s. bootID continuity: a BMC that lies (accepts ForceOff, does nothing, reads Off) gets its node
//!      released; back with its old bootID, it is `FenceDidNotTakeEffect` on the Node;
//!   k. the node labelled excluded after its release and before the `Reboot`'s `On` (a pod held by a
//!      finalizer keeps the fence waiting): no `On`, `PowerOnExcluded`, the out-of-service taint stays;
//!   t. the node labelled `remediation.medik8s.io/exclude-from-remediation` mid-fence (a slow BMC,
//!      between admission and the ForceOff): no reset at all, `NodeExcluded`;
//!   v. a machine whose BMC speaks only IPMI (ipmi_sim, its GUID in the IPMI layout) is fenced through
//!      NHC: its GUID proven in the session, powered down, released, powered up, back Ready;
//!   x. `kubectl coroner import-far --apply` reads FAR's templates and Secrets from the cluster and
//!      imports an IPMI node that then verifies;
//!   y. a settle (70 s) longer than coroner's BMC client lifetime, the Secret's metadata changed
//!      mid-run: one unbroken run from the ForceOff proves it;
//!   z. a `ResourceDeletion` release (no taint) is guarded: its machine powered on by hand is switched
//!      off again within the guard's bound.
//!
//! `make e2e ONLY=c,o` runs only those scenarios (by letter, see `SCENARIOS`), in the same world.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bench;
mod demo;
#[path = "../support/mod.rs"]
mod support;
mod timeline;
mod world;

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use coroner::{
    api::{CoronerAttestation, CoronerRemediation, CoronerRemediationTemplate, conditions},
    bmc::{Bmc, Credentials, Password, RedfishClient, RedfishConfig, ResetType, tls},
    contract,
};
use jiff::Timestamp;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use support::machine::{MachineSpec, PASSWORD, USER, peers};
use world::{CORONER_NS, World, log, wait_for};

const SHORT: Duration = Duration::from_secs(60);
const LONG: Duration = Duration::from_secs(180);

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if std::env::var("CORONER_E2E").as_deref() != Ok("1") {
        eprintln!("e2e: skipped (run it with `make e2e`, which builds and installs what it needs)");
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        match mode.as_str() {
            "demo" => demo::run().await,
            "bench" => bench::run().await,
            _ => suite().await,
        }
    });
    ExitCode::SUCCESS
}

fn uuid(n: u32) -> String {
    format!("5c0a1e00-0000-4000-8000-{n:012}")
}

/// A remediation's condition `type_` as (status, reason).
fn condition(remediation: &CoronerRemediation, type_: &str) -> Option<(String, String)> {
    let status = remediation.status.as_ref()?;
    conditions::find(&status.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

/// A remediation's `Succeeded` condition as (status, reason).
fn succeeded(remediation: &CoronerRemediation) -> Option<(String, String)> {
    condition(remediation, contract::SUCCEEDED)
}

fn phase(remediation: &CoronerRemediation) -> String {
    remediation.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str().to_owned()).unwrap_or_default()
}

/// Remediations for `node`, found by NHC's node-name annotation (never by name), oldest first.
async fn remediations(world: &World, node: &str) -> Vec<CoronerRemediation> {
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    // Polled thousands of times a run: a transient API error is retried, never read as "none".
    let mut attempt = 0;
    let items = loop {
        match api.list(&ListParams::default()).await {
            Ok(list) => break list.items,
            Err(error) if attempt < 20 => {
                attempt += 1;
                log(format!("listing remediations: {error}; retrying"));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(error) => panic!("listing remediations: {error}"),
        }
    };
    let mut list: Vec<_> = items.into_iter().filter(|r| contract::node_name(&r.metadata) == Some(node)).collect();
    list.sort_by_key(|r| r.metadata.creation_timestamp.clone().map(|t| t.0));
    list
}

async fn wait_remediation(
    world: &World,
    node: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&CoronerRemediation) -> bool,
) -> CoronerRemediation {
    wait_for(&format!("{node}: {what}"), timeout, || async {
        remediations(world, node).await.into_iter().find(|r| check(r))
    })
    .await
}

async fn wait_remediations_gone(world: &World, node: &str) {
    wait_for(&format!("{node}: NHC deletes the remediations"), LONG, || async {
        remediations(world, node).await.is_empty().then_some(())
    })
    .await;
}

async fn boot_id(world: &World, node: &str) -> String {
    world::node_object(&world.client, node)
        .await
        .and_then(|n| n.status?.node_info.map(|i| i.boot_id))
        .unwrap_or_default()
}

async fn ready(world: &World, node: &str) -> Option<String> {
    let node = world::node_object(&world.client, node).await?;
    coroner::fence::ready_status(&node).map(str::to_owned)
}

async fn taint_keys(world: &World, node: &str) -> Vec<String> {
    world::node_object(&world.client, node)
        .await
        .and_then(|n| n.spec?.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect()
}

/// The model of these scenarios: the fault was in the machine, so once its power is really off it is
/// gone and the machine comes back healthy when powered on. The partition is lifted only once the
/// remediation reads Succeeded=True: until then the node cannot report Ready, so NHC cannot delete
/// the remediation before the test has seen it succeed. Returns the succeeded remediation.
async fn heal_once_fenced(world: &World, node: &str) -> CoronerRemediation {
    wait_for(&format!("{node}: machine really off"), LONG, || async {
        (world.node(node).power_state() == "Off").then_some(())
    })
    .await;
    let fenced =
        wait_remediation(world, node, "Succeeded=True", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "True")).await;
    world.node(node).heal();
    fenced
}

fn bmc_client(world: &World, node: &str) -> RedfishClient {
    RedfishClient::new(RedfishConfig {
        endpoint: world.node(node).machine.endpoint(),
        trust: tls::Trust { ca_bundle_pem: Some(peers().pem("ca")), ..tls::Trust::default() },
        credentials: Credentials { username: USER.into(), password: Password::new(PASSWORD.into()) },
        request_timeout: Duration::from_secs(5),
        read_retries: 1,
        retry_backoff: Duration::from_millis(200),
    })
    .unwrap()
}

fn template(name: &str, spec: serde_json::Value) -> CoronerRemediationTemplate {
    serde_json::from_value(json!({
        "apiVersion": "coroner.dev/v1alpha1",
        "kind": "CoronerRemediationTemplate",
        "metadata": {"name": name, "namespace": CORONER_NS, "annotations": {contract::MULTIPLE_TEMPLATES_ANNOTATION: "true"}},
        "spec": {"template": {"spec": spec}},
    }))
    .unwrap()
}

fn template_ref(name: &str) -> serde_json::Value {
    json!({"apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediationTemplate", "name": name, "namespace": CORONER_NS})
}

const POOL: &str = "e2e.coroner.dev/pool";
/// Each node's own name as a label (the agent sets no kubernetes.io/hostname), for affinities.
const NAME: &str = "e2e.coroner.dev/name";

async fn setup(world: &mut World) {
    let templates: Api<CoronerRemediationTemplate> = Api::namespaced(world.client.clone(), CORONER_NS);
    // The Lease gate's window is shortened to the harness's 8 s node-monitor grace period.
    let quick = json!({"action": "Reboot", "powerOffTimeout": "20s", "releaseTimeout": "90s", "leaseFreshness": "5s", "retry": {"count": 2, "interval": "2s"}});
    for name in ["coroner-reboot", "coroner-primary", "coroner-secondary"] {
        templates.create(&PostParams::default(), &template(name, quick.clone())).await.unwrap();
    }
    let mut off = quick.clone();
    off["action"] = json!("Off");
    off["guard"] = json!("Enforce");
    templates.create(&PostParams::default(), &template("coroner-off", off.clone())).await.unwrap();
    // Scenario y: a settle longer than a BMC client's lifetime in coroner's cache (60 s).
    let mut long = off;
    long["settle"] = json!(format!("{}s", LONG_SETTLE.as_secs()));
    long["powerOffTimeout"] = json!("150s");
    long["guard"] = json!("Alert");
    templates.create(&PostParams::default(), &template("coroner-long-settle", long)).await.unwrap();
    // Scenario z: a ResourceDeletion release, guarded as any other.
    let mut deletion = quick.clone();
    deletion["action"] = json!("Off");
    deletion["guard"] = json!("Enforce");
    deletion["remediationStrategy"] = json!("ResourceDeletion");
    templates.create(&PostParams::default(), &template("coroner-off-deletion", deletion)).await.unwrap();
    world.start_nhc();
    world.restart_coroners(2, &[]);
    let nodes = [
        ("spare-1", 1, "main", 0.0),
        ("spare-2", 2, "main", 0.0),
        ("spare-3", 3, "spare", 0.0),
        ("a-1", 11, "main", 0.0),
        ("b-1", 21, "escalation", 0.0),
        ("c-1", 31, "main", 0.0),
        ("d-1", 41, "main", 3.0),
        ("e-1", 51, "main", 3.0),
        ("f-1", 61, "manual", 0.0),
        ("cp-1", 71, "control-plane", 0.0),
        ("cp-2", 72, "control-plane", 0.0),
        ("cp-3", 73, "control-plane", 0.0),
        ("s-1", 81, "storm", 3.0),
        ("s-2", 82, "storm", 3.0),
        ("s-3", 83, "storm", 3.0),
        ("s-4", 84, "storm", 3.0),
        ("s-5", 85, "storm", 3.0),
        ("x-1", 91, "main", 0.0),
        ("x-2", 92, "main", 0.0),
        ("x-3", 93, "main", 0.0),
        ("x-4", 94, "main", 0.0),
    ];
    for (name, n, pool, delay) in nodes {
        let role =
            if pool == "control-plane" { "node-role.kubernetes.io/control-plane" } else { "e2e.coroner.dev/worker" };
        world.add_node(name, &uuid(n), &[(POOL, pool), (NAME, name), (role, "")], delay).await;
    }
    // Machines whose BMC misbehaves as scenarios s and t need.
    let liar = MachineSpec { ignore_resets_report_off: true, ..MachineSpec::new(&uuid(101)) };
    let slow = MachineSpec { response_delay: SLOW_BMC_SECONDS, ..MachineSpec::new(&uuid(111)) };
    for (name, spec, pool) in [
        (GUARDED, MachineSpec::new(&uuid(95)), "off"),
        (LIAR, liar, "off"),
        (EXCLUDED, slow, "main"),
        (LONG_SETTLED, MachineSpec::new(&uuid(141)), "long-settle"),
        (DELETED_RELEASE, MachineSpec::new(&uuid(151)), "off-deletion"),
    ] {
        world.add_node_with(name, spec, &[(POOL, pool), (NAME, name), ("e2e.coroner.dev/worker", "")]).await;
    }
    for name in nodes.iter().map(|n| n.0).chain([GUARDED, LIAR, EXCLUDED, LONG_SETTLED, DELETED_RELEASE]) {
        wait_for(&format!("{name} Ready"), SHORT, || async {
            (ready(world, name).await.as_deref() == Some("True")).then_some(())
        })
        .await;
    }
    let unhealthy = json!([{"type": "Ready", "status": "Unknown", "duration": "2s"}]);
    world
        .create_nhc(json!({
            "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "metadata": {"name": "e2e-main"},
            "spec": {"selector": {"matchLabels": {POOL: "main"}}, "unhealthyConditions": unhealthy, "maxUnhealthy": 4,
                     "remediationTemplate": template_ref("coroner-reboot")},
        }))
        .await;
    world
        .create_nhc(json!({
            "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "metadata": {"name": "e2e-escalation"},
            "spec": {"selector": {"matchLabels": {POOL: "escalation"}}, "unhealthyConditions": unhealthy, "maxUnhealthy": 1,
                     "escalatingRemediations": [
                        {"remediationTemplate": template_ref("coroner-primary"), "order": 0, "timeout": "120s"},
                        {"remediationTemplate": template_ref("coroner-secondary"), "order": 1, "timeout": "120s"}]},
        }))
        .await;
    for (name, pool, max_unhealthy, template) in [
        ("e2e-control-plane", "control-plane", 2, "coroner-reboot"),
        ("e2e-storm", "storm", 5, "coroner-reboot"),
        ("e2e-off", "off", 2, "coroner-off"),
        ("e2e-long-settle", "long-settle", 1, "coroner-long-settle"),
        ("e2e-off-deletion", "off-deletion", 1, "coroner-off-deletion"),
    ] {
        world
            .create_nhc(json!({
                "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
                "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": {POOL: pool}}, "unhealthyConditions": unhealthy, "maxUnhealthy": max_unhealthy,
                         "remediationTemplate": template_ref(template)},
            }))
            .await;
    }
    log(format!(
        "world ready: {} machines, NHC (main, escalation, control-plane, storm, off, long-settle, off-deletion), coroner",
        world.nodes.len()
    ));
}

/// The scenarios in the order they run, by the letter `make e2e ONLY=…` names them with. Scenario f
/// (checks over the whole run) always runs last.
const SCENARIOS: [(char, &str); 28] = [
    ('a', "partitioned node fenced, pods moved, rebooted"),
    ('b', "wrong mapping refused, escalation refused too, and NHC skips a failed template"),
    ('c', "unreachable BMC fails after retry.count; once fixed, deleting it retries; uninstall refused while fenced"),
    ('d', "nhc-timed-out mid-fence stops BMC mutations"),
    ('e', "coroner killed mid-ConfirmingOff resumes"),
    ('g', "a Ready=False node is not fenced"),
    ('h', "control plane: one of three fenced, two of three not until one is back"),
    ('i', "storm limits: concurrency and window budgets"),
    ('j', "a stale binding is caught by periodic verification"),
    ('k', "a node excluded after its release and before the Reboot's On: no On, PowerOnExcluded, the taint stays"),
    ('l', "the leader never fences the node it runs on"),
    ('m', "a leader on the node to fence hands over to a replica elsewhere"),
    ('n', "admission explains bad bindings; a sample's openssl pin is accepted"),
    ('o', "a binding is verified again when its Secret or CA bundle appears or changes; TLS errors in words"),
    ('p', "BMC dead with its machine: released on an audited attestation, forgeries refused"),
    ('q', "the out-of-service taint and the approval by hand: ordinary admin rejected, break-glass allowed"),
    ('r', "the guard: a released machine powered on behind coroner's back is switched off, unless approved"),
    ('s', "bootID continuity: a lying BMC's node back with its old bootID is FenceDidNotTakeEffect"),
    ('t', "a node excluded mid-fence gets no reset: NodeExcluded"),
    ('u', "a leader stopped while its caches fill still exits"),
    ('v', "an IPMI machine (ipmi_sim) fenced through NHC: GUID proven, powered down, released, powered up"),
    ('w', "kubectl coroner verify: a good, a wrong-UUID, a wrong-CA and an unbound node; --all as JSON; exit codes"),
    (
        'x',
        "kubectl coroner import-far --apply: FAR templates from the cluster, credentials copied, the imported node verified",
    ),
    ('y', "a settle longer than a BMC client's lifetime, its Secret's metadata changed mid-run, is proven"),
    ('z', "a ResourceDeletion release is guarded: its machine powered on by hand is switched off again"),
    (
        'A',
        "a BMC dead with its machine: proven off through its two PDU outlets (level 2, SNMPv3) and released through NHC",
    ),
    ('B', "a ForceOff that never reaches Off: the PDU outlets finish the fence, the BMC losing its power with them"),
    (
        'C',
        "a level's outlet mapping confirmed by draws (L5): running and drawing, then off with the meter falling within settle",
    ),
];

/// `CORONER_E2E_ONLY=a,c` (`make e2e ONLY=a,c`): the scenarios to run; all when unset or empty.
fn selected() -> Vec<(char, &'static str)> {
    let only = std::env::var("CORONER_E2E_ONLY").unwrap_or_default();
    let wanted: Vec<char> = only.split([',', ' ']).filter_map(|s| s.trim().chars().next()).collect();
    let unknown: Vec<&char> = wanted.iter().filter(|c| !SCENARIOS.iter().any(|(id, _)| id == *c)).collect();
    assert!(unknown.is_empty(), "CORONER_E2E_ONLY names unknown scenarios {unknown:?}; known: {SCENARIOS:?}");
    SCENARIOS.into_iter().filter(|(id, _)| wanted.is_empty() || wanted.contains(id)).collect()
}

async fn suite() {
    let started = Instant::now();
    let scenarios = selected();
    let mut world = World::up().await;
    setup(&mut world).await;
    let mut timings = Vec::new();
    for (id, name) in scenarios {
        let name = format!("{id}: {name}");
        log(format!("=== scenario {name}"));
        let scenario_started = Instant::now();
        match id {
            'a' => scenario_a(&world).await,
            'b' => scenario_b(&world).await,
            'c' => scenario_c(&mut world).await,
            'd' => scenario_d(&world).await,
            'e' => scenario_e(&mut world).await,
            'g' => scenario_g(&world).await,
            'h' => scenario_h(&world).await,
            'i' => scenario_i(&mut world).await,
            'j' => scenario_j(&mut world).await,
            'k' => scenario_k(&world).await,
            'l' => scenario_l(&mut world).await,
            'm' => scenario_m(&mut world).await,
            'n' => scenario_n(&world).await,
            'o' => scenario_o(&mut world).await,
            'p' => scenario_p(&mut world).await,
            'q' => scenario_q(&world),
            'r' => scenario_r(&mut world).await,
            's' => scenario_s(&world).await,
            't' => scenario_t(&world).await,
            'u' => scenario_u(&mut world).await,
            'v' => scenario_v(&mut world).await,
            'w' => scenario_w(&mut world).await,
            'x' => scenario_x(&mut world).await,
            'y' => scenario_y(&world).await,
            'A' => scenario_pdu_level(&mut world).await,
            'B' => scenario_pdu_level_after_a_reset_that_never_took(&mut world).await,
            'C' => scenario_level_confirmed_by_draws(&mut world).await,
            _ => scenario_z(&mut world).await,
        }
        timings.push(format!("{name}: {:.1?}", scenario_started.elapsed()));
    }
    log("=== scenario f: checks over the whole run");
    scenario_f(&world);
    for line in &timings {
        log(line);
    }
    log(format!("e2e: all scenarios passed in {:.1?}", started.elapsed()));
}

async fn scenario_a(world: &World) {
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

async fn scenario_b(world: &World) {
    // b-1's binding points at spare-3's BMC: a wrong mapping.
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    // A merge patch: the periodic verification writes the binding's status meanwhile.
    let point_at = |machine: &str| json!({"spec": {"redfish": {"endpoint": world.node(machine).machine.endpoint()}}});
    bindings.patch("b-1", &PatchParams::default(), &Patch::Merge(point_at("spare-3"))).await.unwrap();
    let spare_before = world.node("spare-3").machine.requests().len();
    world.node("b-1").partition();
    let first = wait_remediation(world, "b-1", "first remediation refused", SHORT, |r| {
        succeeded(r).is_some_and(|s| s.0 == "False")
    })
    .await;
    // Two bindings reaching one BMC: both are unusable, whichever node is meant.
    assert_eq!(succeeded(&first).unwrap().1, "BindingConflict");
    assert_eq!(
        first.metadata.annotations.as_ref().unwrap().get("remediation.medik8s.io/template-name").map(String::as_str),
        Some("coroner-primary")
    );
    log(format!("b-1: {} refused: BindingConflict", first.name_any()));
    let second = wait_remediation(world, "b-1", "NHC escalates to the second template, refused too", SHORT, |r| {
        r.metadata.annotations.as_ref().and_then(|a| a.get("remediation.medik8s.io/template-name")).map(String::as_str)
            == Some("coroner-secondary")
            && succeeded(r).is_some_and(|s| s.0 == "False")
    })
    .await;
    assert!(second.name_any().starts_with("b-1-"), "multiple-templates-support: generateName <node>-");
    log(format!("b-1: escalated {} refused: {:?}", second.name_any(), succeeded(&second)));
    assert!(succeeded_message(&first).contains(contract::RETRY_LEVER), "{}", succeeded_message(&first));
    // The other lever, on NHC v0.12.0: with escalatingRemediations, a template that failed is marked
    // timed out for the node and skipped until the node is healthy, even once its remediation is gone.
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    api.delete(&first.name_any(), &Default::default()).await.unwrap();
    wait_for("the first remediation deleted", SHORT, || async {
        remediations(world, "b-1").await.iter().all(|r| r.uid() != first.uid()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after: Vec<String> = remediations(world, "b-1").await.iter().map(|r| r.name_any()).collect();
    assert_eq!(after, [second.name_any()], "NHC created a remediation again from a template that had failed");
    log(format!("b-1: {} deleted; NHC does not use coroner-primary again for b-1 (left: {after:?})", first.name_any()));
    let posts: Vec<_> = world
        .node("spare-3")
        .machine
        .requests()
        .into_iter()
        .skip(spare_before)
        .filter(|r| r.starts_with("POST"))
        .collect();
    assert_eq!(posts, Vec::<String>::new(), "the wrongly mapped machine got a power action");
    assert_eq!(world.node("spare-3").power_state(), "On");
    assert!(
        !taint_keys(world, "b-1")
            .await
            .iter()
            .any(|k| k.starts_with("coroner.dev/") || k == "node.kubernetes.io/out-of-service")
    );
    world.node("b-1").heal();
    wait_remediations_gone(world, "b-1").await;
    bindings.patch("b-1", &PatchParams::default(), &Patch::Merge(point_at("b-1"))).await.unwrap();
}

async fn scenario_c(world: &mut World) {
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

fn succeeded_message(remediation: &CoronerRemediation) -> String {
    remediation
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, contract::SUCCEEDED))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

async fn scenario_d(world: &World) {
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
async fn scenario_e(world: &mut World) {
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

/// A machine replaced behind a BmcBinding (same address, another UUID) is caught by the periodic
/// verification within one period, with an Event; putting the right machine back turns it good.
async fn scenario_j(world: &mut World) {
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let verified = |expected: &'static str, reason: &'static str| {
        let bindings = bindings.clone();
        async move {
            let binding = bindings.get_opt("spare-2").await.ok()??;
            let condition = conditions::find(&binding.status?.conditions, "IdentityVerified")?.clone();
            (condition.status == expected && (reason.is_empty() || condition.reason == reason)).then_some(condition)
        }
    };
    wait_for("spare-2 verified", LONG, || verified("True", "")).await;
    // Let the new leader's first round pass, so only the periodic check can catch the swap.
    let since = Timestamp::now();
    wait_for("spare-2 verified by the current leader", LONG, || {
        let bindings = bindings.clone();
        async move {
            let binding = bindings.get_opt("spare-2").await.ok()??;
            (binding.status?.last_verification_time?.0 > since).then_some(())
        }
    })
    .await;
    world.node_mut("spare-2").swap_bmc("5c0a1e00-0000-4000-8000-000000000999");
    let swapped = Instant::now();
    let condition =
        wait_for("spare-2 unverified: IdentityMismatch", SHORT, || verified("False", "IdentityMismatch")).await;
    log(format!(
        "spare-2: wrong machine behind the binding detected after {:.1?} (period 10s): {}",
        swapped.elapsed(),
        condition.message
    ));
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), CORONER_NS);
    wait_for("an IdentityMismatch Event", SHORT, || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.into_iter().find(|e| {
            e.reason.as_deref() == Some("IdentityMismatch")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("spare-2")
        })
    })
    .await;
    world.node_mut("spare-2").restart_bmc();
    wait_for("spare-2 verified again", SHORT, || verified("True", "")).await;
}

/// A single replica that runs on the node to fence (--node-name) and has no sibling to hand over to
/// waits with LeaderOnTargetNode and sends nothing; a replica elsewhere then fences the node.
async fn scenario_l(world: &mut World) {
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
async fn scenario_m(world: &mut World) {
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
async fn check_metrics(world: &World) {
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

/// A kubelet that reports NotReady is alive: a remediation for it (created by hand here, as NHC is
/// configured for Ready=Unknown only) is refused for good.
async fn scenario_g(world: &World) {
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
async fn scenario_h(world: &World) {
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

const STORM: [&str; 5] = ["s-1", "s-2", "s-3", "s-4", "s-5"];

/// Five partitioned workers: with --max-concurrent-fences 3 no more than three power actions overlap
/// (from the phase timestamps in status); with a window budget of 2, three stay Queued.
async fn scenario_i(world: &mut World) {
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

fn scenario_f(world: &World) {
    let events = timeline::node_events(&world.audit_log());
    let mut violations = Vec::new();
    for (name, node) in &world.nodes {
        if node.spec.ignore_resets_report_off {
            // Its BMC lies about power: no proof through it means anything (scenario s checks what
            // catches that afterwards).
            log(format!("f: {name} skipped: its BMC ignores resets and reads Off"));
            continue;
        }
        let power = timeline::power_changes(&node.machine.log());
        violations.extend(timeline::taints_follow_power(
            name,
            events.get(name).map(Vec::as_slice).unwrap_or_default(),
            &power,
        ));
    }
    let mut log_lines = 0;
    for path in world.coroner_logs() {
        let text = std::fs::read_to_string(&path).unwrap();
        log_lines += text.lines().count();
        if text.contains(PASSWORD) {
            violations.push(format!("the BMC password appears in {}", path.display()));
        }
        if text.contains('\u{1b}') {
            violations.push(format!("ANSI escape codes in {} (written to a file, not a terminal)", path.display()));
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
    let added: usize =
        events.values().flatten().filter(|e| matches!(e, timeline::NodeEvent::TaintAdded { .. })).count();
    log(format!(
        "f: {added} out-of-service taints, each added after a proven Off and removed before power-on; no Node deleted; no password in {log_lines} log lines"
    ));
}

const REASON: &str = "rack B PDU 2 failed at 10:02 and took x-1 and its BMC down; I unplugged it at 10:09 (INC-4711) — \"verbatim\"\nsecond line";

fn attestation_object(node: &str, uid: &str, attested_by: &str, valid_for: &str) -> CoronerAttestation {
    serde_json::from_value(json!({
        "apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerAttestation",
        "metadata": {"name": node, "namespace": CORONER_NS},
        "spec": {"nodeName": node, "nodeUID": uid, "reason": "the machine is dark; checked on site", "attestedBy": attested_by, "validFor": valid_for},
    }))
    .unwrap()
}

fn attestation_phase(a: &CoronerAttestation) -> &'static str {
    a.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str()).unwrap_or("")
}

fn released_condition(a: &CoronerAttestation) -> Option<(String, String)> {
    conditions::find(&a.status.as_ref()?.conditions, "Released").map(|c| (c.status.clone(), c.reason.clone()))
}

async fn wait_attestation(
    api: &Api<CoronerAttestation>,
    name: &str,
    what: &str,
    check: impl Fn(&CoronerAttestation) -> bool,
) -> CoronerAttestation {
    wait_for(&format!("attestation {name}: {what}"), SHORT, || async {
        api.get_opt(name).await.ok().flatten().filter(|a| check(a))
    })
    .await
}

/// `coroner attest …` as `kubeconfig`'s user: (exit status, stdout + stderr).
fn coroner_cli(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(support::machine::repo().join("target/debug/coroner"))
        .arg("attest")
        .args(args)
        .args(["--namespace", CORONER_NS, "--wait", "60s"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run coroner attest");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// `coroner approve NODE --reason REASON` as `kubeconfig`'s user: (exit status, stdout + stderr).
fn coroner_approve(kubeconfig: &std::path::Path, node: &str, reason: &str) -> (bool, String) {
    coroner_cli_as(kubeconfig, &["approve", node, "--reason", reason, "--namespace", CORONER_NS])
}

/// `coroner ARGS…` as `kubeconfig`'s user: (exit status, stdout + stderr).
fn coroner_cli_as(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(support::machine::repo().join("target/debug/coroner"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run coroner");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// `coroner verify ARGS` as `kubeconfig`'s user: (exit code, stdout, stderr).
fn coroner_verify(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(support::machine::repo().join("target/debug/coroner"))
        .arg("verify")
        .args(args)
        .args(["--namespace", CORONER_NS, "--timeout", "3m", "--kubeconfig"])
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run coroner verify");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// `kubectl coroner verify`, as a user bound only to the shipped coroner-viewer roles: the controller
/// reads the BMCs and answers in a CoronerVerification; the user needs no BMC credential.
async fn scenario_w(world: &mut World) {
    world.restart_coroners(2, &[]);
    world.kubectl(&["create", "clusterrolebinding", "carol-viewer", "--clusterrole=coroner-viewer", "--user=carol"]);
    world.kubectl(&[
        "create",
        "rolebinding",
        "carol-viewer",
        "-n",
        CORONER_NS,
        "--role=coroner-viewer",
        "--user=carol",
    ]);
    let carol = world.impersonating_kubeconfig("carol", &[]);
    // The apiserver's RBAC authorizer reads bindings from its informer cache: wait until both
    // bindings are seen before the first verify, or it may be refused (403) by a cache a moment old.
    wait_for("carol's viewer bindings are authorized", Duration::from_secs(30), || async {
        let may = |verb: &str, resource: &str, namespace: Option<&str>| {
            let mut args = vec!["auth", "can-i", verb, resource, "--as", "carol"];
            if let Some(ns) = namespace {
                args.extend(["-n", ns]);
            }
            // stdout first, then stderr's warnings ("nodes is not namespace scoped").
            world.kubectl_result(&args).1.lines().next().map(str::trim) == Some("yes")
        };
        let ready = may("create", "coronerverifications.coroner.dev", Some(CORONER_NS))
            && may("watch", "coronerverifications.coroner.dev", Some(CORONER_NS))
            && may("list", "nodes", None);
        ready.then_some(())
    })
    .await;
    let row = |out: &str, node: &str| {
        out.lines().find(|l| l.split_whitespace().next() == Some(node)).unwrap_or_default().to_owned()
    };

    let (code, out, err) = coroner_verify(&carol, &["spare-1", "spare-2"]);
    assert_eq!(code, 0, "both would be fenced:\n{out}{err}");
    assert!(row(&out, "spare-1").contains(" yes ") && row(&out, "spare-1").contains("Exact match"), "{out}");
    log(format!("verify spare-1 spare-2 (as carol, a viewer): exit 0\n{out}"));

    // A binding whose endpoint reaches another machine's BMC, one that trusts another CA, and a Node
    // no binding names.
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let endpoint = |machine: &str| json!({"spec": {"redfish": {"endpoint": world.node(machine).machine.endpoint()}}});
    bindings.patch("b-1", &PatchParams::default(), &Patch::Merge(endpoint("spare-3"))).await.unwrap();
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(world.client.clone(), CORONER_NS);
    let other = String::from_utf8(peers().pem("other-ca")).unwrap();
    let map =
        serde_json::from_value(json!({"metadata": {"name": "verify-other-ca"}, "data": {"ca.crt": other}})).unwrap();
    maps.create(&PostParams::default(), &map).await.unwrap();
    let trust =
        |name: &str| json!({"spec": {"tls": {"caBundleRef": {"kind": "ConfigMap", "name": name, "key": "ca.crt"}}}});
    bindings.patch("spare-2", &PatchParams::default(), &Patch::Merge(trust("verify-other-ca"))).await.unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.client.clone());
    let unbound: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": "unbound-1"}})).unwrap();
    nodes.create(&PostParams::default(), &unbound).await.unwrap();
    let (code, out, err) = coroner_verify(&carol, &["spare-1", "b-1", "spare-2", "unbound-1"]);
    assert_eq!(code, 1, "some would not be fenced:\n{out}{err}");
    assert!(row(&out, "spare-1").contains(" yes "), "{out}");
    for (node, why) in [("b-1", "NO"), ("spare-2", "NO"), ("unbound-1", "no BmcBinding")] {
        assert!(row(&out, node).contains(why), "{node}: {out}");
    }
    assert!(row(&out, "spare-2").to_lowercase().contains("certificate"), "the TLS failure in words: {out}");
    log(format!("verify with a wrong mapping, another CA and no binding: exit 1\n{out}"));

    let (code, out, err) = coroner_verify(&carol, &["--all", "-o", "json"]);
    assert_eq!(code, 1, "b-1 and spare-2 are still broken:\n{out}{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("JSON: {e}\n{out}"));
    let listed: Vec<&str> = answer["nodes"].as_array().unwrap().iter().filter_map(|n| n["node"].as_str()).collect();
    assert!(listed.contains(&"a-1") && listed.contains(&"spare-1"), "NHC e2e-main selects them: {listed:?}");
    assert!(!listed.contains(&"unbound-1"), "no NodeHealthCheck selects it: {listed:?}");
    let unselected = answer["unselected"].as_array().unwrap();
    assert!(unselected.iter().any(|n| n == "unbound-1"), "listed apart: {unselected:?}");
    log(format!("verify --all -o json: {} nodes selected, {} listed apart", listed.len(), unselected.len()));
    let (code, table, _) = coroner_verify(&carol, &["--all"]);
    log(format!("verify --all (as carol): exit {code}\n{table}"));

    let (code, _, err) = coroner_verify(&carol, &[]);
    assert_eq!(code, 2, "no node and no --all is a usage error: {err}");

    bindings.patch("b-1", &PatchParams::default(), &Patch::Merge(endpoint("b-1"))).await.unwrap();
    bindings.patch("spare-2", &PatchParams::default(), &Patch::Merge(trust("bmc-ca"))).await.unwrap();
    maps.delete("verify-other-ca", &Default::default()).await.unwrap();
    nodes.delete("unbound-1", &Default::default()).await.unwrap();
    let verifications: Api<coroner::api::CoronerVerification> = Api::namespaced(world.client.clone(), CORONER_NS);
    let kept = verifications.list(&ListParams::default()).await.unwrap().items;
    assert!(
        kept.iter().all(|v| v.status.as_ref().and_then(|s| s.completed_at.as_ref()).is_some()),
        "answered and kept an hour"
    );

    // An upgrade that did not apply the CRDs first: coroner acts on nothing and says why.
    let crd = "crd/coronerverifications.coroner.dev";
    let revision = coroner::api::SCHEMA_REVISION_ANNOTATION;
    world.kubectl(&["annotate", "--overwrite", crd, &format!("{revision}=1")]);
    world.stop_coroners();
    let replica = world.start_coroner(&[]);
    wait_for("a replica that says its CRDs are outdated", SHORT, || async {
        let metrics = world.coroners.iter().find(|r| r.name == replica)?.metrics().await;
        metrics.lines().any(|l| l == "coroner_crd_outdated 1").then_some(())
    })
    .await;
    let log_text = std::fs::read_to_string(world.dir.join(format!("{replica}.log"))).unwrap_or_default();
    assert!(
        log_text.contains("CrdOutdated") && !log_text.contains("became the leader"),
        "{replica} acted with old CRDs"
    );
    world.kubectl(&["annotate", "--overwrite", crd, &format!("{revision}={}", coroner::api::SCHEMA_REVISION)]);
    world.restart_coroners(2, &[]);
    log("an outdated CRD: the replica stayed out of the election and said CrdOutdated (coroner_crd_outdated 1)");
}

/// `kubectl coroner import-far --apply` against FAR templates in the cluster (FAR's CRD written from
/// its documented API): an IPMI template whose NodeHealthCheck selects an IPMI machine gets its
/// binding and its credentials (copied from FAR's shared Secret) and is verified; a Redfish one with
/// FAR's ssl-insecure gets its certificate pinned through the controller and is verified, but for a
/// BMC that does not answer; an unsupported agent is listed (exit 3). No credential is printed.
async fn scenario_x(world: &mut World) {
    let (node, redfish) = ("far-1", "far-2");
    world.add_ipmi_node(node, &uuid(131), coroner::ipmi::GuidLayout::Ipmi, &[(POOL, "far")]).await;
    world.add_node(redfish, &uuid(132), &[(POOL, "far-redfish")], 0.0).await;
    // As a FAR user has them: no coroner binding yet.
    for name in [node, redfish] {
        world.kubectl(&["delete", "-n", CORONER_NS, &format!("bmcbinding/{name}"), &format!("secret/{name}-bmc")]);
    }
    let redfish_port = world.node(redfish).machine.port.to_string();
    let crd = support::machine::repo().join("tests/e2e/far-template-crd.yaml");
    world.kubectl(&["apply", "-f", crd.to_str().unwrap()]);
    world.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/fenceagentsremediationtemplates.fence-agents-remediation.medik8s.io",
    ]);
    world.kubectl(&["create", "namespace", "far-system"]);
    let far_password = PASSWORD;
    world.kubectl(&[
        "create",
        "secret",
        "generic",
        "-n",
        "far-system",
        "far-shared",
        &format!("--from-literal=--username={USER}"),
        &format!("--from-literal=--password={far_password}"),
    ]);
    let port = world.ipmi_nodes[node].bmc.0.port.to_string();
    let templates = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "fence-agents-remediation.medik8s.io/v1alpha1", "kind": "FenceAgentsRemediationTemplate",
         "metadata": {"name": "far-ipmi", "namespace": "far-system"},
         "spec": {"template": {"spec": {"agent": "fence_ipmilan", "sharedSecretName": "far-shared",
                  "remediationStrategy": "OutOfServiceTaint",
                  "sharedparameters": {"--lanplus": "", "--ip": "127.0.0.1", "--action": "off"},
                  "nodeparameters": {"--ipport": {node: port}}}}}},
        {"apiVersion": "fence-agents-remediation.medik8s.io/v1alpha1", "kind": "FenceAgentsRemediationTemplate",
         "metadata": {"name": "far-redfish", "namespace": "far-system"},
         "spec": {"template": {"spec": {"agent": "fence_redfish", "sharedSecretName": "far-shared",
                  "sharedparameters": {"--ip": "127.0.0.1", "--ssl-insecure": "", "--action": "off"},
                  "nodeparameters": {"--ipport": {redfish: redfish_port, "far-4": "1"}}}}}},
        {"apiVersion": "fence-agents-remediation.medik8s.io/v1alpha1", "kind": "FenceAgentsRemediationTemplate",
         "metadata": {"name": "far-aws", "namespace": "far-system"},
         "spec": {"template": {"spec": {"agent": "fence_aws", "nodeparameters": {"--plug": {"far-3": "i-0abc"}}}}}},
    ]});
    let file = world.dir.join("far-templates.json");
    std::fs::write(&file, templates.to_string()).unwrap();
    world.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    world
        .create_nhc(json!({
            "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "metadata": {"name": "e2e-far"},
            "spec": {"selector": {"matchLabels": {POOL: "far"}},
                     "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "300s"}],
                     "remediationTemplate": {"apiVersion": "fence-agents-remediation.medik8s.io/v1alpha1",
                         "kind": "FenceAgentsRemediationTemplate", "namespace": "far-system", "name": "far-ipmi"}},
        }))
        .await;
    let output = std::process::Command::new(support::machine::repo().join("target/debug/coroner"))
        .args(["import-far", "--apply", "--far-namespace", "far-system", "--namespace", CORONER_NS, "--kubeconfig"])
        .arg(&world.kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run coroner import-far");
    let (out, err) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(3), "applied and verified, two templates need attention:\n{out}{err}");
    assert!(out.contains(&format!("applied BmcBinding {CORONER_NS}/{node} and its Secret {node}-bmc")), "{out}");
    let row = out.lines().find(|l| l.split_whitespace().next() == Some(node)).unwrap_or_default();
    assert!(row.contains(" yes "), "{node} verified through the imported binding:\n{out}{err}");
    // FAR's --ssl-insecure: the certificate is read through the controller and pinned; a BMC that does
    // not answer stays commented, with the command that reads its pin.
    assert!(out.contains(&format!("applied BmcBinding {CORONER_NS}/{redfish} and its Secret")), "{out}");
    let pinned = out.lines().find(|l| l.split_whitespace().next() == Some(redfish)).unwrap_or_default();
    assert!(pinned.contains(" yes ") && pinned.contains("pin"), "{redfish} verified through its pin:\n{out}{err}");
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let binding = bindings.get(redfish).await.unwrap();
    let how = binding.annotations().get("coroner.dev/pinned-at-first-contact").cloned().unwrap_or_default();
    assert!(how.contains("through the controller: verify out of band"), "{how}");
    assert!(out.contains("openssl s_client -connect 127.0.0.1:1 "), "far-4's BMC does not answer: {out}");
    assert!(out.contains("agent fence_aws is not supported"), "{out}");
    assert!(!out.contains(far_password) && !err.contains(far_password), "no credential printed");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let copied = secrets.get(&format!("{node}-bmc")).await.unwrap().data.unwrap_or_default();
    assert_eq!(copied.get("username").map(|v| v.0.as_slice()), Some(USER.as_bytes()), "copied from FAR's Secret");
    let templates: Api<coroner::api::CoronerRemediationTemplate> = Api::namespaced(world.client.clone(), CORONER_NS);
    let imported = templates.get("far-ipmi").await.unwrap().spec.template.spec;
    assert_eq!(
        (imported.action, imported.remediation_strategy),
        (coroner::api::FenceAction::Off, coroner::api::RemediationStrategy::OutOfServiceTaint)
    );
    log(format!("import-far --apply: exit 3; {node} imported from FAR's far-ipmi and verified\n{out}"));
    world.kubectl(&["delete", "nodehealthcheck", "e2e-far"]);
}

async fn events_about(
    world: &World,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), namespace);
    let list = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason) && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// Two machines lose power together with their BMCs. Both fences end with Succeeded=False. A user
/// with the attester role attests x-1 (the CLI): released, the reason verbatim in the evidence, the
/// taint owned by the remediation and removed by its finalizer once the machine is back and NHC
/// deletes it. The API server rejects an attestation naming another user and any change of a spec;
/// coroner refuses one for x-2 while its Lease renews, and one that expired.
async fn scenario_p(world: &mut World) {
    world.restart_coroners(2, &[]);
    let admin: Api<CoronerAttestation> = Api::namespaced(world.client.clone(), CORONER_NS);
    let alice_config = world.impersonating_kubeconfig("alice", &[]);
    let alice: Api<CoronerAttestation> = Api::namespaced(world::client_for(&alice_config).await, CORONER_NS);
    let bob: Api<CoronerAttestation> =
        Api::namespaced(world::client_for(&world.impersonating_kubeconfig("bob", &[])).await, CORONER_NS);
    let node_uid = |node: &str| {
        let node = node.to_owned();
        let client = world.client.clone();
        async move { world::node_object(&client, &node).await.and_then(|n| n.metadata.uid).unwrap() }
    };
    let (uid1, uid2, uid4) = (node_uid("x-1").await, node_uid("x-2").await, node_uid("x-4").await);

    // f-1 (no NodeHealthCheck selects it: its remediation is created as NHC would) gets another
    // password before its outage, so its binding was never verified with what its fence used (A2).
    let wrong = unverified_before_outage(world, "f-1").await;

    let dead = Instant::now();
    world.node_mut("x-1").lose_power();
    world.node_mut("x-2").lose_power();
    world.node_mut("x-3").lose_power();
    world.node_mut("x-4").lose_power();
    // x-3's Lease is renewed once while its fence runs (something on it half alive): FenceSawLife.
    wait_remediation(world, "x-3", "admitted", LONG, |r| {
        r.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p != coroner::api::Phase::Pending)
    })
    .await;
    renew_lease_once(world, "x-3").await;
    log("x-3: its Lease renewed once while its fence ran");
    let mut failed = Vec::new();
    for node in ["x-1", "x-2", "x-4"] {
        let r =
            wait_remediation(world, node, "Succeeded=False", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "False"))
                .await;
        assert_eq!(succeeded(&r).unwrap().1, "BmcUnreachable", "{node}");
        let progress = r.status.as_ref().unwrap().progress.clone().unwrap();
        assert!(progress.lease_renew_time_at_failure.is_some(), "{node}: the Lease at the failure is recorded");
        failed.push(r);
    }
    let fence_failed = dead.elapsed();
    log(format!("x-1, x-2: BMC dead → Succeeded=False (BmcUnreachable) after {fence_failed:.1?}; nothing released"));
    assert!(!taint_keys(world, "x-1").await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));

    // The attester cannot be forged: bob may create attestations, but not in alice's name.
    let forged = bob.create(&PostParams::default(), &attestation_object("x-1", &uid1, "alice", "15m")).await;
    let message = forged.expect_err("an attestation naming another user was admitted").to_string();
    assert!(message.contains("spec.attestedBy must name the user who creates the attestation: bob"), "{message}");
    log(format!("x-1: bob's attestation naming alice rejected by the API server: {message}"));

    // alice looks first (--dry-run creates nothing), then attests with the CLI: preconditions, what
    // will happen, coroner's verdict.
    let (ok, out) = coroner_cli(&alice_config, &["x-1", "--reason", REASON, "--dry-run"]);
    assert!(ok && out.contains("What happens:") && out.contains("nothing created"), "{out}");
    let of_x1 = || async {
        let all = admin.list(&ListParams::default()).await.unwrap().items;
        all.into_iter().filter(|a| a.spec.node_name == "x-1").collect::<Vec<_>>()
    };
    assert!(of_x1().await.is_empty(), "a dry run created an attestation");
    let attested = Instant::now();
    let (ok, out) = coroner_cli(&alice_config, &["x-1", "--reason", REASON]);
    assert!(ok, "coroner attest x-1 failed:\n{out}");
    for needle in
        ["as alice", "FenceEndedWithoutProof", "LeaseUnchangedSinceFence", "What happens:", "released: Released"]
    {
        assert!(out.contains(needle), "`{needle}` missing from:\n{out}");
    }
    let released_after = dead.elapsed();
    log(format!(
        "x-1: attested by alice and released {:.1?} after the attestation; BMC dead → released {released_after:.1?} (of which BMC dead → Succeeded=False {fence_failed:.1?})",
        attested.elapsed()
    ));
    // Its name is generated: a released attestation never blocks the node's next one.
    let attestation = of_x1().await.pop().expect("alice's attestation");
    let x1 = attestation.name_any();
    assert!(x1.starts_with("x-1-"), "{x1}");
    assert_eq!(attestation_phase(&attestation), "Released");
    assert_eq!(attestation.spec.attested_by, "alice");
    let released = attestation.status.as_ref().unwrap().released.clone().unwrap();
    let remediation = remediations(world, "x-1").await.pop().unwrap();
    assert_eq!(released.remediation, remediation.name_any());
    assert_eq!(succeeded(&remediation).unwrap(), ("False".into(), "BmcUnreachable".into()), "Succeeded stays False");
    let release = remediation.status.as_ref().unwrap().evidence.clone().unwrap().release.unwrap();
    assert_eq!(release.kind, coroner::api::ReleaseKind::OperatorAttested);
    let record = release.attestation.unwrap();
    assert_eq!((record.attested_by.as_str(), record.reason.as_str()), ("alice", REASON), "verbatim");
    assert_eq!(record.state, coroner::api::AttestedReleaseState::Released);
    assert!(release.taint_owned);
    // A4: its fence looked through the dead BMC once more first, and nothing answered.
    let look = remediation.status.as_ref().unwrap().evidence.clone().unwrap().attestation_look.unwrap();
    assert_eq!(
        (look.attestation_uid, look.found),
        (attestation.uid().unwrap(), Some(coroner::api::LookFound::NoAnswer))
    );
    let node = world::node_object(&world.client, "x-1").await.unwrap();
    assert!(coroner::taints::owns(&node, coroner::taints::CoronerTaint::OutOfService, &remediation.uid().unwrap()));
    // R3: the Event names the release an approval must name, as the confirmed record gives it.
    let id = coroner::guard::release_id(&remediation.uid().unwrap(), remediation.status.as_ref().unwrap()).unwrap();
    for (namespace, name) in [(CORONER_NS, remediation.name_any()), ("default", "x-1".to_owned())] {
        let events = events_about(world, namespace, &name, "OperatorAttested").await;
        assert!(
            events.iter().any(|e| e
                .note
                .as_deref()
                .is_some_and(|n| n.contains("rack B PDU 2") && n.contains(&format!("(release {id})")))),
            "{namespace}/{name}: {events:?}"
        );
    }

    // The spec never changes, not even for an admin; metadata stays writable. (alice may not update at all.)
    let mut edited = attestation.clone();
    edited.spec.reason = "something else".into();
    let denied = admin.replace(&x1, &PostParams::default(), &edited).await.expect_err("the admin changed the spec");
    assert!(denied.to_string().contains("never changes"), "{denied}");
    let error = alice.replace(&x1, &PostParams::default(), &edited).await.expect_err("alice changed the spec");
    assert!(error.to_string().contains("forbidden") || error.to_string().contains("never changes"), "{error}");
    let labelled = json!({"metadata": {"labels": {"incident": "INC-4711"}}});
    admin.patch(&x1, &PatchParams::default(), &Patch::Merge(&labelled)).await.expect("metadata stays writable");
    log(format!("x-1: a spec update rejected by the API server ({denied}); a label added"));

    // x-2's Lease renews (a kubelet half alive): refused, with its reason.
    let renewing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let renewer = {
        let (leases, renewing) = (
            Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(world.client.clone(), "kube-node-lease"),
            renewing.clone(),
        );
        tokio::spawn(async move {
            while renewing.load(std::sync::atomic::Ordering::Acquire) {
                if let Ok(mut lease) = leases.get("x-2").await {
                    lease.spec.get_or_insert_with(Default::default).renew_time =
                        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now()));
                    let _ = leases.replace("x-2", &PostParams::default(), &lease).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    alice.create(&PostParams::default(), &attestation_object("x-2", &uid2, "alice", "15m")).await.unwrap();
    let refused = wait_attestation(&admin, "x-2", "Refused", |a| attestation_phase(a) == "Refused").await;
    assert_eq!(released_condition(&refused).unwrap(), ("False".into(), "LeaseChangedSinceFence".into()));
    assert!(!events_about(world, CORONER_NS, "x-2", "LeaseChangedSinceFence").await.is_empty(), "a Warning Event");
    renewing.store(false, std::sync::atomic::Ordering::Release);
    renewer.await.unwrap();
    assert!(!taint_keys(world, "x-2").await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    log("x-2: attestation while its Lease renews refused (LeaseChangedSinceFence); nothing released");

    let (ok, out) = coroner_cli(&alice_config, &["x-2"]);
    assert!(!ok && out.contains("--reason"), "attest without --reason:\n{out}");
    let (ok, out) = coroner_cli(&alice_config, &["x-2", "--clear"]);
    assert!(ok && out.contains("nothing was released"), "{out}");

    // An attestation that expired before coroner saw it is refused.
    world.restart_coroners(0, &[]);
    alice.create(&PostParams::default(), &attestation_object("x-2", &uid2, "alice", "1s")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    world.restart_coroners(2, &[]);
    let expired = wait_attestation(&admin, "x-2", "Refused", |a| attestation_phase(a) == "Refused").await;
    assert_eq!(released_condition(&expired).unwrap(), ("False".into(), "AttestationExpired".into()));
    admin.delete("x-2", &Default::default()).await.unwrap();
    log("x-2: an expired attestation refused (AttestationExpired)");

    // x-3: its fence saw its Lease renewed, so an attestation is refused (FenceSawLife) and says how
    // an attester who accepts that evidence may say so; with that acknowledgement it releases, and the
    // acknowledgement is in the record, the Event and the override metric.
    wait_remediation(world, "x-3", "Succeeded=False", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "False")).await;
    let reason = "x-3 unplugged at 10:12 after its PSU failed (INC-4712)";
    let (ok, out) = coroner_cli(&alice_config, &["x-3", "--reason", reason]);
    assert!(!ok && out.contains("FenceSawLife") && out.contains("--acknowledge FenceSawLife="), "{out}");
    let acknowledgement = out
        .split("--acknowledge ")
        .nth(1)
        .and_then(|rest| rest.split([',', ' ', '\n']).next())
        .expect("the refusal prints the acknowledgement")
        .to_owned();
    log(format!("x-3: attestation refused (FenceSawLife); it prints --acknowledge {acknowledgement}"));
    let (ok, out) = coroner_cli(&alice_config, &["x-3", "--reason", reason, "--acknowledge", &acknowledgement]);
    assert!(ok && out.contains("released"), "coroner attest x-3 --acknowledge failed:\n{out}");
    let remediation3 = remediations(world, "x-3").await.pop().unwrap();
    let release3 = remediation3.status.as_ref().unwrap().evidence.clone().unwrap().release.unwrap();
    let acknowledged = release3.attestation.unwrap().acknowledged;
    assert_eq!(acknowledged.len(), 1, "{acknowledged:?}");
    assert_eq!(acknowledged[0].reason, coroner::api::AcknowledgedReason::FenceSawLife);
    let events = events_about(world, CORONER_NS, &remediation3.name_any(), "OperatorAttested").await;
    assert!(events.iter().any(|e| e.note.as_deref().is_some_and(|n| n.contains("FenceSawLife"))), "{events:?}");
    let overrides = metric(world, "coroner_safety_overrides_total{kind=\"AcknowledgedFenceSawLife\"}").await;
    assert_eq!(overrides, 1.0);
    log(format!(
        "x-3: attested with --acknowledge {acknowledgement}: released, the acknowledgement recorded, in the Event and counted"
    ));

    // x-4 (A4): its BMC answers again after its fence failed, its machine on with it, and alice, who
    // does not know, attests: the fence's look finds the machine, proves it off through the BMC and
    // releases on that proof; the attestation is superseded.
    // Its network still cut (the kubelet silent), the BMC back with its machine on.
    world.node("x-4").partition();
    let machine = world.node("x-4");
    machine.note(json!({"event": timeline::BY_HAND, "system": machine.spec.systems[0].1, "reset_type": "On"}));
    world.node_mut("x-4").restart_bmc();
    alice.create(&PostParams::default(), &attestation_object("x-4", &uid4, "alice", "15m")).await.unwrap();
    let superseded = wait_attestation(&admin, "x-4", "Refused", |a| attestation_phase(a) == "Refused").await;
    assert_eq!(released_condition(&superseded).unwrap(), ("False".into(), "Superseded".into()));
    let proven = wait_remediation(world, "x-4", "released on the proof taken again", LONG, |r| {
        r.status.as_ref().and_then(|s| s.evidence.as_ref()?.release.as_ref()).is_some()
    })
    .await;
    let evidence = proven.status.as_ref().unwrap().evidence.clone().unwrap();
    assert_eq!(evidence.release.unwrap().kind, coroner::api::ReleaseKind::BmcProof);
    assert_eq!(evidence.attestation_look.unwrap().found, Some(coroner::api::LookFound::ProvingAgain));
    assert!(!events_about(world, CORONER_NS, &proven.name_any(), coroner::fence::LOOK_ANSWERED).await.is_empty());
    log(
        "x-4: its BMC back with the machine on after the fence failed; an attestation's look found the machine: proven off through the BMC and released on that proof, the attestation Superseded",
    );
    admin.delete("x-4", &Default::default()).await.unwrap();

    // f-1: its fence failed like x-1's (its BMC dead), but the binding it used was not the one
    // verified: refused BindingUnverified, saying what changed and which acknowledgement would do.
    wait_remediation(world, "f-1", "Succeeded=False", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "False")).await;
    let (ok, out) = coroner_cli(&alice_config, &["f-1", "--reason", "f-1 unplugged (INC-4713)"]);
    assert!(
        !ok && out.contains("BindingUnverified")
            && out.contains("credentials or CA bundle changed")
            && out.contains("--acknowledge BindingUnverified="),
        "{out}"
    );
    assert!(!taint_keys(world, "f-1").await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    log("f-1: its Secret changed before the outage: attestation refused (BindingUnverified, credentials changed)");
    wrong.restore(world).await;

    // The guard watches x-1 as after any release; nothing proved which system is x-1's, and its BMC
    // is dead: blind, never taken for Off.
    let blind = wait_remediation(world, "x-1", "Guard=Unknown GuardBlind", SHORT, |r| {
        condition(r, coroner::guard::GUARD) == Some(("Unknown".into(), coroner::guard::BLIND.into()))
    })
    .await;
    assert!(blind.status.as_ref().unwrap().evidence.as_ref().unwrap().identity.is_none());
    log("x-1: the guard watches the attested release: GuardBlind while its BMC is dead");

    // R2 for an attested release: x-1's BMC answers again with its machine on (its kubelet still cut
    // off), and nobody approved: the guard proves through the binding which system is x-1's, then
    // switches it off within its bound.
    let interval = format!("{}s", GUARD_INTERVAL.as_secs());
    world.restart_coroners(2, &["--guard-interval", &interval]);
    world.node("x-1").partition();
    let machine = world.node("x-1");
    machine.note(json!({"event": timeline::BY_HAND, "system": machine.spec.systems[0].1, "reset_type": "On"}));
    world.node_mut("x-1").restart_bmc();
    let on = Instant::now();
    wait_for("x-1: the attested release's machine switched off by the guard", SHORT, || async {
        (resets(world, "x-1", "ForceOff") == 1 && world.node("x-1").power_state() == "Off").then_some(())
    })
    .await;
    let off_again = on.elapsed();
    let name = remediation.name_any();
    wait_for("x-1: a GuardForceOffSent Event", SHORT, || async {
        events_about(world, CORONER_NS, &name, "GuardForceOffSent").await.pop()
    })
    .await;
    assert!(!events_about(world, CORONER_NS, &name, "GuardIdentityVerified").await.is_empty(), "identity first");
    log(format!(
        "x-1: its BMC back with the machine on, not approved → GuardIdentityVerified, then switched off by the guard {off_again:.1?} after the BMC came back (guard interval {interval})"
    ));

    // The machines come back: NHC deletes the remediations, the finalizer removes the attested taint.
    // x-1 is released, so its return is approved first (docs/operations.md), or the guard would
    // switch it off again; the finalizer removes the approval too.
    let (ok, out) = coroner_approve(&world.kubeconfig, "x-1", "x-1 back after INC-4711");
    assert!(ok, "coroner approve: {out}");
    world.node("x-1").heal();
    power_on_by_hand(world, "x-1").await;
    world.node_mut("x-2").restart_bmc();
    // x-4's Reboot switched it on again after its release: its network back, it rejoins.
    world.node("x-4").heal();
    let (ok, out) = coroner_approve(&world.kubeconfig, "x-3", "x-3 back after INC-4712");
    assert!(ok, "coroner approve: {out}");
    world.node_mut("x-3").restart_bmc();
    for node in ["x-1", "x-2", "x-3", "x-4", "f-1"] {
        wait_remediations_gone(world, node).await;
    }
    let keys = taint_keys(world, "x-1").await;
    assert!(
        !keys.iter().any(|k| k == "node.kubernetes.io/out-of-service" || k.starts_with("coroner.dev/")),
        "{keys:?}"
    );
    let annotations = world::node_object(&world.client, "x-1").await.unwrap().metadata.annotations.unwrap_or_default();
    assert!(!annotations.keys().any(|k| k.starts_with("coroner.dev/")), "{annotations:?}");
    assert_eq!(attestation_phase(&admin.get(&x1).await.unwrap()), "Released", "the record stays");
    let (ok, out) = coroner_cli(&alice_config, &["x-1", "--clear"]);
    assert!(ok && out.contains("stays as the record") && out.contains("stays released"), "{out}");
    // The record outlives its remediation: people may not delete it, a namespace deletion may.
    let denied = admin.delete(&x1, &Default::default()).await.expect_err("the admin deleted a released attestation");
    assert!(denied.to_string().contains("is the record of a release no device"), "{denied}");
    assert_eq!(attestation_phase(&admin.get(&x1).await.unwrap()), "Released");
    records_go_with_their_namespace(world, &uid1).await;
    log(
        "x-1: back and healthy; NHC deleted the remediation and its finalizer the taint; the attestation stays as the record (its deletion denied); a namespace holding a released one is deleted",
    );
}

/// A node whose binding's Secret was given a wrong password before its outage, fenced by a remediation
/// created by hand once it is `Ready=Unknown`.
struct Unverified(&'static str);

/// Gives `node`'s Secret a wrong password, waits until the verifier has tried it (so coroner's
/// clients are built from it), then the machine loses power with its BMC and a remediation is
/// created for it as NHC would.
async fn unverified_before_outage(world: &mut World, node: &'static str) -> Unverified {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let wrong = json!({"stringData": {"password": "mistyped"}});
    secrets.patch(&format!("{node}-bmc"), &PatchParams::default(), &Patch::Merge(&wrong)).await.unwrap();
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    wait_for(&format!("{node}: the verifier tried the new password"), SHORT, || async {
        let status = bindings.get(node).await.ok()?.status?;
        let verified = status.conditions.iter().find(|c| c.type_ == "IdentityVerified")?;
        (verified.reason == "BmcAuthenticationFailed").then_some(())
    })
    .await;
    world.node_mut(node).lose_power();
    wait_for(&format!("{node} Ready=Unknown"), LONG, || async {
        (ready(world, node).await.as_deref() == Some("Unknown")).then_some(())
    })
    .await;
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    let remediation: CoronerRemediation = serde_json::from_value(json!({
        "apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediation",
        "metadata": {"generateName": format!("{node}-"), "namespace": CORONER_NS, "annotations": {contract::NODE_NAME_ANNOTATION: node}},
        "spec": {"action": "Reboot", "powerOffTimeout": "20s", "leaseFreshness": "5s", "retry": {"count": 2, "interval": "2s"}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &remediation).await.unwrap();
    log(format!(
        "{node}: its Secret given a wrong password (the verifier failed on it), then power lost; a remediation created"
    ));
    Unverified(node)
}

impl Unverified {
    /// The right password back, the machine and its BMC back, the remediation deleted.
    async fn restore(self, world: &mut World) {
        let node = self.0;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
        let right = json!({"stringData": {"password": PASSWORD}});
        secrets.patch(&format!("{node}-bmc"), &PatchParams::default(), &Patch::Merge(&right)).await.unwrap();
        world.node_mut(node).restart_bmc();
        power_on_by_hand(world, node).await;
        let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
        for r in remediations(world, node).await {
            api.delete(&r.name_any(), &Default::default()).await.unwrap();
        }
    }
}

/// Something on `node` renews its Lease once, as a half-alive kubelet would.
async fn renew_lease_once(world: &World, node: &str) {
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(world.client.clone(), "kube-node-lease");
    let mut lease = leases.get(node).await.unwrap();
    lease.spec.get_or_insert_with(Default::default).renew_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now()));
    leases.replace(node, &PostParams::default(), &lease).await.unwrap();
}

/// A released attestation in a namespace being deleted: the namespace controller may delete it (the
/// record policy exempts it), so the deletion completes.
async fn records_go_with_their_namespace(world: &World, node_uid: &str) {
    let ns = "coroner-records";
    world.kubectl(&["create", "namespace", ns]);
    let api: Api<CoronerAttestation> = Api::namespaced(world.client.clone(), ns);
    let mut record = attestation_object("x-1", node_uid, "harness-admin", "15m");
    record.metadata.namespace = Some(ns.into());
    let created = api.create(&PostParams::default(), &record).await.expect("an attestation, as the admin");
    let status = json!({"status": {"phase": "Released"}});
    api.patch_status(&created.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await.expect("Released");
    assert!(api.delete(&created.name_any(), &Default::default()).await.is_err(), "a person deleted the record");
    world.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(world.client.clone());
    wait_for("the namespace holding a released attestation deleted", SHORT, || async {
        namespaces.get_opt(ns).await.ok().and_then(|n| n.is_none().then_some(()))
    })
    .await;
}

/// SIGTERM right after a replica became the leader, before its controllers' caches filled: it exits
/// (kube-runtime alone would wait for stores that nothing feeds any more). `stop_coroners` fails the
/// scenario if a replica outlives its bound. Once: the 5-ms poll meets the window every time.
async fn scenario_u(world: &mut World) {
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

/// The out-of-service taint by hand: the guard policy rejects an ordinary admin (even system:masters)
/// and admits the break-glass group. NoSchedule, so nothing on spare-1 is evicted; removal is free.
fn scenario_q(world: &World) {
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

/// What the API server answers a new user's mistakes with: each of the CRD's CEL rules names the
/// field and shows a right value (server-side dry runs; nothing is stored).
async fn scenario_n(world: &World) {
    let binding = |name: &str, redfish: serde_json::Value, tls: serde_json::Value| {
        json!({"apiVersion": "coroner.dev/v1alpha1", "kind": "BmcBinding",
               "metadata": {"name": name, "namespace": CORONER_NS},
               "spec": {"nodeName": "n-1", "redfish": redfish, "credentialsSecretRef": {"name": "n-1-bmc"}, "tls": tls}})
    };
    let pin = json!({"certificateSHA256": peers().pin("leaf")});
    let cases = [
        (
            binding("n-http", json!({"endpoint": "http://10.0.0.12/redfish/v1"}), pin.clone()),
            "endpoint must be an https URL",
        ),
        (
            binding("n-userinfo", json!({"endpoint": "https://admin:pw@10.0.0.12"}), pin.clone()),
            "endpoint must not carry credentials",
        ),
        (
            binding(
                "n-uri",
                json!({"endpoint": "https://10.0.0.12", "systemId": "/redfish/v1/Systems/1"}),
                pin.clone(),
            ),
            "systemId is the last path segment of the system's URI, e.g. 1 or System.Embedded.1",
        ),
        (
            binding("n-pin", json!({"endpoint": "https://10.0.0.12"}), json!({"certificateSHA256": "4f:8e"})),
            "certificateSHA256 is the SHA-256 of the BMC's certificate",
        ),
    ];
    for (i, (object, message)) in cases.iter().enumerate() {
        let file = world.dir.join(format!("n-{i}.json"));
        std::fs::write(&file, object.to_string()).unwrap();
        let (accepted, output) = world.kubectl_result(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
        assert!(!accepted && output.contains(message), "{object}: expected {message:?}, got:\n{output}");
        log(format!("n: {} refused: {}", object["metadata"]["name"], output.lines().last().unwrap_or_default()));
    }
    // IPMI bindings: exactly one kind, no TLS, cipher suite 3 only; a good one is accepted.
    let ipmi = |name: &str, spec: serde_json::Value| {
        let mut spec = spec;
        spec["nodeName"] = json!("n-1");
        spec["credentialsSecretRef"] = json!({"name": "n-1-bmc"});
        json!({"apiVersion": "coroner.dev/v1alpha1", "kind": "BmcBinding",
               "metadata": {"name": name, "namespace": CORONER_NS}, "spec": spec})
    };
    let ipmi_cases = [
        (ipmi("n-none", json!({})), Some("set exactly one of spec.redfish")),
        (
            ipmi(
                "n-both",
                json!({"redfish": {"endpoint": "https://10.0.0.12"}, "ipmi": {"address": "10.0.0.13"}, "tls": pin}),
            ),
            Some("set exactly one of spec.redfish"),
        ),
        (ipmi("n-ipmi-tls", json!({"ipmi": {"address": "10.0.0.13"}, "tls": pin})), Some("an IPMI BMC speaks no TLS")),
        (ipmi("n-suite", json!({"ipmi": {"address": "10.0.0.13", "cipherSuite": 17}})), Some("cipherSuite must be 3")),
        (
            ipmi("n-redfish-no-tls", json!({"redfish": {"endpoint": "https://10.0.0.12"}})),
            Some("set spec.tls.caBundleRef"),
        ),
        (ipmi("n-ipmi", json!({"ipmi": {"address": "10.0.0.13", "port": 6230, "privilege": "Operator"}})), None),
    ];
    for (i, (object, message)) in ipmi_cases.iter().enumerate() {
        let file = world.dir.join(format!("n-ipmi-{i}.json"));
        std::fs::write(&file, object.to_string()).unwrap();
        let (accepted, output) = world.kubectl_result(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
        match message {
            Some(message) => {
                assert!(!accepted && output.contains(message), "{object}: expected {message:?}, got:\n{output}")
            }
            None => assert!(accepted, "{object} refused:\n{output}"),
        }
    }
    log("n: IPMI bindings: exactly one kind, no TLS, cipher suite 3; a good one accepted");
    // The sample as shipped: its pin is openssl's line as printed, accepted as is.
    let sample = coroner_repo_path("config/samples/bmc_binding.yaml");
    let (accepted, output) = world.kubectl_result(&["apply", "--dry-run=server", "-f", &sample]);
    assert!(accepted, "config/samples/bmc_binding.yaml refused:\n{output}");
    // A bare Off is a boolean: the type error comes before any rule (hence the warnings in the docs).
    let bare_off = world.dir.join("n-bare-off.yaml");
    std::fs::write(
        &bare_off,
        format!(
            "apiVersion: coroner.dev/v1alpha1\nkind: CoronerRemediationTemplate\nmetadata: {{name: n-off, namespace: {CORONER_NS}}}\nspec: {{template: {{spec: {{action: off}}}}}}\n"
        ),
    )
    .unwrap();
    let (accepted, output) = world.kubectl_result(&["apply", "--dry-run=server", "-f", bare_off.to_str().unwrap()]);
    assert!(!accepted && output.contains("action") && output.contains("string"), "{output}");
    log(format!("n: a bare `action: off` is refused as a type error: {}", output.lines().last().unwrap_or_default()));
}

fn coroner_repo_path(path: &str) -> String {
    support::machine::repo().join(path).display().to_string()
}

/// A binding is verified again as soon as the Secret or CA bundle it names appears or changes (the
/// replicas run with a 10-minute verify period here, so only the watch can explain it), and its
/// conditions say exactly what the TLS and the credentials are doing.
async fn scenario_o(world: &mut World) {
    world.restart_coroners(2, &["--verify-interval", "10m"]);
    let name = "spare-1";
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(world.client.clone(), CORONER_NS);
    let conditions_of = |type_: &'static str| {
        let bindings = bindings.clone();
        async move {
            let binding = bindings.get_opt(name).await.ok()??;
            let condition = conditions::find(&binding.status.as_ref()?.conditions, type_)?.clone();
            Some((binding, condition))
        }
    };
    // (condition, status, reason, message fragment) must all hold on the current generation.
    let expect = |what: &'static str, wanted: Vec<(&'static str, &'static str, &'static str, String)>| {
        let conditions_of = &conditions_of;
        async move {
            let found = wait_for(&format!("{name}: {what}"), SHORT, || {
                let wanted = wanted.clone();
                async move {
                    let mut found = Vec::new();
                    for (type_, status, reason, fragment) in wanted {
                        let (binding, c) = conditions_of(type_).await?;
                        let current = c.observed_generation == binding.metadata.generation;
                        (current && c.status == status && c.reason == reason && c.message.contains(&fragment))
                            .then_some(())?;
                        found.push(format!("{type_}={status} {reason}: {}", c.message));
                    }
                    Some(found)
                }
            })
            .await;
            log(format!("{name}: {what}: {}", found.join(" | ")));
        }
    };
    let verified = || {
        vec![
            ("IdentityVerified", "True", "UuidMatched", String::new()),
            ("Reachable", "True", "Answered", String::new()),
            ("TLSVerified", "True", "Verified", "ConfigMap".to_owned()),
        ]
    };
    expect("verified", verified()).await;
    let binding = bindings.get(name).await.unwrap();
    let status = binding.status.clone().unwrap();
    assert_eq!(status.power_state.as_deref(), Some("On"), "{status:?}");
    assert!(status.last_power_check_time.is_some(), "{status:?}");
    // A2: the content it was verified with, as a keyed digest (nothing of the password readable).
    let content = status.verified_content.clone().unwrap_or_default();
    assert!(content.len() == 16 && content.chars().all(|c| c.is_ascii_hexdigit()), "{status:?}");
    // A2: kept beyond the binding object too, sealed, under the node's name (RBAC: create, patch).
    let node = binding.spec.node_name.clone();
    let kept = wait_for("the verification kept beyond the binding", SHORT, || {
        let (maps, node) = (maps.clone(), node.clone());
        async move {
            let map = maps.get_opt(coroner::verification::KEPT_VERIFICATIONS).await.ok()??;
            coroner::verification::KeptVerification::parse(map.data?.get(&node)?)
        }
    })
    .await;
    assert_eq!((kept.content.as_str(), Some(&kept.uid)), (content.as_str(), binding.metadata.uid.as_ref()), "{kept:?}");
    let table = world.kubectl(&["get", "bmcb", name, "-n", CORONER_NS]);
    assert!(table.contains("REASON") && table.contains("LAST CHECKED") && table.contains("UuidMatched"), "{table}");

    // The Secret appears after the binding that names it.
    let patch = |body: serde_json::Value| {
        let bindings = bindings.clone();
        async move { bindings.patch(name, &PatchParams::default(), &Patch::Merge(&body)).await.unwrap() }
    };
    patch(json!({"spec": {"credentialsSecretRef": {"name": "o-rotated"}}})).await;
    expect(
        "Secret missing",
        vec![
            ("IdentityVerified", "False", "BindingInvalid", "o-rotated".to_owned()),
            ("Reachable", "Unknown", "NotContacted", String::new()),
            ("TLSVerified", "Unknown", "NoHandshake", String::new()),
        ],
    )
    .await;
    assert_eq!(bindings.get(name).await.unwrap().status.unwrap().power_state, None, "no power without identity");
    let secret = |password: &str| -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(
            json!({"metadata": {"name": "o-rotated"}, "stringData": {"username": USER, "password": password}}),
        )
        .unwrap()
    };
    secrets.create(&PostParams::default(), &secret(PASSWORD)).await.unwrap();
    expect("the Secret appeared: verified at once", verified()).await;

    // A password rotation that went wrong, then right: the cached client is dropped both times.
    secrets
        .replace("o-rotated", &PostParams::default(), &{
            let mut s = secret("wrong-password");
            s.metadata.resource_version = secrets.get("o-rotated").await.unwrap().metadata.resource_version;
            s
        })
        .await
        .unwrap();
    expect(
        "wrong password",
        vec![
            ("Reachable", "False", "BmcAuthenticationFailed", String::new()),
            ("TLSVerified", "True", "Verified", String::new()),
        ],
    )
    .await;
    secrets
        .replace("o-rotated", &PostParams::default(), &{
            let mut s = secret(PASSWORD);
            s.metadata.resource_version = secrets.get("o-rotated").await.unwrap().metadata.resource_version;
            s
        })
        .await
        .unwrap();
    expect("password fixed", verified()).await;

    // The CA bundle appears with the wrong CA, then is corrected.
    patch(json!({"spec": {"tls": {"caBundleRef": {"kind": "ConfigMap", "name": "o-ca", "key": "ca.crt"}}}})).await;
    expect("CA bundle missing", vec![("IdentityVerified", "False", "BindingInvalid", "o-ca".to_owned())]).await;
    let map = |pem: &str| -> k8s_openapi::api::core::v1::ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "o-ca"}, "data": {"ca.crt": pem}})).unwrap()
    };
    let wrong = String::from_utf8(peers().pem("other-ca")).unwrap();
    maps.create(&PostParams::default(), &map(&wrong)).await.unwrap();
    expect(
        "wrong CA",
        vec![(
            "TLSVerified",
            "False",
            "BmcTlsVerificationFailed",
            "is issued by CN=coroner-test-bmc-ca, which is not a CA in ConfigMap o-ca (key ca.crt) (it holds CN=coroner-unrelated-ca)"
                .to_owned(),
        )],
    )
    .await;
    let right = String::from_utf8(peers().pem("ca")).unwrap();
    let mut fixed = map(&right);
    fixed.metadata.resource_version = maps.get("o-ca").await.unwrap().metadata.resource_version;
    maps.replace("o-ca", &PostParams::default(), &fixed).await.unwrap();
    expect("CA fixed", verified()).await;

    // Every change of cause was an Event of its own.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), CORONER_NS);
    let causes = ["BindingInvalid", "BmcAuthenticationFailed", "BmcTlsVerificationFailed"];
    let notes = wait_for("one Warning Event per cause", SHORT, || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        let notes: Vec<String> = list
            .into_iter()
            .filter(|e| {
                e.reason.as_deref().is_some_and(|r| causes.contains(&r))
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .filter_map(|e| e.note)
            .collect();
        causes.iter().all(|cause| notes.iter().any(|n| n.starts_with(cause))).then_some(notes)
    })
    .await;
    log(format!("{name}: a Warning Event for each cause: {notes:?}"));

    patch(json!({"spec": {"credentialsSecretRef": {"name": "spare-1-bmc"}, "tls": {"caBundleRef": {"kind": "ConfigMap", "name": "bmc-ca", "key": "ca.crt"}}}})).await;
    expect("back to its own Secret and CA", verified()).await;
    secrets.delete("o-rotated", &Default::default()).await.unwrap();
    maps.delete("o-ca", &Default::default()).await.unwrap();
    world.restart_coroners(2, &[]);
}

/// Scenario r's node (pool "off": template `coroner-off`, `action: Off`, `guard: Enforce`).
const GUARDED: &str = "guard-1";
/// Scenario s's node, behind a BMC that accepts every reset, does nothing and then reads Off.
const LIAR: &str = "liar-1";
/// Scenario t's node, behind a BMC that answers every request this late.
const EXCLUDED: &str = "excl-1";
/// Scenario y's node, and its template's settle (longer than coroner's 60 s BMC client lifetime).
const LONG_SETTLED: &str = "y-1";
const LONG_SETTLE: Duration = Duration::from_secs(70);
/// Scenario z's node: fenced with `ResourceDeletion`.
const DELETED_RELEASE: &str = "rd-1";
const SLOW_BMC_SECONDS: f64 = 1.0;
/// The guard's period in scenario r.
const GUARD_INTERVAL: Duration = Duration::from_secs(2);

/// The sum over the running replicas of the metric sample `series` (name and labels as exported).
async fn metric(world: &World, series: &str) -> f64 {
    let mut total = 0.0;
    for replica in &world.coroners {
        let page = replica.metrics().await;
        let value = page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse::<f64>().ok());
        total += value.unwrap_or(0.0);
    }
    total
}

fn resets(world: &World, node: &str, action: &str) -> usize {
    world.node(node).machine.requests().iter().filter(|r| r.starts_with("POST") && r.ends_with(action)).count()
}

/// A person powers the machine on through its BMC, behind coroner's back (announced in the power log
/// for scenario f: a power-on under the taint that is not coroner's).
async fn power_on_by_hand(world: &World, node: &str) {
    let machine = world.node(node);
    machine.note(json!({"event": timeline::BY_HAND, "system": machine.spec.systems[0].1, "reset_type": "On"}));
    let bmc = bmc_client(world, node);
    let system = bmc.system(&machine.spec.systems[0].1).await.unwrap();
    bmc.reset(&system, ResetType::On).await.unwrap();
    log(format!("{node}: powered on by hand through its BMC"));
}

async fn guard_condition(world: &World, node: &str) -> Option<(String, String)> {
    remediations(world, node).await.last().and_then(|r| condition(r, coroner::guard::GUARD))
}

/// The guard after the release: a node fenced with `Off` and still partitioned is powered on through
/// its BMC; coroner reads it On within about a guard interval, warns (condition, Events, metric) and
/// switches it off again. With `coroner.dev/power-on-approved` on the Node, the next power-on is
/// reported and left alone. The partition then heals: the node returns to service, NHC deletes the
/// remediation and the finalizer removes coroner's taints and the approval.
async fn scenario_r(world: &mut World) {
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
async fn heal_once_fenced_off(world: &World, node: &str) -> CoronerRemediation {
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
async fn scenario_s(world: &World) {
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

/// A settle longer than the lifetime of a BMC client in coroner's cache (60 s), through the
/// production path (the client built from the binding and its Secret, rebuilt as it expires): the
/// rebuilt client carries the same endpoint, TLS material and credential values, so the run goes on
/// (docs/safety.md P2); a change of the Secret's metadata mid-run restarts nothing either.
async fn scenario_y(world: &World) {
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
async fn scenario_k(world: &World) {
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

/// R1 for a `ResourceDeletion` release (no taint on the Node): the fence deletes the node's pods
/// and ends; its machine powered on by hand is switched off again by the guard within its bound,
/// as for a release with the out-of-service taint (scenario r).
async fn scenario_z(world: &mut World) {
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

/// The node is labelled `remediation.medik8s.io/exclude-from-remediation` after admission and
/// before the ForceOff (its BMC answers each request a second late, so identity and the first power
/// reading take seconds): the check right before the reset refuses, the remediation ends
/// `NodeExcluded`, and the BMC sees no reset at all.
async fn scenario_t(world: &World) {
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

async fn scenario_v(world: &mut World) {
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
async fn pdu_level_node(world: &mut World, node: &str, machine: MachineSpec) -> support::pdu::SnmpPduPeer {
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

async fn scenario_pdu_level(world: &mut World) {
    let node = "pdu-1";
    let pdu = pdu_level_node(world, node, MachineSpec::new(&uuid(161))).await;
    let dead = Instant::now();
    world.node_mut(node).lose_power_silently();
    let released =
        wait_remediation(world, node, "Succeeded=True", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "True")).await;
    let took = dead.elapsed();
    let status = released.status.clone().unwrap();
    let evidence = status.evidence.unwrap();
    let level = evidence.power_off.unwrap().level.unwrap();
    assert_eq!((level.level, level.mapping.as_str(), level.bmc_after.as_str()), (2, "OperatorStatement", "no answer"));
    let outlets: Vec<_> = level.outlets.iter().map(|o| (o.outlet.clone(), o.state.clone())).collect();
    let key = |n: u32| format!("snmp:127.0.0.1:{}|{n}", pdu.port);
    assert_eq!(outlets, [(key(1), "Off".to_owned()), (key(2), "Off".to_owned())]);
    let release = evidence.release.unwrap();
    assert_eq!(release.kind, coroner::api::ReleaseKind::LevelProof);
    assert!(release.taint_owned && release.node_ready == "Unknown");
    assert!(taint_keys(world, node).await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    assert_eq!(pdu.commands(), ["1:2", "2:2"], "immediateOff to each outlet, once");
    // What people read: the Events name the level and the statement it rests on.
    let events = world.kubectl(&[
        "get",
        "events",
        "-n",
        CORONER_NS,
        "--field-selector",
        &format!("involvedObject.name={}", released.name_any()),
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    for reason in ["OutletMappingUnproven", "PowerOffProven", "NodeFenced"] {
        assert!(events.lines().any(|l| l == reason), "no {reason} Event: {events}");
    }
    log(format!(
        "{node}: BMC dead with its machine → released through level 2 (two SNMPv3 outlets) after {took:.1?}; scenario p's attestation path needs a person instead"
    ));
}

async fn scenario_pdu_level_after_a_reset_that_never_took(world: &mut World) {
    let node = "pdu-2";
    let machine = MachineSpec { disable_power_off: true, ..MachineSpec::new(&uuid(162)) };
    let pdu = pdu_level_node(world, node, machine).await;
    let feed = world.node(node).fed_by_outlets(pdu.dir.join("outlets.json"), &["1", "2"]);
    let cut = Instant::now();
    world.node(node).partition();
    let released =
        wait_remediation(world, node, "Succeeded=True", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "True")).await;
    let took = cut.elapsed();
    assert!(feed.fired.load(std::sync::atomic::Ordering::Acquire), "the outlets took the machine's power");
    let evidence = released.status.clone().unwrap().evidence.unwrap();
    // Level 1 proved the identity and sent ForceOff, which never took; the outlets finished the job.
    assert!(evidence.identity.is_some());
    let power_off = evidence.power_off.unwrap();
    assert!(power_off.resets.iter().any(|r| r.level.is_none()), "the BMC's ForceOff: {:?}", power_off.resets);
    assert!(power_off.resets.iter().any(|r| r.level == Some(2)), "the outlets' Off: {:?}", power_off.resets);
    let level = power_off.level.unwrap();
    assert_eq!((level.level, level.bmc_after.as_str()), (2, "no answer"), "the BMC lost its power with them");
    assert_eq!(evidence.release.unwrap().kind, coroner::api::ReleaseKind::LevelProof);
    assert_eq!(pdu.commands(), ["1:2", "2:2"], "immediateOff to each outlet, once");
    assert!(taint_keys(world, node).await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    log(format!(
        "{node}: a ForceOff that never took, then its outlets: released through level 2 {took:.1?} after the network cut"
    ));
}

/// L5 through the binding verifier, with no statement: a node whose level 2 is two metered outlets
/// of a Redfish PDU. The verifier sees the machine run (node Ready) with both outlets drawing; after a
/// maintenance power-off through the BMC (Debian's fence_redfish) its first look finds an outlet
/// still drawing (the meter lags: the test lowers the draws only once that look read outlet A1), so
/// it looks again within settle (2 s at the e2e templates, from right before its BMC reads) and finds
/// them at the floor: both agreements recorded. Without the look again the draw would have
/// contradicted the mapping and cleared its `On` agreement. No level rests on such a passive
/// confirmation yet (issue 46): `OutletMappingProven` stays False and says why.
async fn scenario_level_confirmed_by_draws(world: &mut World) {
    use support::pdu::{RedfishPduPeer, RedfishPduSpec};
    let node = "pdu-3";
    world.add_node_with(node, MachineSpec::new(&uuid(163)), &[(NAME, node)]).await;
    let pdu = RedfishPduPeer::start(&RedfishPduSpec { load: Some(180.0), ..RedfishPduSpec::default() });
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let secret = serde_json::from_value(json!({
        "metadata": {"name": "pdu-3-pdu"}, "stringData": {"username": USER, "password": PASSWORD},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let outlet = |id: &str| {
        json!({"redfish": {"endpoint": pdu.endpoint(), "rackPdu": "1", "outlet": id},
               "credentialsSecretRef": {"name": "pdu-3-pdu"}, "tls": {"certificateSHA256": peers().pin("leaf")}})
    };
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let levels = json!({"spec": {"pduLevels": [{"outlets": [outlet("A1"), outlet("A2")]}]}});
    bindings.patch(node, &PatchParams::default(), &Patch::Merge(&levels)).await.unwrap();
    let confirmation = |binding: coroner::api::BmcBinding| {
        let status = binding.status?;
        let proven = status.conditions.iter().find(|c| c.type_ == "OutletMappingProven").cloned()?;
        Some((status.level_confirmations.into_iter().find(|c| c.level == 2)?, proven))
    };
    let (on, proven) =
        wait_for(&format!("{node}: the machine seen running with both outlets drawing"), SHORT, || async {
            confirmation(bindings.get(node).await.ok()?).filter(|(c, _)| c.on_seen_at.is_some())
        })
        .await;
    assert_eq!(proven.status, "False", "one agreement confirms nothing yet: {proven:?}");
    assert!(on.off_seen_at.is_none(), "{on:?}");
    log(format!("{node}: level 2 (Redfish PDU, metered) seen drawing while the machine runs: {:?}", on.last));

    // Right after a check read the outlets, so that no check straddles the power-off (one that read
    // the machine On before it and the draws after the test lowered them would see a contradiction).
    let looks = |pdu: &RedfishPduPeer| pdu.reads("A1");
    let seen = looks(&pdu);
    wait_for(&format!("{node}: a check reads the outlets"), SHORT, || async { (looks(&pdu) > seen).then_some(()) })
        .await;
    assert_eq!(world.node(node).machine.fence_redfish("off", "node-1"), Some(0), "a maintenance power-off");
    // The meter lags: both outlets keep drawing until the verifier's first look after the power-off
    // has read A1, then fall to nothing.
    let before = looks(&pdu);
    let lag = {
        let dir = pdu.dir.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            while RedfishPduPeer::reads_in(&dir, "A1") == before && started.elapsed() < LONG {
                std::thread::sleep(Duration::from_millis(10));
            }
            RedfishPduPeer::force_in(&dir, "A1", json!({"load": 0.0}));
            RedfishPduPeer::force_in(&dir, "A2", json!({"load": 0.0}));
        })
    };
    let (off, proven) = wait_for(&format!("{node}: both agreements of the mapping seen"), SHORT, || async {
        confirmation(bindings.get(node).await.ok()?)
            .filter(|(c, proven)| c.off_seen_at.is_some() && proven.message.contains("passive confirmation"))
    })
    .await;
    lag.join().unwrap();
    assert!(off.on_seen_at.is_some() && off.off_seen_at.is_some(), "{off:?}");
    assert_eq!(proven.status, "False", "no level rests on a passive confirmation yet: {proven:?}");
    assert!(looks(&pdu) >= before + 2, "the verifier looked at A1 again after the power-off");
    log(format!(
        "{node}: after a power-off through the BMC, A1 still drawing at the first look and at the floor at the next, within settle: both agreements seen, the level not usable yet ({})",
        proven.message
    ));
}
