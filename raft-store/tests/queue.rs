//! The queue's apply, step by step in log time: due order, claims that hide
//! a message, retries per the schedule, the dead-letter write, requeue of
//! overdue claims, ids unique within one entry, and two replicas that apply
//! the same queue log holding the same state.

use std::sync::Arc;

use lode_raft_store::command::{
    Command, CommandV1, Encoding, EnqueueOptions, FinishedAs, MessageId, Operation, OperationResult, Proposal,
};
use lode_raft_store::{Engine, MemoryEngine, RocksEngine, StateMachineStore, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};

type TestResult = Result<(), Box<dyn std::error::Error>>;

struct Queue<E: Engine = MemoryEngine> {
    state: StateMachineStore<E>,
    index: u64,
}

fn enqueue(payload: &str, deliver_at_micros: u64, schedule_ms: Vec<u32>, keys: Vec<&str>) -> Operation {
    Operation::Enqueue {
        payload: payload.as_bytes().to_vec(),
        encoding: Encoding::Bytes,
        options: EnqueueOptions {
            deliver_at_micros,
            backoff_schedule_ms: schedule_ms,
            keys_if_undelivered: keys.into_iter().map(|key| key.as_bytes().to_vec()).collect(),
        },
    }
}

impl<E: Engine> Queue<E> {
    fn new(engine: Arc<E>) -> Result<Self, Box<dyn std::error::Error>> {
        Ok(Self {
            state: StateMachineStore::open(engine)?,
            index: 0,
        })
    }

    /// Applies one command at `time_micros` and returns its results.
    async fn apply(
        &mut self,
        time_micros: u64,
        operations: Vec<Operation>,
    ) -> Result<Vec<OperationResult>, Box<dyn std::error::Error>> {
        self.index += 1;
        let entry = Entry::<TypeConfig> {
            log_id: log_id(1, 1, self.index),
            payload: EntryPayload::Normal(Proposal::single(Command::V1(CommandV1 {
                op_id: None,
                time_micros,
                operations,
            }))),
        };
        let mut outcomes = self.state.apply([entry]).await?;
        let outcome = outcomes.remove(0).outcomes.remove(0);
        Ok(outcome.result.map_err(|rejection| format!("refused: {rejection}"))?)
    }

    /// Applies one entry of several commands at `time_micros`, as the
    /// proposer groups them; answers each command's results or refusal.
    async fn apply_grouped(
        &mut self,
        time_micros: u64,
        commands: Vec<Vec<Operation>>,
    ) -> Result<Vec<Result<Vec<OperationResult>, String>>, Box<dyn std::error::Error>> {
        self.index += 1;
        let commands = commands
            .into_iter()
            .map(|operations| {
                Command::V1(CommandV1 {
                    op_id: None,
                    time_micros,
                    operations,
                })
            })
            .collect();
        let entry = Entry::<TypeConfig> {
            log_id: log_id(1, 1, self.index),
            payload: EntryPayload::Normal(Proposal::new(commands)),
        };
        let mut outcomes = self.state.apply([entry]).await?;
        Ok(outcomes
            .remove(0)
            .outcomes
            .into_iter()
            .map(|outcome| outcome.result.map_err(|rejection| rejection.to_string()))
            .collect())
    }

    async fn claim(
        &mut self,
        time_micros: u64,
    ) -> Result<Option<(MessageId, Vec<u8>, u32)>, Box<dyn std::error::Error>> {
        match self
            .apply(time_micros, vec![Operation::ClaimMessage { visibility_ms: 1_000 }])
            .await?
            .remove(0)
        {
            OperationResult::Claimed { delivery } => {
                Ok(delivery.map(|delivery| (delivery.id, delivery.payload, delivery.attempt)))
            }
            other => Err(format!("claim answered {other:?}").into()),
        }
    }

