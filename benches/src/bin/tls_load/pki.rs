//! The certificates both servers use and the client's TLS settings.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::crypto::{SupportedKxGroup, aws_lc_rs};
use rustls::{ClientConfig, RootCertStore, SupportedCipherSuite};

/// The CA and the server certificate (ECDSA P-256) both servers use.
pub(crate) struct Pki {
    pub(crate) roots: RootCertStore,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Makes both, in `dir` (and the CA as `ca.pem`, for an https:// upstream).
pub(crate) fn pki(dir: &Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&cert_path, leaf.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    Pki {
        roots,
        cert: cert_path,
        key: key_path,
    }
}

/// A client config: `groups` and `suites` (empty: rustls' defaults), no
/// session resumption when `resume` is off.
pub(crate) fn client_config(
    pki: &Pki,
    groups: &[&'static dyn SupportedKxGroup],
    suites: &[SupportedCipherSuite],
    resume: bool,
) -> Arc<ClientConfig> {
    let mut provider = aws_lc_rs::default_provider();
    if !groups.is_empty() {
        provider.kx_groups = groups.to_vec();
    }
    if !suites.is_empty() {
        provider.cipher_suites = suites.to_vec();
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(pki.roots.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Arc::new(config)
}
