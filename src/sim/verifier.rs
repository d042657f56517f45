//! The binding verifier in the simulated processes: production's binding controller around the one
//! verifier loop ([`driver::verifier`]) — every binding at a leader's start, again after its period
//! (±10 %), at once when its spec or what it refers to changes — with its own random stream, so
//! that a seed's fence keeps the schedule it had where it can. What the world takes for a real
//! verification is judged from its own truth ([`Verifiers::judge`]), never from the status coroner
//! wrote.

use super::*;
use crate::driver::verifier::Verified;

/// Kept seeds whose schedules were found before the simulated world ran the binding verifier, and
/// which it would move off what they were kept for (their credential rotations and restarts wake
/// it): they run without it, in the world they were found in. Every other seed runs it.
const FOUND_WITHOUT_IT: &[u64] = &[
    // Known failures, each still failing as it was found.
    710896, 725773, 732950, 741845, 767866, 776567, 793958, 794043, 791141,
    // Regressions, each replaying the schedule that once broke.
    226, 531, 1028, 1139, 1692, 2978, 7905, 9907, 41943, 303833, 740385,
];

/// One process's verifier controller: when each binding is due, which run now.
#[derive(Debug, Default)]
struct Controller {
    due: BTreeMap<String, Micros>,
    running: BTreeSet<String>,
    failures: BTreeMap<String, u32>,
}

/// A finished verification: the process, the binding, and what it came to.
type Finished = (u32, String, Result<Verified, retry::Class>);

pub(super) struct Verifiers {
    /// Its own stream: which verification runs when, its jitter, its period.
    pub rng: fastrand::Rng,
    /// The verify period of this run's processes: production's default, or (one run in four) a
    /// short one, so that verifications happen while a fence runs.
    interval: std::time::Duration,
    controllers: BTreeMap<u32, Controller>,
    finished: Arc<Mutex<Vec<Finished>>>,
    /// How much of the world's record of binding contents the leaders' watches have shown.
    pub seen: usize,
    /// Whether a leader's verifier started already.
    started: bool,
    /// Whether this run's leaders run it ([`FOUND_WITHOUT_IT`]).
    runs: bool,
}

impl Verifiers {
    pub(super) fn new(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x7e21_f1e5);
        let interval = match rng.u8(..4) {
            0 => std::time::Duration::from_secs(rng.u64(20..90)),
            _ => std::time::Duration::from_secs(600),
        };
        Self {
            rng,
            interval,
            controllers: BTreeMap::new(),
            finished: Arc::default(),
            seen: 0,
            started: false,
            runs: !FOUND_WITHOUT_IT.contains(&seed),
        }
    }

    /// When the next verification of any process can start (one of a binding whose verification
    /// runs waits for it to end).
    pub(super) fn next_due(&self) -> Option<Micros> {
        let waiting = |c: &Controller| {
            c.due.iter().filter(|(name, _)| !c.running.contains(*name)).map(|(_, at)| *at).collect::<Vec<_>>()
        };
        self.controllers.values().flat_map(waiting).min()
    }

    /// The period ±10 %, from the verifier's stream.
    fn jittered(&mut self, period: std::time::Duration) -> Micros {
        micros(period.mul_f64(0.9 + 0.2 * self.rng.f64()))
    }
}

impl Run {
    /// A new leader's binding controller lists every binding and verifies each (a recent good
    /// check is not repeated: [`crate::verification::fresh_check`]).
    pub(super) fn start_verifier(&mut self, pid: u32) {
        if !self.verifiers.runs {
            return;
        }
        let now = self.now();
        let bindings: Vec<String> = self.shared.with(|t| t.bindings.keys().cloned().collect());
        // The first leader's start is the world's verification before the outage
        // (`Truth::note_verified`): its next is a period later.
        let first = std::mem::replace(&mut self.verifiers.started, true);
        let mut controller = Controller::default();
        for name in bindings {
            let delay = match first {
                false => self.verifiers.jittered(self.verifiers.interval),
                true => self.verifiers.rng.i64(MS..500 * MS),
            };
            controller.due.insert(name, now + delay);
        }
        self.verifiers.controllers.insert(pid, controller);
    }

    pub(super) fn stop_verifier(&mut self, pid: u32) {
        self.verifiers.controllers.remove(&pid);
    }

