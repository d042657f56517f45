//! The IPMI v2.0 RMCP+ client against real peers: Debian's `ipmi_sim` (OpenIPMI) and pyghmi's BMC
//! (tests/peers/ipmi_bmc.py), with ipmitool and fence_ipmilan reading the same machines as
//! independent cross-checks. `make peers` installs them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use coroner::{
    bmc::{BmcError, Password, PowerState, ResetType},
    contract::Reason,
    ipmi::{
        AuthFailure, BmcKey, CipherRefusal, Guid, GuidLayout, IpmiClient, IpmiConfig, IpmiError, Privilege,
        SetupProblem,
    },
};
use support::{
    ipmi::{IpmiSim, Peer, Pyghmi, PyghmiSpec, SimSpec, fence_ipmilan, ipmitool, ipmitool_killed_mid_session},
    machine::{PASSWORD, USER},
};
use uuid::Uuid;

/// The node's `systemUUID` in every test.
const NODE: &str = "4c4c4544-0042-3510-8058-b4c04f4e3232";
/// Loopback answers in milliseconds; the slack is for a loaded 2-core machine (pyghmi is Python).
const TIMEOUT: Duration = Duration::from_secs(1);
const RETRIES: u32 = 2;

fn node() -> Uuid {
    Uuid::parse_str(NODE).unwrap()
}

fn config(peer: &Peer, password: &str) -> IpmiConfig {
    IpmiConfig {
        port: peer.port,
        request_timeout: TIMEOUT,
        retries: RETRIES,
        ..IpmiConfig::new("127.0.0.1", USER, Password::new(password.into()))
    }
}

fn client(peer: &Peer) -> IpmiClient {
    IpmiClient::new(config(peer, PASSWORD)).unwrap()
}

fn sim(layout: GuidLayout, power_on: bool) -> IpmiSim {
    IpmiSim::start(&SimSpec { guid: Some(*Guid::of(node(), layout).as_bytes()), power_on, power_file: None })
}

fn pyghmi(layout: GuidLayout) -> Pyghmi {
    Pyghmi::start(&PyghmiSpec::new(*Guid::of(node(), layout).as_bytes()))
}

/// What ipmitool prints as the GUID in one layout. ipmitool 1.8.19's usage says `mc guid rfc4122`,
/// but its parser takes `rfc` (and silently falls back to auto-detection for `rfc4122`).
fn ipmitool_guid(port: u16, layout: GuidLayout) -> String {
    let mode = if layout == GuidLayout::Rfc4122 { "rfc" } else { layout.as_str() };
    let (code, out) = ipmitool(port, &["mc", "guid", mode]);
    assert_eq!(code, 0, "{out}");
    let line = out.lines().find(|l| l.starts_with("System GUID")).unwrap();
    line.split(':').nth(1).unwrap().trim().to_lowercase()
}

#[tokio::test]
async fn ipmi_sim_proves_its_guid_in_the_ipmi_layout_as_ipmitool_reads_it() {
    let sim = sim(GuidLayout::Ipmi, true);
    let started = Instant::now();
    let identity = client(&sim.0).identity().await.unwrap();
    eprintln!("identity (ipmi_sim): {:.1?}", started.elapsed());
    assert_eq!(identity.rakp2_guid, identity.session_guid);
    assert_eq!(identity.matches(NODE), [GuidLayout::Ipmi]);
    for spelling in identity.spellings() {
        assert_eq!(spelling.uuid.to_string(), ipmitool_guid(sim.0.port, spelling.layout), "{:?}", spelling.layout);
    }
}

#[tokio::test]
async fn pyghmi_proves_its_guid_in_each_layout_it_is_given() {
    for layout in GuidLayout::ALL {
        let bmc = pyghmi(layout);
        let identity = client(&bmc.0).identity().await.unwrap();
        assert_eq!(identity.rakp2_guid, identity.session_guid);
        assert_eq!(identity.matches(NODE), [layout]);
        assert_eq!(identity.rakp2_guid, Guid::of(node(), layout));
    }
}

