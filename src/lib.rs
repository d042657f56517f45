//! coroner: a node-fencing remediator for Medik8s NodeHealthCheck.
//!
//! It releases a dead node's workloads only after proving, through the node's own BMC, that the
//! machine behind it is that node and that its power reads back Off.
//!
//! ## Floors
//! Lowest first; a module imports only from its own floor or below, rules and device clients stand
//! beside each other without importing each other, and a `(pure)` floor does no I/O and reads no
//! clock. `tests/floors.rs` holds the code to this map.
//!
//! 1. words (pure): [`words`], [`api`], `sabotage` (tests only)
//! 2. rules (pure): [`contract`], [`taints`], [`identity`], [`levels`], [`gates`], [`leader`], [`node`], [`release`]
//! 2. devices: [`bmc`], [`ipmi`], [`pdu`]
//! 3. state machines and verdicts (pure): [`fence`], [`guard`], [`attestation`], [`verification`], [`verify`]
//! 4. loops: [`driver`], [`telemetry`]
//! 5. adapters: [`access`], [`cluster`], [`controller::world`]
//! 6. wiring: [`controller`], [`cli`], [`uninstall`], `sim` (the `sim` feature)

/// The stack of every thread that runs the fence loop (tokio's workers, the simulator's): its futures
/// nest deeply (a reconcile, the guard, the checks right before a power action), and an unoptimised
/// build's frames outgrow the 2 MiB default. Reserved address space, not memory in use.
pub const WORKER_STACK: usize = 8 << 20;

pub mod access;
pub mod api;
pub mod attestation;
pub mod bmc;
pub mod cli;
pub mod cluster;
pub mod contract;
pub mod controller;
pub mod driver;
pub mod fence;
pub mod gates;
pub mod guard;
pub mod identity;
pub mod ipmi;
pub mod leader;
pub mod levels;
pub mod node;
pub mod pdu;
pub mod release;
#[cfg(test)]
pub mod sabotage;
#[cfg(feature = "sim")]
pub mod sim;
pub mod taints;
pub mod telemetry;
pub mod uninstall;
pub mod verification;
pub mod verify;
pub mod words;
