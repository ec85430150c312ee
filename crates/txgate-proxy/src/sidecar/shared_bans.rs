//! Bans that only one instance hears, shared with the fleet over Redis.
//!
//! A failure report reaches the one instance at the sidecar's `aeges_url`;
//! a result-stream failure names only a tx hash, which only the instance
//! that forwarded the transaction can turn into a fingerprint. Both
//! become invalidations there, and that instance publishes them on the
//! Redis channel `<redis.key_prefix>:bans`; every other instance subscribed
//! queues them like any invalidation (banned, hash refused, sender
//! charged; a ban it already holds is counted as a duplicate, never charged
//! twice). Each ban carries its start (`started_ms`, wall-clock Unix ms at
//! the instance that learned it), so it runs from there on every instance,
//! however late it arrives; a message from a build that sends no start
//! starts its bans when received. Publishing never waits: with Redis down
//! or the outbox full, the ban holds on the instance that learned it and
//! the miss is counted.
//! Pub/sub keeps nothing: an instance that starts later learns these bans
//! only from its own sources (the sidecar's replay covers `txgate.v1`).
//!
//! The channel is two connections through the fleet's [`Link`]: one that
//! publishes (it answered a PING) and one subscribed, each opened within
//! `redis.timeout_ms`; a publish that fails or takes longer drops the
//! channel. After a failed connect it retries as the fleet's [`Backoff`]
//! says (100 ms doubling to 5 s, ±20%); after a drop it reconnects at
//! once.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use txgate_config::RedisConfig;
use txgate_screen::{Invalidation, UnixMillis};

use crate::fleet::{Backoff, Link};
use crate::metrics::Metrics;
use crate::screening::state::wall_now;

/// Bans waiting to be published at most; beyond, dropped and counted.
pub const OUTBOX: usize = 4096;
/// Bans per published message at most.
const PER_MESSAGE: usize = 256;
/// A received message larger than this is not parsed.
const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Where a source puts a ban the rest of the fleet should hear.
#[derive(Debug, Clone)]
pub struct Share {
    outbox: mpsc::Sender<Invalidation>,
    metrics: Arc<Metrics>,
}

impl Share {
    /// Offers `invalidation` for publishing; never waits.
    pub fn offer(&self, invalidation: &Invalidation) {
        if self.outbox.try_send(*invalidation).is_err() {
            self.metrics.sidecar.fleet_bans.dropped.inc();
        }
    }
}

/// A [`Share`] and the outbox [`run`] publishes from.
pub fn share(metrics: Arc<Metrics>) -> (Share, mpsc::Receiver<Invalidation>) {
    let (outbox, published) = mpsc::channel(OUTBOX);
    (Share { outbox, metrics }, published)
}

/// One message on the channel.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Message {
    /// The publishing process, so it skips its own messages.
    origin: String,
    bans: Vec<Ban>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Ban {
    fingerprint: String,
    target: String,
    selector: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tx_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sender: Option<String>,
    /// The ban's start, wall-clock Unix ms (absent from older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_ms: Option<u64>,
}

impl Ban {
    fn of(i: &Invalidation) -> Ban {
        Ban {
            fingerprint: i.fingerprint.to_string(),
            target: i.target.to_string(),
            selector: alloy_primitives::hex::encode_prefixed(i.selector),
            tx_hash: i.tx_hash.map(|h| h.to_string()),
            sender: i.sender.map(|a| a.to_string()),
            started_ms: Some(i.started),
        }
    }

    /// The invalidation, started when its origin says, else at `received`;
    /// `None` when a field does not parse. No assertion travels: a shared
    /// ban counts toward no assertion's cooldown.
    fn invalidation(&self, received: UnixMillis) -> Option<Invalidation> {
        let selector = alloy_primitives::hex::decode(&self.selector).ok()?;
        Some(Invalidation {
            fingerprint: B256::from_str(&self.fingerprint).ok()?,
            target: Address::from_str(&self.target).ok()?,
            selector: selector.try_into().ok()?,
            assertion: None,
            tx_hash: match &self.tx_hash {
                Some(h) => Some(B256::from_str(h).ok()?),
                None => None,
            },
            sender: match &self.sender {
                Some(a) => Some(Address::from_str(a).ok()?),
                None => None,
            },
            started: self.started_ms.unwrap_or(received),
        })
    }
}

/// The invalidations of a message received at `now` (wall clock), unless
/// it is ours or malformed.
fn received(payload: &[u8], origin: &str, now: UnixMillis) -> Result<Vec<Invalidation>, ()> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(());
    }
    let message: Message = serde_json::from_slice(payload).map_err(|_| ())?;
    if message.origin == origin {
        return Ok(Vec::new());
    }
    message
        .bans
        .iter()
        .map(|b| b.invalidation(now).ok_or(()))
        .collect()
}

