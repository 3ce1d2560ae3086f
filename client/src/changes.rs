//! The change feed: every change of every key, in commit order, resumable
//! from a position (log index, sequence) after a disconnect, a restart or a
//! leader change, with an explicit `compacted` error, never a silent gap,
//! when the position is older than the cluster retains.

use futures::Stream;

use crate::error::LodeError;
use crate::protocol::{ChangeEvent, Consistency, Query, QueryResult, ReadRequest};
use crate::sdk::Client;

/// Events asked for per round trip.
pub const CHANGES_PER_READ: u32 = 1000;
/// How long one read waits on the server for new events, in milliseconds;
/// below the SDK's default attempt timeout.
pub const CHANGES_WAIT_MS: u64 = 5_000;

/// A subscription being built.
#[derive(Clone, Debug)]
pub struct Changes {
    client: Client,
    after: (u64, u32),
    namespace_prefix: String,
}

impl Changes {
    pub(crate) fn new(client: Client, after: (u64, u32)) -> Self {
        Self {
            client,
            after,
            namespace_prefix: String::new(),
        }
    }

    /// Only changes of namespaces whose (sent) names start with `prefix`.
    pub fn namespace_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.namespace_prefix = prefix.into();
        self
    }

    /// One read: the events after the current position (waiting a while
    /// for some when there are none), and the position to continue after.
    pub async fn next_batch(&mut self) -> Result<Vec<ChangeEvent>, LodeError> {
        let request = ReadRequest {
            query: Query::Changes {
                after_index: self.after.0,
                after_sequence: self.after.1,
                namespace_prefix: self.namespace_prefix.clone(),
                limit: CHANGES_PER_READ,
                wait_ms: self.client.server_wait_ms(CHANGES_WAIT_MS),
            },
            consistency: Consistency::Eventual,
        };
        match self.client.read(request).await?.result {
            QueryResult::Changes { events, resume_after } => {
                self.after = resume_after.max(self.after);
                Ok(events)
            }
            other => Err(crate::error::unexpected("a change read", &other)),
        }
    }

    /// The position the next read continues after.
    pub fn position(&self) -> (u64, u32) {
        self.after
    }

    /// Every change after the starting position, as an endless stream that
    /// ends only with an error (`compacted`, or the SDK's retries running
    /// out). Delivery is at least once: keep the last position seen and
    /// resume after it.
    pub fn stream(self) -> impl Stream<Item = Result<ChangeEvent, LodeError>> {
        futures::stream::try_unfold(
            (self, std::collections::VecDeque::new()),
            |(mut changes, mut buffered)| async move {
                loop {
                    if let Some(event) = buffered.pop_front() {
                        return Ok(Some((event, (changes, buffered))));
                    }
                    buffered.extend(changes.next_batch().await?);
                }
            },
        )
    }
}

impl Client {
    /// The change feed after position `after` (log index, sequence): `(0,
    /// 0)` for everything retained, `(write_position, u32::MAX)` for what
    /// follows a write.
    pub fn changes(&self, after: (u64, u32)) -> Changes {
        Changes::new(self.clone(), after)
    }
}
