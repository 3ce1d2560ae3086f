//! The command-line contract that scripts and docs rely on.

mod auth;
mod bench;
mod bench_cpu;
mod bench_http;
mod bench_kv_connect;
mod bench_lease;
mod bench_slow;
mod bench_state_http;
mod certificates;
mod dev;
mod helpers;
mod kv;
mod lease;
mod logging;
mod open_files;
mod scale;
mod snapshot;
mod stateful_set;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lode_client::LodeError;

use lode_client::protocol::MemberAddresses;
use lode_node::config::NodeConfig;
use lode_node::node::{Listeners, Node};
use lode_node::tls::{MemberTls, TlsFiles};

use helpers::{parse_bytes, parse_duration, parse_snapshot_log_bytes, print_json, Endpoints, StopSignal};

#[derive(Parser, Debug)]
#[command(
    name = "lode",
    version,
    about = "A replicated key-value store for coordination state"
)]
pub struct Arguments {
    #[command(subcommand)]
    pub command: Commands,
    /// Log filter (tracing's env-filter syntax); `RUST_LOG` also works.
    #[arg(long, global = true, env = "LODE_LOG")]
    pub log: Option<String>,
    /// Logs as text lines (coloured on a terminal only) or one JSON object
    /// per line.
    #[arg(long, global = true, env = "LODE_LOG_FORMAT", value_enum, default_value_t = logging::LogFormat::Text)]
    pub log_format: logging::LogFormat,
}

#[derive(Subcommand, Debug)]
pub enum Commands {
    /// Run one cluster member.
    Node(Box<NodeArguments>),
    /// Run a local cluster on loopback with no configuration.
    Dev(dev::DevArguments),
    /// Read and write entries.
    #[command(subcommand)]
    Kv(kv::KvCommand),
    /// Acquire, renew, release and show leases with fencing tokens.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Follow the change feed: one JSON line per change, in commit order.
    Changes(ChangesArguments),
    /// Inspect and change the cluster's membership.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Measure throughput and latency against a running cluster.
    Bench(bench::BenchArguments),
    /// Create a cluster CA and issue member and client certificates.
    #[command(subcommand)]
    Tls(certificates::TlsCommand),
    /// Manage users, roles, grants and tokens.
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// Back up a cluster's state to a file, inspect a backup, restore one
    /// into a new cluster.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
}

