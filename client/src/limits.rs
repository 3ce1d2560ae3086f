//! The request limits the SDK checks before sending anything. The server
//! checks the same limits again (`lode_raft_store::limits`); a test in
//! lode-node keeps the two in agreement.

/// Longest namespace name, in bytes.
pub const NAMESPACE_BYTES_MAX: usize = 256;
/// Longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 2048;
/// Largest value, in bytes.
pub const VALUE_BYTES_MAX: usize = 65_536;
/// Most operations in one atomic write.
pub const OPERATIONS_PER_WRITE_MAX: usize = 1000;
/// Most bytes of namespaces, keys and values in one atomic write.
pub const WRITE_BYTES_MAX: usize = 819_200;

fn check_length(field: &str, length: usize, limit_name: &str, limit: usize) -> Result<(), String> {
    if length > limit {
        return Err(format!(
            "{field} is {length} bytes, over the limit {limit_name} = {limit}"
        ));
    }
    Ok(())
}

pub fn check_namespace(namespace: &str) -> Result<(), String> {
    if namespace.is_empty() {
        return Err("namespace must not be empty".to_owned());
    }
    check_length("namespace", namespace.len(), "namespace_bytes_max", NAMESPACE_BYTES_MAX)
}

pub fn check_key(key: &[u8]) -> Result<(), String> {
    if key.is_empty() {
        return Err("key must not be empty".to_owned());
    }
    check_length("key", key.len(), "key_bytes_max", KEY_BYTES_MAX)
}

pub fn check_value(value: &[u8]) -> Result<(), String> {
    check_length("value", value.len(), "value_bytes_max", VALUE_BYTES_MAX)
}
