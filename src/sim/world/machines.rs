//! The machines: their power, their BMCs and the PDU outlets that feed them, and what the world does
//! to their power.

use super::*;

/// How the node's kubelet reaches the apiserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Status and Lease get through.
    Connected,
    /// Nothing gets through.
    Partitioned,
    /// Only the Lease renewals get through (the scary half-alive node).
    LeaseOnly,
}

#[derive(Clone, Debug)]
pub struct Machine {
    pub name: String,
    /// The SMBIOS UUID the kubelet reports as systemUUID.
    pub uuid: String,
    pub on: bool,
    pub boot_id: String,
    pub(super) boots: u32,
    /// Power over time: (since, on).
    pub history: Vec<(Micros, bool)>,
    /// A scheduled power change (a reset takes a moment to take effect).
    pub pending: Option<(Micros, bool)>,
    /// Whether the OS is up and its kubelet running (some time after power-on).
    pub booted_at: Option<Micros>,
    pub node: String,
    pub reach: Reach,
}

impl Machine {
    /// Whether the machine was off for all of `[from, to]`.
    pub fn off_throughout(&self, from: Micros, to: Micros) -> bool {
        let mut state_at_from = true;
        for &(since, on) in &self.history {
            if since <= from {
                state_at_from = on;
            } else if since <= to && on {
                return false;
            }
        }
        !state_at_from
    }

    pub fn on_at(&self, at: Micros) -> bool {
        self.history.iter().rev().find(|(since, _)| *since <= at).is_some_and(|(_, on)| *on)
    }
}

/// What a BMC's power answers say, beyond the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAnswers {
    Honest,
    /// `PoweringOff` for a while after a ForceOff before `Off`.
    Transitional,
    /// An unknown value some of the time.
    SometimesUnknown,
    /// `Off`, whatever the machine does; resets do nothing.
    LiesOff,
}

#[derive(Clone, Debug)]
pub struct SimSystem {
    pub id: String,
    /// The machine this system powers.
    pub machine: usize,
    /// The UUID it reports (may differ from the machine's: a clone, or the other byte order).
    pub uuid: String,
}

/// An outlet of a rack PDU feeding one machine's supply (docs/simulation.md): the machine runs only
/// while an outlet feeding it is on, and its BMC, on the same supply, dies with the last one. A welded
/// relay reads Off after its Off and keeps feeding (a metered one still shows the machine's draw).
#[derive(Clone, Debug)]
pub struct SimOutlet {
    /// The PDU's `host:port`, as a binding's SNMP outlet names it.
    pub pdu: String,
    pub number: u32,
    pub on: bool,
    pub welded: bool,
    pub metered: bool,
    /// Its meter gives no reading once it is switched off (L4): still reporting a `PowerWatts` sensor
    /// (`Some(true)`), or no sensor at all (`Some(false)`, a PDU that drops it).
    pub silent_off: Option<bool>,
    /// The machine it feeds.
    pub feeds: usize,
    /// A second machine on the same outlet (a twin chassis; L6's shared outlet).
    pub also_feeds: Option<usize>,
}

impl SimOutlet {
    pub fn feeds_machine(&self, machine: usize) -> bool {
        self.feeds == machine || self.also_feeds == Some(machine)
    }

    pub fn machines(&self) -> impl Iterator<Item = usize> + use<> {
        std::iter::once(self.feeds).chain(self.also_feeds)
    }
}

/// What a metered outlet reads while the machine it feeds runs.
pub const MACHINE_WATTS: f64 = 180.0;

#[derive(Clone, Debug)]
pub struct BmcModel {
    pub origin: String,
    pub systems: Vec<SimSystem>,
    /// Powered and answering.
    pub alive: bool,
    pub answers: PowerAnswers,
    /// The credentials version it accepts.
    pub credentials: u32,
    /// Latency of one request: between these.
    pub latency: (Micros, Micros),
    /// Chance a request fails with a 5xx, or gets no answer before the timeout.
    pub error_rate: f64,
    pub timeout_rate: f64,
    /// How long a reset takes to take effect.
    pub reset_delay: (Micros, Micros),
    /// An IPMI BMC (one chassis, its first system) whose firmware holds the System GUID in this
    /// layout; a Redfish service when `None`.
    pub ipmi: Option<GuidLayout>,
}

impl BmcModel {
    pub fn honest(origin: &str, systems: Vec<SimSystem>) -> Self {
        Self {
            origin: origin.into(),
            systems,
            alive: true,
            answers: PowerAnswers::Honest,
            credentials: 1,
            latency: (5_000, 80_000),
            error_rate: 0.0,
            timeout_rate: 0.0,
            reset_delay: (100_000, 1_500_000),
            ipmi: None,
        }
    }
}

