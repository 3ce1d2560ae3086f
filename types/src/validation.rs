//! The limits of every operation and of a whole write, checked by the SDK
//! before sending, by the server before proposing and by apply (the log is
//! a boundary too), with messages that name the field and the limit.

use crate::encoding::Encoding;
use crate::limits;
use crate::operation::Operation;
use crate::{state_update, v8_number};

impl Operation {
    /// Checks the limits of one operation; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(session) = self.session() {
            session.validate()?;
        }
        use crate::limits::{check_key, check_namespace, check_value, DELETE_RANGE_ENTRIES_MAX, SWEEP_ENTRIES_MAX};
        match self {
            Operation::Set {
                namespace,
                key,
                value,
                encoding,
                precondition,
                fence,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_value(value)?;
                if let Some(fence) = fence {
                    if precondition.is_none() {
                        return Err("a fenced write needs a precondition (expect_version or expect_absent)".to_owned());
                    }
                    check_namespace(&fence.namespace).map_err(|message| format!("fence {message}"))?;
                    check_key(&fence.key).map_err(|message| format!("fence {message}"))?;
                }
                if let Encoding::Custom(name) = encoding {
                    if name.is_empty() || name.len() > limits::ENCODING_NAME_BYTES_MAX {
                        return Err(format!(
                            "encoding name must be 1 to {} bytes (encoding_name_bytes_max)",
                            limits::ENCODING_NAME_BYTES_MAX
                        ));
                    }
                }
                Ok(())
            }
            Operation::Delete { namespace, key, .. }
            | Operation::Expire { namespace, key, .. }
            | Operation::Check { namespace, key, .. }
            | Operation::Counter { namespace, key, .. } => {
                check_namespace(namespace)?;
                check_key(key)
            }
            Operation::Take { namespace, key } => {
                check_namespace(namespace)?;
                check_key(key)
            }
            Operation::StateUpdate {
                namespace,
                key,
                ops_json,
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_value(ops_json).map_err(|message| message.replacen("value", "ops", 1))?;
                state_update::parse_ops(ops_json).map(|_| ())
            }
            Operation::SumV8 {
                namespace,
                key,
                operand,
                min,
                max,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                for (field, bytes) in [("operand", Some(operand)), ("min", min.as_ref()), ("max", max.as_ref())] {
                    if let Some(bytes) = bytes {
                        if bytes.len() > limits::SUM_OPERAND_BYTES_MAX {
                            return Err(limits::over_limit(
                                format!("the sum's {field}"),
                                limits::bytes(bytes.len()),
                                "sum_operand_bytes_max",
                                limits::SUM_OPERAND_BYTES_MAX,
                            ));
                        }
                    }
                }
                // The stored value is known only at apply; the operand and
                // bounds can be judged now, against an absent value.
                v8_number::sum(None, operand, min.as_deref(), max.as_deref(), false).map(|_| ())
            }
            Operation::Patch {
                namespace, key, patch, ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_value(patch).map_err(|message| message.replacen("value", "patch", 1))
            }
            Operation::Copy {
                namespace,
                key,
                to_namespace,
                to_key,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                check_namespace(to_namespace).map_err(|message| format!("destination {message}"))?;
                check_key(to_key).map_err(|message| format!("destination {message}"))
            }
            Operation::DeleteRange {
                namespace,
                selector,
                after,
                entries_max,
            } => {
                check_namespace(namespace)?;
                selector.validate()?;
                if let Some(after) = after {
                    check_key(after).map_err(|message| message.replacen("key", "after", 1))?;
                }
                if *entries_max == 0 || *entries_max > DELETE_RANGE_ENTRIES_MAX {
                    return Err(format!(
                        "entries_max must be 1 to delete_range_entries_max = {DELETE_RANGE_ENTRIES_MAX}"
                    ));
                }
                Ok(())
            }
            Operation::AcquireLease {
                namespace,
                key,
                holder,
                ttl_micros,
            }
            | Operation::RenewLease {
                namespace,
                key,
                holder,
                ttl_micros,
                ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                limits::check_holder(holder)?;
                limits::check_lease_ttl(*ttl_micros)
            }
            Operation::ReleaseLease {
                namespace, key, holder, ..
            } => {
                check_namespace(namespace)?;
                check_key(key)?;
                limits::check_holder(holder)
            }
            Operation::Enqueue { payload, options, .. } => {
                check_value(payload).map_err(|message| message.replacen("value", "payload", 1))?;
                options.validate()
            }
            Operation::ClaimMessage { visibility_ms } => {
                if *visibility_ms == 0 || *visibility_ms > limits::QUEUE_VISIBILITY_MS_MAX {
                    return Err(format!(
                        "visibility_ms must be 1 to queue_visibility_ms_max = {}",
                        limits::QUEUE_VISIBILITY_MS_MAX
                    ));
                }
                Ok(())
            }
            Operation::FinishMessage { .. } => Ok(()),
            Operation::RequeueOverdue { messages_max } => {
                if *messages_max == 0 || *messages_max > limits::QUEUE_REQUEUE_MESSAGES_MAX {
                    return Err(format!(
                        "messages_max must be 1 to queue_requeue_messages_max = {}",
                        limits::QUEUE_REQUEUE_MESSAGES_MAX
                    ));
                }
                Ok(())
            }
            Operation::Auth { change } => change.validate(),
            Operation::SweepExpired { entries_max } => {
                if *entries_max == 0 || *entries_max > SWEEP_ENTRIES_MAX {
                    return Err(format!(
                        "entries_max must be 1 to sweep_entries_max = {SWEEP_ENTRIES_MAX}"
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Checks an atomic write: its operation count, every operation's limits and
/// its total size. The message names the field and the limit.
pub fn validate_write(operations: &[Operation]) -> Result<(), String> {
    if operations.is_empty() {
        return Err("operations must not be empty".to_owned());
    }
    if operations.len() > limits::OPERATIONS_PER_WRITE_MAX {
        return Err(limits::over_limit(
            "the number of operations",
            operations.len(),
            "operations_per_write_max",
            limits::OPERATIONS_PER_WRITE_MAX,
        ));
    }
    for operation in operations {
        operation.validate()?;
    }
    let size_bytes = write_size_bytes(operations);
    if size_bytes > limits::WRITE_BYTES_MAX {
        return Err(limits::over_limit(
            "the write's namespaces, keys and values",
            limits::bytes(size_bytes),
            "write_bytes_max",
            limits::WRITE_BYTES_MAX,
        ));
    }
    Ok(())
}

/// Checks a client's write: its limits, and that it holds no operation only
/// the leader may propose. The SDK and the server both call this.
pub fn validate_client_write(operations: &[Operation]) -> Result<(), String> {
    if operations.iter().any(Operation::is_leader_only) {
        return Err("operations must not hold a sweep or a requeue (the leader proposes those)".to_owned());
    }
    validate_write(operations)
}

/// Bytes of namespaces, keys and values a write carries.
pub fn write_size_bytes(operations: &[Operation]) -> usize {
    operations.iter().map(Operation::size_bytes).sum()
}
