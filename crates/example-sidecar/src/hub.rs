//! The sidecar's state: what it judged, the stream of invalidations to its
//! subscribers, and the stream of results ([`crate::results`]).
//!
//! The hub knows nothing of the node, of HTTP or of any one protocol: the
//! watcher ([`crate::watch`]) and the admin endpoint ([`crate::admin`])
//! feed it; the gRPC services read it and put each invalidation in their
//! own protocol's form (`txgate.sidecar.v1` in [`crate::service`],
//! `rpcproxy.v1` in [`crate::rpcproxy`]), so every subscriber of either
//! protocol gets the same invalidations.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use alloy_primitives::{Address, B256};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::{Stream, StreamExt};
use txgate_screen::{AssertionKey, Fingerprint};

use crate::config::Config;
use crate::judged::Judged;
use crate::results::Results;

/// How often a paced sender looks again for room in the stream buffer.
const ROOM_POLL: Duration = Duration::from_millis(1);

/// One invalidation, as every protocol needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Invalidated {
    /// The fingerprint banned, with its parts.
    pub(crate) fp: Fingerprint,
    /// The assertion it failed.
    pub(crate) assertion: AssertionKey,
    /// The failing transaction, when known.
    pub(crate) tx_hash: Option<B256>,
    /// Its sender, when known.
    pub(crate) sender: Option<Address>,
    /// The block it failed in (0: injected).
    pub(crate) block: u64,
    /// When the sidecar learned it.
    pub(crate) at: SystemTime,
}

/// Shared state.
#[derive(Debug)]
pub(crate) struct Hub {
    /// The configuration (assertions and limits).
    pub(crate) config: Config,
    /// Every executed transaction's result (`sidecar.transport.v1`).
    pub(crate) results: Results,
    stream: broadcast::Sender<Invalidated>,
    /// Invalidations buffered per subscriber, as configured.
    capacity: usize,
    /// Fingerprints judged invalid, with their assertions.
    judged: Mutex<Judged>,
    /// The live invalidations, oldest first, for replay to a new
    /// subscriber: bounded by `judged_max`, each kept `judged_ttl_ms`.
    live: Mutex<VecDeque<(Instant, Invalidated)>>,
    /// Invalidations recorded since the start.
    invalidated: AtomicU64,
}

/// What a subscriber receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// Learned before the subscription, with its age.
    Replayed(Invalidated, Duration),
    /// The replay is over.
    CaughtUp,
    /// Learned now.
    Live(Invalidated),
}

impl Hub {
    /// A hub with nothing judged and no subscriber, bounded as `config`
    /// says (`judged_ttl_ms`, `judged_max`, `stream_buffer`).
    pub(crate) fn new(config: Config) -> Hub {
        let capacity = config.stream_buffer.max(1);
        let (stream, _) = broadcast::channel(capacity);
        let judged = Judged::new(config.judged_ttl(), config.judged_max);
        Hub {
            config,
            results: Results::default(),
            stream,
            capacity,
            judged: Mutex::new(judged),
            live: Mutex::new(VecDeque::new()),
            invalidated: AtomicU64::new(0),
        }
    }

