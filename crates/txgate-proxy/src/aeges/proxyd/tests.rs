#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Bytes as TxBytes, Signature, TxKind, U256};
use http_body_util::BodyExt;
use secp256k1::{Message, SECP256K1, SecretKey};
use serde_json::Value;
use txgate_screen::{Invalidation, Screen, ScreenSettings, decode, decode_hex, recover_sender};

use super::*;
use crate::screening::tests::raw;

const PEER: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn hook(monitor_only: bool, burst: u32) -> (ProxydHook, Arc<Screen>, Arc<Metrics>) {
    let screen = Arc::new(Screen::new(ScreenSettings::default(), Instant::now()));
    let metrics = Arc::new(Metrics::new());
    let hook = ProxydHook::new(
        HookSettings {
            allow: vec!["127.0.0.0/8".parse().unwrap()],
            token: None,
            max_bytes: 1 << 20,
            txs_per_sec: 1000,
            burst,
            max_in_flight: 8,
            monitor_only,
        },
        screen.clone(),
        metrics.clone(),
    );
    (hook, screen, metrics)
}

/// A signed contract creation.
fn creation(seed: u8) -> String {
    let tx = TxEip1559 {
        chain_id: 31337,
        nonce: 0,
        gas_limit: 100_000,
        max_fee_per_gas: 10,
        max_priority_fee_per_gas: 1,
        to: TxKind::Create,
        value: U256::ZERO,
        access_list: Default::default(),
        input: TxBytes::from_static(&[0x60, 0x00]),
    };
    let key = SecretKey::from_byte_array([seed; 32]).unwrap();
    let sig = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(tx.signature_hash().0), &key);
    let (id, compact) = sig.serialize_compact();
    let signature = Signature::new(
        U256::from_be_slice(&compact[..32]),
        U256::from_be_slice(&compact[32..]),
        i32::from(id) == 1,
    );
    let envelope: TxEnvelope = tx.into_signed(signature).into();
    format!(
        "0x{}",
        alloy_primitives::hex::encode(envelope.encoded_2718())
    )
}

fn body(raws: &[&str]) -> Vec<u8> {
    let bytes: Vec<Vec<u8>> = raws
        .iter()
        .map(|r| decode_hex(r).unwrap().to_vec())
        .collect();
    let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    proxyd::encode::request(&slices).unwrap()
}

fn ban(screen: &Screen, raw: &str) {
    let tx = decode(&decode_hex(raw).unwrap()).unwrap();
    let sender = recover_sender(&tx).unwrap();
    let bad =
        Invalidation::of(&tx, Some(sender), None, crate::screening::state::wall_now()).unwrap();
    screen.apply(&[bad], screen.millis(Instant::now()), bad.started);
}