#[derive(Args, Debug)]
pub struct NodeArguments {
    /// This member's id (1 or more), or --id-from-hostname.
    #[arg(long, required_unless_present = "id_from_hostname", conflicts_with = "id_from_hostname",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub id: Option<u64>,
    /// Take the id from a StatefulSet pod's name in `$HOSTNAME`: its
    /// ordinal plus one (`lode-0` is member 1).
    #[arg(long)]
    pub id_from_hostname: bool,
    /// Address to serve clients on.
    #[arg(long)]
    pub listen: String,
    /// Address clients should use (defaults to --listen).
    #[arg(long)]
    pub advertise: Option<String>,
    /// Address to serve the other members on: Raft, snapshots and
    /// forwarded requests.
    #[arg(long)]
    pub peer_listen: String,
    /// Address the other members should use (defaults to --peer-listen).
    #[arg(long, conflicts_with = "peer_advertise_template")]
    pub peer_advertise: Option<String>,
    /// The peer address of the member with ordinal `{ordinal}` (id
    /// `{ordinal}` + 1), a stable DNS name such as
    /// `lode-{ordinal}.lode-peers.NAMESPACE.svc:7001`, never a pod IP:
    /// names are looked up at every dial. This member advertises its own;
    /// with --founders it also names the founders.
    #[arg(long)]
    pub peer_advertise_template: Option<String>,
    /// The client address this member advertises, with `{ordinal}` as in
    /// --peer-advertise-template.
    #[arg(long, conflicts_with = "advertise")]
    pub advertise_template: Option<String>,
    /// The members with ordinals 0 to N-1 found the cluster (the first
    /// initializes it, once); a member with a higher ordinal joins through
    /// --join (default: the first founder) as a learner and is promoted
    /// once it keeps up. Needs --peer-advertise-template.
    #[arg(long, requires = "peer_advertise_template", conflicts_with_all = ["peers", "cluster_id", "force_new_cluster"],
          value_parser = clap::value_parser!(u64).range(1..))]
    pub founders: Option<u64>,
    /// A member its cluster no longer lists (it was removed, and now
    /// starts again on its old volume or an empty one) deletes its old
    /// data and joins again as a new learner, through --join or the first
    /// founder, instead of refusing to start.
    #[arg(long)]
    pub rejoin_when_removed: bool,
    /// Print the id, addresses and way into the cluster these flags give
    /// (on this host) as JSON, and exit without serving.
    #[arg(long)]
    pub print_identity: bool,
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Founding members by peer address: `1=host:port,2=host:port,...`.
    #[arg(long, conflicts_with_all = ["join", "cluster_id"])]
    pub peers: Option<String>,
    /// The peer address of a member of a running cluster to join through.
    #[arg(long, conflicts_with = "cluster_id")]
    pub join: Option<String>,
    /// Tells apart clusters founded with the same --peers list; part of
    /// the founding cluster id.
    #[arg(long, default_value = lode_node::config::CLUSTER_NAME_DEFAULT)]
    pub cluster_name: String,
    /// For a new member added with `lode cluster add`: the id of the
    /// cluster it waits for (`lode cluster status` shows it). It answers
    /// no other cluster's members.
    #[arg(long)]
    pub cluster_id: Option<lode_client::protocol::ClusterId>,
    /// The state's size past which this member, as leader, refuses writes
    /// that would grow it (`quota_exceeded`); deletes go on, and writes
    /// resume by themselves once compaction reclaims space. `8GiB`,
    /// `512MiB` or bytes.
    #[arg(long, default_value = "8GiB", value_parser = parse_bytes)]
    pub storage_bytes_max: u64,
    /// The free space on the data volume under which this member, as
    /// leader, refuses writes that would grow the state (`disk full`)
    /// before RocksDB runs out of room; deletes go on, and writes resume
    /// by themselves once space returns. Room for RocksDB's write-ahead
    /// logs and a compaction.
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    pub disk_free_bytes_min: u64,
    /// Quorum-loss recovery, on one surviving voter: make it the only
    /// voter of a new cluster (new cluster id) with every entry it holds,
    /// then add fresh members back. Does nothing while a quorum of the
    /// voters answers; remove the flag once recovered.
    #[arg(long, conflicts_with_all = ["peers", "join", "cluster_id"])]
    pub force_new_cluster: bool,
    /// How far behind the leader's log a learner (a member added by
    /// `lode cluster add` or `--join`) may be and count as caught up.
    #[arg(long, default_value_t = 1_000)]
    pub promote_lag_entries_max: u64,
    /// How long a learner must stay caught up before this member, as
    /// leader, promotes it to voter (one learner at a time).
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub promote_caught_up: Duration,
    /// Applied entries between snapshots (the log before a snapshot is purged).
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_logs_max: u64,
    /// Bytes of log since the last snapshot at which this member takes
    /// another, however few entries they are: large values fill the log
    /// long before --snapshot-logs-max entries. At least `1MiB`.
    #[arg(long, default_value = "64MiB", value_parser = parse_snapshot_log_bytes)]
    pub snapshot_log_bytes_max: u64,
    /// The longest lease this member grants as leader, in milliseconds.
    #[arg(long, default_value_t = 300_000)]
    pub lease_ttl_ms_max: u64,
    /// How long a mutation's op id stays deduplicated (1m to 7d).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub dedup_retention: Duration,
    /// Change events kept for subscribers (at least 1). A large log runs
    /// up to 1/64 of this (at most 1,024 events) over before one trim
    /// takes it back.
    #[arg(long, default_value_t = lode_client::limits::CHANGE_EVENTS_MAX_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub change_log_events_max: u64,
    /// Bytes of change events kept for subscribers (at least 1); up to
    /// 1/64 more before a trim.
    #[arg(long, default_value_t = lode_client::limits::CHANGE_BYTES_MAX_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub change_log_bytes_max: u64,
    /// Serve KV Connect (for `Deno.openKv` and `@deno/kv`), the State API,
    /// health, readiness and metrics over HTTP on this address. Callers
    /// present a user's token, or the shared access token while the cluster
    /// has no user.
    #[arg(long)]
    pub http: Option<String>,
    /// The `host:port` KV Connect's endpoint URLs name (defaults to --http).
    #[arg(long, requires = "http")]
    pub http_advertise: Option<String>,
    /// The role a caller of `/metrics` must hold (a cluster admin always
    /// may); without it, metrics are open like `/health`. They show Raft
    /// positions and request counts, never data.
    #[arg(long, requires = "http")]
    pub metrics_role: Option<String>,
    /// How many entries behind the leader's applied index a member may be
    /// and still answer `/ready` with 200.
    #[arg(long, requires = "http", default_value_t = lode_node::http::readiness::READY_LAG_ENTRIES_MAX_DEFAULT)]
    pub ready_lag_entries_max: u64,
    /// The shared bearer token of the HTTP port (Deno reads it from
    /// `DENO_KV_ACCESS_TOKEN`), accepted while the cluster has no user.
    /// Prefer --access-token-file: a flag's value shows in `ps`.
    #[arg(
        long,
        env = "LODE_ACCESS_TOKEN",
        hide_env_values = true,
        conflicts_with = "access_token_file"
    )]
    pub access_token: Option<String>,
    /// A file holding the shared bearer token of the HTTP port.
    #[arg(long, env = "LODE_ACCESS_TOKEN_FILE")]
    pub access_token_file: Option<PathBuf>,
    #[command(flatten)]
    pub tls: NodeTlsArguments,
    /// The first admin's token (`lode auth new-token`): while the cluster
    /// has no user, the leader creates user `root` holding it, and from
    /// then on every client call needs a token.
    #[arg(long, env = "LODE_BOOTSTRAP_TOKEN_FILE")]
    pub bootstrap_token_file: Option<PathBuf>,
    /// Serve in the clear on addresses other hosts can reach. Without TLS
    /// anyone who reaches the peer port can vote, append to the log and
    /// change the membership; use only on a network where every host is
    /// trusted. Logged as a warning at every start.
    #[arg(long)]
    pub insecure: bool,
    /// Connections the client port keeps open at once; more are closed.
    #[arg(long, default_value_t = lode_node::accept::CLIENT_CONNECTIONS_MAX_DEFAULT)]
    pub client_connections_max: usize,
    /// Calls the client port runs at once, over all its connections (long
    /// polls included); more are refused at once as `unavailable`.
    #[arg(long, default_value_t = lode_node::accept::CLIENT_REQUESTS_IN_FLIGHT_MAX_DEFAULT)]
    pub client_requests_in_flight_max: usize,
    /// Connections the peer port keeps open at once; more are closed.
    #[arg(long, default_value_t = lode_node::accept::PEER_CONNECTIONS_MAX_DEFAULT)]
    pub peer_connections_max: usize,
    /// Linearizable reads that may wait for the next read-index round
    /// (on a leader or a follower); more are refused at once as
    /// `unavailable`.
    #[arg(long, default_value_t = lode_node::reads::READS_WAITING_MAX_DEFAULT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub reads_waiting_max: usize,
    /// Connections the HTTP port keeps open at once; more are closed.
    #[arg(long, default_value_t = lode_node::accept::HTTP_CONNECTIONS_MAX_DEFAULT)]
    pub http_connections_max: usize,
    /// Longest TLS handshake on any port.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub tls_handshake_timeout: Duration,
    /// How long a connection with no call running may stay silent.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub connection_idle_timeout: Duration,
    /// Longest time an HTTP request's header may take to arrive.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub http_header_timeout: Duration,
}

