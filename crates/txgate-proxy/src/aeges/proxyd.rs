//! `POST /proxyd/validate`: proxyd's transaction validation hook. proxyd
//! (its `[tx_validation_middleware]`) posts the transactions of each
//! submission it takes (`eth_sendRawTransaction`, the conditional one, a
//! bundle's up to 100) as go-ethereum's JSON plus the sender it recovered,
//! keyed by hash; the answer says, per hash, whether to refuse (any `true`
//! refuses the whole call), or carries an `errorCode`, on which proxyd
//! applies its own `fail_open` choice. proxyd ignores the HTTP status, so
//! every refusal of the request itself is an `errorCode` in JSON.
//!
//! Checks, cheapest first, each before the body is read: the path, the
//! peer against `aeges.proxyd_allow`, the token (`aeges.proxyd_token`:
//! proxyd turns its endpoint URL's user-info into Basic auth), a slot among
//! `aeges.max_in_flight`, the declared size against
//! `aeges.max_proxyd_bytes`. Then the body is parsed and every hash
//! recomputed from the transaction's fields (keccak only, no ECDSA: a hash
//! that does not match is malformed, so the answer is about the
//! transaction proxyd will forward), and each transaction judged by the
//! same read-only judgement as the pool's question ([`Screen::judge`],
//! with proxyd's `from` as the sender). When every one is answered `false`
//! proxyd forwards them all: those on a cooled call then take its trickle
//! slot, as on the request path ([`Screen::take_trickles`]; the pool only
//! peeks at it, but for proxyd the hook is the request path's check), and
//! each is remembered like a forwarded one,
//! so a failure result naming only its hash bans its fingerprint. When one
//! is refused proxyd forwards none, and nothing is remembered. In
//! monitor-only mode every answer is `false` and what would have been
//! refused is counted.
//!
//! The source is charged its transactions (`aeges.proxyd_txs_per_sec`);
//! over it, the verdicts are still given but nothing is remembered. The
//! rate bounds what a source can put into the forwarded map, never the
//! verdicts: an error answer would let proxyd through when it fails open,
//! so a public sender filling proxyd's share of the rate would turn
//! screening off for everyone behind that proxyd.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_primitives::B256;
use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use txgate_config::IpNet;
use txgate_limits::{Nanos, Rate};
use txgate_proto::proxyd::{self, Invalid};
use txgate_screen::{Fingerprint, PoolTx, PoolVerdict, Reason, Screen};

use crate::metrics::{HookError, Metrics};
use crate::request::Body;

/// The hook's path.
pub const PATH: &str = "/proxyd/validate";
/// How long the body may take once the head is in (proxyd's own timeout
/// is 5 s by default).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(2);
/// Sources whose rates are kept apart; beyond, the rest share one (the
/// allow-list names a few proxyd hosts).
const MAX_SOURCES: usize = 1024;

/// Settings of a [`ProxydHook`].
#[derive(Debug, Clone)]
pub struct HookSettings {
    /// `aeges.proxyd_allow`: peers that may ask.
    pub allow: Vec<IpNet>,
    /// `aeges.proxyd_token` (`None`: none asked).
    pub token: Option<String>,
    /// `aeges.max_proxyd_bytes`.
    pub max_bytes: usize,
    /// `aeges.proxyd_txs_per_sec` and `aeges.proxyd_burst`.
    pub txs_per_sec: u32,
    /// Burst of `txs_per_sec`.
    pub burst: u32,
    /// `aeges.max_in_flight`.
    pub max_in_flight: usize,
    /// `screen.monitor_only`.
    pub monitor_only: bool,
}

/// What answers proxyd; shared by every connection.
#[derive(Debug)]
pub struct ProxydHook {
    allow: Vec<IpNet>,
    token: Option<String>,
    max_bytes: usize,
    rate: Option<Rate>,
    /// Each source's theoretical arrival time on the rate.
    sources: Mutex<HashMap<IpAddr, Nanos>>,
    epoch: Instant,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    monitor_only: bool,
    screen: Arc<Screen>,
    metrics: Arc<Metrics>,
}

impl ProxydHook {
    /// A hook judging against `screen`.
    pub fn new(settings: HookSettings, screen: Arc<Screen>, metrics: Arc<Metrics>) -> ProxydHook {
        ProxydHook {
            allow: settings.allow,
            token: settings.token.filter(|t| !t.is_empty()),
            max_bytes: settings.max_bytes,
            rate: Rate::new(settings.txs_per_sec, settings.burst),
            sources: Mutex::default(),
            epoch: Instant::now(),
            max_in_flight: settings.max_in_flight,
            in_flight: AtomicUsize::new(0),
            monitor_only: settings.monitor_only,
            screen,
            metrics,
        }
    }

