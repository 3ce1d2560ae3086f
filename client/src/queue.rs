//! The queue: messages enqueued with a delay, a backoff schedule and keys
//! that receive the payload if every delivery fails, delivered at least once
//! to listeners.
//!
//! Every step (enqueue, claim of one delivery, finish) is a replicated
//! write, so a message survives leader changes and restarts. A listener that
//! stops mid-delivery (crash, cancellation) leaves its claim to run out; the
//! leader then counts that delivery as failed and the message comes again
//! per its schedule. Handlers must therefore be idempotent.

use std::future::Future;
use std::time::Duration;

use crate::error::{unexpected, LodeError};
use crate::protocol::{Consistency, Encoding, Operation, OperationResult, Query, QueryResult, ReadRequest};
use crate::sdk::Client;

pub use lode_types::{EnqueueOptions, FinishedAs, MessageId, QueueDelivery};

/// How long a claimed delivery stays invisible to other listeners unless
/// the listener says otherwise: the time a handler has before its delivery
/// counts as failed.
pub const VISIBILITY_DEFAULT: Duration = Duration::from_secs(30);
/// How long one wait for a due message lasts on the server, in
/// milliseconds, when the client's attempts allow it
/// (`Client::server_wait_ms`).
const NEXT_DELIVERY_WAIT_MS: u64 = 5_000;

/// A message to enqueue.
#[derive(Clone, Debug)]
pub struct Message {
    pub payload: Vec<u8>,
    pub encoding: Encoding,
    /// Deliver no sooner than this from now.
    pub delay: Duration,
    /// Delays before each redelivery after a failed delivery; empty means
    /// the default (100 ms, 1 s, 5 s, 30 s, 60 s).
    pub backoff_schedule: Vec<Duration>,
    /// Deno KV keys (tuple-encoded, in the `deno` namespace) that receive
    /// the payload when the last delivery fails.
    pub keys_if_undelivered: Vec<Vec<u8>>,
}

