//! `lode dev`: a whole local cluster in one process on loopback, with no
//! configuration, keeping its data across restarts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;

use lode_node::config::{Membership, NodeConfig};
use lode_node::http::{HttpConfig, HttpServer};
use lode_node::node::Node;

#[derive(Args, Debug)]
pub struct DevArguments {
    /// Members to run.
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// Members listen on base-port+1 … base-port+N.
    #[arg(long, default_value_t = 7100)]
    pub base_port: u16,
    #[arg(long, default_value = "./lode-data")]
    pub data_dir: PathBuf,
    /// The KV Connect access token (`LODE_ACCESS_TOKEN`; default:
    /// `lode-dev-token`). Member N serves HTTP on base-port+100+N.
    #[arg(
        long,
        env = "LODE_ACCESS_TOKEN",
        default_value = "lode-dev-token",
        hide_env_values = true
    )]
    pub access_token: String,
}

/// Most members `lode dev` runs.
pub const DEV_NODES_MAX: u64 = 9;

pub async fn run(arguments: DevArguments) -> Result<(), anyhow::Error> {
    if arguments.nodes == 0 || arguments.nodes > DEV_NODES_MAX {
        anyhow::bail!("--nodes must be 1 to {DEV_NODES_MAX} (dev_nodes_max)");
    }
    let members: BTreeMap<u64, String> = (1..=arguments.nodes)
        .map(|id| (id, format!("127.0.0.1:{}", u64::from(arguments.base_port) + id)))
        .collect();
    let stop = super::helpers::StopSignal::install();
    let mut nodes = Vec::new();
    let mut http_ports = Vec::new();
    for (id, address) in &members {
        let listener = lode_client::facade::bind(address).await?;
        let data_dir = arguments.data_dir.join(format!("node-{id}"));
        let config = NodeConfig::new(*id, address.clone(), data_dir, Membership::Bootstrap(members.clone()));
        let node = Node::start(config, listener).await?;
        let http_address = format!("127.0.0.1:{}", u64::from(arguments.base_port) + 100 + id);
        let http = HttpServer::start(
            lode_client::facade::bind(&http_address).await?,
            HttpConfig {
                node_address: node.address().to_owned(),
                access_token: arguments.access_token.clone(),
            },
        )?;
        http_ports.push(http);
        nodes.push(node);
    }
    let endpoints: Vec<&str> = members.values().map(String::as_str).collect();
    let endpoints = endpoints.join(",");
    println!(
        "Lode dev cluster: {} members, data in {}",
        arguments.nodes,
        arguments.data_dir.display()
    );
    for (id, address) in &members {
        println!("  member {id}: {address}");
    }
    println!();
    println!("Try it from another terminal:");
    println!("  export LODE_ENDPOINTS={endpoints}");
    println!("  lode kv set config greeting hello");
    println!("  lode kv get config greeting");
    println!("  lode cluster status");
    if let Some(http) = http_ports.first() {
        println!();
        println!("Deno KV (KV Connect), any member's HTTP port:");
        println!("  DENO_KV_ACCESS_TOKEN=<token> deno run --unstable-kv app.ts");
        println!("  with Deno.openKv(\"http://{}\")", http.address());
        println!("  (the token is --access-token or LODE_ACCESS_TOKEN; by default lode-dev-token)");
    }
    println!("Stop with Ctrl-C; the data stays for the next start.");
    stop.wait().await;
    for http in http_ports {
        http.shutdown().await;
    }
    for node in nodes {
        node.shutdown().await;
    }
    Ok(())
}
