//! `lode snapshot`: save a backup of a running cluster to a file, inspect
//! one, and restore one into the data directory of a member of a new
//! cluster. The file format is `lode_types::backup`; taking and restoring
//! are `lode_raft_store::backup`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use lode_client::protocol::ClusterId;
use lode_raft_store::backup::{restore, RestorePlan};
use lode_raft_store::Member;
use lode_types::backup::{BackupHeader, ImageCheck};
use tokio::io::AsyncWriteExt;

use super::helpers::{print_json, Endpoints};

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Save a consistent backup of the cluster's state to FILE (admin): the
    /// first endpoint that answers takes it once it has applied every
    /// write the leader had committed.
    Save {
        file: PathBuf,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Check a backup and print its header and counts.
    Inspect {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Write the data directory of one member of a new cluster from a
    /// backup. Restore every founding member from the same file with the
    /// same --peers and --cluster-name, then start each with `lode node`
    /// and those flags.
    Restore {
        file: PathBuf,
        /// The new member's data directory; it must not exist or be empty.
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        id: u64,
        /// The new cluster's members by peer address: `1=host:port,...`.
        #[arg(long)]
        peers: String,
        /// Part of the new cluster's id, with --peers and the backup.
        #[arg(long, default_value = lode_node::config::CLUSTER_NAME_DEFAULT)]
        cluster_name: String,
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(command: SnapshotCommand) -> Result<ExitCode, String> {
    match command {
        SnapshotCommand::Save { file, json, endpoints } => {
            let started = std::time::Instant::now();
            let header = save(&file, &endpoints).await?;
            report(&header, json, Some(started.elapsed()));
        }
        SnapshotCommand::Inspect { file, json } => {
            let header = tokio::task::spawn_blocking(move || inspect(&file))
                .await
                .map_err(|error| error.to_string())??;
            report(&header, json, None);
        }
        SnapshotCommand::Restore {
            file,
            data_dir,
            id,
            peers,
            cluster_name,
            json,
        } => {
            let peers = super::parse_peers(&peers)?;
            let started = std::time::Instant::now();
            let (header, cluster) = tokio::task::spawn_blocking(move || {
                let (header, _) = lode_raft_store::backup::open(&file).map_err(|error| error.to_string())?;
                let cluster =
                    lode_node::cluster_identity::restored_cluster_id(&cluster_name, &peers, &header.image_sha256);
                let voters = peers
                    .iter()
                    .map(|(id, peer_address)| {
                        let member = Member {
                            peer_address: peer_address.clone(),
                            client_address: String::new(),
                        };
                        (*id, member)
                    })
                    .collect();
                let plan = RestorePlan {
                    member_id: id,
                    voters,
                    cluster_id: cluster.0,
                };
                let header = restore(&file, &data_dir, &plan).map_err(|error| format!("restore refused: {error}"))?;
                Ok::<_, String>((header, cluster))
            })
            .await
            .map_err(|error| error.to_string())??;
            if json {
                let mut value = header_json(&header);
                value["new_cluster_id"] = serde_json::json!(cluster.to_string());
                value["seconds"] = serde_json::json!(started.elapsed().as_secs_f64());
                print_json(&value);
            } else {
                report(&header, false, Some(started.elapsed()));
                println!("new cluster     {cluster}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Streams a backup into `FILE.partial` (mode 0600), synced, and renames it to `file`
/// once every byte matched its header; a failed save leaves no file.
async fn save(file: &Path, endpoints: &Endpoints) -> Result<BackupHeader, String> {
    let partial = PathBuf::from(format!("{}.partial", file.display()));
    let client = endpoints.client().map_err(|error| error.to_string())?;
    let result = async {
        // A backup holds every value and token hash: its owner's alone.
        let out = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .await
            .map_err(|error| format!("creating {}: {error}", partial.display()))?;
        let mut out = tokio::io::BufWriter::with_capacity(1 << 20, out);
        let header = client.save_backup(&mut out).await.map_err(|error| error.to_string())?;
        out.flush()
            .await
            .map_err(|error| format!("writing {}: {error}", partial.display()))?;
        let out = out.into_inner();
        out.sync_all()
            .await
            .map_err(|error| format!("syncing {}: {error}", partial.display()))?;
        tokio::fs::rename(&partial, file)
            .await
            .map_err(|error| format!("renaming {}: {error}", partial.display()))?;
        Ok(header)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&partial).await;
    }
    result
}

/// Reads a backup's header and checks every byte of its image against it.
fn inspect(file: &Path) -> Result<BackupHeader, String> {
    let (header, mut image) = lode_raft_store::backup::open(file).map_err(|error| error.to_string())?;
    let mut check = ImageCheck::new(&header);
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = image
            .read(&mut buffer)
            .map_err(|error| format!("reading {}: {error}", file.display()))?;
        if read == 0 {
            break;
        }
        check.update(&buffer[..read])?;
    }
    check.finish()?;
    Ok(header)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn header_json(header: &BackupHeader) -> serde_json::Value {
    serde_json::json!({
        "format_version": header.format_version,
        "cluster_id": ClusterId(header.cluster_id).to_string(),
        "taken_by": header.taken_by,
        "taken_at_micros": header.taken_at_micros,
        "last_log_term": header.last_log_term,
        "last_log_index": header.last_log_index,
        "voters": header.voters.iter().map(|(id, address)| serde_json::json!({"id": id, "peer_address": address})).collect::<Vec<_>>(),
        "image_bytes": header.image_bytes,
        "image_sha256": hex(&header.image_sha256),
        "counts": serde_json::to_value(&header.counts).unwrap_or_default(),
    })
}

fn report(header: &BackupHeader, json: bool, elapsed: Option<std::time::Duration>) {
    if json {
        let mut value = header_json(header);
        if let Some(elapsed) = elapsed {
            value["seconds"] = serde_json::json!(elapsed.as_secs_f64());
        }
        print_json(&value);
        return;
    }
    let counts = &header.counts;
    let voters: Vec<String> = header
        .voters
        .iter()
        .map(|(id, address)| format!("{id}={address}"))
        .collect();
    println!("format          {}", header.format_version);
    println!("cluster         {}", ClusterId(header.cluster_id));
    println!(
        "taken by        member {} at {} µs since the epoch",
        header.taken_by, header.taken_at_micros
    );
    println!(
        "log position    term {}, index {}",
        header.last_log_term, header.last_log_index
    );
    println!("voters          {}", voters.join(","));
    println!(
        "image           {} bytes, sha256 {}",
        header.image_bytes,
        hex(&header.image_sha256)
    );
    println!("kv entries      {}", counts.kv_entries);
    println!("state values    {}", counts.state_values);
    println!("entry bytes     {}", counts.entry_bytes);
    println!("expiring        {}", counts.expiring_entries);
    println!("leases          {}", counts.leases);
    println!("queue messages  {}", counts.queue_messages);
    println!("session links   {}", counts.session_links);
    println!("auth records    {}", counts.auth_records);
    println!("change events   {}", counts.change_events);
    println!("dedup records   {}", counts.dedup_records);
    if let Some(elapsed) = elapsed {
        println!("took            {:.2} s", elapsed.as_secs_f64());
    }
}
