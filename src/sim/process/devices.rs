//! The simulated devices as the fence's ports see them: a PDU level's outlets and a BMC, Redfish or
//! IPMI, each answering from the world's truth with its latency, its faults and its lies.

use super::*;

/// A binding's PDU level in the simulated rack: each outlet's key and floor, and the world's outlet
/// it names (none: the rack has no such outlet). Requests have the seed's latency, timeouts and
/// crash points; the outlet clients' own rules are tested against snmpsim and the Redfish PDU.
#[derive(Clone)]
pub struct SimLevel {
    pub(super) shared: Arc<Shared>,
    pub(super) pid: u32,
    pub(super) outlets: Vec<(String, f64, Option<usize>)>,
}

impl SimLevel {
    fn alive(&self) -> bool {
        self.shared.with(|t| t.processes.get(&self.pid).is_some_and(|p| p.alive))
    }

    fn die(&self) {
        self.shared.count(|s| s.crashes += 1);
        self.shared.with(|t| {
            if let Some(p) = t.processes.get_mut(&self.pid) {
                p.alive = false;
            }
        });
    }

    fn caller(&self) -> Caller {
        let term = self.shared.with(|t| t.processes.get(&self.pid).map_or(0, |p| p.term));
        Caller { pid: self.pid, term, task: self.shared.sched.current() }
    }

    /// One request to outlet `index`: a scheduling point, the PDU's latency and timeouts, `act` half-way
    /// through (when the PDU looks or switches), crash points before and after.
    async fn request<T>(
        &self,
        index: usize,
        act: impl FnOnce(&mut Truth, usize, Caller) -> T,
    ) -> Result<T, crate::pdu::PduError> {
        use crate::pdu::PduError;
        let shared = &self.shared;
        shared.sched.point().await;
        let died = || PduError::Unreachable("this process has died".into());
        if !self.alive() {
            return Err(died());
        }
        shared.count(|s| s.calls += 1);
        if shared.chance(shared.faults.crash_before) {
            self.die();
            return Err(died());
        }
        let Some(outlet) = self.outlets.get(index).and_then(|o| o.2) else {
            return Err(PduError::NoSuchOutlet(index.to_string()));
        };
        let latency = shared.between((20 * crate::sim::exec::MS, 400 * crate::sim::exec::MS));
        let times_out = shared.chance(shared.with(|t| t.pdu_timeout_rate));
        let by = self.caller();
        shared.sched.sleep(latency / 2).await;
        // A request that times out may still have reached the PDU.
        let reached = !times_out || shared.chance(0.5);
        let caller = by.clone();
        let done = reached.then(|| shared.with(|t| act(t, outlet, caller)));
        shared.sched.sleep(latency - latency / 2).await;
        if shared.chance(shared.faults.crash_after) {
            self.die();
            return Err(died());
        }
        match done {
            Some(done) if !times_out => Ok(done),
            _ => {
                shared.count(|s| s.faults += 1);
                shared.with(|t| t.log.push(Record::PduTimeout { at: t.now, by: by.clone(), outlet }));
                Err(PduError::Timeout { elapsed: StdDuration::from_micros(latency as u64), tries: 1 })
            }
        }
    }
}

impl crate::driver::ports::Level for SimLevel {
    fn outlets(&self) -> Vec<(String, f64)> {
        self.outlets.iter().map(|(key, floor, _)| (key.clone(), *floor)).collect()
    }

    async fn read(&self, index: usize) -> Result<crate::pdu::OutletReading, crate::pdu::PduError> {
        let requested = self.shared.sched.now();
        let floor = self.outlets.get(index).map_or(crate::api::DEFAULT_FLOOR_WATTS, |o| o.1);
        let looked = self
            .request(index, |t, outlet, by| {
                let o = t.outlets[outlet].clone();
                // The machine the binding's node runs on (the oracle's question); a shared outlet
                // draws while any machine on it runs.
                let truly_on = t.machines[o.feeds].on;
                let drawing = o.machines().any(|m| t.machines[m].on);
                // Only an outlet that feeds a machine (on, or welded) shows its draw.
                let feeding = drawing && (o.on || o.welded);
                let (watts, metered) = match o.silent_off {
                    // L4: a meter silent once the outlet is off (a sensor with no reading, or none).
                    Some(sensor) if !o.on => (None, sensor),
                    _ => (o.metered.then_some(if feeding { crate::sim::world::MACHINE_WATTS } else { 0.0 }), o.metered),
                };
                let state = if o.on { crate::pdu::OutletState::On } else { crate::pdu::OutletState::Off };
                let reading = crate::pdu::OutletReading { state, pending: false, watts, metered };
                (reading, outlet, by, t.now, truly_on)
            })
            .await?;
        let (reading, outlet, by, sampled, truly_on) = looked;
        let proves_off = crate::levels::proves_off(&reading, floor).is_ok();
        self.shared.with(|t| {
            let answered = t.now;
            t.log.push(Record::OutletAnswer { by, outlet, requested, sampled, answered, proves_off, truly_on });
        });
        Ok(reading)
    }

