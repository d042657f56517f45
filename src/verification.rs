//! What a BmcBinding's status says after a verification, and when that is worth an Event. The
//! continuous verification (and every fence's identity step) reads the BMC; these decisions are pure.

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    api::{BmcBinding, BmcBindingStatus, UuidMatch, conditions},
    contract::Reason,
    fence::Notice,
};

pub const REACHABLE: &str = "Reachable";
pub const IDENTITY_VERIFIED: &str = "IdentityVerified";
pub const TLS_VERIFIED: &str = "TLSVerified";

/// The outcome of one look at a binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// Another binding claims the same node or the same BMC system: nothing was asked of the BMC.
    Conflict(String),
    /// The binding's Secret, CA bundle or pin cannot be used.
    Invalid(String),
    /// The BMC did not answer usably (unreachable, TLS, credentials, protocol).
    Failed { reason: Reason, message: String },
    /// The BMC answered, but none of its several systems is the node's machine.
    NoNodeSystem(String),
    /// The BMC answered with a system; `identity` is the UUID rule's verdict for the node.
    Read { system_id: String, uuid: String, power_state: String, identity: Result<UuidMatch, (Reason, String)> },
}

/// Applies a check to the status (conditions, observed system, time) and returns the Events it is
/// worth: one when the binding turns bad or good, none when nothing changed.
pub fn record(status: &mut BmcBindingStatus, check: &Check, binding: &BmcBinding, now: Timestamp) -> Vec<Notice> {
    let insecure = binding.spec.tls.insecure_skip_verify;
    let node = binding.spec.node_name.as_str();
    let was_verified = conditions::status_of(&status.conditions, IDENTITY_VERIFIED).map(str::to_owned);
    let was_reachable = conditions::status_of(&status.conditions, REACHABLE).map(str::to_owned);
    let set = |status: &mut BmcBindingStatus, type_: &str, ok: bool, reason: &str, message: &str| {
        let state = if ok { conditions::TRUE } else { conditions::FALSE };
        conditions::set(&mut status.conditions, type_, state, reason, message, now);
    };
    match check {
        Check::Conflict(message) => set(status, IDENTITY_VERIFIED, false, Reason::BindingConflict.as_str(), message),
        Check::Invalid(message) => set(status, IDENTITY_VERIFIED, false, Reason::BindingInvalid.as_str(), message),
        Check::Failed { reason, message } => {
            set(status, REACHABLE, false, reason.as_str(), message);
            set(status, IDENTITY_VERIFIED, false, reason.as_str(), "the BMC did not answer usably; identity unknown");
        }
        Check::NoNodeSystem(message) => {
            set(status, REACHABLE, true, "Answered", "the BMC answered");
            set(status, IDENTITY_VERIFIED, false, Reason::IdentityMismatch.as_str(), message);
        }
        Check::Read { system_id, uuid, power_state, identity } => {
            set(status, REACHABLE, true, "Answered", &format!("system {system_id} answered"));
            status.power_state = Some(power_state.clone());
            match identity {
                Ok(matched) => {
                    set(
                        status,
                        IDENTITY_VERIFIED,
                        true,
                        "UuidMatched",
                        &format!("{matched:?} match of system {system_id} with node {node}"),
                    );
                    status.system_id = Some(system_id.clone());
                    status.uuid = Some(uuid.clone());
                    status.last_verification_time = Some(Time(now));
                    status.observed_generation = binding.metadata.generation;
                }
                Err((reason, message)) => set(status, IDENTITY_VERIFIED, false, reason.as_str(), message),
            }
        }
    }
    if insecure {
        set(
            status,
            TLS_VERIFIED,
            false,
            "InsecureSkipVerify",
            "insecureSkipVerify is set: the BMC's certificate is not verified",
        );
    } else {
        conditions::set(
            &mut status.conditions,
            TLS_VERIFIED,
            conditions::TRUE,
            "Verified",
            "the BMC's certificate is verified against the CA bundle or pin",
            now,
        );
    }
    let mut notices = Vec::new();
    let now_verified = conditions::find(&status.conditions, IDENTITY_VERIFIED).cloned();
    if let Some(verified) = now_verified.filter(|c| was_verified.as_deref() != Some(c.status.as_str())) {
        let good = verified.status == conditions::TRUE;
        notices.push(Notice {
            warning: !good,
            reason: if good { "BindingVerified".into() } else { "BindingUnverified".into() },
            message: format!("{}: {}", verified.reason, verified.message),
        });
    }
    let now_reachable = conditions::find(&status.conditions, REACHABLE).cloned();
    if let Some(reachable) = now_reachable.filter(|c| was_reachable.as_deref().is_some_and(|w| w != c.status)) {
        let good = reachable.status == conditions::TRUE;
        notices.push(Notice {
            warning: !good,
            reason: if good { "BmcReachable".into() } else { "BmcUnreachable".into() },
            message: reachable.message,
        });
    }
    notices
}

/// A good check of the binding's current generation less than half a period ago: a wake-up by a
/// status write (coroner's own, or a fence's identity check), not a reason to ask the BMC again.
/// Returns how long ago that check was.
pub fn fresh_check(
    status: Option<&BmcBindingStatus>,
    generation: Option<i64>,
    now: Timestamp,
    interval: StdDuration,
) -> Option<StdDuration> {
    let status = status.filter(|s| s.observed_generation.is_some() && s.observed_generation == generation)?;
    let ago = StdDuration::try_from(now.duration_since(status.last_verification_time.as_ref()?.0)).ok()?;
    (ago < interval / 2).then_some(ago)
}

