//! Deno KV's data model on Lode's operations: versionstamps, value
//! encodings, and an atomic write (checks, mutations, enqueues) turned into
//! one Lode command, with Deno KV's limits checked first.
//!
//! Deno KV's entries live in the KV namespace [`DENO_NAMESPACE`], keyed by
//! their tuple encoding (`denokv_proto::encode_key`), whose bytewise order
//! is Deno KV's key order. A versionstamp is the log index of the write as
//! 8 big-endian bytes followed by two zero bytes.

use denokv_proto::datapath as pb;
use lode_client::protocol::{CounterKind, Encoding, KeyRange, Operation, Precondition};
use lode_types::{EnqueueOptions, DENO_NAMESPACE};

use lode_types::limits::{
    DENO_CHECKS_PER_WRITE_MAX, DENO_MUTATIONS_PER_WRITE_MAX, DENO_VALUE_BYTES_MAX, DENO_WRITE_BYTES_MAX,
    DENO_WRITE_KEY_BYTES_MAX,
};
/// How long past its requested expiry an entry stays readable. Deno KV
/// promises deletion some time after the deadline, never at it; the grace
/// keeps an entry readable for a moment after its deadline whatever the
/// sweep's timing, as the seed's "expiry is a deadline" example expects.
pub const EXPIRY_GRACE_MS: u64 = 1_000;

/// The versionstamp of a version (log index).
pub fn versionstamp(version: u64) -> Vec<u8> {
    let mut stamp = version.to_be_bytes().to_vec();
    stamp.extend_from_slice(&[0, 0]);
    stamp
}

/// The precondition a check's versionstamp asks for. An empty versionstamp
/// asks for absence; one Lode never minted (wrong length, non-zero suffix)
/// names version 0, which no entry holds, so the check fails.
pub fn check_precondition(stamp: &[u8]) -> Precondition {
    if stamp.is_empty() {
        return Precondition::Absent;
    }
    match <[u8; 10]>::try_from(stamp) {
        Ok(bytes) if bytes[8..] == [0, 0] => {
            let mut index = [0u8; 8];
            index.copy_from_slice(&bytes[..8]);
            Precondition::Version(u64::from_be_bytes(index))
        }
        _ => Precondition::Version(0),
    }
}

/// Lode's encoding of a Deno KV value encoding.
pub fn encoding_from_deno(encoding: i32) -> Result<Encoding, String> {
    match pb::ValueEncoding::try_from(encoding) {
        Ok(pb::ValueEncoding::VeV8) => Ok(Encoding::V8),
        Ok(pb::ValueEncoding::VeLe64) => Ok(Encoding::Le64),
        Ok(pb::ValueEncoding::VeBytes) => Ok(Encoding::Bytes),
        _ => Err(format!(
            "value encoding {encoding} is not V8 (1), LE64 (2) or bytes (3)"
        )),
    }
}

/// The Deno KV value encoding of a stored entry. Values written through
/// Lode's KV API in another encoding read as bytes.
pub fn encoding_to_deno(encoding: &Encoding) -> pb::ValueEncoding {
    match encoding {
        Encoding::V8 => pb::ValueEncoding::VeV8,
        Encoding::Le64 => pb::ValueEncoding::VeLe64,
        _ => pb::ValueEncoding::VeBytes,
    }
}

/// A stored entry as Deno KV reads it.
pub fn entry_to_deno(entry: lode_client::protocol::Entry) -> pb::KvEntry {
    pb::KvEntry {
        encoding: encoding_to_deno(&entry.encoding) as i32,
        versionstamp: versionstamp(entry.version),
        key: entry.key,
        value: entry.value,
    }
}

