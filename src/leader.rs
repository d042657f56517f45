//! The check that guards every BMC mutation (the election itself, kube-lease-manager and a Lease in
//! coroner's namespace, is `controller::leader`'s). A Lease is not a fence: between deciding and sending, leadership may pass to
//! another replica, so right before a reset the leader renews its Lease itself, conditionally, and
//! sends only if, by its own monotonic clock since that renewal was sent, the Lease is still its own
//! for longer than the request can take, plus a margin for clock skew (docs/safety.md P6).

use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use kube::ResourceExt;

use crate::words::api_error::ApiError;

/// Tolerated clock difference between coroner and the API server that stamps nothing here but
/// whose clients (other replicas) renew the Lease on their own clocks.
pub const SKEW_MARGIN: StdDuration = StdDuration::from_secs(2);

/// Why this replica may not send a mutation now. Its Display is what the log and the error say.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the leader Lease does not exist")]
    NoLease,
    #[error("the leader Lease has no renewTime")]
    NoRenewTime,
    #[error("leadership passed to {holder:?}")]
    AnotherHolder { holder: String },
    #[error(
        "the leader Lease has {:.1}s left, less than the {:.1}s a BMC request may take plus the skew margin",
        remaining.as_secs_f64(),
        needed.as_secs_f64()
    )]
    TooLittleLeft { remaining: StdDuration, needed: StdDuration },
    #[error("cannot read the leader Lease: {0}")]
    Unreadable(ApiError),
    #[error("cannot renew the leader Lease: {0}")]
    NotRenewed(ApiError),
}

/// How this process knows how long the Lease is still its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Its monotonic clock's time since it sent its last successful renewal request: what the rule
    /// judges on, so a step of the wall clock changes nothing.
    Since(StdDuration),
    /// Before its first renewal of the term, or when the Lease was written since (kube-lease-manager's
    /// own renewal): the Lease's renewTime, on the wall clock now, as the other replicas judge it.
    Wall(Timestamp),
}

/// P6: how the Lease as read now is judged: on the monotonic clock since this process's last
/// renewal when nothing wrote the Lease since (same resourceVersion), else on the wall clock.
pub fn held(lease: Option<&Lease>, last_renewal: Option<(StdDuration, &str)>, now: Timestamp) -> Held {
    let version = lease.and_then(|l| l.metadata.resource_version.as_deref());
    match last_renewal {
        Some((elapsed, written)) if version == Some(written) => Held::Since(elapsed),
        _ => Held::Wall(now),
    }
}

/// P6: whether the holder `identity` may still send a request that can take `need`: the Lease must
/// name it and, by its duration counted from what `held` says, outlast the request by the skew
/// margin.
pub fn may_mutate(lease: Option<&Lease>, identity: &str, held: Held, need: StdDuration) -> Result<(), Refusal> {
    let spec = lease.and_then(|l| l.spec.as_ref()).ok_or(Refusal::NoLease)?;
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder != identity {
        return Err(Refusal::AnotherHolder { holder: holder.to_owned() });
    }
    let seconds = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
    let remaining = match held {
        Held::Since(elapsed) => StdDuration::from_secs(seconds).saturating_sub(elapsed),
        Held::Wall(now) => {
            let renewed = spec.renew_time.as_ref().ok_or(Refusal::NoRenewTime)?.0;
            let until = renewed + SignedDuration::from_secs(i64::try_from(seconds).unwrap_or(0));
            StdDuration::try_from(until.duration_since(now)).unwrap_or_default()
        }
    };
    let needed = need + SKEW_MARGIN;
    if remaining <= needed {
        return Err(Refusal::TooLittleLeft { remaining, needed });
    }
    Ok(())
}