/// A member's TLS: the cluster CA and the member's certificate and key,
/// for all its ports and towards its peers. Re-read when the files change.
#[derive(Args, Debug)]
pub struct NodeTlsArguments {
    /// The cluster CA certificate (PEM): it must have signed every
    /// member's certificate, and any client certificate presented.
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// This member's certificate chain (PEM), valid for the names or
    /// addresses clients and peers dial, for server and client use.
    #[arg(long, requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires_all = ["tls_ca", "tls_cert"])]
    pub tls_key: Option<PathBuf>,
    /// Names (DNS or IP) a peer's certificate must be valid for, any of
    /// them (default: any certificate the cluster CA signed).
    #[arg(long, value_delimiter = ',', requires = "tls_ca")]
    pub peer_names_allowed: Vec<String>,
}

impl NodeTlsArguments {
    fn load(&self) -> Result<Option<Arc<MemberTls>>, anyhow::Error> {
        let (Some(ca), Some(certificate), Some(key)) = (&self.tls_ca, &self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            ca: ca.clone(),
            certificate: certificate.clone(),
            key: key.clone(),
            peer_names_allowed: self.peer_names_allowed.clone(),
        };
        Ok(Some(MemberTls::load(files)?))
    }
}

#[derive(Args, Debug)]
pub struct ChangesArguments {
    /// Start after this position, `INDEX` or `INDEX.SEQUENCE` (default: the
    /// oldest retained change).
    #[arg(long)]
    pub after: Option<String>,
    /// Only namespaces whose names start with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Stop after this many changes (default: follow until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

/// Parses a change position: `INDEX` (after every change of that entry) or
/// `INDEX.SEQUENCE`.
pub fn parse_change_position(text: &str) -> Result<(u64, u32), String> {
    let invalid = || format!("position {text:?} is not INDEX or INDEX.SEQUENCE");
    match text.split_once('.') {
        Some((index, sequence)) => Ok((
            index.parse().map_err(|_| invalid())?,
            sequence.parse().map_err(|_| invalid())?,
        )),
        None => Ok((text.parse().map_err(|_| invalid())?, u32::MAX)),
    }
}

async fn run_changes(arguments: ChangesArguments) -> Result<ExitCode, LodeError> {
    use futures::StreamExt;
    let after = match &arguments.after {
        Some(text) => parse_change_position(text).map_err(LodeError::Invalid)?,
        None => (0, 0),
    };
    let client = arguments.endpoints.client()?;
    let mut stream = client
        .changes(after)
        .namespace_prefix(arguments.prefix.clone())
        .stream()
        .boxed();
    let mut printed = 0;
    while arguments.count.is_none_or(|count| printed < count) {
        let Some(event) = stream.next().await else {
            break;
        };
        let event = event?;
        let text = |value: &Option<Vec<u8>>| value.as_ref().map(|value| String::from_utf8_lossy(value).into_owned());
        let line = serde_json::json!({
            "position": format!("{}.{}", event.index, event.sequence),
            "namespace": event.namespace,
            "key": String::from_utf8_lossy(&event.key),
            "kind": format!("{:?}", event.kind).to_lowercase(),
            "old_value": text(&event.old_value),
            "new_value": text(&event.new_value),
            "version": event.version,
        });
        println!("{line}");
        printed += 1;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Leader, term, members and each member's applied index.
    Status {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Add a member (learner until caught up, then voter), by its peer
    /// address; it publishes its client address itself.
    Add {
        id: u64,
        peer_address: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Remove a member. A voter's removal is refused when the voters left
    /// that answer the leader would be no quorum of the voters left.
    Remove {
        id: u64,
        /// Remove it anyway: the cluster may stop until enough voters
        /// answer again.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Shrink to members 1..=N before a StatefulSet's scale-down: removes
    /// the members with higher ids, highest first, each removal committed
    /// before the next; refused when the voters kept that answer would be
    /// no quorum of them. Never run it from a preStop hook: a restart is
    /// not a removal.
    Scale {
        /// The members to keep: ids 1 to N.
        #[arg(long)]
        replicas: u64,
        #[command(flatten)]
        endpoints: Endpoints,
    },
}

pub fn init_logging(arguments: &Arguments) {
    let member = matches!(arguments.command, Commands::Node(_) | Commands::Dev(_));
    logging::init(arguments.log.clone(), arguments.log_format, member);
}

/// Parses `1=host:port,2=host:port`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut peers = BTreeMap::new();
    for item in text.split(',').filter(|item| !item.trim().is_empty()) {
        let (id, address) = item
            .split_once('=')
            .ok_or_else(|| format!("peer {item:?} is not ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("peer id {id:?} is not a number"))?;
        if peers.insert(id, address.trim().to_owned()).is_some() {
            return Err(format!("peer id {id} is given twice"));
        }
    }
    if peers.is_empty() {
        return Err("--peers names no member".to_owned());
    }
    Ok(peers)
}

/// Runs a member until SIGTERM or Ctrl-C, then shuts it down gracefully.
async fn run_node(arguments: NodeArguments) -> Result<(), anyhow::Error> {
    let hostname = std::env::var("HOSTNAME").unwrap_or_default();
    let identity = stateful_set::Identity::of(&arguments, &hostname).map_err(anyhow::Error::msg)?;
    if arguments.print_identity {
        print_json(&identity.to_json());
        return Ok(());
    }
    let stateful_set::Identity {
        id,
        peer_advertise,
        advertise: client_advertise,
        membership,
        rejoin_through,
    } = identity;
    let stop = StopSignal::install();
    open_files::raise_open_files_limit(
        [
            arguments.client_connections_max,
            arguments.peer_connections_max,
            arguments.http_connections_max,
        ]
        .iter()
        .map(|cap| *cap as u64)
        .sum(),
    );
    let tls = arguments.tls.load()?;
    let listeners = Listeners {
        client: lode_client::facade::bind(&arguments.listen).await?,
        peer: lode_client::facade::bind(&arguments.peer_listen).await?,
    };
    let http_listener = match &arguments.http {
        Some(address) => Some(lode_client::facade::bind(address).await?),
        None => None,
    };
    if tls.is_none() {
        let mut bound = vec![listeners.client.local_addr()?, listeners.peer.local_addr()?];
        if let Some(listener) = &http_listener {
            bound.push(listener.local_addr()?);
        }
        refuse_open_ports_in_the_clear(&bound, arguments.insecure)?;
    }
    let advertise = MemberAddresses {
        peer: match peer_advertise {
            Some(address) => address,
            None => listeners.peer.local_addr()?.to_string(),
        },
        client: match client_advertise {
            Some(address) => address,
            None => listeners.client.local_addr()?.to_string(),
        },
    };
    let mut config = NodeConfig::new(id, advertise, arguments.data_dir.clone(), membership);
    config.rejoin_through = rejoin_through;
    config.cluster_name = arguments.cluster_name.clone();
    config.cluster_id = arguments.cluster_id;
    config.tls = tls.clone();
    config.client_connections_max = arguments.client_connections_max;
    config.client_requests_in_flight_max = arguments.client_requests_in_flight_max;
    config.reads_waiting_max = arguments.reads_waiting_max;
    config.peer_connections_max = arguments.peer_connections_max;
    config.tls_handshake_ms_max = milliseconds(arguments.tls_handshake_timeout);
    config.connection_idle_ms_max = milliseconds(arguments.connection_idle_timeout);
    config.snapshot_logs_max = arguments.snapshot_logs_max;
    config.snapshot_log_bytes_max = arguments.snapshot_log_bytes_max;
    config.lease_ttl_ms_max = arguments.lease_ttl_ms_max;
    config.dedup_retention_ms = milliseconds(arguments.dedup_retention);
    config.change_log_events_max = arguments.change_log_events_max;
    config.change_log_bytes_max = arguments.change_log_bytes_max;
    config.storage_bytes_max = arguments.storage_bytes_max;
    config.disk_free_bytes_min = arguments.disk_free_bytes_min;
    config.promote_lag_entries_max = arguments.promote_lag_entries_max;
    config.promote_caught_up_ms = milliseconds(arguments.promote_caught_up);
    config.force_new_cluster = arguments.force_new_cluster;
    if let Some(path) = &arguments.bootstrap_token_file {
        config.bootstrap_token = Some(helpers::read_token_file(path).map_err(anyhow::Error::msg)?);
    }
    let node = Node::start(config, listeners).await?;
    let access_token = http_access_token(&arguments)?;
    let http = match http_listener {
        Some(listener) => {
            let mut config = lode_node::http::HttpConfig::new(node.address(), access_token);
            config.member_token = Some(node.member_token());
            config.in_process = Some(node.in_process());
            config.auth = Some(node.auth_view());
            config.metrics_role = arguments.metrics_role.clone();
            config.ready_lag_entries_max = arguments.ready_lag_entries_max;
            config.metrics = Some(node.metrics_source());
            config.advertise = arguments.http_advertise.clone();
            config.tls = tls;
            config.connections_max = arguments.http_connections_max;
            config.tls_handshake_ms_max = milliseconds(arguments.tls_handshake_timeout);
            config.header_read_ms_max = milliseconds(arguments.http_header_timeout);
            Some(lode_node::http::HttpServer::start(listener, config)?)
        }
        None => None,
    };
    // Raft stops by itself only on a storage failure (a full disk, a
    // failed fsync) or a bug. The member then exits rather than linger
    // unable to serve: its supervisor restarts it, and a restart reads
    // storage afresh, acknowledging nothing it had not made durable.
    let fatal = tokio::select! {
        biased;
        () = stop.wait() => None,
        fatal = node.raft_stopped() => Some(fatal),
    };
    match &fatal {
        None => {
            tracing::info!("stop signal received; shutting down");
            // Before the HTTP port closes, so its callers' writes move on too.
            node.hand_off_leadership().await;
        }
        Some(_) => tracing::info!("raft stopped; shutting down"),
    }
    if let Some(http) = http {
        http.shutdown().await;
    }
    node.shutdown().await;
    match fatal {
        None => Ok(()),
        Some(fatal) => Err(anyhow::anyhow!(
            "raft stopped ({fatal}); this member exits so that its supervisor restarts it once the fault is fixed"
        )),
    }
}

fn milliseconds(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Without TLS, a port another host can reach is refused unless the
/// operator said `--insecure`, and then warned about at every start.
fn refuse_open_ports_in_the_clear(bound: &[std::net::SocketAddr], insecure: bool) -> Result<(), anyhow::Error> {
    let open: Vec<String> = bound
        .iter()
        .filter(|address| !address.ip().is_loopback())
        .map(ToString::to_string)
        .collect();
    if open.is_empty() {
        return Ok(());
    }
    if !insecure {
        anyhow::bail!(
            "refusing to serve {} in the clear: give --tls-ca, --tls-cert and --tls-key, \
             or --insecure on a network where every host is trusted",
            open.join(", ")
        );
    }
    tracing::warn!(
        addresses = %open.join(", "),
        "serving without TLS on addresses other hosts can reach (--insecure): anyone who reaches \
         the peer port can vote, append to the log and change the membership"
    );
    Ok(())
}

async fn run_cluster(command: ClusterCommand) -> Result<ExitCode, LodeError> {
    let (status, json) = match command {
        ClusterCommand::Status { json, endpoints } => (endpoints.client()?.cluster_status().await?, json),
        ClusterCommand::Add {
            id,
            peer_address,
            endpoints,
        } => (endpoints.client()?.add_member(id, peer_address).await?, false),
        ClusterCommand::Remove { id, force, endpoints } => {
            let client = endpoints.client()?;
            let status = if force {
                eprintln!("lode: removing member {id} without checking that the voters left reach a quorum");
                client.remove_member_forced(id).await?
            } else {
                client.remove_member(id).await?
            };
            (status, false)
        }
        ClusterCommand::Scale { replicas, endpoints } => (scale::scale(&endpoints.client()?, replicas).await?, false),
    };
    if json {
        print_json(&serde_json::to_value(&status).unwrap_or_default());
    } else {
        println!(
            "leader: {}",
            status
                .leader
                .map(|id| id.to_string())
                .unwrap_or_else(|| "none".to_owned())
        );
        println!("term: {}", status.term);
        match status.cluster_id {
            Some(cluster) => println!("cluster: {cluster}"),
            None => println!("cluster: none yet"),
        }
        println!("members:");
        for member in &status.members {
            let role = if member.voter { "voter" } else { "learner" };
            let show = |index: Option<u64>| index.map(|index| index.to_string()).unwrap_or_else(|| "-".to_owned());
            let applied = match member.applied_index {
                Some(index) => index.to_string(),
                None => "unreachable".to_owned(),
            };
            println!(
                "  {} {} peer={} {role} applied={applied} matched={}",
                member.id,
                member.address,
                member.peer_address,
                show(member.matched_index)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Most bytes of an access token file read.
const ACCESS_TOKEN_FILE_BYTES_MAX: u64 = 4096;

/// The HTTP port's shared token, from the flag or its file (trimmed).
fn http_access_token(arguments: &NodeArguments) -> Result<Option<lode_client::protocol::AccessToken>, anyhow::Error> {
    use std::io::Read;
    let text = match (&arguments.access_token, &arguments.access_token_file) {
        (Some(token), _) => token.clone(),
        (None, Some(path)) => {
            let mut text = String::new();
            std::fs::File::open(path)
                .map_err(|error| anyhow::anyhow!("access token file {}: {error}", path.display()))?
                .take(ACCESS_TOKEN_FILE_BYTES_MAX)
                .read_to_string(&mut text)
                .map_err(|error| anyhow::anyhow!("access token file {}: {error}", path.display()))?;
            text
        }
        (None, None) => return Ok(None),
    };
    let text = text.trim();
    if text.is_empty() {
        anyhow::bail!("the HTTP access token is empty");
    }
    Ok(Some(lode_client::protocol::AccessToken(text.to_owned())))
}

pub async fn run(arguments: Arguments) -> ExitCode {
    let result: Result<ExitCode, String> = match arguments.command {
        Commands::Node(node) => run_node(*node)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(|error| format!("{error:#}")),
        Commands::Dev(dev) => dev::run(dev)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(|error| format!("{error:#}")),
        Commands::Tls(command) => certificates::run(command)
            .map(|()| ExitCode::SUCCESS)
            .map_err(|error| error.to_string()),
        Commands::Lease(command) => lease::run(command).await.map_err(|error| error.to_string()),
        Commands::Auth(command) => auth::run(command).await,
        Commands::Snapshot(command) => snapshot::run(command).await,
        Commands::Changes(arguments) => run_changes(arguments).await.map_err(|error| error.to_string()),
        Commands::Kv(command) => kv::run(command).await.map_err(|error| error.to_string()),
        Commands::Cluster(command) => run_cluster(command).await.map_err(|error| error.to_string()),
        Commands::Bench(bench) => bench::run(bench)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(|error| format!("{error:#}")),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("lode: {message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_peer_lists_parse_or_say_why_not() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert!(parse_duration("5y").expect_err("unit").contains("use ms, s, m, h or d"));
        assert!(parse_duration("s").is_err());
        let peers = parse_peers("1=a:1, 2=b:2").expect("peers");
        assert_eq!(peers.get(&2).map(String::as_str), Some("b:2"));
        assert!(parse_peers("1=a:1,1=b:2").expect_err("twice").contains("twice"));
        assert!(parse_peers("x=a:1").expect_err("id").contains("not a number"));
        assert!(parse_peers("").expect_err("empty").contains("no member"));
        assert_eq!(parse_change_position("12.3"), Ok((12, 3)));
        assert_eq!(parse_change_position("12"), Ok((12, u32::MAX)));
        assert!(parse_change_position("x.1").is_err());
        assert_eq!(parse_bytes("8GiB"), Ok(8 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("8GB").expect_err("unit").contains("use B, KiB"));
        assert!(parse_bytes("99999999999TiB").expect_err("overflow").contains("over"));
        assert_eq!(parse_snapshot_log_bytes("1MiB"), Ok(1 << 20));
        assert!(parse_snapshot_log_bytes("1048575")
            .expect_err("under the minimum")
            .contains("under the least log size between snapshots, 1048576 bytes"));
    }
}
