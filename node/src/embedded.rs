//! Embedded mode: a single-member cluster inside the application's process,
//! with RocksDB on disk and the same SDK as a remote cluster, for
//! applications and tests that want no separate server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use lode_client::protocol::MemberAddresses;
use lode_client::{Client, ClientOptions};

use crate::config::{Membership, NodeConfig};
use crate::node::{Listeners, Node};

/// How long opening waits for the member to lead its cluster.
pub const EMBEDDED_START_WAIT: Duration = Duration::from_secs(30);

/// An open embedded store. It dereferences to a [`Client`], so every SDK
/// call works on it unchanged.
pub struct Lode {
    node: Node,
    client: Client,
}

impl std::ops::Deref for Lode {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Lode {
    /// Opens (or creates) the store under `directory`. The member serves on
    /// loopback ports of its own choosing (client and peer), reachable only
    /// from this host.
    pub async fn open_embedded(directory: impl Into<PathBuf>) -> Result<Lode, anyhow::Error> {
        Self::open_embedded_with(directory, ClientOptions::default()).await
    }

    /// Opens the store with explicit SDK options (timeouts, default stream).
    pub async fn open_embedded_with(
        directory: impl Into<PathBuf>,
        options: ClientOptions,
    ) -> Result<Lode, anyhow::Error> {
        let listeners = Listeners {
            client: lode_client::facade::bind("127.0.0.1:0").await?,
            peer: lode_client::facade::bind("127.0.0.1:0").await?,
        };
        let advertise = MemberAddresses {
            peer: listeners.peer.local_addr()?.to_string(),
            client: listeners.client.local_addr()?.to_string(),
        };
        let address = advertise.client.clone();
        let members = BTreeMap::from([(1, advertise.peer.clone())]);
        let config = NodeConfig::new(1, advertise, directory, Membership::Bootstrap(members));
        let node = Node::start(config, listeners).await?;
        node.raft()
            .wait(Some(EMBEDDED_START_WAIT))
            .current_leader(1, "the embedded member leads")
            .await?;
        let client = Client::with_options([address], options)?;
        Ok(Lode { node, client })
    }

    /// The client address the member serves on (loopback).
    pub fn address(&self) -> &str {
        self.node.address()
    }

    /// The SDK client of this store.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Finishes in-flight requests and closes the store.
    pub async fn close(self) {
        self.node.shutdown().await;
    }
}
