//! The connections to the fleet's Redis, each step within
//! `redis.timeout_ms`.

use std::future::Future;
use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::{AsyncConnectionConfig, RedisError, RedisResult};
use txgate_config::RedisConfig;

/// The fleet's Redis: where it is, and how long any step may take.
#[derive(Clone)]
pub struct Link {
    client: redis::Client,
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
    /// The link to `config.url`, each step within `config.timeout_ms`.
    /// Connects to nothing yet; fails only on a URL the client refuses
    /// (validated at start).
    pub fn new(config: &RedisConfig) -> RedisResult<Link> {
        let client = redis::Client::open(config.url.as_str())?;
        let timeout = config.timeout;
        let connection = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        Ok(Link {
            client,
            connection,
            timeout,
        })
    }

    /// A connection that answered a PING, connect and PING together within
    /// the timeout. Every command sent on it later fails after the timeout
    /// too (and may be bounded with [`Link::within`] as well).
    pub async fn connect(&self) -> RedisResult<MultiplexedConnection> {
        self.within(async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&self.connection)
                .await?;
            redis::cmd("PING").query_async::<()>(&mut conn).await?;
            Ok(conn)
        })
        .await
    }

    /// A connection subscribed to `channel`, connect and subscribe together
    /// within the timeout.
    pub async fn subscribe(&self, channel: &str) -> RedisResult<PubSub> {
        self.within(async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            Ok(pubsub)
        })
        .await
    }

    /// What `step` answers, or a timed-out error once the timeout has
    /// passed.
    pub async fn within<T>(&self, step: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        tokio::time::timeout(self.timeout, step)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }
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
    async fn a_redis_that_never_answers_times_out_connect_and_subscribe() {
        let (_listener, link) = silent();
        let started = Instant::now();
        let error = link.connect().await.unwrap_err();
        assert!(error.is_timeout(), "{error}");
        let Err(error) = link.subscribe("txgate:bans").await else {
            panic!("subscribed to a Redis that never answers");
        };
        assert!(error.is_timeout(), "{error}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
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
