//! Dedup records through the state machine: a record never holds a whole
//! value, a repeat answers exactly what the first attempt answered (values
//! found again live, in the change log or in the claimed message), and a
//! repeat whose values are gone answers `AnswerCompacted` and applies
//! nothing.

use std::sync::Arc;

use lode_raft_store::command::{
    Command, CommandV1, Encoding, EnqueueOptions, OpId, Operation, OperationResult, Proposal, Rejection, Retention,
};
use lode_raft_store::engine::{Engine, Space};
use lode_raft_store::{CommandOutcome, MemoryEngine, StateMachineStore, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Values this large would dominate a record that kept them.
const VALUE_BYTES: usize = 20_000;

/// Records hold digests and places, never these values.
const RECORD_BYTES_MAX: usize = 1_024;

struct Store {
    engine: Arc<MemoryEngine>,
    state: StateMachineStore<MemoryEngine>,
    index: u64,
    retention: Retention,
}

impl Store {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        let engine = Arc::new(MemoryEngine::new());
        Ok(Self {
            state: StateMachineStore::open(engine.clone())?,
            engine,
            index: 0,
            retention: Retention::default(),
        })
    }

    /// Applies one command in an entry of its own at the next index.
    async fn apply(
        &mut self,
        op_id: Option<u128>,
        operations: Vec<Operation>,
    ) -> Result<CommandOutcome, Box<dyn std::error::Error>> {
        self.index += 1;
        let mut proposal = Proposal::single(Command::V1(CommandV1 {
            op_id: op_id.map(OpId),
            time_micros: 1_000 * self.index,
            operations,
        }));
        proposal.retention = self.retention;
        let entry = Entry::<TypeConfig> {
            log_id: log_id(1, 1, self.index),
            payload: EntryPayload::Normal(proposal),
        };
        Ok(self.state.apply([entry]).await?.remove(0).outcomes.remove(0))
    }

    fn largest_record_bytes(&self) -> Result<usize, Box<dyn std::error::Error>> {
        let records = self.engine.scan(Space::Dedup, &[], None, usize::MAX)?;
        assert!(!records.is_empty(), "some dedup records were written");
        Ok(records.iter().map(|(_, value)| value.len()).max().unwrap_or(0))
    }

    fn live_value(&self, key: &str) -> Result<Option<Vec<u8>>, Box<dyn std::error::Error>> {
        Ok(self
            .state
            .reader()
            .get_entry("state:s", key.as_bytes(), 0)?
            .map(|entry| entry.value))
    }
}

fn big_json(fill: char) -> serde_json::Value {
    serde_json::Value::String(std::iter::repeat_n(fill, VALUE_BYTES).collect())
}

fn update(key: &str, ops: serde_json::Value) -> Operation {
    Operation::StateUpdate {
        namespace: "state:s".to_owned(),
        key: key.as_bytes().to_vec(),
        ops_json: serde_json::to_vec(&ops).unwrap_or_default(),
    }
}

fn set_json(key: &str, value: serde_json::Value) -> Operation {
    update(key, serde_json::json!([{ "type": "set", "value": value }]))
}

fn take(key: &str) -> Operation {
    Operation::Take {
        namespace: "state:s".to_owned(),
        key: key.as_bytes().to_vec(),
    }
}

/// Asserts that `repeat` answers what `first` answered, flagged as a repeat.
fn assert_repeats(first: &CommandOutcome, repeat: &CommandOutcome) {
    assert!(repeat.deduplicated, "the repeat is answered from the record");
    assert_eq!(
        (repeat.index, repeat.term, repeat.time_micros),
        (first.index, first.term, first.time_micros)
    );
    assert_eq!(repeat.result, first.result, "the repeat answers the same values");
}