    async fn finish(
        &mut self,
        time_micros: u64,
        (id, attempt): (MessageId, u32),
        delivered: bool,
    ) -> Result<FinishedAs, Box<dyn std::error::Error>> {
        let operation = Operation::FinishMessage { id, attempt, delivered };
        match self.apply(time_micros, vec![operation]).await?.remove(0) {
            OperationResult::Finished { finished } => Ok(finished),
            other => Err(format!("finish answered {other:?}").into()),
        }
    }
}

#[tokio::test]
async fn messages_come_due_in_delivery_order_and_a_claim_hides_them() -> TestResult {
    let mut queue = Queue::new(Arc::new(MemoryEngine::new()))?;
    let results = queue
        .apply(
            1_000,
            vec![
                enqueue("late", 50_000, vec![], vec![]),
                enqueue("early", 20_000, vec![], vec![]),
                enqueue("now", 0, vec![], vec![]),
            ],
        )
        .await?;
    let ids: Vec<MessageId> = results
        .into_iter()
        .map(|result| match result {
            OperationResult::Enqueued { id } => Ok(id),
            other => Err(format!("{other:?}")),
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(ids[0].index, ids[1].index);
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2],
        "ids in one entry are unique: {ids:?}"
    );

    let (id, payload, attempt) = queue.claim(1_000).await?.ok_or("a message due now")?;
    assert_eq!((payload.as_slice(), attempt, id), (&b"now"[..], 1, ids[2]));
    let delivery = (id, attempt);
    assert_eq!(
        queue.claim(1_000).await?,
        None,
        "the claimed message is hidden; the others are not due"
    );
    let (_, payload, _) = queue.claim(20_000).await?.ok_or("early is due")?;
    assert_eq!(payload, b"early");
    assert_eq!(queue.claim(49_999).await?, None);
    let (_, payload, _) = queue.claim(50_000).await?.ok_or("late is due")?;
    assert_eq!(payload, b"late");
    assert_eq!(queue.finish(60_000, delivery, true).await?, FinishedAs::Delivered);
    assert_eq!(queue.finish(60_000, delivery, true).await?, FinishedAs::NotClaimed);
    Ok(())
}

/// What a claim command answered: the payload and delivery it took.
fn claimed(result: &Result<Vec<OperationResult>, String>) -> Result<Option<(String, MessageId, u32)>, String> {
    match result.as_deref() {
        Ok([OperationResult::Claimed { delivery }]) => Ok(delivery.as_ref().map(|delivery| {
            (
                String::from_utf8_lossy(&delivery.payload).into_owned(),
                delivery.id,
                delivery.attempt,
            )
        })),
        other => Err(format!("a claim answered {other:?}")),
    }
}

fn finished(result: &Result<Vec<OperationResult>, String>) -> Result<FinishedAs, String> {
    match result.as_deref() {
        Ok([OperationResult::Finished { finished }]) => Ok(finished.clone()),
        other => Err(format!("a finish answered {other:?}")),
    }
}

const CLAIM: Operation = Operation::ClaimMessage { visibility_ms: 1_000 };

