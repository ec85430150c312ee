//! Holding the refusals of a client that keeps being refused
//! (`[screen.pacing]`; the policy and the table of streaks are
//! `txgate_limits::pacing`).
//!
//! The RPC service marks each answer with what it did to its client's
//! streak ([`Pace`], in the response's extensions): screening refusals
//! lengthen it, a submission the node took (answered with a result) ends
//! it. [`Paced`], one per connection, reads the mark once the answer is
//! ready, with the request's client (after client identity: behind a
//! trusted balancer, the address it forwards). It sits outside admission
//! and the per-client limits, so a held answer takes no in-flight slot: it
//! holds only its connection (and, over HTTP/2, its stream), for at most
//! `max_hold_ms`, and at most `max_held` answers are held at once across
//! the process. When the drain begins, every hold ends and none starts.
//! A WebSocket message's streak is counted where it is checked
//! (`rpc::websocket::check`) and its answer held by its session, once
//! ready, for what is left of the hold; the upkeep task sweeps the
//! streaks.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Request, Response};
use tower::Service;
use txgate_config::PacingConfig;
use txgate_limits::{Pacing, Streaks};

use txgate_jsonrpc::encode::{self, UpstreamBatch};

use crate::metrics::PacingMetrics;

/// An answer's mark, in its extensions: what it does to its client's
/// streak, read (and acted on) by [`Paced`] once the answer is ready.
#[derive(Debug, Clone)]
pub(crate) struct PaceMark {
    pub(crate) pace: Pace,
    pub(crate) client: IpAddr,
    pub(crate) pacer: Arc<Pacer>,
}

/// What an answer did to its client's refusal streak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// This many submissions were refused by screening, none taken.
    Refused(u32),
    /// The node took a screened submission: the streak ends.
    Cleared,
    /// A batch in which the node took a submission and screening refused
    /// this many: the streak starts over from them (one submission taken
    /// does not wipe a batch of refusals).
    Restarted(u32),
}

/// See the module docs.
pub(crate) struct Pacer {
    pacing: Pacing,
    streaks: Streaks,
    ipv6_prefix: u8,
    max_held: usize,
    held: AtomicUsize,
    /// Cancelled when the drain begins: held answers go at once, and no
    /// new answer is held.
    draining: tokio_util::sync::CancellationToken,
    /// The process's start, for the streaks' clock.
    epoch: std::time::Instant,
    metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("pacing", &self.pacing)
            .field("max_held", &self.max_held)
            .finish_non_exhaustive()
    }
}

