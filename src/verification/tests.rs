use super::*;

fn binding(insecure: bool) -> BmcBinding {
    let mut binding = BmcBinding::new(
        "b",
        crate::api::BmcBindingSpec {
            node_name: "n".into(),
            redfish: Some(crate::api::RedfishTarget { endpoint: "https://bmc".into(), system_id: None }),
            ipmi: None,
            credentials_secret_ref: crate::api::SecretRef { name: "s".into() },
            tls: Some(crate::api::TlsPolicy { insecure_skip_verify: insecure, ..Default::default() }),
            pdu_levels: Vec::new(),
        },
    );
    binding.metadata.generation = Some(3);
    binding
}

fn with_level(mut binding: BmcBinding, level: serde_json::Value) -> BmcBinding {
    binding.spec.pdu_levels.push(serde_json::from_value(level).unwrap());
    binding
}

fn snmp_level(address: &str, version: &str, statement: bool) -> serde_json::Value {
    let mut level = serde_json::json!({
        "outlets": [{
            "snmp": {"address": address, "outlet": 3, "version": version},
            "credentialsSecretRef": {"name": "pdu"},
        }],
    });
    if statement {
        level["mappingProof"] = "OperatorStatement".into();
    }
    level
}

fn condition<'a>(status: &'a BmcBindingStatus, type_: &str) -> (&'a str, &'a str) {
    let c = conditions::find(&status.conditions, type_).unwrap();
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn a_level_without_a_confirmation_or_a_statement_is_reported_unusable() {
    let binding = with_level(binding(false), snmp_level("pdu-1", "V3", false));
    let mut status = BmcBindingStatus::default();
    let notices = record_levels(&mut status, &binding, std::slice::from_ref(&binding), &[], Timestamp::UNIX_EPOCH);
    assert_eq!(condition(&status, OUTLET_MAPPING_PROVEN), ("False", "OutletMappingUnproven"));
    let message = &conditions::find(&status.conditions, OUTLET_MAPPING_PROVEN).unwrap().message;
    assert!(message.starts_with("level 2: unusable: nothing confirmed"), "{message}");
    assert_eq!(condition(&status, OUTLETS_EXCLUSIVE), ("True", "NotShared"));
    assert_eq!(condition(&status, PDU_TRANSPORT_SECURE), ("True", "Secure"));
    assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["OutletMappingUnproven"]);
    // Once said, not said again at every check.
    let again = record_levels(&mut status, &binding, std::slice::from_ref(&binding), &[], Timestamp::UNIX_EPOCH);
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn a_level_the_machine_confirmed_is_reported_not_usable_yet_and_why() {
    let binding = with_level(binding(false), snmp_level("pdu-1", "V3", false));
    let mut status = BmcBindingStatus::default();
    record_levels(&mut status, &binding, std::slice::from_ref(&binding), &[Some(3)], Timestamp::UNIX_EPOCH);
    assert_eq!(condition(&status, OUTLET_MAPPING_PROVEN), ("False", "OutletMappingUnproven"));
    let message = &conditions::find(&status.conditions, OUTLET_MAPPING_PROVEN).unwrap().message;
    assert!(message.contains("no level rests on a passive confirmation"), "{message}");
}

#[test]
fn an_operator_statement_is_a_standing_warning_not_a_proof() {
    let binding = with_level(binding(false), snmp_level("pdu-1", "V3", true));
    let mut status = BmcBindingStatus::default();
    record_levels(&mut status, &binding, std::slice::from_ref(&binding), &[], Timestamp::UNIX_EPOCH);
    assert_eq!(condition(&status, OUTLET_MAPPING_PROVEN), ("False", "OutletMappingUnproven"));
    let message = &conditions::find(&status.conditions, OUTLET_MAPPING_PROVEN).unwrap().message;
    assert!(message.contains("stated by an operator"), "{message}");
}

#[test]
fn a_community_in_clear_text_and_an_undeclared_shared_outlet_are_warnings() {
    let mine = with_level(binding(false), snmp_level("pdu-1", "V2c", true));
    let mut other = with_level(binding(false), snmp_level("PDU-1", "V3", true));
    other.metadata.name = Some("other".into());
    other.spec.node_name = "m".into();
    let all = [mine.clone(), other];
    let mut status = BmcBindingStatus::default();
    let notices = record_levels(&mut status, &mine, &all, &[], Timestamp::UNIX_EPOCH);
    assert_eq!(condition(&status, OUTLETS_EXCLUSIVE), ("False", "OutletShared"));
    assert_eq!(condition(&status, PDU_TRANSPORT_SECURE), ("False", "InsecurePduTransport"));
    let reasons: Vec<_> = notices.iter().map(|n| n.reason.as_str()).collect();
    assert_eq!(reasons, ["OutletMappingUnproven", "OutletShared", "InsecurePduTransport"]);
}

#[test]
fn a_binding_whose_levels_were_removed_loses_their_conditions() {
    let with = with_level(binding(false), snmp_level("pdu-1", "V3", false));
    let mut status = BmcBindingStatus::default();
    record_levels(&mut status, &with, std::slice::from_ref(&with), &[], Timestamp::UNIX_EPOCH);
    let without = binding(false);
    record_levels(&mut status, &without, std::slice::from_ref(&without), &[], Timestamp::UNIX_EPOCH);
    assert!(status.conditions.is_empty(), "{:?}", status.conditions);
}

#[test]
fn an_ipmi_binding_pins_the_guid_layout_its_verification_proved_at_its_current_generation() {
    let mut redfish = binding(false);
    assert_eq!(pinned_system(&redfish), None);
    redfish.spec.redfish.as_mut().unwrap().system_id = Some("2".into());
    assert_eq!(pinned_system(&redfish), Some("2"));
    let mut ipmi = binding(false);
    ipmi.spec.redfish = None;
    ipmi.spec.ipmi =
        Some(crate::api::IpmiTarget { address: "bmc".into(), port: None, cipher_suite: None, privilege: None });
    assert_eq!(pinned_system(&ipmi), None, "never verified: discovery finds the layout");
    let path = format!("{}smbios", crate::ipmi::PATH_PREFIX);
    ipmi.status = Some(BmcBindingStatus {
        system_id: Some(path.clone()),
        uuid: Some("u".into()),
        observed_generation: Some(3),
        ..Default::default()
    });
    assert_eq!(pinned_system(&ipmi), Some(path.as_str()));
    ipmi.metadata.generation = Some(4);
    assert_eq!(pinned_system(&ipmi), None, "verified at another generation: found again");
}

fn read(identity: Result<UuidMatch, (Reason, String)>) -> Check {
    Check::Read { system_id: "1".into(), uuid: "u".into(), power_state: "On".into(), identity }
}

fn mismatch() -> Check {
    read(Err((Reason::IdentityMismatch, "the BMC system's UUID is not the node's".into())))
}

#[test]
fn a_first_good_check_is_announced_once() {
    let mut status = BmcBindingStatus::default();
    let notices = record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
    assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["BindingVerified"]);
    assert_eq!(
        (status.system_id.as_deref(), status.uuid.as_deref(), status.power_state.as_deref()),
        (Some("1"), Some("u"), Some("On"))
    );
    assert!(record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH).is_empty());
    assert_eq!(state(Some(&status)), "verified");
}

