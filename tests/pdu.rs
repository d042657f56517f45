//! The PDU outlet clients against real peers: a DMTF-shaped Redfish PDU (tests/peers/pdu.py) over TLS
//! verified by the test CA, and an APC rPDU recording served by snmpsim over SNMPv3 authPriv and v2c,
//! cross-checked with net-snmp's snmpget and Debian's fence_apc_snmp; then the fence loop through a
//! PDU level (`sim::lab`) against those PDUs and a sushy BMC (`levels`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use coroner::{
    bmc::{Credentials, Password, RedfishConfig, tls},
    levels::proves_off,
    pdu::{
        NotOff, OutletCommand, OutletReading, OutletState, Outlets, PduError,
        redfish::{OutletId, RedfishPdu},
        snmp::{AuthProtocol, CommunityVersion, OutletNumber, PrivProtocol, SnmpConfig, SnmpPdu, SnmpSecurity, Usm},
    },
};
use serde_json::json;
use support::{
    machine::{PASSWORD, USER, peers},
    pdu::{
        COMMUNITY, RedfishPduPeer, RedfishPduSpec, SnmpPduPeer, SnmpPduSpec, V3_AUTH_KEY, V3_CONTEXT, V3_PRIV_KEY,
        V3_USER,
    },
};

/// The floor under which a metered Off outlet counts as feeding nothing.
const FLOOR_WATTS: f64 = 5.0;

fn redfish_config(peer: &RedfishPduPeer, password: &str) -> RedfishConfig {
    RedfishConfig {
        endpoint: peer.endpoint(),
        trust: tls::Trust { ca_bundle_pem: Some(peers().pem("ca")), ..tls::Trust::default() },
        credentials: Credentials { username: USER.into(), password: Password::new(password.into()) },
        request_timeout: Duration::from_secs(2),
        read_retries: 1,
        retry_backoff: Duration::from_millis(100),
    }
}

fn redfish(peer: &RedfishPduPeer) -> RedfishPdu {
    RedfishPdu::new(redfish_config(peer, PASSWORD)).unwrap()
}

fn a1() -> OutletId {
    OutletId::new("1", "A1").unwrap()
}