#[tokio::test]
async fn the_two_peers_present_the_node_in_different_layouts() {
    let sim = sim(GuidLayout::Ipmi, true);
    let bmc = pyghmi(GuidLayout::Rfc4122);
    let (a, b) = (client(&sim.0).identity().await.unwrap(), client(&bmc.0).identity().await.unwrap());
    assert_ne!(a.rakp2_guid, b.rakp2_guid, "different bytes on the wire");
    assert_eq!((a.matches(NODE), b.matches(NODE)), (vec![GuidLayout::Ipmi], vec![GuidLayout::Rfc4122]));
}

fn assert_refused_unshown(error: &IpmiError, wrong: &str) {
    assert!(matches!(error, IpmiError::Unauthorized { failure: AuthFailure::Rakp2Mismatch, .. }), "{error:?}");
    assert!(!error.is_transient());
    assert_eq!((error.category(), error.reason()), ("unauthorized", Reason::BmcAuthenticationFailed));
    let bmc_error = BmcError::from(error.clone());
    assert_eq!((bmc_error.category(), bmc_error.reason()), ("unauthorized", Reason::BmcAuthenticationFailed));
    for shown in [error.to_string(), format!("{error:?}"), bmc_error.to_string(), format!("{bmc_error:?}")] {
        assert!(!shown.contains(wrong) && !shown.contains(PASSWORD), "a password in {shown:?}");
    }
}

#[tokio::test]
async fn a_wrong_password_is_refused_for_good_and_never_shown() {
    let wrong = "not-the-pass-w0rd";
    let sim = sim(GuidLayout::Ipmi, true);
    let bmc = pyghmi(GuidLayout::Rfc4122);
    for peer in [&sim.0, &bmc.0] {
        let client = IpmiClient::new(config(peer, wrong)).unwrap();
        assert!(!format!("{client:?}").contains(wrong));
        let started = Instant::now();
        let error = client.power().await.unwrap_err();
        assert!(started.elapsed() < TIMEOUT, "refused at RAKP 2, not timed out: {:?}", started.elapsed());
        assert_refused_unshown(&error, wrong);
    }
    assert_eq!((sim.0.power(), bmc.0.power()), ("On".into(), "On".into()));
}

#[tokio::test]
async fn power_status_reads_the_machines_power_as_ipmitool_and_fence_ipmilan_do() {
    for power_on in [true, false] {
        let sim = sim(GuidLayout::Ipmi, power_on);
        let bmc = Pyghmi::start(&PyghmiSpec {
            power_on,
            ..PyghmiSpec::new(*Guid::of(node(), GuidLayout::Smbios).as_bytes())
        });
        let (expected, tool, agent) = if power_on {
            (PowerState::On, "Chassis Power is on", 0)
        } else {
            (PowerState::Off, "Chassis Power is off", 2)
        };
        for peer in [&sim.0, &bmc.0] {
            let started = Instant::now();
            assert_eq!(client(peer).power().await.unwrap(), expected);
            eprintln!("power status: {:.1?}", started.elapsed());
            assert_eq!(ipmitool(peer.port, &["chassis", "power", "status"]), (0, format!("{tool}\n")));
            assert_eq!(fence_ipmilan(peer.port, "status"), agent);
        }
    }
}

/// The fence's cycle in one session: identity, power down, read Off.
async fn identity_off_read(peer: &Peer) -> (u32, Duration) {
    let started = Instant::now();
    let mut session = client(peer).session().await.unwrap();
    assert_eq!(session.identity().await.unwrap().matches(NODE).len(), 1);
    session.act(ResetType::ForceOff).await.unwrap();
    assert_eq!(session.power().await.unwrap(), PowerState::Off);
    let sent = session.datagrams_sent() + 1;
    session.close().await;
    (sent, started.elapsed())
}

