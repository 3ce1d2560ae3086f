//! The `lode` command: run a member, run a local dev cluster, talk to a
//! cluster (`kv`, `cluster`), and benchmark it.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let arguments = cli::Arguments::parse();
    cli::init_logging(&arguments);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lode: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(cli::run(arguments))
}
