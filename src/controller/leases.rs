//! Node Lease freshness as coroner itself sees it: when did the renewTime of each node's Lease in
//! kube-node-lease last change, on this process's monotonic clock (a node's own clock may be wrong,
//! and a step of coroner's wall clock must age no Lease).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Instant,
};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api, Client, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};

use crate::{cluster::NODE_LEASE_NAMESPACE, fence::Mono, gates::LeaseSighting};

#[derive(Debug, Default)]
struct Sightings {
    /// Until the first full list, nothing is known: every Lease counts as just renewed.
    synced: bool,
    /// node → (renewTime last seen, when coroner saw it change or first saw it)
    leases: HashMap<String, (Option<Timestamp>, Mono)>,
}

impl Sightings {
    /// First sight counts as a change: after a restart coroner waits a whole window before it treats
    /// any Lease as stale.
    fn note(&mut self, node: String, renew_time: Option<Timestamp>, now: Mono) {
        match self.leases.get(&node) {
            Some((seen, _)) if *seen == renew_time => {}
            _ => {
                self.leases.insert(node, (renew_time, now));
            }
        }
    }

    fn sighting(&self, node: &str, now: Mono) -> LeaseSighting {
        if !self.synced {
            return LeaseSighting::Seen { age: Mono::ZERO };
        }
        match self.leases.get(node) {
            Some((_, changed)) => LeaseSighting::Seen { age: now.saturating_sub(*changed) },
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

    pub fn sighting(&self, node: &str, now: Mono) -> LeaseSighting {
        self.with(|s| s.sighting(node, now))
    }

    /// A watch event: the node's Lease as it is now, seen at `now` on this process's clock.
    pub fn observe(&self, node: &str, renew_time: Option<Timestamp>, now: Mono) {
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

    /// Watches kube-node-lease until the process ends; `started` is this process's monotonic epoch.
    pub async fn run(self, client: Client, started: Instant) {
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
                    self.observe(&lease.name_any(), renew, started.elapsed());
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
    use super::*;

    fn at(secs: u64) -> Mono {
        Mono::from_secs(secs)
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_800_000_000 + secs)
    }

    #[test]
    fn nothing_is_stale_before_the_first_list() {
        let sightings = Sightings::default();
        assert_eq!(sightings.sighting("n", at(5)), LeaseSighting::Seen { age: Mono::ZERO });
    }

    #[test]
    fn a_change_is_timed_on_coronors_monotonic_clock_not_the_nodes() {
        let mut sightings = Sightings { synced: true, ..Sightings::default() };
        // The node's clock is an hour behind: renewTime values are only compared for change.
        sightings.note("n".into(), Some(t(-3600)), at(0));
        sightings.note("n".into(), Some(t(-3600)), at(10));
        assert_eq!(sightings.sighting("n", at(20)), LeaseSighting::Seen { age: at(20) });
        sightings.note("n".into(), Some(t(-3590)), at(15));
        assert_eq!(sightings.sighting("n", at(20)), LeaseSighting::Seen { age: at(5) });
        assert_eq!(sightings.sighting("other", at(20)), LeaseSighting::Missing);
    }
}
