//! Checks on the shipped manifests: least-privilege RBAC and no insecure example.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{fs, path::Path};

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every YAML document in the files under `dir` (recursively).
fn documents(dir: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut stack = vec![root().join(dir)];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let text = fs::read_to_string(&path).unwrap();
            let values: Vec<Value> = serde_saphyr::from_str_multiple(&text).unwrap();
            out.extend(values.into_iter().filter(|v| !v.is_null()).map(|v| (path.display().to_string(), v)));
        }
    }
    out
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|s| s.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

struct Rule {
    source: String,
    kind: String,
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

fn rules(dir: &str) -> Vec<Rule> {
    let mut out = Vec::new();
    for (source, doc) in documents(dir) {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
        if kind != "ClusterRole" && kind != "Role" {
            continue;
        }
        for rule in doc.get("rules").and_then(Value::as_array).into_iter().flatten() {
            out.push(Rule {
                source: source.clone(),
                kind: kind.clone(),
                groups: strings(rule, "apiGroups"),
                resources: strings(rule, "resources"),
                verbs: strings(rule, "verbs"),
            });
        }
    }
    out
}

/// The violations of coroner's RBAC red lines in the roles under `dir`.
fn rbac_violations(dir: &str) -> Vec<String> {
    let mut violations = Vec::new();
    let rules = rules(dir);
    assert!(!rules.is_empty(), "no RBAC rules found under {dir}");
    for rule in rules {
        let has = |resource: &str| rule.resources.iter().any(|r| r == resource || r == "*");
        let can = |verb: &str| rule.verbs.iter().any(|v| v == verb || v == "*");
        let core = rule.groups.iter().any(|g| g.is_empty() || g == "*");
        let writes = ["create", "update", "patch", "delete", "deletecollection"];
        let at = format!("{} ({})", rule.source, rule.kind);
        if rule.verbs.iter().any(|v| v == "*") || rule.resources.iter().any(|r| r == "*") {
            violations.push(format!("{at}: wildcard rule"));
        }
        if core && has("nodes") && (can("delete") || can("deletecollection")) {
            violations.push(format!("{at}: may delete nodes"));
        }
        if core && has("pods/exec") {
            violations.push(format!("{at}: may exec into pods"));
        }
        if rule.kind == "ClusterRole" && core && has("secrets") {
            violations.push(format!("{at}: Secrets cluster-wide"));
        }
        if rule.kind == "ClusterRole" && has("leases") && writes.iter().any(|w| can(w)) {
            violations.push(format!("{at}: writes Leases cluster-wide"));
        }
    }
    violations
}

#[test]
fn config_rbac_is_least_privilege() {
    assert_eq!(rbac_violations("config/rbac"), Vec::<String>::new());
}

#[test]
fn nhc_gets_exactly_the_aggregated_rights() {
    let docs = documents("config/rbac");
    let role = docs
        .iter()
        .map(|(_, d)| d)
        .find(|d| {
            d.get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(|l| l.get("rbac.ext-remediation/aggregate-to-ext-remediation"))
                .and_then(Value::as_str)
                == Some("true")
        })
        .expect("an aggregated ext-remediation ClusterRole");
    let rules = role.get("rules").and_then(Value::as_array).unwrap();
    let verbs_for = |resource: &str| {
        rules
            .iter()
            .find(|r| strings(r, "resources").iter().any(|x| x == resource))
            .map(|r| strings(r, "verbs"))
            .unwrap_or_default()
    };
    assert_eq!(verbs_for("coronerremediationtemplates"), ["get", "list", "watch"]);
    assert_eq!(verbs_for("coronerremediations"), ["get", "list", "watch", "create", "update", "patch", "delete"]);
    for rule in rules {
        assert_eq!(strings(rule, "apiGroups"), ["coroner.dev"], "group without a version");
    }
}

#[test]
fn the_red_line_check_catches_violations() {
    let dir = tempfile::tempdir().unwrap();
    let bad = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bad}
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [get, delete]}
  - {apiGroups: [""], resources: [pods/exec], verbs: [create]}
  - {apiGroups: [""], resources: [secrets], verbs: [get]}
  - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [update]}
"#;
    fs::write(dir.path().join("bad.yaml"), bad).unwrap();
    let violations = rbac_violations(dir.path().to_str().unwrap());
    assert_eq!(violations.len(), 4, "{violations:?}");
}