/// The key ranges of a snapshot read, checked against Deno KV's limits.
pub fn read_ranges(read: &pb::SnapshotRead) -> Result<Vec<KeyRange>, String> {
    let ranges: Vec<KeyRange> = read
        .ranges
        .iter()
        .enumerate()
        .map(|(index, range)| {
            let limit = u32::try_from(range.limit)
                .ok()
                .filter(|limit| *limit > 0)
                .ok_or_else(|| format!("ranges[{index}].limit is {}; it must be at least 1", range.limit))?;
            Ok(KeyRange {
                start: range.start.clone(),
                end: range.end.clone(),
                limit,
                reverse: range.reverse,
            })
        })
        .collect::<Result<_, String>>()?;
    lode_types::validate_ranges(&ranges)?;
    Ok(ranges)
}

fn check_write_key(field: &str, key: &[u8]) -> Result<(), String> {
    if key.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if key.len() > DENO_WRITE_KEY_BYTES_MAX {
        return Err(format!(
            "{field} is {} bytes: key too large for write (max {DENO_WRITE_KEY_BYTES_MAX} bytes)",
            key.len()
        ));
    }
    Ok(())
}

fn check_value(field: &str, value: &[u8]) -> Result<(), String> {
    if value.len() > DENO_VALUE_BYTES_MAX {
        return Err(format!(
            "{field} is {} bytes: value too large (max {DENO_VALUE_BYTES_MAX} bytes)",
            value.len()
        ));
    }
    Ok(())
}

fn le64_operand(field: &str, value: &pb::KvValue) -> Result<u64, String> {
    match (
        encoding_from_deno(value.encoding)?,
        <[u8; 8]>::try_from(value.data.as_slice()),
    ) {
        (Encoding::Le64, Ok(bytes)) => Ok(u64::from_le_bytes(bytes)),
        _ => Err(format!("{field} must be a KvU64 (8 bytes, LE64 encoding)")),
    }
}

