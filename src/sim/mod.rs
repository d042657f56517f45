//! A deterministic simulation of the fence loop: from one seed, a world (API objects with
//! resourceVersions, machines, BMCs, kubelets, NodeHealthCheck, leader election, clocks) and a
//! schedule of faults; the real loop ([`crate::driver`]) runs against it through its traits, in
//! processes that crash at every call and restart from what is persisted; the invariants are
//! checked after every step against the world's truth. A seed reproduces a run exactly.
//!
//! Design note: docs/simulation.md (why an own executor rather than turmoil, what is modelled, what
//! is not).

pub mod exec;
pub mod invariants;
#[cfg(test)]
mod known;
pub mod lab;
pub mod process;
pub mod reach;
#[cfg(test)]
mod sabotage;
pub mod scenario;
pub mod script;
pub mod world;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    sync::{Arc, Mutex, PoisonError},
};

use kube::ResourceExt;

use exec::{Executor, MS, Micros, SECOND, micros};
use invariants::Checker;
use process::{Process, Shared, Stats};
use scenario::{BmcKind, Death, Event, Scenario};
use world::{BmcModel, NhcPolicy, ProcState, Reach, SimSystem, Truth};

use crate::{
    api::{CoronerRemediation, Phase},
    contract,
    controller::retry,
    driver::{self, LoopSettings, Next, World, ports},
    fence,
    gates::StormLimits,
    taints::CoronerTaint,
};

const NAMESPACE: &str = "coroner";
/// The BMC request timeout of the simulated processes.
const REQUEST_TIMEOUT: Micros = 2 * SECOND;
/// How often the simulated processes' guard reads a released machine.
const GUARD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
const TARGET: &str = "worker-1";
const OTHER: &str = "worker-2";
const TARGET_UUID: &str = "4c4c4544-0031-3510-8052-b4c04f4e3132";
const TARGET_UUID_SWAPPED: &str = "44454c4c-3100-1035-8052-b4c04f4e3132";
const OTHER_UUID: &str = "4c4c4544-0032-3510-8052-b4c04f4e3132";
const SPARE_UUID: &str = "4c4c4544-0039-3510-8052-b4c04f4e3132";

/// What one schedule explored, and how it ended.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub stats: Stats,
    /// The first invariant broken, with the schedule that broke it.
    pub failure: Option<String>,
    /// Which invariant that was.
    pub broken: Option<invariants::Invariant>,
    /// The shapes of [`reach::Shape`] asked for that the run reached.
    pub reached: Vec<reach::Shape>,
}

/// A world event at a time.
#[derive(Clone, Debug)]
enum Happening {
    /// One second of the cluster's life (kubelets, kube-controller-manager, NHC).
    Tick,
    /// The leader renews its Lease, or a standby takes an expired one.
    LeaderRenew,
    Scenario(Event),
    GlitchEnd,
    StartProcess,
    StopLeading(u32),
    TrackerSynced(u32),
    DeliverLease {
        pid: u32,
        node: String,
    },
}

/// kube-runtime's scheduling of one process's remediation controller.
#[derive(Debug, Default)]
struct Controller {
    due: BTreeMap<String, Micros>,
    running: BTreeSet<String>,
    rerun: BTreeSet<String>,
    /// Consecutive failed reconciles, for coroner's error policy.
    failures: BTreeMap<String, u32>,
}

impl Controller {
    fn trigger(&mut self, name: &str, at: Micros) {
        if self.running.contains(name) {
            self.rerun.insert(name.to_owned());
        } else {
            let due = self.due.entry(name.to_owned()).or_insert(at);
            *due = (*due).min(at);
        }
    }
}

/// Each reconcile's end: its process, task, and result; a failure with its class and how soon the
/// object asks to be retried at the latest ([`crate::fence::retry_within`]).
type Completions = Arc<Mutex<Vec<(u32, String, Result<Next, Failed>)>>>;
type Failed = (String, retry::Class, Option<std::time::Duration>);

struct Run {
    scenario: Scenario,
    shared: Arc<Shared>,
    exec: Executor,
    rng: fastrand::Rng,
    events: BTreeMap<(Micros, u64), Happening>,
    seq: u64,
    processes: BTreeMap<u32, Arc<Process>>,
    controllers: BTreeMap<u32, Controller>,
    /// The phase each remediation's watch events last showed, to tell when the queue moves
    /// (`gates::moves_the_queue`, as production's remediation watch).
    phases: BTreeMap<String, Phase>,
    /// The node each remediation fences, kept past its deletion: its events while it is deleted wake
    /// that node's sweep, as production's remediation watch does.
    nodes: BTreeMap<String, String>,
    next_pid: u32,
    checker: Checker,
    completions: Completions,
    settings: LoopSettings,
    nhc: NhcPolicy,
    /// A short story of the run, printed with a failure.
    story: Vec<String>,
    /// Records of the truth's log already told.
    told: usize,
    /// Events waiting for the fence to enter a phase.
    armed: Vec<(Phase, Micros, Event)>,
}

/// Runs one schedule from its seed.
pub fn run(seed: u64) -> Outcome {
    reaching(seed, &[])
}

/// Runs one schedule from its seed, and tells which of `shapes` it reached.
pub fn reaching(seed: u64, shapes: &[reach::Shape]) -> Outcome {
    let mut run = Run::new(Scenario::generate(seed));
    let mut outcome = outcome(seed, &mut run);
    outcome.reached =
        run.shared.with(|t| shapes.iter().copied().filter(|shape| shape.reached(t, &run.scenario)).collect());
    outcome
}

