//! Snapshots by the Raft log's size as well as by its entries.
//!
//! openraft takes a snapshot every `--snapshot-logs-max` applied entries
//! and purges the log behind it. An entry carries up to
//! `PROPOSAL_BYTES_MAX` of commands, so with large values a count of
//! entries let each member's log grow to gigabytes between snapshots
//! (`docs/performance.md`, seventeenth round). This task asks openraft for
//! a snapshot whenever the log since its last purge reaches
//! `--snapshot-log-bytes-max` ([`LogBytes`]).

use std::sync::Arc;
use std::time::Duration;

use lode_raft_store::log_bytes::LogBytes;
use lode_raft_store::TypeConfig;
use openraft::Raft;

/// The default of `--snapshot-log-bytes-max`: above the log between two
/// snapshots by entries with small values (about 45 MB at 64 clients'
/// 256-byte puts), so only large values bring a snapshot sooner.
pub const SNAPSHOT_LOG_BYTES_MAX_DEFAULT: u64 = 64 << 20;
/// The smallest `--snapshot-log-bytes-max`: under the largest entry, every
/// append would ask for a snapshot.
pub const SNAPSHOT_LOG_BYTES_MIN: u64 = 1 << 20;
const _: () = assert!(SNAPSHOT_LOG_BYTES_MIN <= SNAPSHOT_LOG_BYTES_MAX_DEFAULT);
const _: () = assert!(crate::proposer::PROPOSAL_BYTES_MAX as u64 <= SNAPSHOT_LOG_BYTES_MAX_DEFAULT);

/// Least time between two snapshots asked for by size. A snapshot only
/// purges what is applied, so while a member's apply lags its log, the
/// log stays over the limit after the snapshot; this keeps the member
/// from taking one snapshot after another meanwhile.
const SNAPSHOT_BY_SIZE_INTERVAL_MIN: Duration = Duration::from_secs(1);

/// Asks `raft` for a snapshot each time the log passes its byte limit, at
/// most once per [`SNAPSHOT_BY_SIZE_INTERVAL_MIN`]; returns when Raft stops.
pub async fn snapshot_by_log_size(raft: Raft<TypeConfig>, log_bytes: Arc<LogBytes>) {
    loop {
        log_bytes.over_limit().await;
        tracing::debug!(
            bytes = log_bytes.since_purge(),
            max = log_bytes.max(),
            "the log passed its byte limit; asking for a snapshot"
        );
        if raft.trigger().snapshot().await.is_err() {
            return;
        }
        tokio::time::sleep(SNAPSHOT_BY_SIZE_INTERVAL_MIN).await;
    }
}
