//! The `coroner` command line. Every flag can also be set through an environment variable
//! `CORONER_<FLAG>`. Named `kubectl-coroner`, the binary is also the kubectl plugin `kubectl coroner`.

mod approve;
mod attest;
mod import_far;
mod status;
mod verify;

use std::{net::SocketAddr, sync::Arc, time::Duration as StdDuration};

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio_util::sync::CancellationToken;

use crate::{
    api,
    bmc::tls,
    controller::{self, BmcSettings, Context, Election, Settings, VerifySettings},
    gates::StormLimits,
    telemetry::{self, Health, LogFormat, Metrics},
    uninstall,
};

#[derive(Debug, Parser)]
#[command(
    name = "coroner",
    version,
    about = "Proves a dead node is dead through its BMC before releasing its workloads"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Approve that a released machine may run again: the guard then leaves it on (docs/operations.md).
    Approve(Box<approve::ApproveArgs>),
    /// Attest that a node whose fence ended without proof is dead (audited; see docs/operations.md).
    Attest(Box<attest::AttestArgs>),
    /// Run the operator against the current kubeconfig or the in-cluster config.
    Controller(Box<ControllerArgs>),
    /// What coroner is doing: fences in flight, releases and their guard, bindings not verified,
    /// attestations, the leader (read-only).
    Status(Box<status::StatusArgs>),
    /// Print every CRD coroner serves, as YAML.
    Crd,
    /// A FenceAgentsRemediationTemplate (from a file) as coroner's template and bindings, as YAML on
    /// stdout, every choice that differs from FAR commented; credentials never printed.
    ImportFar(Box<import_far::ImportFarArgs>),
    /// Would each node be fenced if it went Ready=Unknown now? The controller reads the BMCs (a
    /// CoronerVerification); exit 0 when every listed node would be, 1 when one would not, 2 on a
    /// usage or API error. No power action.
    Verify(Box<verify::VerifyArgs>),
    /// Exit non-zero, saying what to do, while any CoronerRemediation still holds coroner's finalizer:
    /// uninstalling coroner then would leave its taints on the nodes (the chart's pre-delete hook).
    UninstallCheck(UninstallCheckArgs),
    /// Print the version.
    Version,
}

#[derive(Debug, clap::Args)]
pub struct UninstallCheckArgs {
    /// The namespace coroner runs in (default: $POD_NAMESPACE).
    #[arg(long, env = "CORONER_NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// The namespace coroner watches and acts in (default: $POD_NAMESPACE).
    #[arg(long, env = "CORONER_NAMESPACE")]
    pub namespace: Option<String>,

    /// The kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster config).
    #[arg(long, env = "CORONER_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// Log lines as text, or as JSON objects with the remediation, node and binding as fields.
    #[arg(long, env = "CORONER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Timeout of one BMC request (connect, TLS and answer).
    #[arg(long, env = "CORONER_BMC_REQUEST_TIMEOUT", default_value = "5s")]
    pub bmc_request_timeout: api::Duration,

    /// Extra tries for a BMC read after a transport error or a 5xx answer (resets are never retried).
    #[arg(long, env = "CORONER_BMC_READ_RETRIES", default_value_t = 1)]
    pub bmc_read_retries: u32,

    /// At most this many fences in a power action at once.
    #[arg(long, env = "CORONER_MAX_CONCURRENT_FENCES", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_fences: u32,

    /// At most this many fences admitted per --fence-window, so a switch failure cannot switch off
    /// every partitioned but healthy node within a minute. A fence counts when it is admitted, before
    /// anyone knows whether it will reach a power-off (one refused later still counts).
    #[arg(long, env = "CORONER_MAX_FENCES_PER_WINDOW", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_fences_per_window: u32,

    /// The window of --max-fences-per-window.
    #[arg(long, env = "CORONER_FENCE_WINDOW", default_value = "10m")]
    pub fence_window: api::Duration,

    /// Address of the admin port: /metrics, /healthz, /readyz.
    #[arg(long, env = "CORONER_ADMIN_ADDRESS", default_value = "0.0.0.0:8080")]
    pub admin_address: SocketAddr,

    /// Elect one leader among the replicas through a Lease in the namespace; only the leader acts.
    #[arg(long, env = "CORONER_LEADER_ELECTION", default_value_t = true, action = ArgAction::Set)]
    pub leader_election: bool,

    /// The leader Lease, in the namespace.
    #[arg(long, env = "CORONER_LEASE_NAME", default_value = "coroner-leader")]
    pub lease_name: String,

