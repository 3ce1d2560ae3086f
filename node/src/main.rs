//! The `lode` command: run a member, run a local dev cluster, talk to a
//! cluster (`kv`, `cluster`), and benchmark it.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let arguments = cli::Arguments::parse();
    cli::init_logging(&arguments);
    if matches!(arguments.command, cli::Commands::Node(_) | cli::Commands::Dev(_)) {
        // Everything a member writes (RocksDB's files, snapshots) is its
        // owner's alone: files 0600, directories 0700.
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lode: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(cli::run(arguments))
}
