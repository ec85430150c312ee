//! txgate as a fleet member behind a real load balancer (HAProxy from
//! Debian's packages): the PROXY protocol, client identity, per-client
//! limits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::balancer::{Backend, Haproxy, Send};
use crate::support::{
    Answer, SlowUpstream, TempFile, Txgate, free_port, metric, rpc, rpc_from, rpc_json,
};

const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

fn behind_balancer(mode: &str) -> TempFile {
    TempFile::new(&format!(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_protocol = \"{mode}\"\n"
    ))
}

#[tokio::test]
async fn haproxy_send_proxy_v2_reaches_txgate_and_a_direct_client_is_closed() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let config = behind_balancer("v2");
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let haproxy = Haproxy::start(&[txgate.rpc_addr], Send::ProxyV2);

    for _ in 0..5 {
        let (status, answer) = rpc_json(&haproxy.url, CHAIN_ID).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"], "0x1", "{answer}");
    }
    let m = txgate.metrics().await;
    assert!(
        metric(&m, "txgate_proxy_protocol_total{result=\"v2\"}") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "txgate_client_identity_total{source=\"peer\"}") >= 5.0,
        "{m}"
    );

    // The balancer's address is trusted, but a connection without the
    // header is not HTTP to a v2 listener: closed, counted, no answer.
    let direct = rpc(&txgate.url, CHAIN_ID).await;
    assert!(direct.is_err(), "{direct:?}");
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_proxy_protocol_total{result=\"missing\"}"),
        1.0,
        "{m}"
    );
    drop(haproxy);
}

#[tokio::test]
async fn haproxy_send_proxy_v1_reaches_txgate() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let config = behind_balancer("v1");
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let haproxy = Haproxy::start(&[txgate.rpc_addr], Send::ProxyV1);
    let (status, answer) = rpc_json(&haproxy.url, CHAIN_ID).await;
    assert_eq!(
        (status.as_u16(), &answer["result"]),
        (200, &"0x1".into()),
        "{answer}"
    );
    let m = txgate.metrics().await;
    assert!(
        metric(&m, "txgate_proxy_protocol_total{result=\"v1\"}") >= 1.0,
        "{m}"
    );
}

#[tokio::test]
async fn haproxy_forwardfor_is_read_from_the_trusted_balancer_only() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let config = TempFile::new("[server]\ntrusted_proxies = [\"127.0.0.1\"]\n");
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let haproxy = Haproxy::start(&[txgate.rpc_addr], Send::ForwardedFor);
    let (status, _) = rpc_json(&haproxy.url, CHAIN_ID).await;
    assert_eq!(status, 200);
    let m = txgate.metrics().await;
    assert_eq!(
        metric(
            &m,
            "txgate_client_identity_total{source=\"forwarded_header\"}"
        ),
        1.0,
        "{m}"
    );
    // Straight to txgate from 127.0.0.1 without the header: the peer.
    let (status, _) = rpc_json(&txgate.url, CHAIN_ID).await;
    assert_eq!(status, 200);
    let m = txgate.metrics().await;
    assert_eq!(
        metric(&m, "txgate_client_identity_total{source=\"peer\"}"),
        1.0,
        "{m}"
    );
}

/// Sends `n` calls from `from`; the statuses.
async fn burst(url: &str, from: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
    timed_burst(url, from, headers, n)
        .await
        .iter()
        .map(|c| c.status)
        .collect()
}

/// One timed call: its answer, and when it was sent and answered, in
/// seconds from the instant its burst began.
struct Timed {
    status: u16,
    sent: f64,
    answered: f64,
    answer: Answer,
}

/// One call from `from`, timed from `since`.
async fn timed_call(url: &str, from: &str, headers: &[(&str, &str)], since: Instant) -> Timed {
    let sent = since.elapsed().as_secs_f64();
    let answer = rpc_from(url, from, headers, CHAIN_ID)
        .await
        .expect("transport");
    Timed {
        status: answer.0.as_u16(),
        sent,
        answered: since.elapsed().as_secs_f64(),
        answer,
    }
}

