//! The `lode` command: run a member, run a local dev cluster, talk to a
//! cluster (`kv`, `cluster`), and benchmark it.

use std::process::ExitCode;

use clap::Parser;

mod cli;

/// jemalloc serves the process's Rust allocations; RocksDB's C++ keeps the
/// system allocator (the crate's symbols are prefixed). glibc's allocator
/// took 8 to 12% of a member's samples under load, much of it in the slow
/// paths (`malloc_consolidate`, `unlink_chunk`) that blocks above its
/// per-thread caches (1,032 bytes) take: a call's future (2,256 bytes),
/// an HTTP request's header map. With jemalloc the members spent 5 to 7%
/// less CPU per put and per Deno KV get for 6 to 11% more resident memory
/// (`docs/performance.md`, nineteenth round).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The fewest async workers a `lode` process runs.
const RUNTIME_WORKERS_MIN: usize = 2;

fn main() -> ExitCode {
    let arguments = cli::Arguments::parse();
    // Tests that run a deployment's members on one host give the names
    // the deployment advertises their loopback addresses (like curl's
    // `--resolve`); nothing else sets it.
    if let Ok(overrides) = std::env::var("LODE_RESOLVE_OVERRIDE") {
        match lode_client::facade::SystemEnvironment::with_resolve_overrides(&overrides) {
            Ok(environment) => {
                lode_client::facade::install(Box::new(environment));
            }
            Err(message) => {
                eprintln!("lode: LODE_RESOLVE_OVERRIDE: {message}");
                return ExitCode::from(2);
            }
        }
    }
    cli::init_logging(&arguments);
    if matches!(arguments.command, cli::Commands::Node(_) | cli::Commands::Dev(_)) {
        // Everything a member writes (RocksDB's files, snapshots) is its
        // owner's alone: files 0600, directories 0700.
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    }
    // Two workers at least, even on one CPU: a member's log appends sync on
    // the Raft core's own worker (`raft-store/src/log_store.rs`), and the
    // ports must go on being served while one does.
    let workers = std::thread::available_parallelism().map_or(RUNTIME_WORKERS_MIN, |cpus| cpus.get());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(RUNTIME_WORKERS_MIN))
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lode: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(cli::run(arguments))
}