impl Truth {
    /// Whether a machine's supply has power: no outlet feeds it (the world models none), or one that
    /// does is on or welded.
    pub fn fed(&self, machine: usize) -> bool {
        let mut feeding = self.outlets.iter().filter(|o| o.feeds_machine(machine)).peekable();
        feeding.peek().is_none() || feeding.any(|o| o.on || o.welded)
    }

    /// A person switches back on every outlet coroner switched off (taking them for tripped
    /// breakers): a supply with power again boots the BMC on it, and the machine starts (its
    /// power-restore policy), which the fence or the guard must then switch off again.
    pub fn outlets_on_by_hand(&mut self) {
        let switched: BTreeSet<usize> = self
            .log
            .iter()
            .filter_map(|r| match r {
                Record::OutletSwitched { outlet, on: false, .. } => Some(*outlet),
                _ => None,
            })
            .collect();
        let mut machines = BTreeSet::new();
        for outlet in switched {
            if !self.outlets[outlet].on {
                self.outlets[outlet].on = true;
                self.log.push(Record::OutletOnByHand { at: self.now, outlet });
                machines.extend(self.outlets[outlet].machines());
            }
        }
        let fed: Vec<usize> = machines.into_iter().filter(|m| self.fed(*m)).collect();
        for machine in fed {
            // Only a BMC that died with the supply boots again (one dead of its own stays dead).
            let bmcs: Vec<usize> =
                self.supplied_bmcs.iter().filter(|(m, _)| *m == machine).map(|(_, bmc)| *bmc).collect();
            for bmc in bmcs {
                if self.unpowered_bmcs.remove(&bmc) {
                    self.set_bmc_alive(bmc, true);
                }
            }
            self.power_on_by_world(machine, None);
        }
    }

    /// Switches an outlet: a machine whose last feeding outlet goes off loses its power at once, and
    /// the BMC on its supply with it (a person's switching on: [`Self::outlets_on_by_hand`]).
    pub fn switch_outlet(&mut self, outlet: usize, on: bool, by: Caller) {
        self.outlets[outlet].on = on;
        self.log.push(Record::OutletSwitched { at: self.now, by, outlet, on });
        let unfed: Vec<usize> = self.outlets[outlet].machines().filter(|m| !self.fed(*m)).collect();
        for machine in unfed {
            let now = self.now;
            self.machines[machine].pending = Some((now, false));
            self.apply_power();
            let bmcs: Vec<usize> =
                self.supplied_bmcs.iter().filter(|(m, _)| *m == machine).map(|(_, bmc)| *bmc).collect();
            for bmc in bmcs {
                if self.bmcs[bmc].alive {
                    self.set_bmc_alive(bmc, false);
                    self.unpowered_bmcs.insert(bmc);
                }
            }
        }
    }

    /// The world switches a machine on now (a person, a power-restore policy), until `until` if it goes
    /// off again by itself (a glitch); not one whose supply has no power.
    pub fn power_on_by_world(&mut self, machine: usize, until: Option<Micros>) {
        if !self.fed(machine) {
            return;
        }
        let at = self.now;
        let m = &self.machines[machine];
        if !m.on || m.pending.is_some_and(|(_, on)| !on) {
            self.log.push(Record::PoweredOn { at, machine, until });
        }
        self.schedule_power(machine, true, at);
    }

    /// A BMC loses its power or gets it back.
    pub fn set_bmc_alive(&mut self, bmc: usize, alive: bool) {
        self.bmcs[bmc].alive = alive;
        self.log.push(Record::BmcPower { at: self.now, bmc, alive });
    }

    /// A power change requested now, taking effect at `at`.
    pub fn schedule_power(&mut self, machine: usize, on: bool, at: Micros) {
        let m = &mut self.machines[machine];
        if m.pending.is_some_and(|(when, state)| state == on && when <= at) {
            return;
        }
        m.pending = Some((at, on));
    }

    /// Applies due power changes; a machine switched off loses its kubelet, one switched on boots
    /// with a new bootID.
    pub fn apply_power(&mut self) {
        let now = self.now;
        let fed: Vec<bool> = (0..self.machines.len()).map(|m| self.fed(m)).collect();
        for (m, fed) in self.machines.iter_mut().zip(fed) {
            if let Some((at, on)) = m.pending
                && at <= now
            {
                m.pending = None;
                // A supply without power switches nothing on.
                if m.on != on && (fed || !on) {
                    m.on = on;
                    m.history.push((at, on));
                    if on {
                        m.boots += 1;
                        m.boot_id = format!("{}-boot-{}", m.node, m.boots);
                        m.booted_at = Some(at + BOOT * SECOND);
                    } else {
                        m.booted_at = None;
                    }
                }
            }
        }
    }

    // The node's life: kubelet, kube-controller-manager, NodeHealthCheck ------------------------------
}

