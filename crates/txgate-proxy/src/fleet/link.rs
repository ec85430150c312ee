//! The connections to the fleet's Redis, each step within
//! `redis.timeout_ms`.
//!
//! Redis is one URL (`redis://`, `rediss://` for TLS), or a primary found
//! through Sentinel: each connect asks every sentinel at once and takes the
//! first that names a primary which says it is one (a sentinel that is
//! down or slow delays nothing). A connection is only opened to a primary:
//! one that answers `ROLE` as anything else is refused (a user not allowed
//! `ROLE` is taken at its word), and a `READONLY` answer later (a managed
//! Redis failing over behind one name, or a primary demoted under a
//! connection) fails the step, which reconnects.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, RedisError, RedisResult, TlsCertificates, TlsMode,
};
use tokio::sync::Mutex;
use txgate_config::RedisConfig;

/// Where the primary is.
#[derive(Clone)]
enum Target {
    /// One URL.
    Direct(Box<redis::Client>),
    /// Asked of each sentinel at each connect (one client per sentinel,
    /// all asked at once).
    Sentinel(Vec<Arc<Mutex<SentinelClient>>>),
}

/// The fleet's Redis: where it is, and how long any step may take.
#[derive(Clone)]
pub struct Link {
    target: Target,
    connection: AsyncConnectionConfig,
    timeout: Duration,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client's address may carry a password.
        f.debug_struct("Link")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// The link to `config`'s Redis, each step within `config.timeout_ms`.
    /// Connects to nothing yet; fails on a URL the client refuses or a CA
    /// file it cannot read (validated at start).
    pub fn new(config: &RedisConfig) -> RedisResult<Link> {
        let certificates = certificates(config)?;
        let target = if config.uses_sentinel() {
            let clients = config
                .sentinels
                .iter()
                .map(|s| {
                    sentinel_client(config, s, certificates.clone())
                        .map(|c| Arc::new(Mutex::new(c)))
                })
                .collect::<RedisResult<Vec<_>>>()?;
            Target::Sentinel(clients)
        } else {
            Target::Direct(Box::new(match certificates {
                Some(certs) => redis::Client::build_with_tls(config.url.as_str(), certs)?,
                None => redis::Client::open(config.url.as_str())?,
            }))
        };
        let timeout = config.timeout;
        let connection = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        Ok(Link {
            target,
            connection,
            timeout,
        })
    }

    /// A connection to the primary (its `ROLE` checked), all within the
    /// timeout (through Sentinel: asking the sentinels too). Every command
    /// sent on it later fails after the timeout too (and may be bounded
    /// with [`Link::within`] as well).
    pub async fn connect(&self) -> RedisResult<MultiplexedConnection> {
        self.connect_with_slack(Duration::ZERO).await
    }

    /// [`Link::connect`], for a connection whose commands may take `slack`
    /// beyond the timeout to answer (a blocking read).
    pub async fn connect_with_slack(&self, slack: Duration) -> RedisResult<MultiplexedConnection> {
        let config = self
            .connection
            .clone()
            .set_response_timeout(Some(self.timeout + slack));
        self.within(async {
            let client = match &self.target {
                Target::Direct(client) => (**client).clone(),
                // The first sentinel to name a primary that confirms its
                // role.
                Target::Sentinel(sentinels) => first_primary(sentinels).await?,
            };
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            primary(&mut conn).await?;
            Ok(conn)
        })
        .await
    }

    /// How long any step may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What `step` answers, or a timed-out error once the timeout has
    /// passed.
    pub async fn within<T>(&self, step: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        tokio::time::timeout(self.timeout, step)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }
}

/// Every sentinel asked at once; the first client for a primary that one
/// of them names (and that confirms its role to it), else the last error.
async fn first_primary(sentinels: &[Arc<Mutex<SentinelClient>>]) -> RedisResult<redis::Client> {
    use futures_util::StreamExt;
    let mut asked: futures_util::stream::FuturesUnordered<_> = sentinels
        .iter()
        .map(|s| async move { s.lock().await.async_get_client().await })
        .collect();
    let mut last = None;
    while let Some(answer) = asked.next().await {
        match answer {
            Ok(client) => return Ok(client),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        RedisError::from((redis::ErrorKind::InvalidClientConfig, "no sentinel"))
    }))
}

