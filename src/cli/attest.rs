//! `coroner attest NODE --reason "…"` (also `kubectl coroner attest` as the binary `kubectl-coroner`):
//! a person's audited statement that a node is dead, for a node whose fence ended without proof. It
//! fills in the attester from a SelfSubjectReview, checks the preconditions it can see, says what will
//! happen, creates the CoronerAttestation and prints coroner's verdict. `--clear` removes it.

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::{
    api::{
        admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
        core::v1::Node,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};

use super::{ApiArgs, CliError, kube_client, whoami};
use crate::{
    api::{
        self, AttestationPhase, CheckResult, CoronerAttestation, CoronerAttestationSpec, CoronerRemediation,
        MAX_REASON_BYTES,
    },
    attestation::{self, Inputs, Outcome, Verdict},
    cluster,
    taints::CoronerTaint,
};

#[derive(Debug, clap::Args)]
pub struct AttestArgs {
    /// The node that is dead.
    pub node: String,

    /// Why you know the machine is dead: what you saw, what you did (e.g. "rack PDU 4 lost power; I
    /// unplugged w1 at 10:02"). Recorded verbatim on the remediation; at most 1 KiB. Required.
    #[arg(long, env = "CORONER_ATTEST_REASON", required_unless_present = "clear")]
    pub reason: Option<String>,

    /// Remove the node's attestations that have not released it instead (before its release that
    /// cancels it); a released one stays as the record, and what it released stays released.
    #[arg(long, env = "CORONER_ATTEST_CLEAR", conflicts_with = "reason")]
    pub clear: bool,

    /// Print the preconditions as they stand and what would happen, and create nothing. Exits
    /// non-zero when a precondition already refuses for good.
    #[arg(long, env = "CORONER_ATTEST_DRY_RUN", conflicts_with = "clear")]
    pub dry_run: bool,

    /// How long the attestation may still release the node (it is checked until then).
    #[arg(long, env = "CORONER_ATTEST_VALID_FOR", default_value = "15m")]
    pub valid_for: api::Duration,

    /// Evidence you saw and accept, as a refusal names it: REASON=TIME (FenceSawLife,
    /// BmcReportedOn from a BMC dark since, or BindingUnverified, at the moment the refusal prints). Repeat for each;
    /// counted as a safety override, recorded in the release and its Event.
    #[arg(long = "acknowledge", env = "CORONER_ATTEST_ACKNOWLEDGE", value_delimiter = ',', value_name = "REASON=TIME")]
    pub acknowledge: Vec<api::Acknowledgement>,

    /// How long to wait for coroner's verdict; 0s does not wait.
    #[arg(long, env = "CORONER_ATTEST_WAIT", default_value = "60s")]
    pub wait: api::Duration,

    #[command(flatten)]
    pub api: ApiArgs,
}

pub async fn run(args: AttestArgs) -> Result<(), CliError> {
    let client = kube_client(args.api.kubeconfig.as_deref(), args.api.context.as_deref()).await?;
    if args.clear {
        return clear(&client, &args).await;
    }
    let reason = args.reason.clone().unwrap_or_default();
    if reason.trim().is_empty() {
        return Err(CliError::Attest("--reason must say why the node is dead; it may not be blank".into()));
    }
    if reason.len() > MAX_REASON_BYTES {
        return Err(CliError::Attest(format!(
            "--reason has {} bytes; at most {MAX_REASON_BYTES} are recorded (keep it to what you saw and did)",
            reason.len()
        )));
    }
    attest(&client, &args, reason).await
}

/// A hint for the usual cause of a refused request: the caller lacks the coroner-attester roles.
fn forbidden(what: &str, namespace: &str, error: kube::Error) -> CliError {
    match &error {
        kube::Error::Api(status) if status.code == 403 => CliError::Attest(format!(
            "{what}: forbidden; an attester needs the ClusterRole coroner-attester and the Role coroner-attester in {namespace} (docs/operations.md)"
        )),
        _ => CliError::Attest(format!("{what}: {error}")),
    }
}

async fn attest(client: &Client, args: &AttestArgs, reason: String) -> Result<(), CliError> {
    let namespace = &args.api.namespace;
    let user = whoami(client).await.map_err(CliError::Attest)?;
    let node = Api::<Node>::all(client.clone())
        .get_opt(&args.node)
        .await
        .map_err(|e| forbidden(&format!("reading Node {}", args.node), namespace, e))?
        .ok_or_else(|| CliError::Attest(format!("Node {} does not exist", args.node)))?;
    let remediations = Api::<CoronerRemediation>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| forbidden(&format!("listing CoronerRemediations in {namespace}"), namespace, e))?
        .items;
    let lease = cluster::node_lease(client, &args.node)
        .await
        .map_err(|e| forbidden(&format!("reading the Lease of {}", args.node), namespace, e))?;
    let policies = readable_policies(client).await;

    let mut draft = CoronerAttestation::new(
        &args.node,
        CoronerAttestationSpec {
            node_name: args.node.clone(),
            node_uid: node.metadata.uid.clone().unwrap_or_default(),
            reason,
            attested_by: user.clone(),
            valid_for: args.valid_for,
            acknowledge: args.acknowledge.clone(),
        },
    );
    draft.metadata.namespace = Some(namespace.clone());
    let now = Timestamp::now();
    draft.metadata.creation_timestamp = Some(Time(now));
    let inputs = Inputs {
        attestation: &draft,
        now,
        policies: policies.as_ref().map(|(p, b)| (p.as_slice(), b.as_slice())),
        remediations: &remediations,
        node: Some(&node),
        lease,
        sighting: None,
        cluster: None,
    };
    let evaluation = attestation::evaluate(&inputs);
    println!("Attesting that node {} (UID {}) is dead, as {user}.", args.node, draft.spec.node_uid);
    println!("Reason (recorded verbatim): {}", draft.spec.reason);
    println!();
    println!("Preconditions as they stand now (coroner checks every one again right before the release):");
    for check in &evaluation.checks {
        let (result, message) = match &check.outcome {
            Outcome::Passed(m) => ("passed", m.clone()),
            Outcome::Refused(r) if r.is_final() => ("REFUSED", r.to_string()),
            Outcome::Refused(r) => ("waiting", r.to_string()),
            Outcome::NotChecked(m) => ("by coroner", m.clone()),
        };
        println!("  {result:<11} {:<27} {message}", check.precondition.as_str());
    }
    println!();
    let remediation = evaluation.remediation.map(|r| r.name_any()).unwrap_or_else(|| "<the failed one>".into());
    if let Verdict::Refuse(refusal) = &evaluation.verdict {
        return Err(CliError::Attest(format!("nothing attested: {refusal}")));
    }
    let oos = CoronerTaint::OutOfService;
    println!(
        "What happens: coroner adds {}=nodeshutdown:{} to node {}, owned by remediation {namespace}/{remediation}. Kubernetes then \
force-deletes the node's pods and detaches its volumes, so they start elsewhere. The attestation switches nothing off: the machine must \
stay off, or be wiped, before it rejoins. The release is recorded on the remediation with your name and reason; its \
Succeeded stays False. The taint goes when NodeHealthCheck deletes the remediation (the node is back and healthy).",
        oos.key(),
        oos.effect(),
        args.node
    );
    println!(
        "Until coroner starts the release, `coroner attest {} --clear` cancels it; after it, what was released stays released.",
        args.node
    );
    println!(
        "Right before the release, coroner has the failed fence look through the node's BMC once more: if the node's machine \
answers, this attestation acknowledges nothing, the fence was admitted and NodeHealthCheck has not timed it out since, the fence \
proves it off again and only that proof releases (this attestation then ends Superseded); what the look reads is \
judged as the fence's readings are (an On from a BMC that answers refuses it)."
    );
    if let Verdict::Wait(refusal) = &evaluation.verdict {
        println!("coroner will wait: {refusal} (until the attestation expires in {}).", args.valid_for);
    }
    println!();
    let api: Api<CoronerAttestation> = Api::namespaced(client.clone(), namespace);
    // One undecided attestation per node; a released one is a record and blocks nothing.
    let existing = api
        .list(&ListParams::default())
        .await
        .map_err(|e| forbidden(&format!("listing CoronerAttestations in {namespace}"), namespace, e))?
        .items;
    if let Some(open) = existing.iter().find(|a| a.spec.node_name == args.node && undecided(a)) {
        return Err(CliError::Attest(format!(
            "attestation {namespace}/{} for node {} is still {}; `coroner attest {} --clear` removes it",
            open.name_any(),
            args.node,
            phase(open).as_str(),
            args.node
        )));
    }
    if args.dry_run {
        println!("--dry-run: nothing created.");
        return Ok(());
    }
    draft.metadata.creation_timestamp = None;
    // A generated name: every attestation of a node stays on record, and none blocks the next.
    draft.metadata.name = None;
    draft.metadata.generate_name = Some(format!("{}-", args.node));
    let created = api
        .create(&PostParams::default(), &draft)
        .await
        .map_err(|e| forbidden(&format!("creating the CoronerAttestation in {namespace}"), namespace, e))?;
    println!("created CoronerAttestation {namespace}/{}", created.name_any());
    wait_for_verdict(&api, &created, args.wait.get()).await
}