#[test]
fn turning_bad_is_a_warning_and_keeps_the_last_good_uuid() {
    let mut status = BmcBindingStatus::default();
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
    let notices = record(&mut status, &mismatch(), &binding(false), None, Timestamp::UNIX_EPOCH);
    assert_eq!(notices.len(), 1);
    assert!(
        notices[0].warning
            && notices[0].reason == "IdentityMismatch"
            && notices[0].message.starts_with("IdentityMismatch")
    );
    assert_eq!(status.uuid.as_deref(), Some("u"));
    assert_eq!(state(Some(&status)), "unverified");
}

#[test]
fn a_bmc_that_did_not_answer_is_asked_again_soon_and_anything_else_at_the_interval() {
    let interval = StdDuration::from_secs(600);
    let unreachable = Check::Failed { reason: Reason::BmcUnreachable, message: "refused".into() };
    assert_eq!(next_check(&unreachable, interval), RECHECK_UNANSWERED, "an outage ends within 30 s of the answer");
    assert_eq!(next_check(&unreachable, StdDuration::from_secs(10)), StdDuration::from_secs(10));
    assert_eq!(next_check(&Check::Invalid("Secret s does not exist".into()), interval), interval);
    assert_eq!(next_check(&Check::Conflict("two bindings".into()), interval), interval);
}

