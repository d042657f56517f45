//! One emulated machine = one sushy-emulator process started through tests/peers/machine.py, with a
//! fresh state directory, on a free loopback port. Killed when dropped.

use std::{
    io::{BufRead, BufReader},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::Value;

pub const USER: &str = "admin";
pub const PASSWORD: &str = "coroner-test-s3cret";

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The installed peers (`make peers`) and the test PKI, made once per test binary.
pub struct Peers {
    pub python: PathBuf,
    pub certs: PathBuf,
}

pub fn peers() -> &'static Peers {
    static PEERS: OnceLock<Peers> = OnceLock::new();
    PEERS.get_or_init(|| {
        let python = repo().join(".cache/peers/venv/bin/python");
        assert!(python.exists(), "the Redfish test peers are not installed: run `make peers` (make test does)");
        let certs = repo().join(".cache/peers/certs");
        let status =
            Command::new("bash").arg(repo().join("tests/peers/certs.sh")).arg(&certs).status().expect("run certs.sh");
        assert!(status.success(), "tests/peers/certs.sh failed");
        Peers { python, certs }
    })
}

impl Peers {
    pub fn cert(&self, name: &str) -> PathBuf {
        self.certs.join(format!("{name}.crt"))
    }

    pub fn pem(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.cert(name)).expect("read certificate")
    }

    /// The SHA-256 pin of a certificate, as certs.sh wrote it.
    pub fn pin(&self, name: &str) -> String {
        std::fs::read_to_string(self.certs.join(format!("{name}.sha256"))).expect("read pin").trim().to_owned()
    }
}

