//! Per-client rate limits: by API key when the request carries a known
//! one, else by client IP ([`crate::request::Client`]).
//!
//! [`ClientLimitLayer`] decides before the body is read: it names the
//! [`Subject`] charged, charges one call, and leaves the subject in the
//! request for the JSON-RPC service, which charges the rest once the body
//! is framed (the other calls of a batch, and the raw-transaction
//! submissions against their own rate).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

use futures_util::future::Either;
use http::header::{AUTHORIZATION, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};
use txgate_config::{IpNet, LimitsConfig, RateConfig, RedisConfig, UnknownKey};
use txgate_identity::TrustedProxies;
use txgate_jsonrpc::code;
use txgate_limits::{Limits, Nanos, Rate, Slot, Spans, Table, Usage, Which, ip_key};

use super::sync::{FleetLink, Kind, Synced};
use crate::metrics::{Metrics, Outcome};
use crate::request::{Body, Class, Client, Refuse};

/// Who a request is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// Nobody: an exempt network or tier, or no limit configured.
    Exempt,
    /// A client IP (IPv6 by prefix), as a table key.
    Ip(u128),
    /// A listed API key.
    Key {
        /// The key's table entry: the same on every instance (a hash of
        /// the key, never the key itself, goes to the fleet's Redis).
        key: u128,
        /// The tier's index.
        tier: u32,
    },
}

pub use crate::metrics::limits::Limit;

/// Why a client's request is refused before it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientRefusal {
    /// Over a per-client rate.
    RateLimited {
        /// The limit.
        limit: Limit,
        /// When the same request would fit.
        retry_after_ms: u64,
    },
    /// An API key that is not listed (`limits.unknown_key = "refuse"`).
    UnknownKey,
}

impl Refuse for ClientRefusal {
    fn class(&self) -> Class {
        match self {
            ClientRefusal::RateLimited { .. } => Class::new(
                StatusCode::TOO_MANY_REQUESTS,
                code::LIMIT_EXCEEDED,
                Outcome::RateLimited,
            ),
            ClientRefusal::UnknownKey => Class::new(
                StatusCode::UNAUTHORIZED,
                code::INVALID_REQUEST,
                Outcome::Unauthorized,
            ),
        }
    }

    fn message(&self) -> String {
        match self {
            ClientRefusal::RateLimited { limit, .. } => format!(
                "limit exceeded: {} for this {}, retry later",
                match limit {
                    Limit::IpCalls | Limit::KeyCalls => "request rate",
                    Limit::IpTxs | Limit::KeyTxs => "transaction submission rate",
                },
                match limit {
                    Limit::IpCalls | Limit::IpTxs => "client address",
                    Limit::KeyCalls | Limit::KeyTxs => "API key",
                }
            ),
            ClientRefusal::UnknownKey => "invalid request: unknown API key".into(),
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ClientRefusal::RateLimited { retry_after_ms, .. } => {
                Some(retry_after_ms.div_ceil(1000).max(1))
            }
            ClientRefusal::UnknownKey => None,
        }
    }

    fn data(&self) -> Option<Box<serde_json::value::RawValue>> {
        let ClientRefusal::RateLimited {
            limit,
            retry_after_ms,
        } = self
        else {
            return None;
        };
        let data = serde_json::json!({
            "reason": limit.as_str(),
            "retry_after_ms": retry_after_ms,
        });
        serde_json::value::to_raw_value(&data).ok()
    }
}

#[derive(Debug)]
struct Tier {
    limits: Limits,
    /// The share enforced alone while the fleet's Redis is down.
    local: Limits,
    exempt: bool,
}

