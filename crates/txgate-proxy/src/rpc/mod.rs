//! The JSON-RPC service: reads the body, parses it, applies the method
//! policy and forwards to the upstream.
//!
//! A lone call is forwarded as the bytes that came in and its answer is
//! relayed as it came back (the upstream echoes the caller's id). A batch is
//! rewritten: each forwarded call gets its position as upstream id, so
//! answers map back to the caller's ids, in the caller's order, whatever the
//! caller used as ids (duplicates included).

mod batch;
pub mod bundle;
pub mod conditional;
mod lanes;
mod latest;
mod plan;
pub mod policy;
pub mod rescue;
mod single;
mod split;
pub mod submission_log;
pub mod sync;
pub mod websocket;

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use tower::Service;
use txgate_config::{RpcConfig, ScreenConfig};
use txgate_jsonrpc::{Call, Entry, Frame, Id};
use txgate_screen::{Reason, Screen};

use crate::limits::clients::Charged;
use crate::limits::pacing::{Pace, PaceMark, Pacer};
use crate::metrics::{ClearedAs, Metrics, Outcome, UpstreamFailure};
use crate::request::{Body, Client, Refuse};
use crate::rpc::plan::{frame_cost, frame_refusal};
use crate::rpc::policy::MethodPolicy;
use crate::rpc::rescue::Refusal;
use crate::screening::{self, Stack};
use crate::upstream::group::{CallError, Nodes};
use crate::upstream::is_json_content_type;

/// Screening of the raw-transaction methods, when enabled.
#[derive(Debug)]
struct Screening {
    screen: Arc<Screen>,
    stack: Stack,
    /// The ShouldForward client inside `stack`, for a bundle's questions.
    probe: Option<Arc<screening::ProbeClient>>,
    monitor_only: bool,
    /// Screened calls of one batch screened at once at most.
    batch_concurrency: usize,
    /// One sampled line per refusal (and would-be refusal), shared by
    /// every worker: one rate for the process.
    refusals: Arc<screening::RefusalLog>,
}

/// What every worker's service shares, one of each per process: one rate
/// of log lines, one conditional rate and switch, one cap on sync calls.
#[derive(Debug, Clone)]
pub struct PerProcess {
    /// The refusal log.
    pub refusals: Arc<screening::RefusalLog>,
    /// The forwarded-submission log.
    pub submissions: Arc<submission_log::SubmissionLog>,
    /// The checks on conditional transactions.
    pub conditions: Arc<conditional::Conditions>,
    /// The cap and timeout of sync calls.
    pub sync: Arc<sync::SyncCalls>,
    /// Client WebSockets (`None`: off).
    pub websockets: Option<Arc<websocket::WebSockets>>,
    /// Holds refusals of clients that keep being refused (`None`: off);
    /// HTTP answers are held by the connection, WebSocket answers here.
    pub(crate) pacer: Option<Arc<Pacer>>,
}

/// Who sent a request, as the checks of its calls need it.
#[derive(Debug)]
struct From<'a> {
    /// The client's address.
    client: Option<IpAddr>,
    /// Its signature header over its body, for conditional calls.
    signed: conditional::Signed<'a>,
}

/// Settings and handles shared by every clone of [`RpcService`].
#[derive(Debug)]
struct Shared {
    upstream: Nodes,
    /// One line per forwarded submission, rate-limited.
    submissions: Arc<submission_log::SubmissionLog>,
    policy: MethodPolicy,
    metrics: Arc<Metrics>,
    max_body_bytes: usize,
    max_batch_size: usize,
    /// Transactions in one `eth_sendBundle` at most.
    max_bundle_txs: usize,
    /// Transactions screened for one message at most (`None`: screening
    /// off, nothing to bound).
    max_message_txs: Option<usize>,
    body_read_timeout: Duration,
    retry_after: HeaderValue,
    /// The checks on conditional transactions, screening on or off; one
    /// rate for the process.
    conditions: Arc<conditional::Conditions>,
    /// Count, log and forward what would be refused.
    monitor_only: bool,
    screening: Option<Screening>,
    /// `eth_sendRawTransactionSync`: its own cap in flight and timeout.
    sync: Arc<sync::SyncCalls>,
    websockets: Option<Arc<websocket::WebSockets>>,
    pacer: Option<Arc<Pacer>>,
}

/// What the JSON-RPC stage keeps to: its own section, and the few values
/// of others it applies.
#[derive(Debug, Clone, Copy)]
pub struct RpcSettings<'a> {
    /// `[rpc]`: the body, batch and bundle caps, the method policy.
    pub rpc: &'a RpcConfig,
    /// `screen.monitor_only` and `screen.batch_concurrency`.
    pub screen: &'a ScreenConfig,
    /// `server.body_read_timeout_ms`.
    pub body_read_timeout: Duration,
    /// `admission.retry_after_secs`, sent with a refusal for load.
    pub retry_after_secs: u64,
}

/// The innermost service of the client-facing stack.
#[derive(Debug, Clone)]
pub struct RpcService {
    shared: Arc<Shared>,
}

