//! The NodeHealthCheck (NHC v0.12.0) remediation contract: the names NHC reads and writes, how a
//! remediation's node is found, and the one table of condition reasons.
//!
//! NHC reads only `Succeeded` (type, status, lastTransitionTime); `Processing`, reasons and messages
//! are for humans. With `escalatingRemediations`, `Succeeded=False` makes NHC move on at once, so a
//! reason that may clear by itself must wait (`Processing=True`, `Succeeded=Unknown`), never fail.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

use crate::api::conditions::{self, FALSE, TRUE, UNKNOWN};

/// Set by NHC on every remediation it creates: the node to remediate.
pub const NODE_NAME_ANNOTATION: &str = "remediation.medik8s.io/node-name";
/// Set by NHC when it gives up on a remediation: stop all further BMC mutations at once.
pub const TIMED_OUT_ANNOTATION: &str = "remediation.medik8s.io/nhc-timed-out";
/// On templates: NHC may use several templates of this kind in one escalation chain.
pub const MULTIPLE_TEMPLATES_ANNOTATION: &str = "remediation.medik8s.io/multiple-templates-support";
/// On nodes: never remediate (any value; NHC ignores an empty one, a fencer must not).
pub const EXCLUDE_LABEL: &str = "remediation.medik8s.io/exclude-from-remediation";

/// coroner's finalizer on remediations: removes the taints the remediation owns.
pub const FINALIZER: &str = "coroner.dev/remediation";

pub const PROCESSING: &str = "Processing";
pub const SUCCEEDED: &str = "Succeeded";
/// Reboot only: whether the machine was powered on again and read back `On`.
pub const POWERED_ON: &str = "PoweredOn";
/// Reboot only: whether the node's pods and volume attachments were released before power-on.
pub const WORKLOADS_RELEASED: &str = "WorkloadsReleased";
/// False when the BMC's certificate is not verified (`insecureSkipVerify: true`).
pub const TLS_VERIFIED: &str = "TLSVerified";

/// The node a remediation is for: NHC's annotation, else the object's name (remediations created by
/// hand). With `multiple-templates-support` the name is `<node>-xxxxx`, so the annotation wins.
pub fn node_name(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(NODE_NAME_ANNOTATION))
        .map(String::as_str)
        .filter(|name| !name.is_empty())
        .or(meta.name.as_deref())
}

/// NHC stamped `nhc-timed-out`: coroner must not send another BMC mutation for this remediation.
pub fn timed_out_by_nhc(meta: &ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(TIMED_OUT_ANNOTATION))
}

/// The value of NHC's `nhc-timed-out` annotation, if it is set.
pub fn nhc_timed_out(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations.as_ref()?.get(TIMED_OUT_ANNOTATION).map(String::as_str)
}

pub fn supports_multiple_templates(meta: &ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(MULTIPLE_TEMPLATES_ANNOTATION))
}

pub use crate::words::reason::{Budget, Disposition, Reason};

/// The reason table as Markdown; `docs/safety.md` carries exactly this (a test checks).
pub fn reason_table() -> String {
    let mut table = String::from("| Reason | Disposition | Retry budget | Meaning |\n|---|---|---|---|\n");
    for reason in Reason::ALL {
        table.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            reason.as_str(),
            reason.disposition().describe(),
            reason.budget().describe(),
            reason.meaning()
        ));
    }
    table
}

/// What a person can do once the cause of a final refusal is fixed. NHC never retries a remediation
/// whose `Succeeded` is `False` (the contract: it never leaves `False`), so coroner says how to get a
/// new one. Checked against NHC v0.12.0 on the harness (tests/e2e scenarios b and c): with a single
/// `remediationTemplate`, a deleted remediation is created again at once while the node is unhealthy;
/// with `escalatingRemediations`, NHC marks a template that failed or timed out as `timedOut` for the
/// node and skips it until the node is healthy, even after the remediation is deleted.
pub const RETRY_LEVER: &str = "To retry once the cause is fixed: with a single remediationTemplate, delete this CoronerRemediation and NodeHealthCheck creates a new one; with escalatingRemediations, NodeHealthCheck has moved on and skips this template for the node until the node is healthy again (deleting the remediation does not bring it back): the levers are then the next template, or an attestation that the machine is dead (kubectl coroner attest NODE --reason ...). kubectl coroner verify NODE checks the binding now; kubectl coroner status shows what coroner is doing.";

/// The retry lever for a final refusal with `reason`; `None` where a retry cannot help (the node is
/// gone: NHC deletes the remediation itself).
pub fn retry_lever(reason: Reason) -> Option<&'static str> {
    match reason.disposition() {
        Disposition::Final if reason != Reason::NodeNotFound => Some(RETRY_LEVER),
        _ => None,
    }
}

