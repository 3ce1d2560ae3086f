//! `lode bench`: closed-loop load from concurrent clients against a running
//! cluster, bounded in time and in request count, reporting throughput,
//! latency percentiles and errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use lode_client::tls::ClientTls;
use lode_client::{Bounds, Client};

use super::bench_cpu;
use super::bench_kv_connect::KvConnect;
use super::bench_lease::{self, HeldLease};
use super::bench_slow::{Outcome, SlowLog};
use super::bench_state_http::{StateHttp, BENCH_STATE_SCOPE};
use super::helpers::Endpoints;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Unconditional writes of random keys.
    Put,
    /// Linearizable reads of random keys (written first).
    Get,
    /// Read-modify-write: read a key's version, then write it with
    /// `expect_version` and commit. A version conflict is counted apart.
    Cas,
    /// One linearizable scan page of 100 entries from a random key.
    Scan,
    /// One linearizable get_many of 10 random keys.
    GetMany,
    /// One State API `update` (a set of a small JSON object) of a random
    /// key of scope `bench`, through the SDK on the client ports.
    StateUpdate,
    /// The same `update` as JSON over a member's HTTP port (`--http`),
    /// as a program without the SDK calls it.
    StateHttpUpdate,
    /// Acquire a lease on a random key, then release it: two writes.
    Lease,
    /// Renew a lease: each client holds one on a key of its own, taken
    /// before the run and released after it; one write.
    LeaseRenew,
    /// Enqueue a message, claim one, finish it: three writes.
    Queue,
    /// A Deno KV `set` of a random key through KV Connect (`--http`).
    DenoSet,
    /// A Deno KV strong `get` of a random key through KV Connect (every
    /// key written first; an absent one counts as an error).
    DenoGet,
}

impl Workload {
    /// Whether the workload calls a member's HTTP port rather than the
    /// client ports.
    fn is_http(self) -> bool {
        matches!(self, Workload::DenoSet | Workload::DenoGet | Workload::StateHttpUpdate)
    }

    /// The workload's name on the command line, e.g. `state-http-update`.
    fn flag_value(self) -> String {
        self.to_possible_value()
            .map_or_else(|| format!("{self:?}"), |value| value.get_name().to_owned())
    }
}

/// Entries per page in the scan workload.
pub const BENCH_SCAN_PAGE_ENTRIES: u32 = 100;
/// Keys per call in the get-many workload.
pub const BENCH_GET_MANY_KEYS: u64 = 10;

#[derive(Args, Debug)]
pub struct BenchArguments {
    #[command(flatten)]
    pub endpoints: Endpoints,
    /// Concurrent clients, each with one request in flight.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Connections the clients share, each a client of its own (the
    /// clients take them in turn); one per client when not given. etcd's
    /// benchmark tools share a few connections among many clients too.
    #[arg(long)]
    pub connections: Option<usize>,
    /// Spread the connections over the endpoints: the n-th starts at the
    /// n-th member instead of all at the first (a follower serves
    /// linearizable reads itself and forwards writes to the leader).
    #[arg(long)]
    pub spread: bool,
    /// How long to run, e.g. `20s`, `500ms`, `2m`.
    #[arg(long, default_value = "20s", value_parser = super::helpers::parse_duration)]
    pub duration: Duration,
    #[arg(long, value_enum, default_value = "put")]
    pub workload: Workload,
    #[arg(long, default_value_t = 256)]
    pub value_bytes: usize,
    /// Distinct keys the workload touches.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Stop after this many requests in all, even before the duration ends.
    #[arg(long, default_value_t = 10_000_000)]
    pub requests_max: u64,
    #[arg(long, default_value = "bench")]
    pub namespace: String,
    /// Print the result as one JSON object instead of text lines.
    #[arg(long)]
    pub json: bool,
    /// No progress line on standard error each second.
    #[arg(long)]
    pub quiet: bool,
    /// A member's HTTP port, `http://host:port` (or `https://` with
    /// --tls-ca), for the Deno KV and `state-http-update` workloads: each
    /// client opens a connection of its own there.
    #[arg(long, visible_alias = "kv-connect")]
    pub http: Option<String>,
    /// The bearer token for `--http` (the member's `--access-token`, or a
    /// user's token).
    #[arg(
        long,
        visible_alias = "kv-connect-token",
        env = "DENO_KV_ACCESS_TOKEN",
        hide_env_values = true
    )]
    pub http_token: Option<String>,
    /// Members' HTTP ports, `http://host:port,...` (`https://` with
    /// --tls-ca): their CPU time
    /// (`process_cpu_seconds_total`) is read before and after the run, and
    /// the CPU each request cost them, and the bench, is reported.
    #[arg(long, value_delimiter = ',')]
    pub cpu_of: Vec<String>,
    /// The token `--cpu-of` scrapes with, for members run with
    /// `--metrics-role`.
    #[arg(long, env = "LODE_METRICS_TOKEN", hide_env_values = true)]
    pub cpu_of_token: Option<String>,
    /// Print a line on standard error for each request that took at least
    /// this long (`2ms`, `1s`): when it began (Unix seconds), its
    /// latency, client, key and outcome, to set a tail beside what else
    /// happened then. At most 10,000 lines; the rest are counted.
    #[arg(long, value_parser = super::helpers::parse_duration)]
    pub log_slower_than: Option<Duration>,
}

