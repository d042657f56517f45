//! Floor 1, the words: the vocabulary every floor above speaks, with no rule in it and no I/O — a
//! Kubernetes call's failure by what the loop does about it, a device's readings and its errors by
//! class, digests, UUIDs and the reasons conditions give.

pub mod api_error;
pub mod binding;
pub mod digest;
pub mod discovery;
pub mod event;
pub mod guard;
pub mod outlet;
pub mod paths;
pub mod power;
pub mod reason;
pub mod uuid;

/// A reading of this process's monotonic clock: how long after the process started. Only this
/// process's readings compare; a step of the wall clock moves none of them.
pub type Mono = std::time::Duration;
