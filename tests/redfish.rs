//! The Redfish client and the fence loop against real emulated BMCs (sushy-tools), plus Debian's
//! fence_redfish as an independent cross-check. The loop is the production one (`coroner::driver`);
//! its Kubernetes side is the simulator's in-memory world without faults (`coroner::sim::lab`), on
//! real time. The end-to-end suite runs it against the real control plane.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use coroner::{
    api::{
        CoronerRemediationSpec, CoronerRemediationStatus, Duration as ApiDuration, FenceAction, Phase, Retry, UuidMatch,
    },
    bmc::{self, Bmc, BmcError, Credentials, Password, PowerState, RedfishClient, RedfishConfig, ResetType, tls},
    contract, fence,
    identity::{self, IdentityRefusal},
    sim::lab::{Lab, LabClock, Setup},
    taints::{self, CoronerTaint},
};
use jiff::Timestamp;
use kube::ResourceExt;
use support::machine::{Machine, MachineSpec, PASSWORD, USER, peers};

const UUID: &str = "7f3b0c1e-0000-4000-8000-0000000000a1";
/// The same machine with its first three fields byte-swapped.
const UUID_SWAPPED: &str = "1e0c3b7f-0000-0040-8000-0000000000a1";
const OTHER: &str = "7f3b0c1e-0000-4000-8000-0000000000b2";

fn trust_ca() -> tls::Trust {
    tls::Trust { ca_bundle_pem: Some(peers().pem("ca")), ..tls::Trust::default() }
}

fn client_with(machine: &Machine, trust: tls::Trust, password: &str) -> RedfishClient {
    RedfishClient::new(RedfishConfig {
        endpoint: machine.endpoint(),
        trust,
        credentials: Credentials { username: USER.into(), password: Password::new(password.into()) },
        request_timeout: Duration::from_secs(2),
        read_retries: 1,
        retry_backoff: Duration::from_millis(100),
    })
    .unwrap()
}

fn client(machine: &Machine) -> RedfishClient {
    client_with(machine, trust_ca(), PASSWORD)
}

/// Short timeouts so failing fences end quickly; settle and poll interval keep their defaults.
fn spec() -> CoronerRemediationSpec {
    CoronerRemediationSpec {
        action: FenceAction::Off,
        power_off_timeout: ApiDuration::from_secs(4),
        retry: Retry { count: 2, interval: ApiDuration::from_secs(1) },
        ..CoronerRemediationSpec::default()
    }
}

/// Runs the fence loop (`driver::apply` under the finalizer helper, as the controller runs it) against
/// a real BMC until the remediation settles (Off: Done after the release) and returns the final status
/// and the lab (its world, the Events published on the remediation). The Kubernetes side is the lab's
/// in-memory world: node worker-1 reporting `node_uuid` (Ready=Unknown, its Lease long stale), its
/// BmcBinding and Secret, the remediation NHC created, and `other_nodes` (name, systemUUID).
async fn fence(
    bmc: &RedfishClient,
    spec: &CoronerRemediationSpec,
    node_uuid: &str,
    other_nodes: &[(&str, &str)],
) -> (CoronerRemediationStatus, Lab<RedfishClient>) {
    let lab = Lab::new(&Setup::new(node_uuid, spec.clone()), LabClock::real(), bmc.clone());
    for (name, uuid) in other_nodes {
        lab.world(|t| t.add_node_as(name, uuid, "boot-1", "True", &[]));
    }
    let status = lab.run().await;
    assert!(fence::phase_of(&status).is_terminal(), "the fence did not end: {status:?}, errors {:?}", lab.errors());
    (status, lab)
}

fn reason(status: &CoronerRemediationStatus) -> (String, String) {
    let c = coroner::api::conditions::find(&status.conditions, contract::SUCCEEDED).unwrap();
    (c.status.clone(), c.reason.clone())
}

