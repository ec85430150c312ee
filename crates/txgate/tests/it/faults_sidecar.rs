//! A sidecar that misbehaves: messages that are not protobuf, over the
//! size limit, unusable or of an unknown schema version, a stream that
//! flaps every 10 ms, a ShouldForward answer after the deadline. For each,
//! txgate keeps serving (fail open), keeps every ban it learned, counts
//! the fault, and logs it without flooding.

use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::StatusCode;
use txgate_proto::v1;

use crate::fault_servers::{Bad, FaultySidecar, StreamFault, ban, tx};
use crate::support::{RecordingUpstream, TempFile, Txgate, eventually, metric, send_raw};

struct Setup {
    _upstream: RecordingUpstream,
    _config: TempFile,
    txgate: Txgate,
}

fn start(sidecar: &FaultySidecar, extra: &str) -> impl std::future::Future<Output = Setup> {
    let config = TempFile::new(&format!(
        "[sidecar]\nurl = \"{}\"\nreconnect_initial_ms = 100\nreconnect_max_ms = 5000\n{extra}",
        sidecar.url()
    ));
    async move {
        let upstream = RecordingUpstream::start().await;
        let txgate = Txgate::start(&upstream.url, &["--config", config.arg()]);
        Setup {
            _upstream: upstream,
            _config: config,
            txgate,
        }
    }
}

async fn refused(txgate: &Txgate, raw: &str) -> bool {
    let (status, v) = send_raw(&txgate.url, raw).await;
    status == StatusCode::OK && v["error"]["code"] == -32003
}

async fn forwarded(txgate: &Txgate, raw: &str) -> bool {
    let (status, v) = send_raw(&txgate.url, raw).await;
    status == StatusCode::OK && v.get("result").is_some()
}

/// Warnings and errors logged so far about the sidecar link.
fn loud_sidecar_lines(txgate: &Txgate) -> Vec<String> {
    txgate
        .drain_logs()
        .into_iter()
        .filter(|l| {
            (l.contains("\"level\":\"WARN\"") || l.contains("\"level\":\"ERROR\""))
                && l.contains("sidecar")
        })
        .collect()
}

/// A message that breaks the stream (not protobuf; over the size limit)
/// costs a reconnect, not what was learned before it: the ban read first
/// holds, the stream is retried with a growing delay (not hammered), the
/// reason is counted, and the logs stay short.
async fn a_stream_breaking_message(bad: Bad, reason: &str) {
    let banned = tx(1);
    let sidecar =
        FaultySidecar::start(StreamFault::Around(vec![ban(&banned)], bad), Duration::ZERO).await;
    let s = start(&sidecar, "max_message_bytes = 65536\n").await;
    let t = &s.txgate;
    assert!(
        eventually(Duration::from_secs(5), || refused(t, &banned)).await,
        "{reason}: the ban sent before the bad message was not applied"
    );
    let series = format!("txgate_sidecar_stream_ends_total{{reason=\"{reason}\"}}");
    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(&t.metrics().await, &series) >= 2.0
        })
        .await,
        "{reason}: not counted"
    );
    // Hammering would be one stream per reconnect_initial (100 ms); the
    // delay doubles instead: 0.1, 0.2, 0.4, 0.8, 1.6 s…
    tokio::time::sleep(Duration::from_secs(3)).await;
    let streams = sidecar.streams.load(Ordering::SeqCst);
    assert!(
        (3..=8).contains(&streams),
        "{reason}: {streams} streams opened in ~3 s"
    );
    assert!(refused(t, &banned).await, "{reason}: the ban was lost");
    assert!(forwarded(t, &tx(2)).await, "{reason}: honest call refused");
    let loud = loud_sidecar_lines(t);
    assert!(
        loud.len() <= 2 * 4,
        "{reason}: {} lines for {streams} ends: {loud:#?}",
        loud.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_undecodable_message_costs_a_reconnect_not_the_bans() {
    a_stream_breaking_message(Bad::Undecodable, "undecodable").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_over_the_size_limit_is_refused_from_its_prefix() {
    // 64 MiB announced, 1 KiB sent: refused before it is read.
    a_stream_breaking_message(Bad::Oversize(64 << 20), "too_large").await;
}

/// A message that decodes but cannot be used is counted and skipped; one
/// of a newer schema version is applied by the fields txgate knows and
/// counted. Neither breaks the stream.
#[tokio::test(flavor = "multi_thread")]
async fn unusable_and_newer_schema_messages_leave_the_stream_up() {
    let (first, second) = (tx(11), tx(12));
    let mut newer = ban(&second);
    newer.schema_version = 99;
    let mut unusable = ban(&first);
    if let Some(fp) = unusable.fingerprint.as_mut() {
        fp.hash.truncate(31);
    }
    let sidecar = FaultySidecar::start(
        StreamFault::Around(vec![ban(&first), newer], Bad::Unusable(Box::new(unusable))),
        Duration::ZERO,
    )
    .await;
    let s = start(&sidecar, "").await;
    let t = &s.txgate;
    assert!(eventually(Duration::from_secs(5), || refused(t, &first)).await);
    assert!(
        eventually(Duration::from_secs(5), || refused(t, &second)).await,
        "the newer-schema invalidation was not applied"
    );
    // Each counter is waited for: one that lags the others would
    // otherwise be read short.
    assert!(
        eventually(Duration::from_secs(5), || async {
            let m = t.metrics().await;
            metric(&m, "txgate_sidecar_invalidations_received_total") >= 5.0
                && metric(&m, "txgate_sidecar_invalidations_malformed_total") >= 1.0
                && metric(&m, "txgate_sidecar_invalidations_newer_schema_total") >= 2.0
        })
        .await,
        "{}",
        t.metrics().await
    );
    let m = t.metrics().await;
    assert_eq!(
        metric(&m, "txgate_sidecar_invalidations_malformed_total"),
        1.0
    );
    assert_eq!(
        metric(&m, "txgate_sidecar_invalidations_newer_schema_total"),
        2.0
    );
    assert_eq!(
        sidecar.streams.load(Ordering::SeqCst),
        1,
        "the stream broke"
    );
    assert_eq!(metric(&m, "txgate_sidecar_reconnects_total"), 0.0);
    assert_eq!(metric(&m, "txgate_sidecar_up"), 1.0);
    // One line each for the first malformed and the first two newer ones.
    let loud = loud_sidecar_lines(t);
    assert!(loud.len() <= 3, "{loud:#?}");
}

fn flap_ban(n: u64) -> v1::Invalidation {
    ban(&tx(100 + n))
}

/// A stream that ends 10 ms after it opens, every time: txgate learns
/// what each one says, backs off instead of reopening ten times a second,
/// and logs the flapping at powers of two, not per end.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_flapping_every_10ms_backs_off_and_keeps_what_it_learns() {
    let sidecar = FaultySidecar::start(
        StreamFault::Flap(flap_ban, Duration::from_millis(10)),
        Duration::ZERO,
    )
    .await;
    let s = start(&sidecar, "").await;
    let t = &s.txgate;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let streams = sidecar.streams.load(Ordering::SeqCst);
    // 0, 0.1, 0.3, 0.7, 1.5, 3.1 s (±25% jitter each): about six.
    assert!((4..=9).contains(&streams), "{streams} streams in 5 s");
    for n in 0..streams {
        // The last stream may have opened a moment ago: its ban is applied
        // within a few milliseconds.
        let raw = tx(100 + n);
        assert!(
            eventually(Duration::from_secs(2), || refused(t, &raw)).await,
            "the ban of stream {n} was lost"
        );
    }
    assert!(forwarded(t, &tx(99)).await);
    // The last stream seen opened may not have ended yet, or its end not
    // been counted.
    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(
                &t.metrics().await,
                "txgate_sidecar_stream_ends_total{reason=\"ended\"}",
            ) >= 4.0
        })
        .await,
        "{}",
        t.metrics().await
    );
    let loud = loud_sidecar_lines(t);
    // Ends 1, 2, 4 (and 8): two lines at most each (link lost, flapping).
    assert!(
        loud.len() <= 7,
        "{} lines for {streams} ends: {loud:#?}",
        loud.len()
    );
}

