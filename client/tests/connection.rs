//! `Connection` over real TCP on 127.0.0.1: a connection whose peer went
//! silent is dialed again even when the calls on it are dropped by their
//! callers before their own timeout, and a connection that still answers
//! is kept when one of its calls is dropped.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lode_client::connection::Connection;
use lode_client::facade::ByteStream;
use lode_client::protocol::Capability;
use lode_client::rpc;
use lode_client::tls::Transport;
use support::handler;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Long enough for anything these tests wait on to happen many times over.
const WAIT_MAX: Duration = Duration::from_secs(10);
/// How long a caller waits before giving up on a call (and dropping it).
const CALLER_PATIENCE: Duration = Duration::from_millis(200);

struct Server {
    address: String,
    accepted: Arc<AtomicUsize>,
    connections: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.connections.abort();
    }
}

/// A server whose first `silent` connections read everything and answer
/// nothing (a peer behind a black hole); later ones are served.
async fn start_server(silent: usize) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding 127.0.0.1:0");
    let address = listener.local_addr().expect("listener address").to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let connections = tokio::spawn(async move {
        let mut served = tokio::task::JoinSet::new();
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let number = counted.fetch_add(1, Ordering::SeqCst);
            if number < silent {
                served.spawn(async move {
                    let mut sink = [0u8; 1024];
                    while matches!(stream.read(&mut sink).await, Ok(read) if read > 0) {}
                });
            } else {
                let limits = rpc::ServerLimits {
                    frame_bytes_max: lode_types::limits::REQUEST_BYTES_MAX,
                    idle: WAIT_MAX,
                    port_calls: rpc::PortCalls::unlimited(),
                };
                served.spawn(rpc::serve_connection(
                    Box::new(stream) as Box<dyn ByteStream>,
                    handler(),
                    limits,
                ));
            }
        }
    });
    Server {
        address,
        accepted,
        connections,
    }
}

async fn capabilities(connection: &Connection, timeout: Duration) -> Result<Vec<Capability>, String> {
    match connection
        .call(timeout, |client, context| async move {
            client.capabilities(context).await.map(Ok)
        })
        .await
    {
        Ok(Ok(capabilities)) => Ok(capabilities),
        Ok(Err(error)) => Err(format!("the server refused: {error}")),
        Err(failure) => Err(format!("the call failed: {failure:?}")),
    }
}

#[tokio::test]
async fn a_call_dropped_on_a_silent_connection_makes_the_next_call_dial_again() {
    let server = start_server(1).await;
    let connection = Connection::new(server.address.clone(), Transport::Plain);
    // The caller gives up long before the call's own timeout would fire.
    let given_up = tokio::time::timeout(CALLER_PATIENCE, capabilities(&connection, WAIT_MAX)).await;
    assert!(given_up.is_err(), "the silent connection answered: {given_up:?}");
    // Without the redial this call waits on the silent connection until its
    // own timeout.
    let answer = capabilities(&connection, WAIT_MAX / 2).await;
    assert_eq!(answer, Ok(vec![Capability::Kv]));
    assert_eq!(
        server.accepted.load(Ordering::SeqCst),
        2,
        "one silent connection, then one served"
    );
}

#[tokio::test]
async fn a_call_dropped_on_a_connection_that_answers_others_keeps_it() {
    let server = start_server(0).await;
    let connection = Connection::new(server.address.clone(), Transport::Plain);
    assert_eq!(capabilities(&connection, WAIT_MAX).await, Ok(vec![Capability::Kv]));
    let hanging = connection.call(
        WAIT_MAX,
        |client, context| async move { client.node_status(context).await },
    );
    let answered_meanwhile = async {
        tokio::time::sleep(CALLER_PATIENCE / 2).await;
        capabilities(&connection, WAIT_MAX).await
    };
    let (given_up, answered) = tokio::join!(tokio::time::timeout(CALLER_PATIENCE, hanging), answered_meanwhile);
    assert!(given_up.is_err(), "node_status never answers on the test server");
    assert_eq!(answered, Ok(vec![Capability::Kv]));
    assert_eq!(capabilities(&connection, WAIT_MAX).await, Ok(vec![Capability::Kv]));
    assert_eq!(
        server.accepted.load(Ordering::SeqCst),
        1,
        "the answering connection is kept"
    );
}

#[tokio::test]
async fn a_timed_out_call_on_a_silent_connection_makes_the_next_call_dial_again() {
    let server = start_server(1).await;
    let connection = Connection::new(server.address.clone(), Transport::Plain);
    let timed_out = capabilities(&connection, CALLER_PATIENCE).await;
    assert_eq!(timed_out, Err("the call failed: Timeout".to_owned()));
    assert_eq!(capabilities(&connection, WAIT_MAX).await, Ok(vec![Capability::Kv]));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}
