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
mod scenarios;
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
use scenarios::*;
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

/// The scenarios in the order they run, by the name `make e2e ONLY=…` takes, and what each shows.
/// The checks over the whole run (`whole_run_checks`) always run last.
const SCENARIOS: [(&str, &str); 28] = [
    ("partition_fenced_and_rebooted", "partitioned node fenced, pods moved, rebooted"),
    (
        "wrong_mapping_refused_and_escalation_refused",
        "wrong mapping refused, escalation refused too, and NHC skips a failed template",
    ),
    (
        "unreachable_bmc_fails_then_retries_once_fixed",
        "unreachable BMC fails after retry.count; once fixed, deleting it retries; uninstall refused while fenced",
    ),
    ("nhc_timeout_stops_bmc_mutations", "nhc-timed-out mid-fence stops BMC mutations"),
    ("killed_mid_confirming_off_resumes", "coroner killed mid-ConfirmingOff resumes"),
    ("ready_false_node_not_fenced", "a Ready=False node is not fenced"),
    ("control_plane_quorum_kept", "control plane: one of three fenced, two of three not until one is back"),
    ("storm_limits", "storm limits: concurrency and window budgets"),
    ("stale_binding_caught_by_periodic_verification", "a stale binding is caught by periodic verification"),
    (
        "excluded_before_power_on",
        "a node excluded after its release and before the Reboot's On: no On, PowerOnExcluded, the taint stays",
    ),
    ("leader_never_fences_its_own_node", "the leader never fences the node it runs on"),
    ("leader_on_the_node_hands_over", "a leader on the node to fence hands over to a replica elsewhere"),
    ("admission_explains_bad_bindings", "admission explains bad bindings; a sample's openssl pin is accepted"),
    (
        "binding_verified_again_on_secret_or_ca_change",
        "a binding is verified again when its Secret or CA bundle appears or changes; TLS errors in words",
    ),
    (
        "attested_release_and_forgeries_refused",
        "BMC dead with its machine: released on an audited attestation, forgeries refused",
    ),
    (
        "taint_and_approval_by_hand",
        "the out-of-service taint and the approval by hand: ordinary admin rejected, break-glass allowed",
    ),
    (
        "guard_switches_a_powered_on_machine_off",
        "the guard: a released machine powered on behind coroner's back is switched off, unless approved",
    ),
    ("boot_id_continuity", "bootID continuity: a lying BMC's node back with its old bootID is FenceDidNotTakeEffect"),
    ("excluded_mid_fence", "a node excluded mid-fence gets no reset: NodeExcluded"),
    ("leader_stopped_while_caches_fill_exits", "a leader stopped while its caches fill still exits"),
    (
        "ipmi_machine_fenced",
        "an IPMI machine (ipmi_sim) fenced through NHC: GUID proven, powered down, released, powered up",
    ),
    (
        "cli_verify",
        "kubectl coroner verify: a good, a wrong-UUID, a wrong-CA and an unbound node; --all as JSON; exit codes",
    ),
    (
        "cli_import_far",
        "kubectl coroner import-far --apply: FAR templates from the cluster, credentials copied, the imported node verified",
    ),
    (
        "long_settle_proven",
        "a settle longer than a BMC client's lifetime, its Secret's metadata changed mid-run, is proven",
    ),
    (
        "resource_deletion_release_guarded",
        "a ResourceDeletion release is guarded: its machine powered on by hand is switched off again",
    ),
    (
        "level_proves_off_through_two_outlets",
        "a BMC dead with its machine: proven off through its two PDU outlets (level 2, SNMPv3) and released through NHC",
    ),
    (
        "level_after_a_reset_that_never_took",
        "a ForceOff that never reaches Off: the PDU outlets finish the fence, the BMC losing its power with them",
    ),
    (
        "level_confirmed_by_draws",
        "a level's outlet mapping confirmed by draws (L5): running and drawing, then off with the meter falling within settle",
    ),
];