/// Test builds only: one schedule from its seed, on a product sabotaged one way ([`crate::sabotage`]).
#[cfg(test)]
pub fn run_sabotaged(seed: u64, sabotage: crate::sabotage::Sabotage) -> Outcome {
    let mut run = Run::new(Scenario::generate(seed));
    // No process has started yet: the world's settings are still this run's alone.
    match Arc::get_mut(&mut run.shared) {
        Some(shared) => shared.sabotage = sabotage,
        None => panic!("the world's settings are shared before any process started"),
    }
    outcome(seed, &mut run)
}

fn outcome(seed: u64, run: &mut Run) -> Outcome {
    let violation = run.go().err();
    let broken = violation.as_ref().map(|v| v.invariant);
    let failure = violation.map(|why| run.report(&why.to_string()));
    let mut stats = *run.shared.stats.lock().unwrap_or_else(PoisonError::into_inner);
    stats.level_releases = run.shared.with(|t| {
        let kind = |r: &CoronerRemediation| r.status.as_ref()?.evidence.as_ref()?.release.as_ref().map(|r| r.kind);
        t.remediations.values().filter(|r| kind(r) == Some(crate::api::ReleaseKind::LevelProof)).count() as u64
    });
    stats.acknowledged_releases = run.shared.with(|t| {
        let acknowledged = |r: &CoronerRemediation| {
            let release = r.status.as_ref()?.evidence.as_ref()?.release.as_ref()?;
            Some(!release.attestation.as_ref()?.acknowledged.is_empty())
        };
        t.remediations.values().filter(|r| acknowledged(r) == Some(true)).count() as u64
    });
    stats.kept_admissions = run.shared.with(|t| {
        let kept = |r: &CoronerRemediation| {
            let binding = r.status.as_ref()?.evidence.as_ref()?.node.as_ref()?.binding.as_ref()?;
            Some(binding.verified_by_earlier_object.is_some())
        };
        t.remediations.values().filter(|r| kept(r) == Some(true)).count() as u64
    });
    let looks: Vec<(Option<crate::api::LookFound>, bool)> = run.shared.with(|t| {
        t.remediations
            .values()
            .filter_map(|r| {
                let evidence = r.status.as_ref()?.evidence.as_ref()?;
                let look = evidence.attestation_look.as_ref().filter(|l| l.found.is_some())?;
                let by_proof = evidence.release.as_ref().is_some_and(|r| r.attestation.is_none());
                Some((look.found, by_proof))
            })
            .collect()
    });
    let shared_offs: Vec<Micros> = run.shared.with(|t| {
        t.log
            .iter()
            .filter_map(|r| match r {
                world::Record::OutletSwitched { at, outlet, on: false, .. } => {
                    t.outlets[*outlet].also_feeds.is_some().then_some(*at)
                }
                _ => None,
            })
            .collect()
    });
    let released_at = run.shared.with(|t| {
        t.log.iter().find_map(|r| match r {
            world::Record::NodeWrite { at, node, after, .. }
                if node == TARGET && after.iter().any(|t| t.key == CoronerTaint::OutOfService.key()) =>
            {
                Some(*at)
            }
            _ => None,
        })
    });
    stats.shared_offs = shared_offs.len() as u64;
    stats.shared_offs_after_release =
        shared_offs.iter().filter(|at| released_at.is_some_and(|released| **at > released)).count() as u64;
    let again = |found: &Option<crate::api::LookFound>| *found == Some(crate::api::LookFound::ProvingAgain);
    stats.looks = looks.len() as u64;
    stats.proven_again = looks.iter().filter(|(found, _)| again(found)).count() as u64;
    stats.released_after_look = looks.iter().filter(|(found, released)| again(found) && *released).count() as u64;
    Outcome { seed, stats, failure, broken, reached: Vec::new() }
}

/// The full report of a seed, failing or not (for reading a schedule).
pub fn story(seed: u64) -> String {
    tell_story(Run::new(Scenario::generate(seed)))
}

/// Test builds only: [`story`] on a sabotaged product.
#[cfg(test)]
pub fn story_sabotaged(seed: u64, sabotage: crate::sabotage::Sabotage) -> String {
    let mut run = Run::new(Scenario::generate(seed));
    match Arc::get_mut(&mut run.shared) {
        Some(shared) => shared.sabotage = sabotage,
        None => panic!("the world's settings are shared before any process started"),
    }
    tell_story(run)
}

fn tell_story(mut run: Run) -> String {
    let end = run.go().err().map_or_else(|| "no invariant broken".into(), |v| v.to_string());
    run.report(&end)
}