/// The limits of one process, shared by every worker.
#[derive(Debug)]
pub struct ClientLimits {
    ips: Table,
    ip_limits: Limits,
    ip_local: Limits,
    keys: Table,
    tiers: Vec<Tier>,
    tier_names: Vec<String>,
    /// Key → (tier index, table key); replaced whole on a reload.
    known: RwLock<Arc<HashMap<String, (u32, u128)>>>,
    /// The fleet's Redis link, when one is configured: while it is not up,
    /// the local shares apply.
    fleet: Option<Arc<FleetLink>>,
    exempt: TrustedProxies,
    ipv6_prefix: u8,
    key_header: HeaderName,
    unknown_key: UnknownKey,
    epoch: Instant,
    metrics: Arc<Metrics>,
}

/// The rates of `rates`, times `share` (rounded up: a limit never becomes
/// 0, which would mean none).
fn limits(rates: &RateConfig, share: f64) -> Limits {
    Limits {
        calls: rate(rates.calls_per_sec, rates.calls_burst, share),
        txs: rate(rates.tx_per_sec, rates.tx_burst, share),
    }
}

/// `per_sec` with bursts of `burst` (0: one second of the rate), both
/// times `share` rounded up (a limit never becomes 0, which would mean
/// none); `None` when `per_sec` is 0.
pub(crate) fn rate(per_sec: u32, burst: u32, share: f64) -> Option<Rate> {
    let part = |n: u32| {
        if n == 0 || share >= 1.0 {
            n
        } else {
            ((f64::from(n) * share).ceil() as u32).max(1)
        }
    };
    let burst = if burst == 0 { per_sec } else { burst };
    Rate::new(part(per_sec), part(burst))
}

/// The table key of an API key: the same on every instance, and not the
/// key (Redis sees only this).
fn key_id(key: &str) -> u128 {
    let digest =
        alloy_primitives::keccak256([b"txgate.api-key\0".as_slice(), key.as_bytes()].concat());
    u128::from_be_bytes(digest[..16].try_into().unwrap_or([0; 16]))
}

impl ClientLimits {
    /// From the validated `[limits]`; `None` when nothing is limited (no
    /// rate, no key, no keys file), so the stage costs nothing. With
    /// `redis` configured, `fleet` is the link to it: the tables keep
    /// their usage for [`super::sync::run`].
    pub fn new(
        config: &LimitsConfig,
        exempt: Vec<IpNet>,
        redis: &RedisConfig,
        fleet: Option<Arc<FleetLink>>,
        metrics: Arc<Metrics>,
    ) -> Option<ClientLimits> {
        let ip_limits = limits(&config.ip, 1.0);
        if ip_limits.is_unlimited() && config.keys.is_empty() && config.keys_file.is_empty() {
            return None;
        }
        let table = |max| match fleet {
            Some(_) => Table::fleet(max),
            None => Table::new(max),
        };
        let limits = ClientLimits {
            ips: table(config.max_clients),
            ip_limits,
            ip_local: limits(&config.ip, redis.local_share),
            keys: table(config.max_clients),
            tiers: config
                .tiers
                .values()
                .map(|t| Tier {
                    limits: limits(&t.rates, 1.0),
                    local: limits(&t.rates, redis.local_share),
                    exempt: t.exempt,
                })
                .collect(),
            tier_names: config.tiers.keys().cloned().collect(),
            known: RwLock::default(),
            fleet,
            exempt: TrustedProxies::new(exempt),
            ipv6_prefix: config.ipv6_prefix,
            key_header: config.key_header.clone(),
            unknown_key: config.unknown_key,
            epoch: Instant::now(),
            metrics,
        };
        // Validated: the file was read a moment ago; if it vanished since,
        // the config's own keys still apply and a SIGHUP retries.
        if let Err(e) = limits.reload(config) {
            tracing::error!(error = %e, "API keys file unreadable at start");
        }
        Some(limits)
    }

