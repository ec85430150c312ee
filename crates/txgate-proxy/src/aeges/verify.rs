//! `aeges.v1.AegesService/VerifyTransaction`: the sequencer's pool plugin
//! asks, for each transaction entering its pool, whether to refuse it.
//!
//! Checks, cheapest first, each before the body is read: the peer against
//! `aeges.verify_allow` (`PERMISSION_DENIED`; the plugin sends no
//! credentials, so the report token is never asked), a slot among
//! `aeges.max_in_flight` (`RESOURCE_EXHAUSTED`), the message's declared
//! size against `aeges.max_verify_bytes` (`INVALID_ARGUMENT`). Then the
//! message is decoded and checked ([`txgate_proto::aeges::decode`];
//! `INVALID_ARGUMENT` with a short reason) and judged by the screening
//! engine ([`Screen::judge`]: no ECDSA, the pool recovered the sender; the
//! state is read, not changed). A transaction let in is remembered like a
//! forwarded one ([`Screen::remember_pooled`]), so a failure result that
//! names only its hash bans its fingerprint.
//!
//! The plugin lets a transaction in on any error or after its deadline
//! (500 ms): every refusal here fails open. In monitor-only mode every
//! answer is `denied = false`, and what would have been denied is counted.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use txgate_config::IpNet;
use txgate_proto::aeges::{MAX_RESPONSE_BYTES, VERIFY_PATH, decode, encode_into};
use txgate_screen::{Fingerprint, PoolVerdict, Screen};

use super::grpc::{self, Code, GrpcBody, ReadError};
use crate::metrics::Metrics;

/// How long a question's body may take once its head is in. The plugin
/// gives up after 500 ms; a peer that trickles its body holds a slot for
/// no longer than this.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(2);

/// What answers the pool's questions; shared by every connection.
#[derive(Debug)]
pub struct Verifier {
    allow: Vec<IpNet>,
    max_bytes: usize,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    monitor_only: bool,
    screen: Arc<Screen>,
    metrics: Arc<Metrics>,
}

/// Settings of a [`Verifier`].
#[derive(Debug, Clone)]
pub struct VerifySettings {
    /// Peers that may ask.
    pub allow: Vec<IpNet>,
    /// Message cap in bytes.
    pub max_bytes: usize,
    /// Questions in flight at most.
    pub max_in_flight: usize,
    /// Answer `false` always, count what would be denied.
    pub monitor_only: bool,
}

impl Verifier {
    /// A verifier judging against `screen`.
    pub fn new(settings: VerifySettings, screen: Arc<Screen>, metrics: Arc<Metrics>) -> Verifier {
        Verifier {
            allow: settings.allow,
            max_bytes: settings.max_bytes,
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

    /// Answers one gRPC request from `peer` (any gRPC path: another
    /// method is `UNIMPLEMENTED`).
    pub async fn handle<B>(&self, peer: IpAddr, req: Request<B>) -> Response<GrpcBody>
    where
        B: hyper::body::Body<Data = Bytes>,
    {
        let m = &self.metrics.verify;
        if req.version() != http::Version::HTTP_2 {
            m.unimplemented.inc();
            return grpc::http_status(http::StatusCode::HTTP_VERSION_NOT_SUPPORTED);
        }
        if req.uri().path() != VERIFY_PATH || req.method() != Method::POST {
            m.unimplemented.inc();
            return grpc::status(Code::Unimplemented, "unknown method");
        }
        if !self.allows(peer) {
            m.refused_source.inc();
            return grpc::status(Code::PermissionDenied, "source not allowed");
        }
        let Some(_slot) = self.slot() else {
            m.exhausted.inc();
            return grpc::status(Code::ResourceExhausted, "too many calls in flight");
        };
        let started = std::time::Instant::now();
        let message = match grpc::read_message(req.into_body(), self.max_bytes, BODY_TIMEOUT).await
        {
            Ok(message) => message,
            Err(ReadError::Timeout) => {
                m.timeout.inc();
                return grpc::status(Code::DeadlineExceeded, "request body too slow");
            }
            Err(ReadError::Body) => {
                m.cancelled.inc();
                return grpc::status(Code::Cancelled, "request body not read");
            }
            Err(ReadError::Framing(f)) => {
                m.framing(f);
                return match f {
                    crate::metrics::verify::Framing::TooLarge => {
                        grpc::status(Code::InvalidArgument, "message over aeges.max_verify_bytes")
                    }
                    crate::metrics::verify::Framing::Compressed => {
                        grpc::status(Code::Unimplemented, "compressed messages are not accepted")
                    }
                    _ => grpc::status(Code::InvalidArgument, "not one gRPC message"),
                };
            }
        };
        let answer = self.answer(message, started);
        m.duration.observe(started.elapsed().as_secs_f64());
        answer
    }

    /// The verdict on one message (the gRPC frame's payload) judged at
    /// `at`, answered: what a call costs once HTTP/2 has delivered it (the
    /// histogram is the caller's). Public for the benches.
    pub fn answer(&self, message: Bytes, at: std::time::Instant) -> Response<GrpcBody> {
        let m = &self.metrics.verify;
        let request = match decode(message) {
            Ok(request) => request,
            Err(invalid) => {
                m.invalid(invalid);
                return grpc::status(Code::InvalidArgument, invalid.message());
            }
        };
        let tx = request.tx();
        let now = self.screen.millis(at);
        let verdict = self.screen.judge(&tx, now);
        let denied = match verdict {
            PoolVerdict::Allow(_) => {
                m.allowed.inc();
                false
            }
            PoolVerdict::Deny { reason, .. } => {
                m.deny(reason, self.monitor_only);
                !self.monitor_only
            }
        };
        if !denied {
            // It enters the pool: a failure naming its hash must find it.
            // (A would-be denial by hash or sender computed no
            // fingerprint.)
            let fingerprint = verdict.fingerprint().or_else(|| {
                tx.to
                    .map(|to| Fingerprint::from_parts(to, tx.payload, tx.value, tx.gas_limit))
            });
            if let Some(fp) = fingerprint {
                self.screen.remember_pooled(&tx, &fp, now);
            }
        }
        let mut answer = [0u8; MAX_RESPONSE_BYTES];
        let n = encode_into(request.event_id, denied, &mut answer);
        grpc::ok(&answer[..n])
    }

    /// A slot among `max_in_flight`, released when dropped.
    fn slot(&self) -> Option<Slot<'_>> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if before >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.metrics.verify.in_flight.inc();
        Some(Slot(self))
    }
}

struct Slot<'a>(&'a Verifier);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.verify.in_flight.dec();
    }
}

#[cfg(test)]
mod tests;