    /// How long the leader Lease lasts without renewal.
    #[arg(long, env = "CORONER_LEASE_DURATION", default_value = "15s")]
    pub lease_duration: api::Duration,

    /// How often every BmcBinding is verified (±10 %), besides on every change.
    #[arg(long, env = "CORONER_VERIFY_INTERVAL", default_value = "10m")]
    pub verify_interval: api::Duration,

    /// At most this many bindings verified at once.
    #[arg(long, env = "CORONER_VERIFY_CONCURRENCY", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub verify_concurrency: u16,

    /// How often (±10 %) a released machine's power is read again while coroner's out-of-service
    /// taint is on its node: the guard after the release.
    #[arg(long, env = "CORONER_GUARD_INTERVAL", default_value = "10s", value_parser = period)]
    pub guard_interval: api::Duration,

    /// This replica's pod (the leader's identity); default $POD_NAME, else a random name.
    #[arg(long, env = "CORONER_POD_NAME")]
    pub pod_name: Option<String>,

    /// The node this replica runs on (the leader never fences it); default $NODE_NAME.
    #[arg(long, env = "CORONER_NODE_NAME")]
    pub node_name: Option<String>,
}

/// A period of something coroner repeats against a BMC: zero would repeat it in a busy loop.
fn period(text: &str) -> Result<api::Duration, String> {
    let period: api::Duration = text.parse().map_err(|e: api::ParseDurationError| e.to_string())?;
    if period.get().is_zero() {
        return Err("must be longer than 0s".into());
    }
    Ok(period)
}

/// The error `main` reports before exiting non-zero.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("no namespace: set --namespace (CORONER_NAMESPACE) or POD_NAMESPACE")]
    NoNamespace,
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    ContentKey(#[from] crate::cluster::ContentKeyError),
    #[error("cannot print the CRDs: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
    #[error("cannot install the TLS crypto provider")]
    CryptoProvider,
    #[error("admin port: {0}")]
    Admin(std::io::Error),
    #[error("{0}")]
    Kubeconfig(String),
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error("{0}")]
    Controller(controller::Error),
    #[error("{0}")]
    Attest(String),
    #[error("{0}")]
    Approve(String),
    #[error("{0}")]
    Status(String),
    #[error("{0}")]
    UninstallBlocked(String),
    #[error("{0}")]
    ImportFar(String),
    #[error("{0}")]
    Verify(String),
    #[error("{0} listed node(s) would not be fenced: see why above")]
    NotProtected(usize),
    #[error("the import is printed, but some nodes need attention before they are protected: see the comments")]
    ImportIncomplete,
    #[error(
        "--lease-duration {lease} cannot cover one BMC request: it must be longer than --bmc-request-timeout {timeout} + {checks} for the checks before a request + the {skew} clock-skew margin"
    )]
    LeaseTooShort { lease: api::Duration, timeout: api::Duration, checks: api::Duration, skew: api::Duration },
}

impl CliError {
    /// The process's exit code: 1; 3 for an import printed with nodes that need attention; for
    /// `verify`, 1 when a node would not be fenced and 2 on an API error (as clap's usage errors).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::ImportIncomplete => 3,
            Self::Verify(_) => 2,
            _ => 1,
        }
    }
}

/// P6: whether a leader Lease of `lease` can ever allow one BMC request of `timeout` after its checks.
pub fn lease_covers_a_request(lease: StdDuration, timeout: StdDuration) -> bool {
    lease > timeout + crate::driver::CHECKS_ALLOWANCE + crate::leader::SKEW_MARGIN
}

/// The command line of this process. As `kubectl-coroner` (a kubectl plugin) its usage says
/// `kubectl coroner`.
pub fn parse() -> Cli {
    let plugin = std::env::args_os()
        .next()
        .and_then(|argv0| std::path::Path::new(&argv0).file_name().map(|n| n == "kubectl-coroner"))
        .unwrap_or(false);
    let mut command = Cli::command();
    if plugin {
        command = command.bin_name("kubectl coroner");
    }
    Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
}

pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Crd => {
            // `coroner crd | head` closes the pipe early: that ends the output, it is no error.
            use std::io::Write;
            match std::io::stdout().lock().write_all(crds_yaml()?.as_bytes()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Output(e)),
                _ => Ok(()),
            }
        }
        Command::Version => {
            println!("coroner {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Controller(args) => run_controller(*args).await,
        Command::Attest(args) => attest::run(*args).await,
        Command::Approve(args) => approve::run(*args).await,
        Command::Status(args) => status::run(*args).await,
        Command::Verify(args) => verify::run(*args).await,
        Command::ImportFar(args) => import_far::run(*args).await,
        Command::UninstallCheck(args) => uninstall_check(args).await,
    }
}

