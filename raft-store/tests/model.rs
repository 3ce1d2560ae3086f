//! The store against a `BTreeMap` model: random sequences of every KV
//! operation and every auth change from one client, with time moving
//! forward so entries and tokens expire and sweeps remove them. After every
//! step the outcome, the whole live state and every permission decision
//! must match the model.

#[path = "model/auth.rs"]
mod auth;

use std::collections::BTreeMap;
use std::sync::Arc;

use lode_raft_store::command::{
    ChangeKind, Command, CommandV1, CounterKind, Encoding, OpId, Operation, OperationResult, Precondition, Proposal,
    Rejection, Selector,
};
use lode_raft_store::{MemoryEngine, StateMachineStore, StateReader, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};
use proptest::prelude::*;
use serde_json::json;

const NAMESPACES: [&str; 2] = ["a", "b"];
const KEYS: [&str; 5] = ["k0", "k1", "k2", "x1", "x2"];
const HOLDERS: [&str; 2] = ["worker-a", "worker-b"];

#[derive(Clone, Debug)]
enum Expected {
    Current,
    Stale(u64),
    Absent,
}

#[derive(Clone, Debug)]
enum Step {
    Set {
        namespace: usize,
        key: usize,
        number: u8,
        json: bool,
        ttl: Option<u64>,
        expected: Option<Expected>,
        /// A fence on lease (namespace, key), with the live token or a stale one.
        fence: Option<(usize, usize, bool)>,
    },
    Acquire {
        namespace: usize,
        key: usize,
        holder: usize,
        ttl: u64,
    },
    Renew {
        namespace: usize,
        key: usize,
        holder: usize,
        current_token: bool,
        ttl: u64,
    },
    Release {
        namespace: usize,
        key: usize,
        holder: usize,
        current_token: bool,
    },
    Delete {
        namespace: usize,
        key: usize,
    },
    Expire {
        namespace: usize,
        key: usize,
        ttl: Option<u64>,
    },
    Patch {
        namespace: usize,
        key: usize,
        number: u8,
    },
    Copy {
        namespace: usize,
        key: usize,
        to_namespace: usize,
        to_key: usize,
        remove_source: bool,
    },
    DeletePrefix {
        namespace: usize,
        prefix: &'static str,
    },
    Advance {
        micros: u64,
    },
    Sweep,
    /// Checks (namespace, key, expectation), then a set of (namespace, key).
    Checked {
        checks: Vec<(usize, usize, Expected)>,
        namespace: usize,
        key: usize,
        number: u8,
    },
    /// A counter of kind 0 (sum), 1 (min) or 2 (max).
    Counter {
        namespace: usize,
        key: usize,
        kind: u8,
        operand: u64,
    },
    Auth(auth::AuthStep),
}

