//! [`Probe`]: the optional ShouldForward question to the sidecar, for a
//! fingerprint with no local verdict, under a hard deadline; then the
//! commit of the call. A bundle's calls are asked the same questions
//! ([`ProbeClient::question`]) before the bundle is committed.
//!
//! Asked only for calls every cheaper stage let through, that have a
//! fingerprint, are not suspect (those are shaped already), are on a hot
//! call (a (target, selector) pair an invalidation named lately, see
//! `txgate_screen::hot`; unless `sidecar.should_forward_scope = "all"`)
//! and have no cached "forward" verdict. A "forward" answer is cached for its TTL; a
//! "deny" answer bans the fingerprint like an invalidation and refuses the
//! call; a late answer or an error forwards (fail open) and is counted.

use std::future::{Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use alloy_primitives::{Address, B256};
use pin_project_lite::pin_project;
use tonic::transport::Channel;
use tower::Service;
use txgate_config::{Protocol, ShouldForwardScope};
use txgate_proto::rpcproxy_v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient as RpcproxyClient;
use txgate_proto::v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient as TxgateClient;
use txgate_proto::{assertion_key, fingerprint_message, rpcproxy, rpcproxy_v1, v1};
use txgate_screen::ttl::TtlMap;
use txgate_screen::{
    AssertionKey, Candidate, Fingerprint, Invalidation, Millis, Rejection, Screen,
};

use super::state::wall_now;
use super::{Cleared, Submission};
use crate::metrics::Metrics;

/// What every worker's probe shares: "forward" verdicts by fingerprint,
/// bounded in entries (`sidecar.max_verdicts`; a full map drops its oldest
/// first) and swept of expired entries by the upkeep task; and the
/// process-wide cap on questions in flight (`sidecar.max_probes_in_flight`).
#[derive(Debug)]
pub struct VerdictCache {
    forward: TtlMap<B256, ()>,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl VerdictCache {
    /// A cache of at most about `max_entries` verdicts, and at most
    /// `max_in_flight` questions at once.
    pub fn new(max_entries: usize, max_in_flight: usize) -> VerdictCache {
        VerdictCache {
            forward: TtlMap::new(max_entries),
            in_flight: Arc::new(tokio::sync::Semaphore::new(max_in_flight)),
        }
    }

    fn knows(&self, fingerprint: &B256, now: Millis) -> bool {
        self.forward.get(fingerprint, now).is_some()
    }

    fn forward(&self, fingerprint: B256, until: Millis) {
        self.forward.insert(fingerprint, (), until);
    }

    /// Drops expired verdicts of `shards` shards (round-robin).
    pub fn sweep(&self, now: Millis, shards: usize) {
        self.forward.sweep(now, shards);
    }

    /// Verdicts held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.forward.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A ShouldForward client of one of the two protocols that have it.
#[derive(Debug, Clone)]
enum Asker {
    Txgate(TxgateClient<Channel>),
    Rpcproxy(RpcproxyClient<Channel>),
}

/// What a question carries.
struct Question {
    fingerprint: Fingerprint,
    tx_hash: B256,
    sender: Option<Address>,
    raw_tx: Vec<u8>,
}

/// The sidecar client and the verdict cache, shared by a worker's calls.
#[derive(Debug)]
pub struct ProbeClient {
    client: Asker,
    scope: ShouldForwardScope,
    timeout: Duration,
    verdict_ttl: Millis,
    verdicts: Arc<VerdictCache>,
    metrics: Arc<Metrics>,
}

impl ProbeClient {
    /// A client of `protocol` over `channel`; `verdicts` is the cache
    /// shared by every worker. `None` for a protocol without ShouldForward
    /// (which the config refuses).
    pub fn new(
        protocol: Protocol,
        channel: Channel,
        scope: ShouldForwardScope,
        timeout: Duration,
        verdict_ttl: Duration,
        verdicts: Arc<VerdictCache>,
        metrics: Arc<Metrics>,
    ) -> Option<ProbeClient> {
        let client = match protocol {
            Protocol::TxgateV1 => Asker::Txgate(TxgateClient::new(channel)),
            Protocol::RpcproxyV1 => Asker::Rpcproxy(RpcproxyClient::new(channel)),
            Protocol::TransportV1 => return None,
        };
        Some(ProbeClient {
            client,
            scope,
            timeout,
            verdict_ttl: txgate_screen::millis(verdict_ttl),
            verdicts,
            metrics,
        })
    }
}

enum Verdict {
    Forward(Millis),
    Deny(Vec<AssertionKey>),
    Unknown,
}

impl ProbeClient {
    /// The question, as a `'static` future (it owns its client handle), so
    /// that it is `Send` whatever the submission's lifetime.
    fn ask(self: Arc<Self>, question: Question) -> Pin<Box<dyn Future<Output = Verdict> + Send>> {
        Box::pin(async move {
            let m = &self.metrics.sidecar.probe;
            let asked = tokio::time::timeout(self.timeout, self.ask_inner(question)).await;
            match asked {
                Ok(Ok(verdict)) => {
                    match verdict {
                        Verdict::Forward(_) => m.forward.inc(),
                        Verdict::Deny(_) => m.deny.inc(),
                        Verdict::Unknown => m.unknown.inc(),
                    }
                    verdict
                }
                Ok(Err(status)) => {
                    m.error.inc();
                    tracing::debug!(code = ?status.code(), "ShouldForward failed; forwarding");
                    Verdict::Unknown
                }
                Err(_) => {
                    m.timeout.inc();
                    Verdict::Unknown
                }
            }
        })
    }

    async fn ask_inner(&self, q: Question) -> Result<Verdict, tonic::Status> {
        match self.client.clone() {
            Asker::Txgate(mut client) => {
                let request = v1::ShouldForwardRequest {
                    fingerprint: Some(fingerprint_message(&q.fingerprint)),
                    tx_hash: q.tx_hash.to_vec(),
                    sender: q.sender.map(|a| a.to_vec()).unwrap_or_default(),
                    raw_tx: q.raw_tx,
                };
                let answer = client.should_forward(request).await?.into_inner();
                Ok(if answer.forward {
                    let ttl = if answer.ttl_ms == 0 {
                        self.verdict_ttl
                    } else {
                        answer.ttl_ms
                    };
                    Verdict::Forward(ttl)
                } else {
                    // Assertions with a malformed id are left out; none
                    // left means "no assertion", never a made-up one.
                    Verdict::Deny(
                        answer
                            .assertions
                            .iter()
                            .filter_map(|a| assertion_key(Some(a)).ok().flatten())
                            .collect(),
                    )
                })
            }
            Asker::Rpcproxy(mut client) => {
                let request = rpcproxy_v1::ShouldForwardRequest {
                    fingerprint: Some(rpcproxy::fingerprint_message(&q.fingerprint)),
                };
                let answer = client.should_forward(request).await?.into_inner();
                Ok(match rpcproxy::verdict(&answer) {
                    Ok(rpcproxy::Verdict::Allow) => Verdict::Forward(self.verdict_ttl),
                    Ok(rpcproxy::Verdict::Deny(key)) => Verdict::Deny(key.into_iter().collect()),
                    // A deny with a malformed assertion id bans under none.
                    Err(_) => Verdict::Deny(Vec::new()),
                    Ok(rpcproxy::Verdict::Unknown) => Verdict::Unknown,
                })
            }
        }
    }
}

/// A ShouldForward question under way: `Err` when the sidecar denied the
/// call (its fingerprint is banned by then).
pub(crate) type Asked<'a> = Pin<Box<dyn Future<Output = Result<(), Rejection>> + Send + 'a>>;

impl ProbeClient {
    /// The question about `c`, a call every stage let through, when one is
    /// to be asked (`None`: forward without asking). Asked only for a call
    /// with a fingerprint, not suspect (shaped already), on a hot call
    /// (unless the scope is `all`), with no cached "forward" verdict, and
    /// while the process is under its cap of questions in flight. A
    /// "forward" answer is cached; a "deny" bans the fingerprint in
    /// `screen`, like an invalidation.
    pub(crate) fn question<'a>(
        self: &Arc<Self>,
        screen: &'a Screen,
        c: &Candidate,
    ) -> Option<Asked<'a>> {
        let fp = c.fingerprint.filter(|_| !c.suspect)?;
        // A cold call is never asked about: honest users of contracts no
        // invalidation named lately pay nothing.
        if self.scope == ShouldForwardScope::Hot && !screen.is_hot(&(fp.target, fp.selector), c.now)
        {
            self.metrics.sidecar.probe.cold.inc();
            return None;
        }
        if self.verdicts.knows(&fp.hash, c.now) {
            return None;
        }
        // Process-wide cap: beyond it, forward without asking (as on a
        // timeout), so no client can make txgate flood the sidecar.
        let Ok(permit) = self.verdicts.in_flight.clone().try_acquire_owned() else {
            self.metrics.sidecar.probe.saturated.inc();
            return None;
        };
        let (tx_hash, sender, now) = (c.hash, c.sender, c.now);
        let asked = self.clone().ask(Question {
            fingerprint: fp,
            tx_hash,
            sender,
            raw_tx: c.raw.clone(),
        });
        let client = self.clone();
        Some(Box::pin(async move {
            let verdict = asked.await;
            drop(permit);
            match verdict {
                Verdict::Forward(ttl) => client.verdicts.forward(fp.hash, now + ttl),
                Verdict::Deny(keys) => {
                    let started = wall_now();
                    let invalidation = |assertion| Invalidation {
                        fingerprint: fp.hash,
                        target: fp.target,
                        selector: fp.selector,
                        assertion,
                        tx_hash: Some(tx_hash),
                        sender,
                        started,
                    };
                    let batch: Vec<Invalidation> = if keys.is_empty() {
                        vec![invalidation(None)]
                    } else {
                        keys.iter().map(|k| invalidation(Some(*k))).collect()
                    };
                    let applied = screen.apply(&batch, now, started);
                    client.metrics.screen.applied(&applied);
                    return Err(Rejection::Denied {
                        fingerprint: fp.hash,
                        assertions: keys.iter().map(|k| k.id).collect(),
                    });
                }
                Verdict::Unknown => {}
            }
            Ok(())
        }))
    }
}

/// The innermost service: asks the sidecar when it should
/// ([`ProbeClient::question`]), then commits the call ([`commit`]).
#[derive(Debug, Clone, Default)]
pub struct Probe {
    pub(super) client: Option<Arc<ProbeClient>>,
}

type Boxed<'a> = Pin<Box<dyn Future<Output = Result<Cleared, Rejection>> + Send + 'a>>;

pin_project! {
    /// Ready at once, or a probe in flight.
    #[allow(missing_docs)]
    #[project = Projected]
    pub enum ProbeFuture<'a> {
        /// No question asked.
        Ready { result: Ready<Result<Cleared, Rejection>> },
        /// Waiting for the sidecar.
        Probing { future: Boxed<'a> },
    }
}

impl Future for ProbeFuture<'_> {
    type Output = Result<Cleared, Rejection>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Projected::Ready { result } => Pin::new(result).poll(cx),
            Projected::Probing { future } => future.as_mut().poll(cx),
        }
    }
}