#[tokio::test]
async fn claims_and_finishes_grouped_in_one_entry_take_distinct_messages() -> TestResult {
    let mut queue = Queue::new(Arc::new(MemoryEngine::new()))?;
    let messages = ["a", "b", "c"].map(|payload| enqueue(payload, 0, vec![], vec![]));
    queue.apply(1_000, messages.to_vec()).await?;
    // Four claims with an enqueue among them: the first three take the
    // three messages in order; the last passes over the message enqueued
    // earlier in its own entry (taking it would write one key twice in
    // one entry) and finds none. No command is refused.
    let results = queue
        .apply_grouped(
            2_000,
            vec![
                vec![CLAIM],
                vec![CLAIM],
                vec![enqueue("d", 0, vec![], vec![])],
                vec![CLAIM],
                vec![CLAIM],
            ],
        )
        .await?;
    let taken: Vec<Option<(String, MessageId, u32)>> = [0, 1, 3, 4]
        .into_iter()
        .map(|command| claimed(&results[command]))
        .collect::<Result<_, _>>()?;
    let payloads: Vec<Option<&str>> = taken
        .iter()
        .map(|taken| taken.as_ref().map(|(payload, _, _)| payload.as_str()))
        .collect();
    assert_eq!(payloads, vec![Some("a"), Some("b"), Some("c"), None]);
    let [Some(a), Some(b), Some(c), None] = taken.as_slice() else {
        return Err("three deliveries".into());
    };
    let delivery = |taken: &(String, MessageId, u32)| Operation::FinishMessage {
        id: taken.1,
        attempt: taken.2,
        delivered: true,
    };
    // Finishes grouped with claims: a second finish of one message finds
    // it finished; the claim takes the message passed over before.
    let results = queue
        .apply_grouped(
            3_000,
            vec![vec![delivery(a)], vec![delivery(a)], vec![CLAIM], vec![delivery(b)]],
        )
        .await?;
    assert_eq!(finished(&results[0])?, FinishedAs::Delivered);
    assert_eq!(finished(&results[1])?, FinishedAs::NotClaimed);
    let (payload, d_id, d_attempt) = claimed(&results[2])?.ok_or("d is due")?;
    assert_eq!(payload, "d");
    assert_eq!(finished(&results[3])?, FinishedAs::Delivered);
    // A finish naming the delivery an earlier claim of its own entry makes
    // is not that claim's to end: no client can know of it yet.
    queue
        .apply_grouped(
            4_000,
            vec![vec![delivery(c)], vec![delivery(&(payload, d_id, d_attempt))]],
        )
        .await?;
    let enqueued = queue.apply(5_000, vec![enqueue("e", 0, vec![], vec![])]).await?;
    let [OperationResult::Enqueued { id: e_id }] = enqueued.as_slice() else {
        return Err(format!("an enqueue answered {enqueued:?}").into());
    };
    let guessed = Operation::FinishMessage {
        id: *e_id,
        attempt: 1,
        delivered: true,
    };
    let results = queue.apply_grouped(6_000, vec![vec![CLAIM], vec![guessed]]).await?;
    let (payload, _, _) = claimed(&results[0])?.ok_or("e is due")?;
    assert_eq!(payload, "e");
    assert_eq!(finished(&results[1])?, FinishedAs::NotClaimed);
    assert_eq!(queue.state.reader().next_queue_due_micros()?, None);
    Ok(())
}

#[tokio::test]
async fn a_message_written_below_where_claims_last_searched_is_still_claimed() -> TestResult {
    let mut queue = Queue::new(Arc::new(MemoryEngine::new()))?;
    // A claim that finds nothing leaves the search's floor past every
    // message due by its time (5,000 µs).
    assert_eq!(queue.claim(5_000).await?, None);
    // An enqueue with an earlier command time is applied at the log's
    // clock (5,000 µs), so its key sorts below that floor; a retry of a
    // failed delivery due at once does the same.
    queue
        .apply(4_000, vec![enqueue("late clock", 0, vec![0], vec![])])
        .await?;
    let (id, payload, attempt) = queue.claim(4_000).await?.ok_or("the message is due")?;
    assert_eq!((payload.as_slice(), attempt), (&b"late clock"[..], 1));
    assert_eq!(queue.claim(5_000).await?, None);
    assert_eq!(
        queue.finish(5_000, (id, attempt), false).await?,
        FinishedAs::Retrying {
            deliver_at_micros: 5_000
        }
    );
    let (_, payload, attempt) = queue.claim(5_000).await?.ok_or("the retry is due")?;
    assert_eq!((payload.as_slice(), attempt), (&b"late clock"[..], 2));
    Ok(())
}