fn step() -> impl Strategy<Value = Step> {
    let namespace = 0..NAMESPACES.len();
    let key = 0..KEYS.len();
    let ttl = prop::option::of(1u64..50);
    let expected = prop::option::of(prop_oneof![
        Just(Expected::Current),
        (1u64..40).prop_map(Expected::Stale),
        Just(Expected::Absent),
    ]);
    let fence = prop::option::weighted(0.3, (namespace.clone(), key.clone(), any::<bool>()));
    let holder = 0..HOLDERS.len();
    prop_oneof![
        4 => (namespace.clone(), key.clone(), any::<u8>(), any::<bool>(), ttl.clone(), expected, fence).prop_map(
            |(namespace, key, number, json, ttl, expected, fence)| Step::Set {
                namespace,
                key,
                number,
                json,
                ttl,
                expected,
                fence
            }
        ),
        1 => (namespace.clone(), key.clone(), holder.clone(), 1u64..60)
            .prop_map(|(namespace, key, holder, ttl)| Step::Acquire { namespace, key, holder, ttl }),
        1 => (namespace.clone(), key.clone(), holder.clone(), any::<bool>(), 1u64..60).prop_map(
            |(namespace, key, holder, current_token, ttl)| Step::Renew { namespace, key, holder, current_token, ttl }
        ),
        1 => (namespace.clone(), key.clone(), holder, any::<bool>()).prop_map(
            |(namespace, key, holder, current_token)| Step::Release { namespace, key, holder, current_token }
        ),
        1 => (namespace.clone(), key.clone()).prop_map(|(namespace, key)| Step::Delete { namespace, key }),
        1 => (namespace.clone(), key.clone(), ttl).prop_map(|(namespace, key, ttl)| Step::Expire { namespace, key, ttl }),
        1 => (namespace.clone(), key.clone(), any::<u8>())
            .prop_map(|(namespace, key, number)| Step::Patch { namespace, key, number }),
        1 => (namespace.clone(), key.clone(), namespace.clone(), key, any::<bool>()).prop_map(
            |(namespace, key, to_namespace, to_key, remove_source)| Step::Copy {
                namespace,
                key,
                to_namespace,
                to_key,
                remove_source
            }
        ),
        1 => (namespace, prop_oneof![Just("k"), Just("x"), Just("k1")])
            .prop_map(|(namespace, prefix)| Step::DeletePrefix { namespace, prefix }),
        1 => (1u64..30).prop_map(|micros| Step::Advance { micros }),
        1 => Just(Step::Sweep),
        1 => (
            prop::collection::vec((0..NAMESPACES.len(), 0..KEYS.len(), prop_oneof![
                Just(Expected::Current),
                (1u64..40).prop_map(Expected::Stale),
                Just(Expected::Absent),
            ]), 1..4),
            0..NAMESPACES.len(),
            0..KEYS.len(),
            any::<u8>(),
        )
            .prop_map(|(checks, namespace, key, number)| Step::Checked { checks, namespace, key, number }),
        1 => (0..NAMESPACES.len(), 0..KEYS.len(), 0u8..3, prop_oneof![Just(u64::MAX), Just(1u64), 0u64..100])
            .prop_map(|(namespace, key, kind, operand)| Step::Counter { namespace, key, kind, operand }),
        4 => auth::auth_step().prop_map(Step::Auth),
    ]
}

#[derive(Clone, Debug, PartialEq)]
struct ModelEntry {
    value: Vec<u8>,
    encoding: Encoding,
    version: u64,
    expires_at_micros: Option<u64>,
}

impl ModelEntry {
    fn live_at(&self, now: u64) -> bool {
        self.expires_at_micros.is_none_or(|at| at > now)
    }
}

#[derive(Clone, Debug)]
struct ModelLease {
    holder: String,
    token: u64,
    expires_at: u64,
}

/// A change event as the model expects it: namespace, key, kind, old and
/// new value.
type ModelChange = (String, Vec<u8>, ChangeKind, Option<Vec<u8>>, Option<Vec<u8>>);

#[derive(Default)]
struct Model {
    entries: BTreeMap<(String, Vec<u8>), ModelEntry>,
    leases: BTreeMap<(String, Vec<u8>), ModelLease>,
    /// Changes of live values the last operation made.
    changes: Vec<ModelChange>,
    auth: auth::AuthModel,
}

impl Model {
    /// Writes an entry, expecting a change event when a live value changes.
    fn put(&mut self, key: (String, Vec<u8>), entry: ModelEntry, now: u64) {
        let previous = self.entries.get(&key).filter(|previous| previous.live_at(now)).cloned();
        let changed = previous
            .as_ref()
            .is_none_or(|previous| previous.version != entry.version || previous.value != entry.value);
        if changed {
            let kind = if previous.is_some() {
                ChangeKind::Updated
            } else {
                ChangeKind::Created
            };
            self.changes.push((
                key.0.clone(),
                key.1.clone(),
                kind,
                previous.map(|previous| previous.value),
                Some(entry.value.clone()),
            ));
        }
        self.entries.insert(key, entry);
    }

