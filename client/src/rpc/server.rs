//! The server end of a connection: each call runs as its own task, answers
//! are written in the order they finish, and a cancel or the end of the
//! connection aborts the calls still running.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_util::bytes::Bytes;
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::Instrument;

use super::{
    decode, encode, ClientFrame, FrameCodec, ServerFrame, ServerLimits, PEER_FRAME_BYTES_MAX,
    REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX,
};
use crate::facade::ByteStream;

/// Runs one request to its answer, or to a refusal the caller receives as
/// a server error.
pub type Handler<Request, Response> =
    Arc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Result<Response, String>> + Send>> + Send + Sync>;

/// Calls still running, aborted when the connection ends (or its future
/// is dropped).
#[derive(Default)]
struct Running(BTreeMap<u64, AbortHandle>);

impl Drop for Running {
    fn drop(&mut self) {
        for handle in self.0.values() {
            handle.abort();
        }
    }
}

/// Serves calls on `stream` until the client closes it, a frame is over
/// the limit or fails to decode, writing fails, or it idles past the limit.
pub async fn serve_connection<Request, Response>(
    stream: Box<dyn ByteStream>,
    handler: Handler<Request, Response>,
    limits: ServerLimits,
) where
    Request: DeserializeOwned + Send + 'static,
    Response: Serialize + Send + 'static,
{
    let (read_half, write_half) = tokio::io::split(stream);
    let mut incoming = FramedRead::new(read_half, FrameCodec::new(limits.frame_bytes_max));
    let mut outgoing = FramedWrite::new(write_half, FrameCodec::new(PEER_FRAME_BYTES_MAX));
    let mut idle_until = tokio::time::Instant::now() + limits.idle;
    // Every running call sends exactly one completion, so this capacity
    // never makes a call wait.
    let (finished, mut completions) =
        mpsc::channel::<(u64, Result<Response, String>)>(REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX);
    let mut running = Running::default();
    loop {
        let answer = tokio::select! {
            biased;
            Some((id, outcome)) = completions.recv() => {
                // A call cancelled after it finished has no one to answer.
                if running.0.remove(&id).is_none() {
                    continue;
                }
                ServerFrame { id, outcome }
            }
            () = tokio::time::sleep_until(idle_until), if running.0.is_empty() => {
                tracing::debug!("closing a connection idle past its limit");
                return;
            }
            frame = incoming.next() => {
                idle_until = tokio::time::Instant::now() + limits.idle;
                let frame = match frame {
                    None => return,
                    Some(frame) => frame.map_err(|error| error.to_string()).and_then(|bytes| decode::<ClientFrame<Request>>(&bytes)),
                };
                match frame {
                    Err(error) => {
                        tracing::debug!(%error, "ending a connection that sent a malformed frame");
                        return;
                    }
                    Ok(ClientFrame::Cancel { id }) => {
                        if let Some(handle) = running.0.remove(&id) {
                            handle.abort();
                        }
                        continue;
                    }
                    Ok(ClientFrame::Call { id, request }) => {
                        if running.0.contains_key(&id) {
                            tracing::debug!(id, "ending a connection that reused a running call's id");
                            return;
                        }
                        let admitted = if running.0.len() >= REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX {
                            Err(connection_full())
                        } else {
                            limits.port_calls.admit()
                        };
                        match admitted {
                            Err(refusal) => ServerFrame {
                                id,
                                outcome: Err(refusal),
                            },
                            Ok(place) => {
                                let call = handler(request);
                                let finished = finished.clone();
                                let task = tokio::spawn(
                                    async move {
                                        let outcome = call.await;
                                        drop(place);
                                        let _ = finished.send((id, outcome)).await;
                                    }
                                    .in_current_span(),
                                );
                                running.0.insert(id, task.abort_handle());
                                continue;
                            }
                        }
                    }
                }
            }
        };
        // Answers that finished meanwhile go out in the same write (one
        // TLS record, one system call), up to a batch. Calls still running
        // on the connection may be finishing now, their tasks woken by the
        // same commit but not yet run: yielding once lets them queue their
        // answers for this write. A connection with one call at a time
        // (most clients') never waits.
        if !running.0.is_empty() {
            tokio::task::yield_now().await;
        }
        let mut written = feed(&mut outgoing, &answer).await;
        for _ in 1..ANSWERS_PER_WRITE_MAX {
            if written.is_err() {
                break;
            }
            let Ok((id, outcome)) = completions.try_recv() else {
                break;
            };
            if running.0.remove(&id).is_some() {
                written = feed(&mut outgoing, &ServerFrame { id, outcome }).await;
            }
        }
        if written.is_ok() {
            written = outgoing.flush().await.map_err(|error| error.to_string());
        }
        if let Err(error) = written {
            tracing::debug!(%error, "ending a connection that could not be written");
            return;
        }
    }
}

/// The refusal of a call past a connection's running calls.
pub(super) fn connection_full() -> String {
    format!(
        "too many calls running on this connection \
         (requests_in_flight_per_connection_max = {REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX})"
    )
}

/// Most answers written together before a flush.
const ANSWERS_PER_WRITE_MAX: usize = 64;

async fn feed<W, Response>(
    outgoing: &mut FramedWrite<W, FrameCodec>,
    answer: &ServerFrame<Response>,
) -> Result<(), String>
where
    W: tokio::io::AsyncWrite + Unpin,
    Response: Serialize,
{
    let bytes = encode(answer)?;
    outgoing
        .feed(Bytes::from(bytes))
        .await
        .map_err(|error| error.to_string())
}
