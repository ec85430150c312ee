//! Global admission control, outermost in the stack.
//!
//! hyper-util clones the service for every connection (and tower's glue for
//! every request), so a per-clone `ConcurrencyLimit` would limit nothing.
//! [`AdmissionLayer`] shares one counter across every clone. The decision is
//! made in `call`, before the inner service reads the body: a refused
//! request costs one atomic add and a small response.
//!
//! The permit lives in the [`ResponseFuture`], so a request whose client
//! goes away releases its slot when hyper drops the future.
//!
//! ```
//! use std::convert::Infallible;
//! use tower::{Layer, ServiceExt, service_fn};
//! use txgate_proxy::limits::admission::AdmissionLayer;
//! use txgate_proxy::request::{Body, json_response};
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let metrics = std::sync::Arc::new(txgate_proxy::metrics::Metrics::new());
//! let layer = AdmissionLayer::new(1, 1, metrics);
//! let svc = layer.layer(service_fn(|_req: http::Request<()>| async {
//!     Ok::<_, Infallible>(json_response(http::StatusCode::OK, "{}".into()))
//! }));
//! let response = svc.oneshot(http::Request::new(())).await.unwrap();
//! assert_eq!(response.status(), 200);
//! # }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http::header::HeaderValue;
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower::{Layer, Service};
use txgate_jsonrpc::code;

use crate::metrics::{Metrics, Outcome};
use crate::request::{Body, Class, Refuse};

/// Over the global in-flight cap (`admission.max_in_flight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overloaded;

impl Refuse for Overloaded {
    fn class(&self) -> Class {
        Class::new(
            StatusCode::TOO_MANY_REQUESTS,
            code::LIMIT_EXCEEDED,
            Outcome::Overloaded,
        )
    }

    fn message(&self) -> String {
        "limit exceeded: too many requests in flight, retry later".into()
    }
}

/// The shared in-flight counter.
#[derive(Debug)]
struct Limit {
    in_flight: AtomicUsize,
    max: usize,
    retry_after: HeaderValue,
    metrics: Arc<Metrics>,
}

/// Applies [`Admission`] with one counter shared by every clone.
#[derive(Debug, Clone)]
pub struct AdmissionLayer {
    limit: Arc<Limit>,
}

impl AdmissionLayer {
    /// At most `max_in_flight` requests at once; refusals carry
    /// `Retry-After: retry_after_secs`.
    pub fn new(max_in_flight: usize, retry_after_secs: u64, metrics: Arc<Metrics>) -> Self {
        let retry_after = HeaderValue::from(retry_after_secs);
        AdmissionLayer {
            limit: Arc::new(Limit {
                in_flight: AtomicUsize::new(0),
                max: max_in_flight,
                retry_after,
                metrics,
            }),
        }
    }
}

impl AdmissionLayer {
    /// One in-flight slot, or [`Overloaded`] (counted) when the cap
    /// is reached: a message on a WebSocket, admitted like a request.
    pub(crate) fn try_admit(&self) -> Result<Permit, Overloaded> {
        self.limit.try_admit()
    }
}

impl Limit {
    fn try_admit(self: &Arc<Self>) -> Result<Permit, Overloaded> {
        let previous = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if previous >= self.max {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Overloaded);
        }
        self.metrics.http.in_flight.inc();
        Ok(Permit(self.clone()))
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = Admission<S>;
    fn layer(&self, inner: S) -> Admission<S> {
        Admission {
            inner,
            limit: self.limit.clone(),
        }
    }
}

/// Refuses requests over the shared in-flight cap with HTTP 429.
#[derive(Debug, Clone)]
pub struct Admission<S> {
    inner: S,
    limit: Arc<Limit>,
}

/// Holds one in-flight slot until dropped.
#[derive(Debug)]
pub(crate) struct Permit(Arc<Limit>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.http.in_flight.dec();
    }
}

impl<S, B> Service<Request<B>> for Admission<S>
where
    S: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let permit = match self.limit.try_admit() {
            Ok(permit) => permit,
            Err(refusal) => {
                self.limit.metrics.http.outcome(Outcome::Overloaded);
                let response = refusal.respond(None, &self.limit.retry_after);
                return ResponseFuture::Rejected {
                    response: Some(response),
                };
            }
        };
        ResponseFuture::Admitted {
            future: self.inner.call(req),
            permit,
        }
    }
}

pin_project! {
    /// Either the inner service's future (holding a slot) or a refusal that
    /// never called the inner service.
    #[project = Proj]
    #[allow(missing_docs)]
    pub enum ResponseFuture<F> {
        Admitted { #[pin] future: F, permit: Permit },
        Rejected { response: Option<Response<Body>> },
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Proj::Admitted { future, .. } => future.poll(cx),
            Proj::Rejected { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => unreachable!("ResponseFuture polled after completion"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;
    use tokio::sync::oneshot;
    use tower::{ServiceExt, service_fn};

    use crate::request::json_response;

    /// A service that answers when told to, so requests stay in flight.
    async fn answer_when_told(
        req: Request<oneshot::Receiver<()>>,
    ) -> Result<Response<Body>, Infallible> {
        let _ = req.into_body().await;
        Ok(json_response(StatusCode::OK, "{}".into()))
    }

    #[tokio::test]
    async fn limit_is_shared_by_every_clone_and_released_on_completion() {
        let metrics = Arc::new(Metrics::new());
        let layer = AdmissionLayer::new(2, 7, metrics.clone());
        let svc = layer.layer(service_fn(answer_when_told));

        let (tx1, rx1) = oneshot::channel();
        let (tx2, rx2) = oneshot::channel();
        let f1 = tokio::spawn(svc.clone().oneshot(Request::new(rx1)));
        let f2 = tokio::spawn(svc.clone().oneshot(Request::new(rx2)));
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        assert_eq!(metrics.http.in_flight.get(), 2);

        // A third clone is refused without reaching the inner service.
        let (_tx3, rx3) = oneshot::channel();
        let refused = svc.clone().oneshot(Request::new(rx3)).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()["retry-after"], "7");

        tx1.send(()).unwrap();
        assert_eq!(f1.await.unwrap().unwrap().status(), StatusCode::OK);
        let (tx4, rx4) = oneshot::channel();
        tx4.send(()).unwrap();
        assert_eq!(
            svc.clone()
                .oneshot(Request::new(rx4))
                .await
                .unwrap()
                .status(),
            StatusCode::OK
        );
        tx2.send(()).unwrap();
        f2.await.unwrap().unwrap();
        assert_eq!(metrics.http.in_flight.get(), 0);
    }

    #[tokio::test]
    async fn dropped_request_releases_its_slot() {
        let metrics = Arc::new(Metrics::new());
        let layer = AdmissionLayer::new(1, 1, metrics.clone());
        let svc = layer.layer(service_fn(answer_when_told));
        let (_tx, rx) = oneshot::channel();
        let pending = tokio::spawn(svc.clone().oneshot(Request::new(rx)));
        tokio::task::yield_now().await;
        assert_eq!(metrics.http.in_flight.get(), 1);
        pending.abort();
        let _ = pending.await;
        assert_eq!(metrics.http.in_flight.get(), 0);
        let (tx, rx) = oneshot::channel();
        tx.send(()).unwrap();
        assert_eq!(
            svc.oneshot(Request::new(rx)).await.unwrap().status(),
            StatusCode::OK
        );
    }
}
