//! `lode dev`: a whole local cluster in one process on loopback, with no
//! configuration, keeping its data across restarts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;

use lode_client::protocol::MemberAddresses;
use lode_node::config::{Membership, NodeConfig};
use lode_node::http::{HttpConfig, HttpServer};
use lode_node::node::{Listeners, Node};
use lode_node::tls::{MemberTls, TlsFiles};

#[derive(Args, Debug)]
pub struct DevArguments {
    /// Members to run.
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// Member N serves clients on base-port+N, HTTP on base-port+100+N and
    /// its peers on base-port+200+N.
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
    /// Serve every port over TLS, with a CA and certificates made (once)
    /// in DATA_DIR/tls.
    #[arg(long)]
    pub tls: bool,
    /// Turn authentication on: a root token is made (once) in
    /// DATA_DIR/root.token, and every client call needs a token.
    #[arg(long)]
    pub auth: bool,
}

/// The root token in `path`, made on first use.
fn dev_root_token(path: &std::path::Path) -> Result<lode_types::auth::TokenParts, anyhow::Error> {
    if !path.exists() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let token = lode_client::auth::new_token();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(format!("{}\n", token.to_text()).as_bytes())?;
    }
    super::helpers::read_token_file(path).map_err(anyhow::Error::msg)
}

/// The CA and the members' certificate in `dir`, made on first use.
fn dev_certificates(dir: &std::path::Path) -> Result<std::sync::Arc<MemberTls>, anyhow::Error> {
    if !dir.join("ca.pem").exists() {
        super::certificates::create_ca(dir)?;
    }
    if !dir.join("member.pem").exists() {
        super::certificates::issue(dir, "member", &["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    }
    MemberTls::load(TlsFiles {
        ca: dir.join("ca.pem"),
        certificate: dir.join("member.pem"),
        key: dir.join("member-key.pem"),
        peer_names_allowed: Vec::new(),
    })
}

/// Most members `lode dev` runs.
pub const DEV_NODES_MAX: u64 = 9;

pub async fn run(arguments: DevArguments) -> Result<(), anyhow::Error> {
    if arguments.nodes == 0 || arguments.nodes > DEV_NODES_MAX {
        anyhow::bail!("--nodes must be 1 to {DEV_NODES_MAX} (dev_nodes_max)");
    }
    let port = |offset: u64, id: u64| format!("127.0.0.1:{}", u64::from(arguments.base_port) + offset + id);
    let members: BTreeMap<u64, String> = (1..=arguments.nodes).map(|id| (id, port(0, id))).collect();
    let founders: BTreeMap<u64, String> = (1..=arguments.nodes).map(|id| (id, port(200, id))).collect();
    let stop = super::helpers::StopSignal::install();
    // Every member of the process takes its default caps on each port.
    let connections_max = lode_node::accept::CLIENT_CONNECTIONS_MAX_DEFAULT
        + lode_node::accept::PEER_CONNECTIONS_MAX_DEFAULT
        + lode_node::accept::HTTP_CONNECTIONS_MAX_DEFAULT;
    super::open_files::raise_open_files_limit(arguments.nodes * connections_max as u64);
    let tls_dir = arguments.data_dir.join("tls");
    let tls = if arguments.tls {
        Some(dev_certificates(&tls_dir)?)
    } else {
        None
    };
    let root_token_path = arguments.data_dir.join("root.token");
    let root_token = if arguments.auth {
        std::fs::create_dir_all(&arguments.data_dir)?;
        Some(dev_root_token(&root_token_path)?)
    } else {
        None
    };
    let mut nodes = Vec::new();
    let mut http_ports = Vec::new();
    for (id, address) in &members {
        let listeners = Listeners {
            client: lode_client::facade::bind(address).await?,
            peer: lode_client::facade::bind(&founders[id]).await?,
        };
        let data_dir = arguments.data_dir.join(format!("node-{id}"));
        let advertise = MemberAddresses {
            peer: founders[id].clone(),
            client: address.clone(),
        };
        let mut config = NodeConfig::new(*id, advertise, data_dir, Membership::Bootstrap(founders.clone()));
        config.tls = tls.clone();
        config.bootstrap_token = root_token.clone();
        let node = Node::start(config, listeners).await?;
        let http_address = port(100, *id);
        let access_token = lode_client::protocol::AccessToken(arguments.access_token.clone());
        let mut http_config = HttpConfig::new(node.address(), Some(access_token));
        http_config.member_token = Some(node.member_token());
        http_config.in_process = Some(node.in_process());
        http_config.auth = Some(node.auth_view());
        http_config.metrics = Some(node.metrics_source());
        http_config.tls = tls.clone();
        let http = HttpServer::start(lode_client::facade::bind(&http_address).await?, http_config)?;
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
    if tls.is_some() {
        println!("  export LODE_TLS_CA={}", tls_dir.join("ca.pem").display());
    }
    if root_token.is_some() {
        println!("  export LODE_TOKEN_FILE={}", root_token_path.display());
    }
    println!("  lode kv set config greeting hello");
    println!("  lode kv get config greeting");
    println!("  lode cluster status");
    if let Some(http) = http_ports.first() {
        println!();
        println!("Deno KV (KV Connect), any member's HTTP port:");
        println!("  DENO_KV_ACCESS_TOKEN=<token> deno run --unstable-kv app.ts");
        let scheme = if tls.is_some() { "https" } else { "http" };
        println!("  with Deno.openKv(\"{scheme}://{}\")", http.address());
        if tls.is_some() {
            let ca = tls_dir.join("ca.pem");
            println!(
                "  and DENO_CERT={} (Deno) or NODE_EXTRA_CA_CERTS={} (@deno/kv)",
                ca.display(),
                ca.display()
            );
            println!(
                "Rust SDK: ClientOptions {{ tls: Some(ClientTls::from_files(\"{}\".as_ref(), None)?), .. }}",
                ca.display()
            );
        }
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
