use std::process::ExitCode;

use coroner::{WORKER_STACK, cli};

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_stack_size(WORKER_STACK).build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("coroner: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli::parse())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("coroner: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
