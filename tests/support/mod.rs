//! Shared test support: the emulated BMCs (sushy-tools through tests/peers/machine.py; ipmi_sim and
//! pyghmi for IPMI).

#![allow(dead_code)] // each test binary uses a different part

pub mod ipmi;
pub mod machine;
