use std::process::ExitCode;

use coroner::cli;

/// Worker threads' stack: the fence loop's futures nest deeply (a reconcile, the guard, the checks
/// right before a power action), and an unoptimised build's frames outgrow tokio's 2 MiB default.
/// Reserved address space, not memory in use.
const WORKER_STACK: usize = 8 << 20;

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
