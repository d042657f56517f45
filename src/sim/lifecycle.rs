//! The processes' lives: started, leading, renewing, dying, and their reconciles spawned as the
//! controller would, woken by the changes the stores deliver.

use super::*;

impl Run {
    pub(super) fn start_process(&mut self) {
        let pid = self.next_pid;
        self.next_pid += 1;
        let now = self.now();
        self.shared.with(|t| {
            t.processes.insert(pid, ProcState { alive: true, leading: false, started: now, clock_offset: 0, term: 0 })
        });
        self.processes.insert(pid, Arc::new(Process::new(pid, self.shared.clone(), self.settings.clone())));
        let synced = now + self.rng.i64(100 * MS..1500 * MS);
        self.at(synced, Happening::TrackerSynced(pid));
        self.tell(format!("p{pid} started"));
        if self.leader().is_none() {
            self.become_leader(pid);
        }
    }

    pub(super) fn become_leader(&mut self, pid: u32) {
        let now = self.now();
        self.shared.with(|t| t.disruptions.push(now));
        let names = self.shared.with(|t| {
            t.leader.holder = Some(pid);
            t.leader.renewed = now;
            if let Some(p) = t.processes.get_mut(&pid) {
                p.leading = true;
                p.term += 1;
            }
            let attestations = t.attestations.keys().map(|a| task::attestation(a));
            // The Node watch's first list passes every Node through the mapper.
            let cached: Vec<String> = t.remediations.values().filter_map(ResourceExt::uid).collect();
            let sweeps = t
                .nodes
                .values()
                .filter(|n| driver::orphans::wants_sweep(n, |owner| cached.iter().any(|c| c == owner)))
                .map(|n| task::sweep(&n.name_any()));
            t.remediations
                .keys()
                .cloned()
                .chain(attestations)
                .chain([task::SETTLE.to_owned()])
                .chain(sweeps)
                .collect::<Vec<_>>()
        });
        let mut controller = Controller::default();
        for name in names {
            controller.trigger(&name, now);
        }
        self.controllers.insert(pid, controller);
        self.start_verifier(pid);
        self.tell(format!("p{pid} leads"));
    }

    pub(super) fn renew_leadership(&mut self) {
        let now = self.now();
        let (holder, expired) = self.shared.with(|t| {
            let holder = t.leader.holder.filter(|h| t.processes.get(h).is_some_and(|p| p.alive));
            if let Some(h) = holder
                && t.processes.get(&h).is_some_and(|p| p.leading)
            {
                t.leader.renewed = now;
            }
            (holder, now > t.leader.renewed + t.leader.duration)
        });
        if holder.is_none() && expired {
            let standby = self.shared.with(|t| t.processes.iter().find(|(_, p)| p.alive).map(|(pid, _)| *pid));
            if let Some(pid) = standby {
                self.become_leader(pid);
            } else {
                self.shared.with(|t| t.leader.holder = None);
            }
        }
    }

    /// A dead process's tasks go; a replacement starts a little later.
    pub(super) fn bury_the_dead(&mut self) {
        let dead: Vec<u32> = self.shared.with(|t| {
            t.processes
                .iter()
                .filter(|(pid, p)| !p.alive && self.processes.contains_key(pid))
                .map(|(pid, _)| *pid)
                .collect()
        });
        for pid in dead {
            let now = self.now();
            self.shared.with(|t| t.disruptions.push(now));
            self.exec.kill(pid);
            self.processes.remove(&pid);
            self.controllers.remove(&pid);
            self.stop_verifier(pid);
            let restart = self.now() + self.rng.i64(SECOND..5 * SECOND);
            self.at(restart, Happening::StartProcess);
            self.tell(format!("p{pid} died"));
        }
    }

    pub(super) fn finish_reconciles(&mut self) {
        let done: Vec<_> = std::mem::take(&mut *self.completions.lock().unwrap_or_else(PoisonError::into_inner));
        let now = self.now();
        for (pid, name, result) in done {
            if let Err((error, ..)) = &result {
                let now = self.now();
                self.story
                    .push(format!("t={:.3}s p{pid} reconcile of {name} failed: {error}", now as f64 / SECOND as f64));
            }
            let Some(controller) = self.controllers.get_mut(&pid) else { continue };
            controller.running.remove(&name);
            if result.is_ok() {
                controller.failures.remove(&name);
            }
            let due = match result {
                Ok(Next::Requeue(after)) => Some(now + micros(after)),
                Ok(Next::AwaitChange) => None,
                Err((_, class, within)) => {
                    let failures = controller.failures.entry(name.clone()).or_default();
                    *failures += 1;
                    retry::retry_after(class, *failures, within).map(|after| now + micros(after))
                }
            };
            if let Some(due) = due {
                controller.trigger(&name, due);
            }
            if controller.rerun.remove(&name) {
                controller.trigger(&name, now);
            }
        }
    }

