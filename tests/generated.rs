//! Generated files must match what the code generates.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[test]
fn crds_match_the_output_of_coroner_crd() {
    let generated = coroner::cli::crds_yaml().expect("CRDs serialize");
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/crds/coroner.yaml"))
        .expect("crds/coroner.yaml exists");
    assert!(generated == committed, "crds/coroner.yaml is stale: run `cargo run -- crd > crds/coroner.yaml`");
}

#[test]
fn docs_safety_carries_the_reason_table_of_the_code() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/safety.md")).expect("docs/safety.md exists");
    let table = coroner::contract::reason_table();
    assert!(docs.contains(&table), "docs/safety.md lacks the current reason table; paste this:\n{table}");
}

#[test]
fn docs_safety_carries_the_attestation_reason_table_of_the_code() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/safety.md")).expect("docs/safety.md exists");
    let table = coroner::attestation::reason_table();
    assert!(docs.contains(&table), "docs/safety.md lacks the current attestation reason table; paste this:\n{table}");
}

#[test]
fn docs_operations_carries_the_event_table_of_the_code() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md exists");
    let table = coroner::words::event::table();
    assert!(docs.contains(&table), "docs/operations.md lacks the current Event table; paste this:\n{table}");
}
