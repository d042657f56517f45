//! Logging: `tracing` with spans naming the remediation and node; text by default, JSON on request.

use std::io::IsTerminal;

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
    let ansi = colours(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").is_some());
    match format {
        LogFormat::Text => registry.with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr)).init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_current_span(true).with_span_list(false).with_writer(std::io::stderr))
            .init(),
    }
}

/// Text logs carry ANSI colours only on a terminal (a pod's log, a file or a pipe gets plain text),
/// and never with `NO_COLOR` set (no-color.org).
fn colours(terminal: bool, no_color: bool) -> bool {
    terminal && !no_color
}

mod admin;
mod gauges;
mod metrics;

pub use admin::{Health, serve};
pub use gauges::{RemediationGauges, binding_gauges, remediation_gauges};
pub use metrics::{
    CategoryLabels, Metrics, NodeLabels, OutcomeLabels, PhaseLabels, StageLabels, StateLabels, decided_outcome,
    proven_again_outcome, stage_durations,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_that_did_not_opt_out() {
        assert!(colours(true, false));
        assert!(!colours(false, false), "a pod's log, a file or a pipe");
        assert!(!colours(true, true), "NO_COLOR");
    }
}
