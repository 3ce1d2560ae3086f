//! The `rpc` framing over real TCP on 127.0.0.1: answers find their calls
//! whatever order they finish in, a dropped call is cancelled on the
//! server, a lost connection fails the calls waiting on it, a malformed
//! frame ends only its connection, the in-flight limit is named, calls
//! or answers ready together share a write, calls go on to their end
//! while a client that does not read holds their answers, and a call
//! dropped half written leaves the connection whole.

use std::sync::Arc;
use std::time::Duration;

use lode_client::facade::ByteStream;
use lode_client::rpc::{self, Channel, Handler, REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX};
use tarpc::client::RpcError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

/// Long enough for anything these tests wait on to happen many times over.
const WAIT_MAX: Duration = Duration::from_secs(10);

/// Sent by the test handler when a call's work is dropped before finishing.
struct DroppedReport {
    request: String,
    sender: mpsc::UnboundedSender<String>,
    finished: bool,
}

impl Drop for DroppedReport {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.sender.send(self.request.clone());
        }
    }
}

/// A handler that reports each call as it starts, answers `echo:<text>` at
/// once, holds `wait:<text>` until a `release` call arrives, never finishes
/// `hang:<text>`, and refuses anything else.
fn handler(dropped: mpsc::UnboundedSender<String>, started: mpsc::UnboundedSender<String>) -> Handler<String, String> {
    let release = Arc::new(Notify::new());
    Arc::new(move |request: String| {
        let release = release.clone();
        let _ = started.send(request.clone());
        let report = DroppedReport {
            request: request.clone(),
            sender: dropped.clone(),
            finished: false,
        };
        Box::pin(async move {
            // Moved whole into the call's future, so it drops with it.
            let mut report = report;
            let answer = if let Some(text) = request.strip_prefix("echo:") {
                Ok(text.to_owned())
            } else if let Some(text) = request.strip_prefix("wait:") {
                release.notified().await;
                Ok(text.to_owned())
            } else if request == "release" {
                release.notify_one();
                Ok("released".to_owned())
            } else if request.starts_with("hang:") {
                std::future::pending::<()>().await;
                Ok(String::new())
            } else {
                Err(format!("unknown request {request:?}"))
            };
            report.finished = true;
            answer
        })
    })
}

struct Server {
    address: String,
    connections: JoinHandle<()>,
    /// One message per connection that ended, and one per call dropped
    /// unfinished.
    ended: mpsc::UnboundedReceiver<()>,
    dropped: mpsc::UnboundedReceiver<String>,
    started: mpsc::UnboundedReceiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.connections.abort();
    }
}

async fn start_server() -> Server {
    start_server_with(limits()).await
}

/// A server whose connections all share `limits` (and so its port's cap).
async fn start_server_with(limits: rpc::ServerLimits) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding 127.0.0.1:0");
    let address = listener.local_addr().expect("listener address").to_string();
    let (dropped_sender, dropped) = mpsc::unbounded_channel();
    let (ended_sender, ended) = mpsc::unbounded_channel();
    let (started_sender, started) = mpsc::unbounded_channel();
    let connections = tokio::spawn(async move {
        let mut served = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let handler = handler(dropped_sender.clone(), started_sender.clone());
            let ended = ended_sender.clone();
            let limits = limits.clone();
            served.spawn(async move {
                rpc::serve_connection(Box::new(stream) as Box<dyn ByteStream>, handler, limits).await;
                let _ = ended.send(());
            });
        }
    });
    Server {
        address,
        connections,
        ended,
        dropped,
        started,
    }
}