/// The cluster's life, one tick at a time: kubelets, kube-controller-manager, NodeHealthCheck.
impl Truth {
    /// One second of the cluster's own life.
    pub fn tick(&mut self, nhc: &NhcPolicy) {
        self.apply_power();
        let now = self.now;
        let wall = self.wall(now);
        for i in 0..self.machines.len() {
            let m = &self.machines[i];
            let node = m.node.clone();
            let kubelet_up = m.on && m.booted_at.is_some_and(|at| at <= now);
            let boot = m.boot_id.clone();
            // Heartbeats every 10 s, staggered by machine.
            let beat = (now / SECOND + i as i64) % 10 == 0;
            match (kubelet_up, m.reach) {
                (true, Reach::Connected) if beat || self.ready_of(&node).as_deref() != Some(conditions::TRUE) => {
                    self.renew_lease(&node, wall);
                    self.set_ready(&node, conditions::TRUE, Some(&boot));
                }
                (true, Reach::LeaseOnly) if beat => self.renew_lease(&node, wall),
                _ => {}
            }
            // kube-controller-manager: no heartbeat for 40 s → Unknown, by when it saw the Lease
            // change (its own clock), not the renewTime a kubelet's clock wrote.
            let renewed =
                self.life.get(&node).and_then(|l| l.iter().rev().find(|(_, k)| *k == Life::Lease)).map(|(t, _)| *t);
            // A Lease the world began with, no kubelet's renewal since: its renewTime is the world's.
            let initial = || {
                let at = self.leases.get(&node).copied().flatten()?;
                Some(at.duration_since(self.wall(0)).as_micros() as Micros)
            };
            let silent = renewed.or_else(initial).is_none_or(|renewed| now - renewed > 40 * SECOND);
            if silent && self.ready_of(&node).as_deref() == Some(conditions::TRUE) {
                self.set_ready(&node, conditions::UNKNOWN, None);
            }
        }
        self.evict_out_of_service();
        self.nhc(nhc);
    }

    /// kube-controller-manager with `node.kubernetes.io/out-of-service`: pods that do not tolerate it
    /// go, and volumes are detached.
    fn evict_out_of_service(&mut self) {
        let tainted: BTreeSet<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| taints_of(n).iter().any(|t| t.key == CoronerTaint::OutOfService.key()))
            .map(|(name, _)| name.clone())
            .collect();
        self.pods.retain(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            !(tainted.contains(&node) && crate::fence::pod_blocks_release(p))
        });
        for node in &tainted {
            self.attachments.remove(node);
        }
    }

    fn nhc(&mut self, policy: &NhcPolicy) {
        let now = self.now;
        // An unhealthy node without a remediation gets one (again, after a deletion).
        let watched: Vec<(String, u32)> = self.nhc_nodes.iter().map(|(n, c)| (n.clone(), *c)).collect();
        for (node, created) in watched {
            let has = self.remediations.values().any(|r| contract::node_name(&r.metadata) == Some(node.as_str()));
            let exists = self.nodes.contains_key(&node);
            if exists && !has && self.ready_of(&node).as_deref() != Some(conditions::TRUE) {
                let name = if created == 0 { node.clone() } else { format!("{node}-{}", created + 1) };
                let spec = self.nhc_spec.clone();
                self.create_remediation(&name, &node, &spec);
                self.nhc_nodes.insert(node, created + 1);
            }
        }
        let names: Vec<String> = self.remediations.keys().cloned().collect();
        for name in names {
            let Some(r) = self.remediations.get(&name).cloned() else { continue };
            let node = contract::node_name(&r.metadata).unwrap_or_default().to_owned();
            let created = r.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or(self.epoch);
            let age = self.wall(now).duration_since(created);
            let succeeded = r
                .status
                .as_ref()
                .and_then(|s| conditions::status_of(&s.conditions, contract::SUCCEEDED).map(str::to_owned));
            let deleting = r.metadata.deletion_timestamp.is_some();
            // A remediation whose node is gone is an orphan: NHC deletes it.
            if !self.nodes.contains_key(&node) && !deleting {
                self.delete_remediation(&name);
                continue;
            }
            if self.ready_of(&node).as_deref() == Some(conditions::TRUE) {
                let since = *self.healthy_since.entry(name.clone()).or_insert(now);
                // NHC deletes the remediation about two seconds after the node is healthy.
                if now - since >= 2 * SECOND && !deleting {
                    self.delete_remediation(&name);
                }
            } else {
                self.healthy_since.remove(&name);
            }
            if let Some(timeout) = policy.timeout
                && age >= SignedDuration::from_micros(timeout)
                && succeeded.as_deref() != Some(conditions::TRUE)
                && !contract::timed_out_by_nhc(&r.metadata)
                && !deleting
            {
                let stamp = self.wall(now).to_string();
                self.annotate_remediation(&name, contract::TIMED_OUT_ANNOTATION, &stamp);
            }
        }
    }
}