impl BenchArguments {
    /// The connections the clients share: one each unless `--connections`.
    fn connections(&self) -> usize {
        self.connections.unwrap_or(self.clients)
    }

    /// `--http` and `--http-token` (`check` made sure both are given for
    /// an HTTP workload).
    fn http_target(&self) -> (&str, &str) {
        (
            self.http.as_deref().unwrap_or_default(),
            self.http_token.as_deref().unwrap_or_default(),
        )
    }
}

/// Bytes of random data values are cut from: each value starts at its own
/// offset, so stored values neither repeat nor compress, as real ones
/// mostly do not (a value of one repeated byte would shrink to nothing on
/// disk and in snapshots).
const VALUE_SOURCE_BYTES: usize = 64 * 1024;

/// Random values of one length, cut from one random buffer.
#[derive(Clone)]
struct Values {
    source: Arc<Vec<u8>>,
    length: usize,
}

impl Values {
    fn new(length: usize) -> Self {
        let mut source = Vec::with_capacity(VALUE_SOURCE_BYTES + length + 16);
        while source.len() < VALUE_SOURCE_BYTES + length {
            source.extend_from_slice(&lode_client::facade::random_u128().to_le_bytes());
        }
        Self {
            source: Arc::new(source),
            length,
        }
    }

    fn get(&self, sequence: u64) -> &[u8] {
        let offset = (sequence % VALUE_SOURCE_BYTES as u64) as usize;
        &self.source[offset..offset + self.length]
    }
}

/// Most concurrent clients a bench may start.
pub const BENCH_CLIENTS_MAX: usize = 4096;

/// What the workers count together, read by the progress line.
#[derive(Default)]
struct Counters {
    issued: AtomicU64,
    completed: AtomicU64,
    errors: AtomicU64,
    conflicts: AtomicU64,
    /// With `--log-slower-than`.
    slow: Option<SlowLog>,
}

