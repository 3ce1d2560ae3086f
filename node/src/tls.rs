//! A member's TLS: one CA, certificate and key (PEM files) for its three
//! ports and for dialing its peers, re-read when the files change.
//!
//! - The peer port requires a client certificate signed by the cluster CA
//!   and, when `peer_names_allowed` is set, one valid for an allowed name.
//! - The client port and the HTTP port present the member's certificate and
//!   verify a client certificate when one is offered (signed by the CA);
//!   the HTTP port offers HTTP/2 and HTTP/1.1 by ALPN.
//! - Dialing a peer presents the member's certificate and trusts the CA
//!   only.
//!
//! Files are looked at (their modification times) at most once per
//! [`TLS_FILES_CHECK_INTERVAL`], on the next handshake after it; a change
//! that does not load (a key written before its certificate) keeps the
//! configuration in use and is logged once.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use lode_client::tls::{client_config, provider, read_certificates, read_private_key, read_roots, ClientTls};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ServerConfig};

/// How often the certificate files are looked at for changes.
pub const TLS_FILES_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Where a member's TLS material lives.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The cluster CA (PEM): it signs every member's and client's certificate.
    pub ca: PathBuf,
    /// This member's certificate chain (PEM), for all its ports and as its
    /// client certificate towards peers.
    pub certificate: PathBuf,
    /// The certificate's private key (PEM).
    pub key: PathBuf,
    /// Names (DNS or IP) a peer's certificate must be valid for, any of
    /// them; empty: any certificate the CA signed.
    pub peer_names_allowed: Vec<String>,
}

/// The configurations built from one reading of the files.
#[derive(Clone)]
struct Built {
    peer_server: Arc<ServerConfig>,
    client_server: Arc<ServerConfig>,
    http_server: Arc<ServerConfig>,
    peer_client: Arc<ClientConfig>,
}

struct Current {
    built: Built,
    modified: Vec<Option<SystemTime>>,
    checked_at: tokio::time::Instant,
}

/// A member's TLS configurations, kept up to date with its files.
pub struct MemberTls {
    files: TlsFiles,
    current: Mutex<Current>,
}

impl std::fmt::Debug for MemberTls {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("MemberTls").field("files", &self.files).finish()
    }
}

impl MemberTls {
    /// Reads the files; fails when they do not make a usable configuration.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, anyhow::Error> {
        for name in &files.peer_names_allowed {
            ServerName::try_from(name.clone())
                .map_err(|error| anyhow::anyhow!("allowed peer name {name:?}: {error}"))?;
        }
        let modified = modification_times(&files);
        let built = build(&files).map_err(anyhow::Error::msg)?;
        Ok(Arc::new(Self {
            files,
            current: Mutex::new(Current {
                built,
                modified,
                checked_at: tokio::time::Instant::now(),
            }),
        }))
    }

    fn built(&self) -> Built {
        let mut current = self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = tokio::time::Instant::now();
        if now.duration_since(current.checked_at) >= TLS_FILES_CHECK_INTERVAL {
            current.checked_at = now;
            let modified = modification_times(&self.files);
            if modified != current.modified {
                current.modified = modified;
                match build(&self.files) {
                    Ok(built) => {
                        current.built = built;
                        tracing::info!(certificate = %self.files.certificate.display(), "TLS files re-read");
                    }
                    Err(error) => tracing::warn!(%error, "changed TLS files do not load; keeping the ones in use"),
                }
            }
        }
        current.built.clone()
    }

    pub fn peer_server(&self) -> Arc<ServerConfig> {
        self.built().peer_server
    }

    pub fn client_server(&self) -> Arc<ServerConfig> {
        self.built().client_server
    }

    pub fn http_server(&self) -> Arc<ServerConfig> {
        self.built().http_server
    }

    /// The TLS a member dials its peers with, following file changes.
    pub fn peer_client(self: &Arc<Self>) -> ClientTls {
        let tls = self.clone();
        ClientTls::from_source(Arc::new(move || tls.built().peer_client))
    }

    /// Whether a peer's certificate (already verified against the CA) is
    /// valid for one of the allowed names.
    pub fn check_peer_name(&self, certificates: Option<&[CertificateDer<'static>]>) -> Result<(), String> {
        if self.files.peer_names_allowed.is_empty() {
            return Ok(());
        }
        let Some(first) = certificates.and_then(|chain| chain.first()) else {
            return Err("the peer presented no certificate".to_owned());
        };
        let certificate =
            webpki::EndEntityCert::try_from(first).map_err(|error| format!("peer certificate: {error}"))?;
        let allowed = self.files.peer_names_allowed.iter().any(|name| {
            ServerName::try_from(name.as_str())
                .map(|name| certificate.verify_is_valid_for_subject_name(&name).is_ok())
                .unwrap_or(false)
        });
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "the peer's certificate is valid for none of the allowed names {:?}",
                self.files.peer_names_allowed
            ))
        }
    }
}

fn modification_times(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    [&files.ca, &files.certificate, &files.key]
        .iter()
        .map(|path| std::fs::metadata(path).and_then(|metadata| metadata.modified()).ok())
        .collect()
}

fn build(files: &TlsFiles) -> Result<Built, String> {
    let roots = Arc::new(read_roots(&files.ca)?);
    let chain = read_certificates(&files.certificate)?;
    let key = read_private_key(&files.key)?;
    let server = |verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>, alpn: Vec<Vec<u8>>| {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS versions: {error}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|error| format!("{}: {error}", files.certificate.display()))?;
        config.alpn_protocols = alpn;
        Ok::<_, String>(Arc::new(config))
    };
    let required = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|error| format!("the CA cannot verify peers: {error}"))?;
    let optional = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|error| format!("the CA cannot verify clients: {error}"))?;
    Ok(Built {
        peer_server: server(required, Vec::new())?,
        client_server: server(optional.clone(), Vec::new())?,
        http_server: server(optional, vec![b"h2".to_vec(), b"http/1.1".to_vec()])?,
        peer_client: Arc::new(client_config((*roots).clone(), Some((chain, key)))?),
    })
}