/// Reads until the reading proves Off or `budget` runs out; returns the last reading and the wait.
async fn until_off<P: Outlets>(pdu: &P, outlet: &P::Outlet, budget: Duration) -> (OutletReading, Duration) {
    let started = Instant::now();
    loop {
        let reading = pdu.read(outlet).await.unwrap();
        if proves_off(&reading, FLOOR_WATTS).is_ok() || started.elapsed() > budget {
            return (reading, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// Redfish ------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_redfish_outlet_reads_switches_off_proves_off_and_switches_on_over_verified_tls() {
    let peer = RedfishPduPeer::start(&RedfishPduSpec { load: Some(180.0), ..RedfishPduSpec::default() });
    let pdu = redfish(&peer);
    let started = Instant::now();
    let on = pdu.read(&a1()).await.unwrap();
    let read_time = started.elapsed();
    assert_eq!(on, OutletReading { state: OutletState::On, pending: false, watts: Some(180.0), metered: true });
    assert_eq!(proves_off(&on, FLOOR_WATTS), Err(NotOff::Reads(OutletState::On)));

    let started = Instant::now();
    pdu.switch(&a1(), OutletCommand::Off).await.unwrap();
    let switch_time = started.elapsed();
    let (off, waited) = until_off(&pdu, &a1(), Duration::from_secs(3)).await;
    assert_eq!(off, OutletReading { state: OutletState::Off, pending: false, watts: Some(0.0), metered: true });
    assert_eq!(peer.outlets()["A2"]["state"], "On", "only the addressed outlet switched");

    pdu.switch(&a1(), OutletCommand::On).await.unwrap();
    assert_eq!(pdu.read(&a1()).await.unwrap().state, OutletState::On);
    assert_eq!(peer.commands(), ["Off 204", "On 204"], "only PowerControl Off and On are ever sent");
    eprintln!(
        "redfish outlet: read {read_time:.2?}, switch (read + POST) {switch_time:.2?}, Off proven after {waited:.2?}"
    );
}

#[tokio::test]
async fn a_redfish_outlet_in_transition_is_not_off_until_it_settles() {
    let peer = RedfishPduPeer::start(&RedfishPduSpec { transition: 1.0, ..RedfishPduSpec::default() });
    let pdu = redfish(&peer);
    pdu.switch(&a1(), OutletCommand::Off).await.unwrap();
    let during = pdu.read(&a1()).await.unwrap();
    assert!(during.pending && during.state == OutletState::On, "{during:?}");
    // An outlet that already reads Off while a delayed command is pending proves nothing either.
    peer.force("A1", json!({"state": "Off", "target": "On", "due": 4.0e9}));
    let forced = pdu.read(&a1()).await.unwrap();
    assert_eq!(proves_off(&forced, FLOOR_WATTS), Err(NotOff::CommandPending));
    peer.force("A1", json!({"target": null, "due": 0}));
    assert_eq!(proves_off(&pdu.read(&a1()).await.unwrap(), FLOOR_WATTS), Ok(()));
}

#[tokio::test]
async fn a_metered_redfish_outlet_drawing_above_the_floor_is_not_off() {
    let peer = RedfishPduPeer::start(&RedfishPduSpec { load: Some(240.0), ..RedfishPduSpec::default() });
    let pdu = redfish(&peer);
    peer.force("A1", json!({"welded": true}));
    pdu.switch(&a1(), OutletCommand::Off).await.unwrap();
    let (welded, _) = until_off(&pdu, &a1(), Duration::from_millis(500)).await;
    assert_eq!(welded.state, OutletState::Off);
    assert_eq!(proves_off(&welded, FLOOR_WATTS), Err(NotOff::Drawing { watts: 240.0, floor: FLOOR_WATTS }));
}

#[tokio::test]
async fn wrong_redfish_credentials_are_a_typed_auth_error_without_the_secret() {
    let peer = RedfishPduPeer::start(&RedfishPduSpec::default());
    let secret = "wrong-s3cret-password";
    let pdu = RedfishPdu::new(redfish_config(&peer, secret)).unwrap();
    for error in [pdu.read(&a1()).await.unwrap_err(), pdu.switch(&a1(), OutletCommand::Off).await.unwrap_err()] {
        assert!(matches!(error, PduError::Unauthorized(_)), "{error:?}");
        assert_eq!(error.category(), "unauthorized");
        assert!(!format!("{error} {error:?} {pdu:?}").contains(secret));
    }
    assert!(peer.commands().is_empty(), "nothing was switched");
    assert_eq!(peer.outlets()["A1"]["state"], "On");
}

#[tokio::test]
async fn a_redfish_pdu_with_a_certificate_from_another_ca_is_refused() {
    let peer = RedfishPduPeer::start(&RedfishPduSpec::default());
    let trust = tls::Trust { ca_bundle_pem: Some(peers().pem("other-ca")), ..tls::Trust::default() };
    let pdu = RedfishPdu::new(RedfishConfig { trust, ..redfish_config(&peer, PASSWORD) }).unwrap();
    let error = pdu.read(&a1()).await.unwrap_err();
    assert!(matches!(error, PduError::Tls(_)), "{error:?}");
    assert!(peer.commands().is_empty());
}

#[tokio::test]
async fn an_unknown_redfish_outlet_is_an_http_error() {
    let peer = RedfishPduPeer::start(&RedfishPduSpec::default());
    let error = redfish(&peer).read(&OutletId::new("1", "B9").unwrap()).await.unwrap_err();
    assert!(matches!(error, PduError::Http { status: 404, .. }), "{error:?}");
}

// SNMP ---------------------------------------------------------------------------------------------

fn usm(auth_key: &str, priv_key: &str) -> Usm {
    Usm {
        username: V3_USER.into(),
        auth: AuthProtocol::Sha1,
        auth_key: Password::new(auth_key.into()),
        privacy: PrivProtocol::Aes128,
        priv_key: Password::new(priv_key.into()),
        context: V3_CONTEXT.into(),
    }
}

/// snmpsim on two busy cores answers in milliseconds, but not always: 1 s per try, two retransmissions.
fn v3_config(peer: &SnmpPduPeer, usm: Usm) -> SnmpConfig {
    SnmpConfig { request_timeout: Duration::from_secs(1), retries: 2, ..SnmpConfig::new(peer.address(), usm) }
}

/// A short budget where the test waits for a failure: 400 ms per try, one retransmission.
fn quick(config: SnmpConfig) -> SnmpConfig {
    SnmpConfig { request_timeout: Duration::from_millis(400), retries: 1, ..config }
}

async fn v3(peer: &SnmpPduPeer) -> SnmpPdu {
    SnmpPdu::connect(v3_config(peer, usm(V3_AUTH_KEY, V3_PRIV_KEY))).await.unwrap()
}

fn outlet(n: u32) -> OutletNumber {
    OutletNumber::new(n).unwrap()
}

#[tokio::test]
async fn an_snmpv3_outlet_reads_switches_off_proves_off_and_switches_on_as_snmpget_and_fence_apc_snmp_see_it() {
    let peer = SnmpPduPeer::start(&SnmpPduSpec { transition: 0.5, ..SnmpPduSpec::default() });
    let pdu = v3(&peer).await;
    assert!(!pdu.is_insecure());
    let started = Instant::now();
    let on = pdu.read(&outlet(2)).await.unwrap();
    let first_read = started.elapsed();
    let started = Instant::now();
    assert_eq!(pdu.read(&outlet(2)).await.unwrap(), on);
    let read_time = started.elapsed();
    assert_eq!(on, OutletReading { state: OutletState::On, pending: false, watts: None, metered: false });
    assert_eq!(peer.fence_apc_snmp_status(2, true).0, 0, "fence_apc_snmp reads it on");

    let started = Instant::now();
    pdu.switch(&outlet(2), OutletCommand::Off).await.unwrap();
    let switch_time = started.elapsed();
    let pending = pdu.read(&outlet(2)).await.unwrap();
    assert!(pending.pending, "a command pending is read as such: {pending:?}");
    assert!(proves_off(&pending, FLOOR_WATTS).is_err());
    let (off, waited) = until_off(&pdu, &outlet(2), Duration::from_secs(3)).await;
    assert_eq!(off, OutletReading { state: OutletState::Off, pending: false, watts: None, metered: false });
    let seen = peer.snmpget(&[".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.2", ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.5.2"]);
    assert!(seen.contains(".4.2 = INTEGER: 2") && seen.contains(".5.2 = INTEGER: 2"), "{seen}");
    let started = Instant::now();
    let (v3_status, v3_text) = peer.fence_apc_snmp_status(2, true);
    let fence_time = started.elapsed();
    assert_eq!(v3_status, 2, "fence_apc_snmp reads it off over v3: {v3_text}");
    assert!(v3_text.contains("Status: OFF"), "{v3_text}");
    assert_eq!(peer.fence_apc_snmp_status(2, false).0, 2, "and over v2c");
    assert_eq!(peer.fence_apc_snmp_status(1, true).0, 0, "its neighbour stays on");

    pdu.switch(&outlet(2), OutletCommand::On).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(pdu.read(&outlet(2)).await.unwrap().state, OutletState::On);
    assert_eq!(peer.commands(), ["2:2", "2:1"], "only immediateOff and immediateOn are ever sent");
    eprintln!(
        "snmpv3 outlet: first read (discovery + sysObjectID + state) {first_read:.2?}, read {read_time:.2?}, switch {switch_time:.2?}, Off proven after {waited:.2?}; fence_apc_snmp status {fence_time:.2?}"
    );
}

#[tokio::test]
async fn a_pdu_whose_sys_object_id_is_not_an_apc_rpdu_is_refused_before_anything_is_set() {
    // masterSwitchrPDU2: a real APC, but its state column reads off(1) and on(2), the reverse of rPDU.
    let peer = SnmpPduPeer::start(&SnmpPduSpec { sys_object_id: "1.3.6.1.4.1.318.1.3.4.6", ..SnmpPduSpec::default() });
    let pdu = v3(&peer).await;
    for error in
        [pdu.read(&outlet(1)).await.unwrap_err(), pdu.switch(&outlet(1), OutletCommand::Off).await.unwrap_err()]
    {
        assert!(
            matches!(&error, PduError::UnsupportedModel(text) if text.contains("1.3.6.1.4.1.318.1.3.4.6")),
            "{error:?}"
        );
    }
    assert!(peer.commands().is_empty(), "nothing was set");
}

#[tokio::test]
async fn v2c_works_only_when_configured_explicitly_and_says_it_is_insecure() {
    let peer = SnmpPduPeer::start(&SnmpPduSpec::default());
    let community = |community: &str| SnmpConfig {
        security: SnmpSecurity::Community {
            version: CommunityVersion::V2c,
            community: Password::new(community.into()),
        },
        ..v3_config(&peer, usm(V3_AUTH_KEY, V3_PRIV_KEY))
    };
    let config = community(COMMUNITY);
    assert!(config.is_insecure());
    let pdu = SnmpPdu::connect(config).await.unwrap();
    assert!(pdu.is_insecure());
    pdu.switch(&outlet(3), OutletCommand::Off).await.unwrap();
    assert_eq!(pdu.read(&outlet(3)).await.unwrap().state, OutletState::Off);
    assert_eq!(peer.fence_apc_snmp_status(3, false).0, 2);
    // The default configuration is v3: the community alone gets nowhere, and a wrong community is
    // dropped by the agent (v2c has no way to say no), which reads as silence.
    assert!(!SnmpConfig::new(peer.address(), usm(V3_AUTH_KEY, V3_PRIV_KEY)).is_insecure());
    let wrong = SnmpPdu::connect(quick(community("not-the-community"))).await.unwrap();
    let error = wrong.read(&outlet(3)).await.unwrap_err();
    assert!(matches!(error, PduError::Timeout { tries: 2, .. }), "{error:?}");
    assert!(!format!("{error} {error:?} {wrong:?} {pdu:?}").contains("community"));
}

#[tokio::test]
async fn wrong_snmpv3_keys_are_a_typed_auth_error_without_the_keys() {
    let peer = SnmpPduPeer::start(&SnmpPduSpec::default());
    for (auth, privacy) in [("wrong-auth-key-9", V3_PRIV_KEY), (V3_AUTH_KEY, "wrong-priv-key-9")] {
        let pdu = SnmpPdu::connect(quick(v3_config(&peer, usm(auth, privacy)))).await.unwrap();
        let started = Instant::now();
        let error = pdu.switch(&outlet(1), OutletCommand::Off).await.unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(error, PduError::Unauthorized(_)), "{auth} {privacy}: {error:?}");
        let shown = format!("{error} {error:?} {pdu:?}");
        assert!(!shown.contains("wrong-") && !shown.contains("s3cret"), "{shown}");
        eprintln!("wrong v3 key ({}): {error} after {elapsed:.2?}", if auth == V3_AUTH_KEY { "priv" } else { "auth" });
    }
    assert!(peer.commands().is_empty(), "nothing was set");
}

#[tokio::test]
async fn a_pdu_that_stops_answering_is_a_typed_timeout_within_the_budget() {
    let peer = SnmpPduPeer::start(&SnmpPduSpec::default());
    let pdu = SnmpPdu::connect(quick(v3_config(&peer, usm(V3_AUTH_KEY, V3_PRIV_KEY)))).await.unwrap();
    pdu.read(&outlet(1)).await.unwrap();
    peer.freeze();
    let started = Instant::now();
    let error = pdu.read(&outlet(1)).await.unwrap_err();
    let elapsed = started.elapsed();
    peer.thaw();
    // 400 ms per try, 2 tries: the budget is 800 ms, plus scheduling.
    assert!(matches!(error, PduError::Timeout { tries: 2, .. }), "{error:?}");
    assert!(elapsed >= Duration::from_millis(800) && elapsed < Duration::from_millis(1300), "{elapsed:?}");
    assert_eq!(error.category(), "timeout");
    eprintln!("frozen PDU: {error} after {elapsed:.2?}");
}

#[tokio::test]
async fn a_rebooted_pdu_is_read_again_after_one_rediscovery() {
    let mut peer = SnmpPduPeer::start(&SnmpPduSpec::default());
    let pdu = v3(&peer).await;
    pdu.switch(&outlet(4), OutletCommand::Off).await.unwrap();
    peer.reboot();
    let started = Instant::now();
    let reading = pdu.read(&outlet(4)).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(reading.state, OutletState::Off, "the outlet kept its state across the reboot");
    eprintln!("read after the PDU rebooted: {elapsed:.2?}");
}

// Fencing levels through the fence loop -------------------------------------------------------------
//
// The real loop (`sim::lab`) against a real sushy BMC (tests/peers/machine.py) and real PDUs: the
// snmpsim APC rPDU and the Redfish PDU. One machine model owns the machine's power: while any outlet
// that feeds it is On, its BMC answers; once all are Off, the BMC loses its power with the host (its
// emulator frozen: requests reach it and are never answered).

mod levels {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };

    use coroner::{
        api::{
            CoronerRemediationSpec, CoronerRemediationStatus, Duration as ApiDuration, FenceAction, MappingProof,
            PduLevel, Phase, ReleaseKind, Retry,
        },
        bmc::RedfishClient,
        contract, fence,
        sim::lab::{Lab, LabClock, Setup},
    };
    use support::machine::{Machine, MachineSpec};

    use super::*;

    const UUID: &str = "7f3b0c1e-0000-4000-8000-0000000000c1";
    const OTHER: &str = "7f3b0c1e-0000-4000-8000-0000000000c2";

    #[derive(Clone, Debug)]
    enum Device {
        Snmp(SnmpPdu, OutletNumber),
        Redfish(Box<RedfishPdu>, OutletId),
    }

    /// The level as the lab's loop sees it: the binding's outlets, each through its real client.
    #[derive(Clone, Debug)]
    struct TestLevel(Vec<(String, Device)>);

    impl coroner::driver::ports::Level for TestLevel {
        fn outlets(&self) -> Vec<(String, f64)> {
            self.0.iter().map(|(key, _)| (key.clone(), FLOOR_WATTS)).collect()
        }

        async fn read(&self, index: usize) -> Result<OutletReading, PduError> {
            match &self.0[index].1 {
                Device::Snmp(pdu, outlet) => pdu.read(outlet).await,
                Device::Redfish(pdu, outlet) => pdu.read(outlet).await,
            }
        }

        async fn switch_off(&self, index: usize) -> Result<(), PduError> {
            match &self.0[index].1 {
                Device::Snmp(pdu, outlet) => pdu.switch(outlet, OutletCommand::Off).await,
                Device::Redfish(pdu, outlet) => pdu.switch(outlet, OutletCommand::Off).await,
            }
        }
    }

    fn bmc(machine: &Machine) -> RedfishClient {
        coroner::bmc::RedfishClient::new(RedfishConfig {
            endpoint: machine.endpoint(),
            trust: tls::Trust { ca_bundle_pem: Some(peers().pem("ca")), ..tls::Trust::default() },
            credentials: Credentials { username: USER.into(), password: Password::new(PASSWORD.into()) },
            request_timeout: Duration::from_secs(1),
            read_retries: 0,
            retry_backoff: Duration::from_millis(100),
        })
        .unwrap()
    }

    fn spec() -> CoronerRemediationSpec {
        CoronerRemediationSpec {
            action: FenceAction::Off,
            power_off_timeout: ApiDuration::from_secs(6),
            retry: Retry { count: 1, interval: ApiDuration::from_secs(1) },
            ..CoronerRemediationSpec::default()
        }
    }

    /// The binding's level 2: SNMP outlets 1 and 2 of `snmp` (and the Redfish PDU's A1, when given).
    fn level(snmp: &SnmpPduPeer, redfish: Option<&RedfishPduPeer>, statement: bool) -> PduLevel {
        let (host, port) =
            snmp.address().split_once(':').map(|(h, p)| (h.to_owned(), p.parse::<u16>().unwrap())).unwrap();
        let mut outlets = vec![
            json!({"snmp": {"address": host, "port": port, "outlet": 1}, "credentialsSecretRef": {"name": "pdu-a"}}),
        ];
        match redfish {
            Some(peer) => outlets.push(json!({
                "redfish": {"endpoint": peer.endpoint(), "rackPdu": "1", "outlet": "A1"},
                "credentialsSecretRef": {"name": "pdu-b"},
                "tls": {"certificateSHA256": "00"},
            })),
            None => outlets.push(
                json!({"snmp": {"address": host, "port": port, "outlet": 2}, "credentialsSecretRef": {"name": "pdu-a"}}),
            ),
        }
        let mut level: PduLevel = serde_json::from_value(json!({ "outlets": outlets })).unwrap();
        level.mapping_proof = statement.then_some(MappingProof::OperatorStatement);
        level
    }

    async fn devices(snmp: &SnmpPduPeer, redfish: Option<&RedfishPduPeer>, level: &PduLevel) -> TestLevel {
        let mut devices = Vec::new();
        for outlet in &level.outlets {
            let device = match (&outlet.snmp, redfish) {
                (Some(s), _) => Device::Snmp(v3(snmp).await, OutletNumber::new(s.outlet).unwrap()),
                (None, Some(peer)) => Device::Redfish(Box::new(super::redfish(peer)), a1()),
                (None, None) => unreachable!(),
            };
            devices.push((outlet.key(), device));
        }
        TestLevel(devices)
    }

    /// The machine model: once every outlet feeding the machine reads Off, its BMC loses power (its
    /// process ends and its address answers nothing); the address stays dark while this lives.
    struct PowerModel {
        dead: Arc<AtomicBool>,
        dark: Arc<std::sync::Mutex<Option<std::process::Child>>>,
    }

    impl Drop for PowerModel {
        fn drop(&mut self) {
            if let Some(mut child) = self.dark.lock().unwrap().take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    fn power_model(snmp_dir: std::path::PathBuf, outlets: &'static [&'static str], machine: &Machine) -> PowerModel {
        let (bmc_pid, port) = (machine.pid(), machine.port);
        let model = PowerModel { dead: Arc::default(), dark: Arc::default() };
        let (flag, dark) = (model.dead.clone(), model.dark.clone());
        std::thread::spawn(move || {
            while !flag.load(Ordering::Acquire) {
                let state: serde_json::Value = std::fs::read_to_string(snmp_dir.join("outlets.json"))
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or(serde_json::Value::Null);
                if outlets.iter().all(|n| state[*n]["state"] == "Off") {
                    let _ = std::process::Command::new("kill").args(["-KILL", &bmc_pid.to_string()]).status();
                    std::thread::sleep(Duration::from_millis(50));
                    *dark.lock().unwrap() = Some(support::machine::dark(port));
                    flag.store(true, Ordering::Release);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        model
    }

    async fn fence_with(
        machine: &Machine,
        node_uuid: &str,
        spec: CoronerRemediationSpec,
        level: PduLevel,
        devices: TestLevel,
    ) -> (CoronerRemediationStatus, Lab<RedfishClient, TestLevel>) {
        let lab = Lab::with_level(&Setup::new(node_uuid, spec), LabClock::real(), bmc(machine), Some(devices));
        lab.world(|t| t.bindings.values_mut().for_each(|b| b.spec.pdu_levels = vec![level.clone()]));
        let status = lab.run().await;
        assert!(fence::phase_of(&status).is_terminal(), "the fence did not end: {status:?}, errors {:?}", lab.errors());
        (status, lab)
    }

    fn reason(status: &CoronerRemediationStatus) -> (String, String) {
        let c = coroner::api::conditions::find(&status.conditions, contract::SUCCEEDED).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    #[tokio::test]
    async fn a_bmc_dead_with_its_host_is_proven_off_through_both_outlets_and_the_node_released() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec { transition: 0.3, ..SnmpPduSpec::default() });
        let mut machine = Machine::start(&MachineSpec::new(UUID));
        // The host's supply failed downstream of the PDU: the BMC is dead, the outlets still read On.
        machine.go_dark();
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let started = Instant::now();
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        let took = started.elapsed();
        assert_eq!(reason(&status), ("True".into(), "RemediationComplete".into()), "{:?}", lab.reasons());
        assert!(lab.phases().contains(&Phase::PoweringOffOutlets));
        let evidence = status.evidence.unwrap();
        let proof = evidence.power_off.unwrap().level.unwrap();
        assert_eq!(
            (proof.level, proof.mapping.as_str(), proof.bmc_after.as_str()),
            (2, "OperatorStatement", "no answer")
        );
        assert_eq!(proof.outlets.iter().map(|o| o.state.as_str()).collect::<Vec<_>>(), ["Off", "Off"]);
        assert_eq!(evidence.release.unwrap().kind, ReleaseKind::LevelProof);
        assert_eq!(snmp.commands(), ["1:2", "2:2"], "immediateOff to each outlet, once");
        assert!(lab.reasons().contains(&"OutletMappingUnproven".to_owned()));
        eprintln!("BMC dead → released through level 2 (SNMPv3, two outlets): {took:.2?}");
    }

    #[tokio::test]
    async fn a_hung_bmc_that_still_takes_connections_after_the_outlets_went_off_is_no_silence() {
        let snmp = SnmpPduSpec::default();
        let snmp = SnmpPduPeer::start(&snmp);
        let machine = Machine::start(&MachineSpec::new(UUID));
        // Its service hangs (no HTTP answer) while its network stack, so its power, is up (L7).
        machine.freeze();
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        machine.thaw();
        assert_eq!(reason(&status), ("False".into(), "OutletMappingWrong".into()), "{:?}", lab.reasons());
        assert!(status.evidence.unwrap().release.is_none(), "nothing released");
        assert_eq!(snmp.commands(), ["1:2", "2:2"], "the outlets went off, and proved nothing with the BMC alive");
    }

    #[tokio::test]
    async fn the_guard_switches_the_level_off_again_when_an_outlet_is_switched_on_behind_its_back() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let mut machine = Machine::start(&MachineSpec::new(UUID));
        machine.go_dark();
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert_eq!(reason(&status), ("True".into(), "RemediationComplete".into()), "{:?}", lab.reasons());
        // Someone switches outlet 2 back on, without an approval.
        v3(&snmp).await.switch(&OutletNumber::new(2).unwrap(), OutletCommand::On).await.unwrap();
        lab.clock().sleep(Duration::from_secs(12)).await;
        lab.reconcile().await.unwrap();
        assert_eq!(
            snmp.commands(),
            ["1:2", "2:2", "2:1", "1:2", "2:2"],
            "the guard switched the level off again: {:?} {:?} {:?}",
            lab.reasons(),
            lab.status().guard,
            lab.errors()
        );
        let reasons = lab.reasons();
        assert!(reasons.contains(&"ReleasedMachinePoweredOn".to_owned()), "{reasons:?}");
        assert!(reasons.contains(&"GuardForceOffSent".to_owned()), "{reasons:?}");
        let guard = lab.status().guard.unwrap();
        assert_eq!(guard.enforced, 1);
        assert!(guard.last_finding.unwrap().seen.contains("outlet snmp:127.0.0.1:"), "the finding names the outlet");
    }

    #[tokio::test]
    async fn a_welded_relay_feeding_the_released_machine_gets_the_guard_s_force_off_through_its_bmc_too() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let redfish = RedfishPduPeer::start(&RedfishPduSpec { load: Some(240.0), ..RedfishPduSpec::default() });
        let mut machine = Machine::start(&MachineSpec::new(UUID));
        machine.go_dark();
        let level = level(&snmp, Some(&redfish), true);
        let devices = devices(&snmp, Some(&redfish), &level).await;
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert_eq!(reason(&status), ("True".into(), "RemediationComplete".into()), "{:?}", lab.reasons());
        // After the release the relay welds, power comes back to the machine through it, and its BMC
        // answers again, reading the machine On.
        redfish.force("A1", json!({"welded": true}));
        let dir = tempfile::tempdir().unwrap();
        let port = machine.port;
        machine.stop();
        let back = Machine::start_on(&MachineSpec::new(UUID), dir.path(), port);
        lab.clock().sleep(Duration::from_secs(12)).await;
        // The first round finds the machine through the binding (level 1 never proved it), the next reads it.
        for _ in 0..2 {
            lab.reconcile().await.unwrap();
            lab.clock().sleep(Duration::from_secs(12)).await;
        }
        // The outlets were switched off again (they read Off and still draw), and the BMC's ForceOff sent.
        let resets: Vec<String> = back.requests().into_iter().filter(|r| r.starts_with("POST")).collect();
        assert!(resets.iter().any(|r| r.contains("ForceOff")), "{resets:?} {:?} {:?}", lab.reasons(), lab.errors());
        let reasons = lab.reasons();
        assert!(reasons.iter().filter(|r| *r == "GuardForceOffSent").count() >= 2, "{reasons:?}");
    }

    #[tokio::test]
    async fn the_guard_withholds_its_off_from_an_outlet_another_live_node_names() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let mut machine = Machine::start(&MachineSpec::new(UUID));
        machine.go_dark();
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let (status, lab) = fence_with(&machine, UUID, spec(), level.clone(), devices).await;
        assert_eq!(reason(&status), ("True".into(), "RemediationComplete".into()), "{:?}", lab.reasons());
        // Since the release, another node's binding names outlet 2 too, undeclared (L6).
        lab.world(|t| {
            let mut other = t.bindings.values().next().unwrap().clone();
            other.metadata.name = Some("worker-2".into());
            other.metadata.uid = Some("binding-2".into());
            other.spec.node_name = "worker-2".into();
            other.spec.pdu_levels = vec![PduLevel { outlets: vec![level.outlets[1].clone()], mapping_proof: None }];
            t.bindings.insert("worker-2".into(), other);
        });
        v3(&snmp).await.switch(&OutletNumber::new(2).unwrap(), OutletCommand::On).await.unwrap();
        lab.clock().sleep(Duration::from_secs(12)).await;
        lab.reconcile().await.unwrap();
        // The finding stands; the Off is withheld, saying why.
        assert_eq!(snmp.commands(), ["1:2", "2:2", "2:1"], "no outlet switched: {:?}", lab.reasons());
        let reasons = lab.reasons();
        assert!(reasons.contains(&"ReleasedMachinePoweredOn".to_owned()), "{reasons:?}");
        let guard = lab.status().guard.unwrap();
        let result = guard.intent.and_then(|i| i.result).unwrap_or_default();
        assert!(result.contains("not sent") && result.contains("worker-2"), "{result}");
        // The dark BMC read next does not hide the outlet that is back on.
        let status = lab.status();
        let condition = coroner::api::conditions::find(&status.conditions, coroner::guard::GUARD).unwrap();
        assert_eq!(condition.reason, coroner::guard::POWERED_ON, "{condition:?}");
    }

    #[tokio::test]
    async fn the_guard_withholds_its_off_from_a_level_edited_since_its_reading() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let mut machine = Machine::start(&MachineSpec::new(UUID));
        machine.go_dark();
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert_eq!(reason(&status), ("True".into(), "RemediationComplete".into()), "{:?}", lab.reasons());
        v3(&snmp).await.switch(&OutletNumber::new(2).unwrap(), OutletCommand::On).await.unwrap();
        // The binding is edited between the reading that found outlet 2 On and the Off it asked for.
        lab.edit_binding_as_the_guard_persists_its_intent();
        lab.clock().sleep(Duration::from_secs(12)).await;
        lab.reconcile().await.unwrap();
        assert_eq!(snmp.commands(), ["1:2", "2:2", "2:1"], "no outlet switched: {:?}", lab.reasons());
        let guard = lab.status().guard.unwrap();
        let result = guard.intent.and_then(|i| i.result).unwrap_or_default();
        assert!(result.contains("not sent") && result.contains("changed"), "{result}");
        assert_eq!(guard.enforced, 0);
    }

    #[tokio::test]
    async fn the_guard_waits_for_the_pdus_turn_before_its_off() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let mut machine = Machine::start(&MachineSpec::new(UUID));
        machine.go_dark();
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let origin = coroner::api::outlet_origin(&level.outlets[0].key()).to_owned();
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert_eq!(reason(&status), ("True".into(), "RemediationComplete".into()), "{:?}", lab.reasons());
        v3(&snmp).await.switch(&OutletNumber::new(2).unwrap(), OutletCommand::On).await.unwrap();
        lab.clock().sleep(Duration::from_secs(12)).await;
        // Another fence of this process holds the PDU's turn while the guard finds the outlet On.
        let turn = lab.local().origins.turn(&origin).await;
        let finished = AtomicBool::new(false);
        let round = async {
            let result = lab.reconcile().await;
            finished.store(true, Ordering::Release);
            result
        };
        let other_fence = async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(snmp.commands(), ["1:2", "2:2", "2:1"], "nothing sent while the turn is held");
            assert!(!finished.load(Ordering::Acquire), "the guard waits for the turn");
            drop(turn);
        };
        let (result, ()) = tokio::join!(round, other_fence);
        result.unwrap();
        assert_eq!(snmp.commands(), ["1:2", "2:2", "2:1", "1:2", "2:2"], "then the level switched off");
    }

    #[tokio::test]
    async fn a_reset_that_never_reached_off_is_finished_by_the_outlets_and_the_bmc_dies_with_them() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let machine = Machine::start(&MachineSpec { disable_power_off: true, ..MachineSpec::new(UUID) });
        let model = power_model(snmp.dir.clone(), &["1", "2"], &machine);
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert!(model.dead.load(Ordering::Acquire), "the outlets went off");
        assert_eq!(reason(&status), ("True".into(), "RemediationComplete".into()), "{:?}", lab.reasons());
        let evidence = status.evidence.unwrap();
        // Level 1 proved the identity and its ForceOff was refused; the outlets finished the job.
        assert!(evidence.identity.is_some());
        assert_eq!(evidence.power_off.unwrap().level.unwrap().bmc_after, "no answer");
    }

    #[tokio::test]
    async fn a_second_outlet_that_still_feeds_the_machine_releases_nothing() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let redfish = RedfishPduPeer::start(&RedfishPduSpec { load: Some(240.0), ..RedfishPduSpec::default() });
        // A welded relay: reads Off after the command and keeps drawing 240 W.
        redfish.force("A1", json!({"welded": true}));
        let mut machine = Machine::start(&MachineSpec::new(UUID));
        machine.go_dark();
        let level = level(&snmp, Some(&redfish), true);
        let devices = devices(&snmp, Some(&redfish), &level).await;
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert_eq!(reason(&status), ("False".into(), "PowerOffNotConfirmed".into()), "{:?}", lab.reasons());
        let message = coroner::api::conditions::find(&status.conditions, contract::SUCCEEDED).unwrap().message.clone();
        assert!(message.contains("draws 240 W"), "{message}");
        assert!(status.evidence.unwrap().release.is_none(), "nothing released");
        assert!(
            lab.world(|t| t.node("worker-1"))
                .unwrap()
                .spec
                .unwrap()
                .taints
                .unwrap_or_default()
                .iter()
                .all(|t| t.key != "node.kubernetes.io/out-of-service")
        );
    }

    #[tokio::test]
    async fn a_bmc_still_reading_on_after_the_outlets_went_off_shows_the_mapping_wrong() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        // These outlets feed another machine: this one's BMC keeps answering, its ForceOff refused.
        let machine = Machine::start(&MachineSpec { disable_power_off: true, ..MachineSpec::new(UUID) });
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let (status, lab) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert_eq!(reason(&status), ("False".into(), "OutletMappingWrong".into()), "{:?}", lab.reasons());
        assert!(status.evidence.unwrap().release.is_none());
        assert_eq!(machine.power_state(), "On");
    }

    #[tokio::test]
    async fn a_uuid_mismatch_at_the_bmc_leaves_the_pdu_untouched() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let machine = Machine::start(&MachineSpec::new(OTHER));
        let level = level(&snmp, None, true);
        let devices = devices(&snmp, None, &level).await;
        let (status, _) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert_eq!(reason(&status), ("False".into(), "IdentityMismatch".into()));
        assert!(snmp.commands().is_empty(), "no outlet was switched");
    }

    #[tokio::test]
    async fn a_level_nothing_confirmed_and_no_one_stated_is_not_tried() {
        let snmp = SnmpPduPeer::start(&SnmpPduSpec::default());
        let mut machine = Machine::start(&MachineSpec::new(UUID));
        machine.go_dark();
        let level = level(&snmp, None, false);
        let devices = devices(&snmp, None, &level).await;
        let (status, _) = fence_with(&machine, UUID, spec(), level, devices).await;
        assert_eq!(reason(&status), ("False".into(), "BmcUnreachable".into()));
        let message = coroner::api::conditions::find(&status.conditions, contract::SUCCEEDED).unwrap().message.clone();
        assert!(message.contains("level 2 not tried: nothing confirmed"), "{message}");
        assert!(snmp.commands().is_empty());
    }
}