/// Where a BMC was, on `port`: an address that answers nothing at all (tests/peers/dark.py), for a
/// while; the caller kills it sooner, or it ends by itself.
pub fn dark(port: u16) -> Child {
    let mut child = Command::new(&peers().python)
        .arg(repo().join("tests/peers/dark.py"))
        .arg("--port")
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start dark.py");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("dark.py stdout");
    BufReader::new(stdout).read_line(&mut line).expect("dark.py says it is dark");
    assert_eq!(line.trim(), "dark", "dark.py did not start");
    child
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

#[derive(Clone, Debug)]
pub struct MachineSpec {
    /// (name, UUID) of each system.
    pub systems: Vec<(String, String)>,
    pub power_on: bool,
    /// Seconds between a reset and the power change.
    pub delay: f64,
    /// Which certificate of the test PKI the BMC serves: `leaf`, `named-leaf` or `self-signed`.
    pub cert: &'static str,
    pub disable_power_off: bool,
    /// Answer every Systems request with a 307 to the same path on this origin.
    pub redirect_systems_to: Option<String>,
    /// Serve the Systems collection in pages of this many members.
    pub systems_page_size: Option<usize>,
    /// With `systems_page_size`: the last page links back to the first.
    pub systems_next_link_cycle: bool,
    /// Every system body carries `PowerState` twice, the second time with this value.
    pub duplicate_power_state: Option<String>,
    /// Systems (by name) that stay listed but answer 404.
    pub unreadable_systems: Vec<String>,
    /// While a system reads Off, its body's `Status.State` is this.
    pub status_state_when_off: Option<String>,
    /// A lying BMC: every reset is accepted and ignored (the machine keeps its real power), and after a
    /// ForceOff the system reads Off until an On is requested.
    pub ignore_resets_report_off: bool,
    /// Seconds every request waits before it is answered (a slow BMC).
    pub response_delay: f64,
}

impl MachineSpec {
    pub fn new(uuid: &str) -> Self {
        Self {
            systems: vec![("node-1".into(), uuid.into())],
            power_on: true,
            delay: 0.0,
            cert: "leaf",
            disable_power_off: false,
            redirect_systems_to: None,
            systems_page_size: None,
            systems_next_link_cycle: false,
            duplicate_power_state: None,
            unreadable_systems: Vec::new(),
            status_state_when_off: None,
            ignore_resets_report_off: false,
            response_delay: 0.0,
        }
    }
}

pub struct Machine {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Machine {
    pub fn start(spec: &MachineSpec) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_owned();
        let mut machine = Self::start_in(spec, &dir);
        machine._tmp = Some(tmp);
        machine
    }

    /// Starts the machine with its files in `dir` (kept after the test, e.g. for the e2e power log).
    pub fn start_in(spec: &MachineSpec, dir: &Path) -> Self {
        Self::start_on(spec, dir, free_port())
    }

    /// Starts the machine on a given port (a BMC that comes back where it was).
    pub fn start_on(spec: &MachineSpec, dir: &Path, port: u16) -> Self {
        let peers = peers();
        let mut command = Command::new(&peers.python);
        command
            .arg(repo().join("tests/peers/machine.py"))
            .arg("--dir")
            .arg(dir)
            .arg("--port")
            .arg(port.to_string())
            .arg("--cert")
            .arg(peers.cert(spec.cert))
            .arg("--key")
            .arg(peers.certs.join(format!("{}.key", spec.cert)))
            .arg("--user")
            .arg(format!("{USER}:{PASSWORD}"))
            .arg("--power")
            .arg(if spec.power_on { "On" } else { "Off" })
            .arg("--delay")
            .arg(spec.delay.to_string());
        for (name, uuid) in &spec.systems {
            command.arg("--system").arg(format!("{name}={uuid}"));
        }
        if spec.disable_power_off {
            command.arg("--disable-power-off");
        }
        if let Some(origin) = &spec.redirect_systems_to {
            command.arg("--redirect-systems-to").arg(origin);
        }
        if let Some(size) = spec.systems_page_size {
            command.arg("--systems-page-size").arg(size.to_string());
        }
        if spec.systems_next_link_cycle {
            command.arg("--systems-next-link-cycle");
        }
        if let Some(value) = &spec.duplicate_power_state {
            command.arg("--duplicate-power-state").arg(value);
        }
        if let Some(state) = &spec.status_state_when_off {
            command.arg("--status-state-when-off").arg(state);
        }
        for name in &spec.unreadable_systems {
            command.arg("--unreadable-system").arg(name);
        }
        if spec.ignore_resets_report_off {
            command.arg("--ignore-resets-report-off");
        }
        if spec.response_delay > 0.0 {
            command.arg("--response-delay").arg(spec.response_delay.to_string());
        }
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("start machine.py");
        let stdout = child.stdout.take().expect("machine stdout");
        let ready = format!("ready {port}");
        let started = Instant::now();
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line == ready => break,
                Some(Ok(_)) => {}
                _ => panic!("machine on port {port} exited before it was ready"),
            }
            assert!(started.elapsed() < Duration::from_secs(30), "machine on port {port} not ready");
        }
        Self { child, port, dir: dir.to_owned(), _tmp: None }
    }

    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}/redfish/v1", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().expect("kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// The BMC loses its power: its process ends and its address answers nothing at all, not even a
    /// refusal (tests/peers/dark.py), as a BMC without power. `thaw` does not bring it back.
    pub fn go_dark(&mut self) {
        self.stop();
        self.child = dark(self.port);
    }

    /// Freezes the BMC process: it accepts connections and never answers (a hung BMC).
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    pub fn thaw(&self) {
        self.signal("CONT");
    }

    pub fn stop(&mut self) {
        let _ = Command::new("kill").arg("-CONT").arg(self.pid().to_string()).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Every line of the power log.
    pub fn log(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.join("power.log")).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// Debian's `fence_redfish --action ACTION` against this emulator's system `system` (the
    /// password on stdin, never on its command line): its exit code (`status`: 0 On, 2 Off).
    pub fn fence_redfish(&self, action: &str, system: &str) -> Option<i32> {
        self.spawn_fence_redfish(action, system).wait().expect("fence_redfish ran").code()
    }

    /// [`Self::fence_redfish`], started and not waited for (its options already written).
    pub fn spawn_fence_redfish(&self, action: &str, system: &str) -> std::process::Child {
        use std::io::Write;
        let mut child = Command::new("/usr/sbin/fence_redfish")
            .env("REQUESTS_CA_BUNDLE", peers().cert("ca"))
            .env("PYTHONWARNINGS", "ignore::DeprecationWarning")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fence_redfish is installed by `make peers`");
        let options = format!(
            "action={action}\nip=127.0.0.1\nipport={}\nusername={USER}\npassword={PASSWORD}\nssl=1\nsystems-uri=/redfish/v1/Systems/{system}\n",
            self.port
        );
        child.stdin.take().expect("stdin").write_all(options.as_bytes()).expect("write the options");
        child
    }

    /// The power log's requests as `METHOD path [reset_type]`.
    pub fn requests(&self) -> Vec<String> {
        self.log()
            .iter()
            .filter(|e| e["event"] == "request")
            .map(|e| {
                let reset = e["reset_type"].as_str().map(|r| format!(" {r}")).unwrap_or_default();
                format!(
                    "{} {}{reset}",
                    e["method"].as_str().unwrap_or_default(),
                    e["path"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }

    /// The real power changes, as `from->to`.
    pub fn power_changes(&self) -> Vec<String> {
        self.log()
            .iter()
            .filter(|e| e["event"] == "power")
            .map(|e| format!("{}->{}", e["from"].as_str().unwrap_or_default(), e["to"].as_str().unwrap_or_default()))
            .collect()
    }

    pub fn power_state(&self) -> String {
        std::fs::read_to_string(self.dir.join("power-state")).unwrap_or_default().trim().to_owned()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.stop();
    }
}
