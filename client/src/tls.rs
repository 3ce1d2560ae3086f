//! TLS for the connections the SDK and members dial (rustls with the ring
//! provider; no OpenSSL).
//!
//! A [`ClientTls`] verifies the server against a CA of the caller's (the
//! cluster's CA, not the system's roots) and may present a certificate of
//! its own. Its configuration comes from a source called at every dial, so
//! a member that re-reads its certificate files hands new dials the new
//! ones without a restart.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::error::LodeError;
use crate::facade::ByteStream;

/// Largest certificate, CA or key file read, in bytes.
pub const PEM_FILE_BYTES_MAX: u64 = 1 << 20;

/// Where a TLS client configuration comes from, asked at every dial.
pub type ClientConfigSource = Arc<dyn Fn() -> Arc<ClientConfig> + Send + Sync>;

/// TLS for a client: whom to trust, and optionally who it is.
#[derive(Clone)]
pub struct ClientTls {
    source: ClientConfigSource,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("ClientTls")
    }
}

/// How a connection's bytes travel.
#[derive(Clone, Debug, Default)]
pub enum Transport {
    /// In the clear (loopback, or a network the operator trusts).
    #[default]
    Plain,
    Tls(ClientTls),
    /// To a server in this process, whose calls run in the caller's task.
    InProcess(crate::in_process::InProcess),
}

impl ClientTls {
    /// Trusts the CA certificates in `ca_file` (PEM) and presents, when
    /// given, the certificate chain and private key in `identity` (PEM
    /// files: certificate, key).
    pub fn from_files(ca_file: &Path, identity: Option<(&Path, &Path)>) -> Result<Self, LodeError> {
        let roots = read_roots(ca_file).map_err(LodeError::Invalid)?;
        let identity = match identity {
            Some((certificate, key)) => Some((
                read_certificates(certificate).map_err(LodeError::Invalid)?,
                read_private_key(key).map_err(LodeError::Invalid)?,
            )),
            None => None,
        };
        let config = Arc::new(client_config(roots, identity).map_err(LodeError::Invalid)?);
        Ok(Self::from_source(Arc::new(move || config.clone())))
    }

    /// A configuration asked for afresh at every dial.
    pub fn from_source(source: ClientConfigSource) -> Self {
        Self { source }
    }

    /// Runs the handshake over `stream` to the server at `address`
    /// (`host:port`), whose certificate must name `host`.
    pub async fn connect(&self, stream: Box<dyn ByteStream>, address: &str) -> io::Result<Box<dyn ByteStream>> {
        let name = server_name(address)?;
        let connector = TlsConnector::from((self.source)());
        let stream = connector.connect(name, stream).await?;
        Ok(Box::new(stream))
    }
}

/// The rustls provider every Lode TLS configuration uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client configuration trusting `roots`, presenting `identity`.
pub fn client_config(
    roots: RootCertStore,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS versions: {error}"))?
        .with_root_certificates(roots);
    match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|error| format!("the client certificate and key do not fit together: {error}")),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The host of `host:port` as a TLS server name (a DNS name or an IP
/// address; IPv6 in brackets).
fn server_name(address: &str) -> io::Result<ServerName<'static>> {
    let host = match address.rsplit_once(':') {
        Some((host, _port)) => host,
        None => address,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|error| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{host:?} is not a TLS server name: {error}"),
        )
    })
}

/// Reads a PEM file of at most [`PEM_FILE_BYTES_MAX`] bytes.
fn read_pem_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("{}: {error}", path.display()))?;
    if bytes.len() as u64 > PEM_FILE_BYTES_MAX {
        return Err(format!(
            "{} is larger than {PEM_FILE_BYTES_MAX} bytes (pem_file_bytes_max)",
            path.display()
        ));
    }
    Ok(bytes)
}

/// The certificates of a PEM file, in order; at least one.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read_pem_file(path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{}: {error}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certificates)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read_pem_file(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| format!("{}: no usable private key: {error}", path.display()))
}

/// The CA certificates of a PEM file as trust roots.
pub fn read_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(path)? {
        roots
            .add(certificate)
            .map_err(|error| format!("{}: not a usable CA certificate: {error}", path.display()))?;
    }
    Ok(roots)
}