/// `CORONER_E2E_ONLY=storm_limits,cli_verify` (`make e2e ONLY=…`): the scenarios to run, by name;
/// all when unset or empty.
fn selected() -> Vec<(&'static str, &'static str)> {
    let only = std::env::var("CORONER_E2E_ONLY").unwrap_or_default();
    let wanted: Vec<&str> = only.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()).collect();
    let unknown: Vec<&&str> = wanted.iter().filter(|w| !SCENARIOS.iter().any(|(name, _)| name == *w)).collect();
    assert!(unknown.is_empty(), "CORONER_E2E_ONLY names unknown scenarios {unknown:?}; known: {SCENARIOS:?}");
    SCENARIOS.into_iter().filter(|(name, _)| wanted.is_empty() || wanted.contains(name)).collect()
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
            "partition_fenced_and_rebooted" => partition_fenced_and_rebooted(&world).await,
            "wrong_mapping_refused_and_escalation_refused" => {
                wrong_mapping_refused_and_escalation_refused(&world).await
            }
            "unreachable_bmc_fails_then_retries_once_fixed" => {
                unreachable_bmc_fails_then_retries_once_fixed(&mut world).await
            }
            "nhc_timeout_stops_bmc_mutations" => nhc_timeout_stops_bmc_mutations(&world).await,
            "killed_mid_confirming_off_resumes" => killed_mid_confirming_off_resumes(&mut world).await,
            "ready_false_node_not_fenced" => ready_false_node_not_fenced(&world).await,
            "control_plane_quorum_kept" => control_plane_quorum_kept(&world).await,
            "storm_limits" => storm_limits(&mut world).await,
            "stale_binding_caught_by_periodic_verification" => {
                stale_binding_caught_by_periodic_verification(&mut world).await
            }
            "excluded_before_power_on" => excluded_before_power_on(&world).await,
            "leader_never_fences_its_own_node" => leader_never_fences_its_own_node(&mut world).await,
            "leader_on_the_node_hands_over" => leader_on_the_node_hands_over(&mut world).await,
            "admission_explains_bad_bindings" => admission_explains_bad_bindings(&world).await,
            "binding_verified_again_on_secret_or_ca_change" => {
                binding_verified_again_on_secret_or_ca_change(&mut world).await
            }
            "attested_release_and_forgeries_refused" => attested_release_and_forgeries_refused(&mut world).await,
            "taint_and_approval_by_hand" => taint_and_approval_by_hand(&world),
            "guard_switches_a_powered_on_machine_off" => guard_switches_a_powered_on_machine_off(&mut world).await,
            "boot_id_continuity" => boot_id_continuity(&world).await,
            "excluded_mid_fence" => excluded_mid_fence(&world).await,
            "leader_stopped_while_caches_fill_exits" => leader_stopped_while_caches_fill_exits(&mut world).await,
            "ipmi_machine_fenced" => ipmi_machine_fenced(&mut world).await,
            "cli_verify" => cli_verify(&mut world).await,
            "cli_import_far" => cli_import_far(&mut world).await,
            "long_settle_proven" => long_settle_proven(&world).await,
            "resource_deletion_release_guarded" => resource_deletion_release_guarded(&mut world).await,
            "level_proves_off_through_two_outlets" => level_proves_off_through_two_outlets(&mut world).await,
            "level_after_a_reset_that_never_took" => level_after_a_reset_that_never_took(&mut world).await,
            "level_confirmed_by_draws" => level_confirmed_by_draws(&mut world).await,
            other => unreachable!("selected() knows no scenario {other}"),
        }
        timings.push(format!("{name}: {:.1?}", scenario_started.elapsed()));
    }
    log("=== scenario whole_run_checks: checks over the whole run");
    whole_run_checks(&world);
    for line in &timings {
        log(line);
    }
    log(format!("e2e: all scenarios passed in {:.1?}", started.elapsed()));
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