#[test]
fn an_unreachable_bmc_turns_both_conditions_false() {
    let mut status = BmcBindingStatus::default();
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
    let down = Check::Failed { reason: Reason::BmcUnreachable, message: "connection refused".into() };
    let notices = record(&mut status, &down, &binding(false), None, Timestamp::UNIX_EPOCH);
    let reasons: Vec<_> = notices.iter().map(|n| n.reason.as_str()).collect();
    assert_eq!(reasons, ["BmcUnreachable", "BmcUnreachable"]);
    assert_eq!(conditions::status_of(&status.conditions, REACHABLE), Some("False"));
}

#[test]
fn a_bmc_without_the_node_s_system_is_reachable_but_unverified() {
    let mut status = BmcBindingStatus::default();
    let none = Check::NoNodeSystem("none of the 2 systems at https://bmc is the node's".into());
    let notices = record(&mut status, &none, &binding(false), None, Timestamp::UNIX_EPOCH);
    assert_eq!(conditions::status_of(&status.conditions, REACHABLE), Some("True"));
    let verified = conditions::find(&status.conditions, IDENTITY_VERIFIED).unwrap();
    assert_eq!((verified.status.as_str(), verified.reason.as_str()), ("False", "IdentityMismatch"));
    assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["IdentityMismatch"]);
    assert_eq!(state(Some(&status)), "unverified");
}

#[test]
fn only_a_recent_good_check_of_the_same_generation_spares_the_bmc() {
    let period = StdDuration::from_secs(600);
    let at = |secs: i64| Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs);
    let mut status = BmcBindingStatus::default();
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at(0));
    assert_eq!(fresh_check(Some(&status), Some(3), at(2), period), None, "no content recorded (A2): due");
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), Some(0xc5), at(0));
    assert_eq!(status.verified_content.as_deref(), Some("00000000000000c5"));
    assert_eq!(fresh_check(Some(&status), Some(3), at(2), period), Some(StdDuration::from_secs(2)));
    assert_eq!(fresh_check(Some(&status), Some(3), at(300), period), None, "half a period on: due");
    assert_eq!(fresh_check(Some(&status), Some(4), at(2), period), None, "the spec changed");
    assert_eq!(fresh_check(None, Some(3), at(2), period), None, "never checked");
    let mut failing = BmcBindingStatus::default();
    record(&mut failing, &mismatch(), &binding(false), Some(0xc5), at(0));
    assert_eq!(fresh_check(Some(&failing), Some(3), at(2), period), None, "no good check yet");
    assert_eq!(failing.verified_content, None, "a failed check verified no content");
    // A fence's proof knows no content: the last verification's stays.
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at(5));
    assert_eq!(status.verified_content.as_deref(), Some("00000000000000c5"));
}

#[test]
fn conflicts_and_bad_references_are_invalid() {
    let mut status = BmcBindingStatus::default();
    record(
        &mut status,
        &Check::Conflict("conflicts with BmcBinding b".into()),
        &binding(false),
        None,
        Timestamp::UNIX_EPOCH,
    );
    assert_eq!(state(Some(&status)), "invalid");
    let mut status = BmcBindingStatus::default();
    record(&mut status, &Check::Invalid("Secret missing".into()), &binding(false), None, Timestamp::UNIX_EPOCH);
    assert_eq!(state(Some(&status)), "invalid");
    assert_eq!(state(None), "unverified");
}

#[test]
fn insecure_tls_is_a_false_condition_and_a_warning() {
    let mut status = BmcBindingStatus::default();
    let notices = record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(true), None, Timestamp::UNIX_EPOCH);
    assert_eq!(conditions::status_of(&status.conditions, TLS_VERIFIED), Some("False"));
    assert!(notices.iter().any(|n| n.warning && n.reason == "InsecureSkipVerify"), "{notices:?}");
}

