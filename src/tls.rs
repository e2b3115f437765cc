//! TLS for the API: the `[tls]` settings, the controller's own certificate
//! authority, the server configuration `berth serve` listens with, and the
//! client configuration the command line and machine agents verify the
//! controller with.
//!
//! Unless the operator configures a certificate and key (`[tls] cert_file`,
//! `key_file`), the controller makes a CA on its first start and keeps it in
//! its data directory (`ca.crt`, which clients are given, and `ca.key`,
//! readable by its owner only). At every start it issues itself a server
//! certificate from that CA for the names it is reached by: `localhost`,
//! the loopback addresses, the listen address, `controller_url`'s host and
//! `[tls] names`. The CA stays, so clients that trust it keep working
//! across restarts and configuration changes.
//!
//! TLS is on whenever the listen address is not a loopback address; plain
//! HTTP is never served beyond the host.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

use crate::contracts::addresses::url_host;

/// The CA certificate in the data directory: what clients trust.
pub const CA_CERT_FILE: &str = "ca.crt";

/// The CA's private key in the data directory (mode 0600).
pub const CA_KEY_FILE: &str = "ca.key";

/// The CA's subject. Fixed, so that the CA can be rebuilt from its kept
/// key to sign each start's server certificate.
const CA_COMMON_NAME: &str = "berth controller CA";

/// `[tls]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Serve HTTPS. `None`: on when the listen address is not a loopback
    /// address. `false` is refused for a non-loopback listen address.
    pub enabled: Option<bool>,
    /// A PEM certificate chain to serve instead of the controller's own
    /// CA's (with `key_file`).
    pub cert_file: Option<PathBuf>,
    /// The PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// More DNS names or IP addresses for the generated server certificate
    /// (the names clients and agents reach the controller by).
    pub names: Vec<String>,
}

impl TlsConfig {
    /// Whether the controller listening on `listen` serves HTTPS.
    pub fn serves_tls(&self, listen: SocketAddr) -> bool {
        self.enabled
            .unwrap_or(!listen.ip().is_loopback() || self.cert_file.is_some())
    }

    /// # Errors
    ///
    /// A sentence naming the setting that cannot work.
    pub fn validate(&self, listen: SocketAddr) -> Result<(), String> {
        if self.enabled == Some(false) && !listen.ip().is_loopback() {
            return Err(format!(
                "tls.enabled is false but listen {listen} is not a loopback address: berth \
                 never serves plain HTTP beyond this host; remove tls.enabled (TLS is on by \
                 default there) or listen on 127.0.0.1"
            ));
        }
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) | (None, Some(_)) => {
                return Err(
                    "tls.cert_file and tls.key_file go together: set both, or neither \
                            to use the controller's own CA"
                        .into(),
                );
            }
            (Some(_), Some(_)) if self.enabled == Some(false) => {
                return Err("tls.cert_file is set but tls.enabled is false".into());
            }
            // The names go into the certificate the controller issues itself;
            // a certificate of one's own already names what it names.
            (Some(_), Some(_)) if !self.names.is_empty() => {
                return Err(
                    "tls.names is set with tls.cert_file: the names go into the certificate \
                     the controller issues itself, and tls.cert_file's already names its \
                     hosts; leave out tls.names, or tls.cert_file and tls.key_file"
                        .into(),
                );
            }
            _ => {}
        }
        for name in &self.names {
            if SubjectName::parse(name).is_none() {
                return Err(format!(
                    "tls.names: {name:?} is neither a DNS name nor an IP address"
                ));
            }
        }
        if !self.names.is_empty() && !self.serves_tls(listen) {
            return Err(format!(
                "tls.names is set, but TLS is off for listen {listen} (a loopback address): the \
                 names would go into no certificate; set tls.enabled = true, or leave out \
                 tls.names"
            ));
        }
        Ok(())
    }
}

/// Why TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM {what}")]
    NoPem { path: String, what: &'static str },
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot use the certificate and key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A name a server certificate is issued for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SubjectName {
    Dns(String),
    Ip(IpAddr),
}

impl SubjectName {
    fn parse(name: &str) -> Option<SubjectName> {
        let name = name.trim().trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = name.parse::<IpAddr>() {
            return Some(SubjectName::Ip(ip));
        }
        let valid_label = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        };
        let dns = name.strip_prefix("*.").unwrap_or(name);
        (!name.is_empty() && name.len() <= 253 && dns.split('.').all(valid_label))
            .then(|| SubjectName::Dns(name.to_ascii_lowercase()))
    }
}