async fn connect(address: &str) -> Channel<String, String> {
    let stream = TcpStream::connect(address)
        .await
        .expect("connecting to the test server");
    Channel::spawn(Box::new(stream))
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT_MAX, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

#[tokio::test]
async fn answers_reach_their_calls_in_any_order() {
    let mut server = start_server().await;
    let channel = connect(&server.address).await;
    assert_eq!(channel.call("echo:one".to_owned()).await.expect("echo"), "one");

    // The first call can only finish after the second: one connection
    // carries both at once.
    let waiting = tokio::spawn({
        let channel = channel.clone();
        async move { channel.call("wait:first".to_owned()).await }
    });
    loop {
        let started = within("the waiting call to start", server.started.recv()).await;
        if started.as_deref() == Some("wait:first") {
            break;
        }
    }
    assert_eq!(channel.call("release".to_owned()).await.expect("release"), "released");
    let first = within("the waiting call", waiting).await.expect("task");
    assert_eq!(first.expect("the waiting call's answer"), "first");

    let refused = channel.call("refuse".to_owned()).await;
    match refused {
        Err(RpcError::Server(error)) => assert!(error.detail.contains("unknown request"), "{error:?}"),
        other => panic!("expected a server error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dropped_call_is_cancelled_on_the_server() {
    let mut server = start_server().await;
    let channel = connect(&server.address).await;
    let call = channel.call("hang:slow".to_owned());
    assert!(
        tokio::time::timeout(Duration::from_millis(50), call).await.is_err(),
        "a hanging call answered"
    );
    let dropped = within("the server to drop the cancelled call", server.dropped.recv()).await;
    assert_eq!(dropped.as_deref(), Some("hang:slow"));
    // The connection carries on.
    assert_eq!(channel.call("echo:after".to_owned()).await.expect("echo"), "after");
}

#[tokio::test]
async fn a_lost_connection_fails_waiting_calls_and_later_ones() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding 127.0.0.1:0");
    let address = listener.local_addr().expect("address").to_string();
    let (dropped_sender, mut dropped) = mpsc::unbounded_channel();
    let (started_sender, mut started) = mpsc::unbounded_channel();
    let serving = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        rpc::serve_connection(
            Box::new(stream) as Box<dyn ByteStream>,
            handler(dropped_sender, started_sender),
            limits(),
        )
        .await;
    });
    let channel = connect(&address).await;
    let waiting = tokio::spawn({
        let channel = channel.clone();
        async move { channel.call("hang:forever".to_owned()).await }
    });
    // Wait until the call runs on the server, then kill the server's side.
    assert_eq!(
        within("the call to start", started.recv()).await.as_deref(),
        Some("hang:forever")
    );
    serving.abort();
    let outcome = within("the waiting call to fail", waiting).await.expect("task");
    assert!(matches!(outcome, Err(RpcError::Shutdown)), "{outcome:?}");
    assert_eq!(
        within("the aborted call's report", dropped.recv()).await.as_deref(),
        Some("hang:forever")
    );
    let later = within("a later call to fail", channel.call("echo:late".to_owned())).await;
    assert!(matches!(later, Err(RpcError::Shutdown)), "{later:?}");
}

#[tokio::test]
async fn a_malformed_frame_ends_only_its_connection() {
    let mut server = start_server().await;
    let healthy = connect(&server.address).await;

    let mut raw = TcpStream::connect(&server.address).await.expect("connect");
    // A frame of four bytes that are no `ClientFrame`.
    raw.write_all(&[0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff])
        .await
        .expect("write");
    let mut buffer = [0u8; 16];
    let read = within("the server to close the connection", raw.read(&mut buffer)).await;
    assert_eq!(read.expect("read"), 0, "the connection stayed open");
    within("the connection to end", server.ended.recv()).await;

    // A frame that claims more than the frame limit ends its connection too.
    let mut raw = TcpStream::connect(&server.address).await.expect("connect");
    raw.write_all(&u32::MAX.to_be_bytes()).await.expect("write");
    let read = within("the server to close the connection", raw.read(&mut buffer)).await;
    assert_eq!(read.expect("read"), 0, "the connection stayed open");

    assert_eq!(healthy.call("echo:still".to_owned()).await.expect("echo"), "still");
}