    /// Removes an entry, expecting a deletion event when it was live.
    fn take(&mut self, key: &(String, Vec<u8>), now: u64) -> Option<ModelEntry> {
        let removed = self.entries.remove(key);
        if let Some(live) = removed.as_ref().filter(|entry| entry.live_at(now)) {
            self.changes.push((
                key.0.clone(),
                key.1.clone(),
                ChangeKind::Deleted,
                Some(live.value.clone()),
                None,
            ));
        }
        removed
    }

    fn live_lease(&self, namespace: &str, key: &[u8], now: u64) -> Option<&ModelLease> {
        self.leases
            .get(&(namespace.to_owned(), key.to_vec()))
            .filter(|lease| lease.expires_at > now)
    }

    fn live(&self, namespace: &str, key: &[u8], now: u64) -> Option<&ModelEntry> {
        self.entries
            .get(&(namespace.to_owned(), key.to_vec()))
            .filter(|entry| entry.live_at(now))
    }

    /// Applies a command: every check is judged first and the refusal names
    /// all that failed; otherwise its operations apply in order.
    fn apply_command(
        &mut self,
        operations: &[Operation],
        version: u64,
        now: u64,
    ) -> Result<Vec<OperationResult>, Rejection> {
        let checks = operations.iter().filter_map(|operation| match operation {
            Operation::Check {
                namespace,
                key,
                precondition,
            } => Some((namespace, key, precondition)),
            _ => None,
        });
        let mut failed = Vec::new();
        for (index, (namespace, key, precondition)) in (0u32..).zip(checks) {
            let current = self.live(namespace, key, now).map(|entry| entry.version);
            let holds = match precondition {
                Precondition::Version(expected) => current == Some(*expected),
                Precondition::Absent => current.is_none(),
            };
            if !holds {
                failed.push(index);
            }
        }
        if !failed.is_empty() {
            return Err(Rejection::ChecksFailed { indexes: failed });
        }
        operations
            .iter()
            .map(|operation| self.apply(operation, version, now))
            .collect()
    }