/// The names the controller's generated certificate is issued for:
/// `localhost` and the loopback addresses, the listen address (unless it
/// is unspecified, when the host's name stands for it), the host of
/// `controller_url`, and `extra`.
pub fn server_names(
    listen: SocketAddr,
    controller_url: Option<&str>,
    extra: &[String],
) -> Vec<String> {
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if listen.ip().is_unspecified() {
        if let Some(host) = host_name() {
            names.push(host);
        }
    } else {
        names.push(listen.ip().to_string());
    }
    if let Some(host) = controller_url.and_then(url_host) {
        names.push(host.to_string());
    }
    names.extend(extra.iter().cloned());
    let mut unique = Vec::new();
    for name in names {
        if let Some(parsed) = SubjectName::parse(&name) {
            if !unique.contains(&parsed) {
                unique.push(parsed);
            }
        }
    }
    unique
        .into_iter()
        .map(|name| match name {
            SubjectName::Dns(name) => name,
            SubjectName::Ip(ip) => ip.to_string(),
        })
        .collect()
}

/// This host's name, from the kernel.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
}

/// The certificate the controller serves and the CA clients trust.
pub struct ServerIdentity {
    /// For actix-web's rustls listener.
    pub config: rustls::ServerConfig,
    /// The controller's own CA certificate (PEM), as kept in its data
    /// directory (`None` for an operator's certificate).
    pub ca_cert: Option<String>,
}

/// The TLS identity the controller serves with: the operator's certificate
/// and key when `tls` names them, else a certificate for `names` issued by
/// the data directory's CA (made on first use).
///
/// # Errors
///
/// [`TlsError`] naming the file or what could not be made.
pub fn server_identity(
    tls: &TlsConfig,
    data_dir: &Path,
    names: &[String],
) -> Result<ServerIdentity, TlsError> {
    let (chain, key, ca_cert) = match (&tls.cert_file, &tls.key_file) {
        (Some(cert_file), Some(key_file)) => {
            let chain = read_certificates(cert_file)?;
            let key = read_private_key(key_file)?;
            (chain, key, None)
        }
        _ => {
            let ca = CertificateAuthority::open_or_create(data_dir)?;
            let (cert, key) = ca.issue_server(names)?;
            (vec![cert], key, Some(ca.cert_pem))
        }
    };
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    Ok(ServerIdentity { config, ca_cert })
}

/// The controller's own CA, kept in the data directory.
struct CertificateAuthority {
    /// The kept certificate, as clients are given it.
    cert_pem: String,
    key: rcgen::KeyPair,
    /// Rebuilt from the kept key with the fixed subject: signs like the
    /// kept certificate.
    issuer: rcgen::Certificate,
}

impl CertificateAuthority {
    fn params() -> Result<rcgen::CertificateParams, rcgen::Error> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        let mut subject = rcgen::DistinguishedName::new();
        subject.push(rcgen::DnType::OrganizationName, "berth");
        subject.push(rcgen::DnType::CommonName, CA_COMMON_NAME);
        params.distinguished_name = subject;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        Ok(params)
    }

    /// The CA in `data_dir`, made and written there when either file is
    /// missing.
    fn open_or_create(data_dir: &Path) -> Result<CertificateAuthority, TlsError> {
        let cert_file = data_dir.join(CA_CERT_FILE);
        let key_file = data_dir.join(CA_KEY_FILE);
        let params = Self::params()?;
        if cert_file.exists() && key_file.exists() {
            let read = |path: &Path| {
                std::fs::read_to_string(path).map_err(|source| TlsError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            };
            let key = rcgen::KeyPair::from_pem(&read(&key_file)?)?;
            let issuer = params.self_signed(&key)?;
            return Ok(CertificateAuthority {
                cert_pem: read(&cert_file)?,
                key,
                issuer,
            });
        }
        let key = rcgen::KeyPair::generate()?;
        let issuer = params.self_signed(&key)?;
        write_file(&key_file, &key.serialize_pem(), 0o600)?;
        let cert_pem = issuer.pem();
        write_file(&cert_file, &cert_pem, 0o644)?;
        log::info!(
            "made the controller's certificate authority: {} (give it to clients)",
            cert_file.display()
        );
        Ok(CertificateAuthority {
            cert_pem,
            key,
            issuer,
        })
    }

    /// A server certificate for `names` and its key.
    fn issue_server(
        &self,
        names: &[String],
    ) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), TlsError> {
        let mut params = rcgen::CertificateParams::new(names.to_vec())?;
        let mut subject = rcgen::DistinguishedName::new();
        subject.push(rcgen::DnType::OrganizationName, "berth");
        subject.push(
            rcgen::DnType::CommonName,
            names.first().map_or("berth controller", String::as_str),
        );
        params.distinguished_name = subject;
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer, &self.key)?;
        let key = PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        Ok((cert.der().clone(), key))
    }
}