    /// Reads the keys again (the config's and `limits.keys_file`) and
    /// replaces the set at once; on an error the old set stays. The
    /// number of keys now.
    pub fn reload(&self, config: &LimitsConfig) -> Result<usize, txgate_config::ConfigError> {
        let keys = config.all_keys().inspect_err(|_| {
            self.metrics.limits.keys_reload_failed.inc();
        })?;
        let known: HashMap<String, (u32, u128)> = keys
            .into_iter()
            .filter_map(|(key, tier)| {
                let tier = self.tier_names.iter().position(|name| *name == tier)?;
                let id = key_id(&key);
                Some((key, (tier as u32, id)))
            })
            .collect();
        let count = known.len();
        *self.known.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(known);
        self.metrics.limits.keys.set(count as i64);
        Ok(count)
    }

    /// The subject of a request from `client` with `headers`; an unknown
    /// key is refused when so configured.
    pub fn subject(
        &self,
        client: &Client,
        headers: &http::HeaderMap,
    ) -> Result<Subject, ClientRefusal> {
        if let Some(key) = api_key(headers, &self.key_header) {
            let tier = self
                .known
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(key)
                .copied();
            match tier {
                Some((tier, key)) => {
                    return Ok(if self.tiers[tier as usize].exempt {
                        Subject::Exempt
                    } else {
                        Subject::Key { key, tier }
                    });
                }
                None if self.unknown_key == UnknownKey::Refuse => {
                    self.metrics.limits.unknown_key.inc();
                    return Err(ClientRefusal::UnknownKey);
                }
                None => {}
            }
        }
        if self.ip_limits.is_unlimited() || self.exempt.contains(client.ip) {
            return Ok(Subject::Exempt);
        }
        Ok(Subject::Ip(ip_key(client.ip, self.ipv6_prefix)))
    }

    /// Charges `calls` calls and `txs` submissions to `subject`, both or
    /// neither.
    pub fn charge(&self, subject: Subject, calls: u32, txs: u32) -> Result<(), ClientRefusal> {
        let now = self.now();
        // The fleet's Redis configured but not reachable: local shares.
        let local = self.fleet.as_ref().is_some_and(|link| !link.up());
        let (slot, charged, by_key) = match subject {
            Subject::Exempt => return Ok(()),
            Subject::Ip(key) => {
                let limits = if local {
                    &self.ip_local
                } else {
                    &self.ip_limits
                };
                let (slot, charged) = self.ips.charge(key, now, limits, calls, txs);
                (slot, charged, false)
            }
            Subject::Key { key, tier } => {
                let tier = &self.tiers[tier as usize];
                let limits = if local { &tier.local } else { &tier.limits };
                let (slot, charged) = self.keys.charge(key, now, limits, calls, txs);
                (slot, charged, true)
            }
        };
        let limit = |which| match (by_key, which) {
            (false, Which::Calls) => Limit::IpCalls,
            (false, Which::Txs) => Limit::IpTxs,
            (true, Which::Calls) => Limit::KeyCalls,
            (true, Which::Txs) => Limit::KeyTxs,
        };
        if slot == Slot::Shared {
            self.metrics.limits.shared.inc();
        }
        charged.map_err(|refused| {
            let limit = limit(refused.which);
            self.metrics.limits.refused(limit).inc();
            ClientRefusal::RateLimited {
                limit,
                retry_after_ms: refused.wait.div_ceil(1_000_000),
            }
        })
    }

    /// Nanoseconds on this process's monotonic clock.
    pub fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Clients tracked by IP now.
    pub fn tracked_ips(&self) -> usize {
        self.ips.len()
    }

    /// Sets `txgate_limit_tracked_clients`.
    pub fn update_gauges(&self) {
        let tracked = &self.metrics.limits.tracked;
        tracked
            .with_label_values(&["ip"])
            .set(self.ips.len() as i64);
        tracked
            .with_label_values(&["key"])
            .set(self.keys.len() as i64);
    }
}

impl Synced for ClientLimits {
    fn now(&self) -> Nanos {
        ClientLimits::now(self)
    }