/// The Chassis Control directives pyghmi received, repeats (a resent request) folded.
fn chassis_directives(bmc: &Pyghmi) -> Vec<u64> {
    let mut directives: Vec<_> = bmc
        .log()
        .into_iter()
        .filter(|e| e["event"] == "request" && e["netfn"] == 0 && e["command"] == 2)
        .map(|e| e["data"][0].as_u64().unwrap())
        .collect();
    directives.dedup();
    directives
}

#[tokio::test]
async fn power_off_reads_off_everywhere_and_power_on_reads_on() {
    let sim = sim(GuidLayout::Ipmi, true);
    let bmc = pyghmi(GuidLayout::Rfc4122);
    for (name, peer) in [("ipmi_sim", &sim.0), ("pyghmi", &bmc.0)] {
        let (sent, wall) = identity_off_read(peer).await;
        eprintln!("identity + off + read Off ({name}): {sent} datagrams, {wall:.1?}");
        assert_eq!(peer.power(), "Off");
        assert_eq!(ipmitool(peer.port, &["chassis", "power", "status"]).1, "Chassis Power is off\n");
        assert_eq!(fence_ipmilan(peer.port, "status"), 2);

        let started = Instant::now();
        client(peer).act(ResetType::On).await.unwrap();
        eprintln!("power on ({name}): {:.1?}", started.elapsed());
        assert_eq!(client(peer).power().await.unwrap(), PowerState::On);
        assert_eq!(peer.power(), "On");
        assert_eq!(fence_ipmilan(peer.port, "status"), 0);
    }
    // One power down, then one power up reached each machine, and nothing else was asked (a loaded
    // machine may answer late: the resent request repeats the same directive).
    let mut controls = sim.controls();
    controls.dedup();
    assert_eq!(controls, ["set power 0", "set power 1"]);
    let directives = chassis_directives(&bmc);
    assert_eq!(directives, [0, 1]);
    assert_eq!(bmc.events("refused-control"), 0);
}

#[tokio::test]
async fn an_identity_off_read_cycle_fits_in_a_few_datagrams() {
    let sim = sim(GuidLayout::Ipmi, true);
    let (sent, _) = identity_off_read(&sim.0).await;
    // Capabilities, Open Session, RAKP 1, RAKP 3, privilege, GUID, control, status, close.
    assert_eq!(sent, 9);
}

#[tokio::test]
async fn a_bmc_killed_mid_session_is_unreachable_within_the_request_budget() {
    let mut bmc = pyghmi(GuidLayout::Rfc4122);
    let mut session = client(&bmc.0).session().await.unwrap();
    bmc.0.kill();
    let started = Instant::now();
    let error = session.power().await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(error, IpmiError::NoAnswer { .. }), "{error:?}");
    assert!(error.is_transient());
    assert_eq!((error.category(), error.reason()), ("unreachable", Reason::BmcUnreachable));
    assert!(took <= TIMEOUT * (RETRIES + 1) + Duration::from_millis(200), "{took:?}");
    eprintln!("killed BMC: {error} after {took:.1?}");
    session.close().await;
}

#[tokio::test]
async fn a_bmc_frozen_mid_session_times_out_within_the_request_budget() {
    let sim = sim(GuidLayout::Ipmi, true);
    let mut session = client(&sim.0).session().await.unwrap();
    sim.0.freeze();
    let started = Instant::now();
    let error = session.act(ResetType::ForceOff).await.unwrap_err();
    let took = started.elapsed();
    let IpmiError::NoAnswer { attempts, .. } = error else { panic!("{error:?}") };
    assert_eq!(attempts, RETRIES + 1);
    assert!(
        took >= TIMEOUT * (RETRIES + 1) && took <= TIMEOUT * (RETRIES + 1) + Duration::from_millis(200),
        "{took:?}"
    );
    eprintln!("frozen BMC: no answer after {took:.1?}");
    let started = Instant::now();
    session.close().await;
    assert!(started.elapsed() <= TIMEOUT + Duration::from_millis(100), "close waits one attempt");
}