/// The binding's state for the metric: verified, unverified (not yet, or failing) or invalid
/// (conflict, or unusable references).
pub fn state(status: Option<&BmcBindingStatus>) -> &'static str {
    let Some(verified) = status.and_then(|s| conditions::find(&s.conditions, IDENTITY_VERIFIED)) else {
        return "unverified";
    };
    match verified.reason.as_str() {
        _ if verified.status == conditions::TRUE => "verified",
        r if r == Reason::BindingConflict.as_str() || r == Reason::BindingInvalid.as_str() => "invalid",
        _ => "unverified",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(insecure: bool) -> BmcBinding {
        let mut binding = BmcBinding::new(
            "b",
            crate::api::BmcBindingSpec {
                node_name: "n".into(),
                redfish: crate::api::RedfishTarget { endpoint: "https://bmc".into(), system_id: None },
                credentials_secret_ref: crate::api::SecretRef { name: "s".into() },
                tls: crate::api::TlsPolicy { insecure_skip_verify: insecure, ..Default::default() },
            },
        );
        binding.metadata.generation = Some(3);
        binding
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
        let notices = record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), Timestamp::UNIX_EPOCH);
        assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["BindingVerified"]);
        assert_eq!(
            (status.system_id.as_deref(), status.uuid.as_deref(), status.power_state.as_deref()),
            (Some("1"), Some("u"), Some("On"))
        );
        assert!(record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), Timestamp::UNIX_EPOCH).is_empty());
        assert_eq!(state(Some(&status)), "verified");
    }

    #[test]
    fn turning_bad_is_a_warning_and_keeps_the_last_good_uuid() {
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), Timestamp::UNIX_EPOCH);
        let notices = record(&mut status, &mismatch(), &binding(false), Timestamp::UNIX_EPOCH);
        assert_eq!(notices.len(), 1);
        assert!(
            notices[0].warning
                && notices[0].reason == "BindingUnverified"
                && notices[0].message.starts_with("IdentityMismatch")
        );
        assert_eq!(status.uuid.as_deref(), Some("u"));
        assert_eq!(state(Some(&status)), "unverified");
    }

    #[test]
    fn an_unreachable_bmc_turns_both_conditions_false() {
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), Timestamp::UNIX_EPOCH);
        let down = Check::Failed { reason: Reason::BmcUnreachable, message: "connection refused".into() };
        let notices = record(&mut status, &down, &binding(false), Timestamp::UNIX_EPOCH);
        let reasons: Vec<_> = notices.iter().map(|n| n.reason.as_str()).collect();
        assert_eq!(reasons, ["BindingUnverified", "BmcUnreachable"]);
        assert_eq!(conditions::status_of(&status.conditions, REACHABLE), Some("False"));
    }

    #[test]
    fn a_bmc_without_the_node_s_system_is_reachable_but_unverified() {
        let mut status = BmcBindingStatus::default();
        let none = Check::NoNodeSystem("none of the 2 systems at https://bmc is the node's".into());
        let notices = record(&mut status, &none, &binding(false), Timestamp::UNIX_EPOCH);
        assert_eq!(conditions::status_of(&status.conditions, REACHABLE), Some("True"));
        let verified = conditions::find(&status.conditions, IDENTITY_VERIFIED).unwrap();
        assert_eq!((verified.status.as_str(), verified.reason.as_str()), ("False", "IdentityMismatch"));
        assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["BindingUnverified"]);
        assert_eq!(state(Some(&status)), "unverified");
    }

    #[test]
    fn only_a_recent_good_check_of_the_same_generation_spares_the_bmc() {
        let period = StdDuration::from_secs(600);
        let at = |secs: i64| Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs);
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), at(0));
        assert_eq!(fresh_check(Some(&status), Some(3), at(2), period), Some(StdDuration::from_secs(2)));
        assert_eq!(fresh_check(Some(&status), Some(3), at(300), period), None, "half a period on: due");
        assert_eq!(fresh_check(Some(&status), Some(4), at(2), period), None, "the spec changed");
        assert_eq!(fresh_check(None, Some(3), at(2), period), None, "never checked");
        let mut failing = BmcBindingStatus::default();
        record(&mut failing, &mismatch(), &binding(false), at(0));
        assert_eq!(fresh_check(Some(&failing), Some(3), at(2), period), None, "no good check yet");
    }

    #[test]
    fn conflicts_and_bad_references_are_invalid() {
        let mut status = BmcBindingStatus::default();
        record(
            &mut status,
            &Check::Conflict("conflicts with BmcBinding b".into()),
            &binding(false),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(state(Some(&status)), "invalid");
        let mut status = BmcBindingStatus::default();
        record(&mut status, &Check::Invalid("Secret missing".into()), &binding(false), Timestamp::UNIX_EPOCH);
        assert_eq!(state(Some(&status)), "invalid");
        assert_eq!(state(None), "unverified");
    }

    #[test]
    fn insecure_tls_is_a_false_condition() {
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(true), Timestamp::UNIX_EPOCH);
        assert_eq!(conditions::status_of(&status.conditions, TLS_VERIFIED), Some("False"));
    }
}
