//! Leader election (kube-lease-manager, a Lease in coroner's namespace) and the check that guards
//! every BMC mutation. A Lease is not a fence: between deciding and sending, leadership may pass to
//! another replica, so right before a reset the leader reads its Lease again and sends only if the
//! Lease is still its own for longer than the request can take, plus a margin for clock skew.

use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use kube::{Api, Client, ResourceExt};

use crate::driver::ApiError;

/// Tolerated clock difference between coroner and the API server that stamps nothing here but
/// whose clients (other replicas) renew the Lease on their own clocks.
pub const SKEW_MARGIN: StdDuration = StdDuration::from_secs(2);

#[derive(Clone, Debug)]
pub struct Election {
    pub lease_name: String,
    pub namespace: String,
    /// This replica's holder identity (its pod name).
    pub identity: String,
    pub lease_duration: StdDuration,
}

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
}

/// Whether the holder `identity` may still send a request that can take `need`: the Lease must name
/// it and, by its own renewTime and duration, outlast the request by the skew margin.
pub fn may_mutate(lease: Option<&Lease>, identity: &str, now: Timestamp, need: StdDuration) -> Result<(), Refusal> {
    let spec = lease.and_then(|l| l.spec.as_ref()).ok_or(Refusal::NoLease)?;
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder != identity {
        return Err(Refusal::AnotherHolder { holder: holder.to_owned() });
    }
    let renewed = spec.renew_time.as_ref().ok_or(Refusal::NoRenewTime)?.0;
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    let remaining = StdDuration::try_from((renewed + duration).duration_since(now)).unwrap_or_default();
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

impl Election {
    /// Reads the Lease and applies [`may_mutate`].
    pub async fn ensure_leader(&self, client: &Client, need: StdDuration) -> Result<(), Refusal> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let lease = leases.get_opt(&self.lease_name).await.map_err(|e| Refusal::Unreadable(ApiError::from(e)))?;
        may_mutate(lease.as_ref(), &self.identity, Timestamp::now(), need)
    }
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
        assert_eq!(may_mutate(Some(&lease("a", 0, 15)), "a", t(5), StdDuration::from_secs(5)), Ok(()));
    }

    #[test]
    fn too_little_lease_left_means_no_request() {
        // 8 s left, 5 s + 2 s margin = 7 s needed: fine; 7 s left is not.
        assert_eq!(may_mutate(Some(&lease("a", 0, 15)), "a", t(7), StdDuration::from_secs(5)), Ok(()));
        let short = may_mutate(Some(&lease("a", 0, 15)), "a", t(8), StdDuration::from_secs(5)).unwrap_err();
        let needed = StdDuration::from_secs(7);
        assert_eq!(short, Refusal::TooLittleLeft { remaining: StdDuration::from_secs(7), needed });
        assert_eq!(
            short.to_string(),
            "the leader Lease has 7.0s left, less than the 7.0s a BMC request may take plus the skew margin"
        );
        assert_eq!(
            may_mutate(Some(&lease("a", 0, 15)), "a", t(30), StdDuration::from_secs(5)),
            Err(Refusal::TooLittleLeft { remaining: StdDuration::ZERO, needed })
        );
    }

    #[test]
    fn another_holder_or_no_lease_means_no_request() {
        let passed = may_mutate(Some(&lease("b", 0, 15)), "a", t(1), StdDuration::from_secs(1)).unwrap_err();
        assert_eq!(passed, Refusal::AnotherHolder { holder: "b".into() });
        assert_eq!(passed.to_string(), "leadership passed to \"b\"");
        assert_eq!(may_mutate(None, "a", t(1), StdDuration::from_secs(1)), Err(Refusal::NoLease));
        let mut unrenewed = lease("a", 0, 15);
        unrenewed.spec.as_mut().unwrap().renew_time = None;
        assert_eq!(may_mutate(Some(&unrenewed), "a", t(1), StdDuration::from_secs(1)), Err(Refusal::NoRenewTime));
    }
}