/// Where the operator commands (`attest`, `approve`, `status`) find coroner and the API server.
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// coroner's namespace (its remediations, bindings, attestations and leader Lease live there).
    #[arg(long, short = 'n', env = "CORONER_NAMESPACE", default_value = "coroner-system")]
    pub namespace: String,

    /// The kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster config).
    #[arg(long, env = "CORONER_KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// The kubeconfig context (default: its current context).
    #[arg(long, env = "CORONER_CONTEXT")]
    pub context: Option<String>,
}

/// A client for the given kubeconfig and context (default: $KUBECONFIG, ~/.kube/config, then the
/// in-cluster config).
async fn kube_client(kubeconfig: Option<&std::path::Path>, context: Option<&str>) -> Result<Client, CliError> {
    // kube's client and coroner's BMC clients share one rustls provider; the first install wins.
    let _ = rustls::crypto::CryptoProvider::install_default(Arc::unwrap_or_clone(tls::crypto_provider()));
    let options = KubeConfigOptions { context: context.map(str::to_owned), ..KubeConfigOptions::default() };
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|e| CliError::Kubeconfig(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None if context.is_some() => Config::from_kubeconfig(&options).await,
        None => return Ok(Client::try_default().await?),
    };
    let config = config.map_err(|e| CliError::Kubeconfig(format!("kubeconfig: {e}")))?;
    Ok(Client::try_from(config)?)
}

/// Who the API server says the caller is (a SelfSubjectReview): the name an audited statement carries.
async fn whoami(client: &Client) -> Result<String, String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review = kube::Api::<SelfSubjectReview>::all(client.clone())
        .create(&kube::api::PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(|e| format!("SelfSubjectReview (who am I?): {e}"))?;
    let user = review.status.and_then(|s| s.user_info).and_then(|u| u.username).filter(|u| !u.is_empty());
    user.ok_or_else(|| "the API server did not say who you are (SelfSubjectReview)".into())
}

fn namespace_from(value: Option<String>) -> Result<String, CliError> {
    value.or_else(|| std::env::var("POD_NAMESPACE").ok()).filter(|v| !v.is_empty()).ok_or(CliError::NoNamespace)
}

async fn uninstall_check(args: UninstallCheckArgs) -> Result<(), CliError> {
    let namespace = namespace_from(args.namespace)?;
    rustls::crypto::CryptoProvider::install_default(Arc::unwrap_or_clone(tls::crypto_provider()))
        .map_err(|_| CliError::CryptoProvider)?;
    let client = Client::try_default().await?;
    let remediations: kube::Api<api::CoronerRemediation> = kube::Api::namespaced(client.clone(), &namespace);
    let list = remediations.list(&kube::api::ListParams::default()).await?.items;
    match uninstall::refusal(&namespace, &uninstall::blockers(&list)) {
        Some(refusal) => Err(CliError::UninstallBlocked(refusal)),
        None => {
            // A notice that blocks nothing: a failure to list says so and passes.
            match node_metadata(client).await {
                Ok(nodes) => {
                    if let Some(notice) = uninstall::unwatched_notice(&uninstall::unwatched(&nodes)) {
                        eprint!("{notice}");
                    }
                }
                Err(error) => eprintln!(
                    "warning: could not list the Nodes to name those carrying {} ({error}); check them by hand (docs/install.md)",
                    crate::guard::UNCONFIRMED_ANNOTATION
                ),
            }
            println!(
                "no CoronerRemediation in namespace {namespace} holds coroner's finalizer: coroner can be uninstalled"
            );
            Ok(())
        }
    }
}

/// Every Node's metadata, a page at a time (a Node's status is most of its size).
async fn node_metadata(
    client: Client,
) -> Result<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>, kube::Error> {
    let api = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client);
    let mut params = kube::api::ListParams::default().limit(500);
    let mut all = Vec::new();
    loop {
        let page = api.list_metadata(&params).await?;
        all.extend(page.items.into_iter().map(|n| n.metadata));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(all),
        }
    }
}

/// Every CRD as one multi-document YAML stream (what `crds/` holds). The emitter quotes strings that
/// YAML 1.1 readers such as kubectl would take for booleans (`On`, `Off`).
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in api::crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

