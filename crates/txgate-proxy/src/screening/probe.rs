//! [`Probe`]: the optional ShouldForward question to the sidecar, for a
//! fingerprint with no local verdict, under a hard deadline.
//!
//! Asked only for calls every cheaper stage let through, that have a
//! fingerprint, are not suspect (those are shaped already) and have no
//! cached "forward" verdict. A "forward" answer is cached for its TTL; a
//! "deny" answer bans the fingerprint like an invalidation and refuses the
//! call; a late answer or an error forwards (fail open) and is counted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use alloy_primitives::B256;
use pin_project_lite::pin_project;
use tonic::transport::Channel;
use tower::Service;
use txgate_proto::v1::rpc_proxy_heuristics_client::RpcProxyHeuristicsClient;
use txgate_proto::{fingerprint_message, v1};
use txgate_screen::ttl::TtlMap;
use txgate_screen::{Invalidation, Millis, Rejection};

use super::{Passed, Submission};
use crate::metrics::Metrics;

/// The sidecar client and the verdict cache, shared by a worker's calls.
#[derive(Debug)]
pub struct ProbeClient {
    client: RpcProxyHeuristicsClient<Channel>,
    timeout: Duration,
    verdict_ttl: Millis,
    forward: Arc<TtlMap<B256, ()>>,
    metrics: Arc<Metrics>,
}

impl ProbeClient {
    /// A client over `channel`; `forward` is the verdict cache shared by
    /// every worker.
    pub fn new(
        channel: Channel,
        timeout: Duration,
        verdict_ttl: Millis,
        forward: Arc<TtlMap<B256, ()>>,
        metrics: Arc<Metrics>,
    ) -> ProbeClient {
        ProbeClient {
            client: RpcProxyHeuristicsClient::new(channel),
            timeout,
            verdict_ttl,
            forward,
            metrics,
        }
    }
}

enum Verdict {
    Forward(Millis),
    Deny(Vec<v1::Assertion>),
    Unknown,
}

impl ProbeClient {
    /// The question, as a `'static` future (it owns its client handle), so
    /// that it is `Send` whatever the submission's lifetime.
    fn ask(
        self: Arc<Self>,
        request: v1::ShouldForwardRequest,
    ) -> Pin<Box<dyn Future<Output = Verdict> + Send>> {
        Box::pin(async move { self.ask_inner(request).await })
    }

    async fn ask_inner(&self, request: v1::ShouldForwardRequest) -> Verdict {
        let mut client = self.client.clone();
        let m = &self.metrics.sidecar.probe;
        match tokio::time::timeout(self.timeout, client.should_forward(request)).await {
            Ok(Ok(answer)) => {
                let answer = answer.into_inner();
                if answer.forward {
                    m[0].inc();
                    let ttl = if answer.ttl_ms == 0 {
                        self.verdict_ttl
                    } else {
                        answer.ttl_ms
                    };
                    Verdict::Forward(ttl)
                } else {
                    m[1].inc();
                    Verdict::Deny(answer.assertions)
                }
            }
            Ok(Err(status)) => {
                m[3].inc();
                tracing::debug!(code = ?status.code(), "ShouldForward failed; forwarding");
                Verdict::Unknown
            }
            Err(_) => {
                m[2].inc();
                Verdict::Unknown
            }
        }
    }
}

/// The innermost service: asks the sidecar when it should, then records
/// the forward for attribution ([`admit`]).
#[derive(Debug, Clone, Default)]
pub struct Probe {
    pub(super) client: Option<Arc<ProbeClient>>,
}

type Boxed<'a> = Pin<Box<dyn Future<Output = Result<Passed, Rejection>> + Send + 'a>>;

pin_project! {
    /// Ready at once, or a probe in flight.
    #[allow(missing_docs)]
    #[project = Projected]
    pub enum ProbeFuture<'a> {
        /// No question asked.
        Ready { result: Option<Result<Passed, Rejection>> },
        /// Waiting for the sidecar.
        Probing { future: Boxed<'a> },
    }
}

impl Future for ProbeFuture<'_> {
    type Output = Result<Passed, Rejection>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Projected::Ready { result } => Poll::Ready(
                result
                    .take()
                    .unwrap_or(Err(Rejection::Invalid(txgate_screen::DecodeError::Empty))),
            ),
            Projected::Probing { future } => future.as_mut().poll(cx),
        }
    }
}

/// Records the forward for attribution and says how it passed.
pub fn admit(s: &Submission<'_>) -> Result<Passed, Rejection> {
    match &s.candidate {
        Some(c) => Ok(Passed {
            admitted: s.screen.admit(c),
            sender_cached: c.sender_cached,
        }),
        None => Err(Rejection::Invalid(txgate_screen::DecodeError::Empty)),
    }
}

impl<'a> Service<Submission<'a>> for Probe {
    type Response = Passed;
    type Error = Rejection;
    type Future = ProbeFuture<'a>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, s: Submission<'a>) -> Self::Future {
        let ready = |s: &Submission<'a>| ProbeFuture::Ready {
            result: Some(admit(s)),
        };
        let Some(client) = self.client.clone() else {
            return ready(&s);
        };
        let question = s.candidate.as_deref().and_then(|c| {
            let fp = c.fingerprint.filter(|_| !c.suspect)?;
            let known = client.forward.get(&fp.hash, s.now).is_some();
            (!known).then(|| (fp, c.hash, c.sender, c.raw.clone()))
        });
        let Some((fp, tx_hash, sender, raw)) = question else {
            return ready(&s);
        };
        let request = v1::ShouldForwardRequest {
            fingerprint: Some(fingerprint_message(&fp)),
            tx_hash: tx_hash.to_vec(),
            sender: sender.map(|a| a.to_vec()).unwrap_or_default(),
            raw_tx: raw,
        };
        let asked = client.clone().ask(request);
        let future: Boxed<'a> = Box::pin(async move {
            match asked.await {
                Verdict::Forward(ttl) => {
                    client.forward.insert(fp.hash, (), s.now + ttl);
                }
                Verdict::Deny(assertions) => {
                    let ids: Vec<(B256, u64)> = assertions
                        .iter()
                        .filter(|a| a.assertion_id.len() == 32)
                        .map(|a| (B256::from_slice(&a.assertion_id), a.assertion_version))
                        .collect();
                    let ids = if ids.is_empty() {
                        vec![(B256::ZERO, 0)]
                    } else {
                        ids
                    };
                    let batch: Vec<Invalidation> = ids
                        .iter()
                        .map(|(id, version)| Invalidation {
                            fingerprint: fp.hash,
                            target: fp.target,
                            selector: fp.selector,
                            assertion_id: *id,
                            assertion_version: *version,
                            tx_hash: Some(tx_hash),
                            sender,
                        })
                        .collect();
                    let applied = s.screen.apply(&batch, s.now);
                    client.metrics.screen.applied(&applied);
                    return Err(Rejection::Denied {
                        fingerprint: fp.hash,
                        assertions: ids.into_iter().map(|(id, _)| id).collect(),
                    });
                }
                Verdict::Unknown => {}
            }
            admit(&s)
        });
        ProbeFuture::Probing { future }
    }
}
