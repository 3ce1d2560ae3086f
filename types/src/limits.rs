//! Size limits on everything a client can send, checked at every boundary
//! (SDK, server, apply) so a bad request is refused before it is proposed.
//!
//! The defaults follow the Deno KV limits where the seeds name one.

/// Longest namespace name, in bytes.
pub const NAMESPACE_BYTES_MAX: usize = 256;
/// Longest key, in bytes (Deno KV's limit).
pub const KEY_BYTES_MAX: usize = 2048;
/// Largest value, in bytes (Deno KV's limit).
pub const VALUE_BYTES_MAX: usize = 65_536;
/// Most operations in one atomic write (Deno KV's mutation limit).
pub const OPERATIONS_PER_WRITE_MAX: usize = 1000;
/// Longest application codec name, in bytes.
pub const ENCODING_NAME_BYTES_MAX: usize = 64;
/// Most bytes of namespaces, keys and values in one atomic write (Deno KV's
/// total mutation size).
pub const WRITE_BYTES_MAX: usize = 819_200;
/// Largest request frame a member's client port accepts, in bytes (etcd
/// accepts 1.5 MiB): room for the largest write, its operations' framing
/// and its session links. Larger frames travel only between members.
pub const REQUEST_BYTES_MAX: usize = 2 << 20;
const _: () = assert!(WRITE_BYTES_MAX + (1 << 20) <= REQUEST_BYTES_MAX);
/// Most expired entries one sweep command removes, so a sweep stays a small
/// log entry and a short apply.
pub const SWEEP_ENTRIES_MAX: u32 = 1000;
/// Most entries one range delete removes; the SDK repeats the delete
/// until nothing selected is left.
pub const DELETE_RANGE_ENTRIES_MAX: u32 = 10_000;
/// Most entries one scan page returns.
pub const SCAN_PAGE_ENTRIES_MAX: usize = 1000;
/// Bytes of keys and values after which a scan page returns, short, with a
/// cursor: an answer stays far inside its frame.
pub const SCAN_PAGE_BYTES_MAX: usize = 4 << 20;
const _: () = assert!(SCAN_PAGE_BYTES_MAX + KEY_BYTES_MAX + VALUE_BYTES_MAX < (80 << 20));
/// Most stored entries one scan page examines (expired or filtered ones
/// included) before it returns, possibly short, with a cursor.
pub const SCAN_EXAMINED_ENTRIES_MAX: usize = 10_000;
/// Most key ranges one range read holds (Deno KV's ranges per read).
pub const RANGES_PER_READ_MAX: usize = 10;
/// Most entries one range of a range read returns (Deno KV's entries per
/// read).
pub const RANGE_ENTRIES_MAX: usize = 1000;
/// Bytes of keys and values one range read may answer, over all its
/// ranges. A range read (Deno KV's snapshot read) has no cursor to return
/// short with, so a read over it is refused as `invalid`. Deno's own list
/// batches (at most 500 entries of at most 66 KiB) fit.
pub const RANGES_READ_BYTES_MAX: usize = 48 << 20;
const _: () = assert!(500 * (KEY_BYTES_MAX + VALUE_BYTES_MAX) < RANGES_READ_BYTES_MAX);
// Room for the crossing entry and every entry's encoding beside the bytes.
const _: () = assert!(
    RANGES_READ_BYTES_MAX + KEY_BYTES_MAX + VALUE_BYTES_MAX + RANGES_PER_READ_MAX * RANGE_ENTRIES_MAX * 64 < (80 << 20)
);
/// Bytes of values `state::list` answers: the State API lists a whole scope
/// in one array, with no cursor, so a larger scope is refused as `invalid`.
pub const STATE_LIST_BYTES_MAX: usize = 16 << 20;
/// Longest bound of a read range, in bytes: one more than a written key, so
/// a prefix's end bound fits (Deno KV's read key limit).
pub const RANGE_BOUND_BYTES_MAX: usize = KEY_BYTES_MAX + 1;
/// Most keys one Deno KV watch follows.
pub const WATCHED_KEYS_MAX: usize = 10;
/// Most delays in a queue message's backoff schedule (Deno KV's limit).
pub const QUEUE_BACKOFF_DELAYS_MAX: usize = 10;
/// Longest delay of a backoff schedule, in milliseconds (Deno KV's limit).
pub const QUEUE_BACKOFF_DELAY_MS_MAX: u32 = 3_600_000;
/// The backoff schedule of a message that names none, in milliseconds
/// (Deno KV's default).
pub const QUEUE_BACKOFF_SCHEDULE_DEFAULT_MS: [u32; 5] = [100, 1_000, 5_000, 30_000, 60_000];
/// Most keys a queue message's payload goes to when undelivered (Deno KV's
/// limit).
pub const QUEUE_UNDELIVERED_KEYS_MAX: usize = 10;
/// Longest a queue message may be delayed, in milliseconds (Deno KV's
/// limit: 30 days).
pub const QUEUE_DELAY_MS_MAX: u64 = 30 * 24 * 3600 * 1000;
/// Longest one claimed delivery stays invisible to other listeners, in
/// milliseconds.
pub const QUEUE_VISIBILITY_MS_MAX: u32 = 3_600_000;
/// Most overdue deliveries one requeue command ends.
pub const QUEUE_REQUEUE_MESSAGES_MAX: u32 = 1000;
/// Longest V8-serialized operand or bound of a Deno KV sum, in bytes (a
/// 128-bit bigint takes 20).
pub const SUM_OPERAND_BYTES_MAX: usize = 64;
/// Most keys in one get_many.
pub const GET_MANY_KEYS_MAX: usize = 1000;
/// Longest user or role name, in bytes.
pub const AUTH_NAME_BYTES_MAX: usize = 64;
/// Most grants one role holds.
pub const GRANTS_PER_ROLE_MAX: usize = 100;
/// Most dead tokens one prune removes.
pub const TOKENS_PRUNED_PER_CHANGE_MAX: usize = 1000;
/// Most token records one prune looks at.
pub const TOKENS_EXAMINED_PER_PRUNE_MAX: usize = 10_000;
/// Most roles one user holds.
pub const ROLES_PER_USER_MAX: usize = 32;
/// Most namespaces one listing returns.
pub const NAMESPACES_LISTED_MAX: usize = 10_000;
/// Most namespaces one listing looks at.
pub const NAMESPACES_EXAMINED_MAX: usize = 100_000;
/// How long a deduplicated response is kept, in log time.
pub const DEDUP_RETENTION_MICROS: u64 = 10 * 60 * 1_000_000;
/// Change events kept unless a node is configured otherwise.
pub const CHANGE_EVENTS_MAX_DEFAULT: u64 = 100_000;
/// Bytes of change events kept unless a node is configured otherwise.
pub const CHANGE_BYTES_MAX_DEFAULT: u64 = 64 << 20;
/// Most change events one apply trims, so trimming never makes one apply
/// slow; the log catches up over the following entries.
pub const CHANGE_TRIM_PER_APPLY_MAX: usize = 2048;
/// The change log is trimmed once it is over its event or byte limit by
/// this fraction of the limit (1/64), back to the limit: one trim, with
/// its read of the oldest events, every few hundred entries instead of one
/// on every entry.
pub const CHANGE_TRIM_SLACK_DIVISOR: u64 = 64;
/// Most events the change log runs over its limit before it is trimmed.
pub const CHANGE_TRIM_SLACK_EVENTS_MAX: u64 = 1024;
const _: () = assert!(CHANGE_TRIM_SLACK_EVENTS_MAX as usize <= CHANGE_TRIM_PER_APPLY_MAX);
/// Most change events one read returns.
pub const CHANGES_PAGE_EVENTS_MAX: usize = 1000;
/// Longest a change read waits for new events, in milliseconds.
pub const CHANGES_WAIT_MS_MAX: u64 = 30_000;
/// Shortest dedup retention a node may be configured with: a retry within
/// a client's call timeout must still find its record.
pub const DEDUP_RETENTION_MICROS_MIN: u64 = 60 * 1_000_000;
/// Longest dedup retention a node may be configured with.
pub const DEDUP_RETENTION_MICROS_MAX: u64 = 7 * 24 * 3600 * 1_000_000;
/// The entries whose index is a multiple of this move the time before which
/// dedup records are forgotten (one small write every so many entries). A
/// record is answered only within its retention, forgotten or not.
pub const DEDUP_PRUNE_EVERY_ENTRIES: u64 = 16;

