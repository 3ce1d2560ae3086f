//! Byte layouts of the keys Lode stores, chosen so that the orders that
//! matter are bytewise orders: log entries by index, a namespace's entries as
//! one contiguous range, expiry by time.

/// Log entry key: the index, big-endian, so the log sorts by index.
pub fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// Reads a log index back from its key.
pub fn log_index(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

/// Entry key: namespace length (u16, big-endian), namespace, key. The length
/// prefix keeps one namespace's keys in one contiguous range, whatever bytes
/// the keys hold.
pub fn entry_key(namespace: &str, key: &[u8]) -> Vec<u8> {
    let mut out = namespace_prefix(namespace);
    out.extend_from_slice(key);
    out
}

/// The internal namespace that holds the leases of coordination namespace
/// `namespace`. It starts with NUL, which user namespaces may not, so leases
/// never mix with entries, scans or namespace listings.
pub fn lease_namespace(namespace: &str) -> String {
    format!("\0lease\0{namespace}")
}

/// The internal namespace that lists the keys written under a session.
pub fn session_namespace(session: &lode_types::SessionLink) -> String {
    format!("\0session\0{}\0{}", session.stream, session.session_id)
}

/// The stored key recording that `session` wrote `key` of `namespace`: the
/// index entry's own key is the written entry's stored key.
pub fn session_index_key(session: &lode_types::SessionLink, namespace: &str, key: &[u8]) -> Vec<u8> {
    entry_key(&session_namespace(session), &entry_key(namespace, key))
}

/// The stored key of a key an operation writes.
pub fn written_key(written: lode_types::WrittenKey<'_>) -> Vec<u8> {
    match written {
        lode_types::WrittenKey::Entry { namespace, key } => entry_key(namespace, key),
        lode_types::WrittenKey::Lease { namespace, key } => entry_key(&lease_namespace(namespace), key),
        lode_types::WrittenKey::SessionIndex {
            session,
            namespace,
            key,
        } => session_index_key(session, namespace, key),
    }
}

/// The prefix every key of a namespace starts with.
pub fn namespace_prefix(namespace: &str) -> Vec<u8> {
    let length = u16::try_from(namespace.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(2 + namespace.len());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(namespace.as_bytes());
    out
}

/// Splits an entry key back into namespace and key.
pub fn split_entry_key(stored: &[u8]) -> Option<(String, Vec<u8>)> {
    let length = u16::from_be_bytes(stored.get(..2)?.try_into().ok()?) as usize;
    let namespace = std::str::from_utf8(stored.get(2..2 + length)?).ok()?;
    Some((namespace.to_owned(), stored[2 + length..].to_vec()))
}

/// Expiry index key: expiry time (big-endian) then the entry key, so a sweep
/// reads the oldest expiries first.
pub fn expiry_key(expires_at_micros: u64, entry_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + entry_key.len());
    out.extend_from_slice(&expires_at_micros.to_be_bytes());
    out.extend_from_slice(entry_key);
    out
}

/// Splits an expiry index key into its time and entry key.
pub fn split_expiry_key(stored: &[u8]) -> Option<(u64, &[u8])> {
    let time = u64::from_be_bytes(stored.get(..8)?.try_into().ok()?);
    Some((time, &stored[8..]))
}

/// The smallest byte string greater than every string that starts with
/// `prefix`, or `None` when no such bound exists (all 0xff).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A key for messages: UTF-8 text when it is, hex otherwise, cut short.
pub fn display_key(key: &[u8]) -> String {
    const SHOWN_BYTES_MAX: usize = 64;
    let shown = &key[..key.len().min(SHOWN_BYTES_MAX)];
    let mut text = match std::str::from_utf8(shown) {
        Ok(text) => format!("{text:?}"),
        Err(_) => shown.iter().map(|byte| format!("{byte:02x}")).collect::<String>(),
    };
    if key.len() > SHOWN_BYTES_MAX {
        text.push_str(&format!("… ({} bytes)", key.len()));
    }
    text
}

/// Names of the single-key records in the meta spaces.
pub mod meta {
    pub const VOTE: &[u8] = b"vote";
    pub const COMMITTED: &[u8] = b"committed";
    pub const LAST_PURGED: &[u8] = b"last_purged";
    pub const LAST_APPLIED: &[u8] = b"last_applied";
    pub const MEMBERSHIP: &[u8] = b"membership";
    pub const CLOCK: &[u8] = b"clock";
    pub const CHANGE_COUNT: &[u8] = b"change_count";
    pub const CHANGE_BYTES: &[u8] = b"change_bytes";
    pub const CHANGE_TRIMMED_THROUGH: &[u8] = b"change_trimmed_through";
    /// No dedup record older than this time (u64 microseconds) answers.
    pub const DEDUP_FORGOTTEN_BEFORE: &[u8] = b"dedup_forgotten_before";
    /// The cluster this member belongs to (log engine).
    pub const CLUSTER_ID: &[u8] = b"cluster_id";
}

/// Change log key: the entry's index, then the change's sequence in it, both
/// big-endian, so the change log sorts in commit order.
pub fn change_key(index: u64, sequence: u32) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..8].copy_from_slice(&index.to_be_bytes());
    out[8..].copy_from_slice(&sequence.to_be_bytes());
    out
}

/// Reads (index, sequence) back from a change log key.
pub fn split_change_key(key: &[u8]) -> Option<(u64, u32)> {
    let index = u64::from_be_bytes(key.get(..8)?.try_into().ok()?);
    let sequence = u32::from_be_bytes(key.get(8..12)?.try_into().ok()?);
    Some((index, sequence))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_contiguous_whatever_the_key_bytes() {
        let a_high = entry_key("a", &[0xff, 0xff]);
        let ab_low = entry_key("ab", &[0x00]);
        let a_low = entry_key("a", &[0x00]);
        // Every key of "a" sorts before every key of "ab": the length prefix
        // separates them.
        assert!(a_low < a_high && a_high < ab_low);
        let end = prefix_end(&namespace_prefix("a")).expect("bounded");
        assert!(a_high < end && ab_low >= end);
    }

    #[test]
    fn keys_round_trip() {
        let stored = entry_key("ns", b"k\x00");
        assert_eq!(split_entry_key(&stored), Some(("ns".to_owned(), b"k\x00".to_vec())));
        let expiry = expiry_key(7, &stored);
        assert_eq!(split_expiry_key(&expiry), Some((7, stored.as_slice())));
        assert_eq!(log_index(&log_key(42)), Some(42));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
    }
}
