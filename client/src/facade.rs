//! The one door through which Lode reads the wall clock, draws random
//! numbers and opens sockets, so that a deterministic simulation can replace
//! all three.
//!
//! Timers go through `tokio::time`, which a simulation drives. Wall-clock
//! time (command stamps, TTLs, expiry checks on reads), randomness
//! (operation ids) and TCP connections and listeners come from here: a
//! process uses the system's unless it installs another environment first.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncWrite};

/// A boxed future of the environment's.
pub type EnvironmentFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A byte stream between two endpoints: a TCP connection, or its simulated
/// stand-in.
pub trait ByteStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> ByteStream for T {}

/// A listening socket.
pub trait Listener: Send + 'static {
    /// The address the listener is bound to.
    fn local_addr(&self) -> io::Result<SocketAddr>;
    fn accept(&self) -> EnvironmentFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>>;
}

/// A source of time, randomness and sockets.
pub trait Environment: Send + Sync + 'static {
    /// Wall-clock time in microseconds since the Unix epoch.
    fn now_micros(&self) -> u64;
    /// A uniformly random 128-bit number.
    fn random_u128(&self) -> u128;
    /// Opens a connection to `address` (`host:port`).
    fn connect<'a>(&'a self, address: &'a str) -> EnvironmentFuture<'a, io::Result<Box<dyn ByteStream>>>;
    /// Listens on `address` (`host:port`; port 0 picks a free one).
    fn bind<'a>(&'a self, address: &'a str) -> EnvironmentFuture<'a, io::Result<Box<dyn Listener>>>;
}

struct TcpListener(tokio::net::TcpListener);

impl Listener for TcpListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn accept(&self) -> EnvironmentFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            // Small request-response frames: send them at once.
            stream.set_nodelay(true)?;
            Ok((Box::new(stream) as Box<dyn ByteStream>, peer))
        })
    }
}

/// The real clock and the thread RNG.
#[derive(Debug, Default)]
pub struct SystemEnvironment {
    /// Addresses dialled elsewhere than DNS says (`host:port` to
    /// `ip:port`), like curl's `--resolve`; empty but for tests that run
    /// several members on one host under the names a deployment gives them.
    resolve_overrides: std::collections::BTreeMap<String, String>,
}

/// Most entries `LODE_RESOLVE_OVERRIDE` may hold.
pub const RESOLVE_OVERRIDES_MAX: usize = 256;

/// The system's environment without overrides.
static SYSTEM: SystemEnvironment = SystemEnvironment {
    resolve_overrides: std::collections::BTreeMap::new(),
};

impl SystemEnvironment {
    /// The system's environment without overrides, for an environment
    /// that defers to it outside a simulation.
    pub fn plain() -> &'static SystemEnvironment {
        &SYSTEM
    }

    /// The system's environment with `overrides`: `host:port=ip:port`
    /// pairs, comma-separated. The name stays what TLS checks; only the
    /// socket goes to the other address.
    pub fn with_resolve_overrides(overrides: &str) -> Result<Self, String> {
        let mut resolve_overrides = std::collections::BTreeMap::new();
        for pair in overrides.split(',').filter(|pair| !pair.trim().is_empty()) {
            if resolve_overrides.len() == RESOLVE_OVERRIDES_MAX {
                return Err(format!(
                    "more than {RESOLVE_OVERRIDES_MAX} resolve overrides given (resolve_overrides_max)"
                ));
            }
            let (name, address) = pair
                .split_once('=')
                .ok_or_else(|| format!("resolve override {pair:?} is not HOST:PORT=IP:PORT"))?;
            let address: SocketAddr = address
                .trim()
                .parse()
                .map_err(|_| format!("resolve override {pair:?}: {address:?} is not IP:PORT"))?;
            resolve_overrides.insert(name.trim().to_owned(), address.to_string());
        }
        Ok(Self { resolve_overrides })
    }
}

impl Environment for SystemEnvironment {
    fn now_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_micros() as u64)
            .unwrap_or(0)
    }

    fn random_u128(&self) -> u128 {
        rand::random()
    }

    fn connect<'a>(&'a self, address: &'a str) -> EnvironmentFuture<'a, io::Result<Box<dyn ByteStream>>> {
        Box::pin(async move {
            // A name is looked up at every dial, so a member that moved
            // (a pod rescheduled under the same DNS name) is found again.
            let address = self.resolve_overrides.get(address).map_or(address, String::as_str);
            let stream = tokio::net::TcpStream::connect(address).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as Box<dyn ByteStream>)
        })
    }

    fn bind<'a>(&'a self, address: &'a str) -> EnvironmentFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let listener = tokio::net::TcpListener::bind(address).await?;
            Ok(Box::new(TcpListener(listener)) as Box<dyn Listener>)
        })
    }
}

static ENVIRONMENT: OnceLock<Box<dyn Environment>> = OnceLock::new();

/// Installs the process's environment. Only the first call wins, and only
/// before anything read the clock; returns false when it came too late.
pub fn install(environment: Box<dyn Environment>) -> bool {
    ENVIRONMENT.set(environment).is_ok()
}

fn environment() -> &'static dyn Environment {
    ENVIRONMENT.get_or_init(|| Box::<SystemEnvironment>::default()).as_ref()
}

/// Wall-clock time in microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    environment().now_micros()
}

/// A random 128-bit number.
pub fn random_u128() -> u128 {
    environment().random_u128()
}

/// Opens a connection to `address`.
pub async fn connect(address: &str) -> io::Result<Box<dyn ByteStream>> {
    environment().connect(address).await
}

/// Listens on `address`.
pub async fn bind(address: &str) -> io::Result<Box<dyn Listener>> {
    environment().bind(address).await
}