/// Most checks in one Deno KV atomic write (Deno KV's limit).
pub const DENO_CHECKS_PER_WRITE_MAX: usize = 10;
/// Most mutations in one Deno KV atomic write (Deno KV's limit).
pub const DENO_MUTATIONS_PER_WRITE_MAX: usize = 1000;
/// Longest key a Deno KV write names, in bytes (Deno KV's limit).
pub const DENO_WRITE_KEY_BYTES_MAX: usize = 2048;
/// Largest Deno KV value, in bytes (Deno KV's limit).
pub const DENO_VALUE_BYTES_MAX: usize = 65_536;
/// Most bytes of keys and values in one Deno KV atomic write (Deno KV's
/// limit).
pub const DENO_WRITE_BYTES_MAX: usize = 819_200;

// What Deno KV accepts, Lode's own limits accept: a Deno KV key, value or
// write is never refused by a KV API limit after passing Deno KV's.
const _: () = assert!(DENO_WRITE_KEY_BYTES_MAX <= KEY_BYTES_MAX);
const _: () = assert!(DENO_VALUE_BYTES_MAX <= VALUE_BYTES_MAX);
const _: () = assert!(DENO_WRITE_BYTES_MAX <= WRITE_BYTES_MAX);
// A range bound may be one byte past the longest key (the end of a prefix).
const _: () = assert!(RANGE_BOUND_BYTES_MAX == KEY_BYTES_MAX + 1);
// The values a write holds fit in the write.
const _: () = assert!(VALUE_BYTES_MAX <= WRITE_BYTES_MAX);