pub async fn run(arguments: BenchArguments) -> Result<(), anyhow::Error> {
    check(&arguments)?;
    let values = Values::new(arguments.value_bytes);
    let arguments = Arc::new(arguments);
    match arguments.workload {
        Workload::Get | Workload::Cas | Workload::Scan | Workload::GetMany => prefill(&arguments, &values).await?,
        Workload::DenoGet => prefill_deno(&arguments, &values).await?,
        _ => {}
    }
    let counters = Arc::new(Counters {
        slow: arguments.log_slower_than.map(SlowLog::new),
        ..Counters::default()
    });
    let connections = arguments.connections();
    // The CA and token files are read once, not once per connection.
    let options = arguments.endpoints.client_options()?;
    let tls = options.tls.clone();
    let clients = (0..connections)
        .map(|connection| {
            let first = if arguments.spread { connection } else { 0 };
            Client::with_options(arguments.endpoints.starting_at(first), options.clone())
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Worker n renews the n-th lease.
    let mut leases = match arguments.workload {
        Workload::LeaseRenew => acquire_leases(&arguments, &clients).await?,
        _ => Vec::new(),
    }
    .into_iter();
    let started = tokio::time::Instant::now();
    let deadline = started + arguments.duration;
    let mut workers = Vec::new();
    for worker in 0..arguments.clients {
        let http = match arguments.workload.is_http() {
            true => Some(HttpSession::open(&arguments, tls.as_ref()).await?),
            false => None,
        };
        let client = Worker {
            client: clients[worker % connections].clone(),
            http,
            lease: leases.next(),
            arguments: arguments.clone(),
            counters: counters.clone(),
            values: values.clone(),
            worker,
        };
        workers.push(tokio::spawn(client.run(deadline)));
    }
    let cpu_before = read_cpu(&arguments, tls.as_ref()).await?;
    let progress = (!arguments.quiet).then(|| tokio::spawn(report_progress(counters.clone(), started)));
    let mut total = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut held = Vec::new();
    for worker in workers {
        let (histogram, lease) = worker.await?;
        total.add(histogram)?;
        held.extend(lease);
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
    }
    release_leases(&arguments, &clients, held).await?;
    if let Some(slow) = &counters.slow {
        slow.report_unprinted();
    }
    let cpu = match (cpu_before, read_cpu(&arguments, tls.as_ref()).await?) {
        (Some(before), Some(after)) => Some(before.per_request(&after, total.len())),
        _ => None,
    };
    print_result(&arguments, &total, &counters, elapsed, cpu.as_ref());
    Ok(())
}

/// The CPU time of the `--cpu-of` members and of the bench, when asked.
async fn read_cpu(
    arguments: &BenchArguments,
    tls: Option<&ClientTls>,
) -> Result<Option<bench_cpu::CpuReading>, anyhow::Error> {
    if arguments.cpu_of.is_empty() {
        return Ok(None);
    }
    let token = arguments.cpu_of_token.as_deref();
    Ok(Some(bench_cpu::read(&arguments.cpu_of, token, tls).await?))
}

/// Refuses arguments the bench cannot run with, naming the flag.
fn check(arguments: &BenchArguments) -> Result<(), anyhow::Error> {
    if arguments.clients == 0 || arguments.clients > BENCH_CLIENTS_MAX {
        anyhow::bail!("--clients must be 1 to {BENCH_CLIENTS_MAX} (bench_clients_max)");
    }
    if arguments
        .connections
        .is_some_and(|connections| connections == 0 || connections > arguments.clients)
    {
        anyhow::bail!("--connections must be 1 to --clients ({})", arguments.clients);
    }
    if arguments.keys == 0 {
        anyhow::bail!("--keys must be at least 1");
    }
    if arguments.workload.is_http() {
        if arguments.http.is_none() {
            anyhow::bail!(
                "--http (a member's HTTP port, http://host:port) is needed for workload {}",
                arguments.workload.flag_value()
            );
        }
        if arguments.http_token.is_none() {
            anyhow::bail!(
                "--http-token (or DENO_KV_ACCESS_TOKEN) is needed for workload {}",
                arguments.workload.flag_value()
            );
        }
    }
    Ok(())
}

/// A client's session on a member's HTTP port, as `--http` and
/// `--http-token` name (both checked present).
enum HttpSession {
    KvConnect(KvConnect),
    State(StateHttp),
}

impl HttpSession {
    async fn open(arguments: &BenchArguments, tls: Option<&ClientTls>) -> Result<Self, anyhow::Error> {
        let (url, token) = arguments.http_target();
        Ok(match arguments.workload {
            Workload::StateHttpUpdate => HttpSession::State(StateHttp::connect(url, token, tls).await?),
            _ => HttpSession::KvConnect(KvConnect::connect(url, token, tls).await?),
        })
    }

    /// One request of the workload.
    async fn request(
        &mut self,
        workload: Workload,
        key: &str,
        value: &[u8],
        sequence: u64,
        worker: usize,
    ) -> Result<(), anyhow::Error> {
        match (self, workload) {
            (HttpSession::KvConnect(session), Workload::DenoGet) => session.get(key).await,
            (HttpSession::KvConnect(session), _) => session.set(key, value).await,
            (HttpSession::State(session), _) => session.update(key, sequence, worker).await,
        }
    }
}

/// One client of the bench and what it shares with the others.
struct Worker {
    client: lode_client::Client,
    http: Option<HttpSession>,
    /// The lease this client renews, in `lease-renew`.
    lease: Option<HeldLease>,
    arguments: Arc<BenchArguments>,
    counters: Arc<Counters>,
    values: Values,
    worker: usize,
}

impl Worker {
    /// Requests one after another until `deadline` or `--requests-max`;
    /// answers their latencies, and the lease to release after the run.
    async fn run(mut self, deadline: tokio::time::Instant) -> (Histogram<u64>, Option<HeldLease>) {
        let kv = self.client.kv(self.arguments.namespace.clone());
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("static bounds are valid");
        let mut sequence = self.worker as u64;
        let (arguments, counters) = (self.arguments.clone(), self.counters.clone());
        while tokio::time::Instant::now() < deadline
            && counters.issued.fetch_add(1, Ordering::Relaxed) < arguments.requests_max
        {
            sequence = sequence
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = format!("key-{}", sequence % arguments.keys);
            let value = self.values.get(sequence >> 16);
            let began = tokio::time::Instant::now();
            let began_at = counters.slow.as_ref().map(|_| std::time::SystemTime::now());
            let result = match (&mut self.http, &mut self.lease) {
                (Some(session), _) => {
                    session
                        .request(arguments.workload, &key, value, sequence, self.worker)
                        .await
                }
                (None, Some(lease)) => lease.renew(&kv).await,
                (None, None) => {
                    let request = Request {
                        client: &self.client,
                        kv: &kv,
                        arguments: &arguments,
                        worker: self.worker,
                        sequence,
                    };
                    request.run(&key, value).await.map_err(anyhow::Error::from)
                }
            };
            let micros = began.elapsed().as_micros() as u64;
            counters.completed.fetch_add(1, Ordering::Relaxed);
            let outcome = match result {
                Ok(()) => {
                    let _ = histogram.record(micros.max(1));
                    Outcome::Ok
                }
                Err(error) if is_version_conflict(&error) => {
                    counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    let _ = histogram.record(micros.max(1));
                    Outcome::VersionConflict
                }
                Err(error) => {
                    if counters.errors.fetch_add(1, Ordering::Relaxed) < 5 {
                        eprintln!("error: {error:#}");
                    }
                    Outcome::Error
                }
            };
            if let (Some(slow), Some(began_at)) = (&counters.slow, began_at) {
                slow.record(began_at, micros, self.worker, &key, outcome);
            }
        }
        (histogram, self.lease)
    }
}

fn is_version_conflict(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<lode_client::LodeError>()
        .is_some_and(lode_client::LodeError::is_version_conflict)
}

/// One line on standard error each second: requests done, the last
/// second's rate, errors.
async fn report_progress(counters: Arc<Counters>, started: tokio::time::Instant) {
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    interval.tick().await;
    let mut last = 0;
    loop {
        interval.tick().await;
        let done = counters.completed.load(Ordering::Relaxed);
        eprintln!(
            "progress: {:.0}s, {done} done, {} in the last second, {} errors",
            started.elapsed().as_secs_f64(),
            done - last,
            counters.errors.load(Ordering::Relaxed)
        );
        last = done;
    }
}

fn print_result(
    arguments: &BenchArguments,
    total: &Histogram<u64>,
    counters: &Counters,
    elapsed: f64,
    cpu: Option<&bench_cpu::CpuPerRequest>,
) {
    let done = total.len();
    let millis = |quantile: f64| total.value_at_quantile(quantile) as f64 / 1000.0;
    let errors = counters.errors.load(Ordering::Relaxed);
    let conflicts = counters.conflicts.load(Ordering::Relaxed);
    if arguments.json {
        let mut result = serde_json::json!({
            "workload": format!("{:?}", arguments.workload),
            "clients": arguments.clients,
            "connections": arguments.connections(),
            "spread": arguments.spread,
            "value_bytes": arguments.value_bytes,
            "keys": arguments.keys,
            "duration_s": elapsed,
            "ops": done,
            "ops_per_s": done as f64 / elapsed,
            "errors": errors,
            "version_conflicts": conflicts,
            "latency_ms": {
                "p50": millis(0.5),
                "p99": millis(0.99),
                "p999": millis(0.999),
                "max": total.max() as f64 / 1000.0,
            },
        });
        if let Some(cpu) = cpu {
            let by_member: serde_json::Map<String, serde_json::Value> = cpu
                .by_member
                .iter()
                .map(|(url, micros)| (url.clone(), serde_json::json!(micros)))
                .collect();
            result["cpu_us_per_request"] = serde_json::json!({
                "members": cpu.members,
                "by_member": by_member,
                "bench": cpu.bench,
            });
        }
        if let Some(slow) = &counters.slow {
            result["slow_requests"] = serde_json::json!(slow.seen());
        }
        println!("{result}");
        return;
    }
    println!(
        "workload={:?} clients={} connections={} spread={} value_bytes={} keys={} duration={elapsed:.1}s",
        arguments.workload,
        arguments.clients,
        arguments.connections(),
        arguments.spread,
        arguments.value_bytes,
        arguments.keys
    );
    println!(
        "ops={done} ops/s={:.0} errors={errors} version_conflicts={conflicts}",
        done as f64 / elapsed
    );
    println!(
        "latency ms: p50={:.3} p99={:.3} p999={:.3} max={:.3}",
        millis(0.5),
        millis(0.99),
        millis(0.999),
        total.max() as f64 / 1000.0
    );
    if let Some(slow) = &counters.slow {
        println!("slow_requests={}", slow.seen());
    }
    if let Some(cpu) = cpu {
        let by_member: Vec<String> = cpu
            .by_member
            .iter()
            .map(|(url, micros)| format!("{url}={micros:.1}"))
            .collect();
        let bench = cpu.bench.map_or("unknown".to_owned(), |micros| format!("{micros:.1}"));
        println!(
            "cpu us/request: members={:.1} ({}) bench={bench}",
            cpu.members,
            by_member.join(" ")
        );
    }
}

/// One worker's next request.
struct Request<'a> {
    client: &'a lode_client::Client,
    kv: &'a lode_client::Kv,
    arguments: &'a BenchArguments,
    worker: usize,
    sequence: u64,
}

impl Request<'_> {
    async fn run(&self, key: &str, value: &[u8]) -> Result<(), lode_client::LodeError> {
        let kv = self.kv;
        match self.arguments.workload {
            Workload::Put => kv.set(key).bytes(value).send().await.map(|_| ()),
            Workload::Get => kv.get(key).await.map(|_| ()),
            Workload::Cas => compare_and_swap(kv, key, value).await,
            Workload::Scan => kv
                .scan()
                .range(key, "key-~")
                .limit(BENCH_SCAN_PAGE_ENTRIES)
                .fetch()
                .await
                .map(|_| ()),
            Workload::GetMany => {
                let keys: Vec<String> = (0..BENCH_GET_MANY_KEYS)
                    .map(|offset| format!("key-{}", (self.sequence + offset * 7919) % self.arguments.keys))
                    .collect();
                kv.get_many(&keys).await.map(|_| ())
            }
            Workload::StateUpdate => {
                let value = serde_json::json!({ "sequence": self.sequence, "worker": self.worker });
                let ops = [lode_client::state::UpdateOp::Set { path: None, value }];
                let state = self.client.state();
                state.update(BENCH_STATE_SCOPE, key, &ops).await.map(|_| ())
            }
            Workload::Lease => bench_lease::acquire_then_release(kv, self.worker, key).await,
            Workload::Queue => {
                let queue = self.client.queue();
                let message = lode_client::queue::Message::new(value.to_vec(), lode_client::Encoding::Bytes);
                queue.enqueue(&message).await?;
                // Another worker may have taken it: any due message will do.
                match queue.claim().await? {
                    Some(delivery) => queue.finish(&delivery, true).await.map(|_| ()),
                    None => Ok(()),
                }
            }
            Workload::DenoSet | Workload::DenoGet | Workload::StateHttpUpdate => {
                Err(lode_client::LodeError::Unsupported(format!(
                    "workload {} runs through a member's HTTP port, not the client ports",
                    self.arguments.workload.flag_value()
                )))
            }
            // The worker renews its own lease (`HeldLease::renew`).
            Workload::LeaseRenew => Err(lode_client::LodeError::Unsupported(
                "workload lease-renew renews the lease its client took before the run".to_owned(),
            )),
        }
    }
}