    /// Whether `peer` may ask.
    pub fn allows(&self, peer: IpAddr) -> bool {
        let peer = super::canonical(peer);
        self.allow.iter().any(|net| net.contains(&peer))
    }

    /// Answers one request from `peer`.
    pub async fn handle<B>(&self, peer: IpAddr, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let answer = match self.read(peer, req).await {
            Ok((body, _slot)) => self.answer(peer, &body, Instant::now()),
            Err(error) => self.error(error),
        };
        self.metrics
            .proxyd
            .duration
            .observe(started.elapsed().as_secs_f64());
        answer
    }

    /// The checks before the body, then the body: what to judge, and the
    /// slot it holds while judged.
    async fn read<B>(&self, peer: IpAddr, req: Request<B>) -> Result<(Bytes, Slot<'_>), HookError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if req.uri().path() != PATH || req.method() != Method::POST {
            return Err(HookError::NotFound);
        }
        if !self.allows(peer) {
            return Err(HookError::SourceNotAllowed);
        }
        if let Some(token) = &self.token
            && !super::token::authorized(&req, token)
        {
            return Err(HookError::Unauthorized);
        }
        let slot = self.slot().ok_or(HookError::Busy)?;
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_bytes as u64) {
            return Err(HookError::TooLarge);
        }
        let read = tokio::time::timeout(
            BODY_TIMEOUT,
            Limited::new(req.into_body(), self.max_bytes).collect(),
        )
        .await
        .map_err(|_| HookError::Timeout)?;
        match read {
            Ok(body) => Ok((body.to_bytes(), slot)),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(HookError::TooLarge),
            Err(_) => Err(HookError::Body),
        }
    }

    /// The answer to one request body from `peer`, judged at `at`: what a
    /// request costs once HTTP has delivered it (the histogram is the
    /// caller's). Public for the benches.
    pub fn answer(&self, peer: IpAddr, body: &[u8], at: Instant) -> Response<Body> {
        let request = match proxyd::parse(body, proxyd::MAX_TXS) {
            Ok(request) => request,
            Err(invalid) => return self.error(invalid_error(invalid)),
        };
        let m = &self.metrics.proxyd;
        let within_rate = self.charge(peer, request.txs.len(), at);
        if !within_rate {
            m.over_rate.inc();
        }
        let now = self.screen.millis(at);
        let mut verdicts = Vec::with_capacity(request.txs.len());
        for tx in &request.txs {
            let pool = PoolTx {
                hash: tx.hash,
                sender: tx.from,
                to: tx.to,
                value: tx.value,
                gas_limit: tx.gas,
                payload: &tx.payload,
            };
            if tx.to.is_none() {
                m.creations.inc();
            }
            let verdict = self.screen.judge(&pool, now);
            verdicts.push((tx.key, false, pool, verdict));
        }
        // When proxyd will forward every one, the cooled calls among them
        // take their trickle slots, as the request path's would: the judge
        // only peeks, and an open slot nobody takes would stay open for
        // the rest of the cooldown. Two on one call within the request, or
        // a slot taken since the judge looked, refuse that one (all slots
        // or none are taken). `took`: the positions in `verdicts` of those
        // that took a slot.
        let mut took: Vec<usize> = Vec::new();
        if self.screen.cooling()
            && (self.monitor_only || verdicts.iter().all(|(.., v)| !v.denied()))
        {
            let (at, txs): (Vec<usize>, Vec<(B256, Fingerprint)>) = verdicts
                .iter()
                .enumerate()
                .filter_map(|(i, (_, _, pool, verdict))| match verdict {
                    PoolVerdict::Allow(Some(fp)) => Some((i, (pool.hash, *fp))),
                    _ => None,
                })
                .unzip();
            match self.screen.take_trickles(&txs, now) {
                Ok(slots) => took = slots.into_iter().map(|k| at[k]).collect(),
                Err((k, _)) => {
                    let (i, (_, fp)) = (at[k], txs[k]);
                    verdicts[i].3 = PoolVerdict::Deny {
                        reason: Reason::AssertionCooldown,
                        fingerprint: Some(fp),
                    };
                }
            }
        }
        let mut refused = false;
        let mut would_refuse = false;
        for (_, deny, _, verdict) in &mut verdicts {
            match *verdict {
                PoolVerdict::Allow(_) => m.txs_allowed.inc(),
                PoolVerdict::Deny { reason, .. } => {
                    m.refusal(reason, self.monitor_only);
                    would_refuse = true;
                    *deny = !self.monitor_only;
                }
            }
            refused |= *deny;
        }
        if refused {
            m.refused.inc();
        } else {
            if would_refuse {
                m.would_refuse.inc();
            } else {
                m.allowed.inc();
            }
            // proxyd forwards every one: a failure naming a hash must
            // find it (within the source's rate). One that took a trickle
            // slot is remembered whatever the rate (at most one per
            // cooled call and interval): otherwise the pool, asked about
            // it next, would find the slot taken and refuse it.
            let remembered = verdicts
                .iter()
                .enumerate()
                .filter(|(i, _)| within_rate || took.contains(i))
                .map(|(_, v)| v);
            for (_, _, pool, verdict) in remembered {
                let fingerprint = verdict.fingerprint().or_else(|| {
                    pool.to.map(|to| {
                        Fingerprint::from_parts(to, pool.payload, pool.value, pool.gas_limit)
                    })
                });
                if let Some(fp) = fingerprint {
                    self.screen.remember_pooled(pool, &fp, now);
                    m.remembered.inc();
                }
            }
        }
        let mut out = Vec::with_capacity(64 + verdicts.len() * 80);
        proxyd::write_verdicts(
            &mut out,
            verdicts.iter().map(|(key, deny, ..)| (*key, *deny)),
        );
        json(StatusCode::OK, out, false)
    }

    /// Charges `txs` transactions to `peer`'s rate at `at`.
    fn charge(&self, peer: IpAddr, txs: usize, at: Instant) -> bool {
        let Some(rate) = &self.rate else {
            return true;
        };
        let now = Nanos::try_from(at.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(Nanos::MAX);
        let cost = u32::try_from(txs).unwrap_or(u32::MAX);
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let peer = super::canonical(peer);
        if sources.len() >= MAX_SOURCES && !sources.contains_key(&peer) {
            // A source whose debt is paid is the same as one never seen.
            sources.retain(|_, tat| *tat > now);
        }
        let key = if sources.len() < MAX_SOURCES || sources.contains_key(&peer) {
            peer
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        let tat = sources.entry(key).or_insert(0);
        rate.charge(tat, now, cost).is_ok()
    }

    /// An `errorCode` answer, counted. A source or token refusal closes the
    /// connection (a refused peer holds no slot), and so does an answer
    /// given before the body was read whole: the connection cannot carry
    /// another request, and saying so keeps proxyd from reusing it.
    fn error(&self, error: HookError) -> Response<Body> {
        self.metrics.proxyd.failed(error);
        let mut out = Vec::with_capacity(96);
        proxyd::write_error(&mut out, error.code(), message(error));
        let close = matches!(
            error,
            HookError::SourceNotAllowed
                | HookError::Unauthorized
                | HookError::NotFound
                | HookError::Busy
                | HookError::TooLarge
                | HookError::Timeout
                | HookError::Body
        );
        json(status(error), out, close)
    }

    /// A slot among `max_in_flight`, released when dropped.
    fn slot(&self) -> Option<Slot<'_>> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if before >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.metrics.proxyd.in_flight.inc();
        Some(Slot(self))
    }
}

