//! e2e scenarios: bindings: admission, verification, a wrong mapping.

use crate::*;

pub(crate) async fn wrong_mapping_refused_and_escalation_refused(world: &World) {
    // b-1's binding points at spare-3's BMC: a wrong mapping.
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    // A merge patch: the periodic verification writes the binding's status meanwhile.
    let point_at = |machine: &str| json!({"spec": {"redfish": {"endpoint": world.node(machine).machine.endpoint()}}});
    bindings.patch("b-1", &PatchParams::default(), &Patch::Merge(point_at("spare-3"))).await.unwrap();
    let spare_before = world.node("spare-3").machine.requests().len();
    world.node("b-1").partition();
    let first = wait_remediation(world, "b-1", "first remediation refused", SHORT, |r| {
        succeeded(r).is_some_and(|s| s.0 == "False")
    })
    .await;
    // Two bindings reaching one BMC: both are unusable, whichever node is meant.
    assert_eq!(succeeded(&first).unwrap().1, "BindingConflict");
    assert_eq!(
        first.metadata.annotations.as_ref().unwrap().get("remediation.medik8s.io/template-name").map(String::as_str),
        Some("coroner-primary")
    );
    log(format!("b-1: {} refused: BindingConflict", first.name_any()));
    let second = wait_remediation(world, "b-1", "NHC escalates to the second template, refused too", SHORT, |r| {
        r.metadata.annotations.as_ref().and_then(|a| a.get("remediation.medik8s.io/template-name")).map(String::as_str)
            == Some("coroner-secondary")
            && succeeded(r).is_some_and(|s| s.0 == "False")
    })
    .await;
    assert!(second.name_any().starts_with("b-1-"), "multiple-templates-support: generateName <node>-");
    log(format!("b-1: escalated {} refused: {:?}", second.name_any(), succeeded(&second)));
    assert!(succeeded_message(&first).contains(contract::RETRY_LEVER), "{}", succeeded_message(&first));
    // The other lever, on NHC v0.12.0: with escalatingRemediations, a template that failed is marked
    // timed out for the node and skipped until the node is healthy, even once its remediation is gone.
    let api: Api<CoronerRemediation> = Api::namespaced(world.client.clone(), CORONER_NS);
    api.delete(&first.name_any(), &Default::default()).await.unwrap();
    wait_for("the first remediation deleted", SHORT, || async {
        remediations(world, "b-1").await.iter().all(|r| r.uid() != first.uid()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after: Vec<String> = remediations(world, "b-1").await.iter().map(|r| r.name_any()).collect();
    assert_eq!(after, [second.name_any()], "NHC created a remediation again from a template that had failed");
    log(format!("b-1: {} deleted; NHC does not use coroner-primary again for b-1 (left: {after:?})", first.name_any()));
    let posts: Vec<_> = world
        .node("spare-3")
        .machine
        .requests()
        .into_iter()
        .skip(spare_before)
        .filter(|r| r.starts_with("POST"))
        .collect();
    assert_eq!(posts, Vec::<String>::new(), "the wrongly mapped machine got a power action");
    assert_eq!(world.node("spare-3").power_state(), "On");
    assert!(
        !taint_keys(world, "b-1")
            .await
            .iter()
            .any(|k| k.starts_with("coroner.dev/") || k == "node.kubernetes.io/out-of-service")
    );
    world.node("b-1").heal();
    wait_remediations_gone(world, "b-1").await;
    bindings.patch("b-1", &PatchParams::default(), &Patch::Merge(point_at("b-1"))).await.unwrap();
}

/// A machine replaced behind a BmcBinding (same address, another UUID) is caught by the periodic
/// verification within one period, with an Event; putting the right machine back turns it good.
pub(crate) async fn stale_binding_caught_by_periodic_verification(world: &mut World) {
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let verified = |expected: &'static str, reason: &'static str| {
        let bindings = bindings.clone();
        async move {
            let binding = bindings.get_opt("spare-2").await.ok()??;
            let condition = conditions::find(&binding.status?.conditions, "IdentityVerified")?.clone();
            (condition.status == expected && (reason.is_empty() || condition.reason == reason)).then_some(condition)
        }
    };
    wait_for("spare-2 verified", LONG, || verified("True", "")).await;
    // Let the new leader's first round pass, so only the periodic check can catch the swap.
    let since = Timestamp::now();
    wait_for("spare-2 verified by the current leader", LONG, || {
        let bindings = bindings.clone();
        async move {
            let binding = bindings.get_opt("spare-2").await.ok()??;
            (binding.status?.last_verification_time?.0 > since).then_some(())
        }
    })
    .await;
    world.node_mut("spare-2").swap_bmc("5c0a1e00-0000-4000-8000-000000000999");
    let swapped = Instant::now();
    let condition =
        wait_for("spare-2 unverified: IdentityMismatch", SHORT, || verified("False", "IdentityMismatch")).await;
    log(format!(
        "spare-2: wrong machine behind the binding detected after {:.1?} (period 10s): {}",
        swapped.elapsed(),
        condition.message
    ));
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), CORONER_NS);
    wait_for("an IdentityMismatch Event", SHORT, || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.into_iter().find(|e| {
            e.reason.as_deref() == Some("IdentityMismatch")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("spare-2")
        })
    })
    .await;
    world.node_mut("spare-2").restart_bmc();
    wait_for("spare-2 verified again", SHORT, || verified("True", "")).await;
}

