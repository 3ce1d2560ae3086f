//! `lode tls`: a cluster CA and certificates signed by it, for members
//! (server and client use, valid for the hosts given) and for clients.
//! `lode dev --tls` makes its own with the same functions.
//!
//! Keys are ECDSA P-256, written 0600 in a 0700 directory. A CA is ten
//! years valid, a certificate one year; a certificate issued later is
//! signed by the CA key in the same directory.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use clap::Subcommand;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// The CA's common name; the issuer of every certificate `lode tls` signs.
const CA_NAME: &str = "Lode cluster CA";
const CA_VALID_DAYS: i64 = 3650;
const CERTIFICATE_VALID_DAYS: i64 = 365;

#[derive(Subcommand, Debug)]
pub enum TlsCommand {
    /// Create a cluster CA: DIR/ca.pem (give it to every member and
    /// client) and DIR/ca-key.pem (keep it secret).
    Ca {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Issue DIR/NAME.pem and DIR/NAME-key.pem, signed by the CA in DIR,
    /// valid for HOSTS (DNS names or IP addresses) as a server and as a
    /// client.
    Issue {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long, value_delimiter = ',', required = true)]
        hosts: Vec<String>,
    },
}

pub fn run(command: TlsCommand) -> Result<(), anyhow::Error> {
    match command {
        TlsCommand::Ca { dir } => create_ca(&dir),
        TlsCommand::Issue { dir, name, hosts } => issue(&dir, &name, &hosts),
    }
}

fn ca_params(days: i64) -> Result<CertificateParams, anyhow::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, days)?;
    Ok(params)
}

fn set_validity(params: &mut CertificateParams, days: i64) -> Result<(), anyhow::Error> {
    let now_seconds = (lode_client::facade::now_micros() / 1_000_000) as i64;
    let now = time::OffsetDateTime::from_unix_timestamp(now_seconds)?;
    // An hour of slack for clocks a little behind this one.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
    Ok(())
}

/// Creates DIR/ca.pem and DIR/ca-key.pem.
pub fn create_ca(dir: &Path) -> Result<(), anyhow::Error> {
    private_directory(dir)?;
    let key = KeyPair::generate()?;
    let certificate = ca_params(CA_VALID_DAYS)?.self_signed(&key)?;
    write_file(&dir.join("ca.pem"), &certificate.pem())?;
    write_file(&dir.join("ca-key.pem"), &key.serialize_pem())?;
    Ok(())
}

/// Issues DIR/NAME.pem and DIR/NAME-key.pem with the CA in DIR.
pub fn issue(dir: &Path, name: &str, hosts: &[String]) -> Result<(), anyhow::Error> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        anyhow::bail!("certificate name {name:?} must be letters, digits, '-' or '_'");
    }
    let ca_key_pem = std::fs::read_to_string(dir.join("ca-key.pem")).map_err(|error| {
        anyhow::anyhow!(
            "{}: {error} (create it with `lode tls ca`)",
            dir.join("ca-key.pem").display()
        )
    })?;
    let ca_key = KeyPair::from_pem(&ca_key_pem)?;
    // The issuer is named by its distinguished name and key: the same CA
    // parameters with the same key sign for the CA in DIR.
    let ca = ca_params(CA_VALID_DAYS)?.self_signed(&ca_key)?;
    let mut params = CertificateParams::new(hosts.to_vec())?;
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, name);
    params.distinguished_name = subject;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, CERTIFICATE_VALID_DAYS)?;
    let key = KeyPair::generate()?;
    let certificate = params.signed_by(&key, &ca, &ca_key)?;
    write_file(&dir.join(format!("{name}.pem")), &certificate.pem())?;
    write_file(&dir.join(format!("{name}-key.pem")), &key.serialize_pem())?;
    Ok(())
}

fn private_directory(dir: &Path) -> Result<(), anyhow::Error> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|error| anyhow::anyhow!("{}: {error}", dir.display()))
}

/// Writes `text` to a new file readable by its owner only (a temporary
/// name, then renamed, so a reader never sees half a key).
fn write_file(path: &Path, text: &str) -> Result<(), anyhow::Error> {
    let temporary = path.with_extension("pem.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(|error| anyhow::anyhow!("{}: {error}", temporary.display()))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    Ok(())
}
