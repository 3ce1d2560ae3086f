//! Deterministic apply: the state change one log entry makes, computed from
//! the stored state, the entry's commands and its log id alone.
//!
//! Nothing here reads a clock, randomness or the environment. Every
//! time-based decision uses the command's time, so two replicas that apply
//! the same log hold byte-identical state.
//!
//! One entry carries a [`Proposal`]: commands from different clients that
//! the leader grouped so that one fsync commits them all. Each command is
//! atomic on its own and sees the effects of the commands before it. All of
//! an entry's writes, and `last_applied`, go to disk in one batch.
//!
//! This file reads top to bottom: an entry's commands, each command's
//! dedup and checks, then one line per operation naming the function (in
//! the file of its family) that applies it to the [`ApplyContext`].

mod auth;
pub(crate) mod change_log;
mod checks;
mod context;
pub(crate) mod dedup;
mod entries;
mod leases;
mod overlay;
mod queue;
mod state_updates;
mod sweeps;

use crate::command::{Command, CommandOutcome, Operation, OperationResult, Proposal, Rejection};
use crate::engine::{Engine, WriteBatch};
use crate::entry::SourceId;
use crate::error::EngineError;
use crate::injected_bugs::{self, InjectedBug};
use checks::precondition_holds;
use context::ApplyContext;

/// What applying one operation answers: its result, or the refusal of the
/// whole command; the outer error is a storage failure.
type Applied = Result<Result<OperationResult, Rejection>, EngineError>;

/// What one entry's apply hands to the next one's.
#[derive(Debug, Default)]
pub struct Carried {
    /// The last applied time (stored with each entry's state).
    pub clock_micros: u64,
    /// Where claims search for ready queue messages (in memory only).
    pub ready_floor: crate::queue::ReadyFloor,
}

/// Applies one entry's proposal at `position`. `carried.clock_micros` is
/// the last applied time; the returned outcomes carry each command's time,
/// and the last of them is the new clock.
pub fn apply_proposal<E: Engine>(
    engine: &E,
    batch: &mut WriteBatch,
    proposal: &Proposal,
    position: SourceId,
    carried: &mut Carried,
) -> Result<Vec<CommandOutcome>, EngineError> {
    let mut context = ApplyContext::new(engine, position, std::mem::take(&mut carried.ready_floor));
    let clock_micros = carried.clock_micros;
    let mut clock = clock_micros;
    let mut outcomes = Vec::with_capacity(proposal.commands.len());
    let forgotten_before_micros = match proposal.commands.is_empty() {
        true => 0,
        false => dedup::forgotten_before(engine)?,
    };
    for command in proposal.commands.iter() {
        clock = clock.max(command.body().time_micros);
        context.begin_command(clock);
        let cutoff_micros = clock
            .saturating_sub(proposal.retention.dedup_micros)
            .max(forgotten_before_micros);
        outcomes.push(apply_command(&mut context, batch, command, cutoff_micros)?);
    }
    if !proposal.commands.is_empty() {
        let retention_micros = proposal.retention.dedup_micros;
        dedup::forget_expired(batch, position.index, clock, retention_micros, forgotten_before_micros)?;
    }
    let changes = std::mem::take(&mut context.overlay().settled_changes);
    change_log::record_changes(engine, batch, changes, position.index, &proposal.retention)?;
    carried.clock_micros = clock;
    carried.ready_floor = context.into_ready_floor();
    Ok(outcomes)
}

/// Applies one command, or answers its op id's outcome recorded at or
/// after `dedup_cutoff_micros`.
fn apply_command<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    batch: &mut WriteBatch,
    command: &Command,
    dedup_cutoff_micros: u64,
) -> Result<CommandOutcome, EngineError> {
    let body = command.body();
    if let Some(op_id) = body.op_id.filter(|_| !injected_bugs::enabled(InjectedBug::SkipDedup)) {
        if let Some(mut outcome) = dedup::recorded_outcome(context.overlay(), op_id, dedup_cutoff_micros)? {
            outcome.deduplicated = true;
            return Ok(outcome);
        }
    }
    let position = context.position();
    let outcome = |result, context: &ApplyContext<'_, E>| CommandOutcome {
        index: position.index,
        term: position.term,
        time_micros: context.now_micros(),
        result,
        deduplicated: false,
    };
    let grants_revision = command
        .grants_revision()
        .filter(|_| !injected_bugs::enabled(InjectedBug::IgnoreGrantsRevision));
    if let Some(checked) = grants_revision {
        let current = auth::grants_revision(context)?;
        if current > checked {
            // Not recorded for dedup: nothing applied, and the write may be
            // checked again and retried under its op id.
            return Ok(outcome(Err(Rejection::GrantsChanged { checked, current }), context));
        }
    }
    let result = match body.validate() {
        Err(message) => Err(Rejection::Invalid(message)),
        Ok(()) => apply_atomically(context, batch, &body.operations)?,
    };
    let outcome = outcome(result, context);
    if let Some(op_id) = body.op_id {
        dedup::record(context.overlay(), batch, op_id, &body.operations, &outcome)?;
    }
    Ok(outcome)
}

