//! e2e scenarios: an attested release, and forgeries refused.

use crate::*;

/// Two machines lose power together with their BMCs. Both fences end with Succeeded=False. A user
/// with the attester role attests x-1 (the CLI): released, the reason verbatim in the evidence, the
/// taint owned by the remediation and removed by its finalizer once the machine is back and NHC
/// deletes it. The API server rejects an attestation naming another user and any change of a spec;
/// coroner refuses one for x-2 while its Lease renews, and one that expired.
pub(crate) async fn attested_release_and_forgeries_refused(world: &mut World) {
    world.restart_coroners(2, &[]);
    let admin: Api<CoronerAttestation> = Api::namespaced(world.client.clone(), CORONER_NS);
    let alice_config = world.impersonating_kubeconfig("alice", &[]);
    let alice: Api<CoronerAttestation> = Api::namespaced(world::client_for(&alice_config).await, CORONER_NS);
    let bob: Api<CoronerAttestation> =
        Api::namespaced(world::client_for(&world.impersonating_kubeconfig("bob", &[])).await, CORONER_NS);
    let node_uid = |node: &str| {
        let node = node.to_owned();
        let client = world.client.clone();
        async move { world::node_object(&client, &node).await.and_then(|n| n.metadata.uid).unwrap() }
    };
    let (uid1, uid2, uid4) = (node_uid("x-1").await, node_uid("x-2").await, node_uid("x-4").await);

    // f-1 (no NodeHealthCheck selects it: its remediation is created as NHC would) gets another
    // password before its outage, so its binding was never verified with what its fence used (A2).
    let wrong = unverified_before_outage(world, "f-1").await;

    let dead = Instant::now();
    world.node_mut("x-1").lose_power();
    world.node_mut("x-2").lose_power();
    world.node_mut("x-3").lose_power();
    world.node_mut("x-4").lose_power();
    // x-3's Lease is renewed once while its fence runs (something on it half alive): FenceSawLife.
    wait_remediation(world, "x-3", "admitted", LONG, |r| {
        r.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p != coroner::api::Phase::Pending)
    })
    .await;
    renew_lease_once(world, "x-3").await;
    log("x-3: its Lease renewed once while its fence ran");
    let mut failed = Vec::new();
    for node in ["x-1", "x-2", "x-4"] {
        let r =
            wait_remediation(world, node, "Succeeded=False", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "False"))
                .await;
        assert_eq!(succeeded(&r).unwrap().1, "BmcUnreachable", "{node}");
        let progress = r.status.as_ref().unwrap().progress.clone().unwrap();
        assert!(progress.lease_renew_time_at_failure.is_some(), "{node}: the Lease at the failure is recorded");
        failed.push(r);
    }
    let fence_failed = dead.elapsed();
    log(format!("x-1, x-2: BMC dead → Succeeded=False (BmcUnreachable) after {fence_failed:.1?}; nothing released"));
    assert!(!taint_keys(world, "x-1").await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));

    // The attester cannot be forged: bob may create attestations, but not in alice's name.
    let forged = bob.create(&PostParams::default(), &attestation_object("x-1", &uid1, "alice", "15m")).await;
    let message = forged.expect_err("an attestation naming another user was admitted").to_string();
    assert!(message.contains("spec.attestedBy must name the user who creates the attestation: bob"), "{message}");
    log(format!("x-1: bob's attestation naming alice rejected by the API server: {message}"));

    // alice looks first (--dry-run creates nothing), then attests with the CLI: preconditions, what
    // will happen, coroner's verdict.
    let (ok, out) = coroner_cli(&alice_config, &["x-1", "--reason", REASON, "--dry-run"]);
    assert!(ok && out.contains("What happens:") && out.contains("nothing created"), "{out}");
    let of_x1 = || async {
        let all = admin.list(&ListParams::default()).await.unwrap().items;
        all.into_iter().filter(|a| a.spec.node_name == "x-1").collect::<Vec<_>>()
    };
    assert!(of_x1().await.is_empty(), "a dry run created an attestation");
    let attested = Instant::now();
    let (ok, out) = coroner_cli(&alice_config, &["x-1", "--reason", REASON]);
    assert!(ok, "coroner attest x-1 failed:\n{out}");
    for needle in
        ["as alice", "FenceEndedWithoutProof", "LeaseUnchangedSinceFence", "What happens:", "released: Released"]
    {
        assert!(out.contains(needle), "`{needle}` missing from:\n{out}");
    }
    let released_after = dead.elapsed();
    log(format!(
        "x-1: attested by alice and released {:.1?} after the attestation; BMC dead → released {released_after:.1?} (of which BMC dead → Succeeded=False {fence_failed:.1?})",
        attested.elapsed()
    ));
    // Its name is generated: a released attestation never blocks the node's next one.
    let attestation = of_x1().await.pop().expect("alice's attestation");
    let x1 = attestation.name_any();
    assert!(x1.starts_with("x-1-"), "{x1}");
    assert_eq!(attestation_phase(&attestation), "Released");
    assert_eq!(attestation.spec.attested_by, "alice");
    let released = attestation.status.as_ref().unwrap().released.clone().unwrap();
    let remediation = remediations(world, "x-1").await.pop().unwrap();
    assert_eq!(released.remediation, remediation.name_any());
    assert_eq!(succeeded(&remediation).unwrap(), ("False".into(), "BmcUnreachable".into()), "Succeeded stays False");
    let release = remediation.status.as_ref().unwrap().evidence.clone().unwrap().release.unwrap();
    assert_eq!(release.kind, coroner::api::ReleaseKind::OperatorAttested);
    let record = release.attestation.unwrap();
    assert_eq!((record.attested_by.as_str(), record.reason.as_str()), ("alice", REASON), "verbatim");
    assert_eq!(record.state, coroner::api::AttestedReleaseState::Released);
    assert!(release.taint_owned);
    // A4: its fence looked through the dead BMC once more first, and nothing answered.
    let look = remediation.status.as_ref().unwrap().evidence.clone().unwrap().attestation_look.unwrap();
    assert_eq!(
        (look.attestation_uid, look.found),
        (attestation.uid().unwrap(), Some(coroner::api::LookFound::NoAnswer))
    );
    let node = world::node_object(&world.client, "x-1").await.unwrap();
    assert!(coroner::taints::owns(&node, coroner::taints::CoronerTaint::OutOfService, &remediation.uid().unwrap()));
    // R3: the Event names the release an approval must name, as the confirmed record gives it.
    let id = coroner::guard::release_id(&remediation.uid().unwrap(), remediation.status.as_ref().unwrap()).unwrap();
    for (namespace, name) in [(CORONER_NS, remediation.name_any()), ("default", "x-1".to_owned())] {
        let events = events_about(world, namespace, &name, "OperatorAttested").await;
        assert!(
            events.iter().any(|e| e
                .note
                .as_deref()
                .is_some_and(|n| n.contains("rack B PDU 2") && n.contains(&format!("(release {id})")))),
            "{namespace}/{name}: {events:?}"
        );
    }

    // The spec never changes, not even for an admin; metadata stays writable. (alice may not update at all.)
    let mut edited = attestation.clone();
    edited.spec.reason = "something else".into();
    let denied = admin.replace(&x1, &PostParams::default(), &edited).await.expect_err("the admin changed the spec");
    assert!(denied.to_string().contains("never changes"), "{denied}");
    let error = alice.replace(&x1, &PostParams::default(), &edited).await.expect_err("alice changed the spec");
    assert!(error.to_string().contains("forbidden") || error.to_string().contains("never changes"), "{error}");
    let labelled = json!({"metadata": {"labels": {"incident": "INC-4711"}}});
    admin.patch(&x1, &PatchParams::default(), &Patch::Merge(&labelled)).await.expect("metadata stays writable");
    log(format!("x-1: a spec update rejected by the API server ({denied}); a label added"));

    // x-2's Lease renews (a kubelet half alive): refused, with its reason.
    let renewing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let renewer = {
        let (leases, renewing) = (
            Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(world.client.clone(), "kube-node-lease"),
            renewing.clone(),
        );
        tokio::spawn(async move {
            while renewing.load(std::sync::atomic::Ordering::Acquire) {
                if let Ok(mut lease) = leases.get("x-2").await {
                    lease.spec.get_or_insert_with(Default::default).renew_time =
                        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now()));
                    let _ = leases.replace("x-2", &PostParams::default(), &lease).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    alice.create(&PostParams::default(), &attestation_object("x-2", &uid2, "alice", "15m")).await.unwrap();
    let refused = wait_attestation(&admin, "x-2", "Refused", |a| attestation_phase(a) == "Refused").await;
    assert_eq!(released_condition(&refused).unwrap(), ("False".into(), "LeaseChangedSinceFence".into()));
    assert!(!events_about(world, CORONER_NS, "x-2", "LeaseChangedSinceFence").await.is_empty(), "a Warning Event");
    renewing.store(false, std::sync::atomic::Ordering::Release);
    renewer.await.unwrap();
    assert!(!taint_keys(world, "x-2").await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    log("x-2: attestation while its Lease renews refused (LeaseChangedSinceFence); nothing released");

    let (ok, out) = coroner_cli(&alice_config, &["x-2"]);
    assert!(!ok && out.contains("--reason"), "attest without --reason:\n{out}");
    let (ok, out) = coroner_cli(&alice_config, &["x-2", "--clear"]);
    assert!(ok && out.contains("nothing was released"), "{out}");

    // An attestation that expired before coroner saw it is refused.
    world.restart_coroners(0, &[]);
    alice.create(&PostParams::default(), &attestation_object("x-2", &uid2, "alice", "1s")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    world.restart_coroners(2, &[]);
    let expired = wait_attestation(&admin, "x-2", "Refused", |a| attestation_phase(a) == "Refused").await;
    assert_eq!(released_condition(&expired).unwrap(), ("False".into(), "AttestationExpired".into()));
    admin.delete("x-2", &Default::default()).await.unwrap();
    log("x-2: an expired attestation refused (AttestationExpired)");

    // x-3: its fence saw its Lease renewed, so an attestation is refused (FenceSawLife) and says how
    // an attester who accepts that evidence may say so; with that acknowledgement it releases, and the
    // acknowledgement is in the record, the Event and the override metric.
    wait_remediation(world, "x-3", "Succeeded=False", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "False")).await;
    let reason = "x-3 unplugged at 10:12 after its PSU failed (INC-4712)";
    let (ok, out) = coroner_cli(&alice_config, &["x-3", "--reason", reason]);
    assert!(!ok && out.contains("FenceSawLife") && out.contains("--acknowledge FenceSawLife="), "{out}");
    let acknowledgement = out
        .split("--acknowledge ")
        .nth(1)
        .and_then(|rest| rest.split([',', ' ', '\n']).next())
        .expect("the refusal prints the acknowledgement")
        .to_owned();
    log(format!("x-3: attestation refused (FenceSawLife); it prints --acknowledge {acknowledgement}"));
    let (ok, out) = coroner_cli(&alice_config, &["x-3", "--reason", reason, "--acknowledge", &acknowledgement]);
    assert!(ok && out.contains("released"), "coroner attest x-3 --acknowledge failed:\n{out}");
    let remediation3 = remediations(world, "x-3").await.pop().unwrap();
    let release3 = remediation3.status.as_ref().unwrap().evidence.clone().unwrap().release.unwrap();
    let acknowledged = release3.attestation.unwrap().acknowledged;
    assert_eq!(acknowledged.len(), 1, "{acknowledged:?}");
    assert_eq!(acknowledged[0].reason, coroner::api::AcknowledgedReason::FenceSawLife);
    let events = events_about(world, CORONER_NS, &remediation3.name_any(), "OperatorAttested").await;
    assert!(events.iter().any(|e| e.note.as_deref().is_some_and(|n| n.contains("FenceSawLife"))), "{events:?}");
    let overrides = metric(world, "coroner_safety_overrides_total{kind=\"AcknowledgedFenceSawLife\"}").await;
    assert_eq!(overrides, 1.0);
    log(format!(
        "x-3: attested with --acknowledge {acknowledgement}: released, the acknowledgement recorded, in the Event and counted"
    ));

    // x-4 (A4): its BMC answers again after its fence failed, its machine on with it, and alice, who
    // does not know, attests: the fence's look finds the machine, proves it off through the BMC and
    // releases on that proof; the attestation is superseded.
    // Its network still cut (the kubelet silent), the BMC back with its machine on.
    world.node("x-4").partition();
    let machine = world.node("x-4");
    machine.note(json!({"event": timeline::BY_HAND, "system": machine.spec.systems[0].1, "reset_type": "On"}));
    world.node_mut("x-4").restart_bmc();
    alice.create(&PostParams::default(), &attestation_object("x-4", &uid4, "alice", "15m")).await.unwrap();
    let superseded = wait_attestation(&admin, "x-4", "Refused", |a| attestation_phase(a) == "Refused").await;
    assert_eq!(released_condition(&superseded).unwrap(), ("False".into(), "Superseded".into()));
    let proven = wait_remediation(world, "x-4", "released on the proof taken again", LONG, |r| {
        r.status.as_ref().and_then(|s| s.evidence.as_ref()?.release.as_ref()).is_some()
    })
    .await;
    let evidence = proven.status.as_ref().unwrap().evidence.clone().unwrap();
    assert_eq!(evidence.release.unwrap().kind, coroner::api::ReleaseKind::BmcProof);
    assert_eq!(evidence.attestation_look.unwrap().found, Some(coroner::api::LookFound::ProvingAgain));
    assert!(!events_about(world, CORONER_NS, &proven.name_any(), coroner::fence::LOOK_ANSWERED).await.is_empty());
    log(
        "x-4: its BMC back with the machine on after the fence failed; an attestation's look found the machine: proven off through the BMC and released on that proof, the attestation Superseded",
    );
    admin.delete("x-4", &Default::default()).await.unwrap();

    // f-1: its fence failed like x-1's (its BMC dead), but the binding it used was not the one
    // verified: refused BindingUnverified, saying what changed and which acknowledgement would do.
    wait_remediation(world, "f-1", "Succeeded=False", LONG, |r| succeeded(r).is_some_and(|s| s.0 == "False")).await;
    let (ok, out) = coroner_cli(&alice_config, &["f-1", "--reason", "f-1 unplugged (INC-4713)"]);
    assert!(
        !ok && out.contains("BindingUnverified")
            && out.contains("credentials or CA bundle changed")
            && out.contains("--acknowledge BindingUnverified="),
        "{out}"
    );
    assert!(!taint_keys(world, "f-1").await.iter().any(|k| k == "node.kubernetes.io/out-of-service"));
    log("f-1: its Secret changed before the outage: attestation refused (BindingUnverified, credentials changed)");
    wrong.restore(world).await;

    // The guard watches x-1 as after any release; nothing proved which system is x-1's, and its BMC
    // is dead: blind, never taken for Off.
    let blind = wait_remediation(world, "x-1", "Guard=Unknown GuardBlind", SHORT, |r| {
        condition(r, coroner::guard::GUARD) == Some(("Unknown".into(), coroner::guard::BLIND.into()))
    })
    .await;
    assert!(blind.status.as_ref().unwrap().evidence.as_ref().unwrap().identity.is_none());
    log("x-1: the guard watches the attested release: GuardBlind while its BMC is dead");

    // R2 for an attested release: x-1's BMC answers again with its machine on (its kubelet still cut
    // off), and nobody approved: the guard proves through the binding which system is x-1's, then
    // switches it off within its bound.
    let interval = format!("{}s", GUARD_INTERVAL.as_secs());
    world.restart_coroners(2, &["--guard-interval", &interval]);
    world.node("x-1").partition();
    let machine = world.node("x-1");
    machine.note(json!({"event": timeline::BY_HAND, "system": machine.spec.systems[0].1, "reset_type": "On"}));
    world.node_mut("x-1").restart_bmc();
    let on = Instant::now();
    wait_for("x-1: the attested release's machine switched off by the guard", SHORT, || async {
        (resets(world, "x-1", "ForceOff") == 1 && world.node("x-1").power_state() == "Off").then_some(())
    })
    .await;
    let off_again = on.elapsed();
    let name = remediation.name_any();
    wait_for("x-1: a GuardForceOffSent Event", SHORT, || async {
        events_about(world, CORONER_NS, &name, "GuardForceOffSent").await.pop()
    })
    .await;
    assert!(!events_about(world, CORONER_NS, &name, "GuardIdentityVerified").await.is_empty(), "identity first");
    log(format!(
        "x-1: its BMC back with the machine on, not approved → GuardIdentityVerified, then switched off by the guard {off_again:.1?} after the BMC came back (guard interval {interval})"
    ));

    // The machines come back: NHC deletes the remediations, the finalizer removes the attested taint.
    // x-1 is released, so its return is approved first (docs/operations.md), or the guard would
    // switch it off again; the finalizer removes the approval too.
    let (ok, out) = coroner_approve(&world.kubeconfig, "x-1", "x-1 back after INC-4711");
    assert!(ok, "coroner approve: {out}");
    world.node("x-1").heal();
    power_on_by_hand(world, "x-1").await;
    world.node_mut("x-2").restart_bmc();
    // x-4's Reboot switched it on again after its release: its network back, it rejoins.
    world.node("x-4").heal();
    let (ok, out) = coroner_approve(&world.kubeconfig, "x-3", "x-3 back after INC-4712");
    assert!(ok, "coroner approve: {out}");
    world.node_mut("x-3").restart_bmc();
    for node in ["x-1", "x-2", "x-3", "x-4", "f-1"] {
        wait_remediations_gone(world, node).await;
    }
    let keys = taint_keys(world, "x-1").await;
    assert!(
        !keys.iter().any(|k| k == "node.kubernetes.io/out-of-service" || k.starts_with("coroner.dev/")),
        "{keys:?}"
    );
    let annotations = world::node_object(&world.client, "x-1").await.unwrap().metadata.annotations.unwrap_or_default();
    assert!(!annotations.keys().any(|k| k.starts_with("coroner.dev/")), "{annotations:?}");
    assert_eq!(attestation_phase(&admin.get(&x1).await.unwrap()), "Released", "the record stays");
    let (ok, out) = coroner_cli(&alice_config, &["x-1", "--clear"]);
    assert!(ok && out.contains("stays as the record") && out.contains("stays released"), "{out}");
    // The record outlives its remediation: people may not delete it, a namespace deletion may.
    let denied = admin.delete(&x1, &Default::default()).await.expect_err("the admin deleted a released attestation");
    assert!(denied.to_string().contains("is the record of a release no device"), "{denied}");
    assert_eq!(attestation_phase(&admin.get(&x1).await.unwrap()), "Released");
    records_go_with_their_namespace(world, &uid1).await;
    log(
        "x-1: back and healthy; NHC deleted the remediation and its finalizer the taint; the attestation stays as the record (its deletion denied); a namespace holding a released one is deleted",
    );
}

/// A node whose binding's Secret was given a wrong password before its outage, fenced by a remediation
/// created by hand once it is `Ready=Unknown`.
pub(crate) struct Unverified(&'static str);

/// Gives `node`'s Secret a wrong password, waits until the verifier has tried it (so coroner's
/// clients are built from it), then the machine loses power with its BMC and a remediation is
/// created for it as NHC would.
pub(crate) async fn unverified_before_outage(world: &mut World, node: &'static str) -> Unverified {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let wrong = json!({"stringData": {"password": "mistyped"}});
    secrets.patch(&format!("{node}-bmc"), &PatchParams::default(), &Patch::Merge(&wrong)).await.unwrap();
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    wait_for(&format!("{node}: the verifier tried the new password"), SHORT, || async {
        let status = bindings.get(node).await.ok()?.status?;
        let verified = status.conditions.iter().find(|c| c.type_ == "IdentityVerified")?;
        (verified.reason == "BmcAuthenticationFailed").then_some(())
    })
    .await;
    world.node_mut(node).lose_power();
    wait_for(&format!("{node} Ready=Unknown"), LONG, || async {
        (ready(world, node).await.as_deref() == Some("Unknown")).then_some(())
    })
    .await;
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    let remediation: CoronerRemediation = serde_json::from_value(json!({
        "apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediation",
        "metadata": {"generateName": format!("{node}-"), "namespace": CORONER_NS, "annotations": {contract::NODE_NAME_ANNOTATION: node}},
        "spec": {"action": "Reboot", "powerOffTimeout": "20s", "leaseFreshness": "5s", "retry": {"count": 2, "interval": "2s"}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &remediation).await.unwrap();
    log(format!(
        "{node}: its Secret given a wrong password (the verifier failed on it), then power lost; a remediation created"
    ));
    Unverified(node)
}

impl Unverified {
    /// The right password back, the machine and its BMC back, the remediation deleted.
    async fn restore(self, world: &mut World) {
        let node = self.0;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
        let right = json!({"stringData": {"password": PASSWORD}});
        secrets.patch(&format!("{node}-bmc"), &PatchParams::default(), &Patch::Merge(&right)).await.unwrap();
        world.node_mut(node).restart_bmc();
        power_on_by_hand(world, node).await;
        let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
        for r in remediations(world, node).await {
            api.delete(&r.name_any(), &Default::default()).await.unwrap();
        }
    }
}

/// Something on `node` renews its Lease once, as a half-alive kubelet would.
pub(crate) async fn renew_lease_once(world: &World, node: &str) {
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(world.client.clone(), "kube-node-lease");
    let mut lease = leases.get(node).await.unwrap();
    lease.spec.get_or_insert_with(Default::default).renew_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now()));
    leases.replace(node, &PostParams::default(), &lease).await.unwrap();
}

/// A released attestation in a namespace being deleted: the namespace controller may delete it (the
/// record policy exempts it), so the deletion completes.
pub(crate) async fn records_go_with_their_namespace(world: &World, node_uid: &str) {
    let ns = "coroner-records";
    world.kubectl(&["create", "namespace", ns]);
    let api: Api<CoronerAttestation> = Api::namespaced(world.client.clone(), ns);
    let mut record = attestation_object("x-1", node_uid, "harness-admin", "15m");
    record.metadata.namespace = Some(ns.into());
    let created = api.create(&PostParams::default(), &record).await.expect("an attestation, as the admin");
    let status = json!({"status": {"phase": "Released"}});
    api.patch_status(&created.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await.expect("Released");
    assert!(api.delete(&created.name_any(), &Default::default()).await.is_err(), "a person deleted the record");
    world.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(world.client.clone());
    wait_for("the namespace holding a released attestation deleted", SHORT, || async {
        namespaces.get_opt(ns).await.ok().and_then(|n| n.is_none().then_some(()))
    })
    .await;
}