#[test]
fn shipped_templates_support_multiple_templates() {
    let templates: Vec<_> = documents("config")
        .into_iter()
        .filter(|(_, d)| d.get("kind").and_then(Value::as_str) == Some("CoronerRemediationTemplate"))
        .collect();
    assert!(!templates.is_empty());
    for (source, template) in templates {
        let annotation = template
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get("remediation.medik8s.io/multiple-templates-support"));
        assert_eq!(annotation.and_then(Value::as_str), Some("true"), "{source}");
    }
}

#[test]
fn the_sample_node_health_check_remediates_ready_unknown_only() {
    for (source, doc) in documents("config/samples") {
        if doc.get("kind").and_then(Value::as_str) != Some("NodeHealthCheck") {
            continue;
        }
        let conditions = doc.get("spec").and_then(|s| s.get("unhealthyConditions")).and_then(Value::as_array).unwrap();
        assert_eq!(conditions.len(), 1, "{source}");
        assert_eq!(conditions[0].get("type").and_then(Value::as_str), Some("Ready"));
        assert_eq!(conditions[0].get("status").and_then(Value::as_str), Some("Unknown"));
    }
}

/// People copy examples: none may turn TLS verification off.
#[test]
fn no_example_enables_insecure_tls() {
    let mut offenders = Vec::new();
    for dir in ["charts", "config", "docs", "bundle", "README.md"] {
        let mut stack = vec![root().join(dir)];
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                stack.extend(fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            } else if path.is_file() && !path.ends_with("values.schema.json") {
                let text = fs::read_to_string(&path).unwrap_or_default();
                for (number, line) in text.lines().enumerate() {
                    if enables_insecure_tls(line) {
                        offenders.push(format!("{}:{}: {line}", path.display(), number + 1));
                    }
                }
            }
        }
    }
    assert_eq!(offenders, Vec::<String>::new());
}

/// `insecureSkipVerify: true`, `insecureSkipTLSVerify: true` or `--ssl-insecure`.
fn enables_insecure_tls(line: &str) -> bool {
    let compact: String = line.split_whitespace().collect();
    compact.contains("insecureSkipVerify:true")
        || compact.contains("insecureSkipTLSVerify:true")
        || line.contains("--ssl-insecure")
}

/// The CRD schema's properties, recursively, as (path, schema).
fn properties<'a>(path: String, schema: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.clone(), schema));
    for (name, child) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
        properties(format!("{path}.{name}"), child, out);
    }
    if let Some(items) = schema.get("items") {
        properties(format!("{path}[]"), items, out);
    }
}

/// A raw regex is what the API server would answer a bad value with: every string rule of a
/// BmcBinding (what a new user writes by hand) is a CEL rule with a message that names the field and
/// shows a right value, its cost bounded by maxLength. (Durations keep their pattern: the templates'
/// `duration(...)` rules need it to hold first.)
#[test]
fn binding_string_rules_are_cel_rules_with_messages_not_raw_patterns() {
    let mut failures = Vec::new();
    let mut rules = 0;
    for (source, crd) in documents("crds") {
        if crd["spec"]["names"]["kind"] != "BmcBinding" {
            continue;
        }
        let Some(schema) = crd.pointer("/spec/versions/0/schema/openAPIV3Schema") else { continue };
        let mut all = Vec::new();
        properties(crd["spec"]["names"]["kind"].as_str().unwrap_or_default().to_owned(), schema, &mut all);
        for (path, property) in all {
            if property.get("pattern").is_some() {
                failures.push(format!("{source}: {path} has a raw pattern"));
            }
            for rule in property.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten() {
                rules += 1;
                if rule.get("message").and_then(Value::as_str).is_none_or(str::is_empty) {
                    failures.push(format!("{source}: {path}: rule {} has no message", rule["rule"]));
                }
                let on_string = property.get("type").and_then(Value::as_str) == Some("string");
                if on_string && property.get("maxLength").is_none() {
                    failures.push(format!("{source}: {path}: a string rule without maxLength"));
                }
            }
        }
    }
    assert!(rules >= 5, "only {rules} CEL rules found");
    assert_eq!(failures, Vec::<String>::new());
}

/// `action: Off` unquoted is a boolean, and the CRD cannot catch it before the type error: every
/// sample and the install guide say so first.
#[test]
fn samples_and_the_install_guide_warn_about_a_bare_off_first() {
    let mut paths: Vec<_> = fs::read_dir(root().join("config/samples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    paths.push(root().join("docs/install.md"));
    for path in paths {
        let text = fs::read_to_string(&path).unwrap();
        let head: String = text.lines().take(8).collect::<Vec<_>>().join("\n");
        assert!(head.contains(r#"action: "Off""#), "{}: the first lines do not warn about a bare Off", path.display());
    }
}
