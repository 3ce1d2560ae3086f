//! KV Connect's `watch`: a stream of frames (a 4-byte little-endian length,
//! then a `WatchOutput`) that first reports every watched key as changed,
//! then the latest state of the keys that changed after each batch of the
//! change feed, coalesced; zero-length frames keep an idle stream alive.
//!
//! The first frame comes from one read (strong through the leader on the
//! strong endpoint, this member's state on the eventual one); changes are
//! then followed from exactly that read's position on this member's change
//! log, so no change between the read and the first batch is missed. The
//! stream ends when the port shuts down or the feed fails; KV Connect
//! clients reconnect and get a fresh first frame.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use denokv_proto::datapath as pb;
use lode_client::changes::Changes;
use lode_client::protocol::{ByteBuf, ChangeKind, Consistency, Entry, Query, QueryResult, ReadRequest};
use lode_client::{Client, LodeError};
use lode_types::limits::{KEY_BYTES_MAX, WATCHED_KEYS_MAX};
use lode_types::DENO_NAMESPACE;
use prost::Message;

use super::caller::Caller;
use super::kv_connect::{admit, failure, text, Admitted};
use super::{deno, Gateway};

/// How long a stream may stay silent before a keepalive frame.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// `POST /kv/{consistency}/watch`.
pub(super) async fn watch(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(consistency): Path<String>,
    body: Bytes,
) -> Response {
    super::metrics::count(&gateway, "watch");
    let Admitted {
        clients,
        consistency,
        strong,
        message: request,
    } = match admit::<pb::Watch>(&gateway, &caller, &consistency, &body) {
        Ok(admitted) => admitted,
        Err(refused) => return refused.into_response(),
    };
    let keys: Vec<Vec<u8>> = request.keys.into_iter().map(|key| key.key).collect();
    if keys.is_empty() || keys.len() > WATCHED_KEYS_MAX {
        return text(
            StatusCode::BAD_REQUEST,
            format!(
                "keys has {} items; a watch follows 1 to {WATCHED_KEYS_MAX} keys",
                keys.len()
            ),
        );
    }
    if let Some(index) = keys.iter().position(|key| key.len() > KEY_BYTES_MAX) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("keys[{index}] is over the limit key_bytes_max = {KEY_BYTES_MAX}"),
        );
    }
    let first_reader = super::kv_connect::reading_client(&clients, strong);
    let (entries, position) = match read_keys(first_reader, consistency, &keys).await {
        Ok(read) => read,
        Err(error) => return failure(error),
    };
    let watcher = Watcher {
        local: clients.local.clone(),
        changes: clients
            .local
            .changes((position, u32::MAX))
            .namespace_prefix(DENO_NAMESPACE),
        latest: entries.clone(),
        keys,
        stopping: gateway.stopping.clone(),
    };
    let first = frame(&watcher.keys, &entries, &vec![true; watcher.latest.len()]);
    let frames = futures::stream::unfold(
        (watcher, VecDeque::from([first])),
        |(mut watcher, mut queued)| async move {
            loop {
                if let Some(frame) = queued.pop_front() {
                    return Some((Ok::<Bytes, std::convert::Infallible>(frame), (watcher, queued)));
                }
                queued.push_back(watcher.next_frame().await?);
            }
        },
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(frames),
    )
        .into_response()
}

/// The entries at `keys` (in order) and the position they were read at.
async fn read_keys(
    client: &Client,
    consistency: Consistency,
    keys: &[Vec<u8>],
) -> Result<(Vec<Option<Entry>>, u64), LodeError> {
    let request = ReadRequest {
        query: Query::GetMany {
            namespace: DENO_NAMESPACE.to_owned(),
            keys: keys.iter().cloned().map(ByteBuf::from).collect(),
        },
        consistency,
    };
    let response = client.read(request).await?;
    match response.result {
        QueryResult::Entries(entries) if entries.len() == keys.len() => Ok((entries, response.position)),
        other => Err(LodeError::Unavailable(format!(
            "the node answered a key read with {other:?}"
        ))),
    }
}

struct Watcher {
    local: Client,
    changes: Changes,
    keys: Vec<Vec<u8>>,
    /// What the client was last told of each key.
    latest: Vec<Option<Entry>>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl Watcher {
    /// The next frame to send: changed keys, or a keepalive after a quiet
    /// interval; `None` ends the stream.
    async fn next_frame(&mut self) -> Option<Bytes> {
        let quiet_until = tokio::time::Instant::now() + KEEPALIVE_INTERVAL;
        loop {
            let batch = tokio::select! {
                biased;
                _ = self.stopping.wait_for(|stop| *stop) => return None,
                batch = tokio::time::timeout_at(quiet_until, self.changes.next_batch()) => batch,
            };
            let events = match batch {
                // Quiet: a keepalive. The read in flight is dropped and
                // asked again from the same position.
                Err(_) => return Some(Bytes::from_static(&[0, 0, 0, 0])),
                Ok(Ok(events)) => events,
                Ok(Err(LodeError::Compacted { .. })) => return self.reread().await,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "a watch's change feed failed; the client reconnects");
                    return None;
                }
            };
            let mut changed = vec![false; self.keys.len()];
            for event in events.into_iter().filter(|event| event.namespace == DENO_NAMESPACE) {
                let Some(slot) = self.keys.iter().position(|key| *key == event.key) else {
                    continue;
                };
                changed[slot] = true;
                self.latest[slot] = match event.kind {
                    ChangeKind::Deleted => None,
                    ChangeKind::Created | ChangeKind::Updated => Some(Entry {
                        key: event.key,
                        value: event.new_value.unwrap_or_default(),
                        encoding: event.encoding,
                        version: event.version,
                        expires_at_micros: None,
                        source_term: 0,
                        source_index: event.index,
                        session: None,
                    }),
                };
            }
            if changed.contains(&true) {
                return Some(frame(&self.keys, &self.latest, &changed));
            }
        }
    }

    /// The feed moved past this watch's position: read the keys afresh and
    /// follow from there, reporting the keys whose state differs.
    async fn reread(&mut self) -> Option<Bytes> {
        let (entries, position) = read_keys(&self.local, Consistency::Eventual, &self.keys).await.ok()?;
        let changed: Vec<bool> = entries
            .iter()
            .zip(&self.latest)
            .map(|(now, before)| now.as_ref().map(|entry| entry.version) != before.as_ref().map(|entry| entry.version))
            .collect();
        self.latest = entries;
        self.changes = self
            .local
            .changes((position, u32::MAX))
            .namespace_prefix(DENO_NAMESPACE);
        Some(frame(&self.keys, &self.latest, &changed))
    }
}

/// One length-prefixed `WatchOutput`.
fn frame(keys: &[Vec<u8>], entries: &[Option<Entry>], changed: &[bool]) -> Bytes {
    let output = pb::WatchOutput {
        status: pb::SnapshotReadStatus::SrSuccess as i32,
        keys: keys
            .iter()
            .zip(entries)
            .zip(changed)
            .map(|((_, entry), changed)| pb::WatchKeyOutput {
                changed: *changed,
                entry_if_changed: entry
                    .as_ref()
                    .filter(|_| *changed)
                    .map(|entry| deno::entry_to_deno(entry.clone())),
            })
            .collect(),
    };
    let encoded = output.encode_to_vec();
    let mut framed = Vec::with_capacity(4 + encoded.len());
    framed.extend_from_slice(&u32::try_from(encoded.len()).unwrap_or(u32::MAX).to_le_bytes());
    framed.extend_from_slice(&encoded);
    Bytes::from(framed)
}