/// One read-modify-write cycle: read the version, write with it.
async fn compare_and_swap(kv: &lode_client::Kv, key: &str, value: &[u8]) -> Result<(), lode_client::LodeError> {
    let set = kv.set(key).bytes(value);
    let set = match kv.exists(key).await? {
        Some(meta) => set.expect_version(meta.version),
        None => set.expect_absent(),
    };
    set.commit().await.map(|_| ())
}

/// Writers that fill the keys before a read workload, whatever its
/// clients: filling is not measured, and one writer alone would take as
/// long as a put per key (ten seconds for 10,000 keys at one client).
const BENCH_PREFILL_WRITERS: u64 = 64;

/// The writers that fill `keys` keys.
fn prefill_writers(keys: u64) -> u64 {
    BENCH_PREFILL_WRITERS.min(keys)
}

/// Writes every key once so reads find values.
async fn prefill(arguments: &Arc<BenchArguments>, values: &Values) -> Result<(), anyhow::Error> {
    let workers = prefill_writers(arguments.keys);
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let kv = arguments.endpoints.client()?.kv(arguments.namespace.clone());
        let (keys, values) = (arguments.keys, values.clone());
        tasks.push(tokio::spawn(async move {
            let mut key = worker;
            while key < keys {
                kv.set(format!("key-{key}")).bytes(values.get(key)).send().await?;
                key += workers;
            }
            Ok::<(), lode_client::LodeError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Writes every key once through KV Connect so Deno KV reads find values.
async fn prefill_deno(arguments: &Arc<BenchArguments>, values: &Values) -> Result<(), anyhow::Error> {
    let workers = prefill_writers(arguments.keys);
    let tls = arguments.endpoints.tls()?;
    let (url, token) = arguments.http_target();
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let mut session = KvConnect::connect(url, token, tls.as_ref()).await?;
        let (keys, values) = (arguments.keys, values.clone());
        tasks.push(tokio::spawn(async move {
            let mut key = worker;
            while key < keys {
                session.set(&format!("key-{key}"), values.get(key)).await?;
                key += workers;
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Takes the lease each client of `lease-renew` renews, all at once, before
/// the run: taking them is not measured.
async fn acquire_leases(arguments: &Arc<BenchArguments>, clients: &[Client]) -> Result<Vec<HeldLease>, anyhow::Error> {
    let run = lode_client::facade::random_u128() as u64;
    let mut tasks = Vec::new();
    for worker in 0..arguments.clients {
        let kv = clients[worker % clients.len()].kv(arguments.namespace.clone());
        tasks.push(tokio::spawn(async move { HeldLease::acquire(&kv, run, worker).await }));
    }
    let mut leases = Vec::new();
    for task in tasks {
        leases.push(task.await??);
    }
    Ok(leases)
}

/// Releases the leases of `lease-renew` after the run.
async fn release_leases(
    arguments: &Arc<BenchArguments>,
    clients: &[Client],
    leases: Vec<HeldLease>,
) -> Result<(), anyhow::Error> {
    let mut tasks = Vec::new();
    for (index, lease) in leases.into_iter().enumerate() {
        let kv = clients[index % clients.len()].kv(arguments.namespace.clone());
        tasks.push(tokio::spawn(async move { lease.release(&kv).await }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}