#[tokio::test]
async fn calls_over_the_in_flight_limit_are_refused_by_name() {
    let mut server = start_server().await;
    let channel = connect(&server.address).await;
    let mut hanging = Vec::new();
    for index in 0..REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX {
        let channel = channel.clone();
        hanging.push(tokio::spawn(async move { channel.call(format!("hang:{index}")).await }));
    }
    for _ in 0..REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX {
        within("the hanging calls to start", server.started.recv()).await;
    }
    let refused = within("the call over the limit", channel.call("echo:over".to_owned())).await;
    match refused {
        Err(RpcError::Server(error)) => assert!(
            error.detail.contains(&format!(
                "requests_in_flight_per_connection_max = {REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX}"
            )),
            "{error:?}"
        ),
        other => panic!("expected a refusal naming the limit, got {other:?}"),
    }
    for call in &hanging {
        assert!(!call.is_finished(), "a call within the limit finished");
    }
    // Cancelling one frees a place.
    hanging.pop().expect("a hanging call").abort();
    let mut answered = None;
    for _ in 0..1000 {
        match channel.call("echo:room".to_owned()).await {
            Ok(answer) => {
                answered = Some(answer);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    assert_eq!(answered.as_deref(), Some("room"));
}

#[tokio::test]
async fn calls_over_the_port_limit_are_refused_by_name_on_every_connection() {
    const PORT_CALLS_MAX: usize = 3;
    let mut server = start_server_with(rpc::ServerLimits {
        port_calls: rpc::PortCalls::new("test_calls_max", PORT_CALLS_MAX),
        ..limits()
    })
    .await;
    let first = connect(&server.address).await;
    let second = connect(&server.address).await;
    let mut hanging = Vec::new();
    for index in 0..PORT_CALLS_MAX {
        let channel = if index == 0 { first.clone() } else { second.clone() };
        hanging.push(tokio::spawn(async move { channel.call(format!("hang:{index}")).await }));
    }
    for _ in 0..PORT_CALLS_MAX {
        within("the hanging calls to start", server.started.recv()).await;
    }
    // A third connection, with nothing running on it, is refused too.
    let third = connect(&server.address).await;
    for channel in [&first, &third] {
        match within("the call over the limit", channel.call("echo:over".to_owned())).await {
            Err(RpcError::Server(error)) => assert!(
                error.detail.contains(&format!("test_calls_max = {PORT_CALLS_MAX}")),
                "{error:?}"
            ),
            other => panic!("expected a refusal naming the port's limit, got {other:?}"),
        }
    }
    for call in &hanging {
        assert!(!call.is_finished(), "a call within the limit finished");
    }
    // A call that ends gives its place back, whichever connection runs it.
    hanging.remove(0).abort();
    within("the aborted call to be dropped", server.dropped.recv()).await;
    assert_eq!(
        within("a call with room", third.call("echo:room".to_owned()))
            .await
            .expect("echo"),
        "room"
    );
}

#[tokio::test]
async fn dropping_the_last_channel_closes_the_connection() {
    let mut server = start_server().await;
    let channel = connect(&server.address).await;
    assert_eq!(channel.call("echo:x".to_owned()).await.expect("echo"), "x");
    let clone = channel.clone();
    drop(channel);
    assert_eq!(clone.call("echo:y".to_owned()).await.expect("echo"), "y");
    drop(clone);
    within("the server to see the connection end", server.ended.recv()).await;
}

fn limits() -> rpc::ServerLimits {
    rpc::ServerLimits {
        frame_bytes_max: lode_types::limits::REQUEST_BYTES_MAX,
        idle: std::time::Duration::from_secs(300),
        port_calls: rpc::PortCalls::unlimited(),
    }
}

/// A stream that counts the writes carrying bytes and says when a write
/// first finds the connection full.
struct ObservedStream {
    inner: TcpStream,
    writes: Arc<std::sync::atomic::AtomicUsize>,
    stalled: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ObservedStream {
    fn new(inner: TcpStream) -> Self {
        ObservedStream {
            inner,
            writes: Arc::default(),
            stalled: None,
        }
    }

    fn observed<T>(&mut self, written: std::task::Poll<std::io::Result<T>>) -> std::task::Poll<std::io::Result<T>> {
        match &written {
            std::task::Poll::Ready(Ok(_)) => {
                self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            std::task::Poll::Pending => {
                if let Some(stalled) = self.stalled.take() {
                    let _ = stalled.send(());
                }
            }
            std::task::Poll::Ready(Err(_)) => {}
        }
        written
    }
}

impl tokio::io::AsyncRead for ObservedStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(context, buffer)
    }
}

impl tokio::io::AsyncWrite for ObservedStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        bytes: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let written = std::pin::Pin::new(&mut self.inner).poll_write(context, bytes);
        self.observed(written)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffers: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let written = std::pin::Pin::new(&mut self.inner).poll_write_vectored(context, buffers);
        self.observed(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

/// Awaits each spawned call in turn and checks it answered `expected(index)`.
async fn expect_answers(calls: Vec<JoinHandle<Result<String, RpcError>>>, expected: impl Fn(usize) -> String) {
    for (index, call) in calls.into_iter().enumerate() {
        let answer = within("an answer", call)
            .await
            .expect("task")
            .expect("the call's answer");
        assert_eq!(answer, expected(index));
    }
}

/// Tells `started` that this task waits, then waits for `release`. The
/// wait is registered before the message is sent, so one
/// `notify_waiters` after every message reaches every task.
async fn wait_for_release(release: &Notify, started: &mpsc::UnboundedSender<()>) {
    let released = release.notified();
    let _ = started.send(());
    released.await;
}

/// Calls that finish together, as a commit's do, are answered in a few
/// writes, not one each. When calls ran as tasks of their own, on one
/// worker the first to finish woke the connection's task, which the
/// runtime ran next, before the other finished calls: without a yield it
/// wrote every answer alone (32 writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn answers_finishing_together_share_a_write() {
    const CALLS: usize = 32;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding 127.0.0.1:0");
    let address = listener.local_addr().expect("listener address").to_string();
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let (started_sender, mut started) = mpsc::unbounded_channel::<()>();
    let handler: Handler<String, String> = Arc::new({
        let release = release.clone();
        move |request: String| {
            let release = release.clone();
            let started = started_sender.clone();
            Box::pin(async move {
                wait_for_release(&release, &started).await;
                Ok(request)
            })
        }
    });
    let server = tokio::spawn({
        let writes = writes.clone();
        async move {
            let (stream, _) = listener.accept().await.expect("accepting the test's connection");
            let stream = ObservedStream {
                writes,
                ..ObservedStream::new(stream)
            };
            rpc::serve_connection(Box::new(stream) as Box<dyn ByteStream>, handler, limits()).await;
        }
    });
    let channel = connect(&address).await;
    let calls: Vec<_> = (0..CALLS)
        .map(|index| {
            let channel = channel.clone();
            tokio::spawn(async move { channel.call(format!("call-{index}")).await })
        })
        .collect();
    for _ in 0..CALLS {
        within("every call to start", started.recv()).await;
    }
    // Every call is waiting on `release` (each registered before it said it
    // started), so one notification finishes them all at once.
    release.notify_waiters();
    expect_answers(calls, |index| format!("call-{index}")).await;
    let writes = writes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        writes <= CALLS / 4,
        "{CALLS} answers that finished together took {writes} writes"
    );
    drop(channel);
    within("the connection to end", server).await.expect("server task");
}

/// Calls made together by many tasks sharing a channel go out in a few
/// writes, not one each: the same pathology as above, on the caller's side.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn calls_made_together_share_a_write() {
    const CALLS: usize = 32;
    let server = start_server().await;
    let stream = TcpStream::connect(&server.address)
        .await
        .expect("connecting to the test server");
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stream = ObservedStream {
        writes: writes.clone(),
        ..ObservedStream::new(stream)
    };
    let channel: Channel<String, String> = Channel::spawn(Box::new(stream));
    let go = Arc::new(Notify::new());
    let (ready_sender, mut ready) = mpsc::unbounded_channel::<()>();
    let calls: Vec<_> = (0..CALLS)
        .map(|index| {
            let channel = channel.clone();
            let go = go.clone();
            let ready = ready_sender.clone();
            tokio::spawn(async move {
                wait_for_release(&go, &ready).await;
                channel.call(format!("echo:{index}")).await
            })
        })
        .collect();
    for _ in 0..CALLS {
        within("every caller to be ready", ready.recv()).await;
    }
    go.notify_waiters();
    expect_answers(calls, |index| index.to_string()).await;
    let writes = writes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(writes <= CALLS / 4, "{CALLS} calls made together took {writes} writes");
}

/// A client that stops reading its answers holds none of the server's
/// calls: a call that can finish does, and gives back what it holds (its
/// place on the port among them), while answers wait to be written.
#[tokio::test]
async fn calls_finish_while_answers_wait_for_a_client_that_does_not_read() {
    /// Enough answers of this size to fill both ends' socket buffers.
    const ANSWER_BYTES: usize = 1 << 20;
    const LARGE_CALLS: u64 = 48;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding 127.0.0.1:0");
    let address = listener.local_addr().expect("listener address");
    let release = Arc::new(Notify::new());
    let (finished_sender, mut finished) = mpsc::unbounded_channel::<()>();
    let handler: Handler<String, String> = Arc::new({
        let release = release.clone();
        move |request: String| {
            let release = release.clone();
            let finished = finished_sender.clone();
            Box::pin(async move {
                if request == "hold" {
                    release.notified().await;
                    let _ = finished.send(());
                    return Ok(String::new());
                }
                Ok("x".repeat(ANSWER_BYTES))
            })
        }
    });
    let (stalled_sender, stalled) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accepting the test's connection");
        let stream = ObservedStream {
            stalled: Some(stalled_sender),
            ..ObservedStream::new(stream)
        };
        rpc::serve_connection(Box::new(stream) as Box<dyn ByteStream>, handler, limits()).await;
    });
    let (unread, mut requests) = TcpStream::connect(address)
        .await
        .expect("connecting to the test server")
        .into_split();
    let mut frames = Vec::new();
    for id in 0..=LARGE_CALLS {
        let request = if id == 0 { "hold" } else { "large" }.to_owned();
        let frame = lode_types::binary::encode(&rpc::ClientFrame::Call { id, request }).expect("encoding a call");
        frames.extend_from_slice(&u32::try_from(frame.len()).expect("a small frame").to_be_bytes());
        frames.extend_from_slice(&frame);
    }
    requests.write_all(&frames).await.expect("sending the calls");
    within("the server's writes to find the connection full", stalled)
        .await
        .expect("the server's stream");
    release.notify_one();
    within("the held call to finish", finished.recv()).await;
    drop((unread, requests));
    within("the connection to end", server).await.expect("server task");
}

