//! One source's stream: subscribe, convert, queue; reconnect with capped
//! exponential backoff and jitter.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};
use txgate_config::Protocol;
use txgate_proto::results::{Outcome, Status as ResultStatus};
use txgate_screen::{Invalidation, Screen};

use super::protocol::{self, Message};
use super::reconnect::Reconnect;
use super::worker::queue;
use crate::metrics::Metrics;
pub use crate::metrics::sidecar::StreamEnd;
use crate::ops::health::{Readiness, SidecarLink};
use crate::screening::state::wall_now;

/// One source's settings.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// Its protocol.
    pub protocol: Protocol,
    /// `http://host:port`.
    pub url: String,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// PINGs that find a silent sidecar.
    pub keepalive: super::Keepalive,
    /// First reconnect delay.
    pub reconnect_initial: Duration,
    /// Longest reconnect delay.
    pub reconnect_max: Duration,
    /// Largest message accepted; a larger one breaks the stream.
    pub max_message_bytes: usize,
}

/// Where what a stream learns goes: the batch worker's queue, and the
/// screening state (to resolve a failed tx hash into what was forwarded).
#[derive(Debug, Clone)]
pub struct Sink {
    /// The batch worker's queue.
    pub queue: mpsc::Sender<Invalidation>,
    /// The screening state.
    pub screen: Arc<Screen>,
    /// Counted here.
    pub metrics: Arc<Metrics>,
    /// Where bans only this instance can learn go to the fleet (result
    /// failures of what it forwarded), when Redis is configured.
    pub share: Option<super::shared_bans::Share>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `delay` with ±25% jitter, from the clock's low bits (no RNG needed for
/// spreading a fleet's reconnects).
fn jittered(delay: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let spread = f64::from(nanos % 1000) / 1000.0 * 0.5 - 0.25;
    delay.mul_f64(1.0 + spread)
}

/// How reading one subscription ended.
#[derive(Debug)]
pub enum Ended {
    /// Asked to stop; every message received was queued.
    Stopped,
    /// The worker is gone (shutdown): nothing more can be applied.
    Closed,
    /// The sidecar ended the stream.
    Finished,
    /// The stream broke.
    Broken(Status),
}

/// Subscribes to one source and queues what it learns until `stop` is
/// cancelled, reconnecting whenever the stream ends or breaks. `index` is
/// the source's place in `/readyz`.
pub async fn run(
    settings: StreamSettings,
    sink: Sink,
    readiness: Arc<Readiness>,
    index: usize,
    stop: CancellationToken,
) {
    let m = &sink.metrics.sidecar;
    let protocol = settings.protocol.as_str();
    let mut retries = Reconnect::new(settings.reconnect_initial, settings.reconnect_max);
    loop {
        let endpoint = match super::endpoint(
            &settings.url,
            settings.connect_timeout,
            settings.keepalive,
        ) {
            Ok(endpoint) => endpoint,
            Err(e) => {
                tracing::error!(protocol, error = %e, "sidecar url is not usable; nothing learned from it");
                return;
            }
        };
        let subscribed = tokio::select! {
            () = stop.cancelled() => return,
            subscribed = async {
                let channel = endpoint.connect().await.map_err(|e| Status::unavailable(e.to_string()))?;
                protocol::subscribe(settings.protocol, channel, settings.max_message_bytes).await
            } => subscribed,
        };
        let end = match subscribed {
            Ok(messages) => {
                readiness.set_source(index, SidecarLink::Up, None, retries.log_open());
                retries.opened(std::time::Instant::now());
                // The marker is pulled only once every replayed
                // invalidation before it was queued.
                let marks = readiness.clone();
                let messages = messages.inspect(move |item| {
                    if matches!(item, Ok(Message::CaughtUp)) {
                        marks.set_caught_up(index);
                    }
                });
                match forward(messages, &sink, &stop).await {
                    Ended::Stopped => return,
                    Ended::Closed => {
                        // The worker is gone: nothing received is applied
                        // any more, so the link is not up.
                        tracing::error!(
                            protocol,
                            "invalidation worker gone; sidecar stream closed"
                        );
                        readiness.set_source(index, SidecarLink::Down, Some("closed"), true);
                        return;
                    }
                    Ended::Finished => StreamEnd::Ended,
                    Ended::Broken(status) => StreamEnd::broken(&status),
                }
            }
            Err(status) if status.code() == Code::Unimplemented => StreamEnd::Unimplemented,
            Err(status) => {
                tracing::debug!(protocol, code = ?status.code(), error = status.message(), "sidecar subscription failed");
                StreamEnd::Unreachable
            }
        };
        m.reconnects.inc();
        m.stream_ends[end as usize].inc();
        let retry = retries.ended(std::time::Instant::now());
        readiness.set_source(index, SidecarLink::Down, Some(end.as_str()), retry.log);
        if retry.log && retry.flaps > 1 {
            tracing::warn!(
                protocol,
                url = settings.url,
                reason = end.as_str(),
                flaps = retry.flaps,
                retry_ms = retry.delay.as_millis() as u64,
                "sidecar link flapping: ends soon after it opens; backing off (logged at the 2nd, 4th, 8th… in a row)"
            );
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(jittered(retry.delay)) => {}
        }
    }
}

/// Queues every message of one subscription. `stop` is checked only
/// between messages: a message read from the stream is always queued (or
/// the worker is gone), so nothing received is lost at shutdown.
pub async fn forward<S>(mut stream: S, sink: &Sink, stop: &CancellationToken) -> Ended
where
    S: Stream<Item = Result<Message, Status>> + Unpin,
{
    loop {
        let next = tokio::select! {
            biased;
            () = stop.cancelled() => return Ended::Stopped,
            next = stream.next() => next,
        };
        match next {
            Some(Ok(message)) => {
                if !enqueue(message, sink).await {
                    return Ended::Closed;
                }
            }
            Some(Err(status)) => return Ended::Broken(status),
            None => return Ended::Finished,
        }
    }
}

/// Handles one message; false when the worker is gone.
async fn enqueue(message: Message, sink: &Sink) -> bool {
    let m = &sink.metrics.sidecar;
    let invalidation = match message {
        Message::Invalidation {
            invalidation,
            observed_ms,
            replayed_age_ms,
            newer_schema,
        } => {
            m.received.inc();
            if let Some(version) = newer_schema {
                // Applied: protobuf keeps the fields this build knows, and
                // a newer sidecar keeps their meaning (SIDECAR_API.md).
                m.newer_schema.inc();
                let n = m.newer_schema.get();
                if n.is_power_of_two() {
                    tracing::warn!(
                        version,
                        speaks = txgate_proto::SCHEMA_VERSION,
                        count = n,
                        "invalidation of a newer schema version: applied by the fields this build knows (logged at the 1st, 2nd, 4th…)"
                    );
                }
            }
            if let Some(age) = replayed_age_ms {
                // A replay is not lag; one older than the ban TTL has
                // expired on the instances that learned it live.
                m.replayed.inc();
                if age >= sink.screen.settings().denied_ttl {
                    m.replayed_expired.inc();
                    return true;
                }
                return queue(invalidation, &sink.queue, &sink.metrics).await;
            }
            if let Some(at) = observed_ms {
                let lag = unix_ms().saturating_sub(at);
                m.lag.observe(lag as f64 / 1000.0);
            }
            invalidation
        }
        Message::Result(outcome) => match outcome {
            Outcome::Ignored(status) => {
                m.results.by_status[status.index()].inc();
                return true;
            }
            Outcome::Malformed => {
                m.results.by_status[ResultStatus::AssertionFailed.index()].inc();
                m.results.malformed.inc();
                // Logged on the 1st, 2nd, 4th, 8th… only: a broken sidecar
                // at stream rate must not flood the log.
                let n = m.results.malformed.get();
                if n.is_power_of_two() {
                    tracing::warn!(
                        malformed = n,
                        "assertion failure without a 32-byte tx hash in the result stream"
                    );
                }
                return true;
            }
            Outcome::AssertionFailed(hash) => {
                m.results.by_status[ResultStatus::AssertionFailed.index()].inc();
                let now = sink.screen.millis(tokio::time::Instant::now().into_std());
                match sink.screen.forwarded(&hash, now) {
                    Some(forward) => {
                        m.results.known.inc();
                        let fp = forward.fingerprint;
                        let invalidation = Invalidation {
                            fingerprint: fp.hash,
                            target: fp.target,
                            selector: fp.selector,
                            assertion: None,
                            tx_hash: Some(hash),
                            sender: Some(forward.sender),
                            started: wall_now(),
                        };
                        // The result stream repeats a failure at each
                        // block-building iteration while the transaction
                        // stays in the pool: the fleet hears it once.
                        if let Some(share) = &sink.share
                            && !sink.screen.already_learned(&invalidation, now)
                        {
                            share.offer(&invalidation);
                        }
                        invalidation
                    }
                    None => {
                        // Not forwarded by this instance (or forgotten):
                        // refuse the hash itself at once.
                        m.results.unknown.inc();
                        sink.screen.fail_hash(hash, now);
                        return true;
                    }
                }
            }
        },
        // Marked by the stream's reader (see `run`), which knows the source.
        Message::CaughtUp => return true,
        Message::Malformed(e) => {
            m.received.inc();
            m.malformed.inc();
            // Logged on the 1st, 2nd, 4th, 8th… only, like the results.
            let n = m.malformed.get();
            if n.is_power_of_two() {
                tracing::warn!(error = %e, count = n, "malformed invalidation from the sidecar, not applied (logged at the 1st, 2nd, 4th…)");
            }
            return true;
        }
    };
    queue(invalidation, &sink.queue, &sink.metrics).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use txgate_proto::{invalidation_message, to_invalidation, v1};
    use txgate_screen::{AssertionKey, Fingerprint, ScreenSettings};

    #[test]
    fn jitter_stays_within_a_quarter() {
        for _ in 0..100 {
            let d = jittered(Duration::from_millis(1000));
            assert!(d >= Duration::from_millis(750) && d <= Duration::from_millis(1250));
        }
    }

    fn message(i: u8) -> Message {
        Message::Invalidation {
            invalidation: to_invalidation(&wire(i), wall_now()).unwrap_or_else(|e| panic!("{e}")),
            observed_ms: None,
            replayed_age_ms: None,
            newer_schema: None,
        }
    }

    fn sink(queue: mpsc::Sender<Invalidation>, metrics: Arc<Metrics>) -> Sink {
        Sink {
            queue,
            screen: Arc::new(Screen::new(
                ScreenSettings::default(),
                std::time::Instant::now(),
            )),
            metrics,
            share: None,
        }
    }

    fn wire(i: u8) -> v1::Invalidation {
        let fp = Fingerprint::from_parts(
            alloy_primitives::Address::repeat_byte(i),
            &[1, 2, 3, 4],
            alloy_primitives::U256::ZERO,
            21_000,
        );
        let key = AssertionKey {
            id: alloy_primitives::B256::repeat_byte(7),
            version: 1,
        };
        invalidation_message(&fp, key, None, None, 1, 0)
    }

    /// Defect: at shutdown the stream task was aborted while it could be
    /// waiting for room in a full queue, and the message it held was lost.
    /// Stopped now, it queues what it holds first.
    #[tokio::test]
    async fn a_stop_never_loses_a_received_message() {
        let metrics = Arc::new(Metrics::new());
        let (queue, mut rx) = mpsc::channel(1);
        let sink = sink(queue, metrics.clone());
        let stop = CancellationToken::new();
        let messages: Vec<Result<Message, Status>> = (0..10).map(|i| Ok(message(i))).collect();
        let drained = {
            let forwarding = forward(futures_util::stream::iter(messages), &sink, &stop);
            tokio::pin!(forwarding);
            // The first message fills the queue; the second waits for room.
            assert!(
                tokio::time::timeout(Duration::from_millis(50), &mut forwarding)
                    .await
                    .is_err()
            );
            assert_eq!(metrics.sidecar.received.get(), 2);
            // Shutdown: stop reading. The worker drains meanwhile.
            stop.cancel();
            let drained = tokio::spawn(async move {
                let mut n = 0;
                while rx.recv().await.is_some() {
                    n += 1;
                }
                n
            });
            assert!(matches!(forwarding.await, Ended::Stopped));
            drained
        };
        drop(sink);
        let applied = drained.await.unwrap_or(0);
        assert_eq!(
            applied as u64,
            metrics.sidecar.received.get(),
            "every message received was queued"
        );
        assert_eq!(applied, 2, "no message read after the stop");
    }

    /// A result names only the hash: an assertion failure of a hash this
    /// instance forwarded is queued as an invalidation of its fingerprint
    /// and sender; of a hash it did not forward, the hash is refused at
    /// once; every result is counted by status.
    #[tokio::test]
    async fn results_are_resolved_through_what_was_forwarded() {
        use crate::screening::tests::raw;
        use txgate_proto::results::{Outcome, Status as S};
        let metrics = Arc::new(Metrics::new());
        let (queue, mut rx) = mpsc::channel(8);
        let sink = sink(queue, metrics.clone());
        let now = sink.screen.millis(tokio::time::Instant::now().into_std());
        let forwarded = sink
            .screen
            .screen(&raw(1, 0, &[0xde, 0xad, 0xbe, 0xef, 1]), now)
            .unwrap_or_else(|e| panic!("{e:?}"));
        let unknown = alloy_primitives::B256::repeat_byte(0x42);
        let results = vec![
            Ok(Message::Result(Outcome::Ignored(S::Success))),
            Ok(Message::Result(Outcome::Ignored(S::Unknown))),
            Ok(Message::Result(Outcome::AssertionFailed(forwarded.hash))),
            Ok(Message::Result(Outcome::AssertionFailed(unknown))),
        ];
        let stop = CancellationToken::new();
        assert!(matches!(
            forward(futures_util::stream::iter(results), &sink, &stop).await,
            Ended::Finished
        ));
        let inv = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(inv.fingerprint, forwarded.fingerprint.unwrap_or_default());
        assert_eq!(
            (inv.tx_hash, inv.sender),
            (Some(forwarded.hash), Some(forwarded.sender))
        );
        assert!(rx.try_recv().is_err(), "the unknown hash is not queued");
        assert!(
            !sink.screen.fail_hash(unknown, now),
            "it is refused already"
        );
        let r = &metrics.sidecar.results;
        assert_eq!(r.by_status[S::Success.index()].get(), 1);
        assert_eq!(r.by_status[S::Unknown.index()].get(), 1);
        assert_eq!(r.by_status[S::AssertionFailed.index()].get(), 2);
        assert_eq!((r.known.get(), r.unknown.get()), (1, 1));
    }

    /// A failure the result stream repeats (once per block-building
    /// iteration while the transaction stays in the pool) is shared with
    /// the fleet once, not once per copy; each copy is still queued (the
    /// engine counts the repeats as duplicates).
    #[tokio::test]
    async fn a_repeated_result_is_shared_with_the_fleet_once() {
        use crate::screening::tests::raw;
        use txgate_proto::results::Outcome;
        let metrics = Arc::new(Metrics::new());
        let (queue, mut rx) = mpsc::channel(8);
        let (share, mut outbox) = crate::sidecar::shared_bans::share(metrics.clone());
        let sink = Sink {
            share: Some(share),
            ..sink(queue, metrics.clone())
        };
        let now = sink.screen.millis(tokio::time::Instant::now().into_std());
        let forwarded = sink
            .screen
            .screen(&raw(2, 0, &[0xde, 0xad, 0xbe, 0xef, 2]), now)
            .unwrap_or_else(|e| panic!("{e:?}"));
        let failed = || Ok(Message::Result(Outcome::AssertionFailed(forwarded.hash)));
        let stop = CancellationToken::new();
        forward(futures_util::stream::iter(vec![failed()]), &sink, &stop).await;
        // The batch worker applies it.
        let first = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
        sink.screen.apply(&[first], now, wall_now());
        forward(
            futures_util::stream::iter(vec![failed(), failed()]),
            &sink,
            &stop,
        )
        .await;
        assert!(outbox.try_recv().is_ok());
        assert!(outbox.try_recv().is_err(), "a repeat was shared again");
        assert_eq!((rx.try_recv().is_ok(), rx.try_recv().is_ok()), (true, true));
    }
}
