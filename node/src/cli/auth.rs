//! `lode auth`: users, roles, grants and tokens. Every command but
//! `token new` changes the replicated auth state and needs an admin's
//! token (`--token-file`). A token is shown once, when it is made; the
//! cluster keeps only its SHA-256.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use lode_client::LodeError;
use lode_types::auth::Grant;
use serde_json::json;

use super::helpers::{parse_duration, print_json, Endpoints};

#[derive(Subcommand, Debug)]
pub enum AuthCommand {
    /// Create a user (with no roles).
    AddUser {
        name: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Remove a user; its tokens stop working.
    RemoveUser {
        name: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Create a role or replace its grants: `--grant read:config`,
    /// `--grant write:orders/`, `--grant admin:` (every namespace and the
    /// cluster).
    PutRole {
        name: String,
        #[arg(long = "grant", value_parser = Grant::parse)]
        grants: Vec<Grant>,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Remove a role; its users lose its grants.
    RemoveRole {
        name: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Give a user a role's grants.
    Grant {
        user: String,
        role: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Take a role from a user.
    Revoke {
        user: String,
        role: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Issue a token of a user, written to `--out` (mode 0600); prints its
    /// id, which revokes it.
    IssueToken {
        user: String,
        #[arg(long)]
        out: PathBuf,
        /// How long it works (`30m`, `12h`, `90d`); without: until revoked.
        #[arg(long, value_parser = parse_duration)]
        ttl: Option<Duration>,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Revoke a token by its id (32 hex digits); every member refuses it
    /// once the revocation applies there.
    RevokeToken {
        id: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Write a fresh token to a file (mode 0600) without a cluster: the
    /// first admin's, for `lode node --bootstrap-token-file`.
    NewToken {
        #[arg(long)]
        out: PathBuf,
    },
}

/// Writes a token where only its owner can read it; never over a file.
fn write_secret(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|error| format!("writing the token to {}: {error}", path.display()))?;
    file.write_all(format!("{text}\n").as_bytes())
        .map_err(|error| format!("writing the token to {}: {error}", path.display()))
}

fn parse_token_id(text: &str) -> Result<u128, LodeError> {
    if text.len() != 32 {
        return Err(LodeError::Invalid(format!("token id {text:?} is not 32 hex digits")));
    }
    u128::from_str_radix(text, 16).map_err(|_| LodeError::Invalid(format!("token id {text:?} is not 32 hex digits")))
}

pub async fn run(command: AuthCommand) -> Result<ExitCode, String> {
    let changed = |what: &str, name: &str| json!({ "changed": what, "name": name });
    let report = match command {
        AuthCommand::NewToken { out } => {
            let token = lode_client::auth::new_token();
            write_secret(&out, &token.to_text())?;
            json!({ "token_id": format!("{:032x}", token.id), "file": out })
        }
        AuthCommand::AddUser { name, endpoints } => {
            auth(&endpoints)?.put_user(&name).await.map_err(|e| e.to_string())?;
            changed("user", &name)
        }
        AuthCommand::RemoveUser { name, endpoints } => {
            auth(&endpoints)?.remove_user(&name).await.map_err(|e| e.to_string())?;
            changed("user", &name)
        }
        AuthCommand::PutRole {
            name,
            grants,
            endpoints,
        } => {
            auth(&endpoints)?
                .put_role(&name, grants)
                .await
                .map_err(|e| e.to_string())?;
            changed("role", &name)
        }
        AuthCommand::RemoveRole { name, endpoints } => {
            auth(&endpoints)?.remove_role(&name).await.map_err(|e| e.to_string())?;
            changed("role", &name)
        }
        AuthCommand::Grant { user, role, endpoints } => {
            auth(&endpoints)?
                .bind_role(&user, &role)
                .await
                .map_err(|e| e.to_string())?;
            json!({ "user": user, "granted": role })
        }
        AuthCommand::Revoke { user, role, endpoints } => {
            auth(&endpoints)?
                .unbind_role(&user, &role)
                .await
                .map_err(|e| e.to_string())?;
            json!({ "user": user, "revoked": role })
        }
        AuthCommand::IssueToken {
            user,
            out,
            ttl,
            endpoints,
        } => {
            if out.exists() {
                return Err(format!(
                    "{} exists; a token is never written over a file",
                    out.display()
                ));
            }
            let issued = auth(&endpoints)?
                .issue_token(&user, ttl)
                .await
                .map_err(|e| e.to_string())?;
            write_secret(&out, &issued.token.0)?;
            json!({ "user": user, "token_id": format!("{:032x}", issued.id), "file": out })
        }
        AuthCommand::RevokeToken { id, endpoints } => {
            let id = parse_token_id(&id).map_err(|e| e.to_string())?;
            auth(&endpoints)?.revoke_token(id).await.map_err(|e| e.to_string())?;
            json!({ "revoked_token": format!("{id:032x}") })
        }
    };
    print_json(&report);
    Ok(ExitCode::SUCCESS)
}

fn auth(endpoints: &Endpoints) -> Result<lode_client::auth::Auth, String> {
    Ok(endpoints.client().map_err(|error| error.to_string())?.auth())
}