impl RpcService {
    /// Builds the service from its settings; `screen` is the
    /// screening state shared by every worker (`None`: screening off),
    /// `probe` the sidecar's ShouldForward client (`None`: not asked) and
    /// `process` what every worker shares.
    pub fn new(
        settings: RpcSettings<'_>,
        upstream: Nodes,
        metrics: Arc<Metrics>,
        screen: Option<Arc<Screen>>,
        probe: Option<Arc<screening::ProbeClient>>,
        process: PerProcess,
    ) -> Self {
        let PerProcess {
            refusals,
            submissions,
            conditions,
            sync,
            websockets,
            pacer,
        } = process;
        let RpcSettings {
            rpc,
            screen: screen_config,
            body_read_timeout,
            retry_after_secs,
        } = settings;
        let screening = screen.map(|screen| Screening {
            stack: screening::stack(probe.clone()),
            probe,
            screen,
            monitor_only: screen_config.monitor_only,
            batch_concurrency: screen_config.batch_concurrency.max(1),
            refusals,
        });
        RpcService {
            shared: Arc::new(Shared {
                upstream,
                submissions,
                policy: MethodPolicy::new(rpc.policy, &rpc.methods),
                metrics,
                max_body_bytes: rpc.max_body_bytes,
                max_batch_size: rpc.max_batch_size,
                max_bundle_txs: rpc.max_bundle_txs,
                max_message_txs: screening.is_some().then_some(rpc.max_message_txs),
                body_read_timeout,
                retry_after: HeaderValue::from(retry_after_secs),
                conditions,
                monitor_only: screen_config.monitor_only,
                screening,
                sync,
                websockets,
                pacer,
            }),
        }
    }
}

impl<B> Service<Request<B>> for RpcService
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move {
            let started = Instant::now();
            let (outcome, response) = match &shared.websockets {
                Some(ws) if websocket::wants_upgrade(&req) => {
                    let ws = ws.clone();
                    websocket::accept(shared.clone(), &ws, req).await
                }
                _ => shared.handle(req).await,
            };
            shared.metrics.http.outcome(outcome);
            shared
                .metrics
                .http
                .request_duration
                .observe(started.elapsed().as_secs_f64());
            Ok(response)
        })
    }
}

impl Shared {
    /// `answer` marked for its client's pacing (see `limits::pacing`),
    /// when pacing is on and the answer changes the client's streak.
    fn paced(
        &self,
        answer: (Outcome, Response<Body>),
        from: &From<'_>,
        pace: Option<Pace>,
    ) -> (Outcome, Response<Body>) {
        let (outcome, mut response) = answer;
        if let (Some(pacer), Some(client), Some(pace)) = (&self.pacer, from.client, pace) {
            response.extensions_mut().insert(PaceMark {
                pace,
                client,
                pacer: pacer.clone(),
            });
        }
        (outcome, response)
    }

    /// Whether calls of `method` are screened here: a raw transaction or a
    /// bundle, while screening is on.
    fn screens(&self, method: &str) -> bool {
        self.screening.is_some() && (screening::is_screened(method) || method == bundle::METHOD)
    }

    /// Whether the node taking a call of `method` would end a streak of
    /// refusals: a screened submission, while some client has a streak.
    fn tracks_acceptance(&self, method: &str) -> bool {
        self.pacer.as_ref().is_some_and(|p| p.has_streaks()) && self.screens(method)
    }

    fn refuse(&self, refusal: Refusal, id: Option<Id<'_>>) -> (Outcome, Response<Body>) {
        (
            refusal.class().outcome,
            refusal.respond(id, &self.retry_after),
        )
    }

