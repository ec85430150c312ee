//! `POST /report`: the Credible Layer sidecar's failure report, JSON
//! `[tx_hash, TxEnv]` (parsed by [`txgate_proto::report`]).
//!
//! A call's report is applied like an invalidation naming no assertion:
//! the fingerprint computed from the report's target, calldata, value and
//! gas limit is banned, the sender (`caller`) charged, the tx hash
//! refused; failures count towards a cooldown of the call. A creation has
//! no fingerprint: its hash is refused. The answer is 200 once the report
//! is queued for the batch worker (the sidecar does not retry and reads
//! only the status), 400 with a one-line reason for a body that does not
//! parse, 413 over `aeges.max_report_bytes`, 403 for a peer outside
//! `aeges.report_allow`, 401 without the right token.
//!
//! The token can come three ways, because the sidecar sends no header of
//! its own and only its URL can carry it: a `token` query parameter
//! (`aeges_url = "http://txgate:9545/?token=SECRET"`; the sidecar keeps the
//! query when it appends `/report`), user-info it turns into Basic auth
//! (`http://report:SECRET@txgate:9545`; user or password may be the
//! token), or an `Authorization: Bearer SECRET` header from anything else.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use tokio::sync::mpsc;
use txgate_config::IpNet;
use txgate_screen::{Invalidation, Screen};

use crate::metrics::Metrics;
use crate::request::Body;
use crate::screening::state::wall_now;

/// How long a report waits for room in a full queue before 503.
const QUEUE_WAIT: Duration = Duration::from_secs(1);
/// How long the body may take to arrive once the headers are in (408).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(5);

/// What the report handler needs; shared by every connection.
#[derive(Debug)]
pub struct Reports {
    allow: Vec<IpNet>,
    token: Option<String>,
    max_bytes: usize,
    queue: mpsc::Sender<Invalidation>,
    screen: Arc<Screen>,
    metrics: Arc<Metrics>,
    /// Where a reported ban goes to the rest of the fleet (a report
    /// reaches one instance), when Redis is configured.
    share: Option<crate::sidecar::shared_bans::Share>,
}

impl Reports {
    /// Reports from peers in `allow`, with `token` when set, of at most
    /// `max_bytes`, queued on `queue`.
    pub fn new(
        allow: Vec<IpNet>,
        token: Option<String>,
        max_bytes: usize,
        queue: mpsc::Sender<Invalidation>,
        screen: Arc<Screen>,
        metrics: Arc<Metrics>,
    ) -> Reports {
        Reports {
            allow,
            token: token.filter(|t| !t.is_empty()),
            max_bytes,
            queue,
            screen,
            metrics,
            share: None,
        }
    }

    /// Shares every reported ban with the fleet through `share`.
    pub fn with_share(mut self, share: Option<crate::sidecar::shared_bans::Share>) -> Reports {
        self.share = share;
        self
    }

    /// Whether `peer` may post at all.
    pub fn allows(&self, peer: IpAddr) -> bool {
        let peer = super::canonical(peer);
        self.allow.iter().any(|net| net.contains(&peer))
    }

    /// The metrics it counts in.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Answers one request from `peer`.
    pub async fn handle<B>(&self, peer: IpAddr, req: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let m = &self.metrics.aeges;
        if req.uri().path() != "/report" {
            m.not_found.inc();
            return answer(StatusCode::NOT_FOUND, "not found");
        }
        if req.method() != Method::POST {
            m.not_found.inc();
            return answer(StatusCode::METHOD_NOT_ALLOWED, "POST only");
        }
        // Cheapest first, all before the body: who, then the token, then
        // the declared size.
        if !self.allows(peer) {
            m.refused_source.inc();
            return answer(StatusCode::FORBIDDEN, "source not allowed");
        }
        if let Some(token) = &self.token
            && !super::token::authorized(&req, token)
        {
            m.refused_token.inc();
            return answer(StatusCode::UNAUTHORIZED, "missing or wrong token");
        }
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_bytes as u64) {
            m.too_large.inc();
            return answer(StatusCode::PAYLOAD_TOO_LARGE, "report too large");
        }
        let read = tokio::time::timeout(
            BODY_TIMEOUT,
            Limited::new(req.into_body(), self.max_bytes).collect(),
        )
        .await;
        let Ok(read) = read else {
            m.timeout.inc();
            return answer(StatusCode::REQUEST_TIMEOUT, "report body too slow");
        };
        let body = match read {
            Ok(body) => body.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                m.too_large.inc();
                return answer(StatusCode::PAYLOAD_TOO_LARGE, "report too large");
            }
            Err(_) => {
                m.malformed.inc();
                m.invalid.with_label_values(&["body"]).inc();
                return answer(StatusCode::BAD_REQUEST, "invalid report: body not read");
            }
        };
        let report = match txgate_proto::report::parse(&body) {
            Ok(report) => report,
            Err(e) => {
                m.malformed.inc();
                m.invalid.with_label_values(&[e.reason()]).inc();
                return answer(StatusCode::BAD_REQUEST, &format!("invalid report: {e}"));
            }
        };
        let Some(invalidation) = report.invalidation(wall_now()) else {
            // A creation: nothing to fingerprint; the hash itself failed.
            let now = self.screen.millis(tokio::time::Instant::now().into_std());
            self.screen.fail_hash(report.tx_hash, now);
            m.creation.inc();
            return answer(StatusCode::OK, "ok");
        };
        // A failure reported again (the reporter retrying, or reporting
        // each time the transaction fails anew) is shared once. Asked
        // before it is queued: the worker may apply this very report
        // before the queue call returns.
        let repeated = self.share.is_some() && {
            let now = self.screen.millis(tokio::time::Instant::now().into_std());
            self.screen.already_learned(&invalidation, now)
        };
        let queued = tokio::time::timeout(
            QUEUE_WAIT,
            crate::sidecar::worker::queue(invalidation, &self.queue, &self.metrics),
        )
        .await;
        if queued != Ok(true) {
            // Refused here, so not shared either: the reporter is told to
            // try again, and the fleet hears it from whoever takes it.
            m.unavailable.inc();
            return answer(StatusCode::SERVICE_UNAVAILABLE, "busy");
        }
        if let Some(share) = &self.share
            && !repeated
        {
            share.offer(&invalidation);
        }
        m.accepted.inc();
        answer(StatusCode::OK, "ok")
    }
}

fn answer(status: StatusCode, line: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{line}\n"))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    // A refusal closes the connection: a refused peer holds no slot.
    if status != StatusCode::OK {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests;
