//! The State API: JSON values in scopes, with `set`, `get` and `delete`
//! that answer the old and new values, atomic `update` ops applied best
//! effort in one log entry, `list` of a scope's values and `list_groups` of
//! the scopes that hold keys.
//!
//! A scope is the KV namespace `state:<scope>`, so state entries are
//! ordinary entries: versioned, replicated, and in the change feed, where
//! triggers find them.

use serde_json::Value;

use crate::error::{unexpected, LodeError};
use crate::protocol::{Consistency, Operation, OperationResult, Query, QueryResult, ReadRequest};
use crate::sdk::Client;

pub use lode_types::state_update::{scope_namespace, UpdateOp, UpdateOpError, UpdatePath, SCOPE_NAMESPACE_PREFIX};

/// What a `set` or an `update` did.
#[derive(Clone, Debug, PartialEq)]
pub struct StateChange {
    /// The value before (`null` when the key was absent).
    pub old_value: Value,
    /// The value after every op that applied.
    pub new_value: Value,
    /// The ops that failed and were skipped.
    pub errors: Vec<UpdateOpError>,
}

/// A handle on the State API.
#[derive(Clone, Debug)]
pub struct State {
    client: Client,
}

/// Checks a scope name: not empty, and short enough for its namespace.
pub fn check_scope(scope: &str) -> Result<(), LodeError> {
    if scope.is_empty() {
        return Err(LodeError::Invalid("scope must not be empty".to_owned()));
    }
    crate::limits::check_namespace(&scope_namespace(scope))
        .map_err(|message| LodeError::Invalid(message.replacen("namespace", "scope (with its state: prefix)", 1)))
}

fn check_key(key: &str) -> Result<(), LodeError> {
    if key.is_empty() {
        return Err(LodeError::Invalid("key must not be empty".to_owned()));
    }
    crate::limits::check_key(key.as_bytes()).map_err(LodeError::Invalid)
}

fn parse_json(what: &str, bytes: &[u8]) -> Result<Value, LodeError> {
    serde_json::from_slice(bytes).map_err(|error| LodeError::Invalid(format!("{what} is not valid JSON: {error}")))
}

impl State {
    pub(crate) fn new(client: Client) -> Self {
        Self { client }
    }

    async fn write_one(&self, operation: Operation) -> Result<OperationResult, LodeError> {
        self.client.write_one(operation).await
    }

    /// Applies `ops` in order, in one log entry; failed ops are skipped and
    /// reported, the rest apply.
    pub async fn update(&self, scope: &str, key: &str, ops: &[UpdateOp]) -> Result<StateChange, LodeError> {
        check_scope(scope)?;
        check_key(key)?;
        let ops_json = serde_json::to_vec(ops).map_err(|error| LodeError::Invalid(format!("ops: {error}")))?;
        let operation = Operation::StateUpdate {
            namespace: scope_namespace(scope),
            key: key.as_bytes().to_vec(),
            ops_json,
        };
        match self.write_one(operation).await? {
            OperationResult::StateUpdated {
                old_value,
                new_value,
                errors_json,
                ..
            } => Ok(StateChange {
                old_value: match old_value {
                    Some(bytes) => parse_json("the old value", &bytes)?,
                    None => Value::Null,
                },
                new_value: parse_json("the new value", &new_value)?,
                errors: serde_json::from_slice(&errors_json)
                    .map_err(|error| LodeError::Invalid(format!("the update's errors do not decode: {error}")))?,
            }),
            other => Err(unexpected("a state update", &other)),
        }
    }

    /// Stores `value` (any JSON) under the key.
    pub async fn set(&self, scope: &str, key: &str, value: Value) -> Result<StateChange, LodeError> {
        self.update(scope, key, &[UpdateOp::Set { path: None, value }]).await
    }

    /// The value under the key, `null` when absent (linearizable).
    pub async fn get(&self, scope: &str, key: &str) -> Result<Value, LodeError> {
        check_scope(scope)?;
        check_key(key)?;
        let request = ReadRequest {
            query: Query::Get {
                namespace: scope_namespace(scope),
                key: key.as_bytes().to_vec(),
            },
            consistency: Consistency::Linearizable,
        };
        match self.client.read(request).await?.result {
            QueryResult::Entry(Some(entry)) => parse_json("the stored value", &entry.value),
            QueryResult::Entry(None) => Ok(Value::Null),
            other => Err(unexpected("a state get", &other)),
        }
    }

