//! The server end of a connection: its calls run inside the connection's
//! own task, answers are written in the order they finish, and a cancel or
//! the end of the connection drops the calls still running.
//!
//! A call is a future polled by the connection's task, not a task of its
//! own: a call's answer then wakes one task (the connection's) instead of
//! finishing a spawned task that hands the answer on through a channel.
//! The calls go on being polled while answers wait to be written, so a
//! client that stops reading holds no call, nor what a call holds, short
//! of its end.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::future::{AbortHandle, Aborted};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio_util::bytes::{Bytes, BytesMut};
use tokio_util::codec::{Encoder, FramedRead};

use super::{
    decode, encode, ClientFrame, FrameCodec, ServerFrame, ServerLimits, PEER_FRAME_BYTES_MAX,
    REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX,
};
use crate::facade::ByteStream;

/// Runs one request to its answer, or to a refusal the caller receives as
/// a server error.
pub type Handler<Request, Response> =
    Arc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Result<Response, String>> + Send>> + Send + Sync>;

/// One running call: its id, and its outcome unless it was cancelled.
type Call<Response> = Pin<Box<dyn Future<Output = (u64, Result<Result<Response, String>, Aborted>)> + Send>>;

/// Encoded answers past which the connection reads no more requests until
/// the client has taken some: a client that does not read its answers
/// stops being served, not buffered for.
const UNWRITTEN_BYTES_MAX: usize = 1 << 20;

/// One connection's state between two events.
struct Connection<Response> {
    calls: FuturesUnordered<Call<Response>>,
    /// How to cancel each running call, by id.
    running: BTreeMap<u64, AbortHandle>,
    /// Encoded answers not yet written.
    unwritten: BytesMut,
    /// Whether answers wait to be written or flushed.
    unflushed: bool,
    /// Whether the connection's task gave running calls one turn to finish
    /// since the last answer it wrote.
    yielded: bool,
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
    let (read_half, mut write_half) = tokio::io::split(stream);
    let mut incoming = FramedRead::new(read_half, FrameCodec::new(limits.frame_bytes_max));
    let mut idle_until = tokio::time::Instant::now() + limits.idle;
    let mut connection = Connection {
        calls: FuturesUnordered::new(),
        running: BTreeMap::new(),
        unwritten: BytesMut::new(),
        unflushed: false,
        yielded: false,
    };
    loop {
        // Calls still running may be finishing now, woken by the same
        // commit as the answer waiting but not yet polled: one turn lets
        // their answers join this write (one TLS record, one system call).
        // A connection with one call at a time (most clients') never waits.
        if connection.unflushed && !connection.yielded && !connection.running.is_empty() {
            connection.yielded = true;
            tokio::task::yield_now().await;
        }
        let event = tokio::select! {
            biased;
            Some((id, outcome)) = connection.calls.next() => connection.finished(id, outcome),
            pushed = push(&mut write_half, &mut connection.unwritten), if connection.unflushed => {
                idle_until = tokio::time::Instant::now() + limits.idle;
                if pushed == Ok(true) {
                    connection.unflushed = false;
                    connection.yielded = false;
                }
                pushed.map(|_| ())
            }
            () = tokio::time::sleep_until(idle_until), if connection.running.is_empty() => {
                tracing::debug!("closing a connection idle past its limit");
                return;
            }
            frame = incoming.next(), if connection.unwritten.len() < UNWRITTEN_BYTES_MAX => {
                idle_until = tokio::time::Instant::now() + limits.idle;
                let frame = match frame {
                    None => return,
                    Some(frame) => frame
                        .map_err(|error| error.to_string())
                        .and_then(|bytes| decode::<ClientFrame<Request>>(&bytes)),
                };
                match frame {
                    Err(error) => Err(format!("a malformed frame: {error}")),
                    Ok(frame) => connection.received(frame, &handler, &limits),
                }
            }
        };
        if let Err(error) = event {
            tracing::debug!(%error, "ending a connection");
            return;
        }
    }
}

impl<Response: Serialize + Send + 'static> Connection<Response> {
    /// Queues the answer of call `id`, unless it was cancelled.
    fn finished(&mut self, id: u64, outcome: Result<Result<Response, String>, Aborted>) -> Result<(), String> {
        // A cancelled call has no one to answer.
        let Ok(outcome) = outcome else {
            return Ok(());
        };
        if self.running.remove(&id).is_none() {
            return Ok(());
        }
        self.queue(&ServerFrame { id, outcome })
    }

    /// Starts or cancels a call; `Err` ends the connection.
    fn received<Request>(
        &mut self,
        frame: ClientFrame<Request>,
        handler: &Handler<Request, Response>,
        limits: &ServerLimits,
    ) -> Result<(), String> {
        let (id, request) = match frame {
            ClientFrame::Cancel { id } => {
                if let Some(handle) = self.running.remove(&id) {
                    handle.abort();
                }
                return Ok(());
            }
            ClientFrame::Call { id, request } => (id, request),
        };
        if self.running.contains_key(&id) {
            return Err(format!("the client reused the id of running call {id}"));
        }
        let admitted = if self.running.len() >= REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX {
            Err(connection_full())
        } else {
            limits.port_calls.admit()
        };
        let place = match admitted {
            Ok(place) => place,
            Err(refusal) => {
                return self.queue(&ServerFrame::<Response> {
                    id,
                    outcome: Err(refusal),
                })
            }
        };
        let (call, abort) = futures::future::abortable(handler(request));
        self.running.insert(id, abort);
        self.calls.push(Box::pin(async move {
            let outcome = call.await;
            // The port's place is free as soon as the call is done.
            drop(place);
            (id, outcome)
        }));
        Ok(())
    }

    /// Encodes one answer behind those not yet written.
    fn queue(&mut self, answer: &ServerFrame<Response>) -> Result<(), String> {
        let bytes = encode(answer)?;
        FrameCodec::new(PEER_FRAME_BYTES_MAX)
            .encode(Bytes::from(bytes), &mut self.unwritten)
            .map_err(|error| error.to_string())?;
        self.unflushed = true;
        Ok(())
    }
}

/// Writes what it can of `unwritten`, or, once all of it is written,
/// flushes: `Ok(true)` when flushed. Cancelling it loses no byte.
async fn push<W: tokio::io::AsyncWrite + Unpin>(write_half: &mut W, unwritten: &mut BytesMut) -> Result<bool, String> {
    if unwritten.is_empty() {
        write_half.flush().await.map_err(|error| error.to_string())?;
        return Ok(true);
    }
    match write_half.write_buf(unwritten).await {
        Ok(0) => Err("the connection took no more bytes".to_owned()),
        Ok(_) => Ok(false),
        Err(error) => Err(error.to_string()),
    }
}

/// The refusal of a call past a connection's running calls.
pub(super) fn connection_full() -> String {
    format!(
        "too many calls running on this connection \
         (requests_in_flight_per_connection_max = {REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX})"
    )
}
