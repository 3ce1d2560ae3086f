//! The queue's shared types: a message's id, its enqueue options (delay,
//! backoff schedule, undelivered keys), a delivery, and how a finish ended.

use serde::{Deserialize, Serialize};

use crate::encoding::Encoding;
use crate::limits;

/// A queue message's id: the log index that enqueued it and its place among
/// that entry's enqueues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MessageId {
    pub index: u64,
    pub sequence: u32,
}

/// How a queue message is delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueueOptions {
    /// Not delivered before this time, in microseconds since the epoch.
    pub deliver_at_micros: u64,
    /// The delays before each redelivery after a failed delivery, in
    /// milliseconds; empty means [`limits::QUEUE_BACKOFF_SCHEDULE_DEFAULT_MS`].
    pub backoff_schedule_ms: Vec<u32>,
    /// Keys of [`DENO_NAMESPACE`] that receive the payload when the last
    /// delivery fails.
    pub keys_if_undelivered: Vec<Vec<u8>>,
}

impl EnqueueOptions {
    /// Checks the schedule and the keys against their limits.
    pub fn validate(&self) -> Result<(), String> {
        use limits::{QUEUE_BACKOFF_DELAYS_MAX, QUEUE_BACKOFF_DELAY_MS_MAX, QUEUE_UNDELIVERED_KEYS_MAX};
        if self.backoff_schedule_ms.len() > QUEUE_BACKOFF_DELAYS_MAX {
            return Err(limits::over_limit(
                "the number of backoff_schedule delays",
                self.backoff_schedule_ms.len(),
                "queue_backoff_delays_max",
                QUEUE_BACKOFF_DELAYS_MAX,
            ));
        }
        if let Some(delay) = self
            .backoff_schedule_ms
            .iter()
            .find(|delay| **delay > QUEUE_BACKOFF_DELAY_MS_MAX)
        {
            return Err(limits::over_limit(
                "a backoff_schedule delay",
                format!("{delay} ms"),
                "queue_backoff_delay_ms_max",
                QUEUE_BACKOFF_DELAY_MS_MAX,
            ));
        }
        if self.keys_if_undelivered.len() > QUEUE_UNDELIVERED_KEYS_MAX {
            return Err(limits::over_limit(
                "the number of keys_if_undelivered",
                self.keys_if_undelivered.len(),
                "queue_undelivered_keys_max",
                QUEUE_UNDELIVERED_KEYS_MAX,
            ));
        }
        self.keys_if_undelivered
            .iter()
            .try_for_each(|key| limits::check_key(key).map_err(|message| format!("keys_if_undelivered: {message}")))
    }

    /// The delays in force: the message's own, or the default.
    pub fn schedule_ms(&self) -> &[u32] {
        if self.backoff_schedule_ms.is_empty() {
            &limits::QUEUE_BACKOFF_SCHEDULE_DEFAULT_MS
        } else {
            &self.backoff_schedule_ms
        }
    }
}

/// One delivery of a queue message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDelivery {
    pub id: MessageId,
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    pub encoding: Encoding,
    /// 1 for the first delivery, 2 for the first retry, and so on.
    pub attempt: u32,
}

/// What ending a delivery did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishedAs {
    /// The message is done and gone.
    Delivered,
    /// It will be delivered again at this time.
    Retrying { deliver_at_micros: u64 },
    /// Every delivery failed: its payload went to its undelivered keys.
    DeadLettered,
    /// No claimed delivery has this id and attempt (already finished, or
    /// its claim ran out).
    NotClaimed,
}