/// Most segments of a State API update's nested path.
pub const STATE_PATH_SEGMENTS_MAX: usize = 32;
/// Longest segment of a State API path, in bytes.
pub const STATE_PATH_SEGMENT_BYTES_MAX: usize = 256;
/// Deepest JSON nesting of a value a State API merge produces.
pub const STATE_VALUE_DEPTH_MAX: usize = 16;
/// Most top-level keys of a value a State API merge produces.
pub const STATE_MERGE_KEYS_MAX: usize = 1024;
/// Most ops in one State API update.
pub const STATE_UPDATE_OPS_MAX: usize = 1000;

/// Longest member address (`host:port`), in bytes.
pub const ADDRESS_BYTES_MAX: usize = 255;

/// The message for a field over its limit: "`field` is `amount`, over the
/// limit `limit_name` = `limit`". `amount` carries its unit ("12 bytes").
pub fn over_limit(
    field: impl std::fmt::Display,
    amount: impl std::fmt::Display,
    limit_name: &str,
    limit: impl std::fmt::Display,
) -> String {
    format!("{field} is {amount}, over the limit {limit_name} = {limit}")
}

/// `amount` bytes, for [`over_limit`].
pub fn bytes(amount: usize) -> String {
    format!("{amount} bytes")
}

/// Checks a namespace name against its limit; the message names the field.
pub fn check_namespace(namespace: &str) -> Result<(), String> {
    if namespace.is_empty() {
        return Err("namespace must not be empty".to_owned());
    }
    if namespace.starts_with('\0') {
        return Err("namespace must not start with a NUL character (reserved for Lode's own records)".to_owned());
    }
    if namespace.len() > NAMESPACE_BYTES_MAX {
        return Err(over_limit(
            "namespace",
            bytes(namespace.len()),
            "namespace_bytes_max",
            NAMESPACE_BYTES_MAX,
        ));
    }
    Ok(())
}

/// Longest lease holder id, in bytes.
pub const HOLDER_BYTES_MAX: usize = 256;
/// Longest lease a server grants, in microseconds, whatever is asked; a node
/// may be configured lower, never higher.
pub const LEASE_TTL_MICROS_MAX: u64 = 24 * 3600 * 1_000_000;

/// Longest session stream name or session id, in bytes.
pub const SESSION_NAME_BYTES_MAX: usize = 256;

/// Checks a session stream name or id: not empty, no NUL, within
/// `session_name_bytes_max`.
pub fn check_name(field: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if name.contains('\0') {
        return Err(format!("{field} must not contain a NUL character"));
    }
    if name.len() > SESSION_NAME_BYTES_MAX {
        return Err(over_limit(
            field,
            bytes(name.len()),
            "session_name_bytes_max",
            SESSION_NAME_BYTES_MAX,
        ));
    }
    Ok(())
}

/// Checks a lease holder id; the message names the field and the limit.
pub fn check_holder(holder: &str) -> Result<(), String> {
    if holder.is_empty() {
        return Err("holder must not be empty".to_owned());
    }
    if holder.len() > HOLDER_BYTES_MAX {
        return Err(over_limit(
            "holder",
            bytes(holder.len()),
            "holder_bytes_max",
            HOLDER_BYTES_MAX,
        ));
    }
    Ok(())
}

/// Checks a requested lease TTL.
pub fn check_lease_ttl(ttl_micros: u64) -> Result<(), String> {
    if ttl_micros == 0 || ttl_micros > LEASE_TTL_MICROS_MAX {
        return Err(format!(
            "lease ttl must be 1 to lease_ttl_micros_max = {LEASE_TTL_MICROS_MAX} microseconds"
        ));
    }
    Ok(())
}

/// Checks a key against its limit; the message names the field.
pub fn check_key(key: &[u8]) -> Result<(), String> {
    if key.is_empty() {
        return Err("key must not be empty".to_owned());
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(over_limit("key", bytes(key.len()), "key_bytes_max", KEY_BYTES_MAX));
    }
    Ok(())
}

/// Checks a value against its limit; the message names the field.
pub fn check_value(value: &[u8]) -> Result<(), String> {
    if value.len() > VALUE_BYTES_MAX {
        return Err(over_limit(
            "value",
            bytes(value.len()),
            "value_bytes_max",
            VALUE_BYTES_MAX,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field_and_the_limit() {
        assert!(check_namespace("").expect_err("over the limit").contains("namespace"));
        let long = "n".repeat(NAMESPACE_BYTES_MAX + 1);
        assert!(check_namespace(&long)
            .expect_err("over the limit")
            .contains("namespace_bytes_max"));
        assert!(check_namespace(&"n".repeat(NAMESPACE_BYTES_MAX)).is_ok());
        assert!(check_key(&[]).expect_err("over the limit").contains("key"));
        assert!(check_key(&vec![1; KEY_BYTES_MAX + 1])
            .expect_err("over the limit")
            .contains("key_bytes_max"));
        assert!(check_key(&vec![1; KEY_BYTES_MAX]).is_ok());
        assert!(check_value(&vec![1; VALUE_BYTES_MAX + 1])
            .expect_err("over the limit")
            .contains("value_bytes_max"));
        assert!(check_value(&[]).is_ok());
    }
}