fn resets(machine: &Machine) -> Vec<String> {
    machine.requests().into_iter().filter(|r| r.starts_with("POST")).collect()
}

#[tokio::test]
async fn exact_match_is_fenced_with_one_force_off_and_proven() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    let started = Instant::now();
    let (status, lab) = fence(&client(&machine), &spec(), UUID, &[]).await;
    let wall = started.elapsed();
    let reasons = lab.reasons();
    assert_eq!(fence::phase_of(&status), Phase::Done);
    assert_eq!(reason(&status), ("True".into(), "RemediationComplete".into()));
    let evidence = status.evidence.unwrap();
    assert_eq!(evidence.identity.unwrap().match_kind, UuidMatch::Exact);
    let proof = evidence.power_off.unwrap().proof.unwrap();
    assert!(proof.count >= 3, "Off readings spanning settle at a 1s poll: {proof:?}");
    assert_eq!(resets(&machine), [format!("POST /redfish/v1/Systems/{UUID}/Actions/ComputerSystem.Reset ForceOff")]);
    assert_eq!(machine.power_changes(), ["On->Off"]);
    assert!(reasons.contains(&"PowerOffProven".to_owned()) && reasons.contains(&"NodeFenced".to_owned()));
    // The release is on the Node: both of coroner's taints stay with Off.
    let node = lab.world(|t| t.node("worker-1")).unwrap();
    for taint in [CoronerTaint::Fencing, CoronerTaint::OutOfService] {
        assert!(taints::owns(&node, taint, &lab.world(|t| t.remediation("worker-1")).unwrap().uid().unwrap()));
    }
    // The measurement the issue asks for: requests and wall time of one successful fence.
    eprintln!("one fence: {} BMC requests, {:.2?} wall time", machine.requests().len(), wall);
}

#[tokio::test]
async fn byte_swapped_uuid_is_accepted_and_recorded() {
    let machine = Machine::start(&MachineSpec::new(UUID_SWAPPED));
    let (status, _) = fence(&client(&machine), &spec(), UUID, &[]).await;
    assert_eq!(fence::phase_of(&status), Phase::Done);
    assert_eq!(status.evidence.unwrap().identity.unwrap().match_kind, UuidMatch::ByteSwapped);
}

#[tokio::test]
async fn a_mismatch_is_refused_with_no_power_action() {
    let machine = Machine::start(&MachineSpec::new(OTHER));
    let (status, _) = fence(&client(&machine), &spec(), UUID, &[]).await;
    assert_eq!(reason(&status), ("False".into(), "IdentityMismatch".into()));
    assert_eq!(resets(&machine), Vec::<String>::new());
    assert_eq!(machine.power_state(), "On");
}

#[tokio::test]
async fn a_placeholder_uuid_is_refused_even_when_it_matches() {
    let placeholder = "03000200-0400-0500-0006-000700080009";
    let machine = Machine::start(&MachineSpec::new(placeholder));
    let (status, _) = fence(&client(&machine), &spec(), placeholder, &[]).await;
    assert_eq!(reason(&status), ("False".into(), "NodeUuidUnusable".into()));
    assert_eq!(resets(&machine), Vec::<String>::new());
}

#[tokio::test]
async fn a_uuid_on_two_nodes_is_ambiguous() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    let (status, _) = fence(&client(&machine), &spec(), UUID, &[("worker-2", UUID_SWAPPED)]).await;
    assert_eq!(reason(&status), ("False".into(), "IdentityAmbiguous".into()));
    assert_eq!(resets(&machine), Vec::<String>::new());
}

#[tokio::test]
async fn discovery_picks_the_matching_system_among_several() {
    use coroner::driver::ports::Target;
    let mut spec = MachineSpec::new(OTHER);
    spec.systems.push(("node-2".into(), UUID.into()));
    let machine = Machine::start(&spec);
    let found = Target::find(&client(&machine), None, UUID).await.unwrap().unwrap();
    assert_eq!(found.uuid, UUID);
    let none = Target::find(&client(&machine), None, "7f3b0c1e-0000-4000-8000-0000000000c3").await.unwrap();
    assert!(none.is_err());
    // A pinned system by name follows the emulator's same-origin 307 to the UUID URL.
    let pinned = Target::find(&client(&machine), Some("node-2"), UUID).await.unwrap().unwrap();
    assert_eq!(pinned.path, format!("/redfish/v1/Systems/{UUID}"));
}