/// Ok when the server is a primary: `ROLE` says `master`. A user the ACL
/// does not allow `ROLE` (a hardened user without `@dangerous`) is taken
/// at its word: its writes would still fail on a replica (`READONLY`).
async fn primary(conn: &mut MultiplexedConnection) -> RedisResult<()> {
    let role: redis::Value = match redis::cmd("ROLE").query_async(conn).await {
        Ok(role) => role,
        Err(e) if e.code() == Some("NOPERM") => return Ok(()),
        Err(e) => return Err(e),
    };
    let name = match &role {
        redis::Value::Array(parts) => parts.first(),
        _ => None,
    };
    match name {
        Some(redis::Value::BulkString(b)) if b.as_slice() == b"master" => Ok(()),
        Some(redis::Value::SimpleString(s)) if s == "master" => Ok(()),
        _ => Err(RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "not a primary (ROLE)",
        ))),
    }
}

/// The CA to trust for TLS, from `tls_ca_file`; `None`: the system's roots
/// (or no TLS).
fn certificates(config: &RedisConfig) -> RedisResult<Option<TlsCertificates>> {
    let tls = config.tls || config.url.starts_with("rediss://");
    if !tls {
        return Ok(None);
    }
    // One crypto provider for every TLS client of the process (rustls on
    // aws-lc-rs); already installed is fine.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    if config.tls_ca_file.is_empty() {
        return Ok(None);
    }
    let root = std::fs::read(&config.tls_ca_file).map_err(|e| {
        RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "redis.tls_ca_file",
            e.to_string(),
        ))
    })?;
    Ok(Some(TlsCertificates {
        client_tls: None,
        root_cert: Some(root),
    }))
}

/// The client that asks `sentinel` for `config.master_name`.
fn sentinel_client(
    config: &RedisConfig,
    sentinel: &str,
    certificates: Option<TlsCertificates>,
) -> RedisResult<SentinelClient> {
    let (host, port) = sentinel.rsplit_once(':').unwrap_or((sentinel, "26379"));
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = port.parse().unwrap_or(26379);
    let addr = if config.tls {
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host, port)
    };
    let mut builder =
        SentinelClientBuilder::new([addr], &config.master_name, SentinelServerType::Master)?;
    if !config.username.is_empty() {
        builder = builder.set_client_to_redis_username(&config.username);
    }
    if !config.password.is_empty() {
        builder = builder.set_client_to_redis_password(&config.password);
    }
    if !config.sentinel_password.is_empty() {
        builder = builder.set_client_to_sentinel_password(&config.sentinel_password);
    }
    if config.tls {
        builder = builder
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_sentinel_tls_mode(TlsMode::Secure);
        if let Some(certs) = certificates {
            builder = builder
                .set_client_to_redis_certificates(certs.clone())
                .set_client_to_sentinel_certificates(certs);
        }
    }
    builder.build()
}

/// The error of a step that took longer than the timeout.
fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A link to a listener that accepts connections (the kernel does) and
    /// never answers: a Redis that hangs.
    fn silent() -> (std::net::TcpListener, Link) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = RedisConfig {
            url: format!("redis://{}", listener.local_addr().unwrap()),
            timeout: Duration::from_millis(100),
            ..RedisConfig::default()
        };
        (listener, Link::new(&config).unwrap())
    }

    #[tokio::test]
    async fn a_redis_that_never_answers_times_out_connect() {
        let (_listener, link) = silent();
        let started = Instant::now();
        let error = link.connect().await.unwrap_err();
        assert!(error.is_timeout(), "{error}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(100), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_over_the_timeout_fails_as_timed_out() {
        let (_listener, link) = silent();
        let stuck = std::future::pending::<RedisResult<()>>();
        let error = link.within(stuck).await.unwrap_err();
        assert!(error.is_timeout(), "{error}");
        assert_eq!(link.within(async { Ok(7) }).await.unwrap(), 7);
    }

    #[test]
    fn a_url_the_client_refuses_makes_no_link() {
        let config = RedisConfig {
            url: "redis://".into(),
            ..RedisConfig::default()
        };
        assert!(Link::new(&config).is_err());
    }

    #[test]
    fn its_debug_shows_no_password() {
        let config = RedisConfig {
            url: "redis://:hunter2@127.0.0.1:6379".into(),
            ..RedisConfig::default()
        };
        let shown = format!("{:?}", Link::new(&config).unwrap());
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
