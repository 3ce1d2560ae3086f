//! The State API workload of `lode bench` over HTTP: each client calls
//! `POST /state/v1/update` on a member's HTTP port with JSON, as a program
//! in any language (or curl) would, over one connection of its own
//! (`bench_http.rs`). The `state-update` workload measures the same
//! operation through the Rust SDK on the client ports.

use anyhow::Context;
use lode_client::tls::ClientTls;

use super::bench_http::HttpConnection;

/// The scope the workload's updates write to, as `state-update`'s.
pub const BENCH_STATE_SCOPE: &str = "bench";

/// One client's State API calls on one connection.
pub struct StateHttp {
    connection: HttpConnection,
}

impl StateHttp {
    /// Connects to `url` (a member's HTTP port) with the bearer `token`.
    pub async fn connect(url: &str, token: &str, tls: Option<&ClientTls>) -> Result<Self, anyhow::Error> {
        Ok(Self {
            connection: HttpConnection::connect(url, "--http", Some(token), tls).await?,
        })
    }

    /// Sets `key` of the bench scope to a small JSON object, as the
    /// `state-update` workload does, and checks the answer carries it.
    pub async fn update(&mut self, key: &str, sequence: u64, worker: usize) -> Result<(), anyhow::Error> {
        let value = serde_json::json!({ "sequence": sequence, "worker": worker });
        let call = serde_json::json!({
            "scope": BENCH_STATE_SCOPE,
            "key": key,
            "ops": [{ "type": "set", "value": value }],
        });
        let body = self
            .connection
            .post(
                "/state/v1/update",
                "application/json",
                &[],
                call.to_string().into_bytes(),
            )
            .await?;
        let answer: serde_json::Value = serde_json::from_slice(&body).context("reading state::update's answer")?;
        if answer["new_value"] != value {
            anyhow::bail!("state::update answered {answer}, not the value it set");
        }
        Ok(())
    }
}
