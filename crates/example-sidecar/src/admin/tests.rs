//! The admin endpoint over a hub in process: injections (raw transactions,
//! storms) and raw results reach subscribers, a storm is paced to a slow
//! subscriber, and accept errors are backed off and logged once a burst.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use alloy_consensus::TxEip1559;
use alloy_primitives::{TxKind, U256};
use tokio_stream::StreamExt;

use super::*;
use crate::config::Config;
use crate::testutil::{receiver, sign};

fn storm(n: u64) -> Injected {
    serde_json::from_value(json!({"synthetic": n,
        "assertion_id": format!("0x{}", "b7".repeat(32)), "assertion_version": 1}))
    .expect("injected")
}

fn hub(extra: &str) -> Arc<Hub> {
    Arc::new(Hub::new(Config::parse(extra).expect("config")))
}

fn admin(hub: &Arc<Hub>) -> Admin {
    Admin::new(hub.clone(), Reporter::disabled())
}

fn raw_call(to: Address, input: &[u8]) -> Vec<u8> {
    sign(TxEip1559 {
        chain_id: 31337,
        nonce: 4,
        gas_limit: 90_000,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TxKind::Call(to),
        value: U256::from(5),
        access_list: Default::default(),
        input: input.to_vec().into(),
    })
}

#[tokio::test(flavor = "current_thread")]
async fn a_raw_tx_injection_is_also_a_result_and_a_report() {
    let (addr, mut reports) = receiver(200, Duration::ZERO).await;
    let hub = hub("");
    let admin = Admin::new(
        hub.clone(),
        Reporter::new(&format!("http://{addr}/?token=t")).expect("reporter"),
    );
    hub.results.publish(Executed {
        block: 12,
        index: 0,
        tx_hash: B256::ZERO,
        status: 1,
        gas_used: 0,
        error: String::new(),
    });
    let results = hub.results.subscribe(Some(U256::from(12)));
    let invalidations = hub.subscribe();
    let raw = raw_call(Address::repeat_byte(0xc0), &[0xaa, 0x60, 0xe7, 0x33, 1]);
    let item: Injected = serde_json::from_value(json!({
        "raw_tx": format!("0x{}", alloy_primitives::hex::encode(&raw)),
        "assertion_id": format!("0x{}", "b7".repeat(32)), "assertion_version": 2}))
    .expect("item");
    let mut fingerprints = Vec::new();
    assert_eq!(
        inject(&admin, &item, &mut None, &mut fingerprints).await,
        Ok(1)
    );
    drop((hub, admin));
    let tx = decode(&raw).expect("decodes");
    let sender = recover_sender(&tx).expect("sender");
    let invalidations: Vec<_> = invalidations.collect().await;
    assert_eq!(invalidations.len(), 1);
    assert_eq!(invalidations[0].tx_hash, Some(tx.hash));
    let results: Vec<_> = results.collect().await;
    assert_eq!(results.len(), 1, "at the latest block: not filtered out");
    let id = results[0].tx_execution_id.clone().expect("id");
    assert_eq!(id.tx_hash, tx.hash.to_vec());
    assert_eq!(U256::from_be_slice(&id.block_number), U256::from(12));
    assert_eq!(results[0].status, 5);
    assert!(results[0].error.contains(&"b7".repeat(32)));
    let (path, _, body) = tokio::time::timeout(Duration::from_secs(5), reports.recv())
        .await
        .expect("in time")
        .expect("a report");
    assert_eq!(path, "/report?token=t");
    assert_eq!(body[0], json!(format!("{}", tx.hash)));
    assert_eq!(
        body[1]["caller"],
        json!(sender),
        "lowercase hex, as alloy serializes"
    );
    assert_eq!(body[1]["nonce"], json!(4));
    assert_eq!(body[1]["value"], json!("0x5"));
    assert_eq!(body[1]["gas_price"], json!(2_000_000_000u64));
    assert_eq!(body[1]["gas_priority_fee"], json!(1_000_000_000u64));
    assert_eq!(body[1]["chain_id"], json!(31337));
}

/// POSTs `body` to `path` on the admin endpoint at `addr`.
async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let request = Request::post(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let response = client.request(request).await.expect("response");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

#[tokio::test(flavor = "current_thread")]
async fn raw_results_are_published_as_given() {
    let hub = hub("");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(listener, admin(&hub)));
    let mut results = Box::pin(hub.results.subscribe(None));
    let unknown = format!("0x{}", "ee".repeat(32));
    let (status, answer) = post(
        addr,
        "/results",
        json!([
            {"tx_hash": unknown, "status": 6},
            {"tx_hash": unknown, "status": 5, "block_number": 3, "index": 2,
             "gas_used": 7, "error": "boom"},
        ]),
    )
    .await;
    assert_eq!(
        (status, answer),
        (200, json!({"accepted": 2, "subscribers": 1}))
    );
    let first = results.next().await.expect("a result");
    assert_eq!(first.status, 6, "a status this build does not know, as is");
    let id = first.tx_execution_id.expect("id");
    assert_eq!((id.tx_hash, id.index), (vec![0xee; 32], 0));
    assert_eq!(U256::from_be_slice(&id.block_number), U256::ZERO);
    let second = results.next().await.expect("a result");
    let id = second.tx_execution_id.expect("id");
    assert_eq!(U256::from_be_slice(&id.block_number), U256::from(3));
    assert_eq!(
        (id.index, second.gas_used, second.error.as_str()),
        (2, 7, "boom")
    );
    // One object works too; a short hash does not.
    let one = json!({"tx_hash": unknown, "status": 1});
    assert_eq!(post(addr, "/results", one).await.0, 200);
    let short = json!({"tx_hash": "0x01", "status": 1});
    assert_eq!(post(addr, "/results", short).await.0, 400);
}

