//! Generated files must match what the code generates.

#[test]
fn crds_match_the_output_of_coroner_crd() {
    let generated = coroner::cli::crds_yaml().expect("CRDs serialize");
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/crds/coroner.yaml"))
        .expect("crds/coroner.yaml exists");
    assert!(generated == committed, "crds/coroner.yaml is stale: run `cargo run -- crd > crds/coroner.yaml`");
}
