//! The Deno KV workloads of `lode bench`: each client speaks KV Connect to
//! a member's HTTP port as the Deno client does (the metadata exchange,
//! then protobuf `snapshot_read` and `atomic_write` calls with the session
//! token it was given), over one HTTP/1.1 connection of its own
//! (`bench_http.rs`), so the figures are what a Deno user's program would
//! see without Deno's own cost per call.

use anyhow::{anyhow, bail, Context};
use denokv_proto::datapath as pb;
use denokv_proto::{Key, KeyPart};
use lode_client::tls::ClientTls;
use prost::Message;

use super::bench_http::HttpConnection;

const PROTOBUF: &str = "application/x-protobuf";

/// What the metadata exchange answers that the data path needs.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    version: u64,
    database_id: String,
    token: String,
    endpoints: Vec<MetadataEndpoint>,
}

#[derive(serde::Deserialize)]
struct MetadataEndpoint {
    url: String,
    consistency: String,
}

/// One KV Connect session on one connection.
pub struct KvConnect {
    connection: HttpConnection,
    database_id: String,
    version: u64,
    /// `version` as its header carries it, written once.
    version_header: String,
    /// The path of the strong endpoint, e.g. `/kv/strong`.
    strong_path: String,
}

impl KvConnect {
    /// Connects to `url` (`http://host:port` or `https://host:port`, a
    /// member's HTTP port; over TLS it trusts `tls`'s CA) and exchanges
    /// metadata with `access_token`.
    pub async fn connect(url: &str, access_token: &str, tls: Option<&ClientTls>) -> Result<Self, anyhow::Error> {
        let mut connection = HttpConnection::connect(url, "--http", Some(access_token), tls).await?;
        let request = br#"{"supportedVersions":[1,2,3]}"#.to_vec();
        let body = connection.post("/", "application/json", &[], request).await?;
        let metadata: Metadata = serde_json::from_slice(&body).context("reading the metadata exchange's answer")?;
        let strong = metadata
            .endpoints
            .iter()
            .find(|endpoint| endpoint.consistency == "strong")
            .ok_or_else(|| anyhow!("the metadata names no strong endpoint"))?;
        let strong_path = endpoint_path(&strong.url)?;
        connection.use_token(&metadata.token);
        Ok(Self {
            connection,
            database_id: metadata.database_id,
            version: metadata.version,
            version_header: metadata.version.to_string(),
            strong_path,
        })
    }

    /// Sets `["bench", key]` to `value` (bytes), as `kv.set` does.
    pub async fn set(&mut self, key: &str, value: &[u8]) -> Result<(), anyhow::Error> {
        let write = pb::AtomicWrite {
            mutations: vec![pb::Mutation {
                key: bench_key(key)?,
                value: Some(pb::KvValue {
                    data: value.to_vec(),
                    encoding: pb::ValueEncoding::VeBytes as i32,
                }),
                mutation_type: pb::MutationType::MSet as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        let path = format!("{}/atomic_write", self.strong_path);
        let body = self.post(&path, write.encode_to_vec()).await?;
        let output = pb::AtomicWriteOutput::decode(body).context("decoding an atomic_write answer")?;
        if output.status != pb::AtomicWriteStatus::AwSuccess as i32 {
            bail!("atomic_write answered status {}", output.status);
        }
        Ok(())
    }

    /// Reads `["bench", key]` strongly, as `kv.get` does: a range from the
    /// key to the key and a zero byte, at most one entry. The workload
    /// wrote every key first, so an absent one is an error.
    pub async fn get(&mut self, key: &str) -> Result<(), anyhow::Error> {
        let start = bench_key(key)?;
        let mut end = start.clone();
        end.push(0);
        let read = pb::SnapshotRead {
            ranges: vec![pb::ReadRange {
                start,
                end,
                limit: 1,
                reverse: false,
            }],
        };
        let path = format!("{}/snapshot_read", self.strong_path);
        let body = self.post(&path, read.encode_to_vec()).await?;
        let output = pb::SnapshotReadOutput::decode(body).context("decoding a snapshot_read answer")?;
        if output.status != pb::SnapshotReadStatus::SrSuccess as i32 || !output.read_is_strongly_consistent {
            bail!(
                "snapshot_read answered status {} (strong: {})",
                output.status,
                output.read_is_strongly_consistent
            );
        }
        let found = output.ranges.first().is_some_and(|range| range.values.len() == 1);
        if !found {
            bail!("snapshot_read found no value at [\"bench\", \"{key}\"], which was written first");
        }
        Ok(())
    }

    /// One protobuf POST with the headers of the session's protocol
    /// version.
    async fn post(&mut self, path: &str, body: Vec<u8>) -> Result<bytes::Bytes, anyhow::Error> {
        let headers: &[(&str, &str)] = match self.version {
            1 => &[("x-transaction-domain-id", &self.database_id)],
            _ => &[
                ("x-denokv-database-id", &self.database_id),
                ("x-denokv-version", &self.version_header),
            ],
        };
        self.connection.post(path, PROTOBUF, headers, body).await
    }
}

/// The path calls to an endpoint go under: the metadata names it by an
/// absolute URL (Lode's, e.g. `http://host:port/kv/strong`) or by a path
/// relative to the metadata's (denokv's `/v2`). The bench calls it on its
/// own connection, so the host is not used.
fn endpoint_path(url: &str) -> Result<String, anyhow::Error> {
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("", |start| &rest[start..]),
        None => url,
    };
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        bail!("the strong endpoint {url} names no path");
    }
    Ok(match path.starts_with('/') {
        true => path.to_owned(),
        false => format!("/{path}"),
    })
}

/// The Deno KV key `["bench", key]` in its tuple encoding.
fn bench_key(key: &str) -> Result<Vec<u8>, anyhow::Error> {
    let key = Key(vec![
        KeyPart::String("bench".to_owned()),
        KeyPart::String(key.to_owned()),
    ]);
    Ok(denokv_proto::encode_key(&key)?)
}

#[cfg(test)]
mod tests {
    use super::endpoint_path;

    #[test]
    fn an_endpoint_is_called_under_its_path_whether_absolute_or_relative() {
        assert_eq!(
            endpoint_path("http://127.0.0.1:7201/kv/strong").expect("a path"),
            "/kv/strong"
        );
        assert_eq!(
            endpoint_path("https://lode.example/kv/strong/").expect("a path"),
            "/kv/strong"
        );
        assert_eq!(endpoint_path("/v2").expect("a path"), "/v2");
        assert_eq!(endpoint_path("v2").expect("a path"), "/v2");
        assert!(endpoint_path("http://127.0.0.1:7201").is_err());
        assert!(endpoint_path("").is_err());
    }
}