    /// Applies an operation to the model the way the seed describes it.
    fn apply(&mut self, operation: &Operation, version: u64, now: u64) -> Result<OperationResult, Rejection> {
        match operation {
            Operation::Set {
                namespace,
                key,
                value,
                encoding,
                expires_at_micros,
                precondition,
                fence,
                session: _,
            } => {
                if let Some(fence) = fence {
                    if precondition.is_none() {
                        return Err(Rejection::Invalid(String::new()));
                    }
                    let held = self
                        .live_lease(&fence.namespace, &fence.key, now)
                        .is_some_and(|lease| lease.token == fence.token);
                    if !held {
                        return Err(Rejection::LeaseLost(String::new()));
                    }
                }
                let current = self.live(namespace, key, now).map(|entry| entry.version);
                let holds = match precondition {
                    None => true,
                    Some(Precondition::Version(expected)) => current == Some(*expected),
                    Some(Precondition::Absent) => current.is_none(),
                };
                if !holds {
                    return Err(Rejection::VersionConflict {
                        key: key.clone(),
                        current,
                    });
                }
                self.put(
                    (namespace.clone(), key.clone()),
                    ModelEntry {
                        value: value.clone(),
                        encoding: encoding.clone(),
                        version,
                        expires_at_micros: *expires_at_micros,
                    },
                    now,
                );
                Ok(OperationResult::Set { version })
            }
            Operation::Delete { namespace, key, .. } => {
                let removed = self.take(&(namespace.clone(), key.clone()), now);
                Ok(OperationResult::Delete {
                    removed_live_entry: removed.is_some_and(|entry| entry.live_at(now)),
                })
            }
            Operation::Expire {
                namespace,
                key,
                expires_at_micros,
            } => {
                let live = self
                    .live(namespace, key, now)
                    .cloned()
                    .ok_or(Rejection::NotFound(String::new()))?;
                let entry = ModelEntry {
                    expires_at_micros: *expires_at_micros,
                    ..live
                };
                let unchanged = entry.version;
                self.put((namespace.clone(), key.clone()), entry, now);
                Ok(OperationResult::Expire { version: unchanged })
            }
            Operation::Patch {
                namespace, key, patch, ..
            } => {
                let live = self
                    .live(namespace, key, now)
                    .cloned()
                    .ok_or(Rejection::NotFound(String::new()))?;
                if live.encoding != Encoding::Json {
                    return Err(Rejection::Invalid(String::new()));
                }
                let mut target: serde_json::Value =
                    serde_json::from_slice(&live.value).map_err(|_| Rejection::Invalid(String::new()))?;
                let patch: serde_json::Value =
                    serde_json::from_slice(patch).map_err(|_| Rejection::Invalid(String::new()))?;
                lode_raft_store::merge_patch::merge(&mut target, &patch);
                let value = serde_json::to_vec(&target).map_err(|_| Rejection::Invalid(String::new()))?;
                self.put(
                    (namespace.clone(), key.clone()),
                    ModelEntry { value, version, ..live },
                    now,
                );
                Ok(OperationResult::Patch { version })
            }
            Operation::Copy {
                namespace,
                key,
                to_namespace,
                to_key,
                remove_source,
            } => {
                let live = self
                    .live(namespace, key, now)
                    .cloned()
                    .ok_or(Rejection::NotFound(String::new()))?;
                let source = (namespace.clone(), key.clone());
                let destination = (to_namespace.clone(), to_key.clone());
                self.put(destination.clone(), ModelEntry { version, ..live }, now);
                if *remove_source && source != destination {
                    self.take(&source, now);
                }
                Ok(OperationResult::Copy { version })
            }
            Operation::DeleteRange {
                namespace, selector, ..
            } => {
                let Selector::Prefix(prefix) = selector else {
                    unreachable!("the model only deletes by prefix");
                };
                let doomed: Vec<_> = self
                    .entries
                    .keys()
                    .filter(|(entry_namespace, key)| entry_namespace == namespace && key.starts_with(prefix))
                    .cloned()
                    .collect();
                let mut removed = 0;
                for key in doomed {
                    if self.take(&key, now).is_some_and(|entry| entry.live_at(now)) {
                        removed += 1;
                    }
                }
                Ok(OperationResult::DeleteRange {
                    removed,
                    resume_after: None,
                })
            }
            Operation::SweepExpired { .. } => {
                let before = self.entries.len() + self.leases.len();
                self.entries.retain(|_, entry| entry.live_at(now));
                self.leases.retain(|_, lease| lease.expires_at > now);
                Ok(OperationResult::SweepExpired {
                    removed: (before - self.entries.len() - self.leases.len()) as u32,
                })
            }
            Operation::AcquireLease {
                namespace,
                key,
                holder,
                ttl_micros,
            } => {
                if let Some(lease) = self.live_lease(namespace, key, now) {
                    return Err(Rejection::VersionConflict {
                        key: key.clone(),
                        current: Some(lease.token),
                    });
                }
                let lease = ModelLease {
                    holder: holder.clone(),
                    token: version,
                    expires_at: now + ttl_micros,
                };
                self.leases.insert((namespace.clone(), key.clone()), lease);
                Ok(OperationResult::AcquireLease {
                    token: version,
                    ttl_micros: *ttl_micros,
                    expires_at_micros: now + ttl_micros,
                })
            }
            Operation::RenewLease {
                namespace,
                key,
                holder,
                token,
                ttl_micros,
            } => {
                let held = self
                    .live_lease(namespace, key, now)
                    .is_some_and(|lease| lease.token == *token && lease.holder == *holder);
                if !held {
                    return Err(Rejection::LeaseLost(String::new()));
                }
                if let Some(lease) = self.leases.get_mut(&(namespace.clone(), key.clone())) {
                    lease.expires_at = now + ttl_micros;
                }
                Ok(OperationResult::RenewLease {
                    token: *token,
                    ttl_micros: *ttl_micros,
                    expires_at_micros: now + ttl_micros,
                })
            }
            Operation::ReleaseLease {
                namespace,
                key,
                holder,
                token,
            } => {
                let held = self
                    .live_lease(namespace, key, now)
                    .is_some_and(|lease| lease.token == *token && lease.holder == *holder);
                if held {
                    self.leases.remove(&(namespace.clone(), key.clone()));
                }
                Ok(OperationResult::ReleaseLease { released: held })
            }
            Operation::Check { .. } => Ok(OperationResult::Check),
            Operation::Counter {
                namespace,
                key,
                kind,
                operand,
            } => {
                let value = match self.live(namespace, key, now) {
                    None => *operand,
                    Some(entry) => match (&entry.encoding, <[u8; 8]>::try_from(entry.value.as_slice())) {
                        (Encoding::Le64, Ok(bytes)) => {
                            let stored = u64::from_le_bytes(bytes);
                            match kind {
                                CounterKind::Sum => stored.wrapping_add(*operand),
                                CounterKind::Min => stored.min(*operand),
                                CounterKind::Max => stored.max(*operand),
                            }
                        }
                        _ => return Err(Rejection::Invalid(String::new())),
                    },
                };
                self.put(
                    (namespace.clone(), key.clone()),
                    ModelEntry {
                        value: value.to_le_bytes().to_vec(),
                        encoding: Encoding::Le64,
                        version,
                        expires_at_micros: None,
                    },
                    now,
                );
                Ok(OperationResult::Counter { version, value })
            }
            Operation::Auth { change } => self.auth.apply(change, version, now),
            Operation::SumV8 { .. }
            | Operation::StateUpdate { .. }
            | Operation::Take { .. }
            | Operation::Enqueue { .. }
            | Operation::ClaimMessage { .. }
            | Operation::FinishMessage { .. }
            | Operation::RequeueOverdue { .. } => {
                unreachable!(
                    "the model generates no V8 sums, State updates or queue operations (lode-types, \
                     raft-store/tests/queue.rs and node/tests cover them)"
                )
            }
        }
    }
}