/// Writes `contents` to `path` with `mode`, replacing nothing half-written.
fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), TlsError> {
    use std::io::Write as _;
    let failed = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let partial = path.with_extension("partial");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(&partial).map_err(failed)?;
    file.write_all(contents.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&partial, path).map_err(failed)
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    certificates_in(&pem, &path.display().to_string())
}

fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::NoPem {
        path: path.display().to_string(),
        what: "private key",
    })
}

/// The certificates in PEM text `pem` read from `origin`.
///
/// # Errors
///
/// [`TlsError::NoPem`] when it holds none.
pub fn certificates_in(pem: &[u8], origin: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::NoPem {
            path: origin.to_string(),
            what: "certificate",
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoPem {
            path: origin.to_string(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// A client configuration that trusts only the CA certificates in `pem`
/// (read from `origin`, named in errors).
///
/// # Errors
///
/// [`TlsError`] when `pem` holds no certificate or one rustls cannot use
/// as a trust anchor.
pub fn client_config(pem: &[u8], origin: &str) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates_in(pem, origin)? {
        roots
            .add(cert)
            .map_err(|e| rustls::Error::General(format!("{origin}: {e}")))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use rustls::client::danger::ServerCertVerifier as _;

    use super::*;

    fn listen(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn tls_is_on_by_default_off_loopback_and_cannot_be_turned_off_there() {
        let default = TlsConfig::default();
        assert!(!default.serves_tls(listen("127.0.0.1:17070")));
        assert!(!default.serves_tls(listen("[::1]:17070")));
        assert!(default.serves_tls(listen("0.0.0.0:17070")));
        assert!(default.serves_tls(listen("[::]:17070")));
        let on = TlsConfig {
            enabled: Some(true),
            ..TlsConfig::default()
        };
        assert!(on.serves_tls(listen("127.0.0.1:17070")));
        let off = TlsConfig {
            enabled: Some(false),
            ..TlsConfig::default()
        };
        assert!(off.validate(listen("127.0.0.1:1")).is_ok());
        let e = off.validate(listen("0.0.0.0:17070")).unwrap_err();
        assert!(
            e.starts_with("tls.enabled is false but listen 0.0.0.0:17070"),
            "{e}"
        );
    }

    #[test]
    fn names_for_the_controllers_own_certificate_are_refused_beside_a_certificate_file() {
        let own = TlsConfig {
            cert_file: Some("/etc/berth/server.crt".into()),
            key_file: Some("/etc/berth/server.key".into()),
            ..TlsConfig::default()
        };
        assert!(own.validate(listen("127.0.0.1:1")).is_ok());
        let named = TlsConfig {
            names: vec!["controller.example.com".into()],
            ..own
        };
        assert_eq!(
            named.validate(listen("127.0.0.1:1")).unwrap_err(),
            "tls.names is set with tls.cert_file: the names go into the certificate the \
             controller issues itself, and tls.cert_file's already names its hosts; leave out \
             tls.names, or tls.cert_file and tls.key_file"
        );
        let alone = TlsConfig {
            names: vec!["controller.example.com".into()],
            ..TlsConfig::default()
        };
        assert!(alone.validate(listen("0.0.0.0:17070")).is_ok());
        // On loopback TLS is off unless asked for: the names would go nowhere.
        assert_eq!(
            alone.validate(listen("127.0.0.1:1")).unwrap_err(),
            "tls.names is set, but TLS is off for listen 127.0.0.1:1 (a loopback address): the \
             names would go into no certificate; set tls.enabled = true, or leave out tls.names"
        );
        let asked = TlsConfig {
            enabled: Some(true),
            ..alone
        };
        assert!(asked.validate(listen("127.0.0.1:1")).is_ok());
        // A certificate of one's own turns TLS on, loopback or not.
        let own_on_loopback = TlsConfig {
            cert_file: Some("/etc/berth/server.crt".into()),
            key_file: Some("/etc/berth/server.key".into()),
            ..TlsConfig::default()
        };
        assert!(own_on_loopback.serves_tls(listen("127.0.0.1:17070")));
    }

    #[test]
    fn a_certificate_needs_its_key_and_names_must_be_names() {
        let half = TlsConfig {
            cert_file: Some("/etc/berth/server.crt".into()),
            ..TlsConfig::default()
        };
        assert!(half
            .validate(listen("127.0.0.1:1"))
            .unwrap_err()
            .contains("go together"));
        for bad in ["", "bad name", "-x.example", "a..b", "x_y.example"] {
            let config = TlsConfig {
                names: vec![bad.to_string()],
                ..TlsConfig::default()
            };
            let e = config.validate(listen("127.0.0.1:1")).unwrap_err();
            assert!(e.starts_with("tls.names"), "{bad:?}: {e}");
        }
        let good = TlsConfig {
            names: vec![
                "controller.example.com".into(),
                "10.0.0.1".into(),
                "[fd00::1]".into(),
            ],
            ..TlsConfig::default()
        };
        assert!(good.validate(listen("0.0.0.0:17070")).is_ok());
    }

    #[test]
    fn server_names_cover_loopback_the_listen_address_and_controller_url() {
        let names = server_names(
            listen("127.0.0.2:17070"),
            Some("https://Controller.Example.com:17070/"),
            &["berth.internal".into(), "localhost".into()],
        );
        assert_eq!(
            names,
            [
                "localhost",
                "127.0.0.1",
                "::1",
                "127.0.0.2",
                "controller.example.com",
                "berth.internal"
            ]
        );
        let v6 = server_names(listen("[::1]:1"), Some("https://[fd00::2]:17070"), &[]);
        assert!(v6.contains(&"fd00::2".to_string()), "{v6:?}");
    }

    #[test]
    fn the_ca_is_made_once_kept_private_and_signs_a_verifiable_server_certificate() {
        let dir = std::env::temp_dir().join(format!("berth-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let names = server_names(listen("127.0.0.1:1"), None, &[]);
        let first = server_identity(&TlsConfig::default(), &dir, &names).unwrap();
        let ca_file = dir.join(CA_CERT_FILE);
        let ca_pem = std::fs::read(&ca_file).unwrap();
        assert_eq!(
            first.ca_cert.as_deref().map(str::as_bytes),
            Some(&ca_pem[..])
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(CA_KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A second start keeps the CA and issues a new server certificate
        // that the kept CA verifies.
        let kept = CertificateAuthority::open_or_create(&dir).unwrap();
        assert_eq!(std::fs::read(&ca_file).unwrap(), ca_pem);
        assert_eq!(kept.cert_pem.as_bytes(), &ca_pem[..]);
        let (server_cert, _) = kept.issue_server(&names).unwrap();
        let roots = {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates_in(&ca_pem, "ca.crt").unwrap() {
                roots.add(cert).unwrap();
            }
            Arc::new(roots)
        };
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots,
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let now = rustls::pki_types::UnixTime::now();
        for name in ["localhost", "127.0.0.1"] {
            let name = rustls::pki_types::ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&server_cert, &[], &name, &[], now)
                .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        }
        let other = rustls::pki_types::ServerName::try_from("controller.invalid").unwrap();
        assert!(verifier
            .verify_server_cert(&server_cert, &[], &other, &[], now)
            .is_err());
        // A client of another CA does not trust it.
        let elsewhere = std::env::temp_dir().join(format!("berth-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&elsewhere).unwrap();
        server_identity(&TlsConfig::default(), &elsewhere, &names).unwrap();
        let other_ca = std::fs::read(elsewhere.join(CA_CERT_FILE)).unwrap();
        assert_ne!(other_ca, ca_pem);
        let mut other_roots = rustls::RootCertStore::empty();
        for cert in certificates_in(&other_ca, "other").unwrap() {
            other_roots.add(cert).unwrap();
        }
        let other_verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(other_roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let localhost = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        assert!(other_verifier
            .verify_server_cert(&server_cert, &[], &localhost, &[], now)
            .is_err());
        std::fs::remove_dir_all(&dir).ok();
        std::fs::remove_dir_all(&elsewhere).ok();
    }

    #[test]
    fn files_without_pem_are_named_in_the_error() {
        let e = certificates_in(b"not a certificate", "/tmp/x.crt").unwrap_err();
        assert_eq!(e.to_string(), "/tmp/x.crt holds no PEM certificate");
        assert!(client_config(b"", "--ca-cert ca.pem").is_err());
    }
}
