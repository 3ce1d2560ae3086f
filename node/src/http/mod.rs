//! The node's HTTP port: KV Connect (so `Deno.openKv("http://…")` and
//! `@deno/kv` reach the cluster unchanged), the State API as JSON, health,
//! readiness and Prometheus metrics.
//!
//! The gateway is a client of its own node: it speaks to the node's tarpc
//! service through the Rust SDK, so writes and strong reads follow the
//! leader with the SDK's retries and op ids, and eventual reads and watches
//! stay on this member. One port serves HTTP/1.1 and HTTP/2 without TLS
//! (Deno sends h2c with prior knowledge to `http://` URLs); the listener
//! comes from the facade like every other socket.

pub mod deno;
mod kv_connect;
mod metrics;
mod state_api;
mod watch;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use lode_client::facade::{ByteStream, Listener};
use lode_client::{Client, ClientOptions};
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

pub use metrics::Counters;

/// What the HTTP port needs to know.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// The tarpc address of the node this port belongs to.
    pub node_address: String,
    /// The bearer token KV Connect clients present.
    pub access_token: String,
}

/// State every handler shares.
pub(crate) struct Gateway {
    /// Writes and strong reads: follows the leader.
    cluster: Client,
    /// Eventual reads, watches, health: this member only.
    local: Client,
    access_token: String,
    /// Turns true when the port shuts down; watches end on it.
    stopping: signal::Receiver<bool>,
    counters: Counters,
}

/// A running HTTP port.
pub struct HttpServer {
    address: SocketAddr,
    stop: signal::Sender<bool>,
    task: JoinHandle<()>,
}

/// Adapts the facade's listener to axum's: accept errors (a peer that reset
/// mid-handshake, too many open files) are logged and retried, never fatal.
struct FacadeListener {
    inner: Box<dyn Listener>,
    address: SocketAddr,
}

impl axum::serve::Listener for FacadeListener {
    type Io = Box<dyn ByteStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok(accepted) => return accepted,
                Err(error) => {
                    tracing::warn!(%error, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.address)
    }
}

impl HttpServer {
    /// Serves on `listener` until [`HttpServer::shutdown`].
    pub fn start(listener: Box<dyn Listener>, config: HttpConfig) -> Result<Self, anyhow::Error> {
        if config.access_token.is_empty() {
            anyhow::bail!("the KV Connect access token must not be empty");
        }
        let address = listener.local_addr()?;
        let options = ClientOptions {
            call_timeout: Duration::from_secs(20),
            ..ClientOptions::default()
        };
        let cluster = Client::with_options([config.node_address.clone()], options.clone())?;
        let local = Client::with_options([config.node_address.clone()], options)?;
        let (stop, stopping) = signal::channel(false);
        let gateway = Arc::new(Gateway {
            cluster,
            local,
            access_token: config.access_token,
            stopping: stopping.clone(),
            counters: Counters::default(),
        });
        let router = Router::new()
            .route("/", post(kv_connect::metadata_exchange))
            .route("/kv/{consistency}/snapshot_read", post(kv_connect::snapshot_read))
            .route("/kv/{consistency}/atomic_write", post(kv_connect::atomic_write))
            .route("/kv/{consistency}/watch", post(watch::watch))
            .route("/state/v1/triggers", get(state_api::triggers))
            .route("/state/v1/{function}", post(state_api::call))
            .route("/health", get(metrics::health))
            .route("/ready", get(metrics::ready))
            .route("/metrics", get(metrics::metrics))
            .layer(axum::extract::DefaultBodyLimit::max(kv_connect::BODY_BYTES_MAX))
            .with_state(gateway);
        let listener = FacadeListener {
            inner: listener,
            address,
        };
        let mut stopped = stopping;
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            if let Err(error) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
                tracing::error!(%error, "the HTTP port stopped");
            }
        });
        tracing::info!(%address, "HTTP port serving KV Connect, health and metrics");
        Ok(Self { address, stop, task })
    }

    /// The address the port listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Ends watches, lets requests in flight finish (bounded) and stops.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(5), &mut task).await.is_err() {
            task.abort();
        }
    }
}