impl Pacer {
    /// The pacer `config` describes; `None` when pacing is off.
    pub(crate) fn new(
        config: &PacingConfig,
        ipv6_prefix: u8,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Option<Arc<Pacer>> {
        config.enabled.then(|| {
            Arc::new(Pacer {
                pacing: Pacing::new(config.after, config.initial_hold, config.max_hold),
                streaks: Streaks::new(config.max_clients, config.window),
                ipv6_prefix,
                max_held: config.max_held,
                held: AtomicUsize::new(0),
                draining: tokio_util::sync::CancellationToken::new(),
                epoch: std::time::Instant::now(),
                metrics,
            })
        })
    }

    fn metrics(&self) -> &PacingMetrics {
        &self.metrics.pacing
    }

    /// The drain has begun: every held answer goes now, and none is held
    /// from here on (the grace period is for calls, not for holds).
    pub(crate) fn stop_holding(&self) {
        self.draining.cancel();
    }

    /// Whether some client has a streak (one atomic load).
    pub(crate) fn has_streaks(&self) -> bool {
        !self.streaks.is_empty()
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records `pace` in `client`'s streak; the streak after it, or `None`
    /// when it ended or the client is not tracked.
    pub(crate) fn note(&self, client: IpAddr, pace: Pace) -> Option<u32> {
        let key = txgate_limits::ip_key(client, self.ipv6_prefix);
        match pace {
            Pace::Cleared => {
                // While no client was refused within the window: one
                // atomic load.
                if !self.streaks.is_empty() {
                    self.streaks.cleared(key);
                }
                None
            }
            Pace::Restarted(n) => {
                self.streaks.cleared(key);
                self.note(client, Pace::Refused(n))
            }
            Pace::Refused(n) => match self.streaks.refused(key, n, self.now()) {
                Ok(streak) => Some(streak),
                Err(txgate_limits::Untracked) => {
                    self.metrics().untracked.inc();
                    None
                }
            },
        }
    }

    /// Records `pace` in `client`'s streak; `Some` when the answer is to
    /// be held for the returned hold.
    pub(crate) fn answer(self: &Arc<Self>, client: IpAddr, pace: Pace) -> Option<Hold> {
        let duration = self.pacing.hold(self.note(client, pace)?)?;
        self.hold_for(duration)
    }

    /// Records `pace` in `client`'s streak; when the answer is due a hold,
    /// the time the hold ends, counted from now. For an answer not ready
    /// yet (a WebSocket message waiting for the node): its place among
    /// `max_held` is taken only once it is, for what is left
    /// ([`Pacer::hold_until`]).
    pub(crate) fn due(&self, client: IpAddr, pace: Pace) -> Option<tokio::time::Instant> {
        let duration = self.pacing.hold(self.note(client, pace)?)?;
        Some(tokio::time::Instant::now() + duration)
    }

    /// A hold until `end`, if `end` is still ahead and a place among
    /// `max_held` is free (else the answer goes at once, counted).
    pub(crate) fn hold_until(self: &Arc<Self>, end: tokio::time::Instant) -> Option<Hold> {
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        self.hold_for(left)
    }

    /// A hold of `duration`, if a place among `max_held` is free and the
    /// drain has not begun.
    fn hold_for(self: &Arc<Self>, duration: Duration) -> Option<Hold> {
        if self.draining.is_cancelled() {
            return None;
        }
        if self.held.fetch_add(1, Ordering::Relaxed) >= self.max_held {
            self.held.fetch_sub(1, Ordering::Relaxed);
            self.metrics().over_bound.inc();
            return None;
        }
        let metrics = self.metrics();
        metrics.held.inc();
        metrics.holding.inc();
        metrics
            .hold_micros
            .inc_by(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX));
        Some(Hold {
            sleep: Box::pin(tokio::time::sleep(duration)),
            stopped: Box::pin(self.draining.clone().cancelled_owned()),
            _place: Place(self.clone()),
        })
    }

    /// Background upkeep until `stop`: every 100 ms, one shard of the
    /// streaks swept (the whole table every 6.4 s, so ended streaks leave
    /// and the table empties after an attack), and the clients gauge set.
    pub(crate) async fn upkeep(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.streaks.sweep_next(self.now());
            self.metrics().clients.set(self.streaks.len() as i64);
        }
    }
}

/// An answer's hold: a timer, and its place under `max_held` until dropped
/// (elapsed, or the connection gone).
pub(crate) struct Hold {
    pub(crate) sleep: Pin<Box<tokio::time::Sleep>>,
    /// Ends the hold early when the drain begins.
    stopped: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    _place: Place,
}

impl Hold {
    /// Ready when the hold is over: its time is up, or the drain began.
    pub(crate) fn poll_over(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.stopped.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        self.sleep.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").finish_non_exhaustive()
    }
}

struct Place(Arc<Pacer>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::Relaxed);
        self.0.metrics().holding.dec();
    }
}

/// A batch's mark: its client's streak grows by the submissions screening
/// refused; if the node took one of its submissions, the streak starts
/// over from those refusals (ends, when there were none).
pub(crate) fn batch_pace(refused: u32, accepted: bool) -> Option<Pace> {
    match (accepted, refused) {
        (true, 0) => Some(Pace::Cleared),
        (true, n) => Some(Pace::Restarted(n)),
        (false, 0) => None,
        (false, n) => Some(Pace::Refused(n)),
    }
}

/// Whether the node's answer to one call is a result, not an error: a
/// scan for an `"error"` member first (an accepted submission's answer, a
/// hash, has none, and has a `"result"`), a parse only when the scan finds
/// one.
pub(crate) fn answered_with_result(body: &[u8]) -> bool {
    if memchr::memmem::find(body, b"\"error\"").is_none() {
        return memchr::memmem::find(body, b"\"result\"").is_some();
    }
    matches!(
        encode::parse_upstream_batch(body),
        Some(UpstreamBatch::Whole(response)) if response.error().is_none()
    )
}

