//! Connections to a server in the caller's own process.
//!
//! A member's HTTP gateway is a client of its own member. Over loopback
//! TCP each call costs two trips through the kernel and, on a host whose
//! idle CPUs halt, the wake-up of another thread on each side; through an
//! in-memory stream the call is handed from task to task in the same
//! runtime. The bytes are the very same frames either way, so the server
//! serves the stream as it would an accepted connection (the caller still
//! authenticates, and the port's limits still apply).

use std::io;
use std::sync::Arc;

use crate::facade::ByteStream;

/// Opens a new stream to the server, which starts serving its other end.
pub type OpenStream = Arc<dyn Fn() -> io::Result<Box<dyn ByteStream>> + Send + Sync>;

/// A server in this process, and the address it also serves over TCP: a
/// client dials that address through `open` instead of a socket.
#[derive(Clone)]
pub struct InProcess {
    address: String,
    open: OpenStream,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "InProcess({})", self.address)
    }
}

impl InProcess {
    pub fn new(address: impl Into<String>, open: OpenStream) -> Self {
        Self {
            address: address.into(),
            open,
        }
    }

    /// The address whose connections go through this server's streams.
    pub fn address(&self) -> &str {
        &self.address
    }

    pub(crate) fn open(&self) -> io::Result<Box<dyn ByteStream>> {
        (self.open)()
    }
}
