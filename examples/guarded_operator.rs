//! An operator's reconcile loop guarded by a fenced leader election.
//!
//! Run two or more copies against one cluster: one leads and reconciles,
//! the others wait. Each reconcile reads the desired state (`spec`), does
//! its slow work, then writes the observed state (`status`) through
//! `Leadership::cas_fenced`. Should this process be paused past its
//! lease (a stopped VM, a long GC pause, SIGSTOP), another copy takes
//! over, and the write this one makes when it wakes is refused by the
//! store with `lease_lost`: the loop never checks whether it still leads
//! before writing, because a check there could be stale by the time the
//! write lands. The fence on the write is the check.
//!
//! ```text
//! guarded-operator --endpoints 127.0.0.1:7000 --name operator-a
//! ```
//!
//! One line per event on stdout: `leading token=N`, `reconciling
//! token=N`, `wrote status token=N`, `write refused: lease_lost
//! token=N`, `lost leadership token=N`, `resigned token=N`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use lode_client::{Client, ClientOptions, Kv, LeaderElection, Leadership, LodeError};

/// Most bytes of the token file read: a token is about a hundred.
const TOKEN_FILE_BYTES_MAX: u64 = 4096;

#[derive(Parser, Debug)]
struct Arguments {
    /// The cluster's client addresses, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    /// This candidate's name (a pod's name): unique per copy.
    #[arg(long)]
    name: String,
    /// The namespace holding the election's lease, `spec` and `status`.
    #[arg(long, default_value = "operator")]
    namespace: String,
    /// The leader's lease term in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    ttl_ms: u64,
    /// How long one reconcile's work takes, in milliseconds.
    #[arg(long, default_value_t = 500)]
    work_ms: u64,
    /// The cluster CA (PEM), for a cluster serving TLS.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// A file holding this operator's Lode token.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), LodeError> {
    let arguments = Arguments::parse();
    let kv = connect(&arguments)?.kv(arguments.namespace.clone());
    let election = LeaderElection::new(
        kv.clone(),
        "leader",
        arguments.name.clone(),
        Duration::from_millis(arguments.ttl_ms),
    )?;
    let work = Duration::from_millis(arguments.work_ms);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|error| LodeError::Unavailable(format!("cannot watch for SIGTERM: {error}")))?;
    loop {
        let leadership = tokio::select! {
            leadership = election.campaign() => leadership?,
            _ = terminate.recv() => return Ok(()),
        };
        println!("leading token={}", leadership.token());
        tokio::select! {
            outcome = lead(&kv, &leadership, work) => outcome?,
            _ = terminate.recv() => {
                let token = leadership.token();
                leadership.resign().await?;
                println!("resigned token={token}");
                return Ok(());
            }
        }
        println!("lost leadership token={}", leadership.token());
    }
}

fn connect(arguments: &Arguments) -> Result<Client, LodeError> {
    let mut options = ClientOptions::default();
    if let Some(ca) = &arguments.tls_ca {
        options.tls = Some(lode_client::tls::ClientTls::from_files(ca, None)?);
    }
    if let Some(path) = &arguments.token_file {
        use std::io::Read;
        let unreadable = |error: std::io::Error| LodeError::Invalid(format!("token file {}: {error}", path.display()));
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(unreadable)?
            .take(TOKEN_FILE_BYTES_MAX)
            .read_to_string(&mut text)
            .map_err(unreadable)?;
        options.token = Some(lode_client::protocol::AccessToken(text.trim().to_owned()));
    }
    Client::with_options(arguments.endpoints.clone(), options)
}

/// Reconciles while this process believes it leads; returns once a write
/// was refused or the leadership was reported lost.
async fn lead(kv: &Kv, leadership: &Leadership, work: Duration) -> Result<(), LodeError> {
    while leadership.is_leading() {
        let desired: u64 = kv.get_typed("spec").await?.unwrap_or(1);
        println!("reconciling token={}", leadership.token());
        // The slow part: calls to the system being operated.
        tokio::time::sleep(work).await;
        let status = serde_json::json!({ "replicas": desired, "token": leadership.token() });
        let write = leadership.cas_fenced(kv, "status").json(&status)?;
        let write = match kv.exists("status").await? {
            Some(meta) => write.expect_version(meta.version),
            None => write.expect_absent(),
        };
        match write.commit().await {
            Ok(_) => println!("wrote status token={}", leadership.token()),
            Err(error) if error.is_lease_lost() => {
                println!("write refused: lease_lost token={}", leadership.token());
                return Ok(());
            }
            // Another write came between the read and this one: read again.
            Err(error) if error.is_version_conflict() => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
