//! Emulated PDUs: a Redfish one (tests/peers/pdu.py) and an APC rPDU over SNMP (snmpsim through
//! tests/peers/pdu_snmp.py), each with a fresh directory on a free loopback port. Killed when dropped.

use std::{
    io::{BufRead, BufReader},
    net::UdpSocket,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::machine::{PASSWORD, USER, free_port, peers, repo};

pub const V3_USER: &str = "coroner";
pub const V3_AUTH_KEY: &str = "auth-key-s3cret-1";
pub const V3_PRIV_KEY: &str = "priv-key-s3cret-2";
/// The recording's SNMPv3 contextName (snmpsim selects a recording by it; an APC uses the empty one).
pub const V3_CONTEXT: &str = "apc-rpdu";
pub const COMMUNITY: &str = "community-s3cret-3";
/// What a real APC rPDU's sysObjectID.0 reads.
pub const RPDU: &str = "1.3.6.1.4.1.318.1.3.4.5";

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("kill");
    assert!(status.success(), "kill -{signal} failed");
}

fn stop(child: &mut Child) {
    let _ = Command::new("kill").arg("-CONT").arg(child.id().to_string()).stderr(Stdio::null()).status();
    let _ = child.kill();
    let _ = child.wait();
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read state")).expect("state is JSON")
}

fn write_json(path: &Path, value: &Value) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, value.to_string()).expect("write state");
    std::fs::rename(&tmp, path).expect("rename state");
}

fn log_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[derive(Clone, Debug)]
pub struct RedfishPduSpec {
    pub outlets: Vec<&'static str>,
    pub power_on: bool,
    /// Metered draw in W while an outlet feeds the machine; `None`: unmetered.
    pub load: Option<f64>,
    /// Seconds a PowerControl stays in transition.
    pub transition: f64,
}

impl Default for RedfishPduSpec {
    fn default() -> Self {
        Self { outlets: vec!["A1", "A2"], power_on: true, load: None, transition: 0.0 }
    }
}

pub struct RedfishPduPeer {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl RedfishPduPeer {
    pub fn start(spec: &RedfishPduSpec) -> Self {
        let peers = peers();
        let tmp = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let mut command = Command::new("/usr/bin/python3");
        command
            .arg(repo().join("tests/peers/pdu.py"))
            .arg("--dir")
            .arg(tmp.path())
            .arg("--port")
            .arg(port.to_string())
            .arg("--cert")
            .arg(peers.cert("leaf"))
            .arg("--key")
            .arg(peers.certs.join("leaf.key"))
            .arg("--user")
            .arg(format!("{USER}:{PASSWORD}"))
            .arg("--outlets")
            .arg(spec.outlets.join(","))
            .arg("--power")
            .arg(if spec.power_on { "On" } else { "Off" })
            .arg("--transition")
            .arg(spec.transition.to_string());
        if let Some(load) = spec.load {
            command.arg("--load").arg(load.to_string());
        }
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("start pdu.py");
        let stdout = child.stdout.take().expect("pdu stdout");
        let ready = format!("ready {port}");
        let found = BufReader::new(stdout).lines().map_while(Result::ok).any(|line| line == ready);
        assert!(found, "pdu.py on port {port} exited before it was ready");
        Self { child, port, dir: tmp.path().to_owned(), _tmp: tmp }
    }

    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}/redfish/v1", self.port)
    }

    pub fn outlets(&self) -> Value {
        read_json(&self.dir.join("outlets.json"))
    }

    /// Changes one outlet's fields in the state file (the emulator reads it on every request).
    pub fn force(&self, outlet: &str, fields: Value) {
        Self::force_in(&self.dir, outlet, fields);
    }

    /// [`Self::force`] for the emulator whose directory is `dir` (from another thread).
    pub fn force_in(dir: &Path, outlet: &str, fields: Value) {
        let mut outlets = read_json(&dir.join("outlets.json"));
        for (key, value) in fields.as_object().expect("fields") {
            outlets[outlet][key] = value.clone();
        }
        write_json(&dir.join("outlets.json"), &outlets);
    }

    /// How many times the outlet was read (answered GETs).
    pub fn reads(&self, outlet: &str) -> usize {
        Self::reads_in(&self.dir, outlet)
    }

    /// [`Self::reads`] for the emulator whose directory is `dir` (from another thread).
    pub fn reads_in(dir: &Path, outlet: &str) -> usize {
        let path = format!("/Outlets/{outlet}");
        log_lines(&dir.join("requests.log"))
            .iter()
            .filter(|e| {
                e["method"] == "GET" && e["path"].as_str().is_some_and(|p| p.trim_end_matches('/').ends_with(&path))
            })
            .count()
    }

    /// The PowerControl POSTs, as `PowerState status`.
    pub fn commands(&self) -> Vec<String> {
        log_lines(&self.dir.join("requests.log"))
            .iter()
            .filter(|e| e["method"] == "POST")
            .map(|e| format!("{} {}", e["power_state"].as_str().unwrap_or("null"), e["status"]))
            .collect()
    }
}

impl Drop for RedfishPduPeer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

#[derive(Clone, Debug)]
pub struct SnmpPduSpec {
    pub outlets: u32,
    pub power_on: bool,
    /// Seconds an accepted command stays pending.
    pub transition: f64,
    pub sys_object_id: &'static str,
}

impl Default for SnmpPduSpec {
    fn default() -> Self {
        Self { outlets: 4, power_on: true, transition: 0.0, sys_object_id: RPDU }
    }
}