/// Commits the call (a cooldown's trickle slot taken, the forward
/// recorded for attribution) and says how it passed; the end of the probe
/// step.
fn commit(s: &mut Submission<'_>) -> Result<Cleared, Rejection> {
    let committed = s.screen.commit(&s.candidate).map(|admitted| Cleared {
        admitted,
        sender_cached: s.candidate.sender_cached,
    });
    s.laps.lap();
    committed
}

impl<'a> Service<Submission<'a>> for Probe {
    type Response = Cleared;
    type Error = Rejection;
    type Future = ProbeFuture<'a>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut s: Submission<'a>) -> Self::Future {
        let asked = self
            .client
            .as_ref()
            .and_then(|client| client.question(s.screen, &s.candidate));
        let Some(asked) = asked else {
            return ProbeFuture::Ready {
                result: std::future::ready(commit(&mut s)),
            };
        };
        let future: Boxed<'a> = Box::pin(async move {
            if let Err(denied) = asked.await {
                s.laps.lap();
                return Err(denied);
            }
            commit(&mut s)
        });
        ProbeFuture::Probing { future }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defect: the verdict cache was fixed at 100,000 entries and expired
    /// verdicts were never swept. Its size is `sidecar.max_verdicts` now,
    /// a full cache drops its oldest first, and the upkeep sweeps it.
    #[test]
    fn verdict_cache_is_bounded_and_swept() {
        let cache = VerdictCache::new(1024, 1);
        for i in 0..100_000u64 {
            cache.forward(alloy_primitives::keccak256(i.to_be_bytes()), 1_000 + i);
        }
        // About the bound (each shard keeps two generations of its share).
        assert!(cache.len() <= 1024 + 64, "{}", cache.len());
        let newest = alloy_primitives::keccak256(99_999u64.to_be_bytes());
        assert!(cache.knows(&newest, 0));
        // Expired verdicts leave with the sweep.
        cache.sweep(200_000, usize::MAX);
        assert!(cache.is_empty());
        assert!(!cache.knows(&newest, 0));
    }
}