/// Sends `n` calls from `from`, one after the other, each timed.
async fn timed_burst(url: &str, from: &str, headers: &[(&str, &str)], n: usize) -> Vec<Timed> {
    let since = Instant::now();
    let mut calls = Vec::with_capacity(n);
    for _ in 0..n {
        calls.push(timed_call(url, from, headers, since).await);
    }
    calls
}

/// Whether the statuses of `calls` (200 or 429) are what one client's
/// bucket of `burst` calls refilled `per_sec` times a second, untouched
/// before the first call, gives when each call was checked at some instant
/// between its send and its answer: exact GCRA (as txgate keeps its
/// limits), no assumption on how fast the calls were. A call at `t` passes
/// when `t >= tat - (burst - 1) / per_sec`, and moves the TAT to
/// `max(tat, t) + 1 / per_sec`; a refused call leaves it. The TATs the
/// bucket can hold after each call form an interval, carried from call to
/// call; the statuses are possible when that interval never empties. A
/// quick burst (all calls within one refill) allows exactly `burst` passes
/// first and refusals after; a slow one allows one more pass per refill it
/// spans, and no more.
fn a_bucket_explains(calls: &[Timed], per_sec: f64, burst: f64) -> bool {
    let every = 1.0 / per_sec;
    let slack = (burst - 1.0) * every;
    // A client never seen holds a TAT in the past.
    let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for c in calls {
        match c.status {
            200 => {
                // Passed at some t <= answered with t >= tat - slack.
                hi = hi.min(c.answered + slack);
                if lo > hi {
                    return false;
                }
                (lo, hi) = (lo.max(c.sent) + every, hi.max(c.answered) + every);
            }
            429 => {
                // Refused at some t >= sent with t < tat - slack.
                if hi <= c.sent + slack {
                    return false;
                }
                lo = lo.max(c.sent + slack);
            }
            _ => return false,
        }
    }
    true
}

/// The statuses and timings of `calls`, for a failure message.
fn timeline(calls: &[Timed]) -> String {
    calls
        .iter()
        .map(|c| format!("{} [{:.3}, {:.3}]", c.status, c.sent, c.answered))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test]
async fn per_ip_limits_behind_haproxy_refuse_only_the_client_over_its_rate() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    // 1 call/s with a burst of 5: a quick burst of 8 sees 3 refusals.
    let config = TempFile::new(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_protocol = \"v2\"\n\
         [limits]\nip = { calls_per_sec = 1, calls_burst = 5 }\n",
    );
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let haproxy = Haproxy::start(&[txgate.rpc_addr], Send::ProxyV2);

    // Each call timed: the refill the burst earned is bracketed by the
    // calls' sends and answers, however slow the machine (a burst within
    // a second sees exactly 5 passes and 3 refusals). Past 8 calls, the
    // burst goes on until it is refused once, so that there is always a
    // refusal to read.
    let since = Instant::now();
    let mut noisy = Vec::new();
    while noisy.len() < 8 || (!noisy.iter().any(|c: &Timed| c.status == 429) && noisy.len() < 40) {
        noisy.push(timed_call(&haproxy.url, "127.0.0.2", &[], since).await);
    }
    assert!(
        noisy[..5].iter().all(|c| c.status == 200),
        "{}",
        timeline(&noisy)
    );
    assert!(
        a_bucket_explains(&noisy, 1.0, 5.0),
        "not a limit of 1 call/s with a burst of 5: {}",
        timeline(&noisy)
    );
    // Another client behind the same balancer is untouched.
    let quiet = burst(&haproxy.url, "127.0.0.3", &[], 5).await;
    assert!(quiet.iter().all(|s| *s == 200), "{quiet:?}");

    // The refusal (one from the burst): 429, Retry-After, -32005 naming
    // the limit.
    let (status, headers, body) = &noisy
        .iter()
        .find(|c| c.status == 429)
        .unwrap_or_else(|| panic!("never refused: {}", timeline(&noisy)))
        .answer;
    assert_eq!(*status, 429);
    assert!(headers.get("retry-after").is_some(), "{headers:?}");
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "ip_rate", "{answer}");
    // Refused before the body is read: the id is not known (null, as for
    // the global in-flight cap).
    assert_eq!(answer["id"], serde_json::Value::Null, "{answer}");
    let m = txgate.metrics().await;
    let refused = noisy.iter().filter(|c| c.status == 429).count() as f64;
    assert_eq!(
        metric(&m, "txgate_limit_refusals_total{limit=\"ip_rate\"}"),
        refused,
        "{m}"
    );
    assert_eq!(
        metric(&m, "txgate_http_responses_total{outcome=\"rate_limited\"}"),
        refused,
        "{m}"
    );
}

