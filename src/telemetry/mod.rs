//! Logging: `tracing` with spans naming the remediation and node; text by default, JSON on request.

use clap::ValueEnum;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber. `RUST_LOG` overrides the default filter (`info`).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry.with(fmt::layer().with_writer(std::io::stderr)).init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_current_span(true).with_span_list(false).with_writer(std::io::stderr))
            .init(),
    }
}

mod admin;
mod metrics;

pub use admin::{Health, serve};
pub use metrics::{
    CategoryLabels, Metrics, NodeLabels, OutcomeLabels, PhaseLabels, StageLabels, StateLabels, decided_outcome,
    stage_durations,
};
