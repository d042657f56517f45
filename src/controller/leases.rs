//! Node Lease freshness as coroner itself sees it: when did the renewTime of each node's Lease in
//! kube-node-lease last change, on coroner's clock (a node's own clock may be wrong).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api, Client, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};

use crate::{cluster::NODE_LEASE_NAMESPACE, gates::LeaseSighting};

#[derive(Debug, Default)]
struct Sightings {
    /// Until the first full list, nothing is known: every Lease counts as just renewed.
    synced: bool,
    /// node → (renewTime last seen, when coroner saw it change or first saw it)
    leases: HashMap<String, (Option<Timestamp>, Timestamp)>,
}

impl Sightings {
    /// First sight counts as a change: after a restart coroner waits a whole window before it treats
    /// any Lease as stale.
    fn note(&mut self, node: String, renew_time: Option<Timestamp>, now: Timestamp) {
        match self.leases.get(&node) {
            Some((seen, _)) if *seen == renew_time => {}
            _ => {
                self.leases.insert(node, (renew_time, now));
            }
        }
    }

    fn sighting(&self, node: &str, now: Timestamp) -> LeaseSighting {
        if !self.synced {
            return LeaseSighting::Seen { last_change: now };
        }
        match self.leases.get(node) {
            Some((_, changed)) => LeaseSighting::Seen { last_change: *changed },
            None => LeaseSighting::Missing,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct LeaseTracker {
    sightings: Arc<Mutex<Sightings>>,
}

impl LeaseTracker {
    fn with<T>(&self, f: impl FnOnce(&mut Sightings) -> T) -> T {
        f(&mut self.sightings.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn sighting(&self, node: &str, now: Timestamp) -> LeaseSighting {
        self.with(|s| s.sighting(node, now))
    }

    /// A watch event: the node's Lease as it is now, seen at `now` on this process's clock.
    pub fn observe(&self, node: &str, renew_time: Option<Timestamp>, now: Timestamp) {
        self.with(|s| s.note(node.to_owned(), renew_time, now));
    }

    pub fn forget(&self, node: &str) {
        self.with(|s| s.leases.remove(node).map(drop).unwrap_or_default());
    }

    /// The first full list arrived (`true`), or the watch broke (`false`: every Lease counts as
    /// just renewed until the next list).
    pub fn set_synced(&self, synced: bool) {
        self.with(|s| s.synced = synced);
    }

    /// Watches kube-node-lease until the process ends.
    pub async fn run(self, client: Client) {
        let leases: Api<Lease> = Api::namespaced(client, NODE_LEASE_NAMESPACE);
        let mut events = watcher(leases, watcher::Config::default()).default_backoff().boxed();
        while let Some(event) = events.next().await {
            // While the watch is broken nothing is known: every Lease counts as just renewed
            // again until the next full list (failing safe: the gate waits).
            let Ok(event) = event else {
                self.set_synced(false);
                continue;
            };
            match event {
                watcher::Event::Apply(lease) | watcher::Event::InitApply(lease) => {
                    let renew = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
                    self.observe(&lease.name_any(), renew, Timestamp::now());
                }
                watcher::Event::Delete(lease) => self.forget(&lease.name_any()),
                watcher::Event::InitDone => self.set_synced(true),
                watcher::Event::Init => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
    }

    #[test]
    fn nothing_is_stale_before_the_first_list() {
        let sightings = Sightings::default();
        assert_eq!(sightings.sighting("n", t(5)), LeaseSighting::Seen { last_change: t(5) });
    }

    #[test]
    fn a_change_is_timed_on_coronors_clock_not_the_nodes() {
        let mut sightings = Sightings { synced: true, ..Sightings::default() };
        // The node's clock is an hour behind: renewTime values are only compared for change.
        sightings.note("n".into(), Some(t(-3600)), t(0));
        sightings.note("n".into(), Some(t(-3600)), t(10));
        assert_eq!(sightings.sighting("n", t(20)), LeaseSighting::Seen { last_change: t(0) });
        sightings.note("n".into(), Some(t(-3590)), t(15));
        assert_eq!(sightings.sighting("n", t(20)), LeaseSighting::Seen { last_change: t(15) });
        assert_eq!(sightings.sighting("other", t(20)), LeaseSighting::Missing);
    }
}