#[tokio::test]
async fn a_machine_already_off_gets_no_reset_and_is_still_proven() {
    let mut spec = MachineSpec::new(UUID);
    spec.power_on = false;
    let machine = Machine::start(&spec);
    let (status, _) = fence(&client(&machine), &self::spec(), UUID, &[]).await;
    assert_eq!(fence::phase_of(&status), Phase::Done);
    let power_off = status.evidence.unwrap().power_off.unwrap();
    assert!(power_off.already_off && power_off.resets.is_empty());
    assert_eq!(resets(&machine), Vec::<String>::new());
}

#[tokio::test]
async fn a_rejected_force_off_is_never_taken_for_success() {
    let mut spec = MachineSpec::new(UUID);
    spec.disable_power_off = true;
    let machine = Machine::start(&spec);
    let (status, lab) = fence(&client(&machine), &self::spec(), UUID, &[]).await;
    let reasons = lab.reasons();
    assert_eq!(reason(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    let power_off = status.evidence.unwrap().power_off.unwrap();
    assert_eq!(power_off.resets.len(), 2, "one ForceOff per attempt, retry.count attempts");
    assert!(power_off.resets[0].result.contains("400"), "{:?}", power_off.resets);
    assert!(reasons.iter().any(|r| r == "AttemptFailed"));
    assert_eq!(machine.power_state(), "On");
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_the_credentials_stay_home() {
    // Another BMC with a certificate the client trusts: following the redirect would send it the
    // Basic credentials.
    let elsewhere = Machine::start(&MachineSpec::new(UUID));
    let origin = format!("https://127.0.0.1:{}", elsewhere.port);
    let spec = MachineSpec { redirect_systems_to: Some(origin.clone()), ..MachineSpec::new(UUID) };
    let machine = Machine::start(&spec);
    let error = client(&machine).system(UUID).await.unwrap_err();
    assert!(matches!(&error, BmcError::CrossHostRedirect(target) if *target == origin), "{error:?}");
    assert_eq!(error.category(), "redirect");
    assert!(machine.requests().iter().any(|r| r.starts_with("GET /redfish/v1/Systems")), "{:?}", machine.requests());
    assert_eq!(elsewhere.requests(), Vec::<String>::new(), "the other origin was contacted");
}

#[tokio::test]
async fn a_wrong_password_is_final_and_never_printed() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    let wrong = "not-the-password-42";
    let bmc = client_with(&machine, trust_ca(), wrong);
    let error = bmc.system(UUID).await.unwrap_err();
    assert!(matches!(error, BmcError::Unauthorized(401)), "{error:?}");
    assert!(!format!("{error} {error:?} {bmc:?}").contains(wrong));
    let (status, _) = fence(&bmc, &spec(), UUID, &[]).await;
    assert_eq!(reason(&status), ("False".into(), "BmcAuthenticationFailed".into()));
    assert!(!serde_json::to_string(&status).unwrap().contains(wrong));
}

#[tokio::test]
async fn a_bmc_that_is_down_uses_the_retry_budget_then_fails() {
    let mut machine = Machine::start(&MachineSpec::new(UUID));
    let bmc = client(&machine);
    machine.stop();
    assert!(matches!(bmc.system(UUID).await, Err(BmcError::Unconnected(_))), "a refused connection sent nothing");
    let (status, lab) = fence(&bmc, &spec(), UUID, &[]).await;
    let reasons = lab.reasons();
    assert_eq!(reason(&status), ("False".into(), "BmcUnreachable".into()));
    assert_eq!(reasons.iter().filter(|r| *r == "AttemptFailed").count(), 1, "retry.count = 2: one retry");
}

#[tokio::test]
async fn a_hung_bmc_times_out_and_fails() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    machine.freeze();
    let bmc = client(&machine);
    let started = Instant::now();
    let error = bmc.system(UUID).await.unwrap_err();
    assert!(matches!(error, BmcError::Unreachable(_)), "{error:?}");
    let (status, _) = fence(&bmc, &spec(), UUID, &[]).await;
    machine.thaw();
    assert_eq!(reason(&status), ("False".into(), "BmcUnreachable".into()));
    eprintln!("hung BMC: first read gave up after {:.2?}", started.elapsed());
}

/// L7's question: a fresh connection to the BMC's address. A refusal or a service that hangs
/// answered (its network stack has power); only an address where nothing answers is silence.
#[tokio::test]
async fn only_an_address_where_nothing_answers_is_heard_as_silence() {
    let mut machine = Machine::start(&MachineSpec::new(UUID));
    let bmc = client(&machine);
    assert_eq!(bmc.heard().await, bmc::Heard::Answered);
    machine.freeze();
    assert_eq!(bmc.heard().await, bmc::Heard::Answered, "a hung service still completes the handshake");
    machine.thaw();
    machine.stop();
    assert_eq!(bmc.heard().await, bmc::Heard::Answered, "a refused connection is an answer");
    machine.go_dark();
    let started = Instant::now();
    assert_eq!(bmc.heard().await, bmc::Heard::Silent);
    eprintln!("dark BMC: silence heard after {:.2?}", started.elapsed());
}

#[tokio::test]
async fn power_that_stays_on_is_not_confirmed() {
    let mut spec = MachineSpec::new(UUID);
    spec.disable_power_off = true;
    let machine = Machine::start(&spec);
    let (status, _) = fence(&client(&machine), &self::spec(), UUID, &[]).await;
    assert_eq!(reason(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    assert_eq!(status.evidence.unwrap().power_off.unwrap().proof, None);
}

#[tokio::test]
async fn a_power_delay_is_waited_out_by_polling() {
    let mut spec = MachineSpec::new(UUID);
    spec.delay = 3.0;
    let machine = Machine::start(&spec);
    let (status, _) = fence(&client(&machine), &self::spec_with_timeout(10), UUID, &[]).await;
    assert_eq!(fence::phase_of(&status), Phase::Done);
    let proof = status.evidence.unwrap().power_off.unwrap().proof.unwrap();
    let change = machine.log().into_iter().find(|e| e["event"] == "power").unwrap();
    let changed_at: Timestamp = change["t"].as_str().unwrap().parse().unwrap();
    assert!(proof.first[0].at.0 >= changed_at, "no Off reading before the machine really went off");
    assert_eq!(resets(&machine).len(), 1);
}

fn spec_with_timeout(secs: u64) -> CoronerRemediationSpec {
    CoronerRemediationSpec { power_off_timeout: ApiDuration::from_secs(secs), ..spec() }
}

// Discovery, redirects and bodies (the Redfish client directly) ----------------------------------------

const THIRD: &str = "7f3b0c1e-0000-4000-8000-0000000000c3";

fn machine_with(systems: &[(&str, &str)]) -> MachineSpec {
    MachineSpec {
        systems: systems.iter().map(|(name, uuid)| (name.to_string(), uuid.to_string())).collect(),
        ..MachineSpec::new(systems[0].1)
    }
}

fn collection_reads(machine: &Machine) -> usize {
    machine.requests().iter().filter(|r| r.trim_end_matches('/') == "GET /redfish/v1/Systems").count()
}

#[tokio::test]
async fn every_page_of_the_systems_collection_is_read() {
    let spec = MachineSpec {
        systems_page_size: Some(1),
        ..machine_with(&[("node-0", OTHER), ("node-2", THIRD), ("node-1", UUID)])
    };
    let machine = Machine::start(&spec);
    let bmc = client(&machine);
    let expected: Vec<String> = [OTHER, THIRD, UUID].iter().map(|u| format!("/redfish/v1/Systems/{u}")).collect();
    assert_eq!(bmc.systems().await.unwrap(), expected);
    assert_eq!(collection_reads(&machine), 3, "{:?}", machine.requests());
    // The node's system is on the last page; the two before it are read too, and are someone else's.
    let discovery = bmc::discover(&bmc, None).await.unwrap();
    assert_eq!(identity::select(&discovery, UUID).unwrap().system.uuid, UUID);
    assert_eq!(discovery.systems.len(), 3);
}

#[tokio::test]
async fn a_next_link_cycle_is_a_protocol_error() {
    let spec = MachineSpec {
        systems_page_size: Some(1),
        systems_next_link_cycle: true,
        ..machine_with(&[("node-0", OTHER), ("node-1", UUID)])
    };
    let machine = Machine::start(&spec);
    let error = client(&machine).systems().await.unwrap_err();
    assert!(matches!(&error, BmcError::Protocol { problem, .. } if problem.contains("already read")), "{error:?}");
    assert_eq!(collection_reads(&machine), 2, "stopped where the cycle closed");
}

#[tokio::test]
async fn a_body_that_says_power_state_twice_proves_nothing() {
    // On, then Off: a lenient reader (serde_json keeps the last value) would take this machine for off.
    let spec = MachineSpec { duplicate_power_state: Some("Off".into()), ..MachineSpec::new(UUID) };
    let machine = Machine::start(&spec);
    let bmc = client(&machine);
    let error = bmc.system(UUID).await.unwrap_err();
    assert!(matches!(&error, BmcError::Protocol { problem, .. } if problem.contains("appears twice")), "{error:?}");
    let (status, _) = fence(&bmc, &self::spec(), UUID, &[]).await;
    assert_eq!(reason(&status), ("False".into(), "BmcProtocolError".into()));
    assert_eq!(resets(&machine), Vec::<String>::new());
    assert_eq!(machine.power_state(), "On");
}

#[tokio::test]
async fn a_second_system_with_the_nodes_uuid_makes_identity_ambiguous_pinned_or_not() {
    // The same machine's UUID served twice, once in each byte order (a cloned firmware image).
    let machine = Machine::start(&machine_with(&[("node-1", UUID), ("clone", UUID_SWAPPED)]));
    let bmc = client(&machine);
    for pinned in [None, Some("node-1")] {
        let discovery = bmc::discover(&bmc, pinned).await.unwrap();
        let refusal = identity::select(&discovery, UUID).unwrap_err();
        assert!(matches!(&refusal, IdentityRefusal::SharedOnBmc { systems, .. } if systems.len() == 2), "{refusal:?}");
        assert_eq!(refusal.reason(), contract::Reason::IdentityAmbiguous);
    }
    let (status, _) = fence(&bmc, &spec(), UUID, &[]).await;
    assert_eq!(reason(&status), ("False".into(), "IdentityAmbiguous".into()), "the fence says the real cause");
    assert_eq!(resets(&machine), Vec::<String>::new());
}

#[tokio::test]
async fn an_unreadable_member_is_ambiguous_pinned_or_not() {
    let healthy = machine_with(&[("node-1", UUID), ("other", OTHER)]);
    let broken = MachineSpec { unreadable_systems: vec!["other".into()], ..healthy };
    let machine = Machine::start(&broken);
    let bmc = client(&machine);
    let unpinned = bmc::discover(&bmc, None).await.unwrap();
    assert_eq!(unpinned.unreadable.len(), 1);
    let refusal = identity::select(&unpinned, UUID).unwrap_err();
    assert!(matches!(refusal, IdentityRefusal::MemberUnreadable { .. }), "{refusal:?}");
    let pinned = bmc::discover(&bmc, Some("node-1")).await.unwrap();
    assert!(identity::select(&pinned, UUID).is_err(), "a pin does not cover an unread member");
}

#[tokio::test]
async fn discovery_pins_the_system_that_answered_and_a_fence_read_follows_no_redirect() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    let bmc = client(&machine);
    // The emulator answers a system asked for by name with a same-origin 307 to its UUID path.
    let found = bmc.discover_system("node-1").await.unwrap();
    assert_eq!((found.path.as_str(), found.uuid.as_str()), (format!("/redfish/v1/Systems/{UUID}").as_str(), UUID));
    let error = bmc.system("node-1").await.unwrap_err();
    assert!(matches!(&error, BmcError::Protocol { problem, .. } if problem.contains("HTTP 307")), "{error:?}");
    assert!(bmc.system(&found.path).await.is_ok(), "the system that answered is read where it answered");
}

#[tokio::test]
async fn a_reset_never_follows_a_redirect() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    let bmc = client(&machine);
    // A reading whose reset goes to the name alias: the emulator answers the POST with a 307.
    let mut aliased = bmc.system(UUID).await.unwrap();
    aliased.path = "/redfish/v1/Systems/node-1".into();
    aliased.reset_target = None;
    let error = bmc.reset(&aliased, ResetType::ForceOff).await.unwrap_err();
    assert!(matches!(&error, BmcError::Protocol { problem, .. } if problem.contains("never follows")), "{error:?}");
    assert_eq!(resets(&machine), ["POST /redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset ForceOff"]);
    assert_eq!(machine.power_changes(), Vec::<String>::new());
}

// TLS --------------------------------------------------------------------------------------------------

async fn tls_error(machine: &Machine, trust: tls::Trust) -> Option<BmcError> {
    client_with(machine, trust, PASSWORD).system(UUID).await.err()
}

/// The TLS refusal as the binding's conditions and Events will say it.
async fn tls_message(machine: &Machine, trust: tls::Trust) -> String {
    match tls_error(machine, trust).await {
        Some(BmcError::Tls(message)) => message,
        other => panic!("expected a TLS refusal, got {other:?}"),
    }
}

fn fingerprint(name: &str) -> String {
    tls::format_fingerprint(&tls::parse_pin(&peers().pin(name)).unwrap())
}

#[tokio::test]
async fn a_ca_bundle_is_the_only_trust_anchor() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    assert!(tls_error(&machine, trust_ca()).await.is_none());
    let wrong_ca = tls::Trust {
        ca_bundle_pem: Some(peers().pem("other-ca")),
        ca_bundle_source: Some("ConfigMap bmc-ca (key ca.crt)".into()),
        ..tls::Trust::default()
    };
    assert_eq!(
        tls_message(&machine, wrong_ca).await,
        "the certificate (CN=127.0.0.1) is issued by CN=coroner-test-bmc-ca, which is not a CA in ConfigMap bmc-ca (key ca.crt) (it holds CN=coroner-unrelated-ca)"
    );
}

