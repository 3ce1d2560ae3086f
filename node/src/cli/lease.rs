//! `lode lease`: acquire, renew, release and show leases with fencing
//! tokens from the command line. Output is `name=value` text for people,
//! or JSON with `--json` for scripts, as `lode kv` does.
//!
//! Exit status: 0 on success, 1 when `show` finds no live lease or `release`
//! held none, 2 on any error (a held lease is a version conflict naming the
//! live token; a lost one is `lease lost`).

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use lode_client::{Lease, LodeError};
use serde_json::json;

use super::helpers::{parse_duration, print_json, Endpoints};

#[derive(Subcommand, Debug)]
pub enum LeaseCommand {
    /// Acquire a lease; prints its token, granted TTL and position.
    Acquire {
        /// The coordination namespace.
        namespace: String,
        key: String,
        holder: String,
        #[arg(long, value_parser = parse_duration)]
        ttl: Duration,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Extend a held lease, keeping its token.
    Renew {
        namespace: String,
        key: String,
        holder: String,
        token: u64,
        #[arg(long, value_parser = parse_duration)]
        ttl: Duration,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Release a held lease; prints whether one was released.
    Release {
        namespace: String,
        key: String,
        holder: String,
        token: u64,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Show the live lease: holder, token and expiry.
    Show {
        namespace: String,
        key: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
}

/// Prints `fields` as one JSON object, or as `name=value` pairs on a line
/// in their order.
fn print_fields(fields: &[(&str, serde_json::Value)], json: bool) {
    if json {
        let object: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect();
        print_json(&serde_json::Value::Object(object));
        return;
    }
    let pairs: Vec<String> = fields
        .iter()
        .map(|(name, value)| match value {
            serde_json::Value::String(text) => format!("{name}={text}"),
            other => format!("{name}={other}"),
        })
        .collect();
    println!("{}", pairs.join(" "));
}

fn lease_fields(lease: &Lease) -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("token", json!(lease.token)),
        ("ttl_ms", json!(lease.ttl.as_millis() as u64)),
        ("position", json!(lease.position)),
        ("expires_at_micros", json!(lease.expires_at_micros)),
    ]
}

pub async fn run(command: LeaseCommand) -> Result<ExitCode, LodeError> {
    match command {
        LeaseCommand::Acquire {
            namespace,
            key,
            holder,
            ttl,
            json,
            endpoints,
        } => {
            let lease = endpoints.client()?.kv(namespace).lease(key, holder, ttl).await?;
            print_fields(&lease_fields(&lease), json);
        }
        LeaseCommand::Renew {
            namespace,
            key,
            holder,
            token,
            ttl,
            json,
            endpoints,
        } => {
            let lease = endpoints
                .client()?
                .kv(namespace)
                .renew_lease(key, holder, token, ttl)
                .await?;
            print_fields(&lease_fields(&lease), json);
        }
        LeaseCommand::Release {
            namespace,
            key,
            holder,
            token,
            json,
            endpoints,
        } => {
            let released = endpoints.client()?.kv(namespace).release(key, holder, token).await?;
            print_fields(&[("released", json!(released))], json);
            if !released {
                return Ok(ExitCode::FAILURE);
            }
        }
        LeaseCommand::Show {
            namespace,
            key,
            json,
            endpoints,
        } => match endpoints.client()?.kv(namespace).lease_info(key).await? {
            Some(lease) => print_fields(
                &[
                    ("holder", json!(lease.holder)),
                    ("token", json!(lease.token)),
                    ("expires_at_micros", json!(lease.expires_at_micros)),
                ],
                json,
            ),
            None => {
                eprintln!("not found");
                return Ok(ExitCode::FAILURE);
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}