impl Run {
    fn new(scenario: Scenario) -> Self {
        let exec = Executor::new();
        let mut truth = Truth::new(NAMESPACE);
        build_world(&mut truth, &scenario);
        let request_timeout = REQUEST_TIMEOUT;
        let shared = Arc::new(Shared {
            sched: exec.sched.clone(),
            truth: Mutex::new(truth),
            rng: Mutex::new(fastrand::Rng::with_seed(scenario.seed ^ 0x5eed)),
            faults: scenario.faults.clone(),
            stats: Mutex::default(),
            bmc_request_timeout: request_timeout,
            bmc_read_retries: 1,
            #[cfg(test)]
            sabotage: crate::sabotage::Sabotage::None,
        });
        let settings = LoopSettings {
            namespace: NAMESPACE.into(),
            limits: StormLimits { max_concurrent: 3, max_per_window: 5, window: std::time::Duration::from_secs(600) },
            request_timeout: exec::duration(request_timeout),
            read_retries: 1,
            guard_interval: GUARD_INTERVAL,
        };
        let nhc = NhcPolicy { timeout: scenario.nhc_timeout };
        let mut run = Self {
            rng: fastrand::Rng::with_seed(scenario.seed),
            scenario,
            shared,
            exec,
            events: BTreeMap::new(),
            seq: 0,
            processes: BTreeMap::new(),
            controllers: BTreeMap::new(),
            phases: BTreeMap::new(),
            nodes: BTreeMap::new(),
            next_pid: 1,
            checker: Checker::default(),
            completions: Completions::default(),
            settings,
            nhc,
            story: Vec::new(),
            told: 0,
            armed: Vec::new(),
        };
        run.at(0, Happening::StartProcess);
        run.at(0, Happening::StartProcess);
        run.at(0, Happening::Tick);
        run.at(0, Happening::LeaderRenew);
        for (when, event) in run.scenario.events.clone() {
            match when {
                scenario::When::At(at) => run.at(at, Happening::Scenario(event)),
                scenario::When::After(phase, delay) => run.armed.push((phase, delay, event)),
            }
        }
        run
    }

    fn now(&self) -> Micros {
        self.exec.sched.now()
    }

    fn at(&mut self, at: Micros, happening: Happening) {
        self.seq += 1;
        self.events.insert((at, self.seq), happening);
    }

    fn tell(&mut self, line: String) {
        let now = self.now();
        self.story.push(format!("t={:.3}s {line}", now as f64 / SECOND as f64));
    }

    fn go(&mut self) -> Result<(), invariants::Violation> {
        loop {
            let now = self.now();
            if now > self.scenario.horizon || self.quiet() {
                break;
            }
            while let Some((&(at, seq), _)) = self.events.first_key_value() {
                if at > now {
                    break;
                }
                // The key was just read: the event is there.
                let Some(happening) = self.events.remove(&(at, seq)) else { break };
                self.happen(happening);
            }
            self.bury_the_dead();
            self.finish_reconciles();
            self.deliver_changes();
            self.spawn_due();
            self.check()?;
            if self.exec.step(&mut self.rng) {
                self.check()?;
                continue;
            }
            let next = [
                self.events.first_key_value().map(|(k, _)| k.0),
                self.exec.next_wake(),
                self.controllers.values().flat_map(|c| c.due.values().copied()).min(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(at) if at > now => self.exec.advance_to(at),
                Some(_) => {}
                None => break,
            }
        }
        self.bury_the_dead();
        let shared = self.shared.clone();
        shared.with(|truth| self.checker.finish(truth, &self.scenario))
    }

    /// Nothing left to happen: every remediation ended (or is gone) and the scenario has played out.
    fn quiet(&self) -> bool {
        let scenario_done = !self.events.values().any(|h| matches!(h, Happening::Scenario(_) | Happening::GlitchEnd));
        // Events armed for a phase the fence never reached never come.
        scenario_done
            && self.exec.is_idle()
            // A guard bound still running is judged before the run ends: a released machine the world
            // switched on must be switched off (or reported) whatever else has settled.
            && !self.checker.pending()
            && self.shared.with(|t| {
                let wall = t.wall(t.now);
                t.attestations.values().all(|a| {
                    let phase = a.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
                    let created = a.metadata.creation_timestamp.as_ref().map_or(wall, |c| c.0);
                    matches!(phase, crate::api::AttestationPhase::Released | crate::api::AttestationPhase::Refused)
                        || wall.duration_since(created).as_secs() > a.spec.valid_for.get().as_secs() as i64
                })
            })
            && self.shared.with(|t| {
                t.nhc_nodes.values().all(|created| *created > 0)
                    && t.remediations.values().all(|r| {
                        let status = r.status.clone().unwrap_or_default();
                        fence::phase_of(&status).is_terminal()
                            && !r
                                .metadata
                                .finalizers
                                .as_ref()
                                .is_some_and(|f| !f.is_empty() && r.metadata.deletion_timestamp.is_some())
                    })
            })
    }

    fn check(&mut self) -> Result<(), invariants::Violation> {
        let shared = self.shared.clone();
        let mut entered = Vec::new();
        let lines = shared.with(|truth| {
            let mut lines = Vec::new();
            let mut phases: BTreeMap<&str, &str> = BTreeMap::new();
            for record in &truth.log[..self.told] {
                if let world::Record::Status { remediation, phase, .. } = record {
                    phases.insert(remediation, phase);
                }
            }
            for record in &truth.log[self.told..] {
                match record {
                    world::Record::Status { remediation, phase, after, .. }
                        if phases.get(remediation.as_str()) != Some(&phase.as_str()) =>
                    {
                        phases.insert(remediation, phase);
                        lines.push(format!("{remediation} → {phase} (Succeeded={after:?})"));
                        // The scenario's adversary strikes at the target's fence, not another node's.
                        let node = truth
                            .remediations
                            .get(remediation)
                            .and_then(|r| contract::node_name(&r.metadata).map(str::to_owned))
                            .or_else(|| self.nodes.get(remediation).cloned());
                        if node.as_deref() == Some(TARGET) {
                            entered.push(phase.clone());
                        }
                    }
                    world::Record::Reset { by, on, path, .. } => {
                        let what = if *on { "On" } else { "ForceOff" };
                        lines.push(format!("p{}/{} sent {what} to {path} for {}", by.pid, by.term, by.task));
                    }
                    world::Record::Event { by, kind, reason, .. } => {
                        lines.push(format!("p{} published {kind} Event {reason} ({})", by.pid, by.task));
                    }
                    world::Record::NodeWrite { by, node, before, after, .. } if before.len() != after.len() => {
                        let keys = |t: &[k8s_openapi::api::core::v1::Taint]| {
                            t.iter().map(|t| t.key.clone()).collect::<Vec<_>>()
                        };
                        lines.push(format!(
                            "p{}/{} ({}) wrote {node}'s taints {:?} → {:?}",
                            by.pid,
                            by.term,
                            by.task,
                            keys(before),
                            keys(after)
                        ));
                    }
                    world::Record::Answer { by, path, machine: Some(m), requested, answered, said, truly_on, .. }
                        if std::env::var_os("SIM_ANSWERS").is_some() =>
                    {
                        lines.push(format!(
                            "p{}/{} ({}) read {path}: machine {m} {said:?} (truly on: {truly_on}), asked {:.3}s, answered {:.3}s",
                            by.pid,
                            by.term,
                            by.task,
                            *requested as f64 / SECOND as f64,
                            *answered as f64 / SECOND as f64
                        ));
                    }
                    world::Record::PoweredOn { machine, until, .. } => {
                        lines.push(format!("the world switched machine {machine} on (until {until:?})"));
                    }
                    world::Record::PodDeleted { by, node, .. } => {
                        lines.push(format!("p{}/{} ({}) force-deleted a pod of {node}", by.pid, by.term, by.task));
                    }
                    _ => {}
                }
            }
            self.told = truth.log.len();
            lines
        });
        for line in lines {
            self.tell(line);
        }
        let now = self.now();
        for phase in entered {
            let (strike, wait): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.armed).into_iter().partition(|(p, _, _)| p.as_str() == phase);
            self.armed = wait;
            for (_, delay, event) in strike {
                self.at(now + delay, Happening::Scenario(event));
            }
        }
        shared.with(|truth| self.checker.check(truth, &self.scenario))
    }