#[tokio::test]
async fn first_contact_reads_the_certificate_the_bmc_shows_and_sends_nothing_after_the_handshake() {
    let mut spec = MachineSpec::new(UUID);
    spec.cert = "self-signed";
    let machine = Machine::start(&spec);
    let before = machine.requests().len();
    let read = tls::first_contact(&machine.endpoint(), Duration::from_secs(5)).await.unwrap();
    assert_eq!(tls::format_fingerprint(&read), fingerprint("self-signed"));
    assert_eq!(machine.requests().len(), before, "no request: {:?}", machine.requests());
    let refused = tls::first_contact("https://127.0.0.1:1/redfish/v1", Duration::from_secs(5)).await.unwrap_err();
    assert!(refused.starts_with("127.0.0.1:1: "), "{refused}");
    let plain = tls::first_contact("http://127.0.0.1:1/", Duration::from_secs(5)).await.unwrap_err();
    assert!(plain.contains("only an https URL"), "{plain}");
}

#[tokio::test]
async fn a_pin_trusts_a_self_signed_certificate_and_nothing_else() {
    let mut spec = MachineSpec::new(UUID);
    spec.cert = "self-signed";
    let machine = Machine::start(&spec);
    let pin = |name: &str| tls::Trust {
        pin_sha256: Some(tls::parse_pin(&peers().pin(name)).unwrap()),
        ..tls::Trust::default()
    };
    assert!(tls_error(&machine, pin("self-signed")).await.is_none());
    // As openssl prints it, pasted as is.
    let openssl = format!("sha256 Fingerprint={}", fingerprint("self-signed"));
    let pasted = tls::Trust { pin_sha256: Some(tls::parse_pin(&openssl).unwrap()), ..tls::Trust::default() };
    assert!(tls_error(&machine, pasted).await.is_none());
    let wrong = tls_message(&machine, pin("leaf")).await;
    let expected = format!(
        "the certificate's SHA-256 is {}, the binding pins {}",
        fingerprint("self-signed"),
        fingerprint("leaf")
    );
    assert!(wrong.starts_with(&expected), "{wrong}");
    // The factory certificate is CA:TRUE; a CA bundle holding it does not make it a valid server certificate.
    let as_ca = tls::Trust { ca_bundle_pem: Some(peers().pem("self-signed")), ..tls::Trust::default() };
    let message = tls_message(&machine, as_ca).await;
    let pin_it = format!("pin it instead (tls.certificateSHA256: \"{}\")", fingerprint("self-signed"));
    assert!(
        message.contains("presents a CA certificate (CN=127.0.0.1) as its own") && message.contains(&pin_it),
        "{message}"
    );
}