    async fn switch_off(&self, index: usize) -> Result<(), crate::pdu::PduError> {
        // Test builds only: a client that switches the outlet On instead (`Sabotage::OutletSwitchedOn`).
        #[cfg(test)]
        let on = self.shared.sabotage == crate::sabotage::Sabotage::OutletSwitchedOn;
        #[cfg(not(test))]
        let on = false;
        self.request(index, move |t, outlet, by| t.switch_outlet(outlet, on, by)).await
    }
}

/// A Redfish service as coroner's client sees it: what comes back, not the HTTP underneath (the
/// client's own rules are tested against real peers).
#[derive(Clone)]
pub struct SimDevice {
    pub(super) shared: Arc<Shared>,
    pub(super) pid: u32,
    pub(super) bmc: usize,
    /// The credentials version this client was built with.
    pub(super) credentials: u32,
}

/// A binding's power target in the simulator: a Redfish service (through the one Redfish adapter,
/// as the real client is), or an IPMI BMC's chassis as [`crate::ipmi::IpmiClient`] presents it. The
/// world never moves a machine behind a BMC, so the in-session GUID check the real client makes
/// before a Chassis Control always passes here.
#[derive(Clone)]
pub enum SimTarget {
    Redfish(SimDevice),
    Ipmi(SimDevice),
}

impl Target for SimTarget {
    fn origin(&self) -> String {
        match self {
            Self::Redfish(device) | Self::Ipmi(device) => Bmc::origin(device),
        }
    }

    async fn find(
        &self,
        pinned: Option<&str>,
        node_uuid: &str,
    ) -> Result<Result<SystemReading, crate::identity::IdentityRefusal>, crate::words::discovery::Interrupted> {
        match self {
            Self::Redfish(device) => Target::find(device, pinned, node_uuid).await,
            Self::Ipmi(device) => {
                let layout = pinned.and_then(crate::ipmi::layout_of_path);
                Ok(Ok(device.chassis(layout, Some(node_uuid.to_owned())).await?))
            }
        }
    }

    async fn read(&self, path: &str) -> Result<SystemReading, BmcError> {
        match self {
            Self::Redfish(device) => Target::read(device, path).await,
            Self::Ipmi(device) => match crate::ipmi::layout_of_path(path) {
                Some(layout) => device.chassis(Some(layout), None).await,
                None => Err(BmcError::Protocol { path: path.to_owned(), problem: "not an IPMI chassis path".into() }),
            },
        }
    }

    async fn act(&self, system: &SystemReading, reset: ResetType) -> Result<u16, BmcError> {
        match self {
            Self::Redfish(device) => Target::act(device, system, reset).await,
            // IPMI's normal completion code.
            Self::Ipmi(device) => device.reset(system, reset).await.map(|_| 0),
        }
    }

    async fn heard(&self) -> crate::bmc::Heard {
        match self {
            Self::Redfish(device) | Self::Ipmi(device) => Bmc::heard(device).await,
        }
    }
}

impl SimDevice {
    fn process_alive(&self) -> bool {
        self.shared.with(|t| t.processes.get(&self.pid).is_some_and(|p| p.alive))
    }

    fn die(&self) {
        self.shared.count(|s| s.crashes += 1);
        self.shared.with(|t| {
            if let Some(p) = t.processes.get_mut(&self.pid) {
                p.alive = false;
            }
        });
    }

