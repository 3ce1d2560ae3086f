//! `lode lease`: acquire, renew, release and show leases with fencing
//! tokens from the command line. Output is JSON, for scripts.
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
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Release a held lease; prints whether one was released.
    Release {
        namespace: String,
        key: String,
        holder: String,
        token: u64,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Show the live lease: holder, token and expiry.
    Show {
        namespace: String,
        key: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
}

fn lease_json(lease: &Lease) -> serde_json::Value {
    json!({
        "token": lease.token,
        "ttl_ms": lease.ttl.as_millis() as u64,
        "position": lease.position,
        "expires_at_micros": lease.expires_at_micros,
    })
}

pub async fn run(command: LeaseCommand) -> Result<ExitCode, LodeError> {
    match command {
        LeaseCommand::Acquire {
            namespace,
            key,
            holder,
            ttl,
            endpoints,
        } => {
            let lease = endpoints.client()?.kv(namespace).lease(key, holder, ttl).await?;
            print_json(&lease_json(&lease));
        }
        LeaseCommand::Renew {
            namespace,
            key,
            holder,
            token,
            ttl,
            endpoints,
        } => {
            let lease = endpoints
                .client()?
                .kv(namespace)
                .renew_lease(key, holder, token, ttl)
                .await?;
            print_json(&lease_json(&lease));
        }
        LeaseCommand::Release {
            namespace,
            key,
            holder,
            token,
            endpoints,
        } => {
            let released = endpoints.client()?.kv(namespace).release(key, holder, token).await?;
            println!("{released}");
            if !released {
                return Ok(ExitCode::FAILURE);
            }
        }
        LeaseCommand::Show {
            namespace,
            key,
            endpoints,
        } => match endpoints.client()?.kv(namespace).lease_info(key).await? {
            Some(lease) => print_json(&json!({
                "holder": lease.holder,
                "token": lease.token,
                "expires_at_micros": lease.expires_at_micros,
            })),
            None => {
                eprintln!("not found");
                return Ok(ExitCode::FAILURE);
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}
