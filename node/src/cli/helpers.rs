//! What the command-line tool's commands share: the endpoints option,
//! duration parsing, JSON output, HTTP answers and the stop signal.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use lode_client::tls::ClientTls;
use lode_client::{Client, ClientOptions, LodeError};

#[derive(Args, Debug, Clone)]
pub struct Endpoints {
    /// Cluster endpoints, `host:port,...`.
    #[arg(
        long,
        env = "LODE_ENDPOINTS",
        default_value = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
    )]
    pub endpoints: String,
    /// The cluster CA (PEM): connect over TLS, trusting it alone.
    #[arg(long, env = "LODE_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) to present, with --tls-key.
    #[arg(long, env = "LODE_TLS_CERT", requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "LODE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A file holding the caller's token (`lode auth issue-token`), for a
    /// cluster with authentication on.
    #[arg(long, env = "LODE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

/// Most bytes of a token file read: a token is about a hundred.
const TOKEN_FILE_BYTES_MAX: u64 = 4096;

/// Reads a token file, bounded, with the token's own check.
pub fn read_token_file(path: &std::path::Path) -> Result<lode_types::auth::TokenParts, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|error| format!("token file {}: {error}", path.display()))?;
    let mut text = String::new();
    file.take(TOKEN_FILE_BYTES_MAX)
        .read_to_string(&mut text)
        .map_err(|error| format!("token file {}: {error}", path.display()))?;
    lode_types::auth::TokenParts::parse(&text).map_err(|error| format!("token file {}: {error}", path.display()))
}

impl Endpoints {
    /// TLS as the flags ask for it; `None`: in the clear.
    pub fn tls(&self) -> Result<Option<ClientTls>, LodeError> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let identity = self.tls_cert.as_deref().zip(self.tls_key.as_deref());
        Ok(Some(ClientTls::from_files(ca, identity)?))
    }

    pub fn client(&self) -> Result<Client, LodeError> {
        Client::with_options(self.starting_at(0), self.client_options()?)
    }

    /// The options a client of these flags takes: TLS and the token, read
    /// from their files.
    pub fn client_options(&self) -> Result<ClientOptions, LodeError> {
        let token = match &self.token_file {
            Some(path) => Some(lode_client::protocol::AccessToken(
                read_token_file(path).map_err(LodeError::Invalid)?.to_text(),
            )),
            None => None,
        };
        Ok(ClientOptions {
            tls: self.tls()?,
            token,
            ..ClientOptions::default()
        })
    }

    /// The endpoints from the `first`-th (modulo their number) on, so
    /// that clients given different `first` start at different members.
    pub fn starting_at(&self, first: usize) -> Vec<&str> {
        let mut endpoints: Vec<&str> = self.endpoints.split(',').collect();
        let count = endpoints.len();
        endpoints.rotate_left(first % count.max(1));
        endpoints
    }
}

/// Parses `500ms`, `20s`, `5m`, `1h`, `7d` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|character: char| !character.is_ascii_digit())
        .map_or((text, "s"), |at| text.split_at(at));
    let number: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} does not start with a number"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(Duration::from_secs(number)),
        "m" => Ok(Duration::from_secs(number.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(number.saturating_mul(3600))),
        "d" => Ok(Duration::from_secs(number.saturating_mul(86_400))),
        _ => Err(format!("duration {text:?} has unit {unit:?}; use ms, s, m, h or d")),
    }
}

/// Parses a size: `8GiB`, `512MiB`, `64KiB` or a bare number of bytes.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|character: char| !character.is_ascii_digit())
        .map_or((text, ""), |at| text.split_at(at));
    let number: u64 = number
        .parse()
        .map_err(|_| format!("size {text:?} does not start with a number"))?;
    let shift = match unit {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => return Err(format!("size {text:?} has unit {unit:?}; use B, KiB, MiB, GiB or TiB")),
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {text:?} is over {} bytes", u64::MAX))
}

/// `--snapshot-log-bytes-max`: a size of at least
/// [`SNAPSHOT_LOG_BYTES_MIN`](lode_node::log_size_snapshots::SNAPSHOT_LOG_BYTES_MIN).
pub fn parse_snapshot_log_bytes(text: &str) -> Result<u64, String> {
    let minimum = lode_node::log_size_snapshots::SNAPSHOT_LOG_BYTES_MIN;
    let bytes = parse_bytes(text)?;
    if bytes < minimum {
        return Err(format!(
            "{bytes} bytes is under the least log size between snapshots, {minimum} bytes"
        ));
    }
    Ok(bytes)
}

/// SIGTERM and Ctrl-C, listened for from the moment it is made, so a signal
/// that arrives while a node is still starting is not lost (nor fatal).
pub struct StopSignal {
    terminate: Option<tokio::signal::unix::Signal>,
}

impl StopSignal {
    pub fn install() -> Self {
        let terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(terminate) => Some(terminate),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the node");
                None
            }
        };
        Self { terminate }
    }

    /// Waits for SIGTERM or Ctrl-C.
    pub async fn wait(mut self) {
        match self.terminate.as_mut() {
            Some(terminate) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Prints a JSON value, pretty.
pub fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// The body of an HTTP answer to `path`, read up to `bytes_max` (more
/// fails the read, naming `limit` and its value); an answer other than
/// 2xx is an error carrying the server's text.
pub async fn read_answer(
    response: hyper::Response<hyper::body::Incoming>,
    path: &str,
    (limit, bytes_max): (&str, usize),
) -> Result<bytes::Bytes, anyhow::Error> {
    use http_body_util::BodyExt;
    let status = response.status();
    let body = http_body_util::Limited::new(response.into_body(), bytes_max)
        .collect()
        .await
        .map_err(|error| anyhow::anyhow!("reading the answer to {path}: {error} ({limit} = {bytes_max})"))?
        .to_bytes();
    if !status.is_success() {
        anyhow::bail!("{path} answered {status}: {}", String::from_utf8_lossy(&body));
    }
    Ok(body)
}