#[tokio::test]
async fn server_name_overrides_the_name_checked_for_an_ip_endpoint() {
    let mut spec = MachineSpec::new(UUID);
    spec.cert = "named-leaf";
    let machine = Machine::start(&spec);
    assert_eq!(
        tls_message(&machine, trust_ca()).await,
        "name 127.0.0.1 is not in the certificate (it has DNS:bmc.coroner.test); set tls.serverName to one of its names"
    );
    let named = tls::Trust { server_name: Some("bmc.coroner.test".into()), ..trust_ca() };
    assert!(tls_error(&machine, named).await.is_none());
    let wrong_name = tls::Trust { server_name: Some("other.coroner.test".into()), ..trust_ca() };
    assert_eq!(
        tls_message(&machine, wrong_name).await,
        "tls.serverName other.coroner.test is not in the certificate (it has DNS:bmc.coroner.test); set tls.serverName to one of its names"
    );
}

#[tokio::test]
async fn insecure_skip_verify_works_only_when_asked_for() {
    let mut spec = MachineSpec::new(UUID);
    spec.cert = "self-signed";
    let machine = Machine::start(&spec);
    let message = tls_message(&machine, trust_ca()).await;
    // Like most factory certificates it is CA:TRUE, which webpki refuses as a server certificate
    // before it looks for an issuer.
    assert!(message.starts_with("the BMC presents a CA certificate (CN=127.0.0.1) as its own"), "{message}");
    let insecure = tls::Trust { insecure_skip_verify: true, ..tls::Trust::default() };
    assert!(tls_error(&machine, insecure).await.is_none());
}

