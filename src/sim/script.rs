//! A scripted Redfish service for the [lab](super::lab), on its clock: the systems it lists, a small
//! power model that follows the resets it carries out, and a script that takes precedence — the
//! answers to the fence's power readings and to its resets, in order. A unit test says exactly what
//! the BMC answers, and reads back every request it received and when.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, PoisonError},
    time::Duration as StdDuration,
};

use jiff::Timestamp;

use super::{
    exec::{Micros, micros},
    lab::LabClock,
};
use crate::bmc::{Bmc, BmcError, PowerState, ResetType, SystemReading};

/// The answer to one power reading of the fence (`Target::read`).
#[derive(Clone, Debug)]
pub enum Read {
    /// What the power model says.
    Truth,
    /// This power state, whatever the model says.
    Says(PowerState),
    Fails(BmcError),
}

/// The answer to one reset.
#[derive(Clone, Debug)]
pub enum ResetAnswer {
    /// Carried out (after the script's `reset_delay`), answered with this status.
    Done(u16),
    /// Answered with this status, and nothing happens.
    Ignored(u16),
    Fails(BmcError),
}

#[derive(Clone, Debug)]
pub struct ScriptedSystem {
    pub id: String,
    pub uuid: String,
    pub on: bool,
}

#[derive(Clone, Debug)]
pub struct Script {
    pub origin: String,
    pub systems: Vec<ScriptedSystem>,
    /// Answers to the fence's power readings, in order; once used up, the model answers.
    pub reads: VecDeque<Read>,
    /// Answers to resets, in order; once used up, every reset is `Done(204)`.
    pub resets: VecDeque<ResetAnswer>,
    /// How long a reset that is carried out takes to change the power.
    pub reset_delay: StdDuration,
    /// How long every request takes.
    pub latency: StdDuration,
    /// What listing the Systems collection fails with, if it does.
    pub list_fails: Option<BmcError>,
}

impl Script {
    /// One system, Id `1`, reporting `uuid` and powered `on`; honest answers, resets carried out at
    /// once, no latency.
    pub fn machine(uuid: &str, on: bool) -> Self {
        Self {
            origin: "https://bmc.lab:443".into(),
            systems: vec![ScriptedSystem { id: "1".into(), uuid: uuid.into(), on }],
            reads: VecDeque::new(),
            resets: VecDeque::new(),
            reset_delay: StdDuration::ZERO,
            latency: StdDuration::ZERO,
            list_fails: None,
        }
    }

    /// Another system of the same BMC.
    pub fn system(mut self, id: &str, uuid: &str, on: bool) -> Self {
        self.systems.push(ScriptedSystem { id: id.into(), uuid: uuid.into(), on });
        self
    }

    pub fn reads(mut self, reads: impl IntoIterator<Item = Read>) -> Self {
        self.reads.extend(reads);
        self
    }

    pub fn resets(mut self, resets: impl IntoIterator<Item = ResetAnswer>) -> Self {
        self.resets.extend(resets);
        self
    }

    pub fn reset_delay(mut self, delay: StdDuration) -> Self {
        self.reset_delay = delay;
        self
    }

    pub fn latency(mut self, latency: StdDuration) -> Self {
        self.latency = latency;
        self
    }

    /// Listing the Systems collection fails with `error` (a timeout, an error status).
    pub fn list_fails(mut self, error: BmcError) -> Self {
        self.list_fails = Some(error);
        self
    }
}

/// A request the scripted BMC received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// The Systems collection.
    List,
    /// A system read for discovery.
    Discover(String),
    /// A power reading of the fence.
    Read(String),
    Reset(String, ResetType),
}

struct State {
    script: Script,
    /// Power changes under way: when, which system, on or off.
    pending: Vec<(Micros, usize, bool)>,
    requests: Vec<(Timestamp, Request)>,
}

impl State {
    fn system(&self, path_or_id: &str, method: &'static str) -> Result<usize, BmcError> {
        let id = path_or_id.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        self.script.systems.iter().position(|s| s.id == id).ok_or_else(|| BmcError::Status {
            method,
            path: path_or_id.into(),
            status: 404,
            detail: String::new(),
        })
    }

    fn reading(&self, index: usize, power: Read) -> Result<SystemReading, BmcError> {
        let system = &self.script.systems[index];
        let power_state = match power {
            Read::Truth if system.on => PowerState::On,
            Read::Truth => PowerState::Off,
            Read::Says(state) => state,
            Read::Fails(error) => return Err(error),
        };
        Ok(SystemReading {
            id: system.id.clone(),
            path: format!("/redfish/v1/Systems/{}", system.id),
            uuid: system.uuid.clone(),
            power_state,
            reset_target: None,
            aliases: Vec::new(),
        })
    }
}

