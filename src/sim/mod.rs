//! A deterministic simulation of the fence loop: from one seed, a world (API objects with
//! resourceVersions, machines, BMCs, kubelets, NodeHealthCheck, leader election, clocks) and a
//! schedule of faults; the real loop ([`crate::driver`]) runs against it through its traits, in
//! processes that crash at every call and restart from what is persisted; the invariants are
//! checked after every step against the world's truth. A seed reproduces a run exactly.
//!
//! Design note: docs/simulation.md (why an own executor rather than turmoil, what is modelled, what
//! is not).

mod build;
mod events;
pub mod exec;
pub mod invariants;
#[cfg(test)]
mod known;
pub mod lab;
mod lifecycle;
pub mod process;
pub mod reach;
#[cfg(test)]
mod sabotage;
pub mod scenario;
pub mod script;
mod verifier;
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
    /// Event reasons the run published that no table holds (`words::event`, the condition and
    /// attestation reasons): each must be a row of one.
    pub unknown_reasons: Vec<String>,
}

/// Whether an Event's reason is a row of one of the reason tables.
fn tabled(reason: &str) -> bool {
    crate::words::event::Event::parse(reason).is_some()
        || crate::contract::Reason::ALL.iter().any(|r| r.as_str() == reason)
        || crate::attestation::AttestationReason::ALL.iter().any(|r| r.as_str() == reason)
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
    /// The leaders' binding verifiers.
    verifiers: verifier::Verifiers,
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
    let unknown_reasons = run.shared.with(|t| {
        let mut unknown: Vec<String> = t
            .log
            .iter()
            .filter_map(|r| match r {
                world::Record::Event { reason, .. } if !tabled(reason) => Some(reason.clone()),
                _ => None,
            })
            .collect();
        unknown.dedup();
        unknown
    });
    Outcome { seed, stats, failure, broken, reached: Vec::new(), unknown_reasons }
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
            verifier_rng: Mutex::new(fastrand::Rng::with_seed(scenario.seed ^ 0xb1d5)),
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
            verifiers: verifier::Verifiers::new(scenario.seed),
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
        // What the world was built with is no change the verifier's watches see.
        run.verifiers.seen = run.shared.with(|t| t.binding_contents.len());
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
            self.finish_verifications();
            self.deliver_changes();
            self.notice_binding_changes();
            self.spawn_due();
            self.spawn_due_verifications();
            self.check()?;
            if self.exec.step(&mut self.rng, &mut self.verifiers.rng) {
                self.check()?;
                continue;
            }
            let next = [
                self.events.first_key_value().map(|(k, _)| k.0),
                self.exec.next_wake(),
                self.controllers.values().flat_map(|c| c.due.values().copied()).min(),
                self.verifiers.next_due(),
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
                self.stop_verifier(pid);
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
    const VERIFY: &str = "verify/";

    /// The binding verifier's verification of a binding (`verify/<binding>`, [`super::verifier`]).
    pub fn verification(binding: &str) -> String {
        format!("{VERIFY}{binding}")
    }

    pub fn is_verification(task: &str) -> bool {
        task.starts_with(VERIFY)
    }

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

use build::build_world;

#[cfg(test)]
mod tests;