    fn leader(&self) -> Option<u32> {
        self.shared.with(|t| t.leader.holder)
    }

    fn happen(&mut self, happening: Happening) {
        let now = self.now();
        match happening {
            Happening::Tick => {
                let nhc = self.nhc;
                self.shared.with(|t| t.tick(&nhc));
                self.at(now + SECOND, Happening::Tick);
            }
            Happening::LeaderRenew => {
                self.renew_leadership();
                self.at(now + 5 * SECOND, Happening::LeaderRenew);
            }
            Happening::StartProcess => self.start_process(),
            Happening::StopLeading(pid) => {
                self.controllers.remove(&pid);
                self.shared.with(|t| {
                    if let Some(p) = t.processes.get_mut(&pid) {
                        p.leading = false;
                    }
                });
                self.tell(format!("p{pid} noticed it lost leadership"));
            }
            Happening::TrackerSynced(pid) => {
                let Some(process) = self.processes.get(&pid).cloned() else { return };
                let leases = self.shared.with(|t| t.leases.clone());
                let mono = ports::Clock::mono(&*process);
                for (node, renew) in leases {
                    process.tracker.observe(&node, renew, mono);
                }
                process.tracker.set_synced(true);
            }
            Happening::DeliverLease { pid, node } => {
                let Some(process) = self.processes.get(&pid).cloned() else { return };
                let renew = self.shared.with(|t| t.leases.get(&node).copied().flatten());
                process.tracker.observe(&node, renew, ports::Clock::mono(&*process));
            }
            Happening::GlitchEnd => {
                self.shared.with(|t| {
                    if let Some(m) = t.machine_of_node(TARGET) {
                        let at = t.now;
                        t.schedule_power(m, false, at);
                    }
                });
            }
            Happening::Scenario(event) => {
                self.tell(format!("{event:?}"));
                self.scenario_event(event);
            }
        }
    }

