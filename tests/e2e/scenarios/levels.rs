//! e2e scenarios: PDU levels: outlets proving a machine off.

use crate::*;

pub(crate) async fn level_proves_off_through_two_outlets(world: &mut World) {
    let node = "pdu-1";
    let pdu = pdu_level_node(world, node, MachineSpec::new(&uuid(161))).await;
    let dead = Instant::now();
    world.node_mut(node).lose_power_silently();
    let released =
        wait_remediation(world, node, "Succeeded=True", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "True")).await;
    let took = dead.elapsed();
    let status = released.status.clone().unwrap();
    let evidence = status.evidence.unwrap();
    let level = evidence.power_off.unwrap().level.unwrap();
    assert_eq!((level.level, level.mapping.as_str(), level.bmc_after.as_str()), (2, "OperatorStatement", "no answer"));
    let outlets: Vec<_> = level.outlets.iter().map(|o| (o.outlet.clone(), o.state.clone())).collect();
    let key = |n: u32| format!("snmp:127.0.0.1:{}|{n}", pdu.port);
    assert_eq!(outlets, [(key(1), "Off".to_owned()), (key(2), "Off".to_owned())]);
    let release = evidence.release.unwrap();
    assert_eq!(release.kind, coroner::api::ReleaseKind::LevelProof);
    assert!(release.taint_owned && release.node_ready == "Unknown");
    assert!(taint_keys(world, node).await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    assert_eq!(pdu.commands(), ["1:2", "2:2"], "immediateOff to each outlet, once");
    // What people read: the Events name the level and the statement it rests on.
    let events = world.kubectl(&[
        "get",
        "events",
        "-n",
        CORONER_NS,
        "--field-selector",
        &format!("involvedObject.name={}", released.name_any()),
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    for reason in ["OutletMappingUnproven", "PowerOffProven", "NodeFenced"] {
        assert!(events.lines().any(|l| l == reason), "no {reason} Event: {events}");
    }
    log(format!(
        "{node}: BMC dead with its machine → released through level 2 (two SNMPv3 outlets) after {took:.1?}; scenario p's attestation path needs a person instead"
    ));
}

pub(crate) async fn level_after_a_reset_that_never_took(world: &mut World) {
    let node = "pdu-2";
    let machine = MachineSpec { disable_power_off: true, ..MachineSpec::new(&uuid(162)) };
    let pdu = pdu_level_node(world, node, machine).await;
    let feed = world.node(node).fed_by_outlets(pdu.dir.join("outlets.json"), &["1", "2"]);
    let cut = Instant::now();
    world.node(node).partition();
    let released =
        wait_remediation(world, node, "Succeeded=True", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "True")).await;
    let took = cut.elapsed();
    assert!(feed.fired.load(std::sync::atomic::Ordering::Acquire), "the outlets took the machine's power");
    let evidence = released.status.clone().unwrap().evidence.unwrap();
    // Level 1 proved the identity and sent ForceOff, which never took; the outlets finished the job.
    assert!(evidence.identity.is_some());
    let power_off = evidence.power_off.unwrap();
    assert!(power_off.resets.iter().any(|r| r.level.is_none()), "the BMC's ForceOff: {:?}", power_off.resets);
    assert!(power_off.resets.iter().any(|r| r.level == Some(2)), "the outlets' Off: {:?}", power_off.resets);
    let level = power_off.level.unwrap();
    assert_eq!((level.level, level.bmc_after.as_str()), (2, "no answer"), "the BMC lost its power with them");
    assert_eq!(evidence.release.unwrap().kind, coroner::api::ReleaseKind::LevelProof);
    assert_eq!(pdu.commands(), ["1:2", "2:2"], "immediateOff to each outlet, once");
    assert!(taint_keys(world, node).await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    log(format!(
        "{node}: a ForceOff that never took, then its outlets: released through level 2 {took:.1?} after the network cut"
    ));
}

/// L5 through the binding verifier, with no statement: a node whose level 2 is two metered outlets
/// of a Redfish PDU. The verifier sees the machine run (node Ready) with both outlets drawing; after a
/// maintenance power-off through the BMC (Debian's fence_redfish) its first look finds an outlet
/// still drawing (the meter lags: the test lowers the draws only once that look read outlet A1), so
/// it looks again within settle (2 s at the e2e templates, from right before its BMC reads) and finds
/// them at the floor: both agreements recorded. Without the look again the draw would have
/// contradicted the mapping and cleared its `On` agreement. No level rests on such a passive
/// confirmation yet (issue 46): `OutletMappingProven` stays False and says why.
pub(crate) async fn level_confirmed_by_draws(world: &mut World) {
    use support::pdu::{RedfishPduPeer, RedfishPduSpec};
    let node = "pdu-3";
    world.add_node_with(node, MachineSpec::new(&uuid(163)), &[(NAME, node)]).await;
    let pdu = RedfishPduPeer::start(&RedfishPduSpec { load: Some(180.0), ..RedfishPduSpec::default() });
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let secret = serde_json::from_value(json!({
        "metadata": {"name": "pdu-3-pdu"}, "stringData": {"username": USER, "password": PASSWORD},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let outlet = |id: &str| {
        json!({"redfish": {"endpoint": pdu.endpoint(), "rackPdu": "1", "outlet": id},
               "credentialsSecretRef": {"name": "pdu-3-pdu"}, "tls": {"certificateSHA256": peers().pin("leaf")}})
    };
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let levels = json!({"spec": {"pduLevels": [{"outlets": [outlet("A1"), outlet("A2")]}]}});
    bindings.patch(node, &PatchParams::default(), &Patch::Merge(&levels)).await.unwrap();
    let confirmation = |binding: coroner::api::BmcBinding| {
        let status = binding.status?;
        let proven = status.conditions.iter().find(|c| c.type_ == "OutletMappingProven").cloned()?;
        Some((status.level_confirmations.into_iter().find(|c| c.level == 2)?, proven))
    };
    let (on, proven) =
        wait_for(&format!("{node}: the machine seen running with both outlets drawing"), SHORT, || async {
            confirmation(bindings.get(node).await.ok()?).filter(|(c, _)| c.on_seen_at.is_some())
        })
        .await;
    assert_eq!(proven.status, "False", "one agreement confirms nothing yet: {proven:?}");
    assert!(on.off_seen_at.is_none(), "{on:?}");
    log(format!("{node}: level 2 (Redfish PDU, metered) seen drawing while the machine runs: {:?}", on.last));

    // Right after a check read the outlets, so that no check straddles the power-off (one that read
    // the machine On before it and the draws after the test lowered them would see a contradiction).
    let looks = |pdu: &RedfishPduPeer| pdu.reads("A1");
    let seen = looks(&pdu);
    wait_for(&format!("{node}: a check reads the outlets"), SHORT, || async { (looks(&pdu) > seen).then_some(()) })
        .await;
    assert_eq!(world.node(node).machine.fence_redfish("off", "node-1"), Some(0), "a maintenance power-off");
    // The meter lags: both outlets keep drawing until the verifier's first look after the power-off
    // has read A1, then fall to nothing.
    let before = looks(&pdu);
    let lag = {
        let dir = pdu.dir.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            while RedfishPduPeer::reads_in(&dir, "A1") == before && started.elapsed() < LONG {
                std::thread::sleep(Duration::from_millis(10));
            }
            RedfishPduPeer::force_in(&dir, "A1", json!({"load": 0.0}));
            RedfishPduPeer::force_in(&dir, "A2", json!({"load": 0.0}));
        })
    };
    let (off, proven) = wait_for(&format!("{node}: both agreements of the mapping seen"), SHORT, || async {
        confirmation(bindings.get(node).await.ok()?)
            .filter(|(c, proven)| c.off_seen_at.is_some() && proven.message.contains("passive confirmation"))
    })
    .await;
    lag.join().unwrap();
    assert!(off.on_seen_at.is_some() && off.off_seen_at.is_some(), "{off:?}");
    assert_eq!(proven.status, "False", "no level rests on a passive confirmation yet: {proven:?}");
    assert!(looks(&pdu) >= before + 2, "the verifier looked at A1 again after the power-off");
    log(format!(
        "{node}: after a power-off through the BMC, A1 still drawing at the first look and at the floor at the next, within settle: both agreements seen, the level not usable yet ({})",
        proven.message
    ));
}