    /// One request: a scheduling point, then the BMC's latency, faults and answer; `sample` runs
    /// half-way through, when the BMC looks at the machine. An answer that reaches coroner is logged
    /// in the world's record (a reading's, with what the BMC looked at and when).
    async fn request<T>(
        &self,
        // A reset (`Some(on)`): one that times out may still have reached the BMC.
        mutation: Option<bool>,
        path: &str,
        read_from: Option<Micros>,
        sample: impl FnOnce(&mut Truth, Micros) -> (Result<T, BmcError>, Look),
    ) -> Result<T, BmcError> {
        let shared = &self.shared;
        shared.sched.point().await;
        if !self.process_alive() {
            return Err(BmcError::Unreachable("this process has died".into()));
        }
        shared.count(|s| s.calls += 1);
        if shared.chance(shared.faults.crash_before) {
            self.die();
            return Err(BmcError::Unreachable("this process has died".into()));
        }
        let by = self.caller();
        let bmc = shared.with(|t| t.bmcs[self.bmc].clone());
        let start = shared.sched.now();
        let timeout = shared.bmc_request_timeout;
        if !bmc.alive {
            shared.sched.sleep(shared.between((1_000, 5_000))).await;
            return Err(BmcError::Unconnected("connection refused".into()));
        }
        let latency = shared.between(bmc.latency);
        let times_out = latency >= timeout || shared.chance(bmc.timeout_rate);
        if times_out {
            shared.count(|s| s.faults += 1);
            let (caller, which) = (by.clone(), self.bmc);
            shared.with(|t| t.log.push(Record::BmcTimeout { at: t.now, by: caller, bmc: which }));
        }
        let refused = if shared.chance(bmc.error_rate) {
            shared.count(|s| s.faults += 1);
            Some(BmcError::Status { method: "GET", path: "/redfish/v1".into(), status: 503, detail: String::new() })
        } else if self.credentials != bmc.credentials {
            let caller = by.clone();
            shared.with(|t| t.log.push(Record::CredentialsRejected { at: t.now, by: caller }));
            Some(BmcError::Unauthorized(401))
        } else {
            None
        };
        let (result, look, sampled) = match refused {
            Some(error) => {
                shared.sched.sleep(latency.min(timeout)).await;
                if let Some(on) = mutation {
                    // Sent, and refused: coroner records the failure, and it counts as sent.
                    shared.with(|t| t.log.push(Record::ResetRefused { at: start, by: by.clone(), on }));
                }
                (Some(Err(error)), Look::error(), start)
            }
            None => {
                shared.sched.sleep(latency.min(timeout) / 2).await;
                // A request that times out may still have reached the BMC (a reset then takes effect).
                let reached = !times_out || (mutation.is_some() && shared.chance(0.5));
                if let (Some(on), false) = (mutation, reached) {
                    // Sent, and lost on the way: coroner records it as failed, and it counts as sent.
                    shared.with(|t| t.log.push(Record::ResetLost { at: start, by: by.clone(), on }));
                }
                let sampled = shared.sched.now();
                let (result, look) = if reached {
                    let (result, look) = shared.with(|t| sample(t, start));
                    (Some(result), look)
                } else {
                    (None, Look::error())
                };
                shared.sched.sleep(latency.min(timeout) - latency.min(timeout) / 2).await;
                (result, look, sampled)
            }
        };
        if shared.chance(shared.faults.crash_after) {
            self.die();
            return Err(BmcError::Unreachable("this process has died".into()));
        }
        let answer = match result {
            Some(result) if !times_out => result,
            _ => return Err(BmcError::Unreachable("no answer before the request timeout".into())),
        };
        if mutation.is_none() {
            let (bmc, path) = (self.bmc, path.to_owned());
            shared.with(|t| {
                let answered = t.now;
                let Look { machine, truly_on, said } = look;
                t.log.push(Record::Answer {
                    by,
                    bmc,
                    path,
                    machine,
                    requested: start,
                    read_from: read_from.unwrap_or(start),
                    sampled,
                    answered,
                    truly_on,
                    said,
                });
            });
        }
        answer
    }

    /// Who asks: this process in its current term, for the task it runs.
    fn caller(&self) -> Caller {
        let term = self.shared.with(|t| t.processes.get(&self.pid).map_or(0, |p| p.term));
        Caller { pid: self.pid, term, task: self.shared.sched.current() }
    }