// Cross-check ------------------------------------------------------------------------------------------

#[tokio::test]
async fn fence_redfish_agrees_with_coronors_reading() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    let bmc = client(&machine);
    let before = bmc.system(UUID).await.unwrap();
    assert_eq!((before.power_state.clone(), machine.fence_redfish("status", UUID).unwrap_or(-1)), (PowerState::On, 0));
    assert_eq!(bmc.reset(&before, ResetType::ForceOff).await.unwrap(), 204);
    let after = bmc.system(UUID).await.unwrap();
    assert_eq!((after.power_state, machine.fence_redfish("status", UUID).unwrap_or(-1)), (PowerState::Off, 2));
}

// The proof and the power action (docs/safety.md P1, P4, P4b) --------------------------------------

fn message(status: &CoronerRemediationStatus) -> String {
    coroner::api::conditions::find(&status.conditions, contract::SUCCEEDED).unwrap().message.clone()
}

#[tokio::test]
async fn an_off_whose_status_state_says_the_bmc_does_not_know_the_host_proves_nothing_and_is_named() {
    let spec = MachineSpec { status_state_when_off: Some("Absent".into()), ..MachineSpec::new(UUID) };
    let machine = Machine::start(&spec);
    let (status, _) = fence(&client(&machine), &self::spec(), UUID, &[]).await;
    assert_eq!(reason(&status), ("False".into(), "PowerOffNotConfirmed".into()));
    assert!(message(&status).contains("Status.State Absent"), "{}", message(&status));
}

