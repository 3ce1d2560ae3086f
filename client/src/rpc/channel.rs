//! The client end of a connection: a caller alone on its channel writes its
//! request itself, callers that come together hand theirs to a writer task
//! that writes them at once, and each waits on its own one-shot answer; a
//! reader task matches answers to callers by id. A channel to a server in
//! this process has neither task: the caller's task runs the call
//! (`in_process.rs`).
//!
//! Waiting callers are kept in id order (a `BTreeMap`), and when the
//! connection ends they are all failed at once, in that order, so a
//! simulated run wakes them the same way every time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tarpc::client::RpcError;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::bytes::Bytes;
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::Instrument;

use super::in_process::{self, InProcessServer};
use super::{
    decode, encode, refused, ClientFrame, FrameCodec, Handler, PortCalls, ServerFrame, CALLS_QUEUED_PER_CHANNEL_MAX,
    PEER_FRAME_BYTES_MAX,
};
use crate::facade::ByteStream;

type Waiter<Response> = oneshot::Sender<Result<Response, RpcError>>;

/// The connection's write half, framed: shared by the writer task and a
/// caller that writes its own request, one at a time. A frame a dropped
/// caller left half written stays in its buffer for the next writer.
type Frames = FramedWrite<tokio::io::WriteHalf<Box<dyn ByteStream>>, FrameCodec>;

struct Shared<Response> {
    waiting: Mutex<BTreeMap<u64, Waiter<Response>>>,
    /// Set once the connection has ended: new calls fail at once.
    ended: AtomicBool,
    next_id: AtomicU64,
}

impl<Response> Shared<Response> {
    fn waiting(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Waiter<Response>>> {
        // A panic while holding this lock leaves the map consistent (every
        // operation on it is one insert or remove), so poisoning is ignored.
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Fails every waiting caller: the connection is gone.
    fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        let waiting = std::mem::take(&mut *self.waiting());
        for (_, waiter) in waiting {
            let _ = waiter.send(Err(RpcError::Shutdown));
        }
    }
}

/// A client channel over one connection, or to a server in this process.
/// Clones share the connection; dropping the last clone closes it.
pub struct Channel<Request, Response> {
    link: Link<Request, Response>,
}

enum Link<Request, Response> {
    /// Frames over a byte stream, written and read by the channel's tasks.
    Stream {
        outgoing: mpsc::Sender<ClientFrame<Request>>,
        frames: Arc<tokio::sync::Mutex<Frames>>,
        shared: Arc<Shared<Response>>,
    },
    /// Calls a handler in this process runs in the caller's task.
    InProcess(in_process::Shared<Request, Response>),
}

impl<Request, Response> Clone for Channel<Request, Response> {
    fn clone(&self) -> Self {
        let link = match &self.link {
            Link::Stream {
                outgoing,
                frames,
                shared,
            } => Link::Stream {
                outgoing: outgoing.clone(),
                frames: frames.clone(),
                shared: shared.clone(),
            },
            Link::InProcess(server) => Link::InProcess(server.clone()),
        };
        Channel { link }
    }
}

impl<Request, Response> std::fmt::Debug for Channel<Request, Response> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Channel")
            .field("ended", &self.is_ended())
            .finish()
    }
}

impl<Request, Response> Channel<Request, Response> {
    /// Calls run by `handler` in the caller's task, within a connection's
    /// bound on running calls and `port_calls`, until `stop` turns true.
    pub fn in_process(handler: Handler<Request, Response>, port_calls: PortCalls, stop: watch::Receiver<bool>) -> Self {
        Channel {
            link: Link::InProcess(Arc::new(InProcessServer::new(handler, port_calls, stop))),
        }
    }

    /// Whether the connection has ended (the server closed it, or it
    /// failed): the next call should dial afresh.
    pub fn is_ended(&self) -> bool {
        match &self.link {
            Link::Stream { shared, .. } => shared.ended.load(Ordering::SeqCst),
            Link::InProcess(server) => server.is_ended(),
        }
    }
}

impl<Request, Response> Channel<Request, Response>
where
    Request: Serialize + Send + 'static,
    Response: DeserializeOwned + Send + 'static,
{
    /// Starts the channel's writer and reader tasks on `stream`.
    pub fn spawn(stream: Box<dyn ByteStream>) -> Self {
        let (read_half, write_half) = tokio::io::split(stream);
        let (outgoing, requests) = mpsc::channel(CALLS_QUEUED_PER_CHANNEL_MAX);
        let shared = Arc::new(Shared {
            waiting: Mutex::new(BTreeMap::new()),
            ended: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
        });
        let frames = Arc::new(tokio::sync::Mutex::new(FramedWrite::new(
            write_half,
            FrameCodec::new(PEER_FRAME_BYTES_MAX),
        )));
        tokio::spawn(write_requests(frames.clone(), requests, shared.clone()).in_current_span());
        tokio::spawn(read_answers(read_half, shared.clone()).in_current_span());
        Channel {
            link: Link::Stream {
                outgoing,
                frames,
                shared,
            },
        }
    }

    /// Sends `request` and waits for its answer. Dropping the returned
    /// future before the answer cancels the request on the server.
    pub async fn call(&self, request: Request) -> Result<Response, RpcError> {
        match &self.link {
            Link::Stream {
                outgoing,
                frames,
                shared,
            } => call_over_stream(outgoing, frames, shared, request).await,
            Link::InProcess(server) => server.call(request).await,
        }
    }
}

