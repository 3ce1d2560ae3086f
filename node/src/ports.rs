//! Serving the member's two ports: each connection, accepted on a socket or
//! opened in process by the member's own HTTP gateway, gets a service for
//! its caller and the port's limits.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lode_client::connection;
use lode_client::facade::{ByteStream, Listener};
use lode_client::in_process::InProcess;
use lode_client::protocol::{LodeService, LodeServiceRequest, LodeServiceResponse};
use lode_client::rpc;
use tokio::sync::watch;
use tracing::Instrument;

use crate::accept::{accept_loop, PortSettings, TlsPort};
use crate::service::{NodeService, Port};
use crate::shared::Shared;

/// What serving one connection of a port needs. Its clones share the
/// port's call limit (`ServerLimits::port_calls`).
#[derive(Clone)]
pub(crate) struct PortServer {
    shared: Arc<Shared>,
    port: Port,
    limits: rpc::ServerLimits,
}

impl PortServer {
    pub(crate) fn new(port: Port, shared: Arc<Shared>) -> Self {
        let config = &shared.config;
        let limits = rpc::ServerLimits {
            frame_bytes_max: match port {
                Port::Client => lode_types::limits::REQUEST_BYTES_MAX,
                Port::Peer => rpc::PEER_FRAME_BYTES_MAX,
            },
            idle: Duration::from_millis(config.connection_idle_ms_max),
            port_calls: match port {
                Port::Client => {
                    rpc::PortCalls::new("client_requests_in_flight_max", config.client_requests_in_flight_max)
                }
                Port::Peer => rpc::PortCalls::unlimited(),
            },
        };
        Self { shared, port, limits }
    }

    /// A service for one connection's calls, each run in `span`. On the
    /// client port a certificate's common name names its user (a token
    /// sent later takes its place).
    fn handler(
        &self,
        certificate_name: Option<String>,
        span: tracing::Span,
    ) -> rpc::Handler<LodeServiceRequest, LodeServiceResponse> {
        let credential = certificate_name
            .filter(|_| self.port == Port::Client)
            .map(crate::auth::Credential::Certificate);
        let service = NodeService {
            shared: self.shared.clone(),
            port: self.port,
            caller: Arc::new(std::sync::Mutex::new(crate::auth::Caller::named(credential))),
        }
        .serve();
        Arc::new(move |request| {
            let service = service.clone();
            Box::pin(
                async move {
                    tarpc::server::Serve::serve(service, connection::context(), request)
                        .await
                        .map_err(|error| error.detail)
                }
                .instrument(span.clone()),
            )
        })
    }

    /// Serves `stream` until it ends or `stop` turns true.
    fn serve(
        &self,
        stream: Box<dyn ByteStream>,
        certificate_name: Option<String>,
        mut stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send + 'static {
        // The connection's task, and each call's, already run in the
        // node's span (`accept_loop`).
        let handler = self.handler(certificate_name, tracing::Span::none());
        // A malformed frame ends this connection; the node and every other
        // connection carry on.
        let limits = self.limits.clone();
        async move {
            tokio::select! {
                biased;
                () = rpc::serve_connection(stream, handler, limits) => {}
                _ = stop.wait_for(|stop| *stop) => {}
            }
        }
    }
}

/// Accepts connections on `listener` for `server`'s port until `stop`
/// turns true.
pub(crate) async fn serve(listener: Box<dyn Listener>, server: PortServer, stop: watch::Receiver<bool>) {
    let config = &server.shared.config;
    let (tls_port, connections_max, name) = match server.port {
        Port::Client => (TlsPort::Client, config.client_connections_max, "client"),
        Port::Peer => (TlsPort::Peer, config.peer_connections_max, "peer"),
    };
    let settings = PortSettings {
        tls: config.tls.clone().map(|tls| (tls, tls_port)),
        connections_max,
        tls_handshake: Duration::from_millis(config.tls_handshake_ms_max),
        name,
        open: server.shared.metrics.connections_open(name),
    };
    let serve_one = move |stream, certificate_name, stop| server.serve(stream, certificate_name, stop);
    accept_loop(listener, settings, stop, serve_one).await
}

/// The client port of this member, reached in process at `address`: each
/// channel opened is a connection's service (the caller authenticates, and
/// its calls count against the port's call limit, shared with the
/// connections `client_port` serves) whose calls run in the caller's task,
/// and ends when `stop` turns true. Neither TLS nor the port's connection
/// cap applies: no byte leaves the process, and the one caller, the
/// member's own gateway, keeps a bounded set of clients. The calls run in
/// `span` (the node's), so their logs name the member as those of accepted
/// connections do, whatever the caller's span.
pub(crate) fn in_process_client_port(
    address: &str,
    client_port: PortServer,
    stop: watch::Receiver<bool>,
    span: tracing::Span,
) -> InProcess {
    InProcess::new(
        address,
        Arc::new(move || {
            let port_calls = client_port.limits.port_calls.clone();
            rpc::Channel::in_process(client_port.handler(None, span.clone()), port_calls, stop.clone())
        }),
    )
}
