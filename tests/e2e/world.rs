//! The world the end-to-end suite runs in: a real control plane (tests/harness/cluster.sh), the real
//! NodeHealthCheck, the coroner binary, and simulated machines (a sushy-emulator BMC plus a node agent
//! each). Everything runs as its own process and is stopped when the world is dropped.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{ConfigMap, Namespace, Node, Pod, Secret},
};
use kube::{
    Api, Client, Config,
    api::{DynamicObject, ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::json;

use crate::support::{
    ipmi::{IpmiSim, SimSpec},
    machine::{Machine, MachineSpec, PASSWORD, USER, peers, repo},
};
use coroner::{
    api::{BmcBinding, BmcBindingSpec, CaBundleKind, CaBundleRef, IpmiTarget, RedfishTarget, SecretRef, TlsPolicy},
    ipmi::{Guid, GuidLayout},
};

/// A machine's power goes Off outside its BMC: the node agent's power file says Off and the power
/// log records why, for the checks over the whole run.
fn power_off_in(dir: &Path, system: &str, cause: &str) {
    let tmp = dir.join("power-state.lost");
    fs::write(&tmp, "Off\n").expect("write power state");
    fs::rename(&tmp, dir.join("power-state")).expect("replace power state");
    note_in(dir, json!({"event": "power", "system": system, "from": "On", "to": "Off", "cause": cause}));
}

/// Appends `entry`, stamped now, to the power log in `dir`.
fn note_in(dir: &Path, mut entry: serde_json::Value) {
    entry["t"] = json!(jiff::Timestamp::now().to_string());
    let mut power_log =
        fs::OpenOptions::new().append(true).create(true).open(dir.join("power.log")).expect("open power log");
    std::io::Write::write_all(&mut power_log, format!("{entry}\n").as_bytes()).expect("append power log");
}

/// [`SimNode::fed_by_outlets`]'s watch: whether the outlets took the power, and the dark address left
/// where the BMC was (killed when this is dropped).
#[derive(Default)]
pub struct OutletsFeed {
    pub fired: Arc<AtomicBool>,
    dark: Arc<Mutex<Option<Child>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for OutletsFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(mut child) = self.dark.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub const CORONER_NS: &str = "coroner-system";
pub const NHC_NS: &str = "nhc-system";
pub const NHC_SA: &str = "node-healthcheck-controller-manager";

pub fn log(message: impl AsRef<str>) {
    eprintln!("[e2e {}] {}", jiff::Zoned::now().strftime("%H:%M:%S%.3f"), message.as_ref());
}

/// A process of the world; terminated (SIGTERM, then SIGKILL) when dropped.
pub struct Process {
    child: Child,
}

/// The coroner binary the replicas run: `$CORONER_BIN` (`make bench` sets the release build), else the
/// debug build `make build` makes.
pub fn coroner_binary() -> PathBuf {
    std::env::var_os("CORONER_BIN").map_or_else(|| repo().join("target/debug/coroner"), PathBuf::from)
}

impl Process {
    pub fn spawn(name: &str, mut command: Command, log_file: &Path) -> Self {
        let out = fs::OpenOptions::new().create(true).append(true).open(log_file).expect("open log");
        let err = out.try_clone().expect("clone log");
        let child = command
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Self { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self, signal: &str) {
        self.signal(signal);
        let _ = self.child.wait();
    }

    fn signal(&self, signal: &str) {
        let _ =
            Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).stderr(Stdio::null()).status();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `bound` for the process to exit; `false`: it still ran, and was killed (SIGKILL).
    fn exited_within(&mut self, bound: Duration) -> bool {
        let started = Instant::now();
        while self.is_running() {
            if started.elapsed() > bound {
                self.kill("KILL");
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }
}

/// How long a process may take to exit after SIGTERM: a coroner's shutdown grace is its Lease
/// duration (10 s here), plus releasing the Lease.
const EXIT_BOUND: Duration = Duration::from_secs(30);

impl Drop for Process {
    fn drop(&mut self) {
        if self.is_running() {
            self.signal("TERM");
            self.exited_within(EXIT_BOUND);
        }
    }
}

/// One coroner process.
pub struct Replica {
    pub name: String,
    pub admin_port: u16,
    process: Process,
}

impl Replica {
    /// The replica's /metrics page.
    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin_port);
        match reqwest::get(&url).await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }
}

/// One simulated machine: its BMC, and the node agent that plays its kubelet.
pub struct SimNode {
    pub name: String,
    pub dir: PathBuf,
    pub machine: Machine,
    pub spec: MachineSpec,
    agent: Process,
}

impl SimNode {
    pub fn partition(&self) {
        fs::write(self.dir.join("partition"), "").expect("write partition file");
        log(format!("{}: network cut (heartbeats stop, power stays on)", self.name));
    }

    pub fn heal(&self) {
        let _ = fs::remove_file(self.dir.join("partition"));
        log(format!("{}: network back", self.name));
    }

    /// What the emulated machine's power really is (the emulator's state file).
    pub fn power_state(&self) -> String {
        self.machine.power_state()
    }

    /// The machine loses power together with its BMC: the BMC stops answering and the host is off (the
    /// agent's power file says Off and the power log records the change, so the checks over the whole
    /// run know the machine was off). [`SimNode::restart_bmc`] brings both back, as a person would.
    pub fn lose_power(&mut self) {
        self.machine.stop();
        self.power_lost();
    }

    /// As [`SimNode::lose_power`], with a BMC address that answers nothing at all, not even a refused
    /// connection, as a BMC without power (tests/peers/dark.py): what a PDU level's L7 takes for
    /// silence.
    pub fn lose_power_silently(&mut self) {
        self.machine.go_dark();
        self.power_lost();
    }

    fn power_lost(&mut self) {
        power_off_in(&self.dir, &self.spec.systems[0].1, "power loss (BMC included)");
        log(format!("{}: power lost, BMC included (machine off, BMC silent)", self.name));
    }

    /// Appends `entry`, stamped now, to the machine's power log: what happened to it outside its BMC,
    /// for the checks over the whole run.
    pub fn note(&self, entry: serde_json::Value) {
        note_in(&self.dir, entry);
    }

    /// The machine fed by PDU outlets (issue 21's machine model): once every outlet in `outlets`
    /// reads Off in the PDU's state file, the machine and its BMC lose their power together: the BMC's
    /// address goes dark (tests/peers/dark.py), the node agent reads Off and the power log says so.
    pub fn fed_by_outlets(&self, pdu_state: PathBuf, outlets: &'static [&'static str]) -> OutletsFeed {
        let feed = OutletsFeed::default();
        let (fired, dark, stop) = (feed.fired.clone(), feed.dark.clone(), feed.stop.clone());
        let (dir, system, pid, port) =
            (self.dir.clone(), self.spec.systems[0].1.clone(), self.machine.pid(), self.machine.port);
        let name = self.name.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let state: serde_json::Value =
                    fs::read_to_string(&pdu_state).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
                if outlets.iter().all(|n| state[*n]["state"] == "Off") {
                    let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
                    std::thread::sleep(Duration::from_millis(50));
                    *dark.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(crate::support::machine::dark(port));
                    power_off_in(&dir, &system, "its PDU outlets switched off (BMC included)");
                    log(format!("{name}: every outlet feeding it is Off: machine and BMC lost their power"));
                    fired.store(true, Ordering::Release);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        feed
    }

    /// Replaces a stopped BMC with a fresh one on the same port (machine.py starts the machine On).
    pub fn restart_bmc(&mut self) {
        self.machine.stop();
        self.machine = Machine::start_on(&self.spec, &self.dir, self.machine.port);
    }

    /// Puts another machine behind the same BMC address (a replaced board: the binding is stale).
    pub fn swap_bmc(&mut self, uuid: &str) {
        self.machine.stop();
        let mut spec = self.spec.clone();
        spec.systems = vec![("swapped".into(), uuid.into())];
        self.machine = Machine::start_on(&spec, &self.dir.join("swapped"), self.machine.port);
    }
}

/// One machine whose BMC is OpenIPMI's `ipmi_sim`: its chassis control writes the power-state file
/// the node agent reads, so the machine runs while ipmi_sim says it is on.
pub struct IpmiNode {
    pub dir: PathBuf,
    pub bmc: IpmiSim,
    agent: Process,
}

impl IpmiNode {
    pub fn partition(&self) {
        fs::write(self.dir.join("partition"), "").expect("write partition file");
    }

    pub fn heal(&self) {
        let _ = fs::remove_file(self.dir.join("partition"));
    }
}

pub struct World {
    pub dir: PathBuf,
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub client: Client,
    pub nodes: BTreeMap<String, SimNode>,
    /// Machines whose BMC speaks IPMI (ipmi_sim), with their node agents.
    pub ipmi_nodes: BTreeMap<String, IpmiNode>,
    pub coroners: Vec<Replica>,
    pub coroner_runs: u32,
    nhc: Option<Process>,
}

fn run(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(output.status.success(), "{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn nhc_module_dir() -> PathBuf {
    let cache = run(Command::new("go").args(["env", "GOMODCACHE"]));
    PathBuf::from(cache.trim()).join("github.com/medik8s/node-healthcheck-operator@v0.12.0")
}

pub fn nhc_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("remediation.medik8s.io", "v1alpha1", "NodeHealthCheck"),
        "nodehealthchecks",
    )
}

impl World {
    /// Starts a fresh control plane in `.cache/e2e` and installs coroner's and NHC's CRDs and RBAC.
    pub async fn up() -> Self {
        let dir = repo().join(".cache/e2e");
        let bin = repo().join(".cache/harness/bin");
        let cluster = dir.join("cluster");
        let script = repo().join("tests/harness/cluster.sh");
        let _ = Command::new(&script).arg("down").arg(&cluster).status();
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create .cache/e2e");
        let started = Instant::now();
        let out = run(Command::new(&script).arg("up").arg(&cluster).env("NODE_MONITOR_GRACE_PERIOD", "8s"));
        let kubeconfig = PathBuf::from(out.lines().last().expect("kubeconfig path").trim());
        log(format!("control plane up in {:.1?} ({})", started.elapsed(), kubeconfig.display()));
        let client = client_for(&kubeconfig).await;
        let world = Self {
            dir,
            bin,
            kubeconfig,
            client,
            nodes: BTreeMap::new(),
            ipmi_nodes: BTreeMap::new(),
            coroners: Vec::new(),
            coroner_runs: 0,
            nhc: None,
        };
        world.install().await;
        world
    }

    /// The process id of replica `name`.
    pub fn coroner_pid(&self, name: &str) -> Option<u32> {
        self.coroners.iter().find(|r| r.name == name).map(|r| r.process.pid())
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        run(Command::new(self.bin.join("kubectl")).arg("--kubeconfig").arg(&self.kubeconfig).args(args))
    }

    async fn install(&self) {
        for ns in [CORONER_NS, NHC_NS] {
            let namespaces: Api<Namespace> = Api::all(self.client.clone());
            let namespace = Namespace {
                metadata: ObjectMeta { name: Some(ns.into()), ..ObjectMeta::default() },
                ..Namespace::default()
            };
            namespaces.create(&PostParams::default(), &namespace).await.expect("create namespace");
        }
        self.install_chart();
        // NHC's own CRD and ClusterRole, read from the Go module cache the harness build filled.
        let nhc = nhc_module_dir();
        self.kubectl(&[
            "apply",
            "-f",
            &nhc.join("config/crd/bases/remediation.medik8s.io_nodehealthchecks.yaml").display().to_string(),
        ]);
        let role = fs::read_to_string(nhc.join("config/rbac/role.yaml"))
            .expect("NHC role.yaml")
            .replace("name: manager-role", "name: node-healthcheck-manager-role");
        let role_file = self.dir.join("nhc-role.yaml");
        fs::write(&role_file, role).expect("write NHC role");
        self.kubectl(&["apply", "-f", &role_file.display().to_string()]);
        self.kubectl(&["create", "serviceaccount", NHC_SA, "-n", NHC_NS]);
        self.kubectl(&[
            "create",
            "clusterrolebinding",
            "node-healthcheck-manager",
            "--clusterrole=node-healthcheck-manager-role",
            &format!("--serviceaccount={NHC_NS}:{NHC_SA}"),
        ]);
        // NHC's shipped role has no Events rule; grant it so its Events can be read in the test logs.
        self.kubectl(&[
            "create",
            "clusterrole",
            "nhc-events",
            "--verb=create,patch,update",
            "--resource=events,events.events.k8s.io",
        ]);
        self.kubectl(&[
            "create",
            "clusterrolebinding",
            "nhc-events",
            "--clusterrole=nhc-events",
            &format!("--serviceaccount={NHC_NS}:{NHC_SA}"),
        ]);
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd/coronerremediations.coroner.dev",
            "crd/nodehealthchecks.remediation.medik8s.io",
            "--timeout=60s",
        ]);
    }

    /// kubectl that may fail: (succeeded, stdout and stderr).
    pub fn kubectl_result(&self, args: &[&str]) -> (bool, String) {
        let output = Command::new(self.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.success(), text)
    }

    /// `coroner uninstall-check` as the chart's ServiceAccount, as its pre-delete hook runs it:
    /// (passed, stdout and stderr).
    pub fn uninstall_check(&self) -> (bool, String) {
        let kubeconfig = self.service_account_kubeconfig(CORONER_NS, "coroner");
        let output = Command::new(repo().join("target/debug/coroner"))
            .args(["uninstall-check", "--namespace", CORONER_NS])
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("run coroner uninstall-check");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.success(), text)
    }

    fn helm(&self, args: &[&str]) -> String {
        run(Command::new(self.bin.join("helm")).arg("--kubeconfig").arg(&self.kubeconfig).args(args))
    }

    /// Installs coroner's Helm chart for real (CRDs, RBAC, the aggregated role for NHC, the default
    /// template), so every coroner replica of the suite runs under the chart's ServiceAccount: the
    /// suite passing proves the chart's RBAC sufficient. The chart's own Deployment is kept Pending
    /// (no node matches its selector): the replicas run outside the cluster, as processes.
    fn install_chart(&self) {
        let chart = repo().join("charts/coroner").display().to_string();
        let pending = [
            "--set-string",
            "nodeSelector.e2e\\.coroner\\.dev/never=true",
            "--set",
            "remediationTemplate.name=chart-default",
            // alice and bob may attest (the chart binds its coroner-attester roles to them).
            "--set",
            "attestation.attesters.users={alice,bob}",
            // The harness's admin approves a released machine's return (`coroner approve`).
            "--set",
            "approval.approvers.users={harness-admin}",
        ];
        self.helm(
            &[&["install", "coroner", &chart, "--namespace", CORONER_NS, "--wait=false"][..], &pending[..]].concat(),
        );
        // Server-side validation of everything the chart renders, through real admission.
        let rendered = self.helm(
            &[
                &["template", "coroner", &chart, "--namespace", CORONER_NS, "--kube-version", "1.36.3"][..],
                &pending[..],
            ]
            .concat(),
        );
        let file = self.dir.join("chart-rendered.yaml");
        fs::write(&file, rendered).expect("write rendered chart");
        self.kubectl(&["apply", "--dry-run=server", "-f", &file.display().to_string()]);
        // Least privilege, asked of the API server itself.
        let sa = format!("system:serviceaccount:{CORONER_NS}:coroner");
        for (verb, resource, namespace) in [
            ("delete", "nodes", None),
            ("create", "pods/exec", Some("default")),
            ("get", "secrets", Some("default")),
            ("list", "secrets", Some("default")),
            ("update", "leases", Some("kube-node-lease")),
            ("create", "leases", Some("kube-node-lease")),
            ("update", "leases", Some("medik8s-leases")),
            ("patch", "leases", Some("medik8s-leases")),
        ] {
            let mut args = vec!["auth", "can-i", verb, resource, "--as", &sa];
            if let Some(ns) = namespace {
                args.extend(["-n", ns]);
            }
            let output = Command::new(self.bin.join("kubectl"))
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(&args)
                .output()
                .expect("kubectl auth can-i");
            let answer = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            assert_eq!(answer, "no", "the chart's ServiceAccount may {verb} {resource} in {namespace:?}");
        }
        for (verb, resource, namespace) in [
            ("get", "secrets", CORONER_NS),
            ("watch", "secrets", CORONER_NS),
            ("patch", "leases", CORONER_NS),
            ("update", "nodes", "default"),
        ] {
            let answer = self.kubectl(&["auth", "can-i", verb, resource, "--as", &sa, "-n", namespace]);
            assert_eq!(answer.trim(), "yes", "the chart's ServiceAccount may not {verb} {resource} in {namespace}");
        }
        log(
            "chart installed with helm; rendered chart accepted by server-side dry run; its ServiceAccount cannot delete nodes, exec, read foreign Secrets or write node/NHC Leases",
        );
    }

    /// The admin kubeconfig impersonating `user` (and `groups`): what an admin's `kubectl --as` does.
    pub fn impersonating_kubeconfig(&self, user: &str, groups: &[&str]) -> PathBuf {
        let admin = fs::read_to_string(&self.kubeconfig).expect("admin kubeconfig");
        let mut config: serde_json::Value = serde_saphyr::from_str(&admin).expect("parse kubeconfig");
        for entry in config["users"].as_array_mut().expect("users") {
            entry["user"]["as"] = json!(user);
            if !groups.is_empty() {
                entry["user"]["as-groups"] = json!(groups);
            }
        }
        let path = self.dir.join(format!("as-{user}.kubeconfig"));
        fs::write(&path, serde_json::to_string(&config).expect("kubeconfig")).expect("write kubeconfig");
        path
    }

    /// A kubeconfig that authenticates as a ServiceAccount (token from the TokenRequest API).
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl(&["create", "token", name, "-n", namespace, "--duration=6h"]);
        let admin = fs::read_to_string(&self.kubeconfig).expect("admin kubeconfig");
        let mut config: serde_json::Value = serde_saphyr::from_str(&admin).expect("parse kubeconfig");
        config["users"] = json!([{ "name": name, "user": { "token": token.trim() } }]);
        for context in config["contexts"].as_array_mut().expect("contexts") {
            context["context"]["user"] = json!(name);
        }
        let path = self.dir.join(format!("{namespace}-{name}.kubeconfig"));
        fs::write(&path, serde_json::to_string(&config).expect("kubeconfig")).expect("write kubeconfig");
        path
    }

    /// Starts NodeHealthCheck v0.12.0 under its own ServiceAccount; its rights on coroner's kinds come
    /// only through the aggregated ClusterRole.
    pub fn start_nhc(&mut self) {
        let kubeconfig = self.service_account_kubeconfig(NHC_NS, NHC_SA);
        // The webhook server always starts and needs a certificate: any self-signed pair will do.
        let tmp = self.dir.join("nhc-tmp");
        let certs = tmp.join("k8s-webhook-server/serving-certs");
        fs::create_dir_all(&certs).expect("nhc cert dir");
        run(Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=nhc-webhook",
            ])
            .arg("-keyout")
            .arg(certs.join("tls.key"))
            .arg("-out")
            .arg(certs.join("tls.crt")));
        wait_for_nhc_webhook_port();
        let mut command = Command::new(self.bin.join("nhc"));
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0"])
            .env("DEPLOYMENT_NAMESPACE", NHC_NS)
            .env("TMPDIR", &tmp);
        let mut nhc = Process::spawn("nhc", command, &self.dir.join("nhc.log"));
        // It binds its webhook port within a second of starting, or exits.
        std::thread::sleep(Duration::from_secs(2));
        if !nhc.is_running() {
            let log = fs::read_to_string(self.dir.join("nhc.log")).unwrap_or_default();
            let last = log.lines().rev().find(|l| l.contains("ERROR")).unwrap_or("(no ERROR line)");
            panic!("NodeHealthCheck exited at start: {last}");
        }
        self.nhc = Some(nhc);
        log("NodeHealthCheck v0.12.0 started (ServiceAccount token, aggregated RBAC)");
    }

    /// kube-apiserver's audit log so far (writes to Node objects; see tests/harness/cluster.sh).
    pub fn audit_log(&self) -> String {
        fs::read_to_string(self.dir.join("cluster/audit.log")).expect("read the audit log")
    }

    /// Every coroner log written so far (one file per replica).
    pub fn coroner_logs(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> =
            fs::read_dir(&self.dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
        logs.retain(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("coroner-") && n.ends_with(".log"))
        });
        logs
    }

    /// Starts a coroner replica (the binary, outside the cluster) as the ServiceAccount of
    /// config/rbac, with its own pod name and admin port. Replicas elect a leader through a Lease.
    pub fn start_coroner(&mut self, flags: &[&str]) -> String {
        self.start_coroner_as(flags, &coroner_binary(), &[])
    }

    /// [`World::start_coroner`] with another build of coroner and more environment (`make bench`'s
    /// allocators).
    pub fn start_coroner_as(&mut self, flags: &[&str], binary: &Path, env: &[(&str, &str)]) -> String {
        self.coroner_runs += 1;
        let name = format!("coroner-{}", self.coroner_runs);
        let port = crate::support::machine::free_port();
        let kubeconfig = self.service_account_kubeconfig(CORONER_NS, "coroner");
        let mut command = Command::new(binary);
        command
            .envs(env.iter().copied())
            .args(["controller", "--namespace", CORONER_NS])
            .args(["--pod-name", &name, "--admin-address", &format!("127.0.0.1:{port}")])
            .args(flags);
        // The suite's short periods, unless the scenario sets its own (clap refuses a flag given twice).
        // The scenarios' fences share one window: the default 5 admissions per 10 minutes would queue
        // the fifth scenario's (scenario i tests the budget with its own).
        for (flag, value) in [
            ("--bmc-request-timeout", "2s"),
            ("--lease-duration", "10s"),
            ("--verify-interval", "10s"),
            ("--max-fences-per-window", "100"),
        ] {
            if !flags.contains(&flag) {
                command.args([flag, value]);
            }
        }
        command.env("KUBECONFIG", &kubeconfig).env("RUST_LOG", "info,coroner=debug");
        let process = Process::spawn(&name, command, &self.dir.join(format!("{name}.log")));
        let extra = if flags.is_empty() { String::new() } else { format!(" ({})", flags.join(" ")) };
        log(format!("{name} started, admin port {port}{extra}"));
        self.coroners.push(Replica { name: name.clone(), admin_port: port, process });
        name
    }

    /// The Pod object standing for a replica process on `node` (labelled like the chart's pods); the
    /// node's agent reports it Running and Ready while the node is up, like a kubelet would.
    pub async fn replica_pod(&self, replica: &str, node: &str) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), CORONER_NS);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": replica, "labels": {"app.kubernetes.io/name": "coroner", "app.kubernetes.io/instance": "e2e"}},
            "spec": {"nodeName": node, "automountServiceAccountToken": false,
                     "containers": [{"name": "coroner", "image": "registry.invalid/coroner:e2e"}]},
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod).await.expect("create replica pod");
    }

    /// Replaces every replica (SIGTERM) with `replicas` new ones started with `flags`.
    pub fn restart_coroners(&mut self, replicas: usize, flags: &[&str]) {
        self.stop_coroners();
        for _ in 0..replicas {
            self.start_coroner(flags);
        }
    }

    /// Stops every replica with SIGTERM, as a pod's termination does; a replica that does not exit
    /// within the bound is a defect (a rolling update would hang on it).
    pub fn stop_coroners(&mut self) {
        for replica in &self.coroners {
            replica.process.signal("TERM");
        }
        let hung: Vec<String> = self
            .coroners
            .drain(..)
            .filter_map(|mut r| (!r.process.exited_within(EXIT_BOUND)).then_some(r.name))
            .collect();
        assert!(hung.is_empty(), "{hung:?} did not exit within {EXIT_BOUND:?} of SIGTERM (killed)");
    }

    /// Who the leader Lease names, whether or not that replica still runs.
    pub async fn lease_holder(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), CORONER_NS);
        leases.get_opt("coroner-leader").await.ok()??.spec?.holder_identity
    }

    /// The running replica holding the leader Lease, once there is one.
    pub async fn leader(&self) -> Option<&Replica> {
        let holder = self.lease_holder().await?;
        self.coroners.iter().find(|r| r.name == holder)
    }

    pub fn kill_coroner(&mut self, name: &str) {
        if let Some(index) = self.coroners.iter().position(|r| r.name == name) {
            let mut replica = self.coroners.remove(index);
            replica.process.kill("KILL");
            log(format!("{name} killed with SIGKILL"));
        }
    }

    /// Adds a simulated machine: its BMC (sushy), its node agent, a Secret and a BmcBinding.
    pub async fn add_node(&mut self, name: &str, uuid: &str, labels: &[(&str, &str)], delay: f64) {
        self.add_node_with(name, MachineSpec { delay, ..MachineSpec::new(uuid) }, labels).await;
    }

    /// Adds a simulated machine whose BMC behaves as `spec` says (its first system is the node's).
    pub async fn add_node_with(&mut self, name: &str, spec: MachineSpec, labels: &[(&str, &str)]) {
        let dir = self.dir.join("nodes").join(name);
        fs::create_dir_all(&dir).expect("node dir");
        let uuid = spec.systems[0].1.clone();
        let machine = Machine::start_in(&spec, &dir);
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut command = Command::new(self.bin.join("node-agent"));
        command
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--node={name}"))
            .arg(format!("--system-uuid={uuid}"))
            .arg(format!("--power-state-file={}", dir.join("power-state").display()))
            .arg(format!("--partition-file={}", dir.join("partition").display()))
            .arg(format!("--labels={}", labels.join(",")));
        let agent = Process::spawn(&format!("agent-{name}"), command, &dir.join("agent.log"));
        self.bind(name, name, &machine).await;
        self.nodes.insert(name.to_owned(), SimNode { name: name.to_owned(), dir, machine, spec, agent });
    }

    /// Adds a machine whose BMC is ipmi_sim presenting `uuid` as its System GUID in `layout`, its
    /// node agent, a Secret and a BmcBinding with `spec.ipmi`.
    pub async fn add_ipmi_node(&mut self, name: &str, uuid: &str, layout: GuidLayout, labels: &[(&str, &str)]) {
        let dir = self.dir.join("nodes").join(name);
        fs::create_dir_all(&dir).expect("node dir");
        let guid = Guid::of(uuid::Uuid::parse_str(uuid).expect("uuid"), layout);
        let spec = SimSpec { guid: Some(*guid.as_bytes()), power_on: true, power_file: Some(dir.join("power-state")) };
        let bmc = IpmiSim::start(&spec);
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut command = Command::new(self.bin.join("node-agent"));
        command
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--node={name}"))
            .arg(format!("--system-uuid={uuid}"))
            .arg(format!("--power-state-file={}", dir.join("power-state").display()))
            .arg(format!("--partition-file={}", dir.join("partition").display()))
            .arg(format!("--labels={}", labels.join(",")));
        let agent = Process::spawn(&format!("agent-{name}"), command, &dir.join("agent.log"));
        let secret_name = format!("{name}-bmc");
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), CORONER_NS);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": secret_name},
            "stringData": {"username": USER, "password": PASSWORD},
        }))
        .expect("secret");
        secrets.create(&PostParams::default(), &secret).await.expect("create Secret");
        let spec = BmcBindingSpec {
            node_name: name.to_owned(),
            redfish: None,
            ipmi: Some(IpmiTarget {
                address: "127.0.0.1".into(),
                port: Some(bmc.0.port),
                cipher_suite: None,
                privilege: None,
            }),
            credentials_secret_ref: SecretRef { name: secret_name },
            tls: None,
            pdu_levels: Vec::new(),
        };
        let bindings: Api<BmcBinding> = Api::namespaced(self.client.clone(), CORONER_NS);
        bindings.create(&PostParams::default(), &BmcBinding::new(name, spec)).await.expect("create BmcBinding");
        log(format!("{name}: an IPMI machine (ipmi_sim on UDP {}, GUID in the {layout:?} layout)", bmc.0.port));
        self.ipmi_nodes.insert(name.to_owned(), IpmiNode { dir, bmc, agent });
    }

    /// Creates the BmcBinding `binding` for node `node` pointing at `machine`'s BMC.
    pub async fn bind(&self, binding: &str, node: &str, machine: &Machine) {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), CORONER_NS);
        let secret_name = format!("{binding}-bmc");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": secret_name},
            "stringData": {"username": USER, "password": PASSWORD},
        }))
        .expect("secret");
        let _ = secrets.create(&PostParams::default(), &secret).await;
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), CORONER_NS);
        let ca = String::from_utf8(peers().pem("ca")).expect("ca pem");
        let map: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "bmc-ca"}, "data": {"ca.crt": ca}})).expect("configmap");
        let _ = maps.create(&PostParams::default(), &map).await;
        let bindings: Api<BmcBinding> = Api::namespaced(self.client.clone(), CORONER_NS);
        let spec = BmcBindingSpec {
            node_name: node.to_owned(),
            redfish: Some(RedfishTarget { endpoint: machine.endpoint(), system_id: None }),
            ipmi: None,
            credentials_secret_ref: SecretRef { name: secret_name },
            tls: Some(TlsPolicy {
                ca_bundle_ref: Some(CaBundleRef {
                    kind: CaBundleKind::ConfigMap,
                    name: "bmc-ca".into(),
                    key: "ca.crt".into(),
                }),
                ..TlsPolicy::default()
            }),
            pdu_levels: Vec::new(),
        };
        bindings.create(&PostParams::default(), &BmcBinding::new(binding, spec)).await.expect("create BmcBinding");
    }

    pub fn node(&self, name: &str) -> &SimNode {
        &self.nodes[name]
    }

    pub fn node_mut(&mut self, name: &str) -> &mut SimNode {
        self.nodes.get_mut(name).expect("known node")
    }

    pub async fn create_nhc(&self, object: serde_json::Value) {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &nhc_resource());
        let nhc: DynamicObject = serde_json::from_value(object).expect("NodeHealthCheck");
        api.create(&PostParams::default(), &nhc).await.expect("create NodeHealthCheck");
    }

    pub fn stop_all(&mut self) {
        self.coroners.clear();
        self.nhc = None;
        for node in self.nodes.values_mut() {
            node.agent.kill("TERM");
            node.machine.stop();
        }
        for node in self.ipmi_nodes.values_mut() {
            node.agent.kill("TERM");
            node.bmc.0.kill();
        }
        let _ =
            Command::new(repo().join("tests/harness/cluster.sh")).arg("down").arg(self.dir.join("cluster")).status();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// NHC's webhook server listens on port 9443 of every interface, hard-coded: one NHC per machine at a
/// time. On a machine shared with another run of this suite, wait for it (bounded) instead of failing.
fn wait_for_nhc_webhook_port() {
    let started = Instant::now();
    let mut told = false;
    while std::net::TcpListener::bind(("0.0.0.0", 9443)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(900), "port 9443 (NHC's webhook) stayed taken for 15 minutes");
        if !told {
            log("port 9443 is taken (another NodeHealthCheck on this machine, e.g. another e2e run): waiting for it");
            told = true;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

pub async fn client_for(kubeconfig: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(started.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub async fn node_object(client: &Client, name: &str) -> Option<Node> {
    Api::<Node>::all(client.clone()).get_opt(name).await.ok().flatten()
}
