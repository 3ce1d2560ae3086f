//! Linearizability of each key's get, set, compare-and-set and delete
//! history, by the Wing–Gong search with Lowe's memoization: find an order
//! of the operations that respects real time (an operation that completed
//! before another was invoked comes first) and in which every answer is
//! what a single register would have given.
//!
//! An operation whose outcome is unknown may have taken effect at any point
//! after its invocation, or never: it gets no completion, so the search may
//! place it anywhere later, including after everything else (which is the
//! same as never).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::history::{Call, History, Operation, Outcome};

/// Most search steps per key before the checker gives up; a history this
/// hard to decide is itself a finding (too much concurrency per key).
pub const SEARCH_STEPS_MAX: u64 = 20_000_000;

/// The register's state: the id of the value held, or absent.
type State = Option<u32>;

struct KeyHistory<'a> {
    operations: Vec<&'a Operation>,
    /// Value → id; ids index `versions`.
    value_ids: HashMap<&'a str, u32>,
    /// The version each value was observed with, when it was observed.
    versions: Vec<Option<u64>>,
    /// Version → the value observed with it.
    owners: HashMap<u64, u32>,
}

/// Whether a condition on the register's version holds in a state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Truth {
    Yes,
    No,
    /// The state holds a value whose version nobody observed (its write's
    /// answer was lost), and the version in question belongs to no
    /// observed value: it may be that value's version.
    Maybe,
}

impl<'a> KeyHistory<'a> {
    fn value_id(&self, value: &str) -> u32 {
        // Every value of this key's operations was interned first.
        self.value_ids.get(value).copied().unwrap_or(u32::MAX)
    }

    /// Whether the register's version in `state` is `version` (`None`:
    /// the register is empty).
    fn version_is(&self, state: State, version: Option<u64>) -> Truth {
        match (state, version) {
            (None, None) => Truth::Yes,
            (None, Some(_)) | (Some(_), None) => Truth::No,
            (Some(held), Some(version)) => match self.owners.get(&version) {
                Some(owner) if *owner == held => Truth::Yes,
                Some(_) => Truth::No,
                None if self.versions.get(held as usize).copied().flatten().is_none() => Truth::Maybe,
                None => Truth::No,
            },
        }
    }

    /// The state after `operation` when it can take effect in `state`, or
    /// `None` when its answer contradicts `state`.
    fn step(&self, state: State, operation: &Operation) -> Option<State> {
        match (&operation.call, &operation.outcome) {
            (Call::Get { .. }, Outcome::Read(None)) => state.is_none().then_some(state),
            (Call::Get { .. }, Outcome::Read(Some((value, _)))) => {
                (state == Some(self.value_id(value))).then_some(state)
            }
            (Call::Set { value, .. }, Outcome::Written { .. } | Outcome::Unknown) => Some(Some(self.value_id(value))),
            (Call::Cas { expected, value, .. }, outcome) => {
                let holds = self.version_is(state, *expected);
                match outcome {
                    Outcome::Written { .. } => (holds != Truth::No).then_some(Some(self.value_id(value))),
                    Outcome::Conflict { current } => {
                        let refused = holds != Truth::Yes && self.version_is(state, *current) != Truth::No;
                        refused.then_some(state)
                    }
                    // Applied where it may have held; a refusal changes
                    // nothing, the same as placing it after everything.
                    Outcome::Unknown => Some(if holds == Truth::No {
                        state
                    } else {
                        Some(self.value_id(value))
                    }),
                    _ => None,
                }
            }
            (Call::Delete { .. }, Outcome::Deleted { existed }) => (*existed == state.is_some()).then_some(None),
            (Call::Delete { .. }, Outcome::Unknown) => Some(None),
            _ => None,
        }
    }
}

fn key_histories(history: &History) -> BTreeMap<&str, KeyHistory<'_>> {
    let mut keys: BTreeMap<&str, KeyHistory<'_>> = BTreeMap::new();
    for operation in &history.operations {
        let relevant = match (&operation.call, &operation.outcome) {
            (_, Outcome::Failed) => false,
            // A read without an answer says nothing.
            (Call::Get { .. }, Outcome::Unknown) => false,
            _ => true,
        };
        if !relevant {
            continue;
        }
        let key = keys.entry(operation.call.key()).or_insert_with(|| KeyHistory {
            operations: Vec::new(),
            value_ids: HashMap::new(),
            versions: Vec::new(),
            owners: HashMap::new(),
        });
        let observed = match (&operation.call, &operation.outcome) {
            (_, Outcome::Read(Some((value, version)))) => Some((value.as_str(), Some(*version))),
            (call, Outcome::Written { version }) => call.written_value().map(|value| (value, Some(*version))),
            (call, _) => call.written_value().map(|value| (value, None)),
        };
        if let Some((value, version)) = observed {
            let next_id = key.versions.len() as u32;
            let id = *key.value_ids.entry(value).or_insert(next_id);
            if id == next_id {
                key.versions.push(None);
            }
            if let Some(version) = version {
                key.versions[id as usize] = Some(version);
                key.owners.insert(version, id);
            }
        }
        key.operations.push(operation);
    }
    keys
}

