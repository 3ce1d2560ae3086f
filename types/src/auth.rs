//! Who may do what: users, roles that hold grants of `read`, `write` or
//! `admin` on namespace prefixes, and tokens that name a user. The auth
//! state is changed by [`AuthChange`] operations through the log, so every
//! member decides the same; [`permits`] is the one rule every check uses.
//!
//! A token is `lode_<id>_<secret>`: 128 bits of id and 256 bits of secret,
//! both random and hex. Only the secret's SHA-256 is stored: a secret that
//! long cannot be guessed from its hash, so the slow password hashes
//! (argon2) would add no safety and would cost every request.

use serde::{Deserialize, Serialize};

use crate::limits;
use crate::operation::Access;

/// The namespace of the auth records. It starts with NUL, so no user
/// namespace is it and no scan or listing shows it; changing it needs
/// `admin` on every namespace.
pub const AUTH_NAMESPACE: &str = "\0auth";

/// What a grant allows on the namespaces under its prefix; each level
/// includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Permission {
    Read,
    Write,
    Admin,
}

impl Permission {
    pub fn name(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Permission {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "read" => Ok(Permission::Read),
            "write" => Ok(Permission::Write),
            "admin" => Ok(Permission::Admin),
            other => Err(format!("permission {other:?} is not one of read, write, admin")),
        }
    }
}

/// `permission` on every namespace that starts with `prefix` (the empty
/// prefix: every namespace, and with `admin` the cluster itself).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    pub prefix: String,
    pub permission: Permission,
}

impl Grant {
    /// Parses `permission:prefix`, as the CLI takes a grant. The two
    /// characters `\0` in a prefix stand for NUL, the way refusals show
    /// Lode's own names: `write:\0queue` is the queue, `write:\0session\0cart`
    /// the session links of stream `cart`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (permission, prefix) = text
            .split_once(':')
            .ok_or_else(|| format!("grant {text:?} is not permission:prefix (read:config, admin:)"))?;
        let grant = Grant {
            prefix: prefix.replace("\\0", "\0"),
            permission: permission.parse()?,
        };
        grant.validate()?;
        Ok(grant)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.prefix.len() > limits::NAMESPACE_BYTES_MAX {
            return Err(limits::over_limit(
                "a grant's prefix",
                limits::bytes(self.prefix.len()),
                "namespace_bytes_max",
                limits::NAMESPACE_BYTES_MAX,
            ));
        }
        Ok(())
    }
}

/// Whether `grants` allow `access` to `namespace`.
pub fn permits(grants: &[Grant], namespace: &str, access: Access) -> bool {
    let needed = match access {
        Access::Read => Permission::Read,
        Access::Write => Permission::Write,
        Access::Admin => Permission::Admin,
    };
    grants
        .iter()
        .any(|grant| grant.permission >= needed && namespace.starts_with(grant.prefix.as_str()))
}

/// Whether `grants` make their holder an administrator of the cluster:
/// `admin` on the empty prefix.
pub fn is_cluster_admin(grants: &[Grant]) -> bool {
    grants
        .iter()
        .any(|grant| grant.permission == Permission::Admin && grant.prefix.is_empty())
}

