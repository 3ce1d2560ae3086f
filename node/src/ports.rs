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

/// Bytes an in-process stream buffers each way before its writer waits:
/// room for a few dozen calls of a few KiB.
const IN_PROCESS_BUFFER_BYTES: usize = 256 * 1024;

/// What serving one connection of a port needs.
#[derive(Clone)]
struct PortServer {
    shared: Arc<Shared>,
    port: Port,
    limits: rpc::ServerLimits,
}

impl PortServer {
    fn new(port: Port, shared: Arc<Shared>) -> Self {
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

    /// Serves `stream` until it ends or `stop` turns true. On the client
    /// port a certificate's common name names its user (a token sent later
    /// takes its place).
    fn serve(
        &self,
        stream: Box<dyn ByteStream>,
        certificate_name: Option<String>,
        mut stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let credential = certificate_name
            .filter(|_| self.port == Port::Client)
            .map(crate::auth::Credential::Certificate);
        let service = NodeService {
            shared: self.shared.clone(),
            port: self.port,
            caller: Arc::new(std::sync::Mutex::new(crate::auth::Caller::named(credential))),
        }
        .serve();
        let handler: rpc::Handler<LodeServiceRequest, LodeServiceResponse> = Arc::new(move |request| {
            let service = service.clone();
            Box::pin(async move {
                tarpc::server::Serve::serve(service, connection::context(), request)
                    .await
                    .map_err(|error| error.detail)
            })
        });
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

/// Accepts connections on `listener` for `port` until `stop` turns true.
pub(crate) async fn serve(listener: Box<dyn Listener>, port: Port, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let config = &shared.config;
    let (tls_port, connections_max, name) = match port {
        Port::Client => (TlsPort::Client, config.client_connections_max, "client"),
        Port::Peer => (TlsPort::Peer, config.peer_connections_max, "peer"),
    };
    let settings = PortSettings {
        tls: config.tls.clone().map(|tls| (tls, tls_port)),
        connections_max,
        tls_handshake: Duration::from_millis(config.tls_handshake_ms_max),
        name,
        open: shared.metrics.connections_open(name),
    };
    let server = PortServer::new(port, shared.clone());
    let serve_one = move |stream, certificate_name, stop| server.serve(stream, certificate_name, stop);
    accept_loop(listener, settings, stop, serve_one).await
}

/// The client port of this member, reached in process at `address`: each
/// stream opened is served as a connection accepted there (the caller
/// authenticates, the port's call limit holds), in a task that keeps the
/// node's span and ends when `stop` turns true. Neither TLS nor the port's
/// connection cap applies: no byte leaves the process, and the one caller,
/// the member's own gateway, keeps a bounded set of clients.
pub(crate) fn in_process_client_port(
    address: &str,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    span: tracing::Span,
) -> InProcess {
    let server = PortServer::new(Port::Client, shared);
    InProcess::new(
        address,
        Arc::new(move || {
            let (client, served) = tokio::io::duplex(IN_PROCESS_BUFFER_BYTES);
            tokio::spawn(
                server
                    .serve(Box::new(served), None, stop.clone())
                    .instrument(span.clone()),
            );
            Ok(Box::new(client) as Box<dyn ByteStream>)
        }),
    )
}
