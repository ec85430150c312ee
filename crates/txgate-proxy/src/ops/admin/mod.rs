//! The admin listener: `/metrics`, `/healthz`, `/readyz`, the ban
//! endpoints under `/bans` ([`bans`]) and the conditional switch at
//! `/conditional` ([`switch`]).
//!
//! Separate from the client-facing server so that load balancers and
//! Prometheus never queue behind client traffic or admission control.

pub mod bans;
mod json_http;
pub mod switch;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use http_body_util::BodyExt;

pub use bans::{AdminBody, Bans};

use crate::metrics::Metrics;
use crate::ops::health::Readiness;
use crate::request::Body;
use crate::upstream::group::GroupState;
use txgate_nodes::Status;

/// What the admin listener serves.
#[derive(Debug)]
pub struct Admin {
    /// The metrics rendered at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// What `/readyz` reports.
    pub readiness: Arc<Readiness>,
    /// The ban endpoints (`None`: screening is off; they answer 503).
    pub bans: Option<Bans>,
    /// The conditional switch.
    pub switch: switch::Switch,
}

impl Admin {
    /// Answers one request from `peer`.
    pub async fn handle<B>(&self, req: Request<B>, peer: std::net::IpAddr) -> Response<AdminBody>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let path = req.uri().path();
        if path == switch::PATH {
            return self.switch.handle(req, peer).await;
        }
        if path == "/bans" || path.starts_with("/bans/") {
            return match &self.bans {
                Some(bans) => bans.handle(req, peer).await,
                None => {
                    if let Some((endpoint, _)) = bans::endpoint(path) {
                        let unavailable = crate::metrics::admin::Answered::Unavailable;
                        self.metrics.admin.request(endpoint, unavailable);
                    }
                    bans::error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "screening is off: there are no bans",
                    )
                }
            };
        }
        route(&req, &self.metrics, &self.readiness).map(|body| body.boxed_unsync())
    }
}

/// Answers one admin request.
pub fn route<B>(req: &Request<B>, metrics: &Metrics, readiness: &Readiness) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(metrics.render())));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => {
            let ready = readiness.ready();
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let body = serde_json::json!({
                "ready": ready,
                "upstream": if readiness.upstream_up() { "up" } else { "down" },
                "draining": readiness.draining(),
                "sidecar": readiness.sidecar().as_str(),
                "sidecars": readiness.sources().iter().map(|s| serde_json::json!({
                    "protocol": s.protocol,
                    "url": s.url,
                    "link": s.link.as_str(),
                    "error": s.error,
                    "caught_up": s.caught_up,
                })).collect::<Vec<_>>(),
                "snapshot": readiness.snapshot().as_str(),
                "redis": readiness.redis().map(|link| serde_json::json!({
                    "link": link.state().as_str(),
                    "limits": if link.up() { "fleet" } else { "local" },
                })),
                "failed": readiness.failed(),
                "agreed_head": readiness.nodes().and_then(GroupState::agreed_head),
                "leader": readiness.nodes().and_then(GroupState::leader_name),
                "nodes": readiness.nodes().map(|group| group.states().into_iter().map(|(name, s)| {
                    let (state, reason) = match s.status {
                        Status::In => ("in", None),
                        Status::Out(reason) => ("out", Some(reason.as_str())),
                    };
                    serde_json::json!({
                        "name": name,
                        "role": s.role.as_str(),
                        "state": state,
                        "reason": reason,
                        "head": s.head,
                        "lag": s.lag,
                    })
                }).collect::<Vec<_>>()),
            });
            let body = format!("{body}\n");
            let mut response = text(status, body.into());
            response
                .headers_mut()
                .insert(CONTENT_TYPE, crate::request::JSON);
            response
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

/// Serves the admin endpoints until `stop` is cancelled.
pub async fn serve(listener: TcpListener, admin: Arc<Admin>, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if crate::server::accept_error_is_transient(&e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => {
                // The listener no longer works: this task ends, and its
                // guard reports the admin listener as failed.
                tracing::error!(error = %e, "admin listener failed");
                return;
            }
        };
        let admin = admin.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let admin = admin.clone();
                async move { Ok::<_, Infallible>(admin.handle(req, peer.ip()).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(5))
                .serve_connection(io, service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    #[test]
    fn readyz_follows_upstream_and_draining() {
        let metrics = Arc::new(Metrics::new());
        let readiness = Readiness::new(metrics.clone());
        assert_eq!(route(&get("/readyz"), &metrics, &readiness).status(), 503);
        readiness.set_upstream_up(true);
        assert_eq!(route(&get("/readyz"), &metrics, &readiness).status(), 200);
        readiness.start_draining();
        assert_eq!(route(&get("/readyz"), &metrics, &readiness).status(), 503);
        let ready = Readiness::new(metrics.clone());
        ready.set_upstream_up(true);
        ready.set_failed("worker-1");
        let r = route(&get("/readyz"), &metrics, &ready);
        assert_eq!(r.status(), 503);
        assert_eq!(route(&get("/healthz"), &metrics, &readiness).status(), 200);
        assert_eq!(route(&get("/nope"), &metrics, &readiness).status(), 404);
        let m = route(&get("/metrics"), &metrics, &readiness);
        assert_eq!(m.status(), 200);
    }
}