/// A connection's service with its answers paced (see the module docs):
/// an answer marked with a [`PaceMark`] is held when its client's streak
/// calls for it. Unmarked answers (every answer while pacing is off) pass
/// with one look at their extensions.
#[derive(Debug, Clone)]
pub(crate) struct Paced<S> {
    inner: S,
}

impl<S> Paced<S> {
    /// `inner`, paced (cloned for each connection; it holds no state).
    pub(crate) fn new(inner: S) -> Paced<S> {
        Paced { inner }
    }
}

impl<S, B, RB> Service<Request<B>> for Paced<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = PacedFuture<S::Future, RB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        PacedFuture::Answering {
            inner: self.inner.call(req),
        }
    }
}

pin_project_lite::pin_project! {
    /// An answer, then its hold if it is due one. The inner future (and
    /// with it the in-flight slot it holds) is dropped as soon as it has
    /// answered, before any hold.
    #[project = Proj]
    pub(crate) enum PacedFuture<F, RB> {
        Answering { #[pin] inner: F },
        Holding { hold: Hold, response: Option<Response<RB>> },
        Done,
    }
}

impl<F, RB, E> Future for PacedFuture<F, RB>
where
    F: Future<Output = Result<Response<RB>, E>>,
{
    type Output = Result<Response<RB>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                Proj::Answering { inner } => {
                    let mut answered = ready!(inner.poll(cx));
                    let due = match &mut answered {
                        Ok(response) => response
                            .extensions_mut()
                            .remove::<PaceMark>()
                            .and_then(|mark| mark.pacer.answer(mark.client, mark.pace)),
                        Err(_) => None,
                    };
                    match (due, answered) {
                        (Some(hold), Ok(response)) => self.set(PacedFuture::Holding {
                            hold,
                            response: Some(response),
                        }),
                        (_, answered) => {
                            self.set(PacedFuture::Done);
                            return Poll::Ready(answered);
                        }
                    }
                }
                Proj::Holding { hold, response } => {
                    ready!(hold.poll_over(cx));
                    let response = response.take();
                    self.set(PacedFuture::Done);
                    if let Some(response) = response {
                        return Poll::Ready(Ok(response));
                    }
                }
                Proj::Done => unreachable!("PacedFuture polled after completion"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
    const TWO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));

    fn pacer(after: u32, max_held: usize, max_clients: usize) -> Arc<Pacer> {
        Pacer::new(
            &PacingConfig {
                enabled: true,
                after,
                initial_hold: Duration::from_millis(1),
                max_hold: Duration::from_millis(8),
                max_held,
                max_clients,
                window: Duration::from_secs(60),
            },
            64,
            Arc::new(crate::metrics::Metrics::new()),
        )
        .unwrap()
    }

    #[test]
    fn off_builds_nothing() {
        let config = PacingConfig {
            enabled: false,
            ..PacingConfig::default()
        };
        let metrics = Arc::new(crate::metrics::Metrics::new());
        assert!(Pacer::new(&config, 64, metrics).is_none());
    }

    /// A WebSocket message's hold: due at its check, its place taken
    /// only when its answer is ready, for what is left, and only then
    /// counted as held.
    #[tokio::test(start_paused = true)]
    async fn a_due_hold_takes_its_place_when_the_answer_is_ready() {
        let p = pacer(1, 1, 1_000);
        assert!(p.due(ONE, Pace::Refused(1)).is_none(), "first refusal");
        let end = p.due(ONE, Pace::Refused(1)).expect("second refusal due");
        let held = || p.metrics().held.get();
        assert_eq!(held(), 0, "nothing held while the node works");
        // Ready in time: held for what is left, the one place taken.
        tokio::time::advance(Duration::from_micros(400)).await;
        let hold = p.hold_until(end).expect("held");
        assert_eq!((held(), p.metrics().holding.get()), (1, 1));
        assert!(hold.sleep.deadline() <= end);
        // The place is taken: another ready answer goes at once, counted.
        let later = p.due(ONE, Pace::Refused(1)).expect("third refusal due");
        assert!(p.hold_until(later).is_none(), "over max_held");
        assert_eq!(p.metrics().over_bound.get(), 1);
        drop(hold);
        assert_eq!(p.metrics().holding.get(), 0);
        // Ready after the hold ended: not held, not counted.
        tokio::time::advance(Duration::from_millis(20)).await;
        assert!(p.hold_until(later).is_none());
        assert_eq!(held(), 1);
    }

    #[tokio::test]
    async fn a_streak_is_held_once_past_the_threshold_and_ended_by_a_clear() {
        let p = pacer(2, 16, 1_000);
        assert!(p.answer(ONE, Pace::Refused(1)).is_none());
        assert!(p.answer(ONE, Pace::Refused(1)).is_none());
        assert!(p.answer(TWO, Pace::Refused(1)).is_none(), "its own streak");
        let hold = p.answer(ONE, Pace::Refused(1)).expect("third refusal held");
        assert_eq!(p.held.load(Ordering::Relaxed), 1);
        assert_eq!(p.metrics().holding.get(), 1);
        assert_eq!(p.streaks.len(), 2);
        drop(hold);
        assert_eq!(p.held.load(Ordering::Relaxed), 0, "the place comes back");
        assert_eq!(p.metrics().holding.get(), 0);
        assert!(p.answer(ONE, Pace::Cleared).is_none());
        assert!(
            p.answer(ONE, Pace::Refused(1)).is_none(),
            "a submission taken ended the streak"
        );
        // A batch's refusals count one each.
        assert!(p.answer(ONE, Pace::Refused(5)).is_some());
        // A batch with a submission taken starts over from its refusals.
        assert!(p.answer(ONE, Pace::Restarted(2)).is_none());
        assert_eq!(p.note(ONE, Pace::Refused(0)), Some(2), "2, not 8");
        assert_eq!(p.metrics().held.get(), 2);
        assert_eq!(p.metrics().hold_micros.get(), 1_000 + 8_000);
    }

    #[test]
    fn only_a_result_is_an_accepted_submission() {
        let hash = br#"{"jsonrpc":"2.0","id":1,"result":"0x6c5f"}"#;
        assert!(answered_with_result(hash));
        let refused =
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"insufficient funds"}}"#;
        assert!(!answered_with_result(refused));
        // The word in a result is not an error member.
        let quoted = br#"{"jsonrpc":"2.0","id":1,"result":"\"error\""}"#;
        assert!(answered_with_result(quoted));
        assert!(!answered_with_result(b"\"error\" but not JSON"));
        assert!(!answered_with_result(b"OK"), "a 2xx that is not JSON-RPC");
    }

    #[test]
    fn a_batch_with_a_submission_taken_starts_over_from_its_refusals() {
        assert_eq!(batch_pace(2, false), Some(Pace::Refused(2)));
        assert_eq!(batch_pace(2, true), Some(Pace::Restarted(2)));
        assert_eq!(batch_pace(0, true), Some(Pace::Cleared));
        assert_eq!(batch_pace(0, false), None);
    }

    #[tokio::test]
    async fn past_the_bounds_answers_at_once_and_counts() {
        let p = pacer(0, 2, 1_000);
        let a = p.answer(ONE, Pace::Refused(1)).unwrap();
        let _b = p.answer(ONE, Pace::Refused(1)).unwrap();
        assert!(
            p.answer(ONE, Pace::Refused(1)).is_none(),
            "two held already"
        );
        assert_eq!(p.metrics().over_bound.get(), 1);
        assert_eq!(
            p.held.load(Ordering::Relaxed),
            2,
            "the refused place given back"
        );
        drop(a);
        assert!(p.answer(ONE, Pace::Refused(1)).is_some(), "room again");

        // A table of one client per shard: a client it has no room for is
        // not paced, and counted.
        let p = pacer(0, 16, 1);
        let _held = p.answer(ONE, Pace::Refused(1)).unwrap();
        assert!(p.answer(TWO, Pace::Refused(1)).is_none());
        assert_eq!(p.metrics().untracked.get(), 1);
    }
}
