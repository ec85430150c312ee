//! The sidecar's state: what it judged, and the stream of invalidations to
//! its subscribers.
//!
//! The hub knows nothing of the node or of gRPC: the watcher
//! ([`crate::watch`]) and the admin endpoint ([`crate::admin`]) feed it,
//! the gRPC service ([`crate::service`]) reads it.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alloy_primitives::{Address, B256};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::{Stream, StreamExt};
use txgate_proto::v1;
use txgate_screen::{AssertionKey, Fingerprint};

use crate::config::Config;
use crate::judged::Judged;

/// How often a paced sender looks again for room in the stream buffer.
const ROOM_POLL: Duration = Duration::from_millis(1);

/// Shared state.
#[derive(Debug)]
pub(crate) struct Hub {
    /// The configuration (assertions and limits).
    pub(crate) config: Config,
    stream: broadcast::Sender<v1::Invalidation>,
    /// Invalidations buffered per subscriber, as configured.
    capacity: usize,
    /// Fingerprints judged invalid, with their assertions.
    judged: Mutex<Judged>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
            stream,
            capacity,
            judged: Mutex::new(judged),
        }
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
        if let Ok(mut judged) = self.judged.lock() {
            judged.record(fp.hash, assertion, Instant::now());
        }
        let message =
            txgate_proto::invalidation_message(fp, assertion, tx_hash, sender, block, unix_ms());
        self.stream.send(message).unwrap_or(0)
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

    /// A new subscriber's stream of every invalidation from now on. A
    /// subscriber more than `stream_buffer` behind loses the oldest; the
    /// loss is logged with its count and the stream goes on.
    pub(crate) fn subscribe(&self) -> impl Stream<Item = v1::Invalidation> + Send + 'static {
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
        let hub = hub("judged_ttl_ms = 30\n");
        hub.invalidate(&fp(1), key(), None, None, 0);
        assert_eq!(hub.verdict(&fp(1).hash), Some(vec![key()]));
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

    /// Captures log lines.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut logs) = self.0.lock() {
                logs.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn broadcast_buffer_oversized_a_lagging_subscriber_loses_the_oldest_logged() {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let hub = hub("stream_buffer = 8\n");
        let stream = hub.subscribe();
        for i in 0..20 {
            hub.invalidate(&fp(i), key(), None, None, i);
        }
        drop(hub);
        let got: Vec<u64> = stream.map(|m| m.l2_block_number).collect().await;
        assert_eq!(got, (12..20).collect::<Vec<_>>(), "the newest 8 kept");
        let logs = String::from_utf8(logs.0.lock().expect("lock").clone()).expect("utf-8");
        assert!(logs.contains("oldest invalidations lost"), "{logs}");
        assert!(logs.contains("lost=12"), "{logs}");
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