struct Slot<'a>(&'a ProxydHook);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.proxyd.in_flight.dec();
    }
}

/// The error a body that does not parse gets.
fn invalid_error(invalid: Invalid) -> HookError {
    match invalid {
        Invalid::Malformed => HookError::Malformed,
        Invalid::TooMany => HookError::TooManyTxs,
        Invalid::HashMismatch => HookError::HashMismatch,
        Invalid::UnsupportedType => HookError::UnsupportedType,
    }
}

/// The `errorMessage`: short, never echoing the request (proxyd logs it).
fn message(error: HookError) -> &'static str {
    match error {
        HookError::NotFound => "not found: POST /proxyd/validate",
        HookError::SourceNotAllowed => "source not allowed",
        HookError::Unauthorized => "missing or wrong token",
        HookError::Busy => "too many requests in flight",
        HookError::TooLarge => "body over aeges.max_proxyd_bytes",
        HookError::Timeout => "request body too slow",
        HookError::Body => "request body not read",
        HookError::Malformed => Invalid::Malformed.message(),
        HookError::TooManyTxs => Invalid::TooMany.message(),
        HookError::HashMismatch => Invalid::HashMismatch.message(),
        HookError::UnsupportedType => Invalid::UnsupportedType.message(),
    }
}

/// The HTTP status of an error answer (proxyd reads only the body; the
/// status is for people and other tools).
fn status(error: HookError) -> StatusCode {
    match error {
        HookError::NotFound => StatusCode::NOT_FOUND,
        HookError::SourceNotAllowed => StatusCode::FORBIDDEN,
        HookError::Unauthorized => StatusCode::UNAUTHORIZED,
        HookError::Busy => StatusCode::SERVICE_UNAVAILABLE,
        HookError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        HookError::Timeout => StatusCode::REQUEST_TIMEOUT,
        HookError::Body
        | HookError::Malformed
        | HookError::TooManyTxs
        | HookError::HashMismatch
        | HookError::UnsupportedType => StatusCode::BAD_REQUEST,
    }
}

fn json(status: StatusCode, body: Vec<u8>, close: bool) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if close {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests;
