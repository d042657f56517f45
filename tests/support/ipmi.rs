//! The IPMI test peers, each on a free loopback UDP port with its files in a fresh directory and
//! killed when dropped: Debian's `ipmi_sim` (OpenIPMI) with a `chassis_control` script keeping the
//! machine's power in a file, and a pyghmi BMC (tests/peers/ipmi_bmc.py).

use std::{
    io::{BufRead, BufReader},
    net::UdpSocket,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::machine::{PASSWORD, USER, repo};

pub const IPMI_SIM: &str = "/usr/bin/ipmi_sim";
pub const IPMITOOL: &str = "/usr/bin/ipmitool";
pub const FENCE_IPMILAN: &str = "/usr/sbin/fence_ipmilan";

fn installed(path: &str) {
    assert!(Path::new(path).exists(), "{path} is not installed: run `make peers` (make integration does)");
}

pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).map(|a| a.port()).expect("free UDP port")
}

/// A running peer process.
pub struct Peer {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    /// Where the peer keeps the machine's power, `On` or `Off`.
    power_file: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Peer {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().expect("kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// The BMC stops answering: every datagram waits forever (a hung BMC).
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// The BMC process dies: its port is closed.
    pub fn kill(&mut self) {
        let _ = Command::new("kill").arg("-CONT").arg(self.pid().to_string()).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The machine's power as the peer keeps it: `On` or `Off`.
    pub fn power(&self) -> String {
        std::fs::read_to_string(&self.power_file).unwrap_or_default().trim().to_owned()
    }

    fn log_lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Clone, Debug)]
pub struct SimSpec {
    /// `guid` in lan.conf: the bytes RAKP 2 and Get System GUID carry. None: no GUID (Get System
    /// GUID is then not supported).
    pub guid: Option<[u8; 16]>,
    pub power_on: bool,
    /// Where the machine's power is kept (a node agent's power-state file); a file of the peer's
    /// own directory unless set.
    pub power_file: Option<PathBuf>,
}

/// `ipmi_sim` with a LAN channel on 127.0.0.1, user `USER`/`PASSWORD` (admin), cipher suites as
/// OpenIPMI has them (0, 1, 2, 3, …: it accepts suite 0).
pub struct IpmiSim(pub Peer);

impl IpmiSim {
    pub fn start(spec: &SimSpec) -> Self {
        installed(IPMI_SIM);
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_owned();
        let port = free_udp_port();
        let power_file = spec.power_file.clone().unwrap_or_else(|| dir.join("power"));
        std::fs::write(&power_file, if spec.power_on { "On\n" } else { "Off\n" }).unwrap();
        // ipmi_sim asks `SCRIPT 0x20 get power` (answer `power:1|0`) and runs `SCRIPT 0x20 set power 0|1`.
        let script = dir.join("chassis_control.sh");
        std::fs::write(
            &script,
            format!(
                r#"#!/bin/sh
dir='{dir}'
power='{power}'
case "$2" in
  get) if [ "$(cat "$power")" = On ]; then echo power:1; else echo power:0; fi ;;
  set) if [ "$3" = power ]; then
         if [ "$4" = 1 ]; then state=On; else state=Off; fi
         echo "$state" > "$power.tmp" && mv "$power.tmp" "$power"
         echo "set power $4" >> "$dir/control.log"
       fi ;;
esac
"#,
                dir = dir.display(),
                power = power_file.display()
            ),
        )
        .unwrap();
        Command::new("chmod").arg("+x").arg(&script).status().unwrap();
        let guid = spec.guid.map(|g| format!("    guid {}\n", hex::encode(g))).unwrap_or_default();
        std::fs::write(
            dir.join("lan.conf"),
            format!(
                r#"name "coroner-test"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
{guid}  endlan
  chassis_control "{script} 0x20"
  user 2 true "{USER}" "{PASSWORD}" admin 10 md5
"#,
                script = script.display()
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("bmc.emu"),
            "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nsel_enable 0x20 1000 0x0a\nmc_enable 0x20\n",
        )
        .unwrap();
        std::fs::create_dir(dir.join("state")).unwrap();
        let child = Command::new(IPMI_SIM)
            .arg("-c")
            .arg(dir.join("lan.conf"))
            .arg("-f")
            .arg(dir.join("bmc.emu"))
            .arg("-s")
            .arg(dir.join("state"))
            .arg("-n")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("ipmi_sim.log")).unwrap())
            .spawn()
            .expect("start ipmi_sim");
        let peer = Peer { child, port, dir, power_file, _tmp: tmp };
        wait_bound(&peer);
        Self(peer)
    }

    /// The chassis_control script's `set power N` lines: every power change ipmi_sim asked for.
    pub fn controls(&self) -> Vec<String> {
        self.0.log_lines("control.log")
    }
}

