//! The certificate served on the client port, and its reloads.
//!
//! [`Certs`] is the server config's certificate resolver: each handshake
//! takes the certificate in force (a read lock and an `Arc` clone).
//! [`Certs::reload`] reads both files again; a change that parses, whose
//! key matches its certificate and that has not expired replaces the
//! certificate for new handshakes (open connections keep theirs); anything
//! else (not yet valid included) is refused with one log line, and the
//! certificate in force stays. The same bad files (or the same read error)
//! are not reported again until they change; SIGHUP always reports. A
//! certificate refused as not yet valid is taken by the watch once it is.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use txgate_config::ServerTlsConfig;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::metrics::Metrics;

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    /// The files changed and the new certificate is served.
    Loaded,
    /// The files are as they were.
    Unchanged,
    /// The files changed but cannot be served; the old certificate stays.
    Refused(String),
}

/// The certificate chain and key files' bytes.
type Files = (Vec<u8>, Vec<u8>);

/// A certificate ready to serve, and when it is valid.
struct Loaded {
    key: Arc<CertifiedKey>,
    not_before: i64,
    not_after: i64,
}

impl Loaded {
    /// Whether clients would take it now.
    fn valid_now(&self) -> Result<(), &'static str> {
        let now = now_secs();
        if self.not_after < now {
            return Err("has expired");
        }
        if self.not_before > now {
            return Err("is not valid yet");
        }
        Ok(())
    }
}

/// The certificate in force, and where it comes from.
pub(crate) struct Certs {
    /// Where the files are (`cert_chain_path`, `key_path`).
    files: ServerTlsConfig,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The two files as last read (loaded or refused), or why they could
    /// not be read. Held for a whole reload: the SIGHUP reload and the
    /// file watch never interleave.
    seen: Mutex<Result<Files, String>>,
    /// When the refused files' certificate becomes valid (Unix seconds;
    /// 0: none waiting): the watch parses them again then, unchanged.
    valid_from: AtomicI64,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Certs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certs")
            .field("cert_chain_path", &self.files.cert_chain_path)
            .field("key_path", &self.files.key_path)
            .finish_non_exhaustive()
    }
}

impl Certs {
    /// Loads the certificate at start; an error (unreadable, unparsable,
    /// key not matching) refuses to start. An expired certificate is
    /// served, with a warning: the gauge and its alert say it.
    pub(crate) fn load(
        config: &ServerTlsConfig,
        provider: Arc<CryptoProvider>,
        metrics: Arc<Metrics>,
    ) -> Result<Certs, String> {
        let files = read_files(config)?;
        let loaded = parse(config, &files, &provider)?;
        if let Err(why) = loaded.valid_now() {
            tracing::warn!(path = %config.cert_chain_path, "{why}: clients will refuse it");
        }
        metrics.tls.certificate_expiry.set(loaded.not_after);
        Ok(Certs {
            files: config.clone(),
            provider,
            current: RwLock::new(loaded.key),
            seen: Mutex::new(Ok(files)),
            valid_from: AtomicI64::new(0),
            metrics,
        })
    }

    /// Reads the files again; `force` parses them even when unchanged
    /// (SIGHUP: the operator asked).
    pub(crate) fn reload(&self, force: bool) -> Reload {
        let outcome = self.reload_from(force);
        let path = &self.files.cert_chain_path;
        match &outcome {
            Reload::Loaded => {
                self.metrics.tls.reload("loaded");
                tracing::info!(path = %path, "TLS certificate reloaded");
            }
            Reload::Unchanged => self.metrics.tls.reload("unchanged"),
            Reload::Refused(why) => {
                self.metrics.tls.reload("refused");
                tracing::error!(path = %path, error = %why, "TLS certificate not reloaded; the previous one stays");
            }
        }
        outcome
    }

    fn reload_from(&self, force: bool) -> Reload {
        let config = &self.files;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let files = read_files(config);
        let valid_from = self.valid_from.load(Ordering::Relaxed);
        let now_valid = valid_from != 0 && now_secs() >= valid_from;
        if *seen == files && !force && !now_valid {
            return Reload::Unchanged;
        }
        self.valid_from.store(0, Ordering::Relaxed);
        *seen = files.clone();
        let files = match files {
            Ok(files) => files,
            Err(e) => return Reload::Refused(e),
        };
        let loaded = match parse(config, &files, &self.provider) {
            Ok(loaded) => loaded,
            Err(e) => return Reload::Refused(e),
        };
        if let Err(why) = loaded.valid_now() {
            if loaded.not_before > now_secs() {
                // Issued ahead (or the clocks disagree): taken when valid.
                self.valid_from.store(loaded.not_before, Ordering::Relaxed);
            }
            return Reload::Refused(format!("the new certificate {why}"));
        }
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = loaded.key;
        self.metrics.tls.certificate_expiry.set(loaded.not_after);
        Reload::Loaded
    }