/// What the API server answers a new user's mistakes with: each of the CRD's CEL rules names the
/// field and shows a right value (server-side dry runs; nothing is stored).
pub(crate) async fn admission_explains_bad_bindings(world: &World) {
    let binding = |name: &str, redfish: serde_json::Value, tls: serde_json::Value| {
        json!({"apiVersion": "coroner.dev/v1alpha1", "kind": "BmcBinding",
               "metadata": {"name": name, "namespace": CORONER_NS},
               "spec": {"nodeName": "n-1", "redfish": redfish, "credentialsSecretRef": {"name": "n-1-bmc"}, "tls": tls}})
    };
    let pin = json!({"certificateSHA256": peers().pin("leaf")});
    let cases = [
        (
            binding("n-http", json!({"endpoint": "http://127.0.0.12/redfish/v1"}), pin.clone()),
            "endpoint must be an https URL",
        ),
        (
            binding("n-userinfo", json!({"endpoint": "https://admin:pw@127.0.0.12"}), pin.clone()),
            "endpoint must not carry credentials",
        ),
        (
            binding(
                "n-uri",
                json!({"endpoint": "https://127.0.0.12", "systemId": "/redfish/v1/Systems/1"}),
                pin.clone(),
            ),
            "systemId is the last path segment of the system's URI, e.g. 1 or System.Embedded.1",
        ),
        (
            binding("n-pin", json!({"endpoint": "https://127.0.0.12"}), json!({"certificateSHA256": "4f:8e"})),
            "certificateSHA256 is the SHA-256 of the BMC's certificate",
        ),
    ];
    for (i, (object, message)) in cases.iter().enumerate() {
        let file = world.dir.join(format!("n-{i}.json"));
        std::fs::write(&file, object.to_string()).unwrap();
        let (accepted, output) = world.kubectl_result(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
        assert!(!accepted && output.contains(message), "{object}: expected {message:?}, got:\n{output}");
        log(format!("n: {} refused: {}", object["metadata"]["name"], output.lines().last().unwrap_or_default()));
    }
    // IPMI bindings: exactly one kind, no TLS, cipher suite 3 only; a good one is accepted.
    let ipmi = |name: &str, spec: serde_json::Value| {
        let mut spec = spec;
        spec["nodeName"] = json!("n-1");
        spec["credentialsSecretRef"] = json!({"name": "n-1-bmc"});
        json!({"apiVersion": "coroner.dev/v1alpha1", "kind": "BmcBinding",
               "metadata": {"name": name, "namespace": CORONER_NS}, "spec": spec})
    };
    let ipmi_cases = [
        (ipmi("n-none", json!({})), Some("set exactly one of spec.redfish")),
        (
            ipmi(
                "n-both",
                json!({"redfish": {"endpoint": "https://127.0.0.12"}, "ipmi": {"address": "127.0.0.13"}, "tls": pin}),
            ),
            Some("set exactly one of spec.redfish"),
        ),
        (ipmi("n-ipmi-tls", json!({"ipmi": {"address": "127.0.0.13"}, "tls": pin})), Some("an IPMI BMC speaks no TLS")),
        (ipmi("n-suite", json!({"ipmi": {"address": "127.0.0.13", "cipherSuite": 17}})), Some("cipherSuite must be 3")),
        (
            ipmi("n-redfish-no-tls", json!({"redfish": {"endpoint": "https://127.0.0.12"}})),
            Some("set spec.tls.caBundleRef"),
        ),
        (ipmi("n-ipmi", json!({"ipmi": {"address": "127.0.0.13", "port": 6230, "privilege": "Operator"}})), None),
    ];
    for (i, (object, message)) in ipmi_cases.iter().enumerate() {
        let file = world.dir.join(format!("n-ipmi-{i}.json"));
        std::fs::write(&file, object.to_string()).unwrap();
        let (accepted, output) = world.kubectl_result(&["apply", "--dry-run=server", "-f", file.to_str().unwrap()]);
        match message {
            Some(message) => {
                assert!(!accepted && output.contains(message), "{object}: expected {message:?}, got:\n{output}")
            }
            None => assert!(accepted, "{object} refused:\n{output}"),
        }
    }
    log("n: IPMI bindings: exactly one kind, no TLS, cipher suite 3; a good one accepted");
    // The sample as shipped: its pin is openssl's line as printed, accepted as is.
    let sample = coroner_repo_path("config/samples/bmc_binding.yaml");
    let (accepted, output) = world.kubectl_result(&["apply", "--dry-run=server", "-f", &sample]);
    assert!(accepted, "config/samples/bmc_binding.yaml refused:\n{output}");
    // A bare Off is a boolean: the type error comes before any rule (hence the warnings in the docs).
    let bare_off = world.dir.join("n-bare-off.yaml");
    std::fs::write(
        &bare_off,
        format!(
            "apiVersion: coroner.dev/v1alpha1\nkind: CoronerRemediationTemplate\nmetadata: {{name: n-off, namespace: {CORONER_NS}}}\nspec: {{template: {{spec: {{action: off}}}}}}\n"
        ),
    )
    .unwrap();
    let (accepted, output) = world.kubectl_result(&["apply", "--dry-run=server", "-f", bare_off.to_str().unwrap()]);
    assert!(!accepted && output.contains("action") && output.contains("string"), "{output}");
    log(format!("n: a bare `action: off` is refused as a type error: {}", output.lines().last().unwrap_or_default()));
}

pub(crate) fn coroner_repo_path(path: &str) -> String {
    support::machine::repo().join(path).display().to_string()
}

/// A binding is verified again as soon as the Secret or CA bundle it names appears or changes (the
/// replicas run with a 10-minute verify period here, so only the watch can explain it), and its
/// conditions say exactly what the TLS and the credentials are doing.
pub(crate) async fn binding_verified_again_on_secret_or_ca_change(world: &mut World) {
    world.restart_coroners(2, &["--verify-interval", "10m"]);
    let name = "spare-1";
    let bindings: Api<coroner::api::BmcBinding> = Api::namespaced(world.client.clone(), CORONER_NS);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.client.clone(), CORONER_NS);
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(world.client.clone(), CORONER_NS);
    let conditions_of = |type_: &'static str| {
        let bindings = bindings.clone();
        async move {
            let binding = bindings.get_opt(name).await.ok()??;
            let condition = conditions::find(&binding.status.as_ref()?.conditions, type_)?.clone();
            Some((binding, condition))
        }
    };
    // (condition, status, reason, message fragment) must all hold on the current generation.
    let expect = |what: &'static str, wanted: Vec<(&'static str, &'static str, &'static str, String)>| {
        let conditions_of = &conditions_of;
        async move {
            let found = wait_for(&format!("{name}: {what}"), SHORT, || {
                let wanted = wanted.clone();
                async move {
                    let mut found = Vec::new();
                    for (type_, status, reason, fragment) in wanted {
                        let (binding, c) = conditions_of(type_).await?;
                        let current = c.observed_generation == binding.metadata.generation;
                        (current && c.status == status && c.reason == reason && c.message.contains(&fragment))
                            .then_some(())?;
                        found.push(format!("{type_}={status} {reason}: {}", c.message));
                    }
                    Some(found)
                }
            })
            .await;
            log(format!("{name}: {what}: {}", found.join(" | ")));
        }
    };
    let verified = || {
        vec![
            ("IdentityVerified", "True", "UuidMatched", String::new()),
            ("Reachable", "True", "Answered", String::new()),
            ("TLSVerified", "True", "Verified", "ConfigMap".to_owned()),
        ]
    };
    expect("verified", verified()).await;
    let binding = bindings.get(name).await.unwrap();
    let status = binding.status.clone().unwrap();
    assert_eq!(status.power_state.as_deref(), Some("On"), "{status:?}");
    assert!(status.last_power_check_time.is_some(), "{status:?}");
    // A2: the content it was verified with, as a keyed digest (nothing of the password readable).
    let content = status.verified_content.clone().unwrap_or_default();
    assert!(content.len() == 16 && content.chars().all(|c| c.is_ascii_hexdigit()), "{status:?}");
    // A2: kept beyond the binding object too, sealed, under the node's name (RBAC: create, patch).
    let node = binding.spec.node_name.clone();
    let kept = wait_for("the verification kept beyond the binding", SHORT, || {
        let (maps, node) = (maps.clone(), node.clone());
        async move {
            let map = maps.get_opt(coroner::verification::KEPT_VERIFICATIONS).await.ok()??;
            coroner::verification::KeptVerification::parse(map.data?.get(&node)?)
        }
    })
    .await;
    assert_eq!((kept.content.as_str(), Some(&kept.uid)), (content.as_str(), binding.metadata.uid.as_ref()), "{kept:?}");
    let table = world.kubectl(&["get", "bmcb", name, "-n", CORONER_NS]);
    assert!(table.contains("REASON") && table.contains("LAST CHECKED") && table.contains("UuidMatched"), "{table}");

    // The Secret appears after the binding that names it.
    let patch = |body: serde_json::Value| {
        let bindings = bindings.clone();
        async move { bindings.patch(name, &PatchParams::default(), &Patch::Merge(&body)).await.unwrap() }
    };
    patch(json!({"spec": {"credentialsSecretRef": {"name": "o-rotated"}}})).await;
    expect(
        "Secret missing",
        vec![
            ("IdentityVerified", "False", "BindingInvalid", "o-rotated".to_owned()),
            ("Reachable", "Unknown", "NotContacted", String::new()),
            ("TLSVerified", "Unknown", "NoHandshake", String::new()),
        ],
    )
    .await;
    assert_eq!(bindings.get(name).await.unwrap().status.unwrap().power_state, None, "no power without identity");
    let secret = |password: &str| -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(
            json!({"metadata": {"name": "o-rotated"}, "stringData": {"username": USER, "password": password}}),
        )
        .unwrap()
    };
    secrets.create(&PostParams::default(), &secret(PASSWORD)).await.unwrap();
    expect("the Secret appeared: verified at once", verified()).await;

    // A password rotation that went wrong, then right: the cached client is dropped both times.
    secrets
        .replace("o-rotated", &PostParams::default(), &{
            let mut s = secret("wrong-password");
            s.metadata.resource_version = secrets.get("o-rotated").await.unwrap().metadata.resource_version;
            s
        })
        .await
        .unwrap();
    expect(
        "wrong password",
        vec![
            ("Reachable", "False", "BmcAuthenticationFailed", String::new()),
            ("TLSVerified", "True", "Verified", String::new()),
        ],
    )
    .await;
    secrets
        .replace("o-rotated", &PostParams::default(), &{
            let mut s = secret(PASSWORD);
            s.metadata.resource_version = secrets.get("o-rotated").await.unwrap().metadata.resource_version;
            s
        })
        .await
        .unwrap();
    expect("password fixed", verified()).await;

    // The CA bundle appears with the wrong CA, then is corrected.
    patch(json!({"spec": {"tls": {"caBundleRef": {"kind": "ConfigMap", "name": "o-ca", "key": "ca.crt"}}}})).await;
    expect("CA bundle missing", vec![("IdentityVerified", "False", "BindingInvalid", "o-ca".to_owned())]).await;
    let map = |pem: &str| -> k8s_openapi::api::core::v1::ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "o-ca"}, "data": {"ca.crt": pem}})).unwrap()
    };
    let wrong = String::from_utf8(peers().pem("other-ca")).unwrap();
    maps.create(&PostParams::default(), &map(&wrong)).await.unwrap();
    expect(
        "wrong CA",
        vec![(
            "TLSVerified",
            "False",
            "BmcTlsVerificationFailed",
            "is issued by CN=coroner-test-bmc-ca, which is not a CA in ConfigMap o-ca (key ca.crt) (it holds CN=coroner-unrelated-ca)"
                .to_owned(),
        )],
    )
    .await;
    let right = String::from_utf8(peers().pem("ca")).unwrap();
    let mut fixed = map(&right);
    fixed.metadata.resource_version = maps.get("o-ca").await.unwrap().metadata.resource_version;
    maps.replace("o-ca", &PostParams::default(), &fixed).await.unwrap();
    expect("CA fixed", verified()).await;

    // Every change of cause was an Event of its own.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(world.client.clone(), CORONER_NS);
    let causes = ["BindingInvalid", "BmcAuthenticationFailed", "BmcTlsVerificationFailed"];
    let notes = wait_for("one Warning Event per cause", SHORT, || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        let notes: Vec<String> = list
            .into_iter()
            .filter(|e| {
                e.reason.as_deref().is_some_and(|r| causes.contains(&r))
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .filter_map(|e| e.note)
            .collect();
        causes.iter().all(|cause| notes.iter().any(|n| n.starts_with(cause))).then_some(notes)
    })
    .await;
    log(format!("{name}: a Warning Event for each cause: {notes:?}"));

    patch(json!({"spec": {"credentialsSecretRef": {"name": "spare-1-bmc"}, "tls": {"caBundleRef": {"kind": "ConfigMap", "name": "bmc-ca", "key": "ca.crt"}}}})).await;
    expect("back to its own Secret and CA", verified()).await;
    secrets.delete("o-rotated", &Default::default()).await.unwrap();
    maps.delete("o-ca", &Default::default()).await.unwrap();
    world.restart_coroners(2, &[]);
}