    fn scenario_event(&mut self, event: Event) {
        let now = self.now();
        let leader = self.leader();
        match event {
            Event::Heal => self.shared.with(|t| {
                if let Some(m) = t.machine_of_node(TARGET) {
                    t.machines[m].reach = Reach::Connected;
                }
            }),
            Event::PowerGlitch { on_for } => {
                self.shared.with(|t| {
                    if let Some(m) = t.machine_of_node(TARGET) {
                        t.power_on_by_world(m, Some(now + on_for));
                    }
                });
                self.at(now + on_for, Happening::GlitchEnd);
            }
            // A BMC whose supply coroner's outlets cut stays dark: only a supply that came back wakes it.
            Event::BmcBack { machine_on } => self.shared.with(|t| {
                if !t.bmcs[0].alive && !t.unpowered_bmcs.contains(&0) {
                    t.set_bmc_alive(0, true);
                    if machine_on && let Some(m) = t.machine_of_node(TARGET) {
                        t.power_on_by_world(m, None);
                    }
                }
            }),
            Event::PowerOn => self.shared.with(|t| {
                if let Some(m) = t.machine_of_node(TARGET) {
                    t.power_on_by_world(m, None);
                }
            }),
            Event::ApprovePowerOn => self.shared.with(|t| {
                // What `coroner approve` writes: the release id it reads from the remediation's status
                // (before any release, there is none to name).
                let released = t.remediations.values().find_map(|r| {
                    let uid = r.uid()?;
                    crate::guard::release_id(&uid, r.status.as_ref()?)
                });
                let why = "alice: back to service after the PDU repair";
                let value = released.map_or_else(|| why.to_owned(), |id| format!("{id} {why}"));
                t.annotate_node(TARGET, crate::guard::APPROVAL_ANNOTATION, &value);
                t.life.entry(TARGET.into()).or_default().push((now, world::Life::Approved));
                t.log.push(world::Record::Approved { at: now, node: TARGET.into(), value });
            }),
            Event::DenyNodeWrites { for_ } => self.shared.with(|t| t.node_writes_denied_until = now + for_),
            Event::ForeignOutOfService => self.shared.with(|t| {
                t.add_foreign_taint(TARGET, CoronerTaint::OutOfService.key(), Some("manual"), "NoExecute", "an admin")
            }),
            Event::RemoveOutOfServiceByHand => {
                self.shared.with(|t| t.remove_taints_by_hand(TARGET, CoronerTaint::OutOfService.key()))
            }
            Event::DeleteRemediation => self.shared.with(|t| {
                let first = t
                    .remediations
                    .values()
                    .find(|r| contract::node_name(&r.metadata) == Some(TARGET))
                    .map(ResourceExt::name_any);
                if let Some(name) = first {
                    t.delete_remediation(&name);
                }
            }),
            Event::SecondRemediation => self.shared.with(|t| {
                let spec = t.nhc_spec.clone();
                t.create_remediation(&format!("{TARGET}-second"), TARGET, &spec);
            }),
            Event::BmcDown => self.shared.with(|t| t.set_bmc_alive(0, false)),
            Event::RotateBmcFirst { lag } => {
                self.shared.with(|t| {
                    let secret =
                        t.bindings.get(TARGET).map(|b| b.spec.credentials_secret_ref.name.clone()).unwrap_or_default();
                    t.bmcs[0].credentials = t.secrets.get(&secret).copied().unwrap_or(1) + 1;
                });
                self.at(now + lag, Happening::Scenario(Event::SecretFollows));
            }
            Event::SecretFollows => self.shared.with(|t| {
                let secret =
                    t.bindings.get(TARGET).map(|b| b.spec.credentials_secret_ref.name.clone()).unwrap_or_default();
                let version = t.bmcs[0].credentials;
                t.secrets.insert(secret, version);
            }),
            Event::RotateCredentials => self.shared.with(|t| {
                let secret =
                    t.bindings.get(TARGET).map(|b| b.spec.credentials_secret_ref.name.clone()).unwrap_or_default();
                let version = t.secrets.get(&secret).copied().unwrap_or(1) + 1;
                t.secrets.insert(secret, version);
                t.bmcs[0].credentials = version;
            }),
            Event::LeaderMove => {
                let standby = self.shared.with(|t| {
                    t.processes
                        .iter()
                        .find(|(pid, p)| p.alive && !p.leading && Some(**pid) != leader)
                        .map(|(pid, _)| *pid)
                });
                if let (Some(old), Some(new)) = (leader, standby) {
                    self.become_leader(new);
                    let noticed = now + self.rng.i64(0..5 * SECOND);
                    self.at(noticed, Happening::StopLeading(old));
                }
            }
            Event::CrashLeader => {
                if let Some(pid) = leader {
                    self.shared.with(|t| {
                        if let Some(p) = t.processes.get_mut(&pid) {
                            p.alive = false;
                        }
                    });
                }
            }
            Event::ExcludeNode => self.shared.with(|t| t.exclude_node(TARGET)),
            Event::ReplaceNode => self.shared.with(|t| t.replace_node(TARGET)),
            Event::Attest { acknowledge, returning } => {
                let acknowledged =
                    if acknowledge { self.shared.with(|t| t.preflight_acknowledgements(TARGET)) } else { Vec::new() };
                // The preflight says an acknowledgement counts only in an attestation created after
                // the evidence plus leaseFreshness: the person comes back then, once.
                let freshness = self.scenario.spec.lease_freshness.get();
                let earliest = acknowledged.iter().map(|a| a.at.0 + freshness).max().map(|at| {
                    let epoch = self.shared.with(|t| t.wall(0));
                    at.duration_since(epoch).as_micros() as Micros + SECOND
                });
                match earliest {
                    Some(later) if later > now && !returning => {
                        self.at(later, Happening::Scenario(Event::Attest { acknowledge, returning: true }));
                    }
                    _ => self.shared.with(|t| {
                        let name = format!("{TARGET}-{}", t.attestations.len() + 1);
                        t.create_attestation(
                            &name,
                            TARGET,
                            "alice",
                            "rack 4 lost its power; I pulled both plugs of worker-1",
                            acknowledged,
                        );
                    }),
                }
            }
            Event::BmcTellsTruth => self.shared.with(|t| {
                t.bmcs[0].answers = world::PowerAnswers::Honest;
                t.bmc_truthful_at = Some(t.now);
                if let Some(m) = t.machine_of_node(TARGET)
                    && t.machines[m].on
                {
                    // On all along, and visible as such from now on.
                    let at = t.now;
                    t.log.push(world::Record::PoweredOn { at, machine: m, until: None });
                }
            }),
            Event::EditBinding(edit) => self.shared.with(|t| t.edit_binding(TARGET, edit)),
            Event::RecreateBinding => self.shared.with(|t| t.recreate_binding(TARGET)),
            Event::OutletsOnByHand => self.shared.with(Truth::outlets_on_by_hand),
            Event::SecretChange { value } => self.shared.with(|t| {
                let secret =
                    t.bindings.get(TARGET).map(|b| b.spec.credentials_secret_ref.name.clone()).unwrap_or_default();
                if value {
                    let version = t.secrets.get(&secret).copied().unwrap_or(1) + 1;
                    t.secrets.insert(secret, version);
                    t.bmcs[0].credentials = version;
                }
                // The binding verifier re-checks the binding and writes its status.
                t.touch_binding(TARGET);
                t.note_binding_content(TARGET);
            }),
            Event::CaBundleChange { content } => self.shared.with(|t| {
                let tls = t.bindings.get(TARGET).and_then(|b| b.spec.tls.clone());
                if let Some(reference) = tls.and_then(|t| t.ca_bundle_ref)
                    && content
                {
                    *t.config_maps.entry(reference.name).or_insert(1) += 1;
                }
                // The binding verifier re-checks the binding and writes its status.
                t.touch_binding(TARGET);
                t.note_binding_content(TARGET);
            }),
            Event::RewriteTaint => self.shared.with(|t| t.rewrite_out_of_service(TARGET)),
            Event::DeleteNode => self.shared.with(|t| t.delete_node(TARGET)),
            Event::NhcTimesOut => self.shared.with(|t| {
                let stamp = t.wall(t.now).to_string();
                let names: Vec<String> = t
                    .remediations
                    .values()
                    .filter(|r| contract::node_name(&r.metadata) == Some(TARGET))
                    .map(ResourceExt::name_any)
                    .collect();
                for name in names {
                    t.annotate_remediation(&name, contract::TIMED_OUT_ANNOTATION, &stamp);
                }
            }),
            Event::SlowApi { for_ } => self.shared.with(|t| t.api_slow_until = now + for_),
            Event::CrashAfterNextNodeWrite => self.shared.with(|t| t.crash_after_node_write = leader),
            Event::ClockStep { by } => {
                if let Some(pid) = leader {
                    self.shared.with(|t| {
                        if let Some(p) = t.processes.get_mut(&pid) {
                            p.clock_offset += by;
                        }
                    });
                }
            }
        }
    }