    /// Removes the key and answers the value it held (`null` when absent).
    pub async fn delete(&self, scope: &str, key: &str) -> Result<Value, LodeError> {
        check_scope(scope)?;
        check_key(key)?;
        let operation = Operation::Take {
            namespace: scope_namespace(scope),
            key: key.as_bytes().to_vec(),
        };
        match self.write_one(operation).await? {
            OperationResult::Taken {
                old_value: Some(bytes), ..
            } => parse_json("the deleted value", &bytes),
            OperationResult::Taken { old_value: None, .. } => Ok(Value::Null),
            other => Err(unexpected("a state delete", &other)),
        }
    }

    /// Every value of the scope, in key order, read page by page. The State
    /// API answers a scope whole, so a scope holding more than
    /// `state_list_bytes_max` bytes of values is refused as `invalid`.
    pub async fn list(&self, scope: &str) -> Result<Vec<Value>, LodeError> {
        check_scope(scope)?;
        let mut values = Vec::new();
        let mut value_bytes = 0usize;
        let mut after = None;
        loop {
            let request = ReadRequest {
                query: Query::Scan {
                    namespace: scope_namespace(scope),
                    selector: crate::protocol::Selector::All,
                    after: after.take(),
                    limit: crate::limits::SCAN_PAGE_ENTRIES_MAX as u32,
                },
                consistency: Consistency::Linearizable,
            };
            match self.client.read(request).await?.result {
                QueryResult::Page { entries, resume_after } => {
                    for entry in entries {
                        value_bytes += entry.value.len();
                        if value_bytes > crate::limits::STATE_LIST_BYTES_MAX {
                            return Err(LodeError::Invalid(format!(
                                "scope {scope:?} holds more than state_list_bytes_max = {} bytes of values; \
                                 state::list answers a scope whole, so split it or read it in pages with a KV scan \
                                 of namespace {:?}",
                                crate::limits::STATE_LIST_BYTES_MAX,
                                scope_namespace(scope)
                            )));
                        }
                        values.push(parse_json("a stored value", &entry.value)?);
                    }
                    match resume_after {
                        Some(resume) => after = Some(resume),
                        None => return Ok(values),
                    }
                }
                other => return Err(unexpected("a state list", &other)),
            }
        }
    }

    /// The scopes that hold at least one key, sorted and without repeats.
    pub async fn list_groups(&self) -> Result<Vec<String>, LodeError> {
        let request = ReadRequest {
            query: Query::Namespaces {
                prefix: SCOPE_NAMESPACE_PREFIX.to_owned(),
            },
            consistency: Consistency::Linearizable,
        };
        match self.client.read(request).await?.result {
            QueryResult::Namespaces(names) => {
                let mut scopes: Vec<String> = names
                    .into_iter()
                    .filter_map(|name| name.strip_prefix(SCOPE_NAMESPACE_PREFIX).map(str::to_owned))
                    .collect();
                scopes.sort();
                scopes.dedup();
                Ok(scopes)
            }
            other => Err(unexpected("list_groups", &other)),
        }
    }
}

impl Client {
    /// The State API.
    pub fn state(&self) -> State {
        State::new(self.clone())
    }
}

/// One State API change as a trigger receives it.
#[derive(Clone, Debug, PartialEq)]
pub struct StateEvent {
    /// The change's place in the change feed; a trigger resumes after it.
    pub position: (u64, u32),
    /// `state:created`, `state:updated` or `state:deleted`.
    pub event_type: &'static str,
    pub scope: String,
    pub key: String,
    /// `null` for a created key.
    pub old_value: Value,
    /// `null` for a deleted key.
    pub new_value: Value,
}

impl StateEvent {
    /// The State seed's event payload:
    /// `{type: "state", event_type, scope, key, old_value, new_value}`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "type": "state",
            "event_type": self.event_type,
            "scope": self.scope,
            "key": self.key,
            "old_value": self.old_value,
            "new_value": self.new_value,
        })
    }

    fn from_change(event: crate::protocol::ChangeEvent) -> Option<Self> {
        use crate::protocol::ChangeKind;
        let scope = event.namespace.strip_prefix(SCOPE_NAMESPACE_PREFIX)?.to_owned();
        let value = |bytes: Option<Vec<u8>>| {
            bytes
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                .unwrap_or(Value::Null)
        };
        Some(Self {
            position: event.position(),
            event_type: match event.kind {
                ChangeKind::Created => "state:created",
                ChangeKind::Updated => "state:updated",
                ChangeKind::Deleted => "state:deleted",
            },
            scope,
            key: String::from_utf8_lossy(&event.key).into_owned(),
            old_value: value(event.old_value),
            new_value: value(event.new_value),
        })
    }
}