async fn call_over_stream<Request: Serialize, Response>(
    outgoing: &mpsc::Sender<ClientFrame<Request>>,
    frames: &tokio::sync::Mutex<Frames>,
    shared: &Shared<Response>,
    request: Request,
) -> Result<Response, RpcError> {
    if shared.ended.load(Ordering::SeqCst) {
        return Err(RpcError::Shutdown);
    }
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let (waiter, answer) = oneshot::channel();
    shared.waiting().insert(id, waiter);
    // The reader may have ended (and failed every waiter) between the
    // check above and the insert.
    if shared.ended.load(Ordering::SeqCst) {
        shared.waiting().remove(&id);
        return Err(RpcError::Shutdown);
    }
    let mut pending = PendingCall {
        id,
        outgoing,
        shared,
        answered: false,
    };
    let frame = ClientFrame::Call { id, request };
    // Alone on the channel, with no one writing, the caller writes its
    // request itself and saves waking the writer task. Callers that come
    // together queue theirs, to be written at once.
    let alone = shared.waiting().len() == 1;
    let direct = if alone { frames.try_lock().ok() } else { None };
    let sent = match direct {
        Some(mut frames) => write_batch(&mut frames, std::iter::once(frame), shared).await,
        None => outgoing.send(frame).await.map_err(|_| ()),
    };
    if sent.is_err() {
        pending.answered = true;
        shared.waiting().remove(&id);
        return Err(RpcError::Shutdown);
    }
    let answer = answer.await;
    pending.answered = true;
    // A dropped waiter means the reader ended between our insert and
    // its final sweep.
    answer.unwrap_or(Err(RpcError::Shutdown))
}

impl<Request, Response> tarpc::client::stub::Stub for Channel<Request, Response>
where
    Request: tarpc::RequestName + Serialize + Send + 'static,
    Response: DeserializeOwned + Send + 'static,
{
    type Req = Request;
    type Resp = Response;

    /// The context is not sent: callers time out with `tokio::time`.
    async fn call(&self, _context: tarpc::context::Context, request: Request) -> Result<Response, RpcError> {
        Channel::call(self, request).await
    }
}

/// Cancels its call on the server if dropped before the answer came.
struct PendingCall<'a, Request, Response> {
    id: u64,
    outgoing: &'a mpsc::Sender<ClientFrame<Request>>,
    shared: &'a Shared<Response>,
    answered: bool,
}

impl<Request, Response> Drop for PendingCall<'_, Request, Response> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        if self.shared.waiting().remove(&self.id).is_some() {
            // Best effort: with the queue full the server finishes the
            // request and its answer is discarded on arrival.
            let _ = self.outgoing.try_send(ClientFrame::Cancel { id: self.id });
        }
    }
}

async fn write_requests<Request: Serialize, Response>(
    frames: Arc<tokio::sync::Mutex<Frames>>,
    mut requests: mpsc::Receiver<ClientFrame<Request>>,
    shared: Arc<Shared<Response>>,
) {
    while let Some(frame) = requests.recv().await {
        // Calls queued meanwhile go out in the same write (one TLS record,
        // one system call), up to a batch. While other calls wait for their
        // answers the channel is shared by concurrent callers, some of them
        // perhaps runnable with a call to queue: yielding once lets them.
        if shared.waiting().len() > 1 {
            tokio::task::yield_now().await;
        }
        let queued = std::iter::from_fn(|| requests.try_recv().ok()).take(FRAMES_PER_WRITE_MAX - 1);
        let batch = std::iter::once(frame).chain(queued);
        if write_batch(&mut *frames.lock().await, batch, &shared).await.is_err() {
            return;
        }
    }
    // Every clone of the channel is gone: tell the server we are done.
    let _ = SinkExt::<Bytes>::close(&mut *frames.lock().await).await;
}

/// Most requests written together before a flush.
const FRAMES_PER_WRITE_MAX: usize = 64;

/// Writes `batch` and flushes it once. A failure ends the connection:
/// every waiting call fails, and so does every later one.
async fn write_batch<Request: Serialize, Response>(
    frames: &mut Frames,
    batch: impl Iterator<Item = ClientFrame<Request>>,
    shared: &Shared<Response>,
) -> Result<(), ()> {
    let mut written = Ok(());
    for frame in batch {
        written = feed(frames, frame).await;
        if written.is_err() {
            break;
        }
    }
    if written.is_ok() {
        written = frames.flush().await.map_err(|error| error.to_string());
    }
    written.map_err(|error| {
        tracing::debug!(%error, "a connection failed while writing; its calls fail");
        shared.end();
    })
}

async fn feed<Request: Serialize>(frames: &mut Frames, frame: ClientFrame<Request>) -> Result<(), String> {
    let bytes = encode(&frame)?;
    frames.feed(Bytes::from(bytes)).await.map_err(|error| error.to_string())
}

async fn read_answers<Response: DeserializeOwned>(
    read_half: tokio::io::ReadHalf<Box<dyn ByteStream>>,
    shared: Arc<Shared<Response>>,
) {
    let mut frames = FramedRead::new(read_half, FrameCodec::new(PEER_FRAME_BYTES_MAX));
    while let Some(frame) = frames.next().await {
        let answer = match frame.map_err(|error| error.to_string()) {
            Ok(bytes) => decode::<ServerFrame<Response>>(&bytes),
            Err(error) => Err(error),
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => {
                tracing::debug!(%error, "a connection failed while reading; its calls fail");
                break;
            }
        };
        // An answer to a cancelled call finds no waiter and is dropped.
        if let Some(waiter) = shared.waiting().remove(&answer.id) {
            let outcome = answer.outcome.map_err(refused);
            let _ = waiter.send(outcome);
        }
    }
    shared.end();
}
