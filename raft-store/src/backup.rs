//! Backups of a member's state: taking one (a checkpoint read for its log
//! position and counts, then packed as an image) and restoring one into a
//! new data directory that founds a new cluster. The file format is
//! `lode_types::backup`.
//!
//! A restore is checked end to end before the target exists: the header's
//! digest, the file's length, every byte of the image, its log position
//! and its counts. It then names the new voters in the state's membership,
//! stores the result as the member's snapshot (so a member added later
//! catches up from it), and seeds the log engine: the cluster id, the log
//! purged up to the image's last entry and a vote in its term, so the new
//! cluster's first election is in a later term than every entry it holds.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use lode_types::backup::{read_header, BackupHeader, ImageCounts, BACKUP_FORMAT_VERSION};
use openraft::{LogId, Membership, SnapshotMeta, StoredMembership, Vote};

use crate::engine::rocks::RocksEngine;
use crate::engine::{Durability, Engine, Space, WriteBatch};
use crate::error::{encode, EngineError};
use crate::keys::{self, meta};
use crate::snapshot::StoredSnapshot;
use crate::state_machine::{applied_log_id, read_meta};
use crate::type_config::{Member, NodeId};

/// Pairs read per page while counting an image: at most 16 MiB of the
/// largest values held at once.
const COUNT_PAGE_PAIRS: usize = 256;
const _: () = assert!(COUNT_PAGE_PAIRS * lode_types::limits::VALUE_BYTES_MAX <= 16 << 20);

/// A backup taken on a member: its header and the image file (under the
/// state engine's `snapshots/`, for the caller to stream and remove).
pub struct TakenBackup {
    pub header: BackupHeader,
    pub image: PathBuf,
}

/// Takes a consistent backup of `engine`: a checkpoint, read for its log
/// position, membership and counts, then packed. Slow; run it off the
/// async runtime.
pub fn take(
    engine: &RocksEngine,
    cluster_id: u128,
    taken_by: u64,
    now_micros: u64,
) -> Result<TakenBackup, EngineError> {
    let checkpoint = engine.checkpoint()?;
    let (last_log_id, voters, counts) = {
        let view = checkpoint.open_read_only()?;
        let last_log_id = applied_log_id(&view)?
            .ok_or_else(|| EngineError::corrupt("backup", "the state has applied no entry yet"))?;
        let membership: StoredMembership<NodeId, Member> = read_meta(&view, meta::MEMBERSHIP)?.unwrap_or_default();
        let voters = membership
            .membership()
            .voter_ids()
            .filter_map(|id| {
                let member = membership.membership().get_node(&id)?;
                Some((id, member.peer_address.clone()))
            })
            .collect();
        (last_log_id, voters, count(&view)?)
    };
    let (image, packed) = engine.pack_backup(checkpoint)?;
    Ok(TakenBackup {
        header: BackupHeader {
            format_version: BACKUP_FORMAT_VERSION,
            cluster_id,
            taken_by,
            taken_at_micros: now_micros,
            last_log_term: last_log_id.leader_id.term,
            last_log_index: last_log_id.index,
            voters,
            counts,
            image_bytes: packed.bytes,
            image_sha256: packed.sha256.to_vec(),
        },
        image,
    })
}

/// Calls `each` with every pair of `space` a reader sees (not the change
/// events already trimmed), in pages.
fn for_each_pair<E: Engine>(
    engine: &E,
    space: Space,
    mut each: impl FnMut(&[u8], &[u8]) -> Result<(), EngineError>,
) -> Result<(), EngineError> {
    let mut start = crate::apply::change_log::first_readable_key(engine, space)?;
    loop {
        let page = engine.scan(space, &start, None, COUNT_PAGE_PAIRS)?;
        for (key, value) in &page {
            each(key, value)?;
        }
        match page.last() {
            Some((last, _)) if page.len() == COUNT_PAGE_PAIRS => {
                start = last.clone();
                start.push(0);
            }
            _ => return Ok(()),
        }
    }
}