async fn answer(hook: &ProxydHook, raws: &[&str]) -> (StatusCode, Value) {
    let response = hook.answer(PEER, &body(raws), Instant::now());
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// A creation has no fingerprint: judged by hash and sender only,
/// answered `false`, counted, not remembered.
#[tokio::test]
async fn a_creation_is_answered_false_and_counted() {
    let (hook, _, metrics) = hook(false, 100);
    let create = creation(3);
    let (status, a) = answer(&hook, &[&create]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(a["errorCode"], "");
    assert_eq!(a["unauthorized"].as_object().unwrap().len(), 1);
    assert!(
        a["unauthorized"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| v == false)
    );
    assert_eq!(metrics.proxyd.creations.get(), 1);
    assert_eq!(metrics.proxyd.remembered.get(), 0);
    assert_eq!(metrics.proxyd.allowed.get(), 1);
}

/// Monitor-only: `false` for a banned calldata, counted as what it would
/// have refused; the request is then forwarded whole, so it is
/// remembered. Enforcing: `true`, and nothing remembered.
#[tokio::test]
async fn monitor_only_answers_false_and_counts_what_it_would_refuse() {
    for monitor_only in [true, false] {
        let (hook, screen, metrics) = hook(monitor_only, 100);
        ban(&screen, &raw(1, 0, &[0xde, 0xad, 0xbe, 0xef, 7]));
        let copy = raw(2, 0, &[0xde, 0xad, 0xbe, 0xef, 7]);
        let fine = raw(3, 0, &[0xaa, 0xbb, 0xcc, 0xdd, 1]);
        let (_, a) = answer(&hook, &[&copy, &fine]).await;
        let verdicts = a["unauthorized"].as_object().unwrap();
        let trues = verdicts.values().filter(|v| **v == true).count();
        assert_eq!(trues, usize::from(!monitor_only), "{a}");
        let p = &metrics.proxyd;
        let reason = txgate_screen::Reason::DeniedFingerprint;
        assert_eq!(p.refusals(reason), 1);
        if monitor_only {
            assert_eq!(p.would_refuse.get(), 1);
            assert_eq!(p.txs_would_refuse.get(), 1);
            assert_eq!(p.remembered.get(), 2);
        } else {
            assert_eq!(p.refused.get(), 1);
            assert_eq!(p.txs_refused.get(), 1);
            assert_eq!(p.remembered.get(), 0);
        }
    }
}

/// Puts the call of `raw`'s target with selector `deadbeef` into an
/// assertion cooldown now; its start and the cooldown's trickle interval.
fn cooling(screen: &Screen) -> (Instant, std::time::Duration) {
    let settings = ScreenSettings::default().cooldown;
    let assertion = Some(txgate_screen::AssertionKey {
        id: alloy_primitives::B256::repeat_byte(0xa5),
        version: 1,
    });
    let start = Instant::now();
    let failed: Vec<Invalidation> = (0..settings.distinct_fingerprints)
        .map(|i| {
            let raw = raw(100 + i as u8, 0, &[0xde, 0xad, 0xbe, 0xef, i as u8]);
            let tx = decode(&decode_hex(&raw).unwrap()).unwrap();
            let sender = recover_sender(&tx).unwrap();
            Invalidation::of(&tx, Some(sender), assertion, 0).unwrap()
        })
        .collect();
    assert_eq!(screen.apply(&failed, screen.millis(start), 0).cooldowns, 1);
    let trickle = std::time::Duration::from_millis(settings.trickle_interval);
    (start, trickle)
}

/// proxyd forwards on the hook's word, so the hook takes a cooldown's
/// trickle slot as the request path does: one call on the cooled call per
/// trickle interval, a second one in the same request refused (and then
/// nothing taken), and a transaction it let through asked about again
/// still let through. Before, the slot once open stayed open for the rest
/// of the cooldown, and every call on it was answered `false`.
#[test]
fn a_cooldowns_trickle_lets_one_call_through_the_hook_per_interval() {
    let (hook, screen, metrics) = hook(false, 1000);
    let (start, trickle) = cooling(&screen);
    let call = |seed: u8| raw(seed, 0, &[0xde, 0xad, 0xbe, 0xef, 0x77, seed]);
    let refused = |a: &Value| {
        a["unauthorized"]
            .as_object()
            .unwrap()
            .values()
            .filter(|v| **v == true)
            .count()
    };
    let ask = |raws: &[&str], at: Instant| {
        let response = hook.answer(PEER, &body(raws), at);
        let bytes = futures_executor(response);
        serde_json::from_slice::<Value>(&bytes).unwrap()
    };
    // Within the first interval the slot is closed.
    assert_eq!(refused(&ask(&[&call(1)], start)), 1);
    // Open: the first call takes it, the next one is refused.
    let open = start + trickle;
    let first = call(2);
    assert_eq!(refused(&ask(&[&first], open)), 0);
    assert_eq!(refused(&ask(&[&call(3)], open)), 1);
    let cooled = txgate_screen::Reason::AssertionCooldown;
    assert_eq!(metrics.proxyd.refusals(cooled), 2);
    // The one let through, asked again (proxyd retrying): let through.
    assert_eq!(refused(&ask(&[&first], open)), 0);
    // Next interval: two on the call in one request, one too many; the
    // refused request took nothing, so one alone goes.
    let next = start + 2 * trickle;
    let (a, b) = (call(4), call(5));
    assert_eq!(refused(&ask(&[&a, &b], next)), 1);
    assert_eq!(refused(&ask(&[&a], next)), 0);
    assert_eq!(metrics.proxyd.refusals(cooled), 3);
}

/// A source over its rate has nothing remembered, except a transaction
/// that took a trickle slot: proxyd forwards it, and the pool, asked about
/// it next, must find it forwarded rather than refuse it for the slot it
/// took.
#[test]
fn over_its_rate_a_trickled_transaction_is_still_remembered() {
    let (hook, screen, metrics) = hook(false, 1);
    let (start, trickle) = cooling(&screen);
    let open = start + trickle;
    let trickled = raw(40, 0, &[0xde, 0xad, 0xbe, 0xef, 0x77, 40]);
    let other = raw(41, 0, &[0xaa, 0xbb, 0xcc, 0xdd, 41]);
    // The burst of one used up by another transaction, then two more at
    // the same instant: over the rate; verdicts, all `false`.
    let first = raw(42, 0, &[0xaa, 0xbb, 0xcc, 0xdd, 42]);
    futures_executor(hook.answer(PEER, &body(&[&first]), open));
    assert_eq!(metrics.proxyd.remembered.get(), 1);
    let response = hook.answer(PEER, &body(&[&trickled, &other]), open);
    let a: Value = serde_json::from_slice(&futures_executor(response)).unwrap();
    let verdicts = a["unauthorized"].as_object().unwrap();
    assert!(verdicts.values().all(|v| *v == false), "{a}");
    assert_eq!(metrics.proxyd.over_rate.get(), 1);
    assert_eq!(metrics.proxyd.remembered.get(), 2, "the trickled one only");
    // The pool's question about it: let in.
    let tx = decode(&decode_hex(&trickled).unwrap()).unwrap();
    let pool = PoolTx {
        hash: tx.hash,
        sender: recover_sender(&tx).unwrap(),
        to: tx.to,
        value: tx.value,
        gas_limit: tx.gas_limit,
        payload: &tx.input,
    };
    let now = screen.millis(open) + 1;
    assert!(!screen.judge(&pool, now).denied(), "refused by the pool");
}

/// A source over its rate (in transactions) still gets verdicts (an error
/// would let proxyd through), a banned one included, but nothing of it is
/// remembered; another source keeps its own rate.
#[tokio::test]
async fn over_its_rate_a_source_gets_verdicts_but_fills_nothing() {
    let (hook, screen, metrics) = hook(false, 100);
    let txs: Vec<String> = (0..100).map(|n| raw(9, n, &[1, 2, 3, 4])).collect();
    let txs: Vec<&str> = txs.iter().map(String::as_str).collect();
    let at = Instant::now();
    let full = body(&txs);
    assert_eq!(hook.answer(PEER, &full, at).status(), StatusCode::OK);
    assert_eq!(metrics.proxyd.remembered.get(), 100);
    let over = hook.answer(PEER, &full, at);
    assert_eq!(over.status(), StatusCode::OK);
    assert_eq!(metrics.proxyd.over_rate.get(), 1);
    assert_eq!(
        metrics.proxyd.remembered.get(),
        100,
        "nothing more remembered"
    );
    // A banned transaction over the rate is still refused.
    let bad = raw(4, 0, &[0xde, 0xad, 0xbe, 0xef, 9]);
    ban(&screen, &raw(5, 0, &[0xde, 0xad, 0xbe, 0xef, 9]));
    let response = hook.answer(PEER, &body(&[&bad]), at);
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let a: Value = serde_json::from_slice(&bytes).unwrap();
    let verdicts = a["unauthorized"].as_object().unwrap();
    assert_eq!(verdicts.values().next(), Some(&Value::Bool(true)), "{a}");
    let other: IpAddr = "127.0.0.9".parse().unwrap();
    assert_eq!(hook.answer(other, &full, at).status(), StatusCode::OK);
    assert_eq!(
        metrics.proxyd.over_rate.get(),
        2,
        "the banned one's request was over too"
    );
}

/// Past the table's size, sources whose debt is paid make room: a new
/// source gets a rate of its own, not the shared one.
#[test]
fn paid_up_sources_make_room_for_new_ones() {
    let (hook, _, _) = hook(false, 100);
    let at = Instant::now();
    for i in 0..MAX_SOURCES {
        let peer = IpAddr::V6(std::net::Ipv6Addr::from(i as u128 + 1));
        assert!(hook.charge(peer, 1, at));
    }
    // Later, all paid up: a newcomer takes a slot of its own and may
    // spend a whole burst.
    let later = at + std::time::Duration::from_secs(1);
    let newcomer: IpAddr = "10.9.9.9".parse().unwrap();
    assert!(hook.charge(newcomer, 100, later));
    assert!(hook.sources.lock().unwrap().contains_key(&newcomer));
}

/// Every error answer is the JSON proxyd reads, with no `true` in it.
#[test]
fn error_answers_are_json_with_a_code() {
    let (hook, _, metrics) = hook(false, 100);
    for error in HookError::ALL {
        let response = hook.error(error);
        assert!(response.status().as_u16() >= 400, "{error:?}");
        let body = futures_executor(response);
        let a: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(a["errorCode"], error.code());
        assert!(!a["errorMessage"].as_str().unwrap().is_empty());
        assert_eq!(a["unauthorized"], serde_json::json!({}));
        assert_eq!(metrics.proxyd.errors(error), 1);
    }
}

fn futures_executor(response: Response<Body>) -> Vec<u8> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec()
        })
}