/// One change of the auth state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthChange {
    /// Creates a user with no roles; an existing one is kept as it is.
    PutUser {
        name: String,
    },
    /// Removes a user and its tokens: a user created again under the name
    /// starts with no token and no role.
    RemoveUser {
        name: String,
    },
    /// Creates or replaces a role's grants.
    PutRole {
        name: String,
        grants: Vec<Grant>,
    },
    /// Removes a role and unbinds it from every user: a role created again
    /// under the name is held by nobody.
    RemoveRole {
        name: String,
    },
    /// Gives `user` the grants of `role`.
    BindRole {
        user: String,
        role: String,
    },
    UnbindRole {
        user: String,
        role: String,
    },
    /// Stores a token of `user`: its id and its secret's SHA-256, never the
    /// secret. It works until `expires_at_micros` (log time), if given.
    IssueToken {
        id: u128,
        user: String,
        secret_sha256: [u8; 32],
        expires_at_micros: Option<u64>,
    },
    RevokeToken {
        id: u128,
    },
    /// Stores a session token derived from token `parent`, whose secret's
    /// SHA-256 the caller proved it knows: it names the parent's user,
    /// works until `expires_at_micros` or the parent's expiry, whichever
    /// comes first, and dies with its parent. KV Connect hands these out.
    IssueSessionToken {
        id: u128,
        parent: u128,
        parent_secret_sha256: [u8; 32],
        secret_sha256: [u8; 32],
        expires_at_micros: u64,
    },
    /// Removes up to `tokens_max` tokens that no longer work: expired, of a
    /// removed user, or derived from a token that is gone. Proposed by the
    /// leader.
    PruneTokens {
        tokens_max: u32,
    },
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if name.len() > limits::AUTH_NAME_BYTES_MAX {
        return Err(limits::over_limit(
            what,
            limits::bytes(name.len()),
            "auth_name_bytes_max",
            limits::AUTH_NAME_BYTES_MAX,
        ));
    }
    Ok(())
}

impl AuthChange {
    /// Checks every name and grant; the message names the field and limit.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            AuthChange::PutUser { name } | AuthChange::RemoveUser { name } => check_name("user name", name),
            AuthChange::RemoveRole { name } => check_name("role name", name),
            AuthChange::PutRole { name, grants } => {
                check_name("role name", name)?;
                if grants.len() > limits::GRANTS_PER_ROLE_MAX {
                    return Err(limits::over_limit(
                        "the number of grants",
                        grants.len(),
                        "grants_per_role_max",
                        limits::GRANTS_PER_ROLE_MAX,
                    ));
                }
                grants.iter().try_for_each(Grant::validate)
            }
            AuthChange::BindRole { user, role } | AuthChange::UnbindRole { user, role } => {
                check_name("user name", user)?;
                check_name("role name", role)
            }
            AuthChange::IssueToken { id: 0, .. } => Err("token id 0 is reserved for members' own use".to_owned()),
            AuthChange::IssueToken { user, .. } => check_name("user name", user),
            AuthChange::RevokeToken { .. } => Ok(()),
            AuthChange::IssueSessionToken { id: 0, .. } => {
                Err("token id 0 is reserved for members' own use".to_owned())
            }
            AuthChange::IssueSessionToken { .. } => Ok(()),
            AuthChange::PruneTokens { tokens_max } => {
                if *tokens_max == 0 || *tokens_max as usize > limits::TOKENS_PRUNED_PER_CHANGE_MAX {
                    return Err(format!(
                        "tokens_max must be 1 to tokens_pruned_per_change_max = {}",
                        limits::TOKENS_PRUNED_PER_CHANGE_MAX
                    ));
                }
                Ok(())
            }
        }
    }

    /// Bytes of names and grants the change carries.
    pub fn size_bytes(&self) -> usize {
        match self {
            AuthChange::PutUser { name } | AuthChange::RemoveUser { name } | AuthChange::RemoveRole { name } => {
                name.len()
            }
            AuthChange::PutRole { name, grants } => {
                name.len() + grants.iter().map(|grant| grant.prefix.len() + 1).sum::<usize>()
            }
            AuthChange::BindRole { user, role } | AuthChange::UnbindRole { user, role } => user.len() + role.len(),
            AuthChange::IssueToken { user, .. } => user.len() + 16 + 32 + 8,
            AuthChange::RevokeToken { .. } => 16,
            AuthChange::IssueSessionToken { .. } => 16 + 16 + 32 + 32 + 8,
            AuthChange::PruneTokens { .. } => 4,
        }
    }
}

/// SHA-256 of a secret: what the auth state stores of a token.
pub fn sha256(secret: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, secret).as_ref());
    out
}

/// Whether two secrets (or their hashes) are equal, in time that depends
/// on their length only.
pub fn constant_time_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |difference, (x, y)| difference | (x ^ y)) == 0
}