    /// The system at `index` of BMC `bmc` as it answers now, and what it looked at.
    fn reading(truth: &Truth, (bmc, index): (usize, usize)) -> (SystemReading, Look) {
        let model = &truth.bmcs[bmc];
        let system = &model.systems[index];
        let machine = &truth.machines[system.machine];
        let power = match (machine.on, machine.pending, model.answers) {
            (_, _, PowerAnswers::LiesOff) => PowerState::Off,
            (true, Some((_, false)), PowerAnswers::Transitional) => PowerState::PoweringOff,
            (true, _, _) => PowerState::On,
            (false, _, _) => PowerState::Off,
        };
        let reading = SystemReading {
            id: system.id.clone(),
            path: format!("/redfish/v1/Systems/{}", system.id),
            uuid: system.uuid.clone(),
            power_state: power,
            reset_target: None,
            aliases: Vec::new(),
        };
        let look = Look {
            machine: Some(system.machine),
            truly_on: machine.on,
            said: Answered::System { uuid: system.uuid.clone(), reported_off: reading.power_state == PowerState::Off },
        };
        (reading, look)
    }

    fn find_system(truth: &Truth, bmc: usize, path_or_id: &str) -> Option<usize> {
        // An IPMI BMC has one chassis: its first system, at the path of any layout.
        if truth.bmcs[bmc].ipmi.is_some() {
            return crate::ipmi::layout_of_path(path_or_id).filter(|_| !truth.bmcs[bmc].systems.is_empty()).map(|_| 0);
        }
        let id = path_or_id.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        truth.bmcs[bmc].systems.iter().position(|s| s.id == id)
    }