async fn run_controller(args: ControllerArgs) -> Result<(), CliError> {
    telemetry::init(args.log_format);
    let from_env =
        |value: Option<String>, var: &str| value.or_else(|| std::env::var(var).ok()).filter(|v| !v.is_empty());
    let namespace = namespace_from(args.namespace)?;
    if args.leader_election && !lease_covers_a_request(args.lease_duration.get(), args.bmc_request_timeout.get()) {
        return Err(CliError::LeaseTooShort {
            lease: args.lease_duration,
            timeout: args.bmc_request_timeout,
            checks: crate::driver::CHECKS_ALLOWANCE.into(),
            skew: crate::leader::SKEW_MARGIN.into(),
        });
    }
    let pod_name = from_env(args.pod_name, "POD_NAME");
    let node_name = from_env(args.node_name, "NODE_NAME");
    // One crypto provider for the process: kube's client and the BMC clients both use ring.
    rustls::crypto::CryptoProvider::install_default(Arc::unwrap_or_clone(tls::crypto_provider()))
        .map_err(|_| CliError::CryptoProvider)?;
    let client = kube_client(args.kubeconfig.as_deref(), None).await?;
    let instance = uuid::Uuid::new_v4().to_string();
    let election = args.leader_election.then(|| {
        Election::new(
            args.lease_name.clone(),
            namespace.clone(),
            pod_name.clone().unwrap_or_else(|| format!("coroner-{instance}")),
            args.lease_duration.get(),
        )
    });
    let content_key = crate::cluster::content_key(&client, &namespace).await?;
    let settings = Settings {
        namespace,
        instance,
        content_key,
        bmc: BmcSettings {
            request_timeout: args.bmc_request_timeout.get(),
            read_retries: args.bmc_read_retries,
            retry_backoff: StdDuration::from_millis(250),
        },
        limits: StormLimits {
            max_concurrent: args.max_concurrent_fences,
            max_per_window: args.max_fences_per_window,
            window: args.fence_window.get(),
        },
        verify: VerifySettings { interval: args.verify_interval.get(), concurrency: args.verify_concurrency },
        guard_interval: args.guard_interval.get(),
        election,
        node_name,
        pod_name,
    };
    let (metrics, registry) = Metrics::new();
    let health = Health::default();
    let shutdown = CancellationToken::new();
    let admin = tokio::spawn(telemetry::serve(
        args.admin_address,
        registry,
        health.clone(),
        shutdown.clone().cancelled_owned(),
    ));
    let ctx = Arc::new(Context::new(client, settings, metrics));
    let signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: no new work, releasing the leader Lease");
        signal.cancel();
    });
    let result = controller::run(ctx, health, shutdown.clone()).await;
    shutdown.cancel();
    if let Ok(Err(error)) = admin.await {
        return Err(CliError::Admin(error));
    }
    result.map_err(CliError::Controller)
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = interrupt => {},
            _ = terminate.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_that_cannot_cover_one_bmc_request_after_its_checks_is_refused_at_startup() {
        let secs = StdDuration::from_secs;
        assert!(lease_covers_a_request(secs(15), secs(5)), "the defaults");
        assert!(!lease_covers_a_request(secs(9), secs(5)), "5 s + 2 s checks + 2 s skew leave nothing");
        assert!(!lease_covers_a_request(secs(15), secs(12)));
    }

    #[test]
    fn attest_dry_run_needs_a_reason_and_cannot_clear() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["coroner", "attest", "w1"][..], args].concat());
        let Command::Attest(args) = parse(&["--reason", "dark rack", "--dry-run"]).unwrap().command else {
            panic!("not attest")
        };
        assert!(args.dry_run);
        assert!(parse(&["--dry-run"]).is_err(), "a dry run says what would be attested: the reason too");
        assert!(parse(&["--clear", "--dry-run"]).is_err());
    }

    #[test]
    fn the_guard_interval_must_be_longer_than_zero() {
        let parse = |interval: &str| Cli::try_parse_from(["coroner", "controller", "--guard-interval", interval]);
        let refused = parse("0s").expect_err("a zero guard interval was accepted").to_string();
        assert!(refused.contains("--guard-interval") && refused.contains("must be longer than 0s"), "{refused}");
        assert!(parse("ten seconds").is_err());
        let Command::Controller(args) = parse("2s").unwrap().command else { panic!("not the controller") };
        assert_eq!(args.guard_interval.get(), StdDuration::from_secs(2));
    }
}