/// ShouldForward answers "deny" only after txgate's 20 ms deadline: the
/// call is forwarded without the answer (fail open), counted as a timeout,
/// and the late answer bans nothing.
///
/// The sidecar holds each answer until the test releases it, so "after the
/// deadline" is an order the test makes, not a delay a loaded machine can
/// stretch past the deadline's own lateness.
#[tokio::test(flavor = "multi_thread")]
async fn a_should_forward_answer_after_the_deadline_is_ignored() {
    let sidecar = FaultySidecar::start_holding_answers(StreamFault::Quiet).await;
    let s = start(
        &sidecar,
        "should_forward = true\nshould_forward_scope = \"all\"\nshould_forward_timeout_ms = 20\n",
    )
    .await;
    let t = &s.txgate;
    let raw = tx(200);
    // Forwarded while the answer is held: only the deadline can have let
    // the call through. Repeated until a question has reached the sidecar
    // (a worker's first question also opens its connection, which a loaded
    // machine may not finish by the deadline; the question is then dropped
    // unsent), so that there is a late answer to release.
    let mut calls = 0;
    while sidecar.questions.load(Ordering::SeqCst) == 0 {
        assert!(
            calls < 20,
            "no question reached the sidecar in {calls} calls"
        );
        let passed = tokio::time::timeout(Duration::from_secs(10), forwarded(t, &raw))
            .await
            .expect("the call waited for the held answer past its 20 ms deadline");
        assert!(passed, "not forwarded at the deadline");
        calls += 1;
        eventually(Duration::from_secs(1), || async {
            sidecar.questions.load(Ordering::SeqCst) > 0
        })
        .await;
    }
    assert_eq!(
        sidecar.answers.load(Ordering::SeqCst),
        0,
        "an answer got out"
    );
    let m = t.metrics().await;
    assert!(metric(&m, "txgate_should_forward_total{result=\"timeout\"}") >= 1.0);

    // The late deny: sent now, then given time to do harm.
    let asked = sidecar.questions.load(Ordering::SeqCst);
    sidecar.release_answers();
    assert!(
        eventually(Duration::from_secs(5), || async {
            sidecar.answers.load(Ordering::SeqCst) >= asked
        })
        .await,
        "the released answers were not sent"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let m = t.metrics().await;
    assert_eq!(
        metric(&m, "txgate_should_forward_total{result=\"deny\"}"),
        0.0
    );
    assert!(forwarded(t, &raw).await, "a late deny was applied");
}