/// The operations of one Deno KV atomic write, in order: checks first, then
/// mutations, then enqueues. `now_ms` turns expiries into Lode's
/// microseconds with [`EXPIRY_GRACE_MS`] added.
pub fn write_operations(write: &pb::AtomicWrite) -> Result<Vec<Operation>, String> {
    if write.checks.len() > DENO_CHECKS_PER_WRITE_MAX {
        return Err(format!(
            "checks has {} items, over the limit of {DENO_CHECKS_PER_WRITE_MAX}",
            write.checks.len()
        ));
    }
    if write.mutations.len() > DENO_MUTATIONS_PER_WRITE_MAX {
        return Err(format!(
            "mutations has {} items, over the limit of {DENO_MUTATIONS_PER_WRITE_MAX}",
            write.mutations.len()
        ));
    }
    let mut operations = Vec::with_capacity(write.checks.len() + write.mutations.len() + write.enqueues.len());
    let mut size_bytes = 0usize;
    for (index, check) in write.checks.iter().enumerate() {
        check_write_key(&format!("checks[{index}].key"), &check.key)?;
        size_bytes += check.key.len();
        operations.push(Operation::Check {
            namespace: DENO_NAMESPACE.to_owned(),
            key: check.key.clone(),
            precondition: check_precondition(&check.versionstamp),
        });
    }
    for (index, mutation) in write.mutations.iter().enumerate() {
        let field = format!("mutations[{index}]");
        check_write_key(&format!("{field}.key"), &mutation.key)?;
        size_bytes += mutation.key.len();
        let key = mutation.key.clone();
        let namespace = DENO_NAMESPACE.to_owned();
        let value = || {
            mutation
                .value
                .as_ref()
                .ok_or_else(|| format!("{field}.value is missing"))
        };
        let kind = pb::MutationType::try_from(mutation.mutation_type)
            .map_err(|_| format!("{field}.mutation_type {} is unknown", mutation.mutation_type))?;
        let counter = |kind: CounterKind| -> Result<Operation, String> {
            let operand = le64_operand(&format!("{field}.value"), value()?)?;
            Ok(Operation::Counter {
                namespace: namespace.clone(),
                key: key.clone(),
                kind,
                operand,
            })
        };
        let operation = match kind {
            pb::MutationType::MSet => {
                let value = value()?;
                check_value(&format!("{field}.value"), &value.data)?;
                size_bytes += value.data.len();
                let encoding = encoding_from_deno(value.encoding).map_err(|message| format!("{field}: {message}"))?;
                if encoding == Encoding::Le64 && value.data.len() != 8 {
                    return Err(format!("{field}.value: a KvU64 is 8 bytes, not {}", value.data.len()));
                }
                Operation::Set {
                    namespace,
                    key,
                    value: value.data.clone(),
                    encoding,
                    expires_at_micros: expiry_micros(mutation.expire_at_ms),
                    precondition: None,
                    fence: None,
                    session: None,
                }
            }
            pb::MutationType::MDelete => Operation::Delete {
                namespace,
                key,
                session: None,
            },
            pb::MutationType::MSum => {
                let operand = value()?;
                match encoding_from_deno(operand.encoding).map_err(|message| format!("{field}: {message}"))? {
                    // A V8 number or bigint, with optional bounds.
                    Encoding::V8 => {
                        let bound = |bytes: &Vec<u8>| (!bytes.is_empty()).then(|| bytes.clone());
                        let operation = Operation::SumV8 {
                            namespace: namespace.clone(),
                            key: key.clone(),
                            operand: operand.data.clone(),
                            min: bound(&mutation.sum_min),
                            max: bound(&mutation.sum_max),
                            clamp: mutation.sum_clamp,
                        };
                        operation.validate().map_err(|message| format!("{field}: {message}"))?;
                        operation
                    }
                    _ if !mutation.sum_min.is_empty() || !mutation.sum_max.is_empty() || mutation.sum_clamp => {
                        return Err(format!("{field}: cannot use min/max parameters with KvU64 operands"));
                    }
                    _ => counter(CounterKind::Sum)?,
                }
            }
            pb::MutationType::MMin => counter(CounterKind::Min)?,
            pb::MutationType::MMax => counter(CounterKind::Max)?,
            pb::MutationType::MUnspecified | pb::MutationType::MSetSuffixVersionstampedKey => {
                return Err(format!(
                    "{field}: mutation type {} is not supported",
                    kind.as_str_name()
                ))
            }
        };
        operations.push(operation);
    }
    for (index, enqueue) in write.enqueues.iter().enumerate() {
        let field = format!("enqueues[{index}]");
        check_value(&format!("{field}.payload"), &enqueue.payload)?;
        size_bytes += enqueue.payload.len();
        for (key_index, key) in enqueue.keys_if_undelivered.iter().enumerate() {
            check_write_key(&format!("{field}.keys_if_undelivered[{key_index}]"), key)?;
            size_bytes += key.len();
        }
        let options = EnqueueOptions {
            deliver_at_micros: u64::try_from(enqueue.deadline_ms).unwrap_or(0).saturating_mul(1000),
            backoff_schedule_ms: enqueue.backoff_schedule.clone(),
            keys_if_undelivered: enqueue.keys_if_undelivered.clone(),
        };
        options.validate().map_err(|message| format!("{field}: {message}"))?;
        operations.push(Operation::Enqueue {
            payload: enqueue.payload.clone(),
            encoding: Encoding::V8,
            options,
        });
    }
    if size_bytes > DENO_WRITE_BYTES_MAX {
        return Err(format!(
            "the write holds {size_bytes} bytes of keys and values: total mutation size too large (max {DENO_WRITE_BYTES_MAX} bytes)"
        ));
    }
    Ok(operations)
}

