//! The process's open-file limit. A member holds one descriptor per
//! connection on each port, plus RocksDB's files and a few of its own; the
//! soft limit many systems start processes with (1024) is under the client
//! port's default cap alone, and a member at its limit fails to accept
//! (EMFILE) instead of closing extra connections cleanly. So `lode node`
//! raises its soft limit to the hard one, as Go's runtime does for etcd,
//! and warns when even that is under what its caps allow.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors kept aside beyond the ports' connection caps: RocksDB's
/// files (its table cache and logs), snapshot images, the listeners.
pub const OPEN_FILES_RESERVE: u64 = 1024;

/// Raises the soft open-file limit to the hard limit, and warns when the
/// result is under `connections_max` (every port's cap summed) plus the
/// reserve. Never fails the start: the caps still bound what is accepted.
pub fn raise_open_files_limit(connections_max: u64) {
    let limit = getrlimit(Resource::Nofile);
    let raised = match (limit.current, limit.maximum) {
        (Some(current), maximum) if maximum.is_none_or(|maximum| current < maximum) => {
            let wanted = Rlimit {
                current: maximum,
                maximum,
            };
            match setrlimit(Resource::Nofile, wanted) {
                Ok(()) => maximum,
                Err(error) => {
                    tracing::warn!(%error, current, "could not raise the open-file limit");
                    Some(current)
                }
            }
        }
        (current, _) => current,
    };
    let needed = connections_max.saturating_add(OPEN_FILES_RESERVE);
    if let Some(raised) = raised {
        if raised < needed {
            tracing::warn!(
                open_files_max = raised,
                needed,
                "the open-file limit (ulimit -n) is under the connection caps plus {OPEN_FILES_RESERVE} \
                 for storage: raise it, or lower --client-connections-max and --http-connections-max"
            );
        }
    }
}