fn tls(status: &BmcBindingStatus) -> (String, String) {
    let c = conditions::find(&status.conditions, TLS_VERIFIED).unwrap();
    (c.status.clone(), c.reason.clone())
}

fn failed(reason: Reason, message: &str) -> Check {
    Check::Failed { reason, message: message.into() }
}

#[test]
fn tls_is_verified_only_after_a_verified_handshake() {
    let at = Timestamp::UNIX_EPOCH;
    let cases = [
        (read(Ok(UuidMatch::Exact)), ("True", "Verified")),
        (mismatch(), ("True", "Verified")),
        (failed(Reason::BmcAuthenticationFailed, "HTTP 401"), ("True", "Verified")),
        (failed(Reason::BmcTlsVerificationFailed, "the binding pins 4F:8E"), ("False", "BmcTlsVerificationFailed")),
        (failed(Reason::BmcUnreachable, "connection refused"), ("Unknown", "NoHandshake")),
        (Check::Invalid("Secret s does not exist".into()), ("Unknown", "NoHandshake")),
        (Check::Conflict("conflicts with b2".into()), ("Unknown", "NoHandshake")),
    ];
    for (check, (state, reason)) in cases {
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at);
        record(&mut status, &check, &binding(false), None, at);
        assert_eq!(tls(&status), (state.to_owned(), reason.to_owned()), "{check:?}");
    }
    let mut status = BmcBindingStatus::default();
    record(&mut status, &failed(Reason::BmcTlsVerificationFailed, "the binding pins 4F:8E"), &binding(false), None, at);
    assert_eq!(conditions::find(&status.conditions, TLS_VERIFIED).unwrap().message, "the binding pins 4F:8E");
}

#[test]
fn a_fence_s_read_was_verified_only_if_it_was_answered_with_verification_on() {
    let policy = |insecure| TlsPolicy { insecure_skip_verify: insecure, ..TlsPolicy::default() };
    assert!(request_tls_verified(&policy(false), true));
    assert!(!request_tls_verified(&policy(true), true));
    assert!(!request_tls_verified(&policy(false), false));
}

#[test]
fn every_condition_describes_the_current_spec() {
    let mut status = BmcBindingStatus::default();
    let down = failed(Reason::BmcUnreachable, "connection refused");
    record(&mut status, &down, &binding(false), None, Timestamp::UNIX_EPOCH);
    let mut edited = binding(false);
    edited.metadata.generation = Some(4);
    record(&mut status, &Check::Invalid("Secret s2 does not exist".into()), &edited, None, Timestamp::UNIX_EPOCH);
    let reachable = conditions::find(&status.conditions, REACHABLE).unwrap();
    assert_eq!((reachable.status.as_str(), reachable.reason.as_str()), ("Unknown", "NotContacted"));
    assert!(!reachable.message.contains("connection refused"), "{}", reachable.message);
    assert!(status.conditions.iter().all(|c| c.observed_generation == Some(4)), "{:?}", status.conditions);
}

#[test]
fn a_change_of_reason_is_an_event_even_without_a_change_of_status() {
    let at = Timestamp::UNIX_EPOCH;
    let mut status = BmcBindingStatus::default();
    let steps = [
        (Check::Invalid("Secret s does not exist".into()), vec!["BindingInvalid"]),
        (failed(Reason::BmcUnreachable, "connection refused"), vec!["BmcUnreachable", "BmcUnreachable"]),
        (failed(Reason::BmcUnreachable, "timed out"), vec![]),
        (failed(Reason::BmcTlsVerificationFailed, "pins differ"), vec!["BmcTlsVerificationFailed", "BmcUnreachable"]),
        (read(Ok(UuidMatch::Exact)), vec!["BindingVerified", "BmcReachable"]),
    ];
    for (check, expected) in steps {
        let notices = record(&mut status, &check, &binding(false), None, at);
        assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), expected, "{check:?}");
    }
}

