use std::process::ExitCode;

use clap::Parser;
use coroner::cli::{self, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    match cli::run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("coroner: {error}");
            ExitCode::FAILURE
        }
    }
}