#[tokio::test]
async fn a_repeat_answers_the_first_values_from_a_record_that_holds_none() -> TestResult {
    let mut store = Store::new()?;
    let created = store.apply(Some(1), vec![set_json("k", big_json('a'))]).await?;
    let updated = store.apply(Some(2), vec![set_json("k", big_json('b'))]).await?;
    // Every op fails (a string cannot be incremented): the value stays.
    let failed = store
        .apply(
            Some(3),
            vec![update("k", serde_json::json!([{ "type": "increment", "by": 1 }]))],
        )
        .await?;
    assert!(
        matches!(&failed.result, Ok(results) if matches!(results[0], OperationResult::StateUpdated { version: None, .. })),
        "{:?}",
        failed.result
    );
    assert!(
        store.largest_record_bytes()? < RECORD_BYTES_MAX,
        "a record of a {VALUE_BYTES}-byte value is {} bytes",
        store.largest_record_bytes()?
    );

    // While the value is live.
    assert_repeats(
        &updated,
        &store.apply(Some(2), vec![set_json("k", big_json('c'))]).await?,
    );
    assert_repeats(&failed, &store.apply(Some(3), vec![take("k")]).await?);
    // After it was overwritten: from the change log.
    let taken = store.apply(Some(4), vec![take("k")]).await?;
    store
        .apply(None, vec![set_json("k", serde_json::json!("small"))])
        .await?;
    assert_repeats(&created, &store.apply(Some(1), vec![take("k")]).await?);
    assert_repeats(&updated, &store.apply(Some(2), vec![take("k")]).await?);
    assert_repeats(&failed, &store.apply(Some(3), vec![take("k")]).await?);
    assert_repeats(&taken, &store.apply(Some(4), vec![take("k")]).await?);
    assert!(
        matches!(&taken.result, Ok(results) if matches!(&results[0], OperationResult::Taken { old_value: Some(value), .. } if value.len() > VALUE_BYTES)),
        "the take answered the big value"
    );
    assert_eq!(
        store.live_value("k")?,
        Some(b"\"small\"".to_vec()),
        "no repeat wrote anything"
    );
    Ok(())
}

#[tokio::test]
async fn a_repeat_whose_values_left_the_change_log_answers_compacted_and_applies_nothing() -> TestResult {
    let mut store = Store::new()?;
    store.retention.change_events_max = 2;
    let first = store.apply(Some(1), vec![set_json("k", big_json('a'))]).await?;
    for round in 0..4 {
        store.apply(None, vec![set_json("k", serde_json::json!(round))]).await?;
    }
    let repeat = store.apply(Some(1), vec![set_json("k", big_json('z'))]).await?;
    assert!(repeat.deduplicated);
    match repeat.result {
        Err(Rejection::AnswerCompacted { index, trimmed_through }) => {
            assert_eq!(index, first.index);
            assert!(trimmed_through.0 >= first.index, "{trimmed_through:?}");
        }
        other => panic!("expected AnswerCompacted, got {other:?}"),
    }
    assert_eq!(store.live_value("k")?, Some(b"3".to_vec()), "the repeat wrote nothing");
    // A small value needs no change log: it is kept in the record.
    let small = store
        .apply(Some(2), vec![set_json("small", serde_json::json!(7))])
        .await?;
    for round in 0..4 {
        store
            .apply(None, vec![set_json("small", serde_json::json!(round))])
            .await?;
    }
    assert_repeats(&small, &store.apply(Some(2), vec![take("small")]).await?);
    Ok(())
}

#[tokio::test]
async fn a_repeated_claim_answers_the_same_delivery_while_the_message_is_claimed() -> TestResult {
    let mut store = Store::new()?;
    let payload = vec![7u8; VALUE_BYTES];
    let enqueue = Operation::Enqueue {
        payload: payload.clone(),
        encoding: Encoding::Bytes,
        options: EnqueueOptions {
            deliver_at_micros: 0,
            backoff_schedule_ms: vec![1_000],
            keys_if_undelivered: Vec::new(),
        },
    };
    store.apply(None, vec![enqueue]).await?;
    let claim = Operation::ClaimMessage { visibility_ms: 60_000 };
    let claimed = store.apply(Some(9), vec![claim.clone()]).await?;
    let delivery = match &claimed.result {
        Ok(results) => match &results[0] {
            OperationResult::Claimed {
                delivery: Some(delivery),
            } => delivery.clone(),
            other => panic!("expected a delivery, got {other:?}"),
        },
        Err(rejection) => panic!("claim refused: {rejection}"),
    };
    assert_eq!(delivery.payload, payload);
    assert!(store.largest_record_bytes()? < RECORD_BYTES_MAX);
    assert_repeats(&claimed, &store.apply(Some(9), vec![claim.clone()]).await?);

    let finish = Operation::FinishMessage {
        id: delivery.id,
        attempt: delivery.attempt,
        delivered: true,
    };
    store.apply(None, vec![finish]).await?;
    let repeat = store.apply(Some(9), vec![claim]).await?;
    assert!(repeat.deduplicated);
    assert!(
        matches!(repeat.result, Err(Rejection::AnswerCompacted { index, .. }) if index == claimed.index),
        "{:?}",
        repeat.result
    );
    Ok(())
}