/// Lode's expiry (microseconds, grace included) of a Deno KV expiry in
/// milliseconds since the epoch; zero or less means none.
fn expiry_micros(expire_at_ms: i64) -> Option<u64> {
    u64::try_from(expire_at_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(|ms| ms.saturating_add(EXPIRY_GRACE_MS).saturating_mul(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versionstamps_order_like_versions_and_round_trip_through_checks() {
        let first = versionstamp(9);
        let second = versionstamp(10);
        assert_eq!(first.len(), 10);
        assert!(first < second);
        assert_eq!(check_precondition(&second), Precondition::Version(10));
        assert_eq!(check_precondition(&[]), Precondition::Absent);
        assert_eq!(check_precondition(&[1, 2, 3]), Precondition::Version(0));
        let mut foreign = versionstamp(10);
        foreign[9] = 7;
        assert_eq!(check_precondition(&foreign), Precondition::Version(0));
    }

    fn set(key: Vec<u8>, data: Vec<u8>) -> pb::Mutation {
        pb::Mutation {
            key,
            value: Some(pb::KvValue {
                data,
                encoding: pb::ValueEncoding::VeBytes as i32,
            }),
            mutation_type: pb::MutationType::MSet as i32,
            ..Default::default()
        }
    }

    #[test]
    fn limits_are_refused_with_the_field_and_the_limit() {
        let write = |mutations| pb::AtomicWrite {
            mutations,
            ..Default::default()
        };
        let message = write_operations(&write(vec![set(vec![1; 2049], vec![])])).expect_err("refused");
        assert!(
            message.contains("mutations[0].key") && message.contains("max 2048 bytes"),
            "{message}"
        );
        let message = write_operations(&write(vec![set(vec![1], vec![0; 65_537])])).expect_err("refused");
        assert!(message.contains("value too large (max 65536 bytes)"), "{message}");
        let many = (0..1001u32)
            .map(|index| set(index.to_be_bytes().to_vec(), vec![]))
            .collect();
        let message = write_operations(&write(many)).expect_err("refused");
        assert!(message.contains("limit of 1000"), "{message}");
        let checks = (0..11u8)
            .map(|index| pb::Check {
                key: vec![index + 1],
                versionstamp: Vec::new(),
            })
            .collect();
        let message = write_operations(&pb::AtomicWrite {
            checks,
            ..Default::default()
        })
        .expect_err("refused");
        assert!(message.contains("checks has 11 items"), "{message}");
    }

    #[test]
    fn sums_take_kv_u64_operands_without_bounds_and_v8_numbers_with_them() {
        let sum = |value: pb::KvValue, sum_min: Vec<u8>| pb::AtomicWrite {
            mutations: vec![pb::Mutation {
                key: vec![2],
                value: Some(value),
                mutation_type: pb::MutationType::MSum as i32,
                sum_min,
                ..Default::default()
            }],
            ..Default::default()
        };
        let le64 = pb::KvValue {
            data: 5u64.to_le_bytes().to_vec(),
            encoding: pb::ValueEncoding::VeLe64 as i32,
        };
        let operations = write_operations(&sum(le64.clone(), Vec::new())).expect("accepted");
        assert!(matches!(
            operations[0],
            Operation::Counter {
                kind: CounterKind::Sum,
                operand: 5,
                ..
            }
        ));
        let message = write_operations(&sum(le64, vec![1])).expect_err("refused");
        assert!(message.contains("min/max"), "{message}");
        let v8 = pb::KvValue {
            data: vec![1, 2],
            encoding: pb::ValueEncoding::VeV8 as i32,
        };
        let message = write_operations(&sum(v8, Vec::new())).expect_err("refused");
        assert!(
            message.contains("mutations[0]") && message.contains("operand"),
            "{message}"
        );
        let number = pb::KvValue {
            data: lode_types::v8_number::V8Number::Number(1.0).encode(),
            encoding: pb::ValueEncoding::VeV8 as i32,
        };
        let bigint_min = lode_types::v8_number::V8Number::BigInt(0).encode();
        let message = write_operations(&sum(number.clone(), bigint_min)).expect_err("refused");
        assert!(message.contains("must have the operand's type"), "{message}");
        let operations = write_operations(&sum(number, Vec::new())).expect("accepted");
        assert!(matches!(operations[0], Operation::SumV8 { clamp: false, .. }));
    }

    #[test]
    fn expiry_carries_the_grace() {
        assert_eq!(expiry_micros(0), None);
        assert_eq!(expiry_micros(-5), None);
        assert_eq!(expiry_micros(2_000), Some((2_000 + EXPIRY_GRACE_MS) * 1000));
    }
}
