//! coroner: a node-fencing remediator for Medik8s NodeHealthCheck.
//!
//! It releases a dead node's workloads only after proving, through the node's own BMC, that the
//! machine behind it is that node and that its power reads back Off.
//!
//! Pure decisions: [`attestation`], [`contract`], [`fence`], [`gates`], [`guard`], [`identity`], [`taints`],
//! [`verify`].
//! The one fence loop, over small I/O traits: [`driver`]. Thin I/O: [`bmc`] (Redfish), [`ipmi`] (IPMI v2.0
//! RMCP+), [`pdu`] (PDU outlets: clients only, no level uses them yet), [`cluster`] (Kubernetes), [`access`] (a binding's client), wired by [`controller`] and [`cli`].

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
pub mod pdu;
#[cfg(test)]
pub mod sabotage;
#[cfg(feature = "sim")]
pub mod sim;
pub mod taints;
pub mod telemetry;
pub mod uninstall;
pub mod verification;
pub mod verify;