#[tokio::test]
async fn a_refused_command_takes_no_message_and_moves_no_search() -> TestResult {
    let mut queue = Queue::new(Arc::new(MemoryEngine::new()))?;
    let messages = ["first", "second", "third"].map(|payload| enqueue(payload, 0, vec![], vec![]));
    queue.apply(1_000, messages.to_vec()).await?;
    // Two claims, then an operation that is refused: the whole command is.
    let lost_lease = Operation::RenewLease {
        namespace: "locks".to_owned(),
        key: b"held by nobody".to_vec(),
        holder: "h".to_owned(),
        token: 1,
        ttl_micros: 1_000_000,
    };
    let results = queue.apply_grouped(2_000, vec![vec![CLAIM, CLAIM, lost_lease]]).await?;
    assert!(results[0].is_err(), "{results:?}");
    let (payload, _, attempt) = claimed(&queue.apply_grouped(3_000, vec![vec![CLAIM]]).await?[0])?.ok_or("due")?;
    assert_eq!((payload.as_str(), attempt), ("first", 1));
    Ok(())
}

/// Messages taken and finished in the run below.
const MESSAGES_TAKEN: usize = 2_000;

/// Removed keys RocksDB steps over while `work` runs on this thread.
async fn removed_keys_stepped_over<T>(work: impl std::future::Future<Output = T>) -> (T, u64) {
    use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};
    set_perf_stats(PerfStatsLevel::EnableCount);
    let mut context = PerfContext::default();
    context.reset();
    let result = work.await;
    let stepped_over = context.metric(PerfMetric::InternalDeleteSkippedCount);
    set_perf_stats(PerfStatsLevel::Disable);
    (result, stepped_over)
}

/// On RocksDB a taken message leaves its removed keys behind until
/// compaction. Neither the next claim nor a listener's question of when the
/// next message is due steps over those of the messages taken before: each
/// would cost more than the one before it (`docs/performance.md`,
/// twenty-third round).
#[tokio::test(flavor = "current_thread")]
async fn claims_and_due_times_step_over_no_message_taken_before() -> TestResult {
    let directory = tempfile::tempdir()?;
    let mut queue = Queue::new(Arc::new(RocksEngine::open(directory.path())?))?;
    let enqueues = (0..=MESSAGES_TAKEN)
        .map(|_| vec![enqueue("job", 0, vec![], vec![])])
        .collect();
    queue.apply_grouped(1_000, enqueues).await?;
    for _ in 0..MESSAGES_TAKEN / 100 {
        let results = queue.apply_grouped(2_000, vec![vec![CLAIM]; 100]).await?;
        let finishes = results
            .iter()
            .map(|result| {
                let (_, id, attempt) = claimed(result)?.ok_or("a message is due")?;
                Ok(vec![Operation::FinishMessage {
                    id,
                    attempt,
                    delivered: true,
                }])
            })
            .collect::<Result<Vec<_>, String>>()?;
        queue.apply_grouped(3_000, finishes).await?;
    }
    let reader = queue.state.reader();
    let (due, stepped_over) = removed_keys_stepped_over(async { reader.next_queue_due_micros() }).await;
    assert_eq!(due?, Some(1_000), "the last message is due");
    assert!(
        stepped_over <= 1,
        "asking when the next message is due stepped over {stepped_over} removed keys"
    );
    let (last, stepped_over) = removed_keys_stepped_over(queue.claim(4_000)).await;
    assert!(last?.is_some(), "the last message is claimed");
    assert!(stepped_over <= 1, "the claim stepped over {stepped_over} removed keys");
    Ok(())
}