impl Message {
    /// A message delivered at once, with the default schedule.
    pub fn new(payload: impl Into<Vec<u8>>, encoding: Encoding) -> Self {
        Self {
            payload: payload.into(),
            encoding,
            delay: Duration::ZERO,
            backoff_schedule: Vec::new(),
            keys_if_undelivered: Vec::new(),
        }
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub fn backoff_schedule(mut self, schedule: Vec<Duration>) -> Self {
        self.backoff_schedule = schedule;
        self
    }

    pub fn keys_if_undelivered(mut self, keys: Vec<Vec<u8>>) -> Self {
        self.keys_if_undelivered = keys;
        self
    }

    /// The operation that enqueues this message, for an atomic write of
    /// its own or together with other operations.
    pub fn operation(&self) -> Result<Operation, LodeError> {
        use lode_types::limits::QUEUE_DELAY_MS_MAX;
        let delay_ms = u64::try_from(self.delay.as_millis()).unwrap_or(u64::MAX);
        if delay_ms > QUEUE_DELAY_MS_MAX {
            return Err(LodeError::Invalid(lode_types::limits::over_limit(
                "delay",
                format!("{delay_ms} ms"),
                "queue_delay_ms_max",
                QUEUE_DELAY_MS_MAX,
            )));
        }
        let backoff_schedule_ms = self
            .backoff_schedule
            .iter()
            .map(|delay| u32::try_from(delay.as_millis()).unwrap_or(u32::MAX))
            .collect();
        let options = EnqueueOptions {
            deliver_at_micros: crate::facade::now_micros().saturating_add(delay_ms * 1000),
            backoff_schedule_ms,
            keys_if_undelivered: self.keys_if_undelivered.clone(),
        };
        options.validate().map_err(LodeError::Invalid)?;
        Ok(Operation::Enqueue {
            payload: self.payload.clone(),
            encoding: self.encoding.clone(),
            options,
        })
    }
}

/// A handle on the cluster's queue.
#[derive(Clone, Debug)]
pub struct Queue {
    client: Client,
    visibility: Duration,
}

impl Queue {
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            visibility: VISIBILITY_DEFAULT,
        }
    }

    /// How long a handler may take before its delivery counts as failed.
    pub fn with_visibility(mut self, visibility: Duration) -> Result<Self, LodeError> {
        let limit = Duration::from_millis(u64::from(lode_types::limits::QUEUE_VISIBILITY_MS_MAX));
        if visibility < Duration::from_millis(1) || visibility > limit {
            return Err(LodeError::Invalid(format!(
                "visibility must be 1 ms to queue_visibility_ms_max = {} ms",
                limit.as_millis()
            )));
        }
        self.visibility = visibility;
        Ok(self)
    }

    async fn write_one(&self, operation: Operation) -> Result<OperationResult, LodeError> {
        self.client.write_one(operation).await
    }

    /// Enqueues one message; its id is the log index that stored it and its
    /// place in that entry.
    pub async fn enqueue(&self, message: &Message) -> Result<MessageId, LodeError> {
        match self.write_one(message.operation()?).await? {
            OperationResult::Enqueued { id } => Ok(id),
            other => Err(unexpected("a queue operation", &other)),
        }
    }

    /// Takes the next due message for one delivery, if any is due.
    pub async fn claim(&self) -> Result<Option<QueueDelivery>, LodeError> {
        let visibility_ms = u32::try_from(self.visibility.as_millis()).unwrap_or(u32::MAX);
        match self.write_one(Operation::ClaimMessage { visibility_ms }).await? {
            OperationResult::Claimed { delivery } => Ok(delivery),
            other => Err(unexpected("a queue operation", &other)),
        }
    }

    /// Ends a delivery: `delivered` drops the message; otherwise it is
    /// retried per its schedule or, with the schedule spent, written to its
    /// undelivered keys. A delivery whose claim already ran out is
    /// `NotClaimed`: the message was, or will be, delivered again.
    pub async fn finish(&self, delivery: &QueueDelivery, delivered: bool) -> Result<FinishedAs, LodeError> {
        let operation = Operation::FinishMessage {
            id: delivery.id,
            attempt: delivery.attempt,
            delivered,
        };
        match self.write_one(operation).await? {
            OperationResult::Finished { finished } => Ok(finished),
            other => Err(unexpected("a queue operation", &other)),
        }
    }

    /// Waits (up to a few seconds) for a message to be due; answers whether
    /// one is due now by the clock of the member that answered.
    async fn wait_for_due(&self) -> Result<bool, LodeError> {
        let request = ReadRequest {
            query: Query::NextDelivery {
                wait_ms: self.client.server_wait_ms(NEXT_DELIVERY_WAIT_MS),
            },
            consistency: Consistency::Eventual,
        };
        match self.client.read(request).await?.result {
            QueryResult::NextDelivery { due_now, .. } => Ok(due_now),
            other => Err(unexpected("a queue operation", &other)),
        }
    }

    /// Delivers messages to `handler` one at a time, for as long as the
    /// returned future runs: a handler's `Ok` finishes the message, an `Err`
    /// (or a delivery that outlives the visibility) fails the delivery,
    /// which is retried per the message's schedule. Ends only on an error
    /// of the cluster calls; drop the future to stop listening.
    ///
    /// A claim is a log entry, so an idle listener does not claim: it waits
    /// (a read, which writes nothing) until a member says a message is due.
    /// That member may be ahead of the leader (its clock runs early, or the
    /// leader already applied another listener's claim), so claims that
    /// find nothing after a "due" answer back off.
    pub async fn listen<F, Fut, E>(&self, mut handler: F) -> Result<(), LodeError>
    where
        F: FnMut(QueueDelivery) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        // Claims run at the start, after a delivery (more may be due), and
        // when a member says a message is due; `empty_claims` counts the
        // claims in a row that a "due" answer prompted and found nothing.
        let mut claim_now = true;
        let mut prompted = false;
        let mut empty_claims = 0u32;
        loop {
            if !claim_now {
                claim_now = self.wait_for_due().await?;
                prompted = true;
                continue;
            }
            if prompted && empty_claims > 0 {
                tokio::time::sleep(empty_claim_backoff(empty_claims)).await;
            }
            let Some(delivery) = self.claim().await? else {
                empty_claims = if prompted { empty_claims.saturating_add(1) } else { 0 };
                claim_now = false;
                continue;
            };
            empty_claims = 0;
            prompted = false;
            self.deliver(&mut handler, delivery).await?;
        }
    }

    /// Runs `handler` on one delivery within the visibility, then finishes
    /// the delivery as its outcome says.
    async fn deliver<F, Fut, E>(&self, handler: &mut F, delivery: QueueDelivery) -> Result<(), LodeError>
    where
        F: FnMut(QueueDelivery) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        let id = delivery.id;
        let attempt = delivery.attempt;
        let delivered = match tokio::time::timeout(self.visibility, handler(delivery.clone())).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::info!(%error, ?id, attempt, "a queue handler failed; the message is retried per its schedule");
                false
            }
            Err(_) => {
                tracing::warn!(?id, attempt, "a queue handler outlived the delivery's visibility");
                false
            }
        };
        self.finish(&delivery, delivered).await?;
        Ok(())
    }
}

/// The pause before a claim that follows `empty_claims` claims that found
/// nothing although a member had said a message was due: 10 ms, doubling,
/// at most `EMPTY_CLAIM_BACKOFF_MAX`.
fn empty_claim_backoff(empty_claims: u32) -> Duration {
    let doublings = empty_claims.saturating_sub(1).min(16);
    (EMPTY_CLAIM_BACKOFF_INITIAL * 2u32.pow(doublings)).min(EMPTY_CLAIM_BACKOFF_MAX)
}

/// The first pause after an empty claim that a "due" answer had prompted.
const EMPTY_CLAIM_BACKOFF_INITIAL: Duration = Duration::from_millis(10);
/// The longest pause between such claims: a member whose clock runs this
/// far ahead of the leader's costs one claim per this interval.
const EMPTY_CLAIM_BACKOFF_MAX: Duration = Duration::from_secs(1);

impl Client {
    /// The cluster's queue.
    pub fn queue(&self) -> Queue {
        Queue::new(self.clone())
    }

    /// Delivers queue messages to `handler` with the default visibility
    /// (see [`Queue::listen`]).
    pub async fn listen_queue<F, Fut, E>(&self, handler: F) -> Result<(), LodeError>
    where
        F: FnMut(QueueDelivery) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        self.queue().listen(handler).await
    }
}