/// The message of a final condition: the cause, then how to retry once it is fixed.
pub fn final_message(reason: Reason, cause: &str) -> String {
    match retry_lever(reason) {
        Some(lever) if !cause.contains(lever) && !cause.contains(PROVEN_AGAIN_LEVER) => {
            format!("{}. {lever}", cause.trim_end().trim_end_matches('.'))
        }
        _ => cause.to_owned(),
    }
}

/// A4: what ends a proof taken again on an attestation's look that failed, instead of the retry
/// lever (which offers an attestation).
pub const PROVEN_AGAIN_LEVER: &str = "no attestation releases this remediation any more (ProvenAgain); to retry once the cause is fixed, delete this CoronerRemediation";

/// The cause in a message written by [`final_message`], without the retry lever (for a BmcBinding's
/// conditions, where deleting a remediation means nothing).
pub fn cause(message: &str) -> &str {
    message.strip_suffix(RETRY_LEVER).map_or(message, |cause| cause.trim_end().trim_end_matches('.'))
}

/// Sets `Processing` and `Succeeded` for `reason`. A final reason's message ends with the retry
/// lever ([`final_message`]). `Succeeded` never leaves `False` (NHC may already
/// have escalated) and never leaves `True` (the workloads were released); then only `Processing`
/// changes.
/// Returns whether anything changed.
pub fn record(conditions: &mut Vec<Condition>, reason: Reason, message: &str, now: Timestamp) -> bool {
    let current = conditions::status_of(conditions, SUCCEEDED).map(str::to_owned);
    let (processing, wanted) = match reason.disposition() {
        Disposition::Progress | Disposition::Waiting => (TRUE, UNKNOWN),
        Disposition::Fenced => (TRUE, TRUE),
        Disposition::Complete => (FALSE, TRUE),
        Disposition::Final => (FALSE, FALSE),
    };
    let message = &final_message(reason, message);
    let mut changed = conditions::set(conditions, PROCESSING, processing, reason.as_str(), message, now);
    match (current.as_deref(), wanted) {
        // Once False, NHC may already have escalated; once True, the workloads were released.
        // Either way Succeeded keeps its status and its reason; Processing says what happens now.
        (Some(FALSE), _) | (Some(TRUE), UNKNOWN | FALSE) => {}
        _ => changed |= conditions::set(conditions, SUCCEEDED, wanted, reason.as_str(), message, now),
    }
    changed
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn meta(name: &str, annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            annotations: Some(
                annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        }
    }

    fn status(conditions: &[Condition], type_: &str) -> String {
        conditions::status_of(conditions, type_).unwrap_or("absent").to_owned()
    }

    #[test]
    fn node_name_comes_from_the_annotation_first() {
        assert_eq!(node_name(&meta("worker-1-x7k2p", &[(NODE_NAME_ANNOTATION, "worker-1")])), Some("worker-1"));
        assert_eq!(node_name(&meta("worker-2", &[])), Some("worker-2"));
        assert_eq!(node_name(&meta("worker-3", &[(NODE_NAME_ANNOTATION, "")])), Some("worker-3"));
        assert_eq!(node_name(&ObjectMeta::default()), None);
    }

    #[test]
    fn timed_out_is_the_presence_of_the_annotation() {
        assert!(timed_out_by_nhc(&meta("n", &[(TIMED_OUT_ANNOTATION, "2026-11-29T10:00:00Z")])));
        assert!(!timed_out_by_nhc(&meta("n", &[(NODE_NAME_ANNOTATION, "n")])));
    }

    #[test]
    fn multiple_templates_marker_is_presence_only() {
        assert!(supports_multiple_templates(&meta("t", &[(MULTIPLE_TEMPLATES_ANNOTATION, "true")])));
        assert!(supports_multiple_templates(&meta("t", &[(MULTIPLE_TEMPLATES_ANNOTATION, "")])));
        assert!(!supports_multiple_templates(&meta("t", &[])));
    }

    #[test]
    fn start_progress_and_waiting_leave_succeeded_unknown() {
        let mut c = Vec::new();
        for reason in [Reason::RemediationStarted, Reason::ConfirmingOff, Reason::AttemptFailed] {
            assert!(record(&mut c, reason, "m", Timestamp::UNIX_EPOCH));
            assert_eq!((status(&c, PROCESSING), status(&c, SUCCEEDED)), ("True".into(), "Unknown".into()));
        }
    }

    #[test]
    fn fenced_then_complete() {
        let mut c = Vec::new();
        record(&mut c, Reason::ConfirmingOff, "m", Timestamp::UNIX_EPOCH);
        record(&mut c, Reason::NodeFenced, "m", Timestamp::UNIX_EPOCH);
        assert_eq!((status(&c, PROCESSING), status(&c, SUCCEEDED)), ("True".into(), "True".into()));
        record(&mut c, Reason::RemediationComplete, "m", Timestamp::UNIX_EPOCH);
        assert_eq!((status(&c, PROCESSING), status(&c, SUCCEEDED)), ("False".into(), "True".into()));
    }

    #[test]
    fn failure_sets_both_false() {
        let mut c = Vec::new();
        record(&mut c, Reason::VerifyingIdentity, "m", Timestamp::UNIX_EPOCH);
        record(&mut c, Reason::IdentityMismatch, "uuid differs", Timestamp::UNIX_EPOCH);
        assert_eq!((status(&c, PROCESSING), status(&c, SUCCEEDED)), ("False".into(), "False".into()));
        let succeeded = conditions::find(&c, SUCCEEDED).unwrap();
        assert_eq!(succeeded.reason, "IdentityMismatch");
        assert_eq!(cause(&succeeded.message), "uuid differs");
    }

    #[test]
    fn a_final_condition_says_how_to_retry_with_either_kind_of_nhc() {
        let mut c = Vec::new();
        record(&mut c, Reason::BmcUnreachable, "BMC unreachable: connection refused.", Timestamp::UNIX_EPOCH);
        for type_ in [SUCCEEDED, PROCESSING] {
            let message = &conditions::find(&c, type_).unwrap().message;
            assert!(message.starts_with("BMC unreachable: connection refused. To retry once the cause is fixed"));
            assert!(message.contains("with a single remediationTemplate, delete this CoronerRemediation"), "{message}");
            assert!(message.contains("with escalatingRemediations") && message.contains("coroner attest"), "{message}");
            assert_eq!(cause(message), "BMC unreachable: connection refused");
        }
        assert_eq!(
            final_message(Reason::BmcUnreachable, &final_message(Reason::BmcUnreachable, "x"))
                .matches("To retry")
                .count(),
            1
        );
    }

    #[test]
    fn only_final_refusals_that_a_retry_can_fix_carry_the_lever() {
        for reason in Reason::ALL {
            let expected = reason.disposition() == Disposition::Final && *reason != Reason::NodeNotFound;
            assert_eq!(retry_lever(*reason).is_some(), expected, "{reason:?}");
        }
        let mut c = Vec::new();
        record(&mut c, Reason::Queued, "2nd in the queue", Timestamp::UNIX_EPOCH);
        assert_eq!(conditions::find(&c, SUCCEEDED).unwrap().message, "2nd in the queue");
        assert_eq!(cause("2nd in the queue"), "2nd in the queue");
    }

    #[test]
    fn succeeded_never_goes_from_false_to_true() {
        let mut c = Vec::new();
        record(&mut c, Reason::PowerOffNotConfirmed, "m", Timestamp::UNIX_EPOCH);
        record(&mut c, Reason::NodeFenced, "m", Timestamp::UNIX_EPOCH);
        assert_eq!(status(&c, SUCCEEDED), "False");
        record(&mut c, Reason::RemediationComplete, "m", Timestamp::UNIX_EPOCH);
        assert_eq!(status(&c, SUCCEEDED), "False");
        assert_eq!(conditions::find(&c, SUCCEEDED).unwrap().reason, "PowerOffNotConfirmed");
    }

    #[test]
    fn succeeded_never_leaves_true() {
        let mut c = Vec::new();
        record(&mut c, Reason::NodeFenced, "m", Timestamp::UNIX_EPOCH);
        record(&mut c, Reason::AttemptFailed, "power-on attempt failed", Timestamp::UNIX_EPOCH);
        assert_eq!(status(&c, SUCCEEDED), "True");
        record(&mut c, Reason::IdentityChanged, "uuid changed", Timestamp::UNIX_EPOCH);
        assert_eq!((status(&c, SUCCEEDED), status(&c, PROCESSING)), ("True".into(), "False".into()));
        assert_eq!(conditions::find(&c, SUCCEEDED).unwrap().reason, "NodeFenced");
    }

    #[test]
    fn every_reason_has_a_message_and_final_reasons_never_wait() {
        for reason in Reason::ALL {
            assert!(!reason.meaning().is_empty());
            if reason.disposition() == Disposition::Final {
                assert_ne!(reason.budget(), Budget::NhcTimeout, "{reason:?} fails but should wait");
            }
        }
    }

    #[test]
    fn every_condition_written_has_a_reason_and_message() {
        for reason in Reason::ALL {
            let mut c = Vec::new();
            record(&mut c, *reason, reason.meaning(), Timestamp::UNIX_EPOCH);
            assert!(c.iter().all(|c| !c.reason.is_empty() && !c.message.is_empty()));
        }
    }
}
