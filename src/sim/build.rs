//! The world a scenario starts from: the machines, their BMCs and PDU outlets, the Nodes, bindings,
//! Secrets and the remediation NHC created.

use super::*;

/// The target node, its machine and BMC as the scenario says; a healthy second node with its own.
pub(super) fn build_world(truth: &mut Truth, scenario: &Scenario) {
    truth.store_lag = scenario.store_lag;
    truth.kubelet_behind.insert(TARGET.into(), scenario.kubelet_behind);
    let (on, reach) = match scenario.death {
        Death::PowerLoss | Death::PowerLossWithBmc => (false, Reach::Connected),
        Death::KernelHang => (true, Reach::Connected),
        Death::Partition => (true, Reach::Partitioned),
        Death::LeaseOnly => (true, Reach::LeaseOnly),
    };
    let target = truth.add_machine(TARGET, TARGET_UUID, on, reach);
    if scenario.death == Death::KernelHang {
        truth.machines[target].booted_at = None;
    }
    let other_fenced = scenario.levels.is_some_and(|l| l.other_fenced);
    let other_reach = if other_fenced { Reach::Partitioned } else { Reach::Connected };
    let other = truth.add_machine(OTHER, OTHER_UUID, true, other_reach);
    let spare = truth.add_machine("spare", SPARE_UUID, true, Reach::Connected);
    truth.add_node(TARGET, target, crate::api::conditions::UNKNOWN, &[]);
    truth.add_node(OTHER, other, crate::api::conditions::TRUE, &[]);
    truth.leases.insert(OTHER.into(), Some(truth.wall(0)));
    let system = |id: &str, machine, uuid: &str| SimSystem { id: id.into(), machine, uuid: uuid.into() };
    let target_systems = match scenario.bmc {
        BmcKind::ByteSwapped => vec![system("1", target, TARGET_UUID_SWAPPED)],
        BmcKind::MultiSystem => vec![system("1", spare, SPARE_UUID), system("2", target, TARGET_UUID)],
        BmcKind::Clone => vec![system("1", spare, TARGET_UUID), system("2", target, TARGET_UUID)],
        _ => vec![system("1", target, TARGET_UUID)],
    };
    // Over IPMI every BMC of the world speaks IPMI: a mistyped binding leads to another IPMI BMC.
    let origin = |redfish: &str| match scenario.ipmi {
        Some(_) => world::ipmi_origin_of(redfish),
        None => redfish.to_owned(),
    };
    let mut bmc = BmcModel::honest(&origin("https://bmc-1.example:443"), target_systems);
    bmc.ipmi = scenario.ipmi;
    match scenario.bmc {
        BmcKind::Slow => bmc.latency = (500 * MS, 3 * SECOND),
        BmcKind::Flaky => {
            bmc.error_rate = 0.15;
            bmc.timeout_rate = 0.05;
        }
        BmcKind::Transitional => bmc.answers = world::PowerAnswers::Transitional,
        BmcKind::Unknowns => bmc.answers = world::PowerAnswers::SometimesUnknown,
        BmcKind::LiesOff => bmc.answers = world::PowerAnswers::LiesOff,
        _ => {}
    }
    truth.bmcs.push(bmc);
    if scenario.death == Death::PowerLossWithBmc {
        truth.set_bmc_alive(0, false);
    }
    let mut second = BmcModel::honest(&origin("https://bmc-2.example:443"), vec![system("1", other, OTHER_UUID)]);
    second.ipmi = scenario.ipmi;
    truth.bmcs.push(second);
    // Where a mistyped endpoint leads: nothing answers there.
    truth.bmcs.push(BmcModel::honest(&origin(world::NOWHERE), Vec::new()));
    // Logged, as every BMC's power is: the oracle judges a BMC's silence from the record.
    truth.set_bmc_alive(truth.bmcs.len() - 1, false);
    let target_origin =
        if scenario.bmc == BmcKind::Mismatch { "https://bmc-2.example:443" } else { "https://bmc-1.example:443" };
    truth.add_binding(TARGET, TARGET, &origin(target_origin), None);
    // With Mismatch, the target's binding is a mistyped copy of the other node's.
    truth.add_binding(OTHER, OTHER, &origin("https://bmc-2.example:443"), None);
    if scenario.bmc == BmcKind::Mismatch {
        truth.bound_at_start.insert(TARGET.into(), 1);
    }
    if let Some(levels) = scenario.levels {
        add_level(truth, target, spare, other, &levels);
    }
    truth.add_pod(TARGET, "vm-a", false);
    truth.add_pod(TARGET, "agent", true);
    truth.attachments.insert(TARGET.into(), 1);
    truth.nhc_spec = scenario.spec.clone();
    truth.nhc_nodes.insert(TARGET.into(), 0);
    if other_fenced {
        truth.nhc_nodes.insert(OTHER.into(), 0);
    }
}