/// L7's question over IPMI: a fresh session; any answer to its first message is an answer, none
/// at all is silence.
#[tokio::test]
async fn a_frozen_bmc_is_heard_as_silence_and_a_live_one_as_an_answer() {
    use coroner::{bmc::Heard, driver::ports::Target};
    let sim = sim(GuidLayout::Ipmi, true);
    let bmc = client(&sim.0);
    assert_eq!(Target::heard(&bmc).await, Heard::Answered);
    sim.0.freeze();
    assert_eq!(Target::heard(&bmc).await, Heard::Silent);
    // A port that refuses (an ICMP port unreachable): the host's network stack has power.
    let mut killed = pyghmi(GuidLayout::Rfc4122);
    let bmc = client(&killed.0);
    killed.0.kill();
    assert_eq!(Target::heard(&bmc).await, Heard::Answered);
}

#[tokio::test]
async fn get_system_guid_answered_0xc1_is_identity_unavailable() {
    let bmc = Pyghmi::start(&PyghmiSpec {
        system_guid: "unavailable".into(),
        ..PyghmiSpec::new(*Guid::of(node(), GuidLayout::Rfc4122).as_bytes())
    });
    let error = client(&bmc.0).identity().await.unwrap_err();
    assert!(matches!(error, IpmiError::IdentityUnavailable { .. }), "{error:?}");
    assert_eq!((error.category(), error.is_transient()), ("identity-unavailable", false));
    // ipmitool reads it the same way.
    assert_ne!(ipmitool(bmc.0.port, &["mc", "guid"]).0, 0);
}

#[tokio::test]
async fn a_session_guid_other_than_rakp2s_is_refused() {
    let other = *Guid::of(node(), GuidLayout::Smbios).as_bytes();
    let bmc = Pyghmi::start(&PyghmiSpec {
        system_guid: hex::encode(other),
        ..PyghmiSpec::new(*Guid::of(node(), GuidLayout::Rfc4122).as_bytes())
    });
    let error = client(&bmc.0).identity().await.unwrap_err();
    let IpmiError::GuidsDiffer { rakp2, session, .. } = error else { panic!("{error:?}") };
    assert_eq!((rakp2, session), (Guid::of(node(), GuidLayout::Rfc4122), Guid::from_bytes(other)));
    assert_eq!(error.reason(), Reason::IdentityChanged);
}

#[tokio::test]
async fn cipher_suite_0_is_refused_by_coroner_though_ipmi_sim_accepts_it() {
    let sim = sim(GuidLayout::Ipmi, true);
    let (code, out) = ipmitool(sim.0.port, &["-C", "0", "chassis", "power", "status"]);
    assert_eq!((code, out.as_str()), (0, "Chassis Power is on\n"), "ipmi_sim speaks cipher suite 0");
    for suite in [0, 1, 2, 17] {
        let refused = IpmiClient::new(IpmiConfig { cipher_suite: suite, ..config(&sim.0, PASSWORD) }).unwrap_err();
        assert_eq!(refused, IpmiError::Setup(SetupProblem::CipherSuite(suite)));
    }
}

#[tokio::test]
async fn a_bmc_that_accepts_with_weaker_algorithms_is_refused() {
    let bmc = Pyghmi::start(&PyghmiSpec {
        downgrade: true,
        ..PyghmiSpec::new(*Guid::of(node(), GuidLayout::Rfc4122).as_bytes())
    });
    let error = client(&bmc.0).power().await.unwrap_err();
    let IpmiError::CipherSuite { refusal, .. } = error else { panic!("{error:?}") };
    assert_eq!(refusal, CipherRefusal::OtherAlgorithms { authentication: 0, integrity: 0, confidentiality: 0 });
}

