//! e2e scenarios: the kubectl plugin: verify and import-far.

use crate::*;

/// `kubectl coroner verify`, as a user bound only to the shipped coroner-viewer roles: the controller
/// reads the BMCs and answers in a CoronerVerification; the user needs no BMC credential.
pub(crate) async fn cli_verify(world: &mut World) {
    world.restart_coroners(2, &[]);
    world.kubectl(&["create", "clusterrolebinding", "carol-viewer", "--clusterrole=coroner-viewer", "--user=carol"]);
    world.kubectl(&[
        "create",
        "rolebinding",
        "carol-viewer",
        "-n",
        CORONER_NS,
        "--role=coroner-viewer",
        "--user=carol",
    ]);
    let carol = world.impersonating_kubeconfig("carol", &[]);
    // The apiserver's RBAC authorizer reads bindings from its informer cache: wait until both
    // bindings are seen before the first verify, or it may be refused (403) by a cache a moment old.
    wait_for("carol's viewer bindings are authorized", Duration::from_secs(30), || async {
        let may = |verb: &str, resource: &str, namespace: Option<&str>| {
            let mut args = vec!["auth", "can-i", verb, resource, "--as", "carol"];
            if let Some(ns) = namespace {
                args.extend(["-n", ns]);
            }
            // stdout first, then stderr's warnings ("nodes is not namespace scoped").
            world.kubectl_result(&args).1.lines().next().map(str::trim) == Some("yes")
        };
        let ready = may("create", "coronerverifications.coroner.dev", Some(CORONER_NS))
            && may("watch", "coronerverifications.coroner.dev", Some(CORONER_NS))
            && may("list", "nodes", None);
        ready.then_some(())
    })
    .await;
    let row = |out: &str, node: &str| {
        out.lines().find(|l| l.split_whitespace().next() == Some(node)).unwrap_or_default().to_owned()
    };

    let (code, out, err) = coroner_verify(&carol, &["spare-1", "spare-2"]);
    assert_eq!(code, 0, "both would be fenced:\n{out}{err}");
    assert!(row(&out, "spare-1").contains(" yes ") && row(&out, "spare-1").contains("Exact match"), "{out}");
    log(format!("verify spare-1 spare-2 (as carol, a viewer): exit 0\n{out}"));

    // A binding whose endpoint reaches another machine's BMC, one that trusts another CA, and a Node
    // no binding names.
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let endpoint = |machine: &str| json!({"spec": {"redfish": {"endpoint": world.node(machine).machine.endpoint()}}});
    bindings.patch("b-1", &PatchParams::default(), &Patch::Merge(endpoint("spare-3"))).await.unwrap();
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(world.client.clone(), CORONER_NS);
    let other = String::from_utf8(peers().pem("other-ca")).unwrap();
    let map =
        serde_json::from_value(json!({"metadata": {"name": "verify-other-ca"}, "data": {"ca.crt": other}})).unwrap();
    maps.create(&PostParams::default(), &map).await.unwrap();
    let trust =
        |name: &str| json!({"spec": {"tls": {"caBundleRef": {"kind": "ConfigMap", "name": name, "key": "ca.crt"}}}});
    bindings.patch("spare-2", &PatchParams::default(), &Patch::Merge(trust("verify-other-ca"))).await.unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.client.clone());
    let unbound: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": "unbound-1"}})).unwrap();
    nodes.create(&PostParams::default(), &unbound).await.unwrap();
    let (code, out, err) = coroner_verify(&carol, &["spare-1", "b-1", "spare-2", "unbound-1"]);
    assert_eq!(code, 1, "some would not be fenced:\n{out}{err}");
    assert!(row(&out, "spare-1").contains(" yes "), "{out}");
    for (node, why) in [("b-1", "NO"), ("spare-2", "NO"), ("unbound-1", "no BmcBinding")] {
        assert!(row(&out, node).contains(why), "{node}: {out}");
    }
    assert!(row(&out, "spare-2").to_lowercase().contains("certificate"), "the TLS failure in words: {out}");
    log(format!("verify with a wrong mapping, another CA and no binding: exit 1\n{out}"));

    let (code, out, err) = coroner_verify(&carol, &["--all", "-o", "json"]);
    assert_eq!(code, 1, "b-1 and spare-2 are still broken:\n{out}{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("JSON: {e}\n{out}"));
    let listed: Vec<&str> = answer["nodes"].as_array().unwrap().iter().filter_map(|n| n["node"].as_str()).collect();
    assert!(listed.contains(&"a-1") && listed.contains(&"spare-1"), "NHC e2e-main selects them: {listed:?}");
    assert!(!listed.contains(&"unbound-1"), "no NodeHealthCheck selects it: {listed:?}");
    let unselected = answer["unselected"].as_array().unwrap();
    assert!(unselected.iter().any(|n| n == "unbound-1"), "listed apart: {unselected:?}");
    log(format!("verify --all -o json: {} nodes selected, {} listed apart", listed.len(), unselected.len()));
    let (code, table, _) = coroner_verify(&carol, &["--all"]);
    log(format!("verify --all (as carol): exit {code}\n{table}"));

    let (code, _, err) = coroner_verify(&carol, &[]);
    assert_eq!(code, 2, "no node and no --all is a usage error: {err}");

    bindings.patch("b-1", &PatchParams::default(), &Patch::Merge(endpoint("b-1"))).await.unwrap();
    bindings.patch("spare-2", &PatchParams::default(), &Patch::Merge(trust("bmc-ca"))).await.unwrap();
    maps.delete("verify-other-ca", &Default::default()).await.unwrap();
    nodes.delete("unbound-1", &Default::default()).await.unwrap();
    let verifications: Api<coroner::api::CoronerVerification> = Api::namespaced(world.client.clone(), CORONER_NS);
    let kept = verifications.list(&ListParams::default()).await.unwrap().items;
    assert!(
        kept.iter().all(|v| v.status.as_ref().and_then(|s| s.completed_at.as_ref()).is_some()),
        "answered and kept an hour"
    );

    // An upgrade that did not apply the CRDs first: coroner acts on nothing and says why.
    let crd = "crd/coronerverifications.coroner.dev";
    let revision = coroner::api::SCHEMA_REVISION_ANNOTATION;
    world.kubectl(&["annotate", "--overwrite", crd, &format!("{revision}=1")]);
    world.stop_coroners();
    let replica = world.start_coroner(&[]);
    wait_for("a replica that says its CRDs are outdated", SHORT, || async {
        let metrics = world.coroners.iter().find(|r| r.name == replica)?.metrics().await;
        metrics.lines().any(|l| l == "coroner_crd_outdated 1").then_some(())
    })
    .await;
    let log_text = std::fs::read_to_string(world.dir.join(format!("{replica}.log"))).unwrap_or_default();
    assert!(
        log_text.contains("CrdOutdated") && !log_text.contains("became the leader"),
        "{replica} acted with old CRDs"
    );
    world.kubectl(&["annotate", "--overwrite", crd, &format!("{revision}={}", coroner::api::SCHEMA_REVISION)]);
    world.restart_coroners(2, &[]);
    log("an outdated CRD: the replica stayed out of the election and said CrdOutdated (coroner_crd_outdated 1)");
}

