//! Connections to a server in the caller's own process.
//!
//! A member's HTTP gateway is a client of its own member. Over loopback
//! TCP each call is encoded, crosses the kernel twice and passes through
//! four tasks, each hand-over a possible wake-up of another thread (tens
//! of microseconds on a host whose idle CPUs halt). In process the
//! caller's task runs the call itself (`rpc::Channel::in_process`): the
//! server still makes a service per connection (so the caller
//! authenticates, and the port's limits hold), but nothing is encoded.

use std::sync::Arc;

use crate::protocol::{LodeServiceRequest, LodeServiceResponse};
use crate::rpc::Channel;

/// Opens a new channel to the server: one connection's worth of service.
pub type OpenChannel = Arc<dyn Fn() -> Channel<LodeServiceRequest, LodeServiceResponse> + Send + Sync>;

/// A server in this process, and the address it also serves over TCP: a
/// client dials that address through `open` instead of a socket.
#[derive(Clone)]
pub struct InProcess {
    address: String,
    open: OpenChannel,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "InProcess({})", self.address)
    }
}

impl InProcess {
    pub fn new(address: impl Into<String>, open: OpenChannel) -> Self {
        Self {
            address: address.into(),
            open,
        }
    }

    /// The address whose connections go through this server's channels.
    pub fn address(&self) -> &str {
        &self.address
    }

    pub(crate) fn open(&self) -> Channel<LodeServiceRequest, LodeServiceResponse> {
        (self.open)()
    }
}