/// Counts what an engine's state holds, by kind.
pub fn count<E: Engine>(engine: &E) -> Result<ImageCounts, EngineError> {
    use lode_types::state_update::SCOPE_NAMESPACE_PREFIX;
    let mut counts = ImageCounts::default();
    for_each_pair(engine, Space::Entries, |key, value| {
        let (namespace, _) =
            keys::split_entry_key(key).ok_or_else(|| EngineError::corrupt("entry key", "no namespace"))?;
        let bytes = (key.len() + value.len()) as u64;
        if namespace.starts_with("\0lease\0") {
            counts.leases += 1;
        } else if namespace == crate::queue::READY || namespace == crate::queue::CLAIMED {
            counts.queue_messages += 1;
        } else if namespace.starts_with("\0session\0") {
            counts.session_links += 1;
        } else if namespace == lode_types::auth::AUTH_NAMESPACE {
            counts.auth_records += 1;
        } else if namespace.starts_with(SCOPE_NAMESPACE_PREFIX) {
            counts.state_values += 1;
            counts.entry_bytes += bytes;
        } else if !namespace.starts_with('\0') {
            counts.kv_entries += 1;
            counts.entry_bytes += bytes;
        }
        Ok(())
    })?;
    for (space, counted) in [
        (Space::Expiry, &mut counts.expiring_entries),
        (Space::ChangeLog, &mut counts.change_events),
        (Space::Dedup, &mut counts.dedup_records),
    ] {
        for_each_pair(engine, space, |_, _| {
            *counted += 1;
            Ok(())
        })?;
    }
    Ok(counts)
}

/// The cluster a backup founds.
#[derive(Clone, Debug)]
pub struct RestorePlan {
    /// The member whose data directory this restore writes.
    pub member_id: NodeId,
    /// The new cluster's voters by id.
    pub voters: BTreeMap<NodeId, Member>,
    pub cluster_id: u128,
}

fn refused(detail: impl std::fmt::Display) -> EngineError {
    EngineError::corrupt("backup", detail)
}

fn io_context(path: &Path, action: &str) -> impl FnOnce(std::io::Error) -> EngineError {
    let context = format!("{action} {}", path.display());
    move |error| EngineError::io(context, error)
}

/// Reads and checks the header of the backup at `path`, and that the file
/// is exactly as long as the header says. Answers the header, and the file
/// positioned at the image.
pub fn open(path: &Path) -> Result<(BackupHeader, BufReader<fs::File>), EngineError> {
    let file = fs::File::open(path).map_err(io_context(path, "opening"))?;
    let length = file
        .metadata()
        .map_err(io_context(path, "reading the length of"))?
        .len();
    let mut input = BufReader::new(file);
    let (header, header_bytes) = read_header(&mut input).map_err(refused)?;
    let expected = header_bytes.saturating_add(header.image_bytes);
    if length != expected {
        return Err(refused(format!(
            "the file is {length} bytes but its header says {expected}: it was cut short or added to"
        )));
    }
    Ok((header, input))
}

/// Restores the backup at `backup` into `data_dir`, which must not exist
/// or be empty; it is written under a temporary name beside it and renamed
/// into place only once complete, so a refused backup leaves it untouched.
pub fn restore(backup: &Path, data_dir: &Path, plan: &RestorePlan) -> Result<BackupHeader, EngineError> {
    if !plan.voters.contains_key(&plan.member_id) {
        return Err(refused(format!(
            "member {} is not one of the new voters",
            plan.member_id
        )));
    }
    let occupied = fs::read_dir(data_dir).map(|mut items| items.next().is_some());
    if occupied.unwrap_or(false) {
        return Err(refused(format!(
            "{} is not empty: a restore writes only a new data directory",
            data_dir.display()
        )));
    }
    let (header, image) = open(backup)?;
    let name = data_dir
        .file_name()
        .ok_or_else(|| refused(format!("{} names no directory", data_dir.display())))?;
    let staging = data_dir.with_file_name(format!(".{}.restoring", name.to_string_lossy()));
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(io_context(&staging, "removing"))?;
    }
    fs::create_dir_all(&staging).map_err(io_context(&staging, "creating"))?;
    if let Err(error) = restore_into(&header, image, &staging, plan) {
        let _ = fs::remove_dir_all(&staging);
        return Err(error);
    }
    if data_dir.exists() {
        fs::remove_dir(data_dir).map_err(io_context(data_dir, "removing the empty"))?;
    }
    fs::rename(&staging, data_dir).map_err(io_context(&staging, "renaming"))?;
    if let Some(parent) = data_dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        fs::File::open(parent)
            .and_then(|directory| directory.sync_all())
            .map_err(io_context(parent, "syncing"))?;
    }
    Ok(header)
}