#[tokio::test]
async fn failures_retry_per_the_schedule_then_dead_letter_atomically() -> TestResult {
    let mut queue = Queue::new(Arc::new(MemoryEngine::new()))?;
    queue
        .apply(1_000, vec![enqueue("job", 0, vec![10, 100], vec!["dead-a", "dead-b"])])
        .await?;
    let (id, _, attempt) = queue.claim(1_000).await?.ok_or("due")?;
    assert_eq!(attempt, 1);
    assert_eq!(
        queue.finish(2_000, (id, 1), false).await?,
        FinishedAs::Retrying {
            deliver_at_micros: 12_000
        }
    );
    assert_eq!(queue.claim(11_999).await?, None);
    let (_, _, attempt) = queue.claim(12_000).await?.ok_or("retry due")?;
    assert_eq!(attempt, 2);
    assert_eq!(
        queue.finish(13_000, (id, 2), false).await?,
        FinishedAs::Retrying {
            deliver_at_micros: 113_000
        }
    );
    let (_, _, attempt) = queue.claim(113_000).await?.ok_or("second retry due")?;
    assert_eq!(attempt, 3);
    let reader = queue.state.reader();
    assert!(reader.get_entry("deno", b"dead-a", 113_000)?.is_none());
    assert_eq!(queue.finish(114_000, (id, 3), false).await?, FinishedAs::DeadLettered);
    let first = reader.get_entry("deno", b"dead-a", 114_000)?.ok_or("dead letter a")?;
    let second = reader.get_entry("deno", b"dead-b", 114_000)?.ok_or("dead letter b")?;
    assert_eq!((first.value.as_slice(), first.version), (&b"job"[..], second.version));
    assert_eq!(queue.claim(10_000_000).await?, None, "a dead-lettered message is gone");
    Ok(())
}

#[tokio::test]
async fn an_overdue_claim_counts_as_a_failed_delivery() -> TestResult {
    let mut queue = Queue::new(Arc::new(MemoryEngine::new()))?;
    queue.apply(1_000, vec![enqueue("job", 0, vec![5], vec![])]).await?;
    let (id, _, _) = queue.claim(1_000).await?.ok_or("due")?;
    let reader = queue.state.reader();
    // Visibility is 1,000 ms: overdue from 1,001,000.
    assert!(!reader.has_overdue_deliveries(1_000_999)?);
    assert!(reader.has_overdue_deliveries(1_001_000)?);
    let requeued = queue
        .apply(1_001_000, vec![Operation::RequeueOverdue { messages_max: 10 }])
        .await?;
    assert_eq!(requeued, vec![OperationResult::Requeued { requeued: 1 }]);
    assert!(!reader.has_overdue_deliveries(1_001_000)?);
    assert_eq!(reader.next_queue_due_micros()?, Some(1_006_000));
    let (again, _, attempt) = queue.claim(1_006_000).await?.ok_or("redelivered")?;
    assert_eq!((again, attempt), (id, 2));
    // The late finish of the first delivery finds nothing to finish; the
    // second delivery's does.
    assert_eq!(queue.finish(1_006_000, (id, 1), true).await?, FinishedAs::NotClaimed);
    assert_eq!(queue.finish(1_006_000, (id, 2), true).await?, FinishedAs::Delivered);
    Ok(())
}

#[tokio::test]
async fn replicas_applying_the_same_queue_log_agree() -> TestResult {
    let engines = [Arc::new(MemoryEngine::new()), Arc::new(MemoryEngine::new())];
    let mut digests = Vec::new();
    for engine in &engines {
        let mut queue = Queue::new(engine.clone())?;
        queue
            .apply(
                1_000,
                vec![enqueue("a", 0, vec![1], vec!["x"]), enqueue("b", 3_000, vec![], vec![])],
            )
            .await?;
        let (id, _, attempt) = queue.claim(1_000).await?.ok_or("due")?;
        queue.finish(1_500, (id, attempt), false).await?;
        queue.claim(5_000).await?;
        queue
            .apply(2_000_000, vec![Operation::RequeueOverdue { messages_max: 10 }])
            .await?;
        digests.push(queue.state.reader().state_digest()?);
    }
    assert_eq!(digests[0], digests[1]);
    Ok(())
}
