//! `coroner verify [NODE…|--all]` (also `kubectl coroner verify`): would each node be fenced if it
//! went `Ready=Unknown` now? The BMC work runs in the controller, which has the network path and the
//! credentials: this command creates a `CoronerVerification`, waits for its answer and prints it. It
//! needs `create` on that kind only (the shipped coroner-viewer roles grant it), never a BMC
//! credential, and sends no power action. Exit 0 when every listed node would be fenced, 1 when one
//! would not, 2 on a usage or API error.

use std::time::Duration as StdDuration;

use kube::{
    Api, ResourceExt,
    api::{ObjectMeta, PostParams},
};

use super::{ApiArgs, CliError, kube_client};
use crate::api::{CoronerVerification, CoronerVerificationSpec, CoronerVerificationStatus, VerificationPhase};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The nodes to check.
    #[arg(required_unless_present = "all")]
    pub nodes: Vec<String>,

    /// Every node that a NodeHealthCheck using a coroner template selects (others are listed apart).
    #[arg(long, env = "CORONER_VERIFY_ALL")]
    pub all: bool,

    /// How to print the answer.
    #[arg(long, short = 'o', env = "CORONER_VERIFY_OUTPUT", value_enum, default_value = "table")]
    pub output: Output,

    /// How long to wait for the controller's answer.
    #[arg(long, env = "CORONER_VERIFY_TIMEOUT", default_value = "10m")]
    pub timeout: crate::api::Duration,

    #[command(flatten)]
    pub api: ApiArgs,
}

/// The answer as a table: one row per node, then the nodes nothing selects.
pub fn render_table(status: &CoronerVerificationStatus) -> String {
    let mut out =
        format!("{:<24} {:<7} {:<24} {:<40} {:<8} WHY NOT / IDENTITY\n", "NODE", "FENCED", "BINDING", "TLS", "POWER");
    for node in &status.nodes {
        let cell = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let binding = if node.bindings.is_empty() { "-".into() } else { node.bindings.join(",") };
        let detail = match (&node.why_not, &node.gates) {
            (Some(why), _) => why.clone(),
            (None, Some(gates)) if gates != "Admitted" => format!("{} (gates {gates})", cell(&node.identity)),
            (None, _) => cell(&node.identity),
        };
        let detail = match &node.levels {
            Some(levels) => format!("{detail}; levels: {levels}"),
            None => detail,
        };
        out.push_str(&format!(
            "{:<24} {:<7} {:<24} {:<40} {:<8} {detail}\n",
            node.node,
            if node.would_fence { "yes" } else { "NO" },
            binding,
            cell(&node.tls),
            cell(&node.power),
        ));
    }
    if !status.unselected.is_empty() {
        out.push_str(&format!(
            "\nNot selected by any NodeHealthCheck using a coroner template ({}): {}\n",
            status.unselected.len(),
            status.unselected.join(", ")
        ));
    }
    out
}

/// Whether every node listed would be fenced.
pub fn all_protected(status: &CoronerVerificationStatus) -> bool {
    status.nodes.iter().all(|n| n.would_fence)
}

/// Asks the controller to verify `nodes` (or `all`) and waits for its answer, saying how far it got.
pub async fn request(
    client: kube::Client,
    namespace: &str,
    spec: CoronerVerificationSpec,
    timeout: crate::api::Duration,
) -> Result<CoronerVerificationStatus, CliError> {
    let api: Api<CoronerVerification> = Api::namespaced(client, namespace);
    let request = CoronerVerification {
        metadata: ObjectMeta { generate_name: Some("verify-".into()), ..ObjectMeta::default() },
        spec,
        status: None,
    };
    let created = api
        .create(&PostParams::default(), &request)
        .await
        .map_err(|e| CliError::Verify(format!("creating a CoronerVerification in {namespace}: {e}")))?;
    let name = created.name_any();
    let deadline = std::time::Instant::now() + timeout.get();
    let mut shown = None;
    loop {
        let current = api.get(&name).await.map_err(|e| CliError::Verify(format!("reading {name}: {e}")))?;
        let status = current.status.unwrap_or_default();
        match status.phase {
            Some(VerificationPhase::Done) => return Ok(status),
            Some(VerificationPhase::Failed) => {
                return Err(CliError::Verify(format!(
                    "verification {name} failed: {}",
                    status.message.unwrap_or_default()
                )));
            }
            _ => {}
        }
        if status.total > 0 && shown != Some(status.checked) {
            eprintln!("verification {name}: {} of {} nodes checked", status.checked, status.total);
            shown = Some(status.checked);
        }
        if std::time::Instant::now() >= deadline {
            return Err(CliError::Verify(format!(
                "no answer to verification {name} within {timeout}: is coroner's leader running? (kubectl coroner status)"
            )));
        }
        tokio::time::sleep(StdDuration::from_secs(1)).await;
    }
}

pub async fn run(args: VerifyArgs) -> Result<(), CliError> {
    let client = kube_client(args.api.kubeconfig.as_deref(), args.api.context.as_deref())
        .await
        .map_err(|e| CliError::Verify(e.to_string()))?;
    let spec = CoronerVerificationSpec { nodes: args.nodes.clone(), all: args.all, fetch_certificates: Vec::new() };
    let status = request(client, &args.api.namespace, spec, args.timeout).await?;
    let text = match args.output {
        Output::Table => render_table(&status),
        Output::Json => serde_json::to_string_pretty(&status).unwrap_or_default() + "\n",
        Output::Yaml => serde_saphyr::to_string(&status)?,
    };
    print!("{text}");
    if all_protected(&status) {
        Ok(())
    } else {
        Err(CliError::NotProtected(status.nodes.iter().filter(|n| !n.would_fence).count()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeVerification;

    #[test]
    fn the_table_says_which_nodes_would_not_be_fenced_and_why() {
        let status = CoronerVerificationStatus {
            nodes: vec![
                NodeVerification {
                    node: "worker-1".into(),
                    would_fence: true,
                    bindings: vec!["worker-1".into()],
                    tls: Some("certificate pin (SHA-256)".into()),
                    power: Some("On".into()),
                    identity: Some("Exact match".into()),
                    gates: Some("Admitted".into()),
                    ..NodeVerification::default()
                },
                NodeVerification {
                    node: "worker-2".into(),
                    why_not: Some("no BmcBinding names the node".into()),
                    ..NodeVerification::default()
                },
            ],
            unselected: vec!["cp-1".into()],
            ..CoronerVerificationStatus::default()
        };
        let table = render_table(&status);
        assert!(table.lines().nth(1).unwrap().contains("yes") && table.contains("Exact match"), "{table}");
        assert!(table.lines().nth(2).unwrap().contains("NO") && table.contains("no BmcBinding"), "{table}");
        assert!(table.contains("cp-1"), "{table}");
        assert!(!all_protected(&status));
    }
}
