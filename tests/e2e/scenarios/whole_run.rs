//! e2e scenarios: checks over the whole run.

use crate::*;

pub(crate) fn whole_run_checks(world: &World) {
    let events = timeline::node_events(&world.audit_log());
    let mut violations = Vec::new();
    for (name, node) in &world.nodes {
        if node.spec.ignore_resets_report_off {
            // Its BMC lies about power: no proof through it means anything (scenario s checks what
            // catches that afterwards).
            log(format!("f: {name} skipped: its BMC ignores resets and reads Off"));
            continue;
        }
        let power = timeline::power_changes(&node.machine.log());
        violations.extend(timeline::taints_follow_power(
            name,
            events.get(name).map(Vec::as_slice).unwrap_or_default(),
            &power,
        ));
    }
    let mut log_lines = 0;
    for path in world.coroner_logs() {
        let text = std::fs::read_to_string(&path).unwrap();
        log_lines += text.lines().count();
        if text.contains(PASSWORD) {
            violations.push(format!("the BMC password appears in {}", path.display()));
        }
        if text.contains('\u{1b}') {
            violations.push(format!("ANSI escape codes in {} (written to a file, not a terminal)", path.display()));
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
    let added: usize =
        events.values().flatten().filter(|e| matches!(e, timeline::NodeEvent::TaintAdded { .. })).count();
    log(format!(
        "f: {added} out-of-service taints, each added after a proven Off and removed before power-on; no Node deleted; no password in {log_lines} log lines"
    ));
}