/// Whether the replica `candidate` can take leadership over from the leader `me`, which runs on
/// `node_to_fence`: another pod, Ready, not being deleted, and on another node (a replica on the
/// same node would only hand leadership back, and nobody would say why the fence waits).
pub fn can_take_over(candidate: &Pod, me: &str, node_to_fence: &str) -> bool {
    let node = candidate.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let ready = candidate
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    candidate.name_any() != me
        && candidate.metadata.deletion_timestamp.is_none()
        && ready
        && node.is_some_and(|n| n != node_to_fence)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::MicroTime};

    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
    }

    fn lease(holder: &str, renewed: i64, duration: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(t(renewed))),
                lease_duration_seconds: Some(duration),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    fn replica(name: &str, node: &str, ready: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }))
        .unwrap()
    }

    #[test]
    fn only_a_ready_replica_on_another_node_takes_over() {
        assert!(can_take_over(&replica("coroner-b", "worker-2", "True"), "coroner-a", "worker-1"));
        assert!(!can_take_over(&replica("coroner-a", "worker-2", "True"), "coroner-a", "worker-1"), "itself");
        assert!(!can_take_over(&replica("coroner-b", "worker-2", "False"), "coroner-a", "worker-1"), "not Ready");
        assert!(
            !can_take_over(&replica("coroner-b", "worker-1", "True"), "coroner-a", "worker-1"),
            "on the node to fence: it would hand leadership back"
        );
        let mut unscheduled = replica("coroner-b", "", "True");
        unscheduled.spec.as_mut().unwrap().node_name = None;
        assert!(!can_take_over(&unscheduled, "coroner-a", "worker-1"), "not scheduled");
        let mut leaving = replica("coroner-b", "worker-2", "True");
        leaving.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(0)));
        assert!(!can_take_over(&leaving, "coroner-a", "worker-1"), "being deleted");
    }

    #[test]
    fn the_holder_may_act_while_the_lease_outlasts_the_request() {
        // Renewed at 0 for 15 s; at 5 s there are 10 s left; a 5 s request plus 2 s margin fits.
        assert_eq!(may_mutate(Some(&lease("a", 0, 15)), "a", Held::Wall(t(5)), StdDuration::from_secs(5)), Ok(()));
    }

    #[test]
    fn too_little_lease_left_means_no_request() {
        // 8 s left, 5 s + 2 s margin = 7 s needed: fine; 7 s left is not.
        assert_eq!(may_mutate(Some(&lease("a", 0, 15)), "a", Held::Wall(t(7)), StdDuration::from_secs(5)), Ok(()));
        let short = may_mutate(Some(&lease("a", 0, 15)), "a", Held::Wall(t(8)), StdDuration::from_secs(5)).unwrap_err();
        let needed = StdDuration::from_secs(7);
        assert_eq!(short, Refusal::TooLittleLeft { remaining: StdDuration::from_secs(7), needed });
        assert_eq!(
            short.to_string(),
            "the leader Lease has 7.0s left, less than the 7.0s a BMC request may take plus the skew margin"
        );
        assert_eq!(
            may_mutate(Some(&lease("a", 0, 15)), "a", Held::Wall(t(30)), StdDuration::from_secs(5)),
            Err(Refusal::TooLittleLeft { remaining: StdDuration::ZERO, needed })
        );
    }

    #[test]
    fn another_holder_or_no_lease_means_no_request() {
        let passed =
            may_mutate(Some(&lease("b", 0, 15)), "a", Held::Wall(t(1)), StdDuration::from_secs(1)).unwrap_err();
        assert_eq!(passed, Refusal::AnotherHolder { holder: "b".into() });
        assert_eq!(passed.to_string(), "leadership passed to \"b\"");
        assert_eq!(may_mutate(None, "a", Held::Wall(t(1)), StdDuration::from_secs(1)), Err(Refusal::NoLease));
        let mut unrenewed = lease("a", 0, 15);
        unrenewed.spec.as_mut().unwrap().renew_time = None;
        assert_eq!(
            may_mutate(Some(&unrenewed), "a", Held::Wall(t(1)), StdDuration::from_secs(1)),
            Err(Refusal::NoRenewTime)
        );
    }

    #[test]
    fn after_its_own_renewal_the_leader_judges_the_lease_on_its_monotonic_clock_whatever_the_wall_clock_says() {
        // The renewTime says the Lease was renewed an hour from now (a wall clock stepped forward,
        // or back after the renewal): it counts for nothing once this process has renewed itself.
        let stepped = lease("a", 3600, 15);
        let need = StdDuration::from_secs(5);
        assert_eq!(may_mutate(Some(&stepped), "a", Held::Since(StdDuration::from_secs(7)), need), Ok(()));
        let deposed = may_mutate(Some(&stepped), "a", Held::Since(StdDuration::from_secs(8)), need).unwrap_err();
        assert_eq!(
            deposed,
            Refusal::TooLittleLeft { remaining: StdDuration::from_secs(7), needed: need + SKEW_MARGIN }
        );
        assert_eq!(
            may_mutate(Some(&stepped), "a", Held::Since(StdDuration::from_secs(60)), need),
            Err(Refusal::TooLittleLeft { remaining: StdDuration::ZERO, needed: need + SKEW_MARGIN })
        );
    }

    #[test]
    fn the_monotonic_judgement_needs_no_renew_time_but_still_the_holder() {
        let mut unrenewed = lease("a", 0, 15);
        unrenewed.spec.as_mut().unwrap().renew_time = None;
        assert_eq!(
            may_mutate(Some(&unrenewed), "a", Held::Since(StdDuration::ZERO), StdDuration::from_secs(1)),
            Ok(())
        );
        assert_eq!(
            may_mutate(Some(&lease("b", 0, 15)), "a", Held::Since(StdDuration::ZERO), StdDuration::from_secs(1)),
            Err(Refusal::AnotherHolder { holder: "b".into() })
        );
    }

    #[test]
    fn the_monotonic_clock_judges_only_while_nothing_wrote_the_lease_since_this_process_renewed_it() {
        let mut renewed = lease("a", 0, 15);
        renewed.metadata.resource_version = Some("7".into());
        let last = Some((StdDuration::from_secs(3), "7"));
        assert_eq!(held(Some(&renewed), last, t(100)), Held::Since(StdDuration::from_secs(3)));
        renewed.metadata.resource_version = Some("8".into());
        assert_eq!(held(Some(&renewed), last, t(100)), Held::Wall(t(100)), "kube-lease-manager renewed it since");
        assert_eq!(held(Some(&renewed), None, t(100)), Held::Wall(t(100)), "no renewal of its own this term");
    }
}