/// ValidatingAdmissionPolicies and bindings, if the caller may list them.
async fn readable_policies(
    client: &Client,
) -> Option<(Vec<ValidatingAdmissionPolicy>, Vec<ValidatingAdmissionPolicyBinding>)> {
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone()).list(&ListParams::default()).await.ok()?;
    let bindings =
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()).list(&ListParams::default()).await.ok()?;
    Some((policies.items, bindings.items))
}

fn phase(attestation: &CoronerAttestation) -> AttestationPhase {
    attestation.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
}

/// Not yet released or refused: it may still release the node.
fn undecided(attestation: &CoronerAttestation) -> bool {
    matches!(phase(attestation), AttestationPhase::Pending | AttestationPhase::Releasing)
}

/// Polls the attestation until coroner released or refused it, or `wait` has passed.
async fn wait_for_verdict(
    api: &Api<CoronerAttestation>,
    created: &CoronerAttestation,
    wait: StdDuration,
) -> Result<(), CliError> {
    if wait.is_zero() {
        return Ok(());
    }
    println!("waiting up to {}s for coroner …", wait.as_secs());
    let started = std::time::Instant::now();
    let mut latest = created.clone();
    while started.elapsed() < wait {
        tokio::time::sleep(StdDuration::from_millis(500)).await;
        match api.get_opt(&created.name_any()).await {
            Ok(Some(current)) if current.uid() == created.uid() => latest = current,
            Ok(_) => return Err(CliError::Attest("the attestation was deleted before coroner decided".into())),
            Err(error) => eprintln!("reading the attestation: {error}; retrying"),
        }
        if phase(&latest).is_final() {
            break;
        }
    }
    let status = latest.status.clone().unwrap_or_default();
    let condition = api::conditions::find(&status.conditions, attestation::RELEASED);
    if !status.checks.is_empty() {
        println!("coroner checked:");
        for check in &status.checks {
            let result = match check.result {
                CheckResult::Passed => "passed",
                CheckResult::Waiting => "waiting",
                CheckResult::Refused => "REFUSED",
                CheckResult::NotChecked => "-",
            };
            println!("  {result:<11} {:<27} {}", check.name, check.message);
        }
    }
    let said = condition.map(|c| format!("{}: {}", c.reason, c.message)).unwrap_or_else(|| "no verdict yet".into());
    match phase(&latest) {
        AttestationPhase::Released => {
            println!("released: {said}");
            Ok(())
        }
        AttestationPhase::Refused => Err(CliError::Attest(format!("refused by coroner: {said}"))),
        AttestationPhase::Pending | AttestationPhase::Releasing => {
            println!("still {}: {said}; coroner keeps checking until the attestation expires", phase(&latest).as_str());
            Ok(())
        }
    }
}