#[tokio::test]
async fn an_off_host_openbmc_reports_as_disabled_is_proven() {
    let spec = MachineSpec { status_state_when_off: Some("Disabled".into()), ..MachineSpec::new(UUID) };
    let machine = Machine::start(&spec);
    let (status, _) = fence(&client(&machine), &self::spec(), UUID, &[]).await;
    assert_eq!(fence::phase_of(&status), Phase::Done, "{}", message(&status));
}

#[tokio::test]
async fn a_slow_honest_bmc_is_proven_at_the_default_settle_and_poll_interval() {
    // Every answer comes 1.5 s late, longer than pollInterval (1 s): each read starts when the
    // previous one answered, and the readings stay dense (docs/safety.md P4).
    let machine = Machine::start(&MachineSpec { response_delay: 1.5, ..MachineSpec::new(UUID) });
    let (status, _) = fence(&client(&machine), &spec_with_timeout(40), UUID, &[]).await;
    assert_eq!(fence::phase_of(&status), Phase::Done, "{}", message(&status));
    assert_eq!(resets(&machine).len(), 1);
}

#[tokio::test]
async fn a_settle_many_readings_long_is_proven_on_an_honest_bmc() {
    let spec = CoronerRemediationSpec { settle: ApiDuration::from_secs(8), ..spec_with_timeout(30) };
    let machine = Machine::start(&MachineSpec::new(UUID));
    let (status, _) = fence(&client(&machine), &spec, UUID, &[]).await;
    assert_eq!(fence::phase_of(&status), Phase::Done, "{}", message(&status));
    let proof = status.evidence.unwrap().power_off.unwrap().proof.unwrap();
    let span = proof.latest().unwrap().at.0.duration_since(proof.first[0].at.0);
    assert!(span >= jiff::SignedDuration::from_secs(8), "{proof:?}");
}

#[tokio::test]
async fn an_endpoint_edited_between_the_reading_and_the_force_off_gets_no_request_until_identity_is_proven_again() {
    let machine = Machine::start(&MachineSpec::new(UUID));
    let bmc = client(&machine);
    let lab = Lab::new(&Setup::new(UUID, spec_with_timeout(20)), LabClock::real(), bmc.clone());
    lab.edit_endpoint_before_the_next_power_action();
    let status = lab.run().await;
    assert_eq!(fence::phase_of(&status), Phase::Done, "{}", message(&status));
    let reasons = lab.reasons();
    assert_eq!(reasons.iter().filter(|r| *r == "IdentityVerified").count(), 2, "{reasons:?}");
    assert_eq!(resets(&machine).len(), 1, "one ForceOff, after the second proof");
    let requests = machine.requests();
    let post = requests.iter().position(|r| r.starts_with("POST")).unwrap();
    let gets_before = requests[..post].iter().filter(|r| r.starts_with("GET /redfish/v1/Systems")).count();
    assert!(gets_before >= 2, "the ForceOff followed a second discovery: {requests:?}");
}