/// Publishes what [`Share`] offers and queues what the others publish, on
/// `<redis.key_prefix>:bans`, until `stop`; reconnects as [`Backoff`]
/// says.
pub async fn run(
    config: RedisConfig,
    mut outbox: mpsc::Receiver<Invalidation>,
    queue: mpsc::Sender<Invalidation>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let m = &metrics.sidecar.fleet_bans;
    let channel = format!("{}:bans", config.key_prefix);
    let origin = format!("{:016x}", rand_origin());
    let Ok(link) = Link::new(&config) else {
        tracing::error!(url = %config.redacted_url(), "Redis URL refused: bans are not shared with the fleet");
        return;
    };
    let mut backoff = Backoff::default();
    let mut pending = Vec::with_capacity(PER_MESSAGE);
    // Closed when this instance has no source that shares (it still hears
    // the others).
    let mut sharing = true;
    loop {
        let connected = async {
            let publisher = link.connect().await?;
            let subscriber = link.subscribe(&channel).await?;
            redis::RedisResult::Ok((publisher, subscriber))
        };
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            c = connected => c,
        };
        let (mut publisher, subscriber) = match connected {
            Ok(pair) => pair,
            Err(e) => {
                m.reconnects.inc();
                tracing::debug!(error = %e, "Redis ban channel: connect failed");
                // Bans offered meanwhile stay here only.
                while let Ok(_dropped) = outbox.try_recv() {
                    m.dropped.inc();
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(backoff.failed()) => {}
                }
                continue;
            }
        };
        let up_since = Instant::now();
        tracing::info!(channel, "sharing bans with the fleet over Redis");
        let mut messages = subscriber.into_on_message();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                n = outbox.recv_many(&mut pending, PER_MESSAGE), if sharing => {
                    if n == 0 {
                        sharing = false;
                        continue;
                    }
                    let message = Message {
                        origin: origin.clone(),
                        bans: pending.iter().map(Ban::of).collect(),
                    };
                    pending.clear();
                    let Ok(payload) = serde_json::to_vec(&message) else { continue };
                    let mut publish = redis::cmd("PUBLISH");
                    publish.arg(&channel).arg(payload);
                    let sent = link.within(publish.query_async::<i64>(&mut publisher)).await;
                    if sent.is_ok() {
                        m.published.inc_by(message.bans.len() as u64);
                    } else {
                        m.dropped.inc_by(message.bans.len() as u64);
                        m.reconnects.inc();
                        break;
                    }
                }
                message = messages.next() => {
                    let Some(message) = message else {
                        m.reconnects.inc();
                        break;
                    };
                    match received(message.get_payload_bytes(), &origin, wall_now()) {
                        Ok(bans) => {
                            for ban in bans {
                                m.received.inc();
                                if !super::worker::queue(ban, &queue, &metrics).await {
                                    return;
                                }
                            }
                        }
                        Err(()) => m.malformed.inc(),
                    }
                }
            }
        }
        // A channel that stayed up a while reconnects at once; one that
        // dropped soon after it opened waits like a failed connect, so a
        // Redis that takes connections but not the channel's traffic in
        // time is not reconnected to in a loop.
        let wait = if up_since.elapsed() >= STABLE {
            backoff.succeeded();
            Duration::ZERO
        } else {
            backoff.failed()
        };
        tracing::warn!(
            wait_ms = wait.as_millis() as u64,
            "the Redis ban channel dropped: reconnecting"
        );
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// How long the channel must stay up for its next drop to reconnect at
/// once (the longest retry wait).
const STABLE: Duration = Duration::from_secs(5);

/// A process id for the channel: the PID and the start time.
fn rand_origin() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ban() -> Invalidation {
        Invalidation {
            fingerprint: B256::repeat_byte(7),
            target: Address::repeat_byte(9),
            selector: [0xa9, 0x05, 0x9c, 0xbb],
            assertion: None,
            tx_hash: Some(B256::repeat_byte(1)),
            sender: Some(Address::repeat_byte(2)),
            started: 1_700_000_000_000,
        }
    }

    fn payload(origin: &str, bans: &[Invalidation]) -> Vec<u8> {
        serde_json::to_vec(&Message {
            origin: origin.into(),
            bans: bans.iter().map(Ban::of).collect(),
        })
        .unwrap()
    }

    #[test]
    fn a_ban_crosses_the_channel_whole() {
        let mut partial = ban();
        partial.tx_hash = None;
        partial.sender = None;
        let got = received(&payload("a", &[ban(), partial]), "b", 5).unwrap();
        assert_eq!(got, vec![ban(), partial]);
    }

    /// A message from a build that sends no start: its bans start when
    /// received.
    #[test]
    fn a_ban_without_its_start_starts_when_received() {
        let mut old: serde_json::Value = serde_json::from_slice(&payload("a", &[ban()])).unwrap();
        assert_eq!(old["bans"][0]["started_ms"], 1_700_000_000_000u64);
        old["bans"][0].as_object_mut().unwrap().remove("started_ms");
        let got = received(&serde_json::to_vec(&old).unwrap(), "b", 5).unwrap();
        assert_eq!(
            got,
            vec![Invalidation {
                started: 5,
                ..ban()
            }]
        );
    }

    #[test]
    fn our_own_messages_are_skipped() {
        assert!(
            received(&payload("a", &[ban()]), "a", 5)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn anything_malformed_is_refused_whole() {
        assert!(received(b"not json", "b", 5).is_err());
        let mut bad: serde_json::Value = serde_json::from_slice(&payload("a", &[ban()])).unwrap();
        bad["bans"][0]["selector"] = "0x1234".into();
        assert!(received(&serde_json::to_vec(&bad).unwrap(), "b", 5).is_err());
        bad["bans"][0]["selector"] = "0xa9059cbb".into();
        bad["bans"][0]["assertion"] = "0x01".into();
        assert!(received(&serde_json::to_vec(&bad).unwrap(), "b", 5).is_err());
        assert!(received(&vec![b' '; MAX_MESSAGE_BYTES + 1], "b", 5).is_err());
    }
}
