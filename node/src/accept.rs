//! Taking connections on one of a member's ports: at most
//! `connections_max` open at once (more are closed as soon as they are
//! accepted, so the ones already open keep being served), a TLS handshake
//! bounded in time and run off the accept loop, and on the peer port the
//! check of the peer's name.
//!
//! Each port has its own cap: a flood of clients never takes the peer
//! port's connections, so Raft's heartbeats keep flowing, and the HTTP
//! port's health checks keep being answered.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lode_client::facade::{ByteStream, Listener};
use tokio::sync::{watch, Semaphore};
use tracing::Instrument;

use crate::tls::MemberTls;

/// Connections one client port keeps open at once.
pub const CLIENT_CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// Connections the peer port keeps open at once: each member dials each
/// peer once (plus a redial while an old connection drains).
pub const PEER_CONNECTIONS_MAX_DEFAULT: usize = 64;
/// Calls the client port's connections may have running at once, all of
/// them together (long polls included); more are refused at once as
/// `unavailable`, naming `client_requests_in_flight_max`.
pub const CLIENT_REQUESTS_IN_FLIGHT_MAX_DEFAULT: usize = 4096;
/// Connections the HTTP port keeps open at once.
pub const HTTP_CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// Longest TLS handshake, from accept to the first byte of a request.
pub const TLS_HANDSHAKE_MS_MAX_DEFAULT: u64 = 10_000;
/// Longest time a connection with nothing running may stay silent.
pub const CONNECTION_IDLE_MS_MAX_DEFAULT: u64 = 300_000;

/// Which TLS configuration a port presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsPort {
    /// Client certificates required (the cluster CA), names checked.
    Peer,
    /// Client certificates verified when offered.
    Client,
    /// As `Client`, with HTTP/2 and HTTP/1.1 offered by ALPN.
    Http,
}

/// How one port takes connections.
#[derive(Clone)]
pub struct PortSettings {
    /// `None`: in the clear.
    pub tls: Option<(Arc<MemberTls>, TlsPort)>,
    pub connections_max: usize,
    pub tls_handshake: Duration,
    /// The port's name in logs and metrics.
    pub name: &'static str,
    /// The port's open connections, for its metrics.
    pub open: prometheus_client::metrics::gauge::Gauge,
}

/// Counts one open connection for as long as it lives.
struct OpenConnection(prometheus_client::metrics::gauge::Gauge);

impl OpenConnection {
    fn new(open: &prometheus_client::metrics::gauge::Gauge) -> Self {
        open.inc();
        Self(open.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Accepts connections until `stop` turns true, and runs `serve` on each
/// (after its handshake) in a task of its own; `serve` is handed the common
/// name of the client's certificate, if it presented one, and `stop` to end
/// the connection as it sees fit.
pub async fn accept_loop<F, Fut>(
    listener: Box<dyn Listener>,
    settings: PortSettings,
    mut stop: watch::Receiver<bool>,
    serve: F,
) where
    F: Fn(Box<dyn ByteStream>, Option<String>, watch::Receiver<bool>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    let permits = Arc::new(Semaphore::new(settings.connections_max));
    loop {
        let accepted = tokio::select! {
            biased;
            accepted = listener.accept() => accepted,
            _ = stop.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, port = settings.name, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!(
                port = settings.name,
                connections_max = settings.connections_max,
                "closing a new connection: the port is at its connection limit"
            );
            continue;
        };
        let (serve, settings) = (serve.clone(), settings.clone());
        let stop_connection = stop.clone();
        let open = OpenConnection::new(&settings.open);
        let connection = async move {
            let _permit = permit;
            let _open = open;
            if let Some((stream, name)) = handshake(stream, &settings).await {
                serve(stream, name, stop_connection).await;
            }
        };
        tokio::spawn(connection.in_current_span());
    }
}

/// The stream to serve: as accepted, or after a TLS handshake within the
/// time limit (and, on the peer port, a certificate for an allowed name).
async fn handshake(
    stream: Box<dyn ByteStream>,
    settings: &PortSettings,
) -> Option<(Box<dyn ByteStream>, Option<String>)> {
    let Some((tls, port)) = &settings.tls else {
        return Some((stream, None));
    };
    let config = match port {
        TlsPort::Peer => tls.peer_server(),
        TlsPort::Client => tls.client_server(),
        TlsPort::Http => tls.http_server(),
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = match tokio::time::timeout(settings.tls_handshake, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%error, port = settings.name, "TLS handshake refused");
            return None;
        }
        Err(_) => {
            tracing::debug!(port = settings.name, "TLS handshake timed out");
            return None;
        }
    };
    if *port == TlsPort::Peer {
        if let Err(error) = tls.check_peer_name(stream.get_ref().1.peer_certificates()) {
            tracing::warn!(%error, "refused a peer connection");
            return None;
        }
    }
    let name = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|certificate| common_name(certificate));
    Some((Box::new(stream), name))
}

/// The subject's common name of a certificate the handshake verified
/// against the cluster CA: the user a client certificate names.
fn common_name(certificate: &[u8]) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate).ok()?;
    let name = parsed.subject().iter_common_name().next()?.as_str().ok()?.to_owned();
    Some(name)
}