#[test]
fn power_shows_only_from_a_verified_identity() {
    let at = |secs| Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs);
    let mut status = BmcBindingStatus::default();
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at(5));
    assert_eq!(status.power_state.as_deref(), Some("On"));
    assert_eq!(status.last_power_check_time, Some(Time(at(5))));
    for check in [mismatch(), failed(Reason::BmcUnreachable, "refused"), Check::NoNodeSystem("none".into())] {
        let mut status = status.clone();
        record(&mut status, &check, &binding(false), None, at(9));
        assert_eq!((status.power_state, status.last_power_check_time), (None, None), "{check:?}");
    }
}

#[test]
fn a_cleared_field_is_cleared_by_the_status_patch() {
    let mut status = BmcBindingStatus::default();
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
    let old = status.clone();
    record(
        &mut status,
        &Check::Invalid("Secret s does not exist".into()),
        &binding(false),
        None,
        Timestamp::UNIX_EPOCH,
    );
    let patch = status_patch(Some(&old), &status);
    assert_eq!(patch["status"]["powerState"], serde_json::Value::Null);
    assert!(patch["status"].as_object().unwrap().contains_key("lastPowerCheckTime"));
    assert_eq!(patch["status"]["uuid"], "u", "what the status keeps is sent as it is");
    assert!(!status_patch(None, &status)["status"].as_object().unwrap().contains_key("powerState"));
}

#[test]
fn a_fence_records_its_proof_and_its_refusal_on_the_binding() {
    let at = |secs| Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs);
    let mut status = BmcBindingStatus::default();
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at(0));
    let proof = FenceFinding::Proven { system_id: "1", uuid: "u", matched: UuidMatch::Exact, power_state: "Off" };
    let (changed, _) = record_fence(&mut status, proof, &binding(false), None, at(30));
    assert!(changed);
    assert_eq!(status.power_state.as_deref(), Some("Off"));
    assert_eq!(status.last_power_check_time, Some(Time(at(30))));

    let message = contract::final_message(Reason::IdentityChanged, "system 1 now reports UUID v");
    let refusal = FenceFinding::Refused { reason: Reason::IdentityChanged, message: &message };
    let (changed, notices) = record_fence(&mut status, refusal, &binding(false), None, at(40));
    let verified = conditions::find(&status.conditions, IDENTITY_VERIFIED).unwrap();
    assert!(changed && verified.reason == "IdentityChanged");
    assert_eq!(verified.message, "system 1 now reports UUID v", "no NHC retry lever on a binding");
    assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["IdentityChanged"]);
    assert_eq!(status.power_state, None);

    let gate = FenceFinding::Refused { reason: Reason::NodeNotUnreachable, message: "Ready=True" };
    let before = status.clone();
    assert_eq!(record_fence(&mut status, gate, &binding(false), None, at(50)), (false, vec![]));
    assert_eq!(status, before, "a gate's refusal says nothing about the binding");
}

#[test]
fn a_fence_tells_its_binding_at_the_transition_into_releasing_and_when_it_fails_only() {
    use crate::api::{Evidence, IdentityEvidence};
    let at = Timestamp::UNIX_EPOCH;
    let status = |phase: Phase, reason: Reason| {
        let mut status = CoronerRemediationStatus { phase: Some(phase), ..Default::default() };
        contract::record(&mut status.conditions, reason, &contract::final_message(reason, "why"), at);
        status.evidence = Some(Evidence {
            identity: Some(IdentityEvidence {
                binding: "b".into(),
                endpoint: "https://bmc".into(),
                system_id: "1".into(),
                system_path: "/redfish/v1/Systems/1".into(),
                bmc_uuid: "u".into(),
                node_uuid: "u".into(),
                match_kind: UuidMatch::ByteSwapped,
                verified_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(at),
                tls_verified: true,
                binding_generation: None,
                binding_content: None,
            }),
            ..Evidence::default()
        });
        status
    };
    let confirming = status(Phase::ConfirmingOff, Reason::ConfirmingOff);
    let releasing = status(Phase::Releasing, Reason::Releasing);
    assert_eq!(
        fence_finding(&confirming, &releasing),
        Some(FenceFinding::Proven { system_id: "1", uuid: "u", matched: UuidMatch::ByteSwapped, power_state: "Off" })
    );
    assert_eq!(fence_finding(&releasing, &releasing), None, "a proof kept fresh in Releasing is the same proof");
    let done = status(Phase::Done, Reason::NodeFenced);
    assert_eq!(fence_finding(&releasing, &done), None, "a release says nothing new about the binding");

    let failed = status(Phase::Failed, Reason::IdentityChanged);
    let Some(FenceFinding::Refused { reason, message }) = fence_finding(&confirming, &failed) else {
        panic!("{:?}", fence_finding(&confirming, &failed))
    };
    assert_eq!(reason, Reason::IdentityChanged);
    assert!(message.starts_with("why"));
    assert_eq!(fence_finding(&failed, &failed), None, "once: Succeeded never leaves False");
    assert_eq!(fence_finding(&confirming, &confirming), None);
}