    /// A binding whose spec or Secret or CA bundle changed is verified at once, no recent check
    /// skipping it (production's watches of the bindings, Secrets and ConfigMaps).
    pub(super) fn notice_binding_changes(&mut self) {
        let now = self.now();
        let changed: Vec<String> = self
            .shared
            .with(|t| t.binding_contents.iter().skip(self.verifiers.seen).map(|(_, name, _)| name.clone()).collect());
        self.verifiers.seen += changed.len();
        for name in changed {
            let binding = self.shared.with(|t| t.bindings.get(&name).cloned());
            for (pid, controller) in self.verifiers.controllers.iter_mut() {
                if let Some(process) = self.processes.get(pid) {
                    // As production's mapper: the binding's cached client goes with what it was built from.
                    if let Some(binding) = &binding {
                        ports::Devices::forget_target(process.as_ref(), binding);
                    }
                    process.mark_references_changed(&name);
                }
                let delay = self.verifiers.rng.i64(MS..300 * MS);
                let due = controller.due.entry(name.clone()).or_insert(now + delay);
                *due = (*due).min(now + delay);
            }
        }
    }

    pub(super) fn spawn_due_verifications(&mut self) {
        let now = self.now();
        let interval = self.verifiers.interval;
        for (&pid, controller) in self.verifiers.controllers.iter_mut() {
            let Some(process) = self.processes.get(&pid) else { continue };
            let due: Vec<String> = controller
                .due
                .iter()
                .filter(|(name, at)| **at <= now && !controller.running.contains(*name))
                .map(|(name, _)| name.clone())
                .collect();
            for name in due {
                controller.due.remove(&name);
                controller.running.insert(name.clone());
                let process = process.clone();
                let finished = self.verifiers.finished.clone();
                let shared = self.shared.clone();
                self.exec.spawn_background(
                    pid,
                    task::verification(&name),
                    Box::pin(async move {
                        let result = verify(&process, &shared, &name, interval).await;
                        let result = result.map_err(|e| retry::fence_class(&e));
                        finished.lock().unwrap_or_else(PoisonError::into_inner).push((process.pid, name, result));
                    }),
                );
            }
        }
    }

    /// A finished verification is due again after its period (±10 %), a failed one after the error
    /// policy's backoff.
    pub(super) fn finish_verifications(&mut self) {
        let finished: Vec<Finished> =
            std::mem::take(&mut *self.verifiers.finished.lock().unwrap_or_else(PoisonError::into_inner));
        let now = self.now();
        for (pid, name, result) in finished {
            let failed = result.is_err();
            let after = match result {
                Ok(Verified::Fresh { ago }) => {
                    let period = self.verifiers.jittered(self.verifiers.interval);
                    Some((period - micros(ago)).max(0))
                }
                Ok(Verified::Checked { next, .. }) => Some(self.verifiers.jittered(next)),
                Err(class) => {
                    let failures = self.verifiers.controllers.get_mut(&pid).map_or(1, |c| {
                        let failures = c.failures.entry(name.clone()).or_default();
                        *failures += 1;
                        *failures
                    });
                    retry::retry_after(class, failures, None).map(micros)
                }
            };
            let Some(controller) = self.verifiers.controllers.get_mut(&pid) else { continue };
            controller.running.remove(&name);
            if !failed {
                controller.failures.remove(&name);
            }
            if let Some(after) = after {
                let due = controller.due.entry(name.clone()).or_insert(now + after);
                *due = (*due).min(now + after);
            }
        }
    }
}

/// One verification of `name` by `process`, from its store, as production's controller runs it.
/// When coroner recorded it verified and the world saw the binding's BMC answer it from the
/// node's own machine, at the content the binding had throughout, the world counts it as a
/// verification (what A2's judge accepts).
async fn verify(
    process: &Process,
    shared: &Shared,
    name: &str,
    interval: std::time::Duration,
) -> Result<Verified, driver::Error> {
    let Some(binding) = ports::Cluster::stored_binding(process, name).await? else {
        return Ok(Verified::Fresh { ago: std::time::Duration::ZERO });
    };
    let (began, content) = shared.with(|t| (t.now, t.binding_content(name)));
    let changed = process.take_references_changed(name);
    let verified = driver::verifier::verify(process, &process.local, &binding, changed, interval).await;
    if verified.is_err() && changed {
        process.mark_references_changed(name);
    }
    if let Ok(Verified::Checked { verified: Some(through), .. }) = verified {
        let task = task::verification(name);
        let at = (process.pid, began);
        shared.with(|t| t.note_verification_if_true(name, &binding.spec.node_name, &task, at, content, through));
    }
    verified
}