    /// The hub's state in the Prometheus text format (`/metrics`), so the
    /// sidecar can be scraped beside txgate.
    pub(crate) fn metrics(&self) -> String {
        let live = self.live.lock().map_or(0, |live| live.len());
        let judged = self.judged.lock().map_or(0, |judged| judged.len());
        let rows: [(&str, &str, &str, u64); 5] = [
            (
                "example_sidecar_invalidations_total",
                "counter",
                "Invalidations recorded and streamed",
                self.invalidated.load(Ordering::Relaxed),
            ),
            (
                "example_sidecar_subscribers",
                "gauge",
                "Invalidation stream subscribers (every protocol)",
                self.stream.receiver_count() as u64,
            ),
            (
                "example_sidecar_live_invalidations",
                "gauge",
                "Invalidations a new subscriber is replayed",
                live as u64,
            ),
            (
                "example_sidecar_judged_fingerprints",
                "gauge",
                "Fingerprints judged and remembered",
                judged as u64,
            ),
            (
                "example_sidecar_latest_block",
                "gauge",
                "The newest block whose results were published",
                self.results.latest_block(),
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
        out
    }

    /// Records and streams one invalidation at once (a subscriber whose
    /// buffer is full loses its oldest); returns the subscribers reached.
    pub(crate) fn invalidate(
        &self,
        fp: &Fingerprint,
        assertion: AssertionKey,
        tx_hash: Option<B256>,
        sender: Option<Address>,
        block: u64,
    ) -> usize {
        let now = Instant::now();
        if let Ok(mut judged) = self.judged.lock() {
            judged.record(fp.hash, assertion, now);
        }
        let event = Invalidated {
            fp: *fp,
            assertion,
            tx_hash,
            sender,
            block,
            at: SystemTime::now(),
        };
        if let Ok(mut live) = self.live.lock() {
            self.prune(&mut live, now);
            if live.len() >= self.config.judged_max.max(1) {
                live.pop_front();
            }
            live.push_back((now, event));
        }
        self.invalidated.fetch_add(1, Ordering::Relaxed);
        self.stream.send(event).unwrap_or(0)
    }

    /// Waits until every subscriber has room for another invalidation, so
    /// that a burst (a synthetic storm) is not lost to a subscriber that is
    /// merely slower than the burst: when the buffer is full, waits until
    /// it is half drained. A subscriber that makes no progress for
    /// `patience` is given up on (it then loses the oldest, logged, as with
    /// any overrun); returns whether room was made.
    pub(crate) async fn room(&self, patience: Duration) -> bool {
        if self.stream.len() < self.capacity {
            return true;
        }
        let low = self.capacity / 2;
        let mut queued = self.stream.len();
        let mut progress = Instant::now();
        loop {
            tokio::time::sleep(ROOM_POLL).await;
            let now = self.stream.len();
            if now <= low {
                return true;
            }
            if now < queued {
                queued = now;
                progress = Instant::now();
            } else if progress.elapsed() >= patience {
                tracing::warn!(
                    queued = now,
                    patience_ms = patience.as_millis() as u64,
                    "a subscriber made no progress; sending on regardless"
                );
                return false;
            }
        }
    }

    /// The assertions `fp` was judged to violate, unless it never was or
    /// the judgement expired.
    pub(crate) fn verdict(&self, fp: &B256) -> Option<Vec<AssertionKey>> {
        self.judged.lock().ok()?.get(fp, Instant::now())
    }

    /// Drops the live invalidations older than `judged_ttl_ms`.
    fn prune(&self, live: &mut VecDeque<(Instant, Invalidated)>, now: Instant) {
        let ttl = self.config.judged_ttl();
        while live
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= ttl)
        {
            live.pop_front();
        }
    }

    /// A new subscriber's stream: with `replay`, every live invalidation
    /// (oldest first, with its age), then [`Event::CaughtUp`], then every
    /// invalidation from now on. The live stream is joined before the
    /// replay is taken, so nothing learned in between is missed (it may
    /// come twice: a ban applied twice is one ban).
    pub(crate) fn subscribe_events(
        &self,
        replay: bool,
    ) -> impl Stream<Item = Event> + Send + 'static {
        let live_stream = self.subscribe().map(Event::Live);
        let replayed: Vec<Event> = if replay {
            let now = Instant::now();
            let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
            self.prune(&mut live, now);
            live.iter()
                .map(|(at, event)| Event::Replayed(*event, now.duration_since(*at)))
                .chain(std::iter::once(Event::CaughtUp))
                .collect()
        } else {
            Vec::new()
        };
        tokio_stream::iter(replayed).chain(live_stream)
    }

