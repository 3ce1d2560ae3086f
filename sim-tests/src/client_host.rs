//! The one simulated host every client of a run lives on: each workload,
//! the operator and the verifier run as a task of their own there, with
//! their own connections, as processes on one machine would.
//!
//! One host rather than one per client because turmoil's step visits every
//! link of every host each tick: with a host per client (about twenty
//! hosts, two hundred links) that visiting took most of a run's time, and
//! the clients were never the target of a fault (partitions and crashes
//! concern members; the client host is never crashed). Random link
//! failures still cut the client host off from one member at a time.

use std::future::Future;
use std::pin::Pin;

/// The host name of the clients.
pub const CLIENT_HOST: &str = "clients";

type Process = Pin<Box<dyn Future<Output = turmoil::Result>>>;

/// The clients of a run, gathered before the run starts.
#[derive(Default)]
pub struct ClientHost {
    processes: Vec<(String, Process)>,
}

impl ClientHost {
    /// Adds a client, started with the others in the order added.
    pub fn add(&mut self, name: impl Into<String>, process: impl Future<Output = turmoil::Result> + 'static) {
        self.processes.push((name.into(), Box::pin(process)));
    }

    /// Puts the clients on their host. The host's software ends when every
    /// client has; a client's error ends the run with the client's name.
    pub fn install(self, sim: &mut turmoil::Sim<'_>) {
        let processes = self.processes;
        sim.client(CLIENT_HOST, async move {
            let running: Vec<_> = processes
                .into_iter()
                .map(|(name, process)| (name, tokio::task::spawn_local(process)))
                .collect();
            for (name, task) in running {
                match task.await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => return Err(format!("client {name}: {error}").into()),
                    Err(error) => return Err(format!("client {name} panicked: {error}").into()),
                }
            }
            Ok(())
        });
    }
}