/// A token split into its id and secret, as a caller presents it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenParts {
    pub id: u128,
    pub secret: [u8; 32],
}

impl std::fmt::Debug for TokenParts {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "TokenParts {{ id: {:032x}, secret: <hidden> }}", self.id)
    }
}

const TOKEN_PREFIX: &str = "lode_";

impl TokenParts {
    /// Parses `lode_<32 hex id>_<64 hex secret>`; the message never repeats
    /// the text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let malformed = || "the token is not lode_<32 hex digits>_<64 hex digits>".to_owned();
        let rest = text.trim().strip_prefix(TOKEN_PREFIX).ok_or_else(malformed)?;
        let (id, secret) = rest.split_once('_').ok_or_else(malformed)?;
        if id.len() != 32 || secret.len() != 64 {
            return Err(malformed());
        }
        let id = u128::from_str_radix(id, 16).map_err(|_| malformed())?;
        let mut bytes = [0u8; 32];
        for (index, byte) in bytes.iter_mut().enumerate() {
            let pair = secret.get(index * 2..index * 2 + 2).ok_or_else(malformed)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| malformed())?;
        }
        Ok(TokenParts { id, secret: bytes })
    }

    /// The token's text, to hand to its holder once.
    pub fn to_text(&self) -> String {
        let secret: String = self.secret.iter().map(|byte| format!("{byte:02x}")).collect();
        format!("{TOKEN_PREFIX}{:032x}_{secret}", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(prefix: &str, permission: Permission) -> Grant {
        Grant {
            prefix: prefix.to_owned(),
            permission,
        }
    }

    #[test]
    fn grants_cover_their_prefix_at_their_level_and_below() {
        let grants = [grant("config", Permission::Read), grant("orders/", Permission::Write)];
        assert!(permits(&grants, "config", Access::Read));
        assert!(permits(&grants, "config-eu", Access::Read));
        assert!(!permits(&grants, "config", Access::Write));
        assert!(!permits(&grants, "secrets", Access::Read));
        assert!(permits(&grants, "orders/eu", Access::Write));
        assert!(permits(&grants, "orders/eu", Access::Read));
        assert!(!permits(&grants, "orders/eu", Access::Admin));
        assert!(!is_cluster_admin(&grants));
        assert!(is_cluster_admin(&[grant("", Permission::Admin)]));
        assert!(!is_cluster_admin(&[grant("config", Permission::Admin)]));
        assert!(!is_cluster_admin(&[grant(AUTH_NAMESPACE, Permission::Admin)]));
    }

    #[test]
    fn a_token_round_trips_and_bad_text_is_refused_without_echo() {
        let parts = TokenParts {
            id: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            secret: [0xa5; 32],
        };
        let text = parts.to_text();
        assert_eq!(TokenParts::parse(&text), Ok(parts.clone()));
        assert!(!format!("{parts:?}").contains("a5a5"), "Debug shows the secret");
        for bad in [
            "",
            "lode_",
            "lode_xyz_abc",
            &text[..text.len() - 1],
            &text.replace("lode_", "etcd_"),
        ] {
            let error = TokenParts::parse(bad).expect_err("refused");
            assert!(!error.contains("a5a5"), "the message repeats the secret: {error}");
        }
    }

    #[test]
    fn grants_parse_from_the_cli_form() {
        assert_eq!(Grant::parse("read:config"), Ok(grant("config", Permission::Read)));
        assert_eq!(Grant::parse("admin:"), Ok(grant("", Permission::Admin)));
        assert!(Grant::parse("config").is_err());
        assert!(Grant::parse("owner:config").is_err());
        // Lode's own names are spelled as refusals show them.
        assert_eq!(Grant::parse("write:\\0queue"), Ok(grant("\0queue", Permission::Write)));
        assert_eq!(
            Grant::parse("read:\\0session\\0cart"),
            Ok(grant("\0session\0cart", Permission::Read))
        );
    }
}