#[tokio::test]
async fn a_bmc_key_of_its_own_must_be_configured() {
    let bmc = Pyghmi::start(&PyghmiSpec {
        kg: Some("coroner-bmc-key".into()),
        ..PyghmiSpec::new(*Guid::of(node(), GuidLayout::Rfc4122).as_bytes())
    });
    let error = client(&bmc.0).power().await.unwrap_err();
    assert!(matches!(error, IpmiError::BmcKeyMismatch { .. }), "{error:?}");
    assert_eq!((error.category(), error.reason()), ("bmc-key", Reason::BmcAuthenticationFailed));
    let keyed = IpmiConfig { kg: Some(BmcKey::new(b"coroner-bmc-key".to_vec())), ..config(&bmc.0, PASSWORD) };
    assert_eq!(IpmiClient::new(keyed).unwrap().power().await.unwrap(), PowerState::On);
}

#[tokio::test]
async fn administrator_privilege_can_be_asked_for() {
    let sim = sim(GuidLayout::Ipmi, true);
    let admin = IpmiConfig { privilege: Privilege::Administrator, ..config(&sim.0, PASSWORD) };
    assert_eq!(IpmiClient::new(admin).unwrap().power().await.unwrap(), PowerState::On);
}

fn limited(idle: f64) -> Pyghmi {
    Pyghmi::start(&PyghmiSpec {
        session_limit: Some((1, idle)),
        ..PyghmiSpec::new(*Guid::of(node(), GuidLayout::Rfc4122).as_bytes())
    })
}

#[tokio::test]
async fn a_killed_clients_session_holds_the_only_slot_until_the_bmcs_idle_timeout() {
    let idle = 2.0;
    let bmc = limited(idle);
    ipmitool_killed_mid_session(bmc.0.port);
    let killed = Instant::now();
    let error = client(&bmc.0).power().await.unwrap_err();
    assert!(matches!(error, IpmiError::NoSessionSlot { .. }), "{error:?}");
    assert!(error.is_transient());
    assert_eq!(error.category(), "no-session-slot");
    // The caller's retry after the BMC's idle timeout gets the slot.
    tokio::time::sleep(Duration::from_secs_f64(idle).saturating_sub(killed.elapsed()) + Duration::from_millis(100))
        .await;
    assert_eq!(client(&bmc.0).power().await.unwrap(), PowerState::On);
    assert_eq!(bmc.events("refused-open"), 1);
}

#[tokio::test]
async fn a_session_dropped_unclosed_closes_itself_and_frees_the_slot() {
    let bmc = limited(60.0);
    let client = client(&bmc.0);
    drop(client.session().await.unwrap());
    // A cancelled operation drops its session too.
    let cancelled = tokio::time::timeout(Duration::from_millis(500), async {
        let _session = client.session().await.unwrap();
        std::future::pending::<()>().await
    });
    assert!(cancelled.await.is_err());
    assert_eq!(client.power().await.unwrap(), PowerState::On);
    assert_eq!(bmc.events("refused-open"), 0);
    // pyghmi answers Close Session before it logs it.
    let started = Instant::now();
    while bmc.events("close") < 3 && started.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(bmc.events("close"), 3);
}

#[tokio::test]
async fn sessions_to_one_bmc_from_this_process_take_turns() {
    let bmc = limited(60.0);
    let (a, b) = (client(&bmc.0), client(&bmc.0));
    let (first, second) = tokio::join!(a.power(), b.identity());
    assert_eq!(first.unwrap(), PowerState::On);
    assert_eq!(second.unwrap().matches(NODE), [GuidLayout::Rfc4122]);
    assert_eq!(bmc.events("refused-open"), 0);
}

#[tokio::test]
async fn ipmi_sim_keeps_a_killed_clients_session_and_still_lets_the_next_client_in() {
    // ipmi_sim has 63 session slots and ends a session idle for 30 s: one left open by a client
    // that died costs a slot, not the next client's turn.
    let sim = sim(GuidLayout::Ipmi, true);
    ipmitool_killed_mid_session(sim.0.port);
    assert_eq!(client(&sim.0).power().await.unwrap(), PowerState::On);
}

