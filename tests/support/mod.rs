//! Shared test support: the emulated BMCs (sushy-tools through tests/peers/machine.py; ipmi_sim and
//! pyghmi for IPMI) and PDUs (tests/peers/pdu.py, snmpsim through tests/peers/pdu_snmp.py).

#![allow(dead_code)] // each test binary uses a different part

pub mod ipmi;
pub mod machine;
pub mod pdu;
