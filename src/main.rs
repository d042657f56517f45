use std::process::ExitCode;

use coroner::cli;

#[tokio::main]
async fn main() -> ExitCode {
    match cli::run(cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("coroner: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