/// A call dropped while its request is half written leaves the connection
/// whole: the rest of the request goes out ahead of anything written after
/// it, so the server reads whole frames, and later calls are answered.
#[tokio::test]
async fn a_call_dropped_while_its_request_is_half_written_leaves_the_connection_whole() {
    /// More than the two ends' socket buffers hold, so the write stalls.
    const REQUEST_BYTES: usize = 32 << 20;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding 127.0.0.1:0");
    let address = listener.local_addr().expect("listener address");
    let (dropped_sender, mut dropped) = mpsc::unbounded_channel();
    let (started_sender, _started) = mpsc::unbounded_channel();
    // The server reads nothing until told: the kernel completes the
    // connection, and the bytes wait in its buffers.
    let serve = Arc::new(Notify::new());
    let server = tokio::spawn({
        let serve = serve.clone();
        async move {
            serve.notified().await;
            let (stream, _) = listener.accept().await.expect("accepting the test's connection");
            let limits = rpc::ServerLimits {
                frame_bytes_max: 2 * REQUEST_BYTES,
                ..limits()
            };
            rpc::serve_connection(
                Box::new(stream) as Box<dyn ByteStream>,
                handler(dropped_sender, started_sender),
                limits,
            )
            .await;
        }
    });
    let (stalled_sender, stalled) = tokio::sync::oneshot::channel();
    let stream = ObservedStream {
        stalled: Some(stalled_sender),
        ..ObservedStream::new(
            TcpStream::connect(address)
                .await
                .expect("connecting to the test server"),
        )
    };
    let channel: Channel<String, String> = Channel::spawn(Box::new(stream));
    let large = format!("hang:{}", "x".repeat(REQUEST_BYTES));
    let call = tokio::spawn({
        let channel = channel.clone();
        let large = large.clone();
        async move { channel.call(large).await }
    });
    within("the request's write to stall", stalled)
        .await
        .expect("the client's stream");
    call.abort();
    assert!(
        within("the call to end", call).await.is_err(),
        "the call was not aborted"
    );
    serve.notify_one();
    // The server read the whole request, ran it, and dropped it on the
    // cancel that followed.
    assert_eq!(within("the cancelled call's report", dropped.recv()).await, Some(large));
    assert_eq!(
        within("a later call", channel.call("echo:after".to_owned()))
            .await
            .expect("the later call's answer"),
        "after"
    );
    drop(channel);
    within("the connection to end", server).await.expect("server task");
}
