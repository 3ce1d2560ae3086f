//! The node's HTTP port: KV Connect (so `Deno.openKv("http://…")` and
//! `@deno/kv` reach the cluster unchanged), the KV API and the State API as
//! JSON, health, readiness and Prometheus metrics.
//!
//! The gateway is a client of its own node: it speaks to the node's tarpc
//! service through the Rust SDK (with the node in this process,
//! `HttpConfig::in_process`, its calls run in the gateway's own task), so
//! writes and strong reads follow the leader with the SDK's retries and op
//! ids, and eventual reads and watches stay on this member. One port serves HTTP/1.1 and HTTP/2: over TLS with
//! ALPN (`https://`) when the member has TLS, or in the clear (Deno sends
//! h2c with prior knowledge to `http://` URLs). Connections are taken as on
//! every port (`accept.rs`: a cap, a bounded handshake); a request's header
//! must arrive within `header_read_ms_max`, and the token is checked before
//! any body is read.

mod caller;
pub mod deno;
mod events;
pub mod kv_api;
pub mod kv_connect;
mod metrics;
pub mod readiness;
pub mod state_api;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use lode_client::facade::{ByteStream, Listener};
use lode_client::in_process::InProcess;
use lode_client::ClientOptions;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

use crate::accept::{accept_loop, PortSettings, TlsPort};
use crate::tls::MemberTls;

pub use caller::AuthView;
pub use metrics::MetricsSource;

/// Longest time a request's header may take to arrive.
pub const HEADER_READ_MS_MAX_DEFAULT: u64 = 10_000;

/// What the HTTP port needs to know.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// The client address of the node this port belongs to.
    pub node_address: String,
    /// The shared bearer token (`--access-token`), accepted while the
    /// cluster has no user; `None`: only users' tokens.
    pub access_token: Option<lode_client::protocol::AccessToken>,
    /// What the node knows of callers; `None`: a cluster that never has
    /// users.
    pub auth: Option<Arc<dyn AuthView>>,
    /// The role a `/metrics` caller's user must hold (or be a cluster
    /// admin); `None`: metrics are open to every caller, as health is.
    pub metrics_role: Option<String>,
    /// The `host:port` KV Connect's endpoint URLs name; `None`: the address
    /// the port listens on.
    pub advertise: Option<String>,
    /// HTTPS with the member's certificate; `None`: in the clear. The
    /// gateway's own client dials the node with the member's CA.
    pub tls: Option<Arc<MemberTls>>,
    pub connections_max: usize,
    pub tls_handshake_ms_max: u64,
    pub header_read_ms_max: u64,
    /// The node's own token (`Node::member_token`), which lets the gateway
    /// through the node's authentication.
    pub member_token: Option<lode_client::protocol::AccessToken>,
    /// The node's client port in this process (`Node::in_process`): the
    /// gateway's calls then take no socket; `None`: over TCP (and TLS).
    pub in_process: Option<InProcess>,
    /// How far behind the leader's applied index `/ready` still answers
    /// 200.
    pub ready_lag_entries_max: u64,
    /// The member's metrics; `None`: the port's own only.
    pub metrics: Option<Arc<dyn MetricsSource>>,
}

impl HttpConfig {
    /// A port in the clear with the default limits.
    pub fn new(node_address: impl Into<String>, access_token: Option<lode_client::protocol::AccessToken>) -> Self {
        Self {
            node_address: node_address.into(),
            access_token,
            auth: None,
            metrics_role: None,
            advertise: None,
            tls: None,
            connections_max: crate::accept::HTTP_CONNECTIONS_MAX_DEFAULT,
            tls_handshake_ms_max: crate::accept::TLS_HANDSHAKE_MS_MAX_DEFAULT,
            header_read_ms_max: HEADER_READ_MS_MAX_DEFAULT,
            member_token: None,
            in_process: None,
            ready_lag_entries_max: readiness::READY_LAG_ENTRIES_MAX_DEFAULT,
            metrics: None,
        }
    }
}

/// State every handler shares.
pub(crate) struct Gateway {
    /// Who may call, and the clients that act for each caller.
    callers: caller::Callers,
    /// The `host:port` endpoint URLs name.
    advertise: String,
    /// `https` when the port runs TLS, else `http`: the scheme of the
    /// endpoint URLs KV Connect hands out.
    scheme: &'static str,
    /// Turns true when the port shuts down; watches end on it.
    stopping: signal::Receiver<bool>,
    metrics: Arc<dyn MetricsSource>,
    /// The role `/metrics` needs, if any.
    metrics_role: Option<String>,
    /// How far behind the leader a ready member may be.
    ready_lag_entries_max: u64,
}