    /// The certificate in force.
    pub(crate) fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Reads the files every `interval` until `stop`, loading a change.
pub(crate) async fn watch(certs: Arc<Certs>, interval: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        let certs = certs.clone();
        // File reads off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || certs.reload(false)).await;
    }
}

fn read_files(config: &ServerTlsConfig) -> Result<Files, String> {
    let read =
        |path: &str, key: &str| std::fs::read(path).map_err(|e| format!("{key} `{path}`: {e}"));
    Ok((
        read(&config.cert_chain_path, "server.tls.cert_chain_path")?,
        read(&config.key_path, "server.tls.key_path")?,
    ))
}

/// Parses the chain and key as read, checks that they match, and reads
/// the leaf's expiry.
fn parse(
    config: &ServerTlsConfig,
    (chain, key): &Files,
    provider: &CryptoProvider,
) -> Result<Loaded, String> {
    let cert_path = &config.cert_chain_path;
    let chain = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("server.tls.cert_chain_path `{cert_path}`: {e}"))?;
    if chain.is_empty() {
        return Err(format!(
            "server.tls.cert_chain_path `{cert_path}`: no certificate in the file"
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("server.tls.key_path `{}`: {e}", config.key_path))?;
    let (not_before, not_after) = {
        let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).map_err(|e| {
            format!("server.tls.cert_chain_path `{cert_path}`: the first certificate does not parse: {e}")
        })?;
        let validity = leaf.validity();
        (
            validity.not_before.timestamp(),
            validity.not_after.timestamp(),
        )
    };
    let key = CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        format!(
            "server.tls.key_path `{}` does not go with the certificate: {e}",
            config.key_path
        )
    })?;
    Ok(Loaded {
        key: Arc::new(key),
        not_before,
        not_after,
    })
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `localhost` valid over
    /// `[not_before, not_after]` (Unix seconds), and its key; PEM.
    fn pair(not_before: i64, not_after: i64) -> (String, String) {
        let at = |secs: i64| rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(secs as u64);
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.not_before = at(not_before);
        params.not_after = at(not_after);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn reloads_take_good_files_refuse_bad_ones_and_wait_for_a_future_one() {
        let dir = std::env::temp_dir().join(format!("txgate-certs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = ServerTlsConfig {
            cert_chain_path: dir.join("c.pem").to_str().unwrap().to_string(),
            key_path: dir.join("k.pem").to_str().unwrap().to_string(),
            ..ServerTlsConfig::default()
        };
        let write = |(cert, key): &(String, String)| {
            std::fs::write(&config.cert_chain_path, cert).unwrap();
            std::fs::write(&config.key_path, key).unwrap();
        };
        let now = now_secs();
        write(&pair(now - 60, now + 86_400));
        let provider = crate::upstream::tls::provider();
        let metrics = Arc::new(Metrics::new());
        let certs = Certs::load(&config, provider, metrics.clone()).unwrap();
        assert_eq!(certs.reload(false), Reload::Unchanged);
        // A key that is not the certificate's: refused, once.
        let (cert, _) = pair(now - 60, now + 86_400);
        let (_, other_key) = pair(now - 60, now + 86_400);
        write(&(cert, other_key));
        assert!(matches!(certs.reload(false), Reload::Refused(_)));
        assert_eq!(certs.reload(false), Reload::Unchanged);
        // Expired: refused.
        write(&pair(now - 86_400, now - 60));
        assert!(matches!(certs.reload(false), Reload::Refused(why) if why.contains("expired")));
        // Valid from the third whole second after `soon` (read here: what
        // came before may have taken seconds on a loaded machine), so not
        // for over two seconds: refused, then taken once valid (the sleep
        // ends past that), the files unchanged.
        let soon = now_secs();
        let future = pair(soon + 3, soon + 86_400);
        write(&future);
        assert!(
            matches!(certs.reload(false), Reload::Refused(why) if why.contains("not valid yet"))
        );
        assert_eq!(certs.reload(false), Reload::Unchanged);
        std::thread::sleep(Duration::from_millis(3100));
        assert_eq!(certs.reload(false), Reload::Loaded);
        assert_eq!(metrics.tls.certificate_expiry.get(), soon + 86_400);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
