//! The `coroner` command line. Every flag can also be set through an environment variable
//! `CORONER_<FLAG>`.

use std::{sync::Arc, time::Duration as StdDuration};

use clap::{Parser, Subcommand};
use kube::Client;

use crate::{
    api,
    bmc::tls,
    controller::{self, BmcSettings, Context},
    gates::StormLimits,
    telemetry::{self, LogFormat},
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
    /// Run the operator against the current kubeconfig or the in-cluster config.
    Controller(ControllerArgs),
    /// Print every CRD coroner serves, as YAML.
    Crd,
    /// Print the version.
    Version,
}

#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// The namespace coroner watches and acts in (default: $POD_NAMESPACE).
    #[arg(long, env = "CORONER_NAMESPACE")]
    pub namespace: Option<String>,

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

    /// At most this many power-offs per --fence-window, so a switch failure cannot switch off every
    /// partitioned but healthy node within a minute.
    #[arg(long, env = "CORONER_MAX_FENCES_PER_WINDOW", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_fences_per_window: u32,

    #[arg(long, env = "CORONER_FENCE_WINDOW", default_value = "10m")]
    pub fence_window: api::Duration,
}

/// The error `main` reports before exiting non-zero.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("no namespace: set --namespace (CORONER_NAMESPACE) or POD_NAMESPACE")]
    NoNamespace,
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot print the CRDs: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
    #[error("cannot install the TLS crypto provider")]
    CryptoProvider,
}

pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Crd => {
            print!("{}", crds_yaml()?);
            Ok(())
        }
        Command::Version => {
            println!("coroner {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Controller(args) => run_controller(args).await,
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
    let namespace = args
        .namespace
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .filter(|ns| !ns.is_empty())
        .ok_or(CliError::NoNamespace)?;
    // One crypto provider for the process: kube's client and the BMC clients both use ring.
    rustls::crypto::CryptoProvider::install_default(Arc::unwrap_or_clone(tls::crypto_provider()))
        .map_err(|_| CliError::CryptoProvider)?;
    let client = Client::try_default().await?;
    let instance = uuid::Uuid::new_v4().to_string();
    let bmc = BmcSettings {
        request_timeout: args.bmc_request_timeout.get(),
        read_retries: args.bmc_read_retries,
        retry_backoff: StdDuration::from_millis(250),
    };
    let limits = StormLimits {
        max_concurrent: args.max_concurrent_fences,
        max_per_window: args.max_fences_per_window,
        window: args.fence_window.get(),
    };
    let ctx = Arc::new(Context::new(client, namespace, instance, bmc, limits));
    controller::run(ctx, shutdown_signal()).await;
    Ok(())
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