    async fn handle<B>(&self, mut req: Request<B>) -> (Outcome, Response<Body>)
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        if req.method() != Method::POST {
            let (outcome, mut response) = self.refuse(Refusal::BadHttpMethod, None);
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
            return (outcome, response);
        }
        if !is_json_content_type(req.headers().get(CONTENT_TYPE)) {
            return self.refuse(Refusal::BadContentType, None);
        }
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > self.max_body_bytes as u64) {
            return self.refuse(Refusal::BodyTooLarge(self.max_body_bytes), None);
        }
        let charged = req.extensions_mut().remove::<Charged>();
        let client = req.extensions().get::<Client>().map(|c| c.ip);
        // Kept for the caller check of conditional calls (a HeaderValue
        // clone shares its bytes).
        let signature = req
            .headers()
            .get(txgate_conditional::caller::HEADER)
            .cloned();
        let read = Limited::new(req.into_body(), self.max_body_bytes).collect();
        let body = match tokio::time::timeout(self.body_read_timeout, read).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                return self.refuse(Refusal::BodyTooLarge(self.max_body_bytes), None);
            }
            Ok(Err(_)) => return self.refuse(Refusal::BodyError, None),
            Err(_) => return self.refuse(Refusal::BodyTimeout, None),
        };

        let frame = txgate_jsonrpc::parse(&body, self.max_batch_size);
        // The client's rates: every call of a batch, and the submissions
        // against their own rate (the first call was charged before the
        // body was read).
        if let Ok(frame) = &frame {
            let (calls, txs, id) = frame_cost(frame);
            // Bounded before any is screened or charged, like a batch
            // over its cap.
            if let Some(refusal) = self.too_many_txs(txs) {
                return self.refuse(refusal, id);
            }
            if let Some(charged) = &charged
                && let Err(refusal) = charged.rest(calls, txs)
            {
                return self.refuse(refusal.into(), id);
            }
        }
        let signed = conditional::Signed::new(signature.as_ref().map(HeaderValue::as_bytes), &body);
        let from = From { client, signed };
        match frame {
            Ok(Frame::Single(Entry::Call(call))) => self.single(&call, body.clone(), &from).await,
            Ok(Frame::Single(Entry::Invalid(invalid))) => {
                self.refuse(Refusal::InvalidRequest(invalid.message), invalid.id)
            }
            Ok(Frame::Batch(entries)) => self.batch(&entries, body.len(), &from).await,
            Err(e) => self.refuse(frame_refusal(e), None),
        }
    }

    /// The refusal of a message holding more transactions to screen than
    /// `rpc.max_message_txs`: each costs a sender recovery on the worker
    /// that reads the message, which serves other clients meanwhile.
    fn too_many_txs(&self, txs: usize) -> Option<Refusal> {
        self.max_message_txs
            .filter(|max| txs > *max)
            .map(|max| Refusal::TooManyTxs { txs, max })
    }

    /// The checks of a call before it is forwarded: a conditional
    /// transaction's condition (always), then screening (a bundle's as one
    /// unit); `Some` when it is refused.
    async fn check_call(&self, call: &Call<'_>, from: &From<'_>) -> Option<Refusal> {
        if call.method == bundle::METHOD {
            return self.screen_bundle(call, from.client).await;
        }
        if call.method == conditional::METHOD
            && let Err(refusal) = self.conditions.check(
                call.params,
                &from.signed,
                std::time::Instant::now(),
                self.monitor_only,
            )
        {
            return Some(Refusal::Conditional(refusal));
        }
        self.screen_call(call, from.client).await
    }

    /// Screens a raw-transaction call from `client`; `Some` when it is
    /// refused. Other methods, and everything when screening is off, pass
    /// untouched.
    async fn screen_call(&self, call: &Call<'_>, client: Option<IpAddr>) -> Option<Refusal> {
        let screening = self.screening.as_ref()?;
        if !screening::is_screened(&call.method) {
            return None;
        }
        // One clock read: the decision time and the histograms' start.
        let started = tokio::time::Instant::now();
        let metrics = &self.metrics.screen;
        let now = screening.screen.millis(started.into_std());
        let monitor_only = screening.monitor_only;
        let Some(param) = screening::raw_param(call.params) else {
            metrics.refused(Reason::InvalidTransaction, monitor_only);
            screening.refusals.refused(
                started.into_std(),
                &screening::Refused {
                    reason: Reason::InvalidTransaction,
                    rejection: None,
                    param: None,
                    bundle_index: None,
                    client,
                    monitor_only,
                },
            );
            return (!monitor_only).then_some(Refusal::InvalidParams(
                "invalid params: expected the raw transaction as a 0x-prefixed hex string",
            ));
        };
        let laps = screening::Laps::new(&metrics.stages, started.into_std());
        let result =
            screening::screen(&screening.stack, &screening.screen, &param, now, laps).await;
        metrics.duration.observe(started.elapsed().as_secs_f64());
        match result {
            Ok(screening::Cleared {
                admitted,
                sender_cached,
            }) => {
                if sender_cached {
                    metrics.sender_cache_hits.inc();
                } else {
                    metrics.sender_cache_misses.inc();
                }
                metrics.cleared(if admitted.fingerprint.is_none() {
                    ClearedAs::Creation
                } else if admitted.suspect {
                    ClearedAs::Suspect
                } else {
                    ClearedAs::Clean
                });
                None
            }
            Err(rejection) => {
                let reason = rejection.reason();
                metrics.refused(reason, monitor_only);
                screening.refusals.refused(
                    started.into_std(),
                    &screening::Refused {
                        reason,
                        rejection: Some(&rejection),
                        param: Some(&param),
                        bundle_index: None,
                        client,
                        monitor_only,
                    },
                );
                (!monitor_only).then_some(Refusal::Screened(rejection))
            }
        }
    }
}

/// The refusal of a call the node group could not answer.
fn upstream_refusal(failure: CallError) -> Refusal {
    match failure {
        CallError::NoHealthy => Refusal::NoHealthyUpstream,
        CallError::Upstream(UpstreamFailure::Timeout) => Refusal::UpstreamTimeout,
        CallError::Upstream(UpstreamFailure::Tls) => Refusal::UpstreamTls,
        CallError::Upstream(_) => Refusal::UpstreamUnavailable,
    }
}
