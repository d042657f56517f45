use std::process::ExitCode;

use coroner::{WORKER_STACK, cli};

// `make bench` measures this allocator against glibc's (docs/benchmarks.md); the default build keeps glibc's.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
