//! What each operation answered, in the order the operations were given.

use serde::{Deserialize, Serialize};

use crate::encoding::Encoding;
use crate::queue::{FinishedAs, QueueDelivery};
use crate::MessageId;

/// The result of one operation, in the order the operations were given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperationResult {
    Set {
        version: u64,
    },
    Delete {
        removed_live_entry: bool,
    },
    SweepExpired {
        removed: u32,
    },
    /// The entry's version, unchanged.
    Expire {
        version: u64,
    },
    Patch {
        version: u64,
    },
    /// The destination's new version.
    Copy {
        version: u64,
    },
    /// Live entries removed, and the last key examined when entries may be
    /// left.
    DeleteRange {
        removed: u32,
        #[serde(with = "serde_bytes")]
        resume_after: Option<Vec<u8>>,
    },
    /// The grant: its token (the log index), the granted TTL and when it
    /// expires (in log time).
    AcquireLease {
        token: u64,
        ttl_micros: u64,
        expires_at_micros: u64,
    },
    RenewLease {
        token: u64,
        ttl_micros: u64,
        expires_at_micros: u64,
    },
    /// True when a held lease was released.
    ReleaseLease {
        released: bool,
    },
    /// The check held.
    Check,
    Enqueued {
        id: MessageId,
    },
    /// The claimed delivery, or none when no message is due.
    Claimed {
        delivery: Option<QueueDelivery>,
    },
    Finished {
        finished: FinishedAs,
    },
    Requeued {
        requeued: u32,
    },
    /// The counter's new value and version.
    Counter {
        version: u64,
        value: u64,
    },
    /// The V8 sum's version.
    SumV8 {
        version: u64,
    },
    /// The value before and after a state update (JSON text; `None`: the
    /// key was absent), the version written (`None` when every op failed and
    /// nothing was written), and the failed ops as a JSON array of
    /// [`state_update::UpdateOpError`].
    StateUpdated {
        version: Option<u64>,
        #[serde(with = "serde_bytes")]
        old_value: Option<Vec<u8>>,
        #[serde(with = "serde_bytes")]
        new_value: Vec<u8>,
        #[serde(with = "serde_bytes")]
        errors_json: Vec<u8>,
    },
    /// The removed live value and its encoding, if there was one.
    Taken {
        #[serde(with = "serde_bytes")]
        old_value: Option<Vec<u8>>,
        encoding: Option<Encoding>,
    },
    /// An auth change applied.
    AuthChanged,
    /// A session token was stored; it works until this time.
    SessionTokenIssued {
        expires_at_micros: u64,
    },
}