/// A running HTTP port.
pub struct HttpServer {
    address: SocketAddr,
    stop: signal::Sender<bool>,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// Serves on `listener` until [`HttpServer::shutdown`].
    pub fn start(listener: Box<dyn Listener>, config: HttpConfig) -> Result<Self, anyhow::Error> {
        if config.access_token.as_ref().is_some_and(|token| token.0.is_empty()) {
            anyhow::bail!("the KV Connect access token must not be empty");
        }
        let address = listener.local_addr()?;
        let options = ClientOptions {
            call_timeout: Duration::from_secs(20),
            tls: config.tls.as_ref().map(|tls| tls.peer_client()),
            token: config.member_token.clone(),
            in_process: config.in_process.clone(),
            ..ClientOptions::default()
        };
        let auth = config.auth.clone().unwrap_or_else(|| Arc::new(caller::NoUsers));
        let callers = caller::Callers::new(config.node_address.clone(), options, config.access_token.clone(), auth)?;
        let (stop, stopping) = signal::channel(false);
        let gateway = Arc::new(Gateway {
            callers,
            advertise: config.advertise.clone().unwrap_or_else(|| address.to_string()),
            scheme: if config.tls.is_some() { "https" } else { "http" },
            stopping: stopping.clone(),
            metrics: config
                .metrics
                .clone()
                .unwrap_or_else(|| Arc::new(metrics::PortOnly(crate::metrics::Metrics::new()))),
            metrics_role: config.metrics_role.clone(),
            ready_lag_entries_max: config.ready_lag_entries_max,
        });
        // The token is checked before a body is read: a caller without it
        // gets no buffer.
        let with_token = Router::new()
            .route("/", post(kv_connect::metadata_exchange))
            .route("/kv/{consistency}/snapshot_read", post(kv_connect::snapshot_read))
            .route("/kv/{consistency}/atomic_write", post(kv_connect::atomic_write))
            .route("/kv/{consistency}/watch", post(watch::watch))
            .route("/state/v1/triggers", get(state_api::triggers))
            .route("/state/v1/{function}", post(state_api::call))
            .route_layer(axum::middleware::from_fn_with_state(gateway.clone(), require_token));
        let kv_json_with_token = kv_api::router(true).route_layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            kv_api::require_token,
        ));
        let router = Router::new()
            .merge(with_token)
            .merge(kv_json_with_token)
            .route("/health", get(readiness::health))
            .route("/ready", get(readiness::ready))
            .route("/metrics", get(metrics::metrics))
            .merge(kv_api::router(false))
            .layer(axum::extract::DefaultBodyLimit::max(kv_connect::BODY_BYTES_MAX))
            .layer(axum::middleware::from_fn_with_state(gateway.clone(), count_in_flight))
            .with_state(gateway.clone());
        let settings = PortSettings {
            tls: config.tls.clone().map(|tls| (tls, TlsPort::Http)),
            connections_max: config.connections_max,
            tls_handshake: Duration::from_millis(config.tls_handshake_ms_max),
            name: "http",
            open: gateway.metrics.metrics().connections_open("http"),
        };
        let header_read = Duration::from_millis(config.header_read_ms_max);
        let serve_one =
            move |stream: Box<dyn ByteStream>, _certificate_name: Option<String>, stop: signal::Receiver<bool>| {
                serve_connection(stream, router.clone(), header_read, stop)
            };
        let task = tokio::spawn(accept_loop(listener, settings, stopping, serve_one));
        tracing::info!(%address, "HTTP port serving KV Connect, health and metrics");
        Ok(Self { address, stop, task })
    }

    /// The address the port listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops accepting, ends watches and lets requests in flight finish
    /// (bounded).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(5), &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Counts the request in `lode_requests_in_flight{port="http"}` until its
/// answer is ready (a watch's stream is counted until it starts).
async fn count_in_flight(
    axum::extract::State(gateway): axum::extract::State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let _in_flight = gateway.metrics.metrics().request_in_flight("http");
    next.run(request).await
}

async fn require_token(
    axum::extract::State(gateway): axum::extract::State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    admit_caller(&gateway, request, next, IntoResponse::into_response).await
}

/// The port's one token check: the request goes on with its caller in its
/// extensions, or is answered by `refuse` (each API spells a refusal its
/// own way) before any body is read.
async fn admit_caller(
    gateway: &Gateway,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
    refuse: impl FnOnce(kv_connect::Refusal) -> axum::response::Response,
) -> axum::response::Response {
    match gateway.callers.identify(request.headers()) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refusal) => refuse(refusal),
    }
}

/// Serves HTTP/1.1 or HTTP/2 (ALPN, or h2c's preface) on one connection
/// until it closes; on `stop`, finishes the requests in flight (bounded by
/// the port's shutdown) and closes.
async fn serve_connection(
    stream: Box<dyn ByteStream>,
    router: Router,
    header_read: Duration,
    mut stop: signal::Receiver<bool>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Some(header_read));
    builder.http2().timer(TokioTimer::new());
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        biased;
        _ = connection.as_mut() => return,
        _ = stop.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}