#[test]
fn a_failed_check_since_the_last_good_one_makes_the_binding_due() {
    let period = StdDuration::from_secs(600);
    let mut status = BmcBindingStatus::default();
    record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
    record(
        &mut status,
        &Check::Invalid("Secret s does not exist".into()),
        &binding(false),
        None,
        Timestamp::UNIX_EPOCH,
    );
    let later = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(2);
    assert_eq!(fresh_check(Some(&status), Some(3), later, period), None);
}

#[test]
fn a_bmc_too_slow_for_the_poll_interval_is_reported_before_any_outage_once() {
    let (binding, now) = (binding(false), Timestamp::UNIX_EPOCH);
    let mut status = BmcBindingStatus::default();
    let second = StdDuration::from_secs(1);
    let slow = record_latency(&mut status, &binding, StdDuration::from_millis(2500), second, now).unwrap();
    assert_eq!(slow.reason, SETTLE_TOO_SHORT);
    assert!(slow.warning && slow.message.contains("2.5s") && slow.message.contains("raise pollInterval"));
    let condition = conditions::find(&status.conditions, READS_FIT).unwrap();
    assert_eq!((condition.status.as_str(), condition.observed_generation), ("False", Some(3)));
    assert_eq!(record_latency(&mut status, &binding, StdDuration::from_millis(2600), second, now), None, "once");
    assert_eq!(record_latency(&mut status, &binding, StdDuration::from_millis(1700), second, now), None);
    assert_eq!(conditions::status_of(&status.conditions, READS_FIT), Some("True"));
    let longer = StdDuration::from_secs(2);
    assert_eq!(record_latency(&mut status, &binding, StdDuration::from_millis(2500), longer, now), None);
}

fn kept(content: &str, uid: &str) -> KeptVerification {
    KeptVerification {
        content: content.into(),
        at: Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_800_000_000),
        uid: uid.into(),
        seal: "5ea1".into(),
    }
}

/// The binding `b` as the verifier left it: verified at `content` (or never).
fn verified_at(content: Option<&str>, uid: &str) -> BmcBinding {
    let mut binding = binding(false);
    binding.metadata.uid = Some(uid.into());
    binding.status = content.map(|content| BmcBindingStatus {
        last_verification_time: Some(Time(Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_700_000_000))),
        observed_generation: Some(3),
        verified_content: Some(content.into()),
        ..BmcBindingStatus::default()
    });
    binding
}

#[test]
fn a_re_created_binding_counts_as_verified_by_the_earlier_object_s_kept_verification_at_its_content() {
    let recreated = verified_at(None, "uid-new");
    let earlier = kept("00000000000000c5", "uid-old");
    let admitted = at_admission(&recreated, Some(0xc5), Some(&earlier));
    assert_eq!(admitted.verified_by_earlier_object.as_deref(), Some("uid-old"));
    assert_eq!(admitted.verified_content, admitted.content);
    assert_eq!(admitted.verified_at.map(|t| t.0), Some(earlier.at));
    assert_eq!(admitted.verified_generation, None, "another object's generation says nothing of this one");
}

