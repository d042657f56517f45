//! The error policy, by error class: an object that is invalid as it stands waits for a change of
//! it (a retry would fail the same way); a conflict is retried soon (someone else wrote first: read
//! again, decide again); an unavailable or refusing API server is retried after 0.5 s, then every
//! 1 s while it keeps failing for the same object (a fence's gap bound allows no longer backoff),
//! restarting after its next success (a refusal as sent, RBAC or an admission policy, the same);
//! anything else is retried after a short flat wait. A fence that reads the machine retries a conflict
//! or an unavailable API server sooner ([`crate::fence::retry_within`]).

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::Duration as StdDuration,
};

use kube::{Resource, ResourceExt, runtime::reflector::ObjectRef};

use super::Error;
use crate::driver::{self, ApiError};

/// A conflict: read again and decide again, almost at once.
pub const CONFLICT_RETRY: StdDuration = StdDuration::from_millis(500);
/// The first retry after the API server was unavailable; each consecutive failure doubles it…
pub const BACKOFF_FIRST: StdDuration = StdDuration::from_millis(500);
/// … up to this. A fence under way must keep reading within its gap bound (2 × (pollInterval +
/// 1 s): 4 s at the default) and before its attempt's deadline, and its guard must keep watching,
/// while single requests fail (a loaded API server's 503s, an admission webhook denying Node writes
/// for a while). A 10 000-seed soak with a 30 s cap failed fences and guard reports; with 1 s then
/// 2 s, two failed reconciles in a row after a reading (1 s of pacing, 1 s, 2 s) broke a 70 s
/// settle's run every time (soak seed 7499). Few objects fence at once (`--max-concurrent-fences`),
/// so this costs the API server little.
pub const BACKOFF_MAX: StdDuration = StdDuration::from_secs(1);
/// Anything else (an object gone since it was read, leadership about to pass).
pub const OTHER_RETRY: StdDuration = StdDuration::from_secs(2);

/// What a failed reconcile's error says about retrying it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// The object lacks what coroner needs (NHC's node-name annotation, a uid): only a change of it
    /// can help.
    Invalid,
    /// Another writer came first (HTTP 409, or a Node or status that kept changing).
    Conflict,
    /// The API server did not answer or answered 5xx: that passes, on its own time.
    Unavailable,
    /// The API server refused the request as sent (RBAC, an admission policy): that changes outside
    /// the object, when someone changes it; retried as `Unavailable`, never sooner.
    Refused,
    Other,
}

fn api_class(error: &ApiError) -> Class {
    match error {
        ApiError::Conflict(_) => Class::Conflict,
        ApiError::Unavailable(_) => Class::Unavailable,
        ApiError::Denied(_) => Class::Refused,
        ApiError::NotFound(_) => Class::Other,
    }
}

fn kube_class(error: &kube::Error) -> Class {
    match error {
        kube::Error::Api(status) if status.code == 409 => Class::Conflict,
        kube::Error::Api(status) if status.code == 404 => Class::Other,
        kube::Error::Api(status) if status.code == 403 => Class::Refused,
        _ => Class::Unavailable,
    }
}

/// The class of the fence loop's errors (the simulator's model of the controller uses it too).
pub fn fence_class(error: &driver::Error) -> Class {
    match error {
        driver::Error::Incomplete(_) => Class::Invalid,
        driver::Error::NodeConflicts(_) | driver::Error::StatusConflicts(_) => Class::Conflict,
        driver::Error::Api(e) | driver::Error::NotLeader(crate::leader::Refusal::Unreadable(e)) => api_class(e),
        driver::Error::NotLeader(_) => Class::Other,
        driver::Error::ChecksTooSlow { .. } => Class::Unavailable,
    }
}