fn restore_into(
    header: &BackupHeader,
    image: impl Read,
    staging: &Path,
    plan: &RestorePlan,
) -> Result<(), EngineError> {
    let (state, digest) = RocksEngine::restore_image(staging.join("state"), image, header.image_bytes)?;
    if digest.as_slice() != header.image_sha256.as_slice() {
        return Err(refused("the image is not the one its header names (SHA-256 differs)"));
    }
    let last_log_id = applied_log_id(&state)?.ok_or_else(|| refused("the image has applied no entry"))?;
    if (last_log_id.leader_id.term, last_log_id.index) != (header.last_log_term, header.last_log_index) {
        return Err(refused(format!(
            "the image is at {last_log_id} but its header says {}-{}",
            header.last_log_term, header.last_log_index
        )));
    }
    // Checked after reading back: the state must hold what was counted.
    let counts = count(&state)?;
    if counts != header.counts {
        return Err(refused(format!(
            "the image holds {counts:?} but its header counted {:?}",
            header.counts
        )));
    }
    let voter_ids: BTreeSet<NodeId> = plan.voters.keys().copied().collect();
    let membership = StoredMembership::new(Some(last_log_id), Membership::new(vec![voter_ids], plan.voters.clone()));
    let mut batch = WriteBatch::default();
    batch.put(
        Space::StateMeta,
        meta::MEMBERSHIP.to_vec(),
        encode("state meta", &membership)?,
    );
    state.write(batch, Durability::Synced)?;
    save_as_snapshot(&state, last_log_id, membership)?;
    drop(state);
    seed_log(&staging.join("log"), plan, last_log_id)
}

/// Stores the restored state as the member's snapshot, so the log's start
/// (purged up to the image) is covered and a new member catches up from it.
/// Its last write was synced, so the record stands for the state alone.
fn save_as_snapshot(
    state: &RocksEngine,
    last_log_id: LogId<NodeId>,
    membership: StoredMembership<NodeId, Member>,
) -> Result<(), EngineError> {
    state.sync_writes()?;
    let record = StoredSnapshot {
        meta: SnapshotMeta {
            last_log_id: Some(last_log_id),
            last_membership: membership,
            snapshot_id: format!("restored-{}-{}", last_log_id.leader_id.term, last_log_id.index),
        },
    };
    state.save_snapshot(&record.to_bytes()?, None)
}

fn seed_log(root: &Path, plan: &RestorePlan, last_log_id: LogId<NodeId>) -> Result<(), EngineError> {
    let log = RocksEngine::open(root)?;
    let mut batch = WriteBatch::default();
    let vote = Vote::new(last_log_id.leader_id.term, plan.member_id);
    batch.put(Space::RaftMeta, meta::VOTE.to_vec(), encode("raft meta", &vote)?);
    batch.put(
        Space::RaftMeta,
        meta::LAST_PURGED.to_vec(),
        encode("raft meta", &last_log_id)?,
    );
    batch.put(
        Space::RaftMeta,
        meta::COMMITTED.to_vec(),
        encode("raft meta", &Some(last_log_id))?,
    );
    batch.put(
        Space::RaftMeta,
        meta::CLUSTER_ID.to_vec(),
        encode("raft meta", &plan.cluster_id)?,
    );
    log.write(batch, Durability::Synced)
}