fn operations(step: &Step, model: &Model, position: usize, now: u64) -> Option<Vec<Operation>> {
    if let Step::Auth(step) = step {
        let id = position as u128 + 1;
        return Some(vec![Operation::Auth {
            change: model.auth.change(step, id, now),
        }]);
    }
    let namespace = |index: usize| NAMESPACES[index].to_owned();
    let key = |index: usize| KEYS[index].as_bytes().to_vec();
    let precondition_of = |n: usize, k: usize, expected: Expected| match expected {
        Expected::Current => match model.live(&namespace(n), &key(k), now) {
            Some(entry) => Precondition::Version(entry.version),
            None => Precondition::Absent,
        },
        Expected::Stale(version) => Precondition::Version(version),
        Expected::Absent => Precondition::Absent,
    };
    if let Step::Checked {
        checks,
        namespace: n,
        key: k,
        number,
    } = step
    {
        let mut operations: Vec<Operation> = checks
            .iter()
            .map(|(check_namespace, check_key, expected)| Operation::Check {
                namespace: namespace(*check_namespace),
                key: key(*check_key),
                precondition: precondition_of(*check_namespace, *check_key, expected.clone()),
            })
            .collect();
        operations.push(Operation::Set {
            namespace: namespace(*n),
            key: key(*k),
            value: vec![*number],
            encoding: Encoding::Bytes,
            expires_at_micros: None,
            precondition: None,
            fence: None,
            session: None,
        });
        return Some(operations);
    }
    Some(vec![match step.clone() {
        Step::Set {
            namespace: n,
            key: k,
            number,
            json,
            ttl,
            expected,
            fence,
        } => {
            let fence = fence.map(|(fence_namespace, fence_key, current)| {
                let token = model
                    .live_lease(&namespace(fence_namespace), &key(fence_key), now)
                    .map(|lease| lease.token);
                lode_raft_store::command::Fence {
                    namespace: namespace(fence_namespace),
                    key: key(fence_key),
                    token: if current {
                        token.unwrap_or(1)
                    } else {
                        token.unwrap_or(1) + 1
                    },
                }
            });
            let precondition = expected.map(|expected| precondition_of(n, k, expected));
            let (value, encoding) = if json {
                (
                    json!({ "n": number, "m": { "k": number } }).to_string().into_bytes(),
                    Encoding::Json,
                )
            } else {
                (vec![number], Encoding::Bytes)
            };
            Operation::Set {
                namespace: namespace(n),
                key: key(k),
                value,
                encoding,
                expires_at_micros: ttl.map(|ttl| now + ttl),
                precondition,
                fence,
                session: None,
            }
        }
        Step::Acquire {
            namespace: n,
            key: k,
            holder,
            ttl,
        } => Operation::AcquireLease {
            namespace: namespace(n),
            key: key(k),
            holder: HOLDERS[holder].to_owned(),
            ttl_micros: ttl,
        },
        Step::Renew {
            namespace: n,
            key: k,
            holder,
            current_token,
            ttl,
        } => Operation::RenewLease {
            namespace: namespace(n),
            key: key(k),
            holder: HOLDERS[holder].to_owned(),
            token: lease_token(model, &namespace(n), &key(k), now, current_token),
            ttl_micros: ttl,
        },
        Step::Release {
            namespace: n,
            key: k,
            holder,
            current_token,
        } => Operation::ReleaseLease {
            namespace: namespace(n),
            key: key(k),
            holder: HOLDERS[holder].to_owned(),
            token: lease_token(model, &namespace(n), &key(k), now, current_token),
        },
        Step::Delete { namespace: n, key: k } => Operation::Delete {
            namespace: namespace(n),
            key: key(k),
            session: None,
        },
        Step::Expire {
            namespace: n,
            key: k,
            ttl,
        } => Operation::Expire {
            namespace: namespace(n),
            key: key(k),
            expires_at_micros: ttl.map(|ttl| now + ttl),
        },
        Step::Patch {
            namespace: n,
            key: k,
            number,
        } => Operation::Patch {
            namespace: namespace(n),
            key: key(k),
            patch: json!({ "p": number, "m": { "k": null } }).to_string().into_bytes(),
            session: None,
        },
        Step::Copy {
            namespace: n,
            key: k,
            to_namespace,
            to_key,
            remove_source,
        } => Operation::Copy {
            namespace: namespace(n),
            key: key(k),
            to_namespace: namespace(to_namespace),
            to_key: key(to_key),
            remove_source,
        },
        Step::DeletePrefix { namespace: n, prefix } => Operation::DeleteRange {
            namespace: namespace(n),
            selector: Selector::Prefix(prefix.as_bytes().to_vec()),
            after: None,
            entries_max: 1000,
        },
        Step::Sweep => Operation::SweepExpired { entries_max: 1000 },
        Step::Counter {
            namespace: n,
            key: k,
            kind,
            operand,
        } => Operation::Counter {
            namespace: namespace(n),
            key: key(k),
            kind: match kind {
                0 => CounterKind::Sum,
                1 => CounterKind::Min,
                _ => CounterKind::Max,
            },
            operand,
        },
        Step::Advance { .. } | Step::Checked { .. } | Step::Auth(_) => return None,
    }])
}