    fn drain_unsynced(&self, out: &mut Vec<(Kind, Usage)>, max: usize) {
        let tables = [(Kind::Ip, &self.ips), (Kind::Key, &self.keys)];
        super::sync::drain_tables(&tables, out, max);
    }

    fn merge_fleet(&self, kind: Kind, key: u128, now: Nanos, ahead: Spans) {
        match kind {
            Kind::Ip => self.ips.merge_fleet(key, now, ahead),
            Kind::Key => self.keys.merge_fleet(key, now, ahead),
            Kind::Conditional | Kind::Caller => {}
        }
    }

    fn update_gauges(&self) {
        ClientLimits::update_gauges(self);
    }
}

/// The API key: the configured header, else `Authorization: Bearer`.
fn api_key<'h>(headers: &'h http::HeaderMap, header: &HeaderName) -> Option<&'h str> {
    if let Some(value) = headers.get(header) {
        return value.to_str().ok().map(str::trim);
    }
    let auth = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = auth.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The limits stage, outside admission: a client over its rate never
/// takes an in-flight slot.
#[derive(Debug, Clone)]
pub struct ClientLimitLayer {
    limits: Option<Arc<ClientLimits>>,
    retry_after: HeaderValue,
}

impl ClientLimitLayer {
    /// `None`: nothing is limited, every request passes untouched.
    pub fn new(limits: Option<Arc<ClientLimits>>, retry_after_secs: u64) -> ClientLimitLayer {
        ClientLimitLayer {
            limits,
            retry_after: HeaderValue::from(retry_after_secs),
        }
    }
}

impl<S> Layer<S> for ClientLimitLayer {
    type Service = ClientLimit<S>;

    fn layer(&self, inner: S) -> ClientLimit<S> {
        ClientLimit {
            inner,
            limits: self.limits.clone(),
            retry_after: self.retry_after.clone(),
        }
    }
}

/// See [`ClientLimitLayer`].
#[derive(Debug, Clone)]
pub struct ClientLimit<S> {
    inner: S,
    limits: Option<Arc<ClientLimits>>,
    retry_after: HeaderValue,
}

type Refused = Ready<Result<Response<Body>, Infallible>>;

impl<S, B> Service<Request<B>> for ClientLimit<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, Refused>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let Some(limits) = &self.limits else {
            return Either::Left(self.inner.call(req));
        };
        let Some(client) = req.extensions().get::<Client>().copied() else {
            return Either::Left(self.inner.call(req));
        };
        let charged = limits
            .subject(&client, req.headers())
            .and_then(|subject| limits.charge(subject, 1, 0).map(|()| subject));
        match charged {
            Ok(subject) => {
                req.extensions_mut().insert(Charged {
                    subject,
                    limits: limits.clone(),
                });
                Either::Left(self.inner.call(req))
            }
            Err(refusal) => {
                let class = refusal.class();
                limits.metrics.http.outcome(class.outcome);
                Either::Right(ready(Ok(refusal.respond(None, &self.retry_after))))
            }
        }
    }
}

/// A request's subject, charged one call already; the JSON-RPC service
/// charges the rest once the body is framed.
#[derive(Debug, Clone)]
pub struct Charged {
    subject: Subject,
    limits: Arc<ClientLimits>,
}

impl Charged {
    /// Charges `calls` calls and `txs` submissions in full: a message on a
    /// WebSocket, after the upgrade request paid its own call.
    pub fn charge(&self, calls: usize, txs: usize) -> Result<(), ClientRefusal> {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        self.limits.charge(self.subject, clamp(calls), clamp(txs))
    }

    /// Charges the calls beyond the first and the submissions.
    pub fn rest(&self, calls: usize, txs: usize) -> Result<(), ClientRefusal> {
        let more = calls.saturating_sub(1);
        if more == 0 && txs == 0 {
            return Ok(());
        }
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        self.limits.charge(self.subject, clamp(more), clamp(txs))
    }
}

#[cfg(test)]
mod tests;