#[tokio::test]
async fn api_keys_get_their_tier_and_unknown_keys_are_refused() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let config = TempFile::new(
        "[limits]\nip = { calls_per_sec = 1, calls_burst = 2 }\n\
         [limits.tiers.partner]\ncalls_per_sec = 1000\n\
         [limits.keys]\n\"partner-key-1\" = \"partner\"\n",
    );
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let keyed = burst(
        &txgate.url,
        "127.0.0.2",
        &[("x-api-key", "partner-key-1")],
        20,
    )
    .await;
    assert!(keyed.iter().all(|s| *s == 200), "{keyed:?}");
    let bearer = burst(
        &txgate.url,
        "127.0.0.2",
        &[("authorization", "Bearer partner-key-1")],
        5,
    )
    .await;
    assert!(bearer.iter().all(|s| *s == 200), "{bearer:?}");
    // The same address without the key: its own IP rate (1/s, a burst of
    // 2), checked against the calls' own timings, never skipped: a burst
    // within a second sees exactly [200, 200, 429, 429].
    let anonymous = timed_burst(&txgate.url, "127.0.0.2", &[], 4).await;
    assert!(
        anonymous[..2].iter().all(|c| c.status == 200),
        "{}",
        timeline(&anonymous)
    );
    assert!(
        a_bucket_explains(&anonymous, 1.0, 2.0),
        "not a limit of 1 call/s with a burst of 2: {}",
        timeline(&anonymous)
    );
    let (status, _, body) = rpc_from(
        &txgate.url,
        "127.0.0.4",
        &[("x-api-key", "guess")],
        CHAIN_ID,
    )
    .await
    .unwrap();
    assert_eq!(status, 401);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "invalid request: unknown API key"
    );
}

#[tokio::test]
async fn the_keys_file_is_read_again_on_sighup() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    let keys = TempFile::new("[keys]\n\"first-key\" = \"partner\"\n");
    let config = TempFile::new(&format!(
        "[limits]\nkeys_file = \"{}\"\n[limits.tiers.partner]\ncalls_per_sec = 1000\n",
        keys.arg()
    ));
    let txgate = Txgate::start(&upstream.url, &["-c", config.arg()]);
    let status = |key: &'static str| {
        let url = txgate.url.clone();
        async move {
            rpc_from(&url, "127.0.0.2", &[("x-api-key", key)], CHAIN_ID)
                .await
                .unwrap()
                .0
                .as_u16()
        }
    };
    assert_eq!(status("first-key").await, 200);
    assert_eq!(status("second-key").await, 401);
    std::fs::write(&keys.path, "[keys]\n\"second-key\" = \"partner\"\n").unwrap();
    txgate.proc.signal(libc::SIGHUP);
    let rotated = crate::support::eventually(Duration::from_secs(5), || async {
        status("second-key").await == 200
    })
    .await;
    assert!(rotated, "the new key was not taken");
    assert_eq!(status("first-key").await, 401);
    // A broken file keeps the keys in force, and txgate keeps running.
    std::fs::write(&keys.path, "[keys]\n\"x\" = \"gold\"\n").unwrap();
    txgate.proc.signal(libc::SIGHUP);
    let failed = crate::support::eventually(Duration::from_secs(5), || async {
        metric(
            &txgate.metrics().await,
            "txgate_limit_api_keys_reload_failures_total",
        ) == 1.0
    })
    .await;
    assert!(failed);
    assert_eq!(status("second-key").await, 200);
}