/// The live lease's token, or one that is not it.
fn lease_token(model: &Model, namespace: &str, key: &[u8], now: u64, current: bool) -> u64 {
    let token = model.live_lease(namespace, key, now).map_or(1, |lease| lease.token);
    if current {
        token
    } else {
        token + 1
    }
}

/// Rejection messages are for people; the model compares their kinds.
fn kind(result: &Result<Vec<OperationResult>, Rejection>) -> Result<Vec<OperationResult>, Rejection> {
    match result {
        Ok(results) => Ok(results.clone()),
        Err(Rejection::Invalid(_)) => Err(Rejection::Invalid(String::new())),
        Err(Rejection::NotFound(_)) => Err(Rejection::NotFound(String::new())),
        Err(Rejection::LeaseLost(_)) => Err(Rejection::LeaseLost(String::new())),
        Err(conflict) => Err(conflict.clone()),
    }
}

fn live_state(reader: &StateReader<MemoryEngine>, now: u64) -> BTreeMap<(String, Vec<u8>), ModelEntry> {
    let mut state = BTreeMap::new();
    for namespace in NAMESPACES {
        let page = reader.scan(namespace, &Selector::All, None, 1000, now).expect("scan");
        assert!(page.resume_after.is_none(), "a small state fits one page");
        for (key, entry) in page.entries {
            state.insert(
                (namespace.to_owned(), key),
                ModelEntry {
                    value: entry.value,
                    encoding: entry.encoding,
                    version: entry.version,
                    expires_at_micros: entry.expires_at_micros,
                },
            );
        }
    }
    state
}