    /// A new subscriber's stream of every invalidation from now on. A
    /// subscriber more than `stream_buffer` behind loses the oldest; the
    /// loss is logged with its count and the stream goes on.
    pub(crate) fn subscribe(&self) -> impl Stream<Item = Invalidated> + Send + 'static {
        BroadcastStream::new(self.stream.subscribe()).filter_map(|item| match item {
            Ok(message) => Some(message),
            Err(BroadcastStreamRecvError::Lagged(n)) => {
                tracing::warn!(lost = n, "subscriber too slow; oldest invalidations lost");
                None
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testutil::Logs;

    fn fp(i: u64) -> Fingerprint {
        Fingerprint::from_parts(
            Address::repeat_byte(7),
            &i.to_be_bytes(),
            Default::default(),
            21_000,
        )
    }

    fn key() -> AssertionKey {
        AssertionKey {
            id: B256::repeat_byte(0xa1),
            version: 1,
        }
    }

    fn hub(extra: &str) -> Hub {
        Hub::new(Config::parse(extra).expect("config"))
    }

    #[test]
    fn metrics_count_what_the_hub_did() {
        let h = hub("");
        let _subscriber = h.subscribe();
        h.invalidate(&fp(1), key(), None, None, 7);
        h.invalidate(&fp(2), key(), None, None, 7);
        let text = h.metrics();
        assert!(
            text.contains("example_sidecar_invalidations_total 2\n"),
            "{text}"
        );
        assert!(text.contains("example_sidecar_subscribers 1\n"), "{text}");
        assert!(
            text.contains("example_sidecar_live_invalidations 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE example_sidecar_latest_block gauge\n"),
            "{text}"
        );
    }

    #[test]
    fn judged_never_shrinks_the_hub_holds_at_most_judged_max() {
        let hub = hub("judged_max = 50\n");
        for i in 0..1_000 {
            hub.invalidate(&fp(i), key(), None, None, 0);
        }
        assert_eq!(hub.judged.lock().expect("lock").len(), 50);
        assert_eq!(hub.verdict(&fp(0).hash), None, "the oldest went first");
        assert_eq!(hub.verdict(&fp(999).hash), Some(vec![key()]));
    }

    #[test]
    fn judged_never_shrinks_the_hub_forgets_after_judged_ttl() {
        let ttl = Duration::from_millis(30);
        let hub = hub("judged_ttl_ms = 30\n");
        let before = Instant::now();
        hub.invalidate(&fp(1), key(), None, None, 0);
        // Judged at `before` or later, so held until just before `before`
        // and the TTL: looked up at that instant, not the clock's, which a
        // stall of this thread could carry past the 30 ms.
        let just_before_expiry = before + ttl - Duration::from_micros(1);
        assert_eq!(
            hub.judged
                .lock()
                .expect("lock")
                .get(&fp(1).hash, just_before_expiry),
            Some(vec![key()])
        );
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(hub.verdict(&fp(1).hash), None);
        assert_eq!(hub.judged.lock().expect("lock").len(), 0);
    }

    #[test]
    fn broadcast_buffer_oversized_default_is_16384_per_subscriber() {
        let hub = hub("");
        assert_eq!(hub.capacity, 16_384);
        let _rx = hub.stream.subscribe();
        for i in 0..20_000 {
            hub.invalidate(&fp(i), key(), None, None, 0);
        }
        // Not the old 262,144: the oldest were dropped.
        assert_eq!(hub.stream.len(), 16_384);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn broadcast_buffer_oversized_a_lagging_subscriber_loses_the_oldest_logged() {
        let logs = Logs::default();
        let _guard = logs.capture();

        let hub = hub("stream_buffer = 8\n");
        let stream = hub.subscribe();
        for i in 0..20 {
            hub.invalidate(&fp(i), key(), None, None, i);
        }
        drop(hub);
        let got: Vec<u64> = stream.map(|m| m.block).collect().await;
        assert_eq!(got, (12..20).collect::<Vec<_>>(), "the newest 8 kept");
        let logs = logs.text();
        assert!(logs.contains("oldest invalidations lost"), "{logs}");
        assert!(logs.contains("lost=12"), "{logs}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_new_subscriber_gets_the_live_set_then_caught_up_then_live() {
        let hub = hub("judged_max = 3\n");
        for i in 0..5 {
            hub.invalidate(&fp(i), key(), None, None, i);
        }
        let mut stream = Box::pin(hub.subscribe_events(true));
        let mut replayed = Vec::new();
        loop {
            match stream.next().await.expect("event") {
                Event::Replayed(e, age) => {
                    assert!(age < Duration::from_secs(5));
                    replayed.push(e.block);
                }
                Event::CaughtUp => break,
                Event::Live(e) => panic!("live before caught up: {e:?}"),
            }
        }
        assert_eq!(replayed, [2, 3, 4], "the newest judged_max, oldest first");
        hub.invalidate(&fp(9), key(), None, None, 9);
        assert!(matches!(stream.next().await, Some(Event::Live(e)) if e.block == 9));
        // Without replay: live only.
        let mut live_only = Box::pin(hub.subscribe_events(false));
        hub.invalidate(&fp(10), key(), None, None, 10);
        assert!(matches!(live_only.next().await, Some(Event::Live(e)) if e.block == 10));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_live_set_forgets_after_judged_ttl() {
        let hub = hub("judged_ttl_ms = 30\n");
        hub.invalidate(&fp(1), key(), None, None, 1);
        std::thread::sleep(Duration::from_millis(60));
        let mut stream = Box::pin(hub.subscribe_events(true));
        assert_eq!(stream.next().await, Some(Event::CaughtUp));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn broadcast_buffer_oversized_room_gives_up_on_a_stalled_subscriber() {
        let hub = hub("stream_buffer = 4\n");
        let _stalled = hub.stream.subscribe();
        assert!(hub.room(Duration::from_millis(20)).await, "empty: room");
        for i in 0..4 {
            hub.invalidate(&fp(i), key(), None, None, 0);
        }
        let started = Instant::now();
        assert!(!hub.room(Duration::from_millis(20)).await);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn broadcast_buffer_oversized_room_waits_for_a_slow_subscriber() {
        let hub = Arc::new(hub("stream_buffer = 4\n"));
        let mut rx = hub.stream.subscribe();
        for i in 0..4 {
            hub.invalidate(&fp(i), key(), None, None, 0);
        }
        let reader = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                rx.recv().await.expect("no loss");
            }
            rx
        });
        assert!(hub.room(Duration::from_secs(5)).await);
        assert!(hub.stream.len() <= 2);
        reader.await.expect("reader");
    }
}
