//! openraft's state machine over an [`Engine`]: applies committed entries,
//! builds snapshots and installs received ones, as images openraft streams
//! in chunks (files for RocksDB).
//!
//! State-machine data and `last_applied` always go in one write batch, so a
//! crash never leaves state that disagrees with the position it claims.
//!
//! A snapshot is not a second copy of the state. A build syncs the state's
//! write-ahead log and saves a record of its meta: the state itself, which
//! can then never go back behind the record, is the snapshot. An image is
//! made only when openraft asks for one to send (`get_current_snapshot`):
//! a checkpoint of the state as applied then, packed as it is first read.
//! An install keeps the received image as the record's until the state it
//! replaced is on disk, then drops it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{Entry, EntryPayload, LogId, OptionalSend, SnapshotMeta, StorageError, StoredMembership};

use crate::applied_index::AppliedIndex;
use crate::apply::{apply_proposal, Carried};
use crate::command::ProposalOutcome;
use crate::engine::{run_blocking, Durability, Engine, SavedSnapshot, Space, WriteBatch};
use crate::entry::SourceId;
use crate::error::{decode, encode, read_error, write_error, EngineError};
use crate::keys::meta;

use crate::reader::StateReader;
use crate::snapshot::{SnapshotImage, StoredSnapshot};
use crate::type_config::{Member, NodeId, TypeConfig};

type Membership = StoredMembership<NodeId, Member>;

/// The applied state of one node.
pub struct StateMachineStore<E: Engine> {
    engine: Arc<E>,
    applied: AppliedIndex,
    auth_version: AppliedIndex,
    snapshot_sequence: u64,
    stored_snapshot: SnapshotOnDisk,
    observer: crate::observer::Observer,
    trimmed_events: crate::trimmed_events::TrimmedEvents,
    /// When set, an entry is applied only once the log holds it on disk.
    log_durability: Option<Arc<crate::log_durability::LogDurability>>,
    /// Where claims and readers search for ready queue messages; back at
    /// the start when a snapshot replaces the state.
    ready_floor: crate::queue::PublishedReadyFloor,
}

/// The last log id of the snapshot on disk, and the lock every snapshot
/// save takes. Shared with the log store, which never purges past it.
///
/// openraft 0.9 builds a snapshot in a task of its own while the state
/// machine may install a newer one from the leader, so a build that
/// finishes last must not replace the newer snapshot with its older one.
/// And after installing a snapshot it purges the log without waiting for
/// the install to reach the disk. Either way a crash would leave the log
/// purged past the stored snapshot, and the member could not start again:
/// the real-process test (`node/tests/linearizability.rs`) caught it.
#[derive(Clone, Debug, Default)]
pub struct SnapshotOnDisk {
    last_log_id: Arc<std::sync::Mutex<Option<LogId<NodeId>>>>,
    /// Set by the first state machine write that fails.
    failed: Arc<AtomicBool>,
}

impl SnapshotOnDisk {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<LogId<NodeId>>> {
        // A panic while holding the lock leaves the id of a completely saved
        // snapshot or of the previous one; either is true of the disk.
        self.last_log_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The last log id the snapshot on disk covers.
    pub fn last_log_id(&self) -> Option<LogId<NodeId>> {
        *self.lock()
    }

