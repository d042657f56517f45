//! coroner: a node-fencing remediator for Medik8s NodeHealthCheck.
//!
//! It releases a dead node's workloads only after proving, through the node's own BMC, that the
//! machine behind it is that node and that its power reads back Off.

pub mod api;
pub mod contract;
pub mod taints;
pub mod identity;
pub mod bmc;
pub mod fence;
pub mod gates;