/// `kubectl coroner import-far --apply` against FAR templates in the cluster (FAR's CRD written from
/// its documented API): an IPMI template whose NodeHealthCheck selects an IPMI machine gets its
/// binding and its credentials (copied from FAR's shared Secret) and is verified; a Redfish one with
/// FAR's ssl-insecure gets its certificate pinned through the controller and is verified, but for a
/// BMC that does not answer; an unsupported agent is listed (exit 3). No credential is printed.
pub(crate) async fn cli_import_far(world: &mut World) {
    let (node, redfish) = ("far-1", "far-2");
    world.add_ipmi_node(node, &uuid(131), coroner::ipmi::GuidLayout::Ipmi, &[(POOL, "far")]).await;
    world.add_node(redfish, &uuid(132), &[(POOL, "far-redfish")], 0.0).await;
    // As a FAR user has them: no coroner binding yet.
    for name in [node, redfish] {
        world.kubectl(&["delete", "-n", CORONER_NS, &format!("bmcbinding/{name}"), &format!("secret/{name}-bmc")]);
    }
    let redfish_port = world.node(redfish).machine.port.to_string();
    let crd = support::machine::repo().join("tests/e2e/far-template-crd.yaml");
    world.kubectl(&["apply", "-f", crd.to_str().unwrap()]);
    world.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/fenceagentsremediationtemplates.fence-agents-remediation.medik8s.io",
    ]);
    world.kubectl(&["create", "namespace", "far-system"]);
    let far_password = PASSWORD;
    world.kubectl(&[
        "create",
        "secret",
        "generic",
        "-n",
        "far-system",
        "far-shared",
        &format!("--from-literal=--username={USER}"),
        &format!("--from-literal=--password={far_password}"),
    ]);
    let port = world.ipmi_nodes[node].bmc.0.port.to_string();
    let templates = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "fence-agents-remediation.medik8s.io/v1alpha1", "kind": "FenceAgentsRemediationTemplate",
         "metadata": {"name": "far-ipmi", "namespace": "far-system"},
         "spec": {"template": {"spec": {"agent": "fence_ipmilan", "sharedSecretName": "far-shared",
                  "remediationStrategy": "OutOfServiceTaint",
                  "sharedparameters": {"--lanplus": "", "--ip": "127.0.0.1", "--action": "off"},
                  "nodeparameters": {"--ipport": {node: port}}}}}},
        {"apiVersion": "fence-agents-remediation.medik8s.io/v1alpha1", "kind": "FenceAgentsRemediationTemplate",
         "metadata": {"name": "far-redfish", "namespace": "far-system"},
         "spec": {"template": {"spec": {"agent": "fence_redfish", "sharedSecretName": "far-shared",
                  "sharedparameters": {"--ip": "127.0.0.1", "--ssl-insecure": "", "--action": "off"},
                  "nodeparameters": {"--ipport": {redfish: redfish_port, "far-4": "1"}}}}}},
        {"apiVersion": "fence-agents-remediation.medik8s.io/v1alpha1", "kind": "FenceAgentsRemediationTemplate",
         "metadata": {"name": "far-aws", "namespace": "far-system"},
         "spec": {"template": {"spec": {"agent": "fence_aws", "nodeparameters": {"--plug": {"far-3": "i-0abc"}}}}}},
    ]});
    let file = world.dir.join("far-templates.json");
    std::fs::write(&file, templates.to_string()).unwrap();
    world.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    world
        .create_nhc(json!({
            "apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck",
            "metadata": {"name": "e2e-far"},
            "spec": {"selector": {"matchLabels": {POOL: "far"}},
                     "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "300s"}],
                     "remediationTemplate": {"apiVersion": "fence-agents-remediation.medik8s.io/v1alpha1",
                         "kind": "FenceAgentsRemediationTemplate", "namespace": "far-system", "name": "far-ipmi"}},
        }))
        .await;
    let output = std::process::Command::new(support::machine::repo().join("target/debug/coroner"))
        .args(["import-far", "--apply", "--far-namespace", "far-system", "--namespace", CORONER_NS, "--kubeconfig"])
        .arg(&world.kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run coroner import-far");
    let (out, err) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(3), "applied and verified, two templates need attention:\n{out}{err}");
    assert!(out.contains(&format!("applied BmcBinding {CORONER_NS}/{node} and its Secret {node}-bmc")), "{out}");
    let row = out.lines().find(|l| l.split_whitespace().next() == Some(node)).unwrap_or_default();
    assert!(row.contains(" yes "), "{node} verified through the imported binding:\n{out}{err}");
    // FAR's --ssl-insecure: the certificate is read through the controller and pinned; a BMC that does
    // not answer stays commented, with the command that reads its pin.
    assert!(out.contains(&format!("applied BmcBinding {CORONER_NS}/{redfish} and its Secret")), "{out}");
    let pinned = out.lines().find(|l| l.split_whitespace().next() == Some(redfish)).unwrap_or_default();
    assert!(pinned.contains(" yes ") && pinned.contains("pin"), "{redfish} verified through its pin:\n{out}{err}");
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let binding = bindings.get(redfish).await.unwrap();
    let how = binding.annotations().get("coroner.dev/pinned-at-first-contact").cloned().unwrap_or_default();
    assert!(how.contains("through the controller: verify out of band"), "{how}");
    assert!(out.contains("openssl s_client -connect 127.0.0.1:1 "), "far-4's BMC does not answer: {out}");
    assert!(out.contains("agent fence_aws is not supported"), "{out}");
    assert!(!out.contains(far_password) && !err.contains(far_password), "no credential printed");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let copied = secrets.get(&format!("{node}-bmc")).await.unwrap().data.unwrap_or_default();
    assert_eq!(copied.get("username").map(|v| v.0.as_slice()), Some(USER.as_bytes()), "copied from FAR's Secret");
    let templates: Api<coroner::api::CoronerRemediationTemplate> = Api::namespaced(world.client.clone(), CORONER_NS);
    let imported = templates.get("far-ipmi").await.unwrap().spec.template.spec;
    assert_eq!(
        (imported.action, imported.remediation_strategy),
        (coroner::api::FenceAction::Off, coroner::api::RemediationStrategy::OutOfServiceTaint)
    );
    log(format!("import-far --apply: exit 3; {node} imported from FAR's far-ipmi and verified\n{out}"));
    world.kubectl(&["delete", "nodehealthcheck", "e2e-far"]);
}

pub(crate) async fn events_about(
    world: &World,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), namespace);
    let list = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason) && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}
