//! Which cluster a member belongs to, so that it follows no leader of
//! another cluster and joins none.
//!
//! The id of a cluster is fixed when it is founded: every founding member
//! derives the same one from the cluster's name and its founding peer list
//! (as etcd does from its initial cluster and token), so they agree without
//! talking first. Each member stores it in its log engine; a member joining
//! later learns it from the member it joins through, or is told it on the
//! command line. Every Raft message carries the sender's id, and a member
//! answers none whose id differs from its own, nor any before it has one.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use lode_client::protocol::ClusterId;
use lode_client::LodeError;
use lode_raft_store::{EngineError, LogStore, SelectedEngine};

/// The id a cluster founded by `founders` (id → peer address) under `name`
/// gets.
pub fn founding_cluster_id(name: &str, founders: &BTreeMap<u64, String>) -> ClusterId {
    let mut text = format!("lode cluster\n{name}\n");
    for (id, address) in founders {
        text.push_str(&format!("{id}={address}\n"));
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    ClusterId(u128::from_be_bytes(bytes))
}

/// The id of the cluster founded by `founders` under `name` from the
/// backup whose image has digest `image_sha256`: every founder restoring
/// the same file computes the same id, and it is never the id of the
/// cluster the backup came from.
pub fn restored_cluster_id(name: &str, founders: &BTreeMap<u64, String>, image_sha256: &[u8]) -> ClusterId {
    let digest: String = image_sha256.iter().map(|byte| format!("{byte:02x}")).collect();
    founding_cluster_id(&format!("{name}\nrestored from {digest}"), founders)
}

/// This member's cluster id, once known, and where it is stored (until
/// the member closes its storage: the engine must not outlive shutdown).
pub struct ClusterIdentity {
    id: OnceLock<ClusterId>,
    log: Mutex<Option<LogStore<SelectedEngine>>>,
}

impl ClusterIdentity {
    /// Reads the stored id, if any.
    pub fn open(log: LogStore<SelectedEngine>) -> Result<Self, EngineError> {
        let id = OnceLock::new();
        if let Some(stored) = log.cluster_id()? {
            let _ = id.set(ClusterId(stored));
        }
        Ok(Self {
            id,
            log: Mutex::new(Some(log)),
        })
    }

    /// Lets go of the log engine, so that storage closes with Raft.
    pub fn close(&self) {
        self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    }

    pub fn get(&self) -> Option<ClusterId> {
        self.id.get().copied()
    }

    /// Makes `id` this member's cluster: stored (synced) first, then
    /// answered with. Refused when the member already belongs to another.
    pub async fn adopt(&self, id: ClusterId) -> Result<(), LodeError> {
        match self.get() {
            Some(current) if current == id => return Ok(()),
            Some(current) => return Err(another_cluster(id, current)),
            None => {}
        }
        let log = self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        let Some(log) = log else {
            return Err(LodeError::Unavailable("the member is shutting down".to_owned()));
        };
        log.save_cluster_id(id.0)
            .await
            .map_err(|error| LodeError::Unavailable(format!("storing the cluster id failed: {error}")))?;
        let _ = self.id.set(id);
        Ok(())
    }

    /// Whether a message of cluster `sender` may be answered.
    pub fn check(&self, sender: ClusterId) -> Result<(), LodeError> {
        match self.get() {
            Some(current) if current == sender => Ok(()),
            Some(current) => Err(another_cluster(sender, current)),
            None => Err(LodeError::Unavailable(format!(
                "this member has not joined a cluster yet; it answers no peer of cluster {sender}"
            ))),
        }
    }
}

fn another_cluster(sender: ClusterId, current: ClusterId) -> LodeError {
    LodeError::Invalid(format!(
        "cluster {sender} is not this member's cluster ({current}); members of different clusters never talk"
    ))
}