#[derive(Clone)]
pub struct Scripted {
    state: Arc<Mutex<State>>,
    clock: LabClock,
}

impl Scripted {
    pub fn new(script: Script, clock: LabClock) -> Self {
        Self { state: Arc::new(Mutex::new(State { script, pending: Vec::new(), requests: Vec::new() })), clock }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Every request received, with when it arrived.
    pub fn requests(&self) -> Vec<(Timestamp, Request)> {
        self.with(|s| s.requests.clone())
    }

    /// The resets received, in order.
    pub fn resets(&self) -> Vec<ResetType> {
        self.with(|s| {
            s.requests
                .iter()
                .filter_map(|(_, r)| match r {
                    Request::Reset(_, reset) => Some(*reset),
                    _ => None,
                })
                .collect()
        })
    }

    /// Someone powers system `id` off (the glitch ends).
    pub fn reset_to_off(&self, id: &str) {
        self.with(|s| {
            s.script.systems.iter_mut().filter(|system| system.id == id).for_each(|system| system.on = false)
        });
    }

    /// From now on listing the Systems collection fails with `error` (`None`: it answers again).
    pub fn fail_listing(&self, error: Option<BmcError>) {
        self.with(|s| s.script.list_fails = error);
    }

    /// Someone powers system `id` on (a power button, another tool).
    pub fn switch_on(&self, id: &str) {
        self.with(|s| s.script.systems.iter_mut().filter(|system| system.id == id).for_each(|system| system.on = true));
    }

    /// Whether the model has system `id` powered on now.
    pub fn is_on(&self, id: &str) -> bool {
        let now = self.clock.micros();
        self.with(|s| {
            apply_due(s, now);
            s.script.systems.iter().any(|system| system.id == id && system.on)
        })
    }

    /// One request: logged on arrival, handled half-way through the latency.
    async fn request<T>(&self, request: Request, handle: impl FnOnce(&mut State, Micros) -> T) -> T {
        let latency = self.with(|s| s.script.latency);
        let arrived = self.clock.now();
        self.with(|s| s.requests.push((arrived, request)));
        self.clock.sleep(latency / 2).await;
        let now = self.clock.micros();
        let answer = self.with(|s| {
            apply_due(s, now);
            handle(s, now)
        });
        self.clock.sleep(latency - latency / 2).await;
        answer
    }
}

fn apply_due(state: &mut State, now: Micros) {
    let systems = &mut state.script.systems;
    state.pending.retain(|&(at, index, on)| {
        let due = at <= now;
        if due {
            systems[index].on = on;
        }
        !due
    });
}

impl Bmc for Scripted {
    fn origin(&self) -> String {
        self.with(|s| s.script.origin.clone())
    }

    async fn systems(&self) -> Result<Vec<String>, BmcError> {
        self.request(Request::List, |s, _| match &s.script.list_fails {
            Some(error) => Err(error.clone()),
            None => Ok(s.script.systems.iter().map(|system| format!("/redfish/v1/Systems/{}", system.id)).collect()),
        })
        .await
    }

    /// Discovery reads what the model says; the script is for the fence's readings.
    async fn discover_system(&self, path_or_id: &str) -> Result<SystemReading, BmcError> {
        self.request(Request::Discover(path_or_id.into()), |s, _| s.reading(s.system(path_or_id, "GET")?, Read::Truth))
            .await
    }

    async fn system(&self, path_or_id: &str) -> Result<SystemReading, BmcError> {
        self.request(Request::Read(path_or_id.into()), |s, _| {
            let index = s.system(path_or_id, "GET")?;
            let answer = s.script.reads.pop_front().unwrap_or(Read::Truth);
            s.reading(index, answer)
        })
        .await
    }

    async fn reset(&self, system: &SystemReading, reset: ResetType) -> Result<u16, BmcError> {
        self.request(Request::Reset(system.path.clone(), reset), |s, now| {
            let index = s.system(&system.path, "POST")?;
            match s.script.resets.pop_front().unwrap_or(ResetAnswer::Done(204)) {
                ResetAnswer::Done(status) => {
                    let at = now + micros(s.script.reset_delay);
                    s.pending.push((at, index, reset == ResetType::On));
                    apply_due(s, now);
                    Ok(status)
                }
                ResetAnswer::Ignored(status) => Ok(status),
                ResetAnswer::Fails(error) => Err(error),
            }
        })
        .await
    }

    /// A scripted BMC always has power.
    async fn heard(&self) -> crate::bmc::Heard {
        crate::bmc::Heard::Answered
    }
}