/// ipmi_sim prints nothing when it is ready: wait until its UDP port is bound.
fn wait_bound(peer: &Peer) {
    let started = Instant::now();
    let wanted = format!("0100007F:{:04X}", peer.port);
    while started.elapsed() < Duration::from_secs(10) {
        let bound = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
        if bound.lines().any(|l| l.split_whitespace().nth(1) == Some(wanted.as_str())) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the IPMI peer on port {} did not bind", peer.port);
}

#[derive(Clone, Debug)]
pub struct PyghmiSpec {
    /// RAKP 2's GUID bytes.
    pub guid: [u8; 16],
    /// `same`, `unavailable` or 32 hex digits: what Get System GUID answers.
    pub system_guid: String,
    pub power_on: bool,
    pub kg: Option<String>,
    pub session_limit: Option<(u32, f64)>,
    pub downgrade: bool,
    pub tamper: bool,
}

impl PyghmiSpec {
    pub fn new(guid: [u8; 16]) -> Self {
        Self {
            guid,
            system_guid: "same".into(),
            power_on: true,
            kg: None,
            session_limit: None,
            downgrade: false,
            tamper: false,
        }
    }
}

/// pyghmi's BMC (tests/peers/ipmi_bmc.py), user `USER`/`PASSWORD`, cipher suite 3 only.
pub struct Pyghmi(pub Peer);

impl Pyghmi {
    pub fn start(spec: &PyghmiSpec) -> Self {
        let python = repo().join(".cache/peers/venv/bin/python");
        assert!(python.exists(), "the test peers are not installed: run `make peers` (make integration does)");
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_owned();
        let port = free_udp_port();
        let mut command = Command::new(python);
        command
            .arg(repo().join("tests/peers/ipmi_bmc.py"))
            .arg("--port")
            .arg(port.to_string())
            .arg("--guid")
            .arg(hex::encode(spec.guid))
            .arg("--user")
            .arg(format!("{USER}:{PASSWORD}"))
            .arg("--state-file")
            .arg(dir.join("power"))
            .arg("--power")
            .arg(if spec.power_on { "On" } else { "Off" })
            .arg("--system-guid")
            .arg(&spec.system_guid)
            .arg("--log")
            .arg(dir.join("bmc.log"));
        if let Some(kg) = &spec.kg {
            command.arg("--kg").arg(kg);
        }
        if let Some((limit, idle)) = spec.session_limit {
            command.arg("--session-limit").arg(limit.to_string()).arg("--idle-timeout").arg(idle.to_string());
        }
        if spec.downgrade {
            command.arg("--downgrade");
        }
        if spec.tamper {
            command.arg("--tamper");
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
            .spawn()
            .expect("start ipmi_bmc.py");
        let stdout = child.stdout.take().expect("stdout");
        let ready = format!("ready {port}");
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line == ready => break,
                Some(Ok(_)) => {}
                _ => panic!("ipmi_bmc.py on port {port} exited before it was ready"),
            }
        }
        let power_file = dir.join("power");
        Self(Peer { child, port, dir, power_file, _tmp: tmp })
    }

    /// The BMC's log (see ipmi_bmc.py).
    pub fn log(&self) -> Vec<Value> {
        self.0.log_lines("bmc.log").iter().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    pub fn events(&self, event: &str) -> usize {
        self.log().iter().filter(|e| e["event"] == event).count()
    }
}

/// `ipmitool -I lanplus -C 3 … ARGS` against a peer: (exit code, stdout). The password goes in
/// the environment (`-E`), not the command line.
pub fn ipmitool(port: u16, args: &[&str]) -> (i32, String) {
    installed(IPMITOOL);
    let output = Command::new(IPMITOOL)
        .args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", &port.to_string(), "-U", USER, "-E"])
        .args(args)
        .env("IPMI_PASSWORD", PASSWORD)
        .output()
        .expect("run ipmitool");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `fence_ipmilan --lanplus --cipher 3 --action ACTION` with its options on stdin (so the password
/// is in no argv): the exit code (status: 0 = on, 2 = off).
pub fn fence_ipmilan(port: u16, action: &str) -> i32 {
    installed(FENCE_IPMILAN);
    let mut child = Command::new(FENCE_IPMILAN)
        .env("PYTHONWARNINGS", "ignore::DeprecationWarning")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run fence_ipmilan");
    let options = format!(
        "action={action}\nip=127.0.0.1\nipport={port}\nusername={USER}\npassword={PASSWORD}\nlanplus=1\ncipher=3\npower_wait=0\n"
    );
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), options.as_bytes()).unwrap();
    drop(child.stdin.take());
    child.wait().expect("fence_ipmilan").code().unwrap_or(-1)
}

/// An `ipmitool shell` that opens its session (one `chassis power status`) and is then killed
/// (SIGKILL): a client that died without Close Session.
pub fn ipmitool_killed_mid_session(port: u16) {
    installed(IPMITOOL);
    let mut child = Command::new(IPMITOOL)
        .args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", &port.to_string(), "-U", USER, "-E", "shell"])
        .env("IPMI_PASSWORD", PASSWORD)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run ipmitool shell");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), b"chassis power status\n").unwrap();
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // The prompt has no newline: the answer follows it on the same line.
    let answered = lines.any(|l| l.is_ok_and(|l| l.contains("Chassis Power is")));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(answered, "ipmitool shell did not open its session");
}