    /// Whether a state machine write failed. openraft 0.9 stops the state
    /// machine's worker at its first error, so no snapshot it was saving
    /// will reach the disk, and a purge waiting for one must stop waiting.
    pub fn state_machine_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Notes a failed state machine write, as openraft's error.
    fn failure(&self, error: EngineError) -> StorageError<NodeId> {
        self.failed.store(true, Ordering::Release);
        write_error(error)
    }
}

/// Saves the record of `meta` (with `image`, if given) as the snapshot on
/// disk unless the one there is at least as new; returns whether it was
/// saved. Without an image the state must be durable at least that far.
fn save_if_newer<E: Engine>(
    engine: &E,
    on_disk: &SnapshotOnDisk,
    meta: &SnapshotMeta<NodeId, Member>,
    image: Option<&SnapshotImage>,
) -> Result<bool, EngineError> {
    let mut last_log_id = on_disk.lock();
    if last_log_id.is_some() && *last_log_id >= meta.last_log_id {
        return Ok(false);
    }
    let record = StoredSnapshot { meta: meta.clone() }.to_bytes()?;
    engine.save_snapshot(&record, image)?;
    *last_log_id = meta.last_log_id;
    Ok(true)
}

/// Saves the record of `meta` again without its image, now that the state
/// is durable at `meta`, unless a newer snapshot replaced it meanwhile.
fn drop_image_of<E: Engine>(
    engine: &E,
    on_disk: &SnapshotOnDisk,
    meta: &SnapshotMeta<NodeId, Member>,
) -> Result<(), EngineError> {
    let last_log_id = on_disk.lock();
    if *last_log_id == meta.last_log_id {
        engine.save_snapshot(&StoredSnapshot { meta: meta.clone() }.to_bytes()?, None)?;
    }
    Ok(())
}

/// What a state no longer reads, which the engine may drop once that
/// state is durable: nothing a member can return to reads it.
#[derive(Clone, Copy, Debug)]
struct Forgettable {
    /// Dedup records older than this time answer nothing.
    dedup_before_micros: u64,
    /// Change events at or before this position were trimmed.
    change_events_through: Option<(u64, u32)>,
}

impl Forgettable {
    fn of<E: Engine>(engine: &E) -> Result<Self, EngineError> {
        Ok(Self {
            dedup_before_micros: crate::apply::dedup::forgotten_before(engine)?,
            change_events_through: crate::apply::change_log::trimmed_through(engine)?,
        })
    }

    /// Tells the engine; call only once the state read is durable.
    fn forget<E: Engine>(self, engine: &E) {
        engine.forget_dedup_records_before(self.dedup_before_micros);
        if let Some(position) = self.change_events_through {
            engine.forget_change_events_through(position);
        }
    }
}

/// The meta of the state as applied, and what that state no longer reads;
/// `sequence` tells snapshots of one position apart.
fn applied_meta<E: Engine>(
    engine: &E,
    sequence: u64,
) -> Result<(SnapshotMeta<NodeId, Member>, Forgettable), EngineError> {
    let last_log_id = applied_log_id(engine)?;
    let last_membership: Membership = read_meta(engine, meta::MEMBERSHIP)?.unwrap_or_default();
    let forgettable = Forgettable::of(engine)?;
    let snapshot_id = match last_log_id {
        Some(log_id) => format!("{}-{}-{sequence}", log_id.leader_id.term, log_id.index),
        None => format!("0-0-{sequence}"),
    };
    let meta = SnapshotMeta {
        last_log_id,
        last_membership,
        snapshot_id,
    };
    Ok((meta, forgettable))
}

/// Syncs the state and saves the record of `meta`, the state's position
/// now or earlier; then lets the engine forget what a state at `meta` no
/// longer reads.
fn save_synced_state<E: Engine>(
    engine: &E,
    on_disk: &SnapshotOnDisk,
    meta: &SnapshotMeta<NodeId, Member>,
    forgettable: Forgettable,
) -> Result<bool, EngineError> {
    engine.sync_writes()?;
    let saved = save_if_newer(engine, on_disk, meta, None)?;
    if saved {
        forgettable.forget(engine);
    }
    Ok(saved)
}

impl<E: Engine> std::fmt::Debug for StateMachineStore<E> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("StateMachineStore")
    }
}

pub(crate) fn read_meta<E: Engine, T: serde::de::DeserializeOwned>(
    engine: &E,
    key: &[u8],
) -> Result<Option<T>, EngineError> {
    match engine.get(Space::StateMeta, key)? {
        Some(bytes) => Ok(Some(decode("state meta", &bytes)?)),
        None => Ok(None),
    }
}

pub(crate) fn applied_log_id<E: Engine>(engine: &E) -> Result<Option<LogId<NodeId>>, EngineError> {
    Ok(read_meta::<E, Option<LogId<NodeId>>>(engine, meta::LAST_APPLIED)?.flatten())
}