/// A worker-side condition: the event passes when it answers true (the
/// State seed's `condition_function_id`).
pub type Condition = std::sync::Arc<dyn Fn(&StateEvent) -> bool + Send + Sync>;

/// Events per read of a trigger.
const TRIGGER_EVENTS_PER_READ: u32 = 1000;
/// How long one trigger read waits on the server, in milliseconds; below
/// the SDK's default attempt timeout.
const TRIGGER_WAIT_MS: u64 = 5_000;

/// A trigger being built, then followed: State API changes in commit order,
/// at least once, resumable from a position, with `compacted` (never a
/// silent gap) when the position is older than the cluster retains.
#[derive(Clone)]
pub struct Trigger {
    client: Client,
    filter: crate::protocol::StateEventFilter,
    after: (u64, u32),
    condition: Option<Condition>,
}

impl std::fmt::Debug for Trigger {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Trigger")
            .field("filter", &self.filter)
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

impl Trigger {
    /// Only changes in this scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.filter.scope = Some(scope.into());
        self
    }

    /// Only changes of this key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.filter.key = Some(key.into());
        self
    }

    /// Only these kinds of change.
    pub fn kinds(mut self, kinds: Vec<crate::protocol::ChangeKind>) -> Self {
        self.filter.kinds = kinds;
        self
    }

    /// Only changes where the value at this JSON pointer (`/email`) differs
    /// between old and new; judged by the server.
    pub fn field_changed(mut self, pointer: impl Into<String>) -> Self {
        self.filter.changed_pointer = Some(pointer.into());
        self
    }

    /// Start after this position (a previous event's `position`); the
    /// default starts at the oldest retained change.
    pub fn after(mut self, position: (u64, u32)) -> Self {
        self.after = position;
        self
    }

    /// A condition the worker judges; events it rejects are skipped.
    pub fn condition(mut self, condition: impl Fn(&StateEvent) -> bool + Send + Sync + 'static) -> Self {
        self.condition = Some(std::sync::Arc::new(condition));
        self
    }

    /// The position the next read continues after.
    pub fn position(&self) -> (u64, u32) {
        self.after
    }

    /// One read: the matching events after the current position (waiting
    /// a while for some when there are none).
    pub async fn next_batch(&mut self) -> Result<Vec<StateEvent>, LodeError> {
        let request = ReadRequest {
            query: Query::StateEvents {
                after_index: self.after.0,
                after_sequence: self.after.1,
                filter: self.filter.clone(),
                limit: TRIGGER_EVENTS_PER_READ,
                wait_ms: self.client.server_wait_ms(TRIGGER_WAIT_MS),
            },
            consistency: Consistency::Eventual,
        };
        match self.client.read(request).await?.result {
            QueryResult::Changes { events, resume_after } => {
                self.after = resume_after.max(self.after);
                Ok(events
                    .into_iter()
                    .filter_map(StateEvent::from_change)
                    .filter(|event| self.condition.as_ref().is_none_or(|condition| condition(event)))
                    .collect())
            }
            other => Err(unexpected("a trigger read", &other)),
        }
    }

    /// Every matching change, as an endless stream that ends only with an
    /// error (`compacted`, or the SDK's retries running out).
    pub fn stream(self) -> impl futures::Stream<Item = Result<StateEvent, LodeError>> {
        futures::stream::try_unfold(
            (self, std::collections::VecDeque::new()),
            |(mut trigger, mut buffered)| async move {
                loop {
                    if let Some(event) = buffered.pop_front() {
                        return Ok(Some((event, (trigger, buffered))));
                    }
                    buffered.extend(trigger.next_batch().await?);
                }
            },
        )
    }
}

impl State {
    /// A trigger on every State API change (narrow it with its builders).
    pub fn trigger(&self) -> Trigger {
        Trigger {
            client: self.client.clone(),
            filter: crate::protocol::StateEventFilter::default(),
            after: (0, 0),
            condition: None,
        }
    }
}