pub fn class(error: &Error) -> Class {
    use kube::runtime::finalizer::Error as Finalizer;
    match error {
        Error::Fence(e) => fence_class(e),
        Error::Api(e) => api_class(e),
        Error::Kube(e) => kube_class(e),
        Error::Finalizer(inner) => match inner.as_ref() {
            Finalizer::ApplyFailed(e) | Finalizer::CleanupFailed(e) => class(e),
            Finalizer::AddFinalizer(e) | Finalizer::RemoveFinalizer(e) => kube_class(e),
            Finalizer::UnnamedObject | Finalizer::InvalidFinalizer => Class::Invalid,
        },
        Error::Election(_) => Class::Unavailable,
    }
}

/// A failure that is the normal course of events, logged without a warning: another writer came
/// first (a conflict, retried at once; a warning only from the third in a row), or the finalizer of an
/// object that is already gone could not be removed (nothing is left to do).
pub fn expected(error: &Error, failures: u32) -> bool {
    use kube::runtime::finalizer::Error as Finalizer;
    let gone = matches!(error, Error::Finalizer(inner)
        if matches!(inner.as_ref(), Finalizer::RemoveFinalizer(kube::Error::Api(status)) if status.code == 404));
    gone || (class(error) == Class::Conflict && failures < 3)
}

/// When to reconcile again after the `failures`-th consecutive failure (1 for the first) of this
/// class; `None`: when the object changes. A failure that passes (a conflict, an unavailable API
/// server) is retried no later than `within`, the object's own cadence
/// ([`crate::fence::retry_within`]); a refusal or anything else is not hurried.
pub fn retry_after(class: Class, failures: u32, within: Option<StdDuration>) -> Option<StdDuration> {
    let backoff = || {
        let doublings = failures.saturating_sub(1).min(16);
        BACKOFF_FIRST.saturating_mul(1 << doublings).min(BACKOFF_MAX)
    };
    let hurried = |after: StdDuration| within.map_or(after, |within| after.min(within));
    match class {
        Class::Invalid => None,
        Class::Conflict => Some(hurried(CONFLICT_RETRY)),
        Class::Unavailable => Some(hurried(backoff())),
        Class::Refused => Some(backoff()),
        Class::Other => Some(OTHER_RETRY),
    }
}

