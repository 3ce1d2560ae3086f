//! Calls to a server in the caller's own process: the handler runs the
//! request in the caller's task, with no frame, no encoding and no task
//! between the two ends. The server's bounds still hold: the calls one
//! channel runs at once, as on a connection, and the port's calls.

use std::sync::Arc;

use tarpc::client::RpcError;
use tokio::sync::{watch, Semaphore};

use super::{refused, server, Handler, PortCalls, REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX};

/// One in-process "connection": a handler (whose service keeps this
/// channel's caller, as a connection's does) and the server's limits.
pub(super) struct InProcessServer<Request, Response> {
    handler: Handler<Request, Response>,
    port_calls: PortCalls,
    /// Places for the calls running through this channel.
    running: Semaphore,
    /// Turns true when the server stops serving: the channel has ended.
    stop: watch::Receiver<bool>,
}

impl<Request, Response> InProcessServer<Request, Response> {
    pub(super) fn new(handler: Handler<Request, Response>, port_calls: PortCalls, stop: watch::Receiver<bool>) -> Self {
        Self {
            handler,
            port_calls,
            running: Semaphore::new(REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX),
            stop,
        }
    }

    pub(super) fn is_ended(&self) -> bool {
        *self.stop.borrow()
    }

    /// Runs `request` to its answer; a refusal comes back as a server
    /// error, and a server that stops meanwhile ends the call as a closed
    /// connection would.
    pub(super) async fn call(&self, request: Request) -> Result<Response, RpcError> {
        if self.is_ended() {
            return Err(RpcError::Shutdown);
        }
        let Ok(_call) = self.running.try_acquire() else {
            return Err(refused(server::connection_full()));
        };
        let _place = self.port_calls.admit().map_err(refused)?;
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            outcome = (self.handler)(request) => outcome.map_err(refused),
            _ = stop.wait_for(|stop| *stop) => Err(RpcError::Shutdown),
        }
    }
}

/// Shared by a channel's clones.
pub(super) type Shared<Request, Response> = Arc<InProcessServer<Request, Response>>;
