//! Checks and counters: every `Check` of a command judged against the
//! state before the command (the refusal names all that failed, by index
//! among the checks), Deno KV's KvU64 counters, and its sums of V8
//! numbers and bigints.

use super::context::ApplyContext;
use super::Applied;
use crate::command::{CounterKind, Encoding, Operation, OperationResult, Precondition, Rejection};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::keys;

/// The indexes (among the command's checks) of the checks that do not hold
/// in the state before the command, or `None` when all hold.
pub(super) fn failed_checks<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    operations: &[Operation],
) -> Result<Option<Vec<u32>>, EngineError> {
    let mut failed = Vec::new();
    let checks = operations.iter().filter_map(|operation| match operation {
        Operation::Check {
            namespace,
            key,
            precondition,
        } => Some((namespace, key, precondition)),
        _ => None,
    });
    for (index, (namespace, key, precondition)) in (0u32..).zip(checks) {
        let current = context
            .live(&keys::entry_key(namespace, key))?
            .map(|entry| entry.version);
        if !precondition_holds(*precondition, current) {
            failed.push(index);
        }
    }
    Ok((!failed.is_empty()).then_some(failed))
}

pub(super) fn precondition_holds(precondition: Precondition, current: Option<u64>) -> bool {
    match precondition {
        Precondition::Version(expected) => current == Some(expected),
        Precondition::Absent => current.is_none(),
    }
}

/// Combines the live little-endian u64 at the key with `operand`.
pub(super) fn counter<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    (namespace, key): (&str, &[u8]),
    kind: CounterKind,
    operand: u64,
) -> Applied {
    let entry_key = keys::entry_key(namespace, key);
    let value = match context.live(&entry_key)? {
        None => operand,
        Some(entry) => match (&entry.encoding, <[u8; 8]>::try_from(entry.value.as_slice())) {
            (Encoding::Le64, Ok(bytes)) => kind.combine(u64::from_le_bytes(bytes), operand),
            _ => {
                return Ok(Err(Rejection::Invalid(format!(
                    "cannot {} key {} of namespace {namespace:?}: its value is not a 64-bit unsigned integer (Le64)",
                    kind.name(),
                    keys::display_key(key)
                ))))
            }
        },
    };
    let entry = context.stored(value.to_le_bytes().to_vec(), Encoding::Le64, None, None);
    context.put(entry_key, entry)?;
    Ok(Ok(OperationResult::Counter {
        version: context.version(),
        value,
    }))
}

/// A sum's operand and optional bounds (V8 numbers or bigints), and
/// whether a result outside them is clamped instead of refused.
pub(super) struct SumBounds<'o> {
    pub operand: &'o [u8],
    pub min: Option<&'o [u8]>,
    pub max: Option<&'o [u8]>,
    pub clamp: bool,
}

pub(super) fn sum_v8<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    (namespace, key): (&str, &[u8]),
    sum: SumBounds<'_>,
) -> Applied {
    let entry_key = keys::entry_key(namespace, key);
    let current = context.live(&entry_key)?;
    let stored = current.as_ref().map(|entry| (&entry.encoding, entry.value.as_slice()));
    let (value, encoding) = match lode_types::v8_number::sum(stored, sum.operand, sum.min, sum.max, sum.clamp) {
        Ok(result) => result,
        Err(message) => {
            return Ok(Err(Rejection::Invalid(format!(
                "sum at key {} of namespace {namespace:?}: {message}",
                keys::display_key(key)
            ))))
        }
    };
    let entry = context.stored(value, encoding, None, None);
    context.put(entry_key, entry)?;
    Ok(Ok(OperationResult::SumV8 {
        version: context.version(),
    }))
}