#[tokio::test]
async fn an_unknown_user_is_refused_by_ipmi_sim_and_unanswered_by_pyghmi() {
    let sim = sim(GuidLayout::Ipmi, true);
    let bmc = pyghmi(GuidLayout::Rfc4122);
    let stranger =
        |peer: &Peer| IpmiClient::new(IpmiConfig { username: "stranger".into(), ..config(peer, PASSWORD) }).unwrap();
    let refused = stranger(&sim.0).power().await.unwrap_err();
    assert!(
        matches!(refused, IpmiError::Unauthorized { failure: AuthFailure::Refused(status), .. } if status.0 == 0x0d),
        "{refused:?}"
    );
    let unanswered = stranger(&bmc.0).power().await.unwrap_err();
    assert!(matches!(unanswered, IpmiError::NoAnswer { step: coroner::ipmi::Step::Rakp1, .. }), "{unanswered:?}");
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    format!("median {:.1?}, min {:.1?}, max {:.1?}", at(0.5), at(0.0), at(1.0))
}

#[tokio::test]
async fn every_operation_takes_milliseconds_on_loopback() {
    const RUNS: usize = 20;
    let sim = sim(GuidLayout::Ipmi, true);
    let bmc = pyghmi(GuidLayout::Rfc4122);
    for (name, peer) in [("ipmi_sim", &sim.0), ("pyghmi", &bmc.0)] {
        let client = client(peer);
        let mut times: [Vec<Duration>; 5] = Default::default();
        let mut datagrams = 0;
        for _ in 0..RUNS {
            let started = Instant::now();
            client.identity().await.unwrap();
            times[0].push(started.elapsed());
            let started = Instant::now();
            client.power().await.unwrap();
            times[1].push(started.elapsed());
            let (sent, wall) = identity_off_read(peer).await;
            datagrams = sent;
            times[2].push(wall);
            let started = Instant::now();
            client.act(ResetType::On).await.unwrap();
            times[3].push(started.elapsed());
            let started = Instant::now();
            client.act(ResetType::On).await.unwrap();
            times[4].push(started.elapsed());
        }
        let [identity, power, cycle, on, on_again] = times;
        eprintln!("{name}, {RUNS} runs each:");
        eprintln!("  identity (own session, 7 datagrams): {}", summary(identity));
        eprintln!("  power status (own session, 7 datagrams): {}", summary(power));
        eprintln!(
            "  identity + power down + read Off (one session, {datagrams} datagrams): {}",
            summary(cycle.clone())
        );
        eprintln!("  power up (own session): {}, again while On: {}", summary(on), summary(on_again));
        assert_eq!(peer.power(), "On");
    }
}

#[tokio::test]
async fn ipmi_sim_without_a_guid_offers_no_rmcp_plus_and_is_refused_before_a_session() {
    // OpenIPMI clears the IPMI v2.0 bits of its authentication capabilities when no GUID is set.
    let sim = IpmiSim::start(&SimSpec { guid: None, power_on: true, power_file: None });
    let error = client(&sim.0).identity().await.unwrap_err();
    assert!(matches!(error, IpmiError::NotIpmiV2 { .. }), "{error:?}");
    assert_eq!((error.category(), error.reason()), ("not-ipmi-v2", Reason::BmcProtocolError));
}