impl<E: Engine> StateMachineStore<E> {
    /// Opens the state machine over `engine`. When the stored snapshot is
    /// newer than the applied state (buffered writes lost with the machine
    /// after the log was purged), the state is restored from the snapshot so
    /// that it never falls behind the log's start.
    pub fn open(engine: Arc<E>) -> Result<Self, EngineError> {
        let mut applied = applied_log_id(engine.as_ref())?;
        let mut stored_snapshot = None;
        if let Some(SavedSnapshot { record, image }) = engine.load_snapshot()? {
            let snapshot = StoredSnapshot::from_bytes(&record)?;
            stored_snapshot = snapshot.meta.last_log_id;
            if snapshot.meta.last_log_id > applied {
                // Only a record saved with its image can be ahead: one
                // without was saved once the state was on disk that far.
                let image = image.ok_or_else(|| {
                    EngineError::corrupt(
                        "state",
                        format!(
                            "applied up to {applied:?}, behind its snapshot at {:?}, which was saved once the state was on disk that far",
                            snapshot.meta.last_log_id
                        ),
                    )
                })?;
                tracing::warn!(
                    snapshot = ?snapshot.meta.last_log_id,
                    applied = ?applied,
                    "state is older than the stored snapshot; restoring the snapshot"
                );
                let prepared = engine.prepare_restore(&image)?;
                engine.finish_restore(prepared)?;
                applied = applied_log_id(engine.as_ref())?;
            }
        }
        let index = applied.map(|log_id| log_id.index).unwrap_or(0);
        Ok(Self {
            engine,
            applied: AppliedIndex::new(index),
            auth_version: AppliedIndex::new(0),
            snapshot_sequence: 0,
            stored_snapshot: SnapshotOnDisk {
                last_log_id: Arc::new(std::sync::Mutex::new(stored_snapshot)),
                failed: Arc::default(),
            },
            observer: None,
            trimmed_events: Default::default(),
            log_durability: None,
            ready_floor: crate::queue::PublishedReadyFloor::default(),
        })
    }

    /// Applies no entry before `durability` says the log holds it on disk:
    /// a leader's own appends may not be yet (`log_durability.rs`).
    pub fn applying_only_durable(mut self, durability: Arc<crate::log_durability::LogDurability>) -> Self {
        self.log_durability = Some(durability);
        self
    }

    /// Reports every applied entry, snapshot build and install to
    /// `observer`.
    pub fn observed_by(mut self, observer: Arc<dyn crate::observer::StorageObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The snapshot on disk, for the log store to purge no further.
    pub fn snapshot_on_disk(&self) -> SnapshotOnDisk {
        self.stored_snapshot.clone()
    }

    /// A read handle that follows this state machine's applied index.
    pub fn reader(&self) -> StateReader<E> {
        StateReader::new(
            self.engine.clone(),
            self.applied.clone(),
            self.auth_version.clone(),
            self.ready_floor.clone(),
        )
    }

    fn apply_entry(&mut self, entry: &Entry<TypeConfig>) -> Result<ProposalOutcome, EngineError> {
        let position = SourceId {
            term: entry.log_id.leader_id.term,
            index: entry.log_id.index,
        };
        let mut batch = WriteBatch::default();
        let mut ready_floor = None;
        let outcome = match &entry.payload {
            EntryPayload::Normal(proposal) => {
                let mut carried = Carried {
                    clock_micros: read_meta(self.engine.as_ref(), meta::CLOCK)?.unwrap_or(0),
                    ready_floor: self.ready_floor.read(),
                };
                let outcomes = apply_proposal(self.engine.as_ref(), &mut batch, proposal, position, &mut carried)?;
                ready_floor = Some(carried.ready_floor);
                batch.put(
                    Space::StateMeta,
                    meta::CLOCK.to_vec(),
                    encode("state meta", &carried.clock_micros)?,
                );
                ProposalOutcome { outcomes }
            }
            EntryPayload::Membership(membership) => {
                let stored = Membership::new(Some(entry.log_id), membership.clone());
                batch.put(
                    Space::StateMeta,
                    meta::MEMBERSHIP.to_vec(),
                    encode("state meta", &stored)?,
                );
                ProposalOutcome::default()
            }
            EntryPayload::Blank => ProposalOutcome::default(),
        };
        batch.put(
            Space::StateMeta,
            meta::LAST_APPLIED.to_vec(),
            encode("state meta", &Some(entry.log_id))?,
        );
        // Buffered: the log is synced, so a lost apply is re-applied from it
        // on restart; `open` covers the case where the log was purged.
        self.engine.write(batch, Durability::Buffered)?;
        // Once the entry is on the engine, before the applied index moves.
        if let Some(ready_floor) = ready_floor {
            self.ready_floor.publish(ready_floor);
        }
        if changes_auth(&entry.payload) {
            self.auth_version.set(self.auth_version.get().wrapping_add(1));
        }
        Ok(outcome)
    }
}

/// Whether an entry holds an auth change, so the auth state may move.
fn changes_auth(payload: &EntryPayload<TypeConfig>) -> bool {
    let EntryPayload::Normal(proposal) = payload else {
        return false;
    };
    proposal.commands.iter().any(|command| {
        command
            .body()
            .operations
            .iter()
            .any(|operation| matches!(operation, crate::command::Operation::Auth { .. }))
    })
}

/// Builds one snapshot: the meta of the state when the builder was made.
pub struct SnapshotBuilder<E: Engine> {
    engine: Arc<E>,
    stored_snapshot: SnapshotOnDisk,
    taken: Result<(SnapshotMeta<NodeId, Member>, Forgettable), String>,
    observer: crate::observer::Observer,
}

impl<E: Engine> RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder<E> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let taken = std::mem::replace(&mut self.taken, Err("snapshot builder used twice".to_owned()));
        let (meta, forgettable) = taken.map_err(|message| {
            read_error(EngineError::io(
                "reading the applied state",
                std::io::Error::other(message),
            ))
        })?;
        let stored_snapshot = self.stored_snapshot.clone();
        let began = tokio::time::Instant::now();
        let saved_meta = meta.clone();
        // The sync covers every apply so far, so the state on disk is at
        // least at `meta`, taken between two applies before them.
        let saved = run_blocking(&self.engine, move |engine| {
            save_synced_state(engine, &stored_snapshot, &saved_meta, forgettable)
        })
        .await
        .map_err(|error| self.stored_snapshot.failure(error))?;
        if saved {
            tracing::info!(snapshot = %meta.snapshot_id, "built snapshot");
        } else {
            tracing::info!(snapshot = %meta.snapshot_id, "a newer snapshot was stored meanwhile; keeping it");
        }
        if let Some(observer) = &self.observer {
            observer.snapshot_built(began.elapsed());
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(SnapshotImage::empty()),
        })
    }
}