    /// Watch events reach the leaders' controllers (and Lease events every process's tracker), each
    /// after its own delay.
    pub(super) fn deliver_changes(&mut self) {
        let (changes, leases, remediations, parts) = self.shared.with(|t| {
            let remediations: Vec<(String, String, bool)> = t
                .remediations
                .iter()
                .map(|(name, r)| {
                    let node = contract::node_name(&r.metadata).unwrap_or_default().to_owned();
                    let pending = Phase::of(r) == Phase::Pending;
                    (name.clone(), node, pending)
                })
                .collect();
            // Each remediation's phase as its watch event shows it; none once it is being deleted.
            let phases: BTreeMap<String, Phase> = t
                .remediations
                .iter()
                .filter(|(_, r)| r.metadata.deletion_timestamp.is_none())
                .map(|(name, r)| (name.clone(), Phase::of(r)))
                .collect();
            let control_plane: Vec<String> =
                t.nodes.values().filter(|n| crate::gates::is_control_plane(n)).map(|n| n.name_any()).collect();
            let attestations: Vec<(String, String)> =
                t.attestations.values().map(|a| (a.name_any(), a.spec.node_name.clone())).collect();
            let changes = std::mem::take(&mut t.changes);
            // As production's Node mapper: the changed Nodes the sweep should see.
            let cached: Vec<String> = t.remediations.values().filter_map(ResourceExt::uid).collect();
            let sweeps: Vec<String> = changes
                .iter()
                .filter_map(|c| match c {
                    world::Change::Node(name) => t.nodes.get(name),
                    _ => None,
                })
                .filter(|n| driver::orphans::wants_sweep(n, |owner| cached.iter().any(|c| c == owner)))
                .map(ResourceExt::name_any)
                .collect();
            // Each remediation's node (as the finalizer names it), and whether it is being deleted.
            let deleted: Vec<(String, Option<String>, bool)> = t
                .remediations
                .iter()
                .map(|(name, r)| (name.clone(), driver::node_of(r), r.metadata.deletion_timestamp.is_some()))
                .collect();
            let parts = (attestations, control_plane, phases, sweeps, deleted);
            (changes, std::mem::take(&mut t.lease_changes), remediations, parts)
        });
        let (attestations, control_plane, phases, sweeps, deleted) = parts;
        let attestations_of = |node: &str| -> Vec<String> {
            attestations.iter().filter(|(_, n)| n == node).map(|(name, _)| task::attestation(name)).collect()
        };
        let now = self.now();
        for (name, node, _) in &deleted {
            if let Some(node) = node {
                self.nodes.insert(name.clone(), node.clone());
            }
        }
        for change in changes {
            // What production's mappers wake on purpose (not a remediation's own change): poked.
            let mut poked: Vec<String> = Vec::new();
            let names: Vec<String> = match change {
                // A remediation change (its fence failing, NHC deleting it) wakes the attestations of
                // its node, as the production controller's watch does.
                world::Change::Remediation(name) => {
                    let node = remediations.iter().find(|(r, _, _)| *r == name).map(|(_, n, _)| n.clone());
                    let woken = node.map(|n| attestations_of(&n)).unwrap_or_default();
                    // A remediation leaving Pending or a power slot, or gone, wakes the pending ones.
                    let after = phases.get(&name).copied();
                    let before = match after {
                        Some(phase) => self.phases.insert(name.clone(), phase),
                        None => self.phases.remove(&name),
                    };
                    let queue: Vec<String> = if crate::gates::moves_the_queue(before, after) {
                        remediations
                            .iter()
                            .filter(|(r, _, pending)| *pending && *r != name)
                            .map(|(r, _, _)| r.clone())
                            .collect()
                    } else {
                        Vec::new()
                    };
                    poked.clone_from(&queue);
                    // Being deleted (its last event, gone, still shows it so): its node's sweep.
                    let deleting = deleted.iter().find(|(r, _, _)| *r == name).is_none_or(|(_, _, d)| *d);
                    let sweep = self.nodes.get(&name).filter(|_| deleting).map(|node| task::sweep(node));
                    std::iter::once(name).chain(woken).chain(queue).chain(sweep).collect()
                }
                world::Change::Attestation(name) => vec![task::attestation(&name)],
                // As production's `gates::woken_by_node_change`.
                world::Change::Node(node) => {
                    poked = remediations
                        .iter()
                        .filter(|(_, n, pending)| *n == node || (*pending && control_plane.contains(&node)))
                        .map(|(name, _, _)| name.clone())
                        .collect();
                    let sweep = sweeps.contains(&node).then(|| task::sweep(&node));
                    poked.iter().cloned().chain(sweep).collect()
                }
            };
            for process in self.processes.values() {
                for name in &poked {
                    process.local.poke(name);
                }
            }
            for (_, controller) in self.controllers.iter_mut() {
                for name in &names {
                    let delay = self.rng.i64(MS..300 * MS);
                    controller.trigger(name, now + delay);
                }
            }
        }
        let pids: Vec<u32> = self.processes.keys().copied().collect();
        for node in leases {
            for &pid in &pids {
                let delay = self.rng.i64(MS..800 * MS);
                self.at(now + delay, Happening::DeliverLease { pid, node: node.clone() });
            }
        }
    }

    pub(super) fn spawn_due(&mut self) {
        let now = self.now();
        for (&pid, controller) in self.controllers.iter_mut() {
            let Some(process) = self.processes.get(&pid) else { continue };
            let due: Vec<String> = controller
                .due
                .iter()
                .filter(|(name, at)| **at <= now && !controller.running.contains(*name))
                .map(|(n, _)| n.clone())
                .collect();
            for name in due {
                controller.due.remove(&name);
                controller.running.insert(name.clone());
                // Production's error policy reads the remediation the reconcile was given, from the
                // process's store.
                let within = self.shared.with(|t| {
                    let stored = t.stored_view(pid);
                    let remediation = stored.remediations.iter().find(|r| r.metadata.name.as_deref() == Some(&name));
                    remediation.and_then(|r| crate::fence::retry_within(&r.spec, r.status.as_ref()))
                });
                let process = process.clone();
                let completions = self.completions.clone();
                self.exec.spawn(
                    pid,
                    name.clone(),
                    Box::pin(async move {
                        let result = task::run(process.as_ref(), &name)
                            .await
                            .map_err(|e| (e.to_string(), retry::fence_class(&e), within));
                        completions.lock().unwrap_or_else(PoisonError::into_inner).push((process.pid, name, result));
                    }),
                );
            }
        }
    }
}
