//! The sequencer's pool asks txgate (Aeges `VerifyTransaction`, gRPC over
//! HTTP/2 cleartext) about transactions that never passed its RPC: they
//! go straight to the node here, as gossip or a private endpoint would
//! bring them. Real processes over loopback: anvil, the example sidecar
//! (judging every mined transaction, posting failure reports like the
//! production sidecar, streaming results), txgate; the pool is a tonic
//! client speaking the plugin's wire format.

use std::time::Duration;

use tonic::transport::Channel;
use txgate_proto::aeges_v1::aeges_service_client::AegesServiceClient;
use txgate_proto::aeges_v1::{Transaction, VerifyTransactionRequest};

use crate::credible::{TIP, World, poke, wait_linked, world};
use crate::support::{Eoa, accepted, eventually, fund, metric, send_raw};

/// What the pool plugin sends for `raw`: decoded, its sender recovered,
/// the value as 32 big-endian bytes.
fn pool_tx(raw: &str) -> Transaction {
    let tx = txgate_screen::decode(&txgate_screen::decode_hex(raw).unwrap()).unwrap();
    let sender = txgate_screen::recover_sender(&tx).unwrap();
    Transaction {
        hash: tx.hash.to_vec().into(),
        sender: sender.to_vec().into(),
        to: tx.to.map(|to| to.to_vec().into()),
        value: tx.value.to_be_bytes::<32>().to_vec().into(),
        nonce: 0,
        r#type: 2,
        chain_id: Some(31337),
        payload: tx.input.to_vec().into(),
        gas_limit: tx.gas_limit,
        max_fee_per_gas: Some(20_000_000_000 + TIP as u64),
        max_priority_fee_per_gas: Some(TIP as u64),
        ..Transaction::default()
    }
}

async fn pool_client(port: u16) -> AegesServiceClient<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    AegesServiceClient::new(channel)
}

/// The pool's answer for `tx` under `event_id`; the id must come back.
async fn denied(c: &mut AegesServiceClient<Channel>, event_id: u64, tx: Transaction) -> bool {
    let answer = c
        .verify_transaction(VerifyTransactionRequest {
            event_id,
            transaction: Some(tx),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.event_id, event_id, "event_id echoed");
    answer.denied
}

async fn aeges_world(sidecar_args: &[&str], sources: &str, aeges: u16) -> World {
    world(
        sidecar_args,
        &format!("{sources}[aeges]\nlisten = \"127.0.0.1:{aeges}\"\n"),
    )
    .await
}

/// The sidecar's failure report of a transaction that reached the node
/// without passing txgate: the pool is told `denied` for it and for its
/// calldata from any sender, honest transactions are let in, malformed
/// questions get INVALID_ARGUMENT.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_failure_report_the_pool_is_told_to_deny_the_calldata() {
    let aeges = crate::support::free_port();
    let report_url = format!("http://127.0.0.1:{aeges}/");
    let w = aeges_world(&["--report-url", &report_url], "", aeges).await;
    let (honest, attacker, copycat) = (Eoa::new(31), Eoa::new(32), Eoa::new(33));
    fund(
        &w.anvil.url,
        &[honest.address, attacker.address, copycat.address],
    )
    .await;
    let mut pool = pool_client(aeges).await;
    let attack = attacker.sign(0, w.contract, &poke(13), 0, TIP);
    // Not judged yet: let in; it goes to the node directly (gossip).
    assert!(!denied(&mut pool, 1, pool_tx(&attack)).await);
    accepted(&send_raw(&w.anvil.url, &attack).await);
    let learned = eventually(Duration::from_secs(15), || {
        let mut pool = pool.clone();
        let attack = attack.clone();
        async move { denied(&mut pool, 2, pool_tx(&attack)).await }
    })
    .await;
    assert!(learned, "the report never reached the pool's answers");
    // The same calldata from a fresh sender at a higher tip: denied.
    let copy = copycat.sign(0, w.contract, &poke(13), 0, 100 * TIP);
    assert!(denied(&mut pool, u64::MAX, pool_tx(&copy)).await);
    // Honest traffic to the same contract: let in.
    let fine = honest.sign(0, w.contract, &poke(2), 0, TIP);
    assert!(!denied(&mut pool, 0, pool_tx(&fine)).await);
    // Malformed: INVALID_ARGUMENT, never a verdict.
    let mut short_hash = pool_tx(&fine);
    short_hash.hash = vec![1; 31].into();
    let mut long_value = pool_tx(&fine);
    long_value.value = vec![1; 33].into();
    for bad in [Some(short_hash), Some(long_value), None] {
        let e = pool
            .verify_transaction(VerifyTransactionRequest {
                event_id: 9,
                transaction: bad,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
    let m = w.txgate.metrics().await;
    assert!(metric(&m, "txgate_aeges_reports_total{result=\"accepted\"}") >= 1.0);
    assert!(metric(&m, "txgate_aeges_verify_total{result=\"denied\"}") >= 2.0);
    assert!(metric(&m, "txgate_aeges_verify_total{result=\"allowed\"}") >= 2.0);
    assert_eq!(
        metric(&m, "txgate_aeges_verify_total{result=\"invalid\"}"),
        3.0
    );
    assert!(
        metric(
            &m,
            "txgate_aeges_verify_denials_total{reason=\"denied_fingerprint\"}"
        ) >= 1.0
    );
}

/// The result stream names only the failed transaction's hash; a
/// transaction that entered through the pool alone is known by that hash
/// because the pool asked about it, so its failure bans its calldata.
#[tokio::test(flavor = "multi_thread")]
async fn a_result_for_a_transaction_only_the_pool_saw_bans_its_calldata() {
    let aeges = crate::support::free_port();
    let w = aeges_world(
        &[],
        "[[sidecar.sources]]\nurl = \"{grpc}\"\nprotocol = \"sidecar.transport.v1\"\n",
        aeges,
    )
    .await;
    wait_linked(&w.txgate).await;
    let (attacker, copycat) = (Eoa::new(41), Eoa::new(42));
    fund(&w.anvil.url, &[attacker.address, copycat.address]).await;
    let mut pool = pool_client(aeges).await;
    let attack = attacker.sign(0, w.contract, &poke(13), 0, TIP);
    assert!(!denied(&mut pool, 1, pool_tx(&attack)).await);
    accepted(&send_raw(&w.anvil.url, &attack).await);
    let copy = copycat.sign(0, w.contract, &poke(13), 0, 100 * TIP);
    let learned = eventually(Duration::from_secs(15), || {
        let mut pool = pool.clone();
        let copy = copy.clone();
        async move { denied(&mut pool, 2, pool_tx(&copy)).await }
    })
    .await;
    assert!(
        learned,
        "the failure of a pool-only transaction banned nothing"
    );
    // Over the RPC too.
    crate::support::refused(
        &send_raw(&w.txgate.url, &copy).await,
        200,
        -32003,
        "denied_fingerprint",
    );
    let m = w.txgate.metrics().await;
    assert!(
        metric(
            &m,
            "txgate_sidecar_result_failures_total{hash=\"forwarded\"}"
        ) >= 1.0
    );
}
