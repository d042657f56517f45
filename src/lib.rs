//! coroner: a node-fencing remediator for Medik8s NodeHealthCheck.
//!
//! It releases a dead node's workloads only after proving, through the node's own BMC, that the
//! machine behind it is that node and that its power reads back Off.
//!
//! Pure decisions: [`contract`], [`fence`], [`gates`], [`identity`], [`taints`].
//! Thin I/O: [`bmc`] (Redfish), [`cluster`] (Kubernetes), wired by [`controller`] and [`cli`].

pub mod api;
pub mod bmc;
pub mod cli;
pub mod cluster;
pub mod contract;
pub mod controller;
pub mod fence;
pub mod gates;
pub mod identity;
pub mod leader;
pub mod taints;
pub mod telemetry;
pub mod uninstall;
pub mod verification;