/// Consecutive failed reconciles per object; a success forgets them.
#[derive(Debug, Default)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Counts a failure of the object; returns how many in a row.
    pub fn failed<K: Resource<DynamicType = ()>>(&self, object: &K) -> u32 {
        let key = format!("{}/{}/{}", K::kind(&()), object.namespace().unwrap_or_default(), object.name_any());
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(key).or_default();
        *count = count.saturating_add(1);
        *count
    }

    pub fn succeeded<K: Resource<DynamicType = ()>>(&self, object: &ObjectRef<K>) {
        let key = format!("{}/{}/{}", K::kind(&()), object.namespace.as_deref().unwrap_or_default(), object.name);
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{api::CoronerRemediation, leader::Refusal};

    fn secs(n: u64) -> Option<StdDuration> {
        Some(StdDuration::from_secs(n))
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(kube::core::Status { code, ..Default::default() }.boxed())
    }

    #[test]
    fn a_conflict_or_a_finalizer_of_an_object_already_gone_is_no_warning() {
        use kube::runtime::finalizer::Error as Finalizer;
        let conflict = Error::Kube(api_error(409));
        assert!(expected(&conflict, 1) && expected(&conflict, 2));
        assert!(!expected(&conflict, 3), "a conflict that keeps coming is worth a warning");
        let gone = Error::Finalizer(Box::new(Finalizer::RemoveFinalizer(api_error(404))));
        assert!(expected(&gone, 1));
        assert!(!expected(&Error::Kube(api_error(503)), 1));
    }

    #[test]
    fn an_invalid_object_waits_for_a_change_of_it() {
        assert_eq!(class(&Error::Fence(driver::Error::Incomplete("node name"))), Class::Invalid);
        assert_eq!(retry_after(Class::Invalid, 1, None), None);
        assert_eq!(retry_after(Class::Invalid, 7, None), None);
    }

    #[test]
    fn a_conflict_is_retried_soon() {
        for error in [
            Error::Api(ApiError::Conflict("rv".into())),
            Error::Fence(driver::Error::Api(ApiError::Conflict("rv".into()))),
            Error::Fence(driver::Error::NodeConflicts("n".into())),
            Error::Fence(driver::Error::StatusConflicts(3)),
        ] {
            assert_eq!(class(&error), Class::Conflict, "{error}");
        }
        assert_eq!(retry_after(Class::Conflict, 1, None), Some(CONFLICT_RETRY));
        assert_eq!(retry_after(Class::Conflict, 9, None), Some(CONFLICT_RETRY), "no growth: each retry reads afresh");
    }

    #[test]
    fn an_unavailable_api_is_retried_after_half_a_second_then_every_second() {
        for error in [
            Error::Api(ApiError::Unavailable("connection refused".into())),
            Error::Fence(driver::Error::NotLeader(Refusal::Unreadable(ApiError::Unavailable("timeout".into())))),
        ] {
            assert_eq!(class(&error), Class::Unavailable, "{error}");
        }
        let waits: Vec<_> = (1..=4).map(|n| retry_after(Class::Unavailable, n, None)).collect();
        assert_eq!(waits, [Some(StdDuration::from_millis(500)), secs(1), secs(1), secs(1)]);
        assert_eq!(retry_after(Class::Unavailable, u32::MAX, None), secs(1));
    }

    #[test]
    fn a_request_refused_as_sent_is_retried_as_an_unavailable_api_server_is() {
        for error in [Error::Api(ApiError::Denied("forbidden".into())), Error::Kube(api_error(403))] {
            assert_eq!(class(&error), Class::Refused, "{error}");
        }
        let waits: Vec<_> = (1..=3).map(|n| retry_after(Class::Refused, n, None)).collect();
        assert_eq!(waits, [Some(StdDuration::from_millis(500)), secs(1), secs(1)], "as an unavailable API server");
    }

    #[test]
    fn anything_else_is_retried_after_two_seconds() {
        for error in [
            Error::Api(ApiError::NotFound("remediation r".into())),
            Error::Fence(driver::Error::NotLeader(Refusal::AnotherHolder { holder: "b".into() })),
        ] {
            assert_eq!(class(&error), Class::Other, "{error}");
        }
        assert_eq!(retry_after(Class::Other, 5, None), secs(2));
    }

    #[test]
    fn a_fence_reading_the_machine_retries_what_passes_within_its_cadence_and_nothing_else_sooner() {
        let within = Some(StdDuration::from_millis(250));
        let waits: Vec<_> = (1..=3).map(|n| retry_after(Class::Unavailable, n, within)).collect();
        assert_eq!(waits, [within; 3]);
        assert_eq!(retry_after(Class::Conflict, 1, within), within);
        let slow = secs(5).unwrap();
        assert_eq!(retry_after(Class::Unavailable, 1, Some(slow)), Some(BACKOFF_FIRST), "never later than the backoff");
        assert_eq!(retry_after(Class::Refused, 2, within), secs(1), "a refusal lasts until someone changes it");
        assert_eq!(retry_after(Class::Other, 1, within), secs(2), "nor is leadership passing hurried");
        assert_eq!(retry_after(Class::Invalid, 1, within), None, "an invalid object still waits for a change");
    }

    #[test]
    fn a_success_restarts_the_count_of_failures() {
        let failures = Failures::default();
        let mut r = CoronerRemediation::new("r", Default::default());
        r.metadata.namespace = Some("ns".into());
        let other = CoronerRemediation::new("other", Default::default());
        assert_eq!((failures.failed(&r), failures.failed(&r), failures.failed(&other)), (1, 2, 1));
        failures.succeeded(&ObjectRef::from_obj(&r));
        assert_eq!(failures.failed(&r), 1);
        assert_eq!(failures.failed(&other), 2, "another object's count is its own");
    }
}
