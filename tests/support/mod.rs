//! Shared test support: the emulated BMCs (sushy-tools through tests/peers/machine.py).

#![allow(dead_code)] // each test binary uses a different part

pub mod machine;