pub struct SnmpPduPeer {
    child: Child,
    spec: SnmpPduSpec,
    pub port: u16,
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map(|a| a.port()).expect("free UDP port")
}

impl SnmpPduPeer {
    pub fn start(spec: &SnmpPduSpec) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_owned();
        let port = free_udp_port();
        let child = Self::spawn(spec, &dir, port, false);
        Self { child, spec: spec.clone(), port, dir, _tmp: tmp }
    }

    fn spawn(spec: &SnmpPduSpec, dir: &Path, port: u16, keep_state: bool) -> Child {
        let mut command = Command::new(&peers().python);
        command
            .arg(repo().join("tests/peers/pdu_snmp.py"))
            .arg("--dir")
            .arg(dir)
            .arg("--port")
            .arg(port.to_string())
            .arg("--outlets")
            .arg(spec.outlets.to_string())
            .arg("--power")
            .arg(if spec.power_on { "On" } else { "Off" })
            .arg("--transition")
            .arg(spec.transition.to_string())
            .arg("--sys-object-id")
            .arg(spec.sys_object_id)
            .arg("--community")
            .arg(COMMUNITY)
            .arg("--context")
            .arg(V3_CONTEXT)
            .arg("--v3-user")
            .arg(V3_USER)
            .arg("--v3-auth-key")
            .arg(V3_AUTH_KEY)
            .arg("--v3-priv-key")
            .arg(V3_PRIV_KEY);
        if keep_state {
            command.arg("--keep-state");
        }
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start pdu_snmp.py");
        wait_answering(port);
        child
    }

    /// Stops the agent and starts it again on the same port with the same engine ID and outlet states:
    /// the PDU rebooted.
    pub fn reboot(&mut self) {
        stop(&mut self.child);
        self.child = Self::spawn(&self.spec, &self.dir, self.port, true);
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freezes the agent: requests reach its socket and are never answered (a hung PDU).
    pub fn freeze(&self) {
        signal(self.pid(), "STOP");
    }

    pub fn thaw(&self) {
        signal(self.pid(), "CONT");
    }

    pub fn outlets(&self) -> Value {
        read_json(&self.dir.join("outlets.json"))
    }

    /// Every SET of a command column, as `outlet:command`.
    pub fn commands(&self) -> Vec<String> {
        log_lines(&self.dir.join("commands.log")).iter().map(|e| format!("{}:{}", e["outlet"], e["command"])).collect()
    }

    /// `snmpget` (net-snmp) over SNMPv3 authPriv: `OID = INTEGER: N` lines.
    pub fn snmpget(&self, oids: &[&str]) -> String {
        let output = Command::new("snmpget")
            .args([
                "-v3",
                "-l",
                "authPriv",
                "-u",
                V3_USER,
                "-a",
                "SHA",
                "-A",
                V3_AUTH_KEY,
                "-x",
                "AES",
                "-X",
                V3_PRIV_KEY,
            ])
            .args(["-n", V3_CONTEXT, "-On", "-t", "2", "-r", "1"])
            .arg(self.address())
            .args(oids)
            .output()
            .expect("run snmpget");
        assert!(output.status.success(), "snmpget: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `fence_apc_snmp --action status` on an outlet, over v3 authPriv or v2c; returns its exit code
    /// (0 on, 2 off) and output. Options go on stdin, so no secret is in argv; net-snmp takes the v3
    /// contextName from an snmp.conf (fence_apc_snmp has no option for it).
    pub fn fence_apc_snmp_status(&self, outlet: u32, v3: bool) -> (i32, String) {
        let conf = self.dir.join("net-snmp");
        std::fs::create_dir_all(&conf).expect("snmp.conf dir");
        std::fs::write(conf.join("snmp.conf"), format!("defContext {V3_CONTEXT}\n")).expect("snmp.conf");
        let mut options = vec![
            "action=status".to_owned(),
            "ip=127.0.0.1".to_owned(),
            format!("ipport={}", self.port),
            format!("plug={outlet}"),
        ];
        if v3 {
            options.extend(
                [
                    "snmp_version=3",
                    "snmp_sec_level=authPriv",
                    "snmp_auth_prot=SHA",
                    "snmp_priv_prot=AES",
                    &format!("username={V3_USER}"),
                    &format!("password={V3_AUTH_KEY}"),
                    &format!("snmp_priv_passwd={V3_PRIV_KEY}"),
                ]
                .map(str::to_owned),
            );
        } else {
            options.extend(["snmp_version=2c".to_owned(), format!("community={COMMUNITY}")]);
        }
        let mut child = Command::new("/usr/sbin/fence_apc_snmp")
            .env("SNMPCONFPATH", &conf)
            .env("PYTHONWARNINGS", "ignore::DeprecationWarning")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run fence_apc_snmp");
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all((options.join("\n") + "\n").as_bytes()).expect("write options");
        }
        let output = child.wait_with_output().expect("fence_apc_snmp output");
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        (output.status.code().unwrap_or(-1), text)
    }
}

/// snmpsim says nothing when it is ready: a v2c GET is sent until one is answered.
fn wait_answering(port: u16) {
    let started = Instant::now();
    loop {
        let answered = Command::new("snmpget")
            .args(["-v2c", "-c", COMMUNITY, "-t", "0.3", "-r", "0"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("1.3.6.1.2.1.1.2.0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if answered {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "snmpsim on port {port} not answering");
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for SnmpPduPeer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}