/// Applies a command's operations whole or not at all: they write into the
/// command's own batch first, so a refusal part-way leaves nothing behind.
fn apply_atomically<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    batch: &mut WriteBatch,
    operations: &[Operation],
) -> Result<Result<Vec<OperationResult>, Rejection>, EngineError> {
    let result = match checks::failed_checks(context, operations)? {
        Some(indexes) => Err(Rejection::ChecksFailed { indexes }),
        None => apply_operations(context, operations)?,
    };
    let index = context.position().index;
    let result = match (result, context.overlay().rewritten_key()) {
        (Ok(_), Some(key)) => Err(Rejection::Invalid(format!(
            "key {key:?} is written by two commands of log entry {index}; the leader must not group them"
        ))),
        (result, _) => result,
    };
    if result.is_ok() {
        context.commit_command(batch);
    } else {
        context.discard_command();
    }
    Ok(result)
}

fn apply_operations<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    operations: &[Operation],
) -> Result<Result<Vec<OperationResult>, Rejection>, EngineError> {
    let mut results = Vec::with_capacity(operations.len());
    for operation in operations {
        match apply_operation(context, operation)? {
            Ok(result) => results.push(result),
            Err(rejection) => return Ok(Err(rejection)),
        }
    }
    Ok(Ok(results))
}

/// One operation, applied by the function of its family: entry operations
/// here, the others in `apply_coordination_operation`.
fn apply_operation<E: Engine>(context: &mut ApplyContext<'_, E>, operation: &Operation) -> Applied {
    match operation {
        Operation::Set {
            namespace,
            key,
            value,
            encoding,
            expires_at_micros,
            precondition,
            fence,
            session,
        } => entries::set(
            context,
            entries::SetEntry {
                namespace,
                key,
                value,
                encoding,
                expires_at_micros: *expires_at_micros,
                precondition: *precondition,
                fence: fence.as_ref(),
                session: session.as_ref(),
            },
        ),
        Operation::Delete {
            namespace,
            key,
            session,
        } => entries::delete(context, namespace, key, session.as_ref()),
        Operation::Expire {
            namespace,
            key,
            expires_at_micros,
        } => entries::expire(context, namespace, key, *expires_at_micros),
        Operation::Patch {
            namespace,
            key,
            patch,
            session,
        } => entries::patch(context, namespace, key, patch, session.as_ref()),
        Operation::Copy {
            namespace,
            key,
            to_namespace,
            to_key,
            remove_source,
        } => entries::copy(context, (namespace, key), (to_namespace, to_key), *remove_source),
        Operation::Take { namespace, key } => entries::take(context, namespace, key),
        Operation::DeleteRange {
            namespace,
            selector,
            after,
            entries_max,
        } => entries::delete_range(context, namespace, selector, after.as_deref(), *entries_max),
        other => apply_coordination_operation(context, other),
    }
}

/// Leases, checks, counters and sums, the queue, state updates and the
/// leader's sweeps.
fn apply_coordination_operation<E: Engine>(context: &mut ApplyContext<'_, E>, operation: &Operation) -> Applied {
    match operation {
        Operation::AcquireLease {
            namespace,
            key,
            holder,
            ttl_micros,
        } => leases::acquire(context, (namespace, key), holder, *ttl_micros),
        Operation::RenewLease {
            namespace,
            key,
            holder,
            token,
            ttl_micros,
        } => leases::renew(context, (namespace, key), (holder, *token), *ttl_micros),
        Operation::ReleaseLease {
            namespace,
            key,
            holder,
            token,
        } => leases::release(context, (namespace, key), (holder, *token)),
        // Judged before the command's writes, in `checks::failed_checks`.
        Operation::Check { .. } => Ok(Ok(OperationResult::Check)),
        Operation::Counter {
            namespace,
            key,
            kind,
            operand,
        } => checks::counter(context, (namespace, key), *kind, *operand),
        Operation::SumV8 {
            namespace,
            key,
            operand,
            min,
            max,
            clamp,
        } => checks::sum_v8(
            context,
            (namespace, key),
            checks::SumBounds {
                operand,
                min: min.as_deref(),
                max: max.as_deref(),
                clamp: *clamp,
            },
        ),
        Operation::Enqueue {
            payload,
            encoding,
            options,
        } => Ok(Ok(OperationResult::Enqueued {
            id: queue::enqueue(context, payload, encoding, options)?,
        })),
        Operation::ClaimMessage { visibility_ms } => Ok(Ok(OperationResult::Claimed {
            delivery: queue::claim(context, *visibility_ms)?,
        })),
        Operation::FinishMessage { id, attempt, delivered } => Ok(Ok(OperationResult::Finished {
            finished: queue::finish(context, *id, Some(*attempt), *delivered)?,
        })),
        Operation::StateUpdate {
            namespace,
            key,
            ops_json,
        } => state_updates::update(context, namespace, key, ops_json),
        Operation::SweepExpired { entries_max } => sweeps::sweep_expired(context, *entries_max),
        Operation::RequeueOverdue { messages_max } => sweeps::requeue_overdue(context, *messages_max),
        Operation::Auth { change } => auth::apply(context, change),
        Operation::Set { .. }
        | Operation::Delete { .. }
        | Operation::Expire { .. }
        | Operation::Patch { .. }
        | Operation::Copy { .. }
        | Operation::Take { .. }
        | Operation::DeleteRange { .. } => {
            debug_assert!(false, "apply_operation applies entry operations itself");
            Ok(Err(Rejection::Invalid(
                "an entry operation reached the coordination operations' apply".to_owned(),
            )))
        }
    }
}

fn not_found(namespace: &str, key: &[u8]) -> Rejection {
    Rejection::NotFound(format!(
        "no live entry at key {} in namespace {namespace:?}",
        crate::keys::display_key(key)
    ))
}