#[tokio::test]
async fn forged_foreign_and_replayed_replies_are_discarded_and_the_real_ones_taken() {
    let bmc = Pyghmi::start(&PyghmiSpec {
        tamper: true,
        ..PyghmiSpec::new(*Guid::of(node(), GuidLayout::Rfc4122).as_bytes())
    });
    let mut session = client(&bmc.0).session().await.unwrap();
    assert_eq!(session.identity().await.unwrap().matches(NODE), [GuidLayout::Rfc4122]);
    session.act(ResetType::ForceOff).await.unwrap();
    assert_eq!(session.power().await.unwrap(), PowerState::Off);
    // Set Session Privilege Level, Get System GUID, Chassis Control, Get Chassis Status: each answer
    // came after a forged copy and one for another session, and was replayed; nothing was resent.
    assert_eq!(session.datagrams_sent(), 8);
    assert!(session.datagrams_discarded() >= 4 * 2 + 3, "{}", session.datagrams_discarded());
    session.close().await;
    assert_eq!(bmc.0.power(), "Off");
}

// The fence loop over IPMI: the same loop, proof and identity rule as Redfish -------------------------

/// Runs the production fence loop (the lab's in-memory Kubernetes side, real time) for node worker-1
/// reporting `NODE` against `peer`, with `action` and a short timeout, until it ends or waits for
/// the node.
async fn fence_over_ipmi(
    peer: &Peer,
    action: coroner::api::FenceAction,
) -> (coroner::api::CoronerRemediationStatus, coroner::sim::lab::Lab<IpmiClient>) {
    fence_over_ipmi_verified_in(peer, action, None).await
}

/// As [`fence_over_ipmi`], the binding's last verification (at its current generation) having
/// proved the node in `verified` layout.
async fn fence_over_ipmi_verified_in(
    peer: &Peer,
    action: coroner::api::FenceAction,
    verified: Option<GuidLayout>,
) -> (coroner::api::CoronerRemediationStatus, coroner::sim::lab::Lab<IpmiClient>) {
    use coroner::{
        api::{CoronerRemediationSpec, Duration as ApiDuration},
        sim::lab::{Lab, LabClock, Setup},
    };
    let spec = CoronerRemediationSpec {
        action,
        power_off_timeout: ApiDuration::from_secs(20),
        ..CoronerRemediationSpec::default()
    };
    let lab = Lab::new(&Setup::new(NODE, spec), LabClock::real(), client(peer));
    if let Some(layout) = verified {
        lab.world(|t| {
            for binding in t.bindings.values_mut() {
                binding.status = Some(coroner::api::BmcBindingStatus {
                    system_id: Some(format!("{}{layout}", coroner::ipmi::PATH_PREFIX)),
                    uuid: Some(NODE.into()),
                    observed_generation: binding.metadata.generation,
                    ..Default::default()
                });
            }
        });
    }
    // A Reboot then waits for a kubelet, which none runs here.
    let settled = |s: &coroner::api::CoronerRemediationStatus| {
        let phase = coroner::fence::phase_of(s);
        phase.is_terminal() || phase == coroner::api::Phase::WaitingForNode
    };
    let status = lab.run_until(settled).await;
    assert!(settled(&status), "{status:?}, errors {:?}", lab.errors());
    (status, lab)
}

