//! A connection to a server in the caller's own process
//! (`Transport::InProcess`): calls are answered without a socket, refused
//! past the port's limit as on a served connection, and a server that
//! stops ends its channel and the calls running on it.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lode_client::connection::{CallFailure, Connection};
use lode_client::in_process::InProcess;
use lode_client::protocol::Capability;
use lode_client::rpc::{Channel, PortCalls};
use lode_client::tls::Transport;
use support::handler;
use tokio::sync::watch;

/// Long enough for anything these tests wait on to happen many times over.
const WAIT_MAX: Duration = Duration::from_secs(10);
/// Nothing listens here (a privileged port): a call that reached a socket
/// would fail to dial.
const ADDRESS: &str = "127.0.0.1:1";

/// A connection to an in-process server with one place for calls; the
/// count of channels it opened.
fn connect(stop: watch::Receiver<bool>) -> (Arc<Connection>, Arc<AtomicUsize>) {
    let port_calls = PortCalls::new("test_calls_max", 1);
    let opened = Arc::new(AtomicUsize::new(0));
    let counted = opened.clone();
    let server = InProcess::new(
        ADDRESS,
        Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Channel::in_process(handler(), port_calls.clone(), stop.clone())
        }),
    );
    (Arc::new(Connection::new(ADDRESS, Transport::InProcess(server))), opened)
}

async fn capabilities(connection: &Connection) -> Result<Vec<Capability>, CallFailure> {
    connection
        .call(WAIT_MAX, |client, context| async move {
            client.capabilities(context).await.map(Ok)
        })
        .await
        .map(|answer| answer.expect("capabilities answers"))
}

/// Starts a `node_status` call, which holds the server's one place until
/// it ends.
fn hang(connection: &Arc<Connection>) -> tokio::task::JoinHandle<Result<(), CallFailure>> {
    let connection = connection.clone();
    tokio::spawn(async move {
        connection
            .call(WAIT_MAX, |client, context| async move {
                client.node_status(context).await.map(|_| Ok(()))
            })
            .await
            .map(|_| ())
    })
}

/// Waits until a call is refused for want of a place: the hanging call
/// holds it.
async fn refusal(connection: &Connection) -> String {
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    loop {
        match capabilities(connection).await {
            Err(CallFailure::Busy(refusal)) => return refusal,
            answered => assert!(answered.is_ok(), "{answered:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "no call was ever refused");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_answered_without_a_socket_and_refused_past_the_port_limit() {
    let (_stop, stopping) = watch::channel(false);
    let (connection, opened) = connect(stopping);
    assert_eq!(capabilities(&connection).await.expect("answered"), vec![Capability::Kv]);
    let hanging = hang(&connection);
    let refusal = refusal(&connection).await;
    assert!(refusal.contains("test_calls_max = 1"), "{refusal}");
    // Dropping the hanging call gives its place back; the channel is kept.
    hanging.abort();
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while capabilities(&connection).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the place was never given back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(opened.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_ends_its_channel_and_the_calls_running_on_it() {
    let (stop, stopping) = watch::channel(false);
    let (connection, opened) = connect(stopping);
    let hanging = hang(&connection);
    refusal(&connection).await;
    stop.send(true).expect("the server listens");
    let ended = tokio::time::timeout(WAIT_MAX, hanging)
        .await
        .expect("the running call ends with the server")
        .expect("the call's task");
    assert!(matches!(ended, Err(CallFailure::Transport(_))), "{ended:?}");
    // The next call dials again, and finds the server still stopped.
    let after = capabilities(&connection).await;
    assert!(matches!(after, Err(CallFailure::Transport(_))), "{after:?}");
    assert_eq!(opened.load(Ordering::SeqCst), 2);
}