#[tokio::test(flavor = "current_thread")]
async fn broadcast_buffer_oversized_a_synthetic_storm_reaches_a_slow_subscriber_without_loss() {
    let hub = hub("stream_buffer = 16\n");
    let mut stream = Box::pin(hub.subscribe());
    let reader = tokio::spawn(async move {
        let mut got = 0u64;
        while stream.next().await.is_some() {
            got += 1;
            // Slower than the storm.
            tokio::task::yield_now().await;
        }
        got
    });
    let mut pace = Some(Duration::from_secs(5));
    let injected = inject(&admin(&hub), &storm(2_000), &mut pace, &mut Vec::new()).await;
    assert_eq!(injected, Ok(2_000));
    assert!(
        pace.is_some(),
        "never gave up on a subscriber making progress"
    );
    drop(hub);
    assert_eq!(reader.await.expect("reader"), 2_000, "invalidations lost");
}

#[tokio::test(flavor = "current_thread")]
async fn broadcast_buffer_oversized_a_stalled_subscriber_does_not_hold_a_storm_forever() {
    let hub = hub("stream_buffer = 4\n");
    let _stalled = hub.subscribe();
    let started = Instant::now();
    let mut pace = Some(Duration::from_millis(20));
    let injected = inject(&admin(&hub), &storm(1_000), &mut pace, &mut Vec::new()).await;
    assert_eq!(injected, Ok(1_000));
    assert_eq!(pace, None, "given up on once, for the rest of the request");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn without_subscribers_a_storm_is_not_paced() {
    let hub = hub("stream_buffer = 4\n");
    let mut pace = Some(Duration::from_secs(5));
    let started = Instant::now();
    assert_eq!(
        inject(&admin(&hub), &storm(1_000), &mut pace, &mut Vec::new()).await,
        Ok(1_000)
    );
    assert!(pace.is_some());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn accept_error_spin_backoff_doubles_from_50ms_to_1s_and_resets() {
    let mut backoff = AcceptBackoff::new();
    let pauses: Vec<u64> = (0..7)
        .map(|_| backoff.failed().0.as_millis() as u64)
        .collect();
    assert_eq!(pauses, [50, 100, 200, 400, 800, 1_000, 1_000]);
    assert_eq!(backoff.succeeded(), Some(7));
    assert_eq!(backoff.succeeded(), None);
    assert_eq!(backoff.failed().0, Duration::from_millis(50));
}

#[test]
fn accept_error_spin_logs_once_per_failure_burst() {
    let mut backoff = AcceptBackoff::new();
    let logged: Vec<bool> = (0..5).map(|_| backoff.failed().1).collect();
    assert_eq!(logged, [true, false, false, false, false]);
    backoff.succeeded();
    assert!(backoff.failed().1, "a new burst is logged again");
}

#[tokio::test(flavor = "current_thread")]
async fn accept_error_spin_a_failing_accept_is_not_retried_in_a_busy_loop() {
    let attempts = AtomicUsize::new(0);
    let accept = || {
        attempts.fetch_add(1, Ordering::Relaxed);
        async {
            tokio::task::yield_now().await;
            Err::<(), _>(std::io::Error::from_raw_os_error(24)) // EMFILE
        }
    };
    let ran = tokio::time::timeout(Duration::from_millis(300), accept_loop(accept, |()| {}));
    assert!(ran.await.is_err(), "the loop runs forever");
    // At 0, 50, 150 ms (the next at 350 ms).
    let attempts = attempts.load(Ordering::Relaxed);
    assert!((2..=4).contains(&attempts), "{attempts} attempts in 300 ms");
}

#[tokio::test(flavor = "current_thread")]
async fn accept_error_spin_connections_are_served_after_errors() {
    let attempts = AtomicUsize::new(0);
    let served = AtomicUsize::new(0);
    let accept = || {
        let n = attempts.fetch_add(1, Ordering::Relaxed);
        async move {
            tokio::task::yield_now().await;
            if n % 3 == 2 {
                Ok(n)
            } else {
                Err(std::io::Error::from_raw_os_error(24))
            }
        }
    };
    let serve = |_: usize| {
        served.fetch_add(1, Ordering::Relaxed);
    };
    let _ = tokio::time::timeout(Duration::from_millis(400), accept_loop(accept, serve)).await;
    // Each burst of two errors pauses 50 + 100 ms: reset after each success.
    assert!(
        served.load(Ordering::Relaxed) >= 2,
        "{}",
        served.load(Ordering::Relaxed)
    );
}
