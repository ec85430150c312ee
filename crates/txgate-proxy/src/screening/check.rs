//! [`Check`]: one screening stage as a tower middleware.
//!
//! A rejection is a [`ResponseFuture`] variant that never calls the inner
//! service, so nothing below a refusing stage runs. The layers hold no
//! state (the screening state travels in the [`Submission`]), so the whole
//! stack is zero-sized and cloning it per call costs nothing.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::{Layer, Service};
use txgate_screen::Rejection;
use txgate_screen::stage::Stage;

use super::Submission;

/// Builds [`Check`] services for stage `S`.
#[derive(Debug)]
pub struct CheckLayer<S> {
    _stage: PhantomData<fn() -> S>,
}

impl<S> CheckLayer<S> {
    /// A layer for stage `S`.
    pub const fn new() -> Self {
        CheckLayer {
            _stage: PhantomData,
        }
    }
}

impl<S> Default for CheckLayer<S> {
    fn default() -> Self {
        CheckLayer::new()
    }
}

impl<S> Clone for CheckLayer<S> {
    fn clone(&self) -> Self {
        CheckLayer::new()
    }
}

impl<S, I> Layer<I> for CheckLayer<S> {
    type Service = Check<S, I>;

    fn layer(&self, inner: I) -> Check<S, I> {
        Check {
            inner,
            _stage: PhantomData,
        }
    }
}

/// Runs stage `S`, then the inner service if it passed.
#[derive(Debug)]
pub struct Check<S, I> {
    inner: I,
    _stage: PhantomData<fn() -> S>,
}

impl<S, I: Clone> Clone for Check<S, I> {
    fn clone(&self) -> Self {
        Check {
            inner: self.inner.clone(),
            _stage: PhantomData,
        }
    }
}

impl<'a, S, I, R> Service<Submission<'a>> for Check<S, I>
where
    S: Stage,
    I: Service<Submission<'a>, Response = R, Error = Rejection>,
{
    type Response = R;
    type Error = Rejection;
    type Future = ResponseFuture<I::Future, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut submission: Submission<'a>) -> Self::Future {
        let checked = S::check(submission.screen, &mut submission.candidate);
        submission.laps.lap();
        match checked {
            Ok(()) => ResponseFuture::Inner {
                future: self.inner.call(submission),
            },
            Err(rejection) => ResponseFuture::Rejected {
                rejection: std::future::ready(Err(rejection)),
            },
        }
    }
}

pin_project! {
    /// The inner service's future (`future`), or the stage's rejection,
    /// ready at once (`rejection`).
    #[allow(missing_docs)]
    #[project = Projected]
    #[derive(Debug)]
    pub enum ResponseFuture<F, R> {
        /// The stage passed.
        Inner {
            #[pin]
            future: F,
        },
        /// The stage refused.
        Rejected {
            rejection: std::future::Ready<Result<R, Rejection>>,
        },
    }
}

impl<F, R> Future for ResponseFuture<F, R>
where
    F: Future<Output = Result<R, Rejection>>,
{
    type Output = Result<R, Rejection>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Projected::Inner { future } => future.poll(cx),
            Projected::Rejected { rejection } => Pin::new(rejection).poll(cx),
        }
    }
}
