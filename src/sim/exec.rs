//! A deterministic single-threaded executor on virtual time. Every call the fence loop makes into
//! the simulated world yields once ([`Sched::point`]), so the executor decides, from the seed, which
//! task runs next, when time moves and which process dies; nothing depends on the machine's clock or
//! thread scheduling.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
};

/// Virtual time, microseconds since the simulation began.
pub type Micros = i64;

pub const MS: Micros = 1_000;
pub const SECOND: Micros = 1_000_000;

pub fn micros(duration: std::time::Duration) -> Micros {
    Micros::try_from(duration.as_micros()).unwrap_or(Micros::MAX)
}

pub fn duration(micros: Micros) -> std::time::Duration {
    std::time::Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

/// What the executor shares with the futures it runs.
#[derive(Debug, Default)]
pub struct Sched {
    state: Mutex<SchedState>,
}

#[derive(Debug, Default)]
struct SchedState {
    now: Micros,
    /// Set by the task being polled when it parks on a point or a timer: when it may run again.
    parked_until: Option<Micros>,
    /// What the task being polled works on (a remediation's name): the world's records say whose
    /// call they saw.
    current: Option<String>,
}

impl Sched {
    fn with<T>(&self, f: impl FnOnce(&mut SchedState) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn now(&self) -> Micros {
        self.with(|s| s.now)
    }

    /// The tag of the task being polled.
    pub fn current(&self) -> String {
        self.with(|s| s.current.clone().unwrap_or_default())
    }

    fn advance_to(&self, at: Micros) {
        self.with(|s| s.now = s.now.max(at));
    }

    /// A scheduling point: the task gives the executor a chance to run something else first.
    pub fn point(self: &Arc<Self>) -> Park {
        Park { sched: self.clone(), until: None }
    }

    /// Sleeps on virtual time.
    pub fn sleep(self: &Arc<Self>, micros: Micros) -> Park {
        let until = self.now().saturating_add(micros.max(0));
        Park { sched: self.clone(), until: Some(until) }
    }
}

/// Parks the task until a virtual time (or, for a point, until the executor picks it again).
pub struct Park {
    sched: Arc<Sched>,
    until: Option<Micros>,
}

impl Future for Park {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let now = self.sched.now();
        match self.until {
            Some(until) if now >= until => Poll::Ready(()),
            Some(until) => {
                self.sched.with(|s| s.parked_until = Some(until));
                Poll::Pending
            }
            None => {
                // First poll of a point: park until now; the executor may run others first.
                self.until = Some(now);
                self.sched.with(|s| s.parked_until = Some(now));
                Poll::Pending
            }
        }
    }
}

#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

pub type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Task {
    /// Which coroner process runs it: a crash drops all of a process's tasks.
    pid: u32,
    tag: String,
    future: TaskFuture,
    /// Runnable once virtual time reaches this, or once woken (e.g. by a mutex).
    runnable_at: Option<Micros>,
    woken: Arc<Flag>,
}

/// The executor: runs tasks in an order drawn from the seed. Background tasks (the binding
/// verifier's) are kept apart and chosen from their own stream, so that adding them leaves the order
/// the seed draws for the others as it was.
pub struct Executor {
    pub sched: Arc<Sched>,
    tasks: Vec<Task>,
    background: Vec<Task>,
}

impl Executor {
    pub fn new() -> Self {
        Self { sched: Arc::new(Sched::default()), tasks: Vec::new(), background: Vec::new() }
    }

    pub fn spawn(&mut self, pid: u32, tag: String, future: TaskFuture) {
        let now = self.sched.now();
        self.tasks.push(Task { pid, tag, future, runnable_at: Some(now), woken: Arc::default() });
    }

    /// A background task: chosen by [`Executor::step`]'s own stream, and never keeping the run
    /// from being idle.
    pub fn spawn_background(&mut self, pid: u32, tag: String, future: TaskFuture) {
        let now = self.sched.now();
        self.background.push(Task { pid, tag, future, runnable_at: Some(now), woken: Arc::default() });
    }

    /// Drops every task of a dead process: whatever it would have done next never happens.
    pub fn kill(&mut self, pid: u32) {
        self.tasks.retain(|t| t.pid != pid);
        self.background.retain(|t| t.pid != pid);
    }

    pub fn has_tasks_of(&self, pid: u32) -> bool {
        self.tasks.iter().any(|t| t.pid == pid)
    }

    fn runnable(tasks: &[Task], now: Micros) -> Vec<usize> {
        (0..tasks.len())
            .filter(|&i| {
                let task = &tasks[i];
                task.woken.0.load(Ordering::Acquire) || task.runnable_at.is_some_and(|at| at <= now)
            })
            .collect()
    }

    /// The earliest time a parked task becomes runnable.
    pub fn next_wake(&self) -> Option<Micros> {
        self.tasks.iter().chain(&self.background).filter_map(|t| t.runnable_at).min()
    }

    /// Polls one runnable task — a background one chosen by `background_rng` (which also decides,
    /// when both kinds can run, which goes first), else one chosen by `rng` —; returns whether there
    /// was one.
    pub fn step(&mut self, rng: &mut fastrand::Rng, background_rng: &mut fastrand::Rng) -> bool {
        let now = self.sched.now();
        let runnable = Self::runnable(&self.tasks, now);
        let waiting = Self::runnable(&self.background, now);
        let background = !waiting.is_empty() && (runnable.is_empty() || background_rng.bool());
        let (tasks, index) = match background {
            true => (&mut self.background, waiting[background_rng.usize(..waiting.len())]),
            false if runnable.is_empty() => return false,
            false => (&mut self.tasks, runnable[rng.usize(..runnable.len())]),
        };
        let task = &mut tasks[index];
        task.woken.0.store(false, Ordering::Release);
        self.sched.with(|s| {
            s.parked_until = None;
            s.current = Some(task.tag.clone());
        });
        let waker = Waker::from(task.woken.clone());
        let mut cx = Context::from_waker(&waker);
        let polled = task.future.as_mut().poll(&mut cx);
        let parked = self.sched.with(|s| {
            s.current = None;
            s.parked_until.take()
        });
        match polled {
            Poll::Ready(()) => {
                tasks.swap_remove(index);
            }
            Poll::Pending => task.runnable_at = parked,
        }
        true
    }

    pub fn advance_to(&self, at: Micros) {
        self.sched.advance_to(at);
    }

    pub fn is_idle(&self) -> bool {
        self.tasks.is_empty()
    }
}

impl Default for Executor {
    fn default() -> Self {
        Self::new()
    }
}