    fn start_process(&mut self) {
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

    fn become_leader(&mut self, pid: u32) {
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
        self.tell(format!("p{pid} leads"));
    }

    fn renew_leadership(&mut self) {
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
    fn bury_the_dead(&mut self) {
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
            let restart = self.now() + self.rng.i64(SECOND..5 * SECOND);
            self.at(restart, Happening::StartProcess);
            self.tell(format!("p{pid} died"));
        }
    }

    fn finish_reconciles(&mut self) {
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
    fn deliver_changes(&mut self) {
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

    fn spawn_due(&mut self) {
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

    fn report(&self, why: &str) -> String {
        let mut out = String::new();
        let s = &self.scenario;
        let _ = writeln!(out, "seed {} broke an invariant: {why}", s.seed);
        let _ = writeln!(
            out,
            "schedule: death {:?}, BMC {:?}{}, action {:?}, strategy {:?}, expect {:?} (excused by {:?}), NHC timeout {:?}",
            s.death,
            s.bmc,
            s.ipmi.map(|layout| format!(" over IPMI (GUID held in the {layout} layout)")).unwrap_or_default(),
            s.spec.action,
            s.spec.remediation_strategy,
            s.expect,
            s.excuses,
            s.nhc_timeout
        );
        let _ = writeln!(
            out,
            "spec: powerOffTimeout {}, retry {}×{}, leaseFreshness {}, releaseTimeout {}, settle {}, pollInterval {}, guard {:?}, remediateReadyFalse {}",
            s.spec.power_off_timeout,
            s.spec.retry.count,
            s.spec.retry.interval,
            s.spec.lease_freshness,
            s.spec.release_timeout,
            s.spec.settle,
            s.spec.poll_interval,
            s.spec.guard,
            s.spec.remediate_ready_false
        );
        let _ = writeln!(out, "faults: {:?}; stores trail the truth by {} ms", s.faults, s.store_lag / 1000);
        let _ = writeln!(out, "events: {:?}", s.events);
        // SIM_STORY=N tells the last N lines instead.
        let told = std::env::var("SIM_STORY").ok().and_then(|n| n.parse().ok()).unwrap_or(60);
        let _ = writeln!(out, "story (last {told}):");
        for line in self.story.iter().rev().take(told).rev() {
            let _ = writeln!(out, "  {line}");
        }
        let statuses = self.shared.with(|t| {
            t.remediations
                .values()
                .map(|r| {
                    let status = r.status.clone().unwrap_or_default();
                    let reason = crate::api::conditions::find(&status.conditions, contract::PROCESSING)
                        .map(|c| format!("{}: {}", c.reason, c.message))
                        .unwrap_or_default();
                    format!("  {} {:?}: {reason}", r.name_any(), fence::phase_of(&status))
                })
                .collect::<Vec<_>>()
        });
        let _ = writeln!(out, "remediations at the end:");
        for line in statuses {
            let _ = writeln!(out, "{line}");
        }
        out
    }
}

/// What a leader's controllers run, by task name: a remediation's reconcile (its name), an
/// attestation's (`attestation/<name>`: no remediation name has a slash), a Node's sweep
/// (`sweep/<node>`), and once per leadership the attestation controller's start (the release records
/// a stopped coroner left half-way).
mod task {
    use super::*;

    pub const SETTLE: &str = "settle-dangling-records";
    const ATTESTATION: &str = "attestation/";
    const SWEEP: &str = "sweep/";

    pub fn attestation(name: &str) -> String {
        format!("{ATTESTATION}{name}")
    }

    /// The sweep of one Node (`sweep/<node>`), as production's sweeper runs it on a Node event.
    pub fn sweep(node: &str) -> String {
        format!("{SWEEP}{node}")
    }

    pub async fn run(process: &Process, task: &str) -> Result<Next, driver::Error> {
        if task == SETTLE {
            // Production logs a failure and tries again at its next start.
            let _ = driver::attest::settle_dangling_records(process).await;
            return Ok(Next::AwaitChange);
        }
        if let Some(node) = task.strip_prefix(SWEEP) {
            // Production logs a failure and sweeps again on the Node's next event.
            let _ = driver::orphans::sweep(process, &process.local, node).await;
            return Ok(Next::AwaitChange);
        }
        match task.strip_prefix(ATTESTATION) {
            Some(name) => driver::attest::reconcile(process, &process.local, name).await,
            None => reconcile(process, &process.local, task).await,
        }
    }
}

/// kube-runtime's finalizer helper: adds or removes coroner's finalizer with a JSON Patch whose
/// `test` is on the finalizers as `remediation` holds them ([`world::Truth::set_finalizer`]).
pub trait Finalizer {
    fn set_finalizer(
        &self,
        remediation: &CoronerRemediation,
        present: bool,
    ) -> impl std::future::Future<Output = driver::ApiResult<()>> + Send;
}

/// The remediation controller of one coroner process: kube-runtime's finalizer helper around the
/// one fence loop, as `controller::remediation` wires it in production.
pub async fn reconcile<W: World + Finalizer>(
    world: &W,
    local: &driver::Local,
    name: &str,
) -> Result<Next, driver::Error> {
    let Some(remediation): Option<CoronerRemediation> = world.remediation(name).await? else {
        return Ok(Next::AwaitChange);
    };
    let has_finalizer = remediation.finalizers().iter().any(|f| f == contract::FINALIZER);
    match (remediation.metadata.deletion_timestamp.is_some(), has_finalizer) {
        (false, false) => {
            world.set_finalizer(&remediation, true).await?;
            // Production's controller begins the fence at once after adding the finalizer.
            driver::apply(world, local, &remediation).await
        }
        (false, true) => driver::apply(world, local, &remediation).await,
        (true, true) => {
            driver::cleanup(world, local, &remediation).await?;
            world.set_finalizer(&remediation, false).await?;
            Ok(Next::AwaitChange)
        }
        (true, false) => Ok(Next::AwaitChange),
    }
}

/// The target node, its machine and BMC as the scenario says; a healthy second node with its own.
fn build_world(truth: &mut Truth, scenario: &Scenario) {
    truth.store_lag = scenario.store_lag;
    truth.kubelet_behind.insert(TARGET.into(), scenario.kubelet_behind);
    let (on, reach) = match scenario.death {
        Death::PowerLoss | Death::PowerLossWithBmc => (false, Reach::Connected),
        Death::KernelHang => (true, Reach::Connected),
        Death::Partition => (true, Reach::Partitioned),
        Death::LeaseOnly => (true, Reach::LeaseOnly),
    };
    let target = truth.add_machine(TARGET, TARGET_UUID, on, reach);
    if scenario.death == Death::KernelHang {
        truth.machines[target].booted_at = None;
    }
    let other_fenced = scenario.levels.is_some_and(|l| l.other_fenced);
    let other_reach = if other_fenced { Reach::Partitioned } else { Reach::Connected };
    let other = truth.add_machine(OTHER, OTHER_UUID, true, other_reach);
    let spare = truth.add_machine("spare", SPARE_UUID, true, Reach::Connected);
    truth.add_node(TARGET, target, crate::api::conditions::UNKNOWN, &[]);
    truth.add_node(OTHER, other, crate::api::conditions::TRUE, &[]);
    truth.leases.insert(OTHER.into(), Some(truth.wall(0)));
    let system = |id: &str, machine, uuid: &str| SimSystem { id: id.into(), machine, uuid: uuid.into() };
    let target_systems = match scenario.bmc {
        BmcKind::ByteSwapped => vec![system("1", target, TARGET_UUID_SWAPPED)],
        BmcKind::MultiSystem => vec![system("1", spare, SPARE_UUID), system("2", target, TARGET_UUID)],
        BmcKind::Clone => vec![system("1", spare, TARGET_UUID), system("2", target, TARGET_UUID)],
        _ => vec![system("1", target, TARGET_UUID)],
    };
    // Over IPMI every BMC of the world speaks IPMI: a mistyped binding leads to another IPMI BMC.
    let origin = |redfish: &str| match scenario.ipmi {
        Some(_) => world::ipmi_origin_of(redfish),
        None => redfish.to_owned(),
    };
    let mut bmc = BmcModel::honest(&origin("https://bmc-1.example:443"), target_systems);
    bmc.ipmi = scenario.ipmi;
    match scenario.bmc {
        BmcKind::Slow => bmc.latency = (500 * MS, 3 * SECOND),
        BmcKind::Flaky => {
            bmc.error_rate = 0.15;
            bmc.timeout_rate = 0.05;
        }
        BmcKind::Transitional => bmc.answers = world::PowerAnswers::Transitional,
        BmcKind::Unknowns => bmc.answers = world::PowerAnswers::SometimesUnknown,
        BmcKind::LiesOff => bmc.answers = world::PowerAnswers::LiesOff,
        _ => {}
    }
    truth.bmcs.push(bmc);
    if scenario.death == Death::PowerLossWithBmc {
        truth.set_bmc_alive(0, false);
    }
    let mut second = BmcModel::honest(&origin("https://bmc-2.example:443"), vec![system("1", other, OTHER_UUID)]);
    second.ipmi = scenario.ipmi;
    truth.bmcs.push(second);
    // Where a mistyped endpoint leads: nothing answers there.
    truth.bmcs.push(BmcModel::honest(&origin(world::NOWHERE), Vec::new()));
    // Logged, as every BMC's power is: the oracle judges a BMC's silence from the record.
    truth.set_bmc_alive(truth.bmcs.len() - 1, false);
    let target_origin =
        if scenario.bmc == BmcKind::Mismatch { "https://bmc-2.example:443" } else { "https://bmc-1.example:443" };
    truth.add_binding(TARGET, TARGET, &origin(target_origin), None);
    // With Mismatch, the target's binding is a mistyped copy of the other node's.
    truth.add_binding(OTHER, OTHER, &origin("https://bmc-2.example:443"), None);
    if scenario.bmc == BmcKind::Mismatch {
        truth.bound_at_start.insert(TARGET.into(), 1);
    }
    if let Some(levels) = scenario.levels {
        add_level(truth, target, spare, other, &levels);
    }
    truth.add_pod(TARGET, "vm-a", false);
    truth.add_pod(TARGET, "agent", true);
    truth.attachments.insert(TARGET.into(), 1);
    truth.nhc_spec = scenario.spec.clone();
    truth.nhc_nodes.insert(TARGET.into(), 0);
    if other_fenced {
        truth.nhc_nodes.insert(OTHER.into(), 0);
    }
}

/// The target's machine on PDU `pdu-1.example:161`, its BMC on the same supply, and its binding's
/// level 2 naming the outlets that feed it (docs/simulation.md, "PDU levels"); a shared outlet 1
/// feeds the other node's machine too, and that node's binding names it.
fn add_level(truth: &mut Truth, machine: usize, spare: usize, other: usize, levels: &scenario::Levels) {
    const PDU: &str = "pdu-1.example";
    const SECRET: &str = "pdu-credentials";
    // The spare's outlets (11, 12) are on the same PDU: a wrong statement names them.
    for (feeds, first) in [(machine, 1), (spare, 11)] {
        for number in first..first + levels.outlets {
            let welded = levels.welded && number == 1;
            let pdu = crate::api::host_port(PDU, 161);
            let also_feeds = (levels.shared.is_some() && feeds == machine && number == 1).then_some(other);
            let silent_off = levels.silent_meter.filter(|_| number == 1 && feeds == machine);
            let metered = true;
            truth.outlets.push(world::SimOutlet {
                pdu,
                number,
                on: true,
                welded,
                metered,
                silent_off,
                feeds,
                also_feeds,
            });
        }
    }
    let named = if levels.wrong_mapping { 11 } else { 1 };
    truth.supplied_bmcs.push((machine, 0));
    truth.pdu_timeout_rate = levels.timeout_rate;
    if levels.bmc_dead && truth.bmcs[0].alive {
        truth.set_bmc_alive(0, false);
    }
    truth.secrets.insert(SECRET.into(), 1);
    use crate::api::{MappingProof, PduLevel, PduOutlet, SecretRef, SnmpOutlet, SnmpVersion};
    let outlet = |outlet| PduOutlet {
        redfish: None,
        snmp: Some(SnmpOutlet {
            address: PDU.into(),
            port: None,
            outlet,
            version: SnmpVersion::V3,
            auth_protocol: None,
            priv_protocol: None,
            context_name: None,
        }),
        credentials_secret_ref: SecretRef { name: SECRET.into() },
        tls: None,
        floor_watts: None,
        shared_with: Vec::new(),
    };
    let declared = |node: &str| match levels.shared {
        Some(true) => vec![node.to_owned()],
        _ => Vec::new(),
    };
    let mut outlets: Vec<PduOutlet> = (named..named + levels.outlets).map(outlet).collect();
    if levels.shared.is_some() {
        outlets[0].shared_with = declared(OTHER);
        let mut theirs = outlet(1);
        theirs.shared_with = declared(TARGET);
        let level = PduLevel { outlets: vec![theirs], mapping_proof: Some(MappingProof::OperatorStatement) };
        if let Some(binding) = truth.bindings.get_mut(OTHER) {
            binding.spec.pdu_levels = vec![level];
        }
    }
    let level = PduLevel { outlets, mapping_proof: Some(MappingProof::OperatorStatement) };
    if let Some(binding) = truth.bindings.get_mut(TARGET) {
        binding.spec.pdu_levels = vec![level];
    }
    // Verified with their levels before the outage, as the binding verifier does (A2).
    for node in std::iter::once(TARGET).chain(levels.shared.map(|_| OTHER)) {
        let content = truth.binding_content(node).map(crate::words::digest::content_hex);
        if let Some(status) = truth.bindings.get_mut(node).and_then(|b| b.status.as_mut()) {
            status.verified_content = content;
        }
        truth.note_binding_content(node);
        truth.note_verified(node);
    }
}

#[cfg(test)]
mod tests;