/// The target's machine on PDU `pdu-1.example:161`, its BMC on the same supply, and its binding's
/// level 2 naming the outlets that feed it (docs/simulation.md, "PDU levels"); a shared outlet 1
/// feeds the other node's machine too, and that node's binding names it.
pub(super) fn add_level(truth: &mut Truth, machine: usize, spare: usize, other: usize, levels: &scenario::Levels) {
    const PDU: &str = "pdu-1.example";
    const SECRET: &str = "pdu-credentials";
    // The spare's outlets (11, 12) are on the same PDU: a wrong statement names them.
    for (feeds, first) in [(machine, 1), (spare, 11)] {
        for number in first..first + levels.outlets {
            let welded = levels.welded && number == 1;
            let pdu = crate::api::host_port(PDU, 161);
            let also_feeds = (levels.shared.is_some() && feeds == machine && number == 1).then_some(other);
            let silent_off = levels.silent_meter.filter(|_| number == 1 && feeds == machine);
            let metered = true;
            truth.outlets.push(world::SimOutlet {
                pdu,
                number,
                on: true,
                welded,
                metered,
                silent_off,
                feeds,
                also_feeds,
            });
        }
    }
    let named = if levels.wrong_mapping { 11 } else { 1 };
    truth.supplied_bmcs.push((machine, 0));
    truth.pdu_timeout_rate = levels.timeout_rate;
    if levels.bmc_dead && truth.bmcs[0].alive {
        truth.set_bmc_alive(0, false);
    }
    truth.secrets.insert(SECRET.into(), 1);
    use crate::api::{MappingProof, PduLevel, PduOutlet, SecretRef, SnmpOutlet, SnmpVersion};
    let outlet = |outlet| PduOutlet {
        redfish: None,
        snmp: Some(SnmpOutlet {
            address: PDU.into(),
            port: None,
            outlet,
            version: SnmpVersion::V3,
            auth_protocol: None,
            priv_protocol: None,
            context_name: None,
        }),
        credentials_secret_ref: SecretRef { name: SECRET.into() },
        tls: None,
        floor_watts: None,
        shared_with: Vec::new(),
    };
    let declared = |node: &str| match levels.shared {
        Some(true) => vec![node.to_owned()],
        _ => Vec::new(),
    };
    let mut outlets: Vec<PduOutlet> = (named..named + levels.outlets).map(outlet).collect();
    if levels.shared.is_some() {
        outlets[0].shared_with = declared(OTHER);
        let mut theirs = outlet(1);
        theirs.shared_with = declared(TARGET);
        let level = PduLevel { outlets: vec![theirs], mapping_proof: Some(MappingProof::OperatorStatement) };
        if let Some(binding) = truth.bindings.get_mut(OTHER) {
            binding.spec.pdu_levels = vec![level];
        }
    }
    let level = PduLevel { outlets, mapping_proof: Some(MappingProof::OperatorStatement) };
    if let Some(binding) = truth.bindings.get_mut(TARGET) {
        binding.spec.pdu_levels = vec![level];
    }
    // Verified with their levels before the outage, as the binding verifier does (A2).
    for node in std::iter::once(TARGET).chain(levels.shared.map(|_| OTHER)) {
        let content = truth.binding_content(node).map(crate::words::digest::content_hex);
        if let Some(status) = truth.bindings.get_mut(node).and_then(|b| b.status.as_mut()) {
            status.verified_content = content;
        }
        truth.note_binding_content(node);
        truth.note_verified(node);
    }
}