#[test]
fn a_kept_verification_of_another_content_or_of_the_same_object_counts_for_nothing() {
    let recreated = verified_at(None, "uid-new");
    let other = at_admission(&recreated, Some(0xd5), Some(&kept("00000000000000c5", "uid-old")));
    assert_eq!((other.verified_at, other.verified_by_earlier_object), (None, None));
    let unusable = at_admission(&recreated, None, Some(&kept("00000000000000c5", "uid-old")));
    assert_eq!(unusable.verified_by_earlier_object, None, "no content at admission matches nothing");
    // The object's own status is what it says of itself.
    let same = at_admission(
        &verified_at(Some("00000000000000a1"), "uid-old"),
        Some(0xc5),
        Some(&kept("00000000000000c5", "uid-old")),
    );
    assert_eq!((same.verified_content.as_deref(), same.verified_by_earlier_object), (Some("00000000000000a1"), None));
}

#[test]
fn only_the_node_s_last_verification_counts_and_only_a_later_one_replaces_it() {
    // The object's own verification (at another content) is later than the kept one: the kept one
    // is no longer the node's last verified content.
    let mut moved_on = verified_at(Some("00000000000000d5"), "uid-new");
    let own_at = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_900_000_000);
    moved_on.status.as_mut().unwrap().last_verification_time = Some(Time(own_at));
    let admitted = at_admission(&moved_on, Some(0xc5), Some(&kept("00000000000000c5", "uid-old")));
    assert_eq!(admitted.verified_by_earlier_object, None);
    assert_eq!(admitted.verified_content.as_deref(), Some("00000000000000d5"));
    let later = KeptVerification { at: own_at, ..kept("00000000000000d5", "uid-new") };
    let earlier = kept("00000000000000c5", "uid-old");
    assert!(replaces_kept(Some(&earlier), true, &later));
    assert!(!replaces_kept(Some(&later), true, &earlier), "an older verification never replaces a later one");
    assert!(replaces_kept(Some(&later), false, &earlier), "an entry whose seal does not hold counts as none");
    assert!(replaces_kept(None, false, &earlier));
}

#[test]
fn the_binding_s_own_verification_at_its_content_wins_over_a_kept_one() {
    let own = verified_at(Some("00000000000000c5"), "uid-new");
    let admitted = at_admission(&own, Some(0xc5), Some(&kept("00000000000000c5", "uid-old")));
    assert_eq!((admitted.verified_generation, admitted.verified_by_earlier_object), (Some(3), None));
}

#[test]
fn the_verifier_keeps_the_content_and_time_of_the_last_verification_by_its_object() {
    let binding = verified_at(Some("00000000000000c5"), "uid-b");
    let keep = to_keep(&binding, binding.status.as_ref().unwrap()).unwrap();
    assert_eq!((keep.content.as_str(), keep.uid.as_str()), ("00000000000000c5", "uid-b"));
    assert_eq!(to_keep(&binding, &BmcBindingStatus::default()), None, "no verification, nothing to keep");
}

#[test]
fn a_kept_verification_reads_back_from_its_value_and_a_damaged_value_is_none() {
    let value = kept("00000000000000c5", "uid-b").to_value();
    assert_eq!(KeptVerification::parse(&value), Some(kept("00000000000000c5", "uid-b")));
    for damaged in ["", "c5", "c5 not-a-time uid 5ea1", "zz 2027-01-15T08:00:00Z uid 5ea1", &format!("{value} more")] {
        assert_eq!(KeptVerification::parse(damaged), None, "{damaged:?}");
    }
}

proptest::proptest! {
    #[test]
    fn any_kept_verification_round_trips_and_no_value_panics(
        content in "[0-9a-f]{1,16}",
        uid in "[a-z0-9-]{1,36}",
        seal in "[0-9a-f]{1,16}",
        secs in 0_i64..4_000_000_000,
        junk in ".{0,80}",
    ) {
        let kept = KeptVerification {
            content,
            at: Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs),
            uid,
            seal,
        };
        proptest::prop_assert_eq!(KeptVerification::parse(&kept.to_value()), Some(kept));
        let _ = KeptVerification::parse(&junk);
    }
}