fn succeeded(status: &coroner::api::CoronerRemediationStatus) -> (String, String, String) {
    let c = coroner::api::conditions::find(&status.conditions, coroner::contract::SUCCEEDED).unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[tokio::test]
async fn the_fence_loop_proves_an_ipmi_machine_off_through_its_guid_in_the_layout_it_matched() {
    for layout in [GuidLayout::Ipmi, GuidLayout::Rfc4122] {
        let sim = sim(layout, true);
        let (status, lab) = fence_over_ipmi(&sim.0, coroner::api::FenceAction::Off).await;
        assert_eq!(coroner::fence::phase_of(&status), coroner::api::Phase::Done, "{:?}", succeeded(&status));
        assert_eq!(sim.0.power(), "Off");
        let identity = status.evidence.as_ref().unwrap().identity.clone().unwrap();
        assert_eq!(identity.system_path, format!("ipmi:chassis/guid-{layout}"));
        assert_eq!(identity.bmc_uuid, NODE);
        let mut controls = sim.controls();
        controls.dedup();
        assert_eq!(controls, ["set power 0"], "one power down, nothing else");
        let resets = &status.evidence.as_ref().unwrap().power_off.as_ref().unwrap().resets;
        assert_eq!(resets[0].result, "accepted (IPMI completion code 0x00)");
        assert!(lab.reasons().contains(&"NodeFenced".to_owned()));
    }
}

#[tokio::test]
async fn a_guid_that_spells_the_node_only_in_another_layout_than_verified_is_refused_with_no_power_action() {
    // Verified in the SMBIOS layout; the BMC now spells the node only in IPMI's (a changed identity).
    let changed = sim(GuidLayout::Ipmi, true);
    let (status, _) =
        fence_over_ipmi_verified_in(&changed.0, coroner::api::FenceAction::Off, Some(GuidLayout::Smbios)).await;
    let (state, reason, message) = succeeded(&status);
    assert_eq!((state.as_str(), reason.as_str()), ("False", "IdentityMismatch"), "{message}");
    assert!(changed.controls().is_empty(), "no chassis control: {:?}", changed.controls());
    assert_eq!(changed.0.power(), "On");
    // Verified in the layout it spells the node in: fenced.
    let same = sim(GuidLayout::Ipmi, true);
    let (status, _) =
        fence_over_ipmi_verified_in(&same.0, coroner::api::FenceAction::Off, Some(GuidLayout::Ipmi)).await;
    assert_eq!(coroner::fence::phase_of(&status), coroner::api::Phase::Done, "{:?}", succeeded(&status));
}

#[tokio::test]
async fn an_ipmi_guid_that_is_another_machine_s_is_refused_with_no_power_action() {
    let other = Uuid::parse_str("4c4c4544-0042-3510-8058-b4c04f4e9999").unwrap();
    let sim = IpmiSim::start(&SimSpec {
        guid: Some(*Guid::of(other, GuidLayout::Ipmi).as_bytes()),
        power_on: true,
        power_file: None,
    });
    let (status, _) = fence_over_ipmi(&sim.0, coroner::api::FenceAction::Off).await;
    let (state, reason, _) = succeeded(&status);
    assert_eq!((state.as_str(), reason.as_str()), ("False", "IdentityMismatch"));
    assert!(sim.controls().is_empty(), "no chassis control: {:?}", sim.controls());
    assert_eq!(sim.0.power(), "On");
}

#[tokio::test]
async fn the_fence_loop_proves_a_pyghmi_machine_off_and_reboots_it_with_power_up_only() {
    let bmc = pyghmi(GuidLayout::Smbios);
    let (status, _) = fence_over_ipmi(&bmc.0, coroner::api::FenceAction::Reboot).await;
    assert_eq!(coroner::fence::phase_of(&status), coroner::api::Phase::WaitingForNode, "{:?}", succeeded(&status));
    assert_eq!(bmc.0.power(), "On", "{:?}", succeeded(&status));
    let directives = chassis_directives(&bmc);
    assert_eq!(directives, [0, 1], "power down, then power up; never a cycle or reset");
}

#[tokio::test]
async fn a_power_action_whose_session_proves_another_guid_sends_nothing() {
    use coroner::driver::ports::Target;
    let sim = sim(GuidLayout::Ipmi, true);
    let bmc = client(&sim.0);
    let mut system = bmc.find(None, NODE).await.unwrap().unwrap();
    // The reading that asked for the action came from another machine than the one answering now.
    system.uuid = "4c4c4544-0042-3510-8058-b4c04f4e9999".into();
    let refused = Target::act(&bmc, &system, ResetType::ForceOff).await.unwrap_err();
    assert!(refused.sent_nothing(), "{refused}");
    assert_eq!(refused.reason(), Reason::IdentityChanged);
    assert!(sim.controls().is_empty(), "no chassis control: {:?}", sim.controls());
    assert_eq!(sim.0.power(), "On");
}