/// One instance on fixed ports, so that it comes back where the balancer
/// expects it.
fn instance(upstream: &str, config: &TempFile, rpc: SocketAddr, admin: SocketAddr) -> Txgate {
    Txgate::spawn(&[
        "--listen",
        &rpc.to_string(),
        "--admin-listen",
        &admin.to_string(),
        "--upstream",
        upstream,
        "--log-format",
        "json",
        "-c",
        config.arg(),
    ])
}

async fn ready(admin: SocketAddr) -> bool {
    matches!(
        crate::support::try_get(&format!("http://{admin}/readyz")).await,
        Ok((status, _, _)) if status == 200
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_restart_under_load_through_haproxy_loses_no_request() {
    let upstream = SlowUpstream::start(Duration::ZERO).await;
    // Not ready for 600 ms before it stops accepting: HAProxy, checking
    // every 100 ms and out after 2 failures, stops sending first.
    let config = TempFile::new(
        "[server]\ntrusted_proxies = [\"127.0.0.1\"]\nproxy_protocol = \"v2\"\n\
         [shutdown]\ndrain_delay_ms = 600\ngrace_period_ms = 5000\n\
         [upstream]\nhealth_interval_ms = 100\n",
    );
    let addr = |port: u16| -> SocketAddr { format!("127.0.0.1:{port}").parse().unwrap() };
    let backends: Vec<Backend> = (0..3)
        .map(|_| Backend {
            rpc: addr(free_port()),
            admin: Some(addr(free_port())),
        })
        .collect();
    let mut fleet: Vec<Txgate> = backends
        .iter()
        .map(|b| instance(&upstream.url, &config, b.rpc, b.admin.unwrap()))
        .collect();
    for b in &backends {
        let up = crate::support::eventually(Duration::from_secs(10), || ready(b.admin.unwrap()));
        assert!(up.await, "an instance never became ready");
    }
    let haproxy = Haproxy::start_with(&backends, Send::ProxyV2);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Steady load: four clients, each call on a fresh connection from its
    // own loopback address. Their answered calls are counted as they come,
    // so that each phase can wait for load instead of for time.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (2..6)
        .map(|n| {
            let (url, stop, answered) = (haproxy.url.clone(), stop.clone(), answered.clone());
            tokio::spawn(async move {
                let from = format!("127.0.0.{n}");
                let (mut ok, mut failed) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    match rpc_from(&url, &from, &[], CHAIN_ID).await {
                        Ok((status, _, body))
                            if status == 200 && body.windows(3).any(|w| w == b"0x1") =>
                        {
                            ok += 1;
                            answered.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok((status, _, body)) => {
                            failed.push(format!("{status} {}", String::from_utf8_lossy(&body)))
                        }
                        Err(e) => failed.push(e),
                    }
                }
                (ok, failed)
            })
        })
        .collect();

    // Load flows: `n` more calls answered from now on (at most 30 s).
    let more_calls = |n: u64| {
        let answered = answered.clone();
        async move {
            let floor = answered.load(Ordering::SeqCst) + n;
            let flowed = crate::support::eventually(Duration::from_secs(30), || async {
                answered.load(Ordering::SeqCst) >= floor
            })
            .await;
            assert!(flowed, "the load stalled");
        }
    };
    // Restart each instance in turn with SIGTERM, under load before,
    // during and after.
    for (i, b) in backends.iter().enumerate() {
        more_calls(40).await;
        fleet[i].proc.signal(libc::SIGTERM);
        let exited = fleet[i].proc.wait_timeout(Duration::from_secs(10));
        assert!(
            exited.is_some_and(|s| s.success()),
            "instance {i} did not stop cleanly"
        );
        fleet[i] = instance(&upstream.url, &config, b.rpc, b.admin.unwrap());
        let up = crate::support::eventually(Duration::from_secs(10), || ready(b.admin.unwrap()));
        assert!(up.await, "instance {i} did not come back");
        // HAProxy takes it back at its next check.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    more_calls(40).await;
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed) = (0, Vec::new());
    for client in clients {
        let (o, f) = client.await.unwrap();
        ok += o;
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {:?}",
        failed.len(),
        ok as usize + failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(ok > 100, "too little load to mean anything: {ok}");
}