impl<E: Engine> RaftStateMachine<TypeConfig> for StateMachineStore<E> {
    type SnapshotBuilder = SnapshotBuilder<E>;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        let applied = applied_log_id(self.engine.as_ref()).map_err(read_error)?;
        let membership = read_meta(self.engine.as_ref(), meta::MEMBERSHIP)
            .map_err(read_error)?
            .unwrap_or_default();
        Ok((applied, membership))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ProposalOutcome>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut outcomes = Vec::new();
        let mut last_index = None;
        let mut applied_entries = 0;
        for entry in entries {
            if let Some(durability) = &self.log_durability {
                let waited = durability.wait_until_durable(entry.log_id.index).await;
                waited.map_err(|error| {
                    self.stored_snapshot
                        .failure(EngineError::io("applying", std::io::Error::other(error)))
                })?;
            }
            let began = self.observer.as_ref().map(|_| tokio::time::Instant::now());
            let outcome = self.apply_entry(&entry);
            outcomes.push(outcome.map_err(|error| self.stored_snapshot.failure(error))?);
            if let (Some(observer), Some(began)) = (&self.observer, began) {
                let commands = match &entry.payload {
                    EntryPayload::Normal(proposal) => proposal.commands.len(),
                    _ => 0,
                };
                observer.entry_applied(commands, began.elapsed());
            }
            last_index = Some(entry.log_id.index);
            applied_entries += 1;
        }
        if let Some(index) = last_index {
            self.applied.set(index);
        }
        self.trimmed_events
            .applied(&self.engine, applied_entries)
            .map_err(|error| self.stored_snapshot.failure(error))?;
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Read here, between two applies, so the meta is one the state
        // held; the build then syncs at least that far.
        self.snapshot_sequence += 1;
        let taken = applied_meta(self.engine.as_ref(), self.snapshot_sequence).map_err(|error| error.to_string());
        SnapshotBuilder {
            engine: self.engine.clone(),
            stored_snapshot: self.stored_snapshot.clone(),
            taken,
            observer: self.observer.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotImage>, StorageError<NodeId>> {
        let image = run_blocking(&self.engine, |engine| engine.receiving_image())
            .await
            .map_err(|error| self.stored_snapshot.failure(error))?;
        Ok(Box::new(image))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<SnapshotImage>,
    ) -> Result<(), StorageError<NodeId>> {
        // The state is replaced, in whole or (on a failure) in part: claims
        // search from the namespace's start again.
        self.ready_floor.publish(crate::queue::ReadyFloor::default());
        let stored_snapshot = self.stored_snapshot.clone();
        let saved_meta = meta.clone();
        let began = tokio::time::Instant::now();
        let installed = run_blocking(&self.engine, move |engine| {
            let mut image = engine.adopt_image(*snapshot)?;
            // A bad or truncated image is refused before anything is saved
            // or replaced: the live state and the snapshot on disk stay.
            let prepared = match engine.prepare_restore(&image) {
                Ok(prepared) => prepared,
                Err(error) => {
                    engine.discard_image(&image)?;
                    return Err(error);
                }
            };
            // The snapshot with its image first, the state second: a crash
            // between them leaves a snapshot newer than the state, which
            // `open` restores. The other order would leave state the
            // snapshot on disk does not cover, and openraft, finding the log
            // behind the applied state on restart, purges the log up to it.
            // openraft installs only past its committed index, so a newer
            // snapshot on disk means this one is not the leader's.
            if !save_if_newer(engine, &stored_snapshot, &saved_meta, Some(&image))? {
                engine.discard_image(&image)?;
                return Err(EngineError::corrupt(
                    "snapshot",
                    format!("{:?} is not newer than the snapshot on disk", saved_meta.last_log_id),
                ));
            }
            // Named by the record until the restored state is on disk.
            image.keep();
            engine.finish_restore(prepared)?;
            Forgettable::of(engine)?.forget(engine);
            // The restored state is on disk: the record stands for it alone.
            drop_image_of(engine, &stored_snapshot, &saved_meta)?;
            applied_log_id(engine)
        })
        .await
        .map_err(|error| self.stored_snapshot.failure(error))?;
        // Checked after restoring: the image must be the state the meta names.
        if installed != meta.last_log_id {
            return Err(self.stored_snapshot.failure(EngineError::corrupt(
                "snapshot",
                format!("image is at {installed:?} but its meta says {:?}", meta.last_log_id),
            )));
        }
        let index = meta.last_log_id.map(|log_id| log_id.index).unwrap_or(0);
        self.applied.set(index);
        // The restored state may hold other users, roles and tokens.
        self.auth_version.set(self.auth_version.get().wrapping_add(1));
        tracing::info!(snapshot = %meta.snapshot_id, "installed snapshot");
        if let Some(observer) = &self.observer {
            observer.snapshot_installed(began.elapsed());
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let Some(SavedSnapshot { record, image }) = self.engine.load_snapshot().map_err(read_error)? else {
            return Ok(None);
        };
        let stored = StoredSnapshot::from_bytes(&record).map_err(read_error)?;
        if let Some(image) = image {
            // An image kept with its record: an install's, or format 1's.
            return Ok(Some(Snapshot {
                meta: stored.meta,
                snapshot: Box::new(image),
            }));
        }
        // Taken here, between two applies, so the checkpoint is the state
        // at `meta`.
        self.snapshot_sequence += 1;
        let (mut meta, forgettable) = applied_meta(self.engine.as_ref(), self.snapshot_sequence).map_err(read_error)?;
        let checkpoint = self.engine.checkpoint().map_err(read_error)?;
        if meta.last_log_id == stored.meta.last_log_id {
            meta = stored.meta;
        } else {
            // openraft takes this meta as its snapshot's when it starts, and
            // may purge the log up to it: the record on disk goes as far.
            let on_disk = self.stored_snapshot.clone();
            let saved_meta = meta.clone();
            run_blocking(&self.engine, move |engine| {
                save_synced_state(engine, &on_disk, &saved_meta, forgettable)
            })
            .await
            .map_err(|error| self.stored_snapshot.failure(error))?;
        }
        let image = if self.engine.blocks_on_disk() {
            let engine = self.engine.clone();
            let observer = self.observer.clone();
            SnapshotImage::unpacked(Box::new(move || {
                let (image, bytes) = engine.pack(checkpoint)?.measured()?;
                tracing::info!(bytes, "packed a snapshot image to send");
                if let Some(observer) = &observer {
                    observer.image_packed(bytes);
                }
                Ok(image)
            }))
        } else {
            // Simulations pack on the spot: no thread, the same image.
            self.engine.pack(checkpoint).map_err(read_error)?
        };
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(image),
        }))
    }
}