/// Checks every key's history; the error names the key and the operations
/// no linearization could explain.
pub fn check(history: &History) -> Result<(), String> {
    for (key, key_history) in key_histories(history) {
        check_key(key, &key_history)?;
    }
    Ok(())
}

const NONE: usize = usize::MAX;

fn check_key(key: &str, history: &KeyHistory<'_>) -> Result<(), String> {
    let count = history.operations.len();
    // Events: 2i is operation i's invocation, 2i+1 its completion.
    let mut events: Vec<(u64, usize)> = Vec::with_capacity(count * 2);
    for (index, operation) in history.operations.iter().enumerate() {
        events.push((operation.invoked, 2 * index));
        events.push((operation.completed.unwrap_or(u64::MAX), 2 * index + 1));
    }
    events.sort();
    // A doubly linked list over the events in time order, with a head at
    // slot 2 * count.
    let head = 2 * count;
    let mut next = vec![NONE; 2 * count + 1];
    let mut previous = vec![NONE; 2 * count + 1];
    let mut last = head;
    for &(_, event) in &events {
        next[last] = event;
        previous[event] = last;
        last = event;
    }
    let unlink = |next: &mut Vec<usize>, previous: &mut Vec<usize>, event: usize| {
        let (before, after) = (previous[event], next[event]);
        next[before] = after;
        if after != NONE {
            previous[after] = before;
        }
    };
    let relink = |next: &mut Vec<usize>, previous: &mut Vec<usize>, event: usize| {
        let (before, after) = (previous[event], next[event]);
        next[before] = event;
        if after != NONE {
            previous[after] = event;
        }
    };

    let mut linearized = vec![0u64; count.div_ceil(64)];
    let mut seen: HashSet<(Vec<u64>, State)> = HashSet::new();
    let mut stack: Vec<(usize, State)> = Vec::new();
    let mut state: State = None;
    let mut deepest_blocked: Option<(usize, usize, State)> = None;
    let mut cursor = next[head];
    let mut steps = 0u64;
    while next[head] != NONE {
        steps += 1;
        if steps > SEARCH_STEPS_MAX {
            return Err(format!(
                "key {key:?}: undecided after {SEARCH_STEPS_MAX} search steps ({count} operations)"
            ));
        }
        let operation_index = cursor / 2;
        if cursor.is_multiple_of(2) {
            let operation = history.operations[operation_index];
            if let Some(after) = history.step(state, operation) {
                linearized[operation_index / 64] |= 1 << (operation_index % 64);
                if seen.insert((linearized.clone(), after)) {
                    stack.push((operation_index, state));
                    state = after;
                    unlink(&mut next, &mut previous, 2 * operation_index);
                    unlink(&mut next, &mut previous, 2 * operation_index + 1);
                    cursor = next[head];
                    continue;
                }
                linearized[operation_index / 64] &= !(1 << (operation_index % 64));
            }
            cursor = next[cursor];
        } else {
            // The completion of an operation not yet placed: everything
            // placed since must be undone.
            if stack.len() >= deepest_blocked.map_or(0, |(depth, _, _)| depth) {
                deepest_blocked = Some((stack.len(), operation_index, state));
            }
            let Some((undone, before)) = stack.pop() else {
                let (depth, blocked, state) = deepest_blocked.unwrap_or((0, operation_index, state));
                let blocked = history.operations[blocked];
                let held = state.and_then(|id| history.value_ids.iter().find(|(_, value_id)| **value_id == id));
                return Err(format!(
                    "key {key:?}: no linearization of {count} operations; the longest explained prefix \
                     ({depth} operations) leaves the key holding {:?}, and then nothing explains client {} \
                     {:?} answered {:?} (invoked at tick {}, completed at tick {:?})",
                    held.map(|(value, _)| *value),
                    blocked.client,
                    blocked.call,
                    blocked.outcome,
                    blocked.invoked,
                    blocked.completed
                ));
            };
            linearized[undone / 64] &= !(1 << (undone % 64));
            state = before;
            relink(&mut next, &mut previous, 2 * undone + 1);
            relink(&mut next, &mut previous, 2 * undone);
            cursor = next[2 * undone];
        }
        if cursor == NONE {
            // Every invocation's completion follows it in the list, so a
            // walk meets a completion before the end.
            return Err(format!("key {key:?}: the event list lost a completion"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Call, History, Operation, Outcome};

    fn operation(client: usize, call: Call, invoked: u64, completed: Option<u64>, outcome: Outcome) -> Operation {
        Operation {
            client,
            call,
            invoked,
            invoked_at: std::time::Duration::ZERO,
            completed,
            outcome,
        }
    }

    fn set(value: &str) -> Call {
        Call::Set {
            key: "k".to_owned(),
            value: value.to_owned(),
        }
    }

    fn get() -> Call {
        Call::Get { key: "k".to_owned() }
    }

    fn read(value: &str, version: u64) -> Outcome {
        Outcome::Read(Some((value.to_owned(), version)))
    }

    fn history(operations: Vec<Operation>) -> History {
        History {
            operations,
            ..History::default()
        }
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let history = history(vec![
            operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
            operation(1, get(), 3, Some(4), read("a", 5)),
        ]);
        assert_eq!(check(&history), Ok(()));
    }

    #[test]
    fn stale_read_after_completed_write_is_caught() {
        let history = history(vec![
            operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
            operation(0, set("b"), 3, Some(4), Outcome::Written { version: 6 }),
            operation(1, get(), 5, Some(6), read("a", 5)),
        ]);
        assert!(check(&history).is_err());
    }

    #[test]
    fn concurrent_write_may_be_seen_or_not() {
        for seen in ["a", "b"] {
            let version = if seen == "a" { 5 } else { 6 };
            let history = history(vec![
                operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
                operation(0, set("b"), 3, Some(6), Outcome::Written { version: 6 }),
                operation(1, get(), 4, Some(5), read(seen, version)),
            ]);
            assert_eq!(check(&history), Ok(()), "reading {seen}");
        }
    }

    #[test]
    fn unknown_write_may_apply_late_or_never() {
        let late = history(vec![
            operation(0, set("a"), 1, None, Outcome::Unknown),
            operation(1, get(), 2, Some(3), Outcome::Read(None)),
            operation(1, get(), 4, Some(5), read("a", 7)),
        ]);
        assert_eq!(check(&late), Ok(()));
        let never = history(vec![
            operation(0, set("a"), 1, None, Outcome::Unknown),
            operation(1, get(), 2, Some(3), Outcome::Read(None)),
        ]);
        assert_eq!(check(&never), Ok(()));
        // Once seen, it cannot disappear again.
        let flicker = history(vec![
            operation(0, set("a"), 1, None, Outcome::Unknown),
            operation(1, get(), 2, Some(3), read("a", 7)),
            operation(1, get(), 4, Some(5), Outcome::Read(None)),
        ]);
        assert!(check(&flicker).is_err());
    }

    #[test]
    fn compare_and_set_follows_versions() {
        let cas = |expected: Option<u64>, value: &str| Call::Cas {
            key: "k".to_owned(),
            expected,
            value: value.to_owned(),
        };
        let good = history(vec![
            operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
            operation(1, cas(Some(5), "b"), 3, Some(4), Outcome::Written { version: 8 }),
            operation(2, cas(Some(5), "c"), 5, Some(6), Outcome::Conflict { current: Some(8) }),
            operation(2, cas(None, "d"), 7, Some(8), Outcome::Conflict { current: Some(8) }),
        ]);
        assert_eq!(check(&good), Ok(()));
        // Two compare-and-sets from the same version cannot both succeed.
        let lost_update = history(vec![
            operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
            operation(1, cas(Some(5), "b"), 3, Some(6), Outcome::Written { version: 8 }),
            operation(2, cas(Some(5), "c"), 4, Some(7), Outcome::Written { version: 9 }),
        ]);
        assert!(check(&lost_update).is_err());
    }

    #[test]
    fn a_version_learned_from_a_conflict_may_belong_to_a_write_whose_answer_was_lost() {
        let cas = |expected: Option<u64>, value: &str| Call::Cas {
            key: "k".to_owned(),
            expected,
            value: value.to_owned(),
        };
        // "b" applied at version 9 but its writer never heard; another
        // client learned version 9 from a conflict and built on it.
        let history = history(vec![
            operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
            operation(0, set("b"), 3, None, Outcome::Unknown),
            operation(1, cas(Some(5), "c"), 4, Some(5), Outcome::Conflict { current: Some(9) }),
            operation(1, cas(Some(9), "d"), 6, Some(7), Outcome::Written { version: 12 }),
            operation(2, get(), 8, Some(9), read("d", 12)),
        ]);
        assert_eq!(check(&history), Ok(()));
        // A conflict naming the version of the value the key holds is a lie.
        let history_with_lie = super::tests::history(vec![
            operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
            operation(1, cas(Some(4), "c"), 3, Some(4), Outcome::Conflict { current: Some(4) }),
        ]);
        assert!(check(&history_with_lie).is_err());
    }

    #[test]
    fn delete_reports_whether_a_value_existed() {
        let delete = Call::Delete { key: "k".to_owned() };
        let good = history(vec![
            operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
            operation(1, delete.clone(), 3, Some(4), Outcome::Deleted { existed: true }),
            operation(1, delete.clone(), 5, Some(6), Outcome::Deleted { existed: false }),
        ]);
        assert_eq!(check(&good), Ok(()));
        let twice = history(vec![
            operation(0, set("a"), 1, Some(2), Outcome::Written { version: 5 }),
            operation(1, delete.clone(), 3, Some(4), Outcome::Deleted { existed: true }),
            operation(2, delete, 5, Some(6), Outcome::Deleted { existed: true }),
        ]);
        assert!(check(&twice).is_err());
    }
}