async fn clear(client: &Client, args: &AttestArgs) -> Result<(), CliError> {
    let namespace = &args.api.namespace;
    let api: Api<CoronerAttestation> = Api::namespaced(client.clone(), namespace);
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(|e| forbidden(&format!("listing CoronerAttestations in {namespace}"), namespace, e))?
        .items;
    let mine: Vec<_> = all.into_iter().filter(|a| a.spec.node_name == args.node).collect();
    if mine.is_empty() {
        println!("no attestation for node {} in {namespace}", args.node);
        return Ok(());
    }
    let remediations: Api<CoronerRemediation> = Api::namespaced(client.clone(), namespace);
    for attestation in mine {
        // A released attestation is the record of a release no device proved: it stays (an
        // admission policy, coroner-attestation-record, denies its deletion to people).
        if phase(&attestation) != AttestationPhase::Released {
            api.delete(&attestation.name_any(), &DeleteParams::default()).await.map_err(|e| {
                forbidden(&format!("deleting CoronerAttestation {}", attestation.name_any()), namespace, e)
            })?;
        }
        match (phase(&attestation), attestation.status.as_ref().and_then(|s| s.released.as_ref())) {
            (AttestationPhase::Released, Some(released)) => {
                let owner = remediations.get_opt(&released.remediation).await.ok().flatten();
                let owner_lives = owner.is_some_and(|r| r.uid().as_deref() == Some(released.remediation_uid.as_str()));
                let taint = format!("{}={}:{}", released.taint_key, released.taint_value, released.taint_effect);
                let rest = if owner_lives {
                    format!(
                        "{taint} stays on node {} until NodeHealthCheck deletes remediation {}",
                        args.node, released.remediation
                    )
                } else {
                    format!("remediation {} is gone, and its finalizer removed {taint}", released.remediation)
                };
                println!(
                    "kept {namespace}/{}: it released the node and stays as the record; what it released stays released: {rest}",
                    attestation.name_any()
                );
            }
            (AttestationPhase::Releasing, _) => println!(
                "deleted {namespace}/{}; coroner had started its release, which may have completed: check the remediation's evidence.release",
                attestation.name_any()
            ),
            (phase, _) => {
                println!("deleted {namespace}/{} ({}); nothing was released", attestation.name_any(), phase.as_str())
            }
        }
    }
    Ok(())
}
