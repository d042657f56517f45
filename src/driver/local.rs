//! What one process keeps beside the API server: the admissions it counted, what it knew of each
//! fence (W1), the devices' turns, and the gates' looks at the fence window.

use super::*;

/// When fences were admitted, by remediation UID. Every admission merges in what the existing
/// remediations record (so admissions by another replica count); a remediation NHC deleted before
/// this process saw it is forgotten (documented in docs/safety.md).
#[derive(Debug, Default)]
pub struct Admissions {
    pub times: BTreeMap<String, Timestamp>,
    /// A4: the looks this process let through, by remediation UID: when each was asked for
    /// ([`fence::as_proving_again`]).
    pub reproving: BTreeMap<String, Timestamp>,
}

/// What this process knows of each fence, by remediation UID ([`fence::Memory`]), with the instance
/// (process and leadership term) that learnt it.
pub type Memories = std::sync::Mutex<BTreeMap<String, (String, Memory)>>;

/// One request at a time per BMC origin from this process: the guard's readings take no storm-limit
/// slot, but wait while another request to the same BMC is in flight.
#[derive(Debug, Default)]
pub struct Origins {
    locks: std::sync::Mutex<BTreeMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl Origins {
    /// Waits for the origin's turn; the turn lasts as long as the guard is held.
    pub async fn turn(&self, origin: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            locks.entry(origin.to_owned()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

/// A kept verification's content and binding UID ([`crate::verification::KeptVerification::id`]).
pub type KeptId = (String, String);

/// What one process keeps in memory beside the world it talks to: never persisted, gone with the
/// process (a new process, or a new leadership term of the same one, starts from what is persisted).
#[derive(Debug, Default)]
pub struct Local {
    /// Admissions happen one at a time in a process (so two remediations cannot both take the last
    /// slot); this remembers when fences were admitted, for the per-window budget.
    pub admissions: tokio::sync::Mutex<Admissions>,
    /// What this process knows of each fence.
    pub memories: Memories,
    /// One request at a time per device origin, from this process.
    pub origins: Origins,
    /// Statuses decided and not yet written ([`fence::may_wait_for_next_write`]), by remediation UID:
    /// the instance that decided each and the resourceVersion it builds on.
    pub unwritten: std::sync::Mutex<BTreeMap<String, (String, String, CoronerRemediationStatus)>>,
    /// R4: why this process last said a taint whose remediation is gone stays, by owner UID and taint.
    orphans: std::sync::Mutex<BTreeMap<(String, &'static str), taints::OrphanHeld>>,
    /// Each queued remediation's last full look, by UID, with the instance that took it.
    queue_looks: std::sync::Mutex<BTreeMap<String, (String, gates::QueueLook)>>,
    /// A2: the verification this process last kept for each node (its content and binding UID), with
    /// the instance that kept it: written again only when that changes or leadership moved.
    kept: std::sync::Mutex<BTreeMap<String, (String, KeptId)>>,
    /// Remediations something woke on purpose (their node, an etcd Pod, the queue moving) since their
    /// last look, by name.
    pokes: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Local {
    /// A2: the verification `instance` last kept for `node` (its content and binding UID).
    pub fn kept(&self, node: &str, instance: &str) -> Option<KeptId> {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.get(node).filter(|(by, _)| by == instance).map(|(_, id)| id.clone())
    }

    pub fn remember_kept(&self, node: &str, instance: &str, id: KeptId) {
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.insert(node.to_owned(), (instance.to_owned(), id));
    }

    /// What this instance knows of the fence: a new leadership term of the same replica starts afresh
    /// (its proof, its attempt clock), as a new process would.
    pub fn remembered(&self, instance: &str, uid: &str) -> Memory {
        let memories = self.memories.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        memories.get(uid).filter(|(by, _)| by == instance).map(|(_, memory)| memory.clone()).unwrap_or_default()
    }

    pub fn remember(&self, instance: &str, uid: &str, memory: Memory) {
        let mut memories = self.memories.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        memories.insert(uid.to_owned(), (instance.to_owned(), memory));
    }

    pub fn forget(&self, uid: &str) {
        self.memories.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(uid);
        self.hold(uid, None);
        self.queue_looks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(uid);
    }

    /// The status this instance decided on top of `remediation` and has not written, if it still
    /// builds on what the API server holds (the same resourceVersion).
    pub(super) fn unwritten(
        &self,
        instance: &str,
        uid: &str,
        remediation: &CoronerRemediation,
    ) -> Option<CoronerRemediationStatus> {
        let unwritten = self.unwritten.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (by, version, status) = unwritten.get(uid)?;
        (by == instance && Some(version) == remediation.metadata.resource_version.as_ref()).then(|| status.clone())
    }

    /// Records why the taint `owner` added stays (`None`: it no longer does); `true` when that is
    /// news, to be reported.
    pub(super) fn orphans_held(&self, owner: &str, taint: CoronerTaint, held: Option<taints::OrphanHeld>) -> bool {
        let mut orphans = self.orphans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (owner.to_owned(), taint.key());
        match held {
            Some(cause) => orphans.insert(key, cause) != Some(cause),
            None => orphans.remove(&key).is_some(),
        }
    }

    /// A wake-up on purpose of the remediation called `name` (not its own change, not a timer): its
    /// next reconcile looks, queued or not ([`gates::queued_look_skipped`]).
    pub fn poke(&self, name: &str) {
        self.pokes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.to_owned());
    }

    pub(super) fn take_poke(&self, name: &str) -> bool {
        self.pokes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(name)
    }

    pub(super) fn queue_look(&self, instance: &str, uid: &str) -> Option<gates::QueueLook> {
        let looks = self.queue_looks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        looks.get(uid).filter(|(by, _)| by == instance).map(|(_, look)| look.clone())
    }

    pub(super) fn looked(&self, instance: &str, uid: &str, look: Option<gates::QueueLook>) {
        let mut looks = self.queue_looks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match look {
            Some(look) => looks.insert(uid.to_owned(), (instance.to_owned(), look)),
            None => looks.remove(uid),
        };
    }

    pub(super) fn hold(&self, uid: &str, held: Option<(String, String, CoronerRemediationStatus)>) {
        let mut unwritten = self.unwritten.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match held {
            Some(held) => unwritten.insert(uid.to_owned(), held),
            None => unwritten.remove(uid),
        };
    }
}