    /// One reading of an IPMI BMC's chassis, retried on transient errors: its GUID (the bytes the
    /// firmware holds for the machine's UUID) spelled in `layout`, or for discovery in the layout
    /// the production client chooses ([`crate::ipmi::discovery_layout`]).
    async fn chassis(&self, layout: Option<GuidLayout>, node_uuid: Option<String>) -> Result<SystemReading, BmcError> {
        let mut attempt = 0;
        let read_from = self.shared.sched.now();
        loop {
            match self.chassis_once(layout, node_uuid.clone(), read_from).await {
                Err(e) if e.is_transient() && attempt < self.shared.bmc_read_retries => {
                    self.shared.sched.sleep(250_000 * 2i64.pow(attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn chassis_once(
        &self,
        layout: Option<GuidLayout>,
        node_uuid: Option<String>,
        read_from: Micros,
    ) -> Result<SystemReading, BmcError> {
        let bmc = self.bmc;
        let asked = layout.map_or_else(|| "ipmi:chassis".to_owned(), |l| format!("{}{l}", crate::ipmi::PATH_PREFIX));
        self.request(None, &asked.clone(), Some(read_from), move |t, _| {
            let held = t.bmcs[bmc].ipmi.unwrap_or(GuidLayout::Rfc4122);
            let uuid = t.bmcs[bmc].systems.first().and_then(|s| uuid::Uuid::parse_str(&s.uuid).ok());
            let Some(uuid) = uuid else {
                let problem = "no chassis behind this BMC".to_owned();
                return (Err(BmcError::Protocol { path: asked, problem }), Look::error());
            };
            let (reading, mut look) = Self::reading(t, (bmc, 0));
            let guid = Guid::of(uuid, held);
            let layout = layout.unwrap_or_else(|| {
                crate::ipmi::discovery_layout(&guid, None, node_uuid.as_deref().unwrap_or_default())
            });
            let reading = crate::ipmi::chassis_system(guid, reading.power_state, layout);
            if let Answered::System { uuid, .. } = &mut look.said {
                *uuid = reading.uuid.clone();
            }
            (Ok(reading), look)
        })
        .await
    }

    async fn system_once(&self, path_or_id: &str, read_from: Micros) -> Result<SystemReading, BmcError> {
        let bmc = self.bmc;
        let path = path_or_id.to_owned();
        let unknown = self.shared.with(|t| t.bmcs[bmc].answers == PowerAnswers::SometimesUnknown);
        let garbled = unknown && self.shared.chance(0.2);
        self.request(None, path_or_id, Some(read_from), move |t, _| {
            let Some(index) = Self::find_system(t, bmc, &path) else {
                let missing =
                    BmcError::Status { method: "GET", path: path.clone(), status: 404, detail: String::new() };
                return (Err(missing), Look::error());
            };
            let (mut reading, mut look) = Self::reading(t, (bmc, index));
            if garbled {
                reading.power_state = PowerState::Other("Unknown".into());
                if let Answered::System { reported_off, .. } = &mut look.said {
                    *reported_off = false;
                }
            }
            (Ok(reading), look)
        })
        .await
    }
}

/// What a BMC looked at to answer a request.
pub(super) struct Look {
    machine: Option<usize>,
    truly_on: bool,
    said: Answered,
}

impl Look {
    fn error() -> Self {
        Self { machine: None, truly_on: false, said: Answered::Error }
    }
}

impl Bmc for SimDevice {
    fn origin(&self) -> String {
        self.shared.with(|t| t.bmcs[self.bmc].origin.clone())
    }

    async fn systems(&self) -> Result<Vec<String>, BmcError> {
        let bmc = self.bmc;
        self.request(None, "/redfish/v1/Systems", None, move |t, _| {
            let members = t.bmcs[bmc].systems.iter().map(|s| format!("/redfish/v1/Systems/{}", s.id)).collect();
            (Ok(members), Look { machine: None, truly_on: false, said: Answered::Members })
        })
        .await
    }

    /// The simulated BMCs answer where they are asked: discovery reads like the fence does.
    async fn discover_system(&self, path_or_id: &str) -> Result<SystemReading, BmcError> {
        self.system(path_or_id).await
    }

    /// Reads are retried on transient errors, as the Redfish client does.
    async fn system(&self, path_or_id: &str) -> Result<SystemReading, BmcError> {
        let mut attempt = 0;
        let read_from = self.shared.sched.now();
        loop {
            match self.system_once(path_or_id, read_from).await {
                Err(e) if e.is_transient() && attempt < self.shared.bmc_read_retries => {
                    self.shared.sched.sleep(250_000 * 2i64.pow(attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn reset(&self, system: &SystemReading, reset: ResetType) -> Result<u16, BmcError> {
        let bmc = self.bmc;
        let path = system.path.clone();
        let delay = self.shared.with(|t| t.bmcs[bmc].reset_delay);
        let delay = self.shared.between(delay);
        let by = self.caller();
        // Test builds only: a client that resets the BMC's first system, whatever it is asked
        // (`Sabotage::ResetToFirstSystem`).
        #[cfg(test)]
        let first = self.shared.sabotage == crate::sabotage::Sabotage::ResetToFirstSystem;
        #[cfg(not(test))]
        let first = false;
        self.request(Some(reset == ResetType::On), &system.path.clone(), None, move |t, _| {
            let found = Self::find_system(t, bmc, &path);
            let found = if first { found.map(|_| 0) } else { found };
            let Some(index) = found else {
                let missing =
                    BmcError::Status { method: "POST", path: path.clone(), status: 404, detail: String::new() };
                return (Err(missing), Look::error());
            };
            let machine = t.bmcs[bmc].systems[index].machine;
            let on = reset == ResetType::On;
            let at = t.now;
            let remediation = t.remediations.get(&by.task);
            let node = remediation.and_then(|r| contract::node_name(&r.metadata)).unwrap_or_default().to_owned();
            let stored = remediation.and_then(|r| r.status.clone()).unwrap_or_default();
            // The fence's intent, or the guard's after the release.
            let fence_intent = stored.progress.as_ref().and_then(|p| p.intent.as_ref()).filter(|i| i.result.is_none());
            let guard_intent = stored.guard.as_ref().and_then(|g| g.intent.as_ref()).filter(|i| i.result.is_none());
            // After the release the fence sends only On: a ForceOff then is the guard's.
            let released = stored.evidence.as_ref().is_some_and(|e| e.release.is_some());
            let guarding = !on && released;
            let intent = if guarding { guard_intent } else { fence_intent }
                .map(|i| (i.instance.clone(), i.attempt, i.decided_at.0.to_string()));
            let proven_path = stored.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.system_path.clone());
            t.log.push(Record::Reset {
                at,
                by: by.clone(),
                node,
                machine,
                on,
                intent,
                proven_path,
                path: path.clone(),
                guard: guarding,
            });
            if t.bmcs[bmc].answers != PowerAnswers::LiesOff {
                t.schedule_power(machine, on, at + delay);
            }
            (Ok(if on { 202 } else { 204 }), Look::error())
        })
        .await
    }

    /// Whether the BMC has power (a dead one answers nothing), after a scheduling point and a
    /// moment's latency; a dead process asks nothing.
    async fn heard(&self) -> crate::bmc::Heard {
        use crate::bmc::Heard;
        let shared = &self.shared;
        shared.sched.point().await;
        if !self.process_alive() {
            return Heard::NotAsked("this process has died".into());
        }
        shared.count(|s| s.calls += 1);
        let alive = shared.with(|t| t.bmcs[self.bmc].alive);
        shared.sched.sleep(shared.between((1_000, 5_000))).await;
        if alive { Heard::Answered } else { Heard::Silent }
    }
}
