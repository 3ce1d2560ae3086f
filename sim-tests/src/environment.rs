//! The simulated environment Lode's facade reads time, randomness and
//! sockets from while a simulation runs: turmoil's virtual clock and
//! network, and the seeded per-thread generator.
//!
//! Outside a simulation (no turmoil world on this thread) every call falls
//! through to the real system, so other tests in the same process keep
//! working.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use lode_client::facade::{self, ByteStream, Environment, EnvironmentFuture, Listener, SystemEnvironment};
use rand::RngCore;

/// The simulated clock starts here: 2026-01-01T00:00:00Z, so expiry
/// arithmetic sees realistic epoch times.
pub const EPOCH_SECONDS: u64 = 1_767_225_600;

struct SimulatedEnvironment;

struct SimulatedListener(turmoil::net::TcpListener);

impl Listener for SimulatedListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn accept(&self) -> EnvironmentFuture<'_, io::Result<(Box<dyn ByteStream>, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            Ok((Box::new(stream) as Box<dyn ByteStream>, peer))
        })
    }
}

impl Environment for SimulatedEnvironment {
    fn now_micros(&self) -> u64 {
        match turmoil::sim_elapsed() {
            Some(elapsed) => (Duration::from_secs(EPOCH_SECONDS) + elapsed).as_micros() as u64,
            None => SystemEnvironment::plain().now_micros(),
        }
    }

    fn random_u128(&self) -> u128 {
        if !turmoil::in_simulation() {
            return SystemEnvironment::plain().random_u128();
        }
        let mut generator = lode_raft_store::runtime::ThreadRng;
        (u128::from(generator.next_u64()) << 64) | u128::from(generator.next_u64())
    }

    fn connect<'a>(&'a self, address: &'a str) -> EnvironmentFuture<'a, io::Result<Box<dyn ByteStream>>> {
        if !turmoil::in_simulation() {
            return SystemEnvironment::plain().connect(address);
        }
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(address).await?;
            Ok(Box::new(stream) as Box<dyn ByteStream>)
        })
    }

    fn bind<'a>(&'a self, address: &'a str) -> EnvironmentFuture<'a, io::Result<Box<dyn Listener>>> {
        if !turmoil::in_simulation() {
            return SystemEnvironment::plain().bind(address);
        }
        Box::pin(async move {
            let listener = turmoil::net::TcpListener::bind(address).await?;
            Ok(Box::new(SimulatedListener(listener)) as Box<dyn Listener>)
        })
    }
}

/// Installs the simulated environment for this process. Idempotent; fails
/// only when something read the real clock through the facade first.
pub fn install() {
    static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let installed = *INSTALLED.get_or_init(|| facade::install(Box::new(SimulatedEnvironment)));
    assert!(
        installed,
        "the facade's environment was chosen before the simulation installed its own"
    );
}