fn run(steps: Vec<Step>) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    runtime.block_on(async {
        let mut state = StateMachineStore::open(Arc::new(MemoryEngine::new())).expect("open");
        let reader = state.reader();
        let mut model = Model::default();
        let mut now = 1_000;
        let mut index = 0;
        for (position, step) in steps.iter().enumerate() {
            if let Step::Advance { micros } = step {
                now += micros;
                continue;
            }
            let Some(operations) = operations(step, &model, position, now) else {
                continue;
            };
            let auth_version = reader.auth_version();
            index += 1;
            let command = Command::V1(CommandV1 {
                op_id: Some(OpId(position as u128)),
                time_micros: now,
                operations: operations.clone(),
            });
            let entry = Entry::<TypeConfig> {
                log_id: log_id(1, 1, index),
                payload: EntryPayload::Normal(Proposal::single(command)),
            };
            let mut outcomes = state.apply([entry]).await.expect("apply");
            let outcome = outcomes.remove(0).outcomes.remove(0);
            model.changes.clear();
            let expected = model.apply_command(&operations, index, now);
            assert_eq!(kind(&outcome.result), expected, "step {position}: {step:?}");
            let context = format!("after step {position}: {step:?}");
            model
                .auth
                .check(&reader.auth_state().expect("auth state"), now, &context);
            if !matches!(step, Step::Auth(_)) {
                assert_eq!(reader.auth_version(), auth_version, "the auth version {context}");
            } else if expected.is_ok() {
                assert_ne!(reader.auth_version(), auth_version, "the auth version {context}");
            }
            // The change log holds exactly the entry's changes of live values.
            let page = reader
                .changes((index - 1, u32::MAX), 1000, "")
                .expect("changes")
                .expect("not compacted");
            let recorded: Vec<ModelChange> = page
                .events
                .into_iter()
                .map(|event| (event.namespace, event.key, event.kind, event.old_value, event.new_value))
                .collect();
            let expected_changes = if expected.is_ok() {
                model.changes.clone()
            } else {
                Vec::new()
            };
            assert_eq!(recorded, expected_changes, "changes of step {position}: {step:?}");
            let model_live: BTreeMap<_, _> = model
                .entries
                .iter()
                .filter(|(_, entry)| entry.live_at(now))
                .map(|(key, entry)| (key.clone(), entry.clone()))
                .collect();
            assert_eq!(
                live_state(&reader, now),
                model_live,
                "state after step {position}: {step:?}"
            );
            for namespace in NAMESPACES {
                for key in KEYS {
                    let lease = reader.lease(namespace, key.as_bytes(), now).expect("lease");
                    let modelled = model.live_lease(namespace, key.as_bytes(), now);
                    assert_eq!(
                        lease.map(|lease| (lease.holder, lease.token, lease.expires_at_micros)),
                        modelled.map(|lease| (lease.holder.clone(), lease.token, lease.expires_at)),
                        "lease {namespace}/{key} after step {position}"
                    );
                    let stored = reader.get_entry(namespace, key.as_bytes(), now).expect("get");
                    let modelled = model.live(namespace, key.as_bytes(), now);
                    assert_eq!(stored.map(|entry| entry.version), modelled.map(|entry| entry.version));
                }
            }
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_store_matches_a_btreemap_model(steps in prop::collection::vec(step(), 1..60)) {
        run(steps);
    }
}
