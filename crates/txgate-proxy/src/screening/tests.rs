//! The stack over paused tokio time: TTLs and backoff advance with
//! `tokio::time::advance`, as they do in the proxy.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, Signature, TxKind, U256};
use secp256k1::{Message, SECP256K1, SecretKey};
use serde_json::value::RawValue;
use txgate_screen::stage::{
    CheckFingerprint, DecodeEnvelope, FastReject, RecoverSender, SenderBackpressure,
};
use txgate_screen::{
    AssertionKey, Invalidation, Reason, Rejection, Screen, ScreenSettings, decode, decode_hex,
    recover_sender,
};

use super::*;
use crate::screening::state::wall_now;

fn key(seed: u8) -> SecretKey {
    SecretKey::from_byte_array([seed; 32]).unwrap()
}

pub(crate) fn raw(seed: u8, nonce: u64, input: &[u8]) -> String {
    raw_call(seed, nonce, Address::repeat_byte(0xcc), input)
}

/// A signed call to `to` (nonce 0).
pub(crate) fn raw_to(seed: u8, to: Address, input: &[u8]) -> String {
    raw_call(seed, 0, to, input)
}

fn raw_call(seed: u8, nonce: u64, to: Address, input: &[u8]) -> String {
    let tx = TxEip1559 {
        chain_id: 31337,
        nonce,
        gas_limit: 60_000,
        max_fee_per_gas: 10,
        max_priority_fee_per_gas: 1,
        to: TxKind::Call(to),
        value: U256::ZERO,
        access_list: Default::default(),
        input: Bytes::copy_from_slice(input),
    };
    let sig =
        SECP256K1.sign_ecdsa_recoverable(Message::from_digest(tx.signature_hash().0), &key(seed));
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

fn invalidation(raw: &str) -> Invalidation {
    let tx = decode(&decode_hex(raw).unwrap()).unwrap();
    let sender = recover_sender(&tx).unwrap();
    let assertion = AssertionKey {
        id: B256::repeat_byte(0xa5),
        version: 1,
    };
    Invalidation::of(&tx, Some(sender), Some(assertion), wall_now()).unwrap()
}

struct Harness {
    screen: Arc<Screen>,
    stack: Stack,
    metrics: crate::metrics::Metrics,
}

impl Harness {
    fn new(settings: ScreenSettings) -> Harness {
        let screen = Arc::new(Screen::new(
            settings,
            tokio::time::Instant::now().into_std(),
        ));
        Harness {
            stack: stack(None),
            screen,
            metrics: crate::metrics::Metrics::new(),
        }
    }

    fn now(&self) -> Millis {
        self.screen.millis(tokio::time::Instant::now().into_std())
    }

    async fn submit(&self, raw: &str) -> Result<Admitted, Rejection> {
        let laps = Laps::new(&self.metrics.screen.stages, std::time::Instant::now());
        screen(&self.stack, &self.screen, raw, self.now(), laps)
            .await
            .map(|cleared| cleared.admitted)
    }

    /// Observations per step, in the order of [`stage_labels`].
    fn laps(&self) -> Vec<u64> {
        let stages = &self.metrics.screen.stages;
        stages.iter().map(|h| h.get_sample_count()).collect()
    }

    fn apply(&self, batch: &[Invalidation]) {
        self.screen.apply(batch, self.now(), wall_now());
    }
}

fn reason<T>(r: Result<T, Rejection>) -> Option<Reason> {
    r.err().map(|e| e.reason())
}

#[tokio::test(start_paused = true)]
async fn denied_ttl_runs_on_tokio_time() {
    let h = Harness::new(ScreenSettings::default());
    let first = raw(1, 0, &[0xde, 0xad, 0xbe, 0xef, 1]);
    assert!(h.submit(&first).await.is_ok());
    h.apply(&[invalidation(&first)]);
    let copy = raw(2, 0, &[0xde, 0xad, 0xbe, 0xef, 1]);
    assert_eq!(
        reason(h.submit(&copy).await),
        Some(Reason::DeniedFingerprint)
    );
    tokio::time::advance(Duration::from_millis(127_900)).await;
    assert_eq!(
        reason(h.submit(&copy).await),
        Some(Reason::DeniedFingerprint)
    );
    tokio::time::advance(Duration::from_millis(100)).await;
    // Ban over: suspect, one forward goes.
    let admitted = h.submit(&copy).await.unwrap();
    assert!(admitted.suspect);
}

#[tokio::test(start_paused = true)]
async fn recent_failure_expires_and_refuses_before_recovery() {
    let h = Harness::new(ScreenSettings::default());
    let first = raw(1, 0, &[1, 2, 3, 4]);
    h.submit(&first).await.unwrap();
    let senders_before = h.screen.sizes().senders;
    let mut inv = invalidation(&first);
    // Another fingerprint: only the tx hash matters here.
    inv.fingerprint = B256::repeat_byte(9);
    h.apply(&[inv]);
    // A garbage signature under the same bytes would fail recovery; the
    // fast-reject answers first. Same bytes here: the hash refuses it.
    assert_eq!(reason(h.submit(&first).await), Some(Reason::RecentFailure));
    assert_eq!(h.screen.sizes().senders, senders_before);
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(h.submit(&first).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn backoff_lifts_after_its_window() {
    let mut settings = ScreenSettings::default();
    settings.backpressure.capacity = 2.0;
    settings.backpressure.refill_per_sec = 0.1;
    let h = Harness::new(settings);
    for i in 0..2u8 {
        let tx = raw(7, u64::from(i), &[0xaa, 0xbb, 0xcc, 0xdd, i]);
        h.submit(&tx).await.unwrap();
        h.apply(&[invalidation(&tx)]);
    }
    let next = raw(7, 2, &[0x11, 0x22, 0x33, 0x44]);
    match h.submit(&next).await {
        Err(Rejection::SenderBackoff { retry_after }) => assert_eq!(retry_after, 1000),
        other => panic!("{other:?}"),
    }
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(reason(h.submit(&next).await), Some(Reason::SenderBackoff));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(h.submit(&next).await.is_ok());
    // Someone else was never affected.
    assert!(
        h.submit(&raw(8, 0, &[0xaa, 0xbb, 0xcc, 0xdd, 9]))
            .await
            .is_ok()
    );
}

thread_local! {
    /// The taps a call went through, in order.
    static TAPS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A stage that only records that the call reached it.
enum Tap<const N: usize> {}

impl<const N: usize> Stage for Tap<N> {
    const NAME: &'static str = "tap";
    fn check(_: &Screen, _: &mut Candidate) -> Result<(), Rejection> {
        TAPS.with(|t| t.borrow_mut().push(N));
        Ok(())
    }
}

/// The real stages in `Stages` order, each followed by a tap, around the
/// real probe.
type Traced = (
    Tap<0>,
    (
        FastReject,
        (
            Tap<1>,
            (
                DecodeEnvelope,
                (
                    Tap<2>,
                    (
                        CheckFingerprint,
                        (
                            Tap<3>,
                            (RecoverSender, (Tap<4>, (SenderBackpressure, (Tap<5>, ())))),
                        ),
                    ),
                ),
            ),
        ),
    ),
);

/// Defect: this test only checked the reason, so a stack that ran the
/// stages below a refusal would still have passed it. Every stage is
/// followed by a tap: a refusal must leave every tap below it untouched.
#[tokio::test(start_paused = true)]
async fn bad_input_stops_at_the_first_stage() {
    let h = Harness::new(ScreenSettings::default());
    let traced = <Traced as Layered>::layer(Probe::default());
    let run = |param: &'static str| {
        TAPS.with(|t| t.borrow_mut().clear());
        let (screen, traced, now) = (&h.screen, &traced, h.now());
        async move {
            let result = screen_call(traced, screen, param, now).await;
            (reason(result), TAPS.with(|t| t.borrow().clone()))
        }
    };
    // Bad hex: refused before the stack, no stage runs.
    for bad in ["0x", "0xzz", "abcd"] {
        assert_eq!(
            run(bad).await,
            (Some(Reason::InvalidTransaction), vec![]),
            "{bad}"
        );
    }
    // A bad envelope: refused by the decoder, nothing below it runs.
    for bad in ["0x02", "0xf8"] {
        assert_eq!(
            run(bad).await,
            (Some(Reason::InvalidTransaction), vec![0, 1]),
            "{bad}"
        );
    }
    // A good one runs through every stage, once each, in order.
    let good: &'static str = Box::leak(raw(3, 0, &[1, 2, 3, 4]).into_boxed_str());
    assert_eq!(run(good).await, (None, vec![0, 1, 2, 3, 4, 5]));
    // A recently failed hash stops at the fast-reject: no decoding, no
    // ECDSA (no sender cached), nothing below.
    h.apply(&[invalidation(good)]);
    let senders = h.screen.sizes().senders;
    let pending = h.screen.sizes().pending;
    assert_eq!(run(good).await, (Some(Reason::RecentFailure), vec![0]));
    assert_eq!(h.screen.sizes().senders, senders);
    assert_eq!(h.screen.sizes().pending, pending);
}

async fn screen_call<S>(
    stack: &S,
    screen_state: &Screen,
    param: &str,
    now: Millis,
) -> Result<Admitted, Rejection>
where
    S: for<'a> Service<Submission<'a>, Response = Cleared, Error = Rejection> + Clone,
{
    screen(
        stack,
        screen_state,
        param,
        now,
        Laps::new(&[], std::time::Instant::now()),
    )
    .await
    .map(|c| c.admitted)
}

/// Each step of the stack is timed in its own histogram, and a refusal
/// times the steps up to the one that refused, no further.
#[tokio::test]
async fn every_step_is_timed_up_to_the_refusal() {
    let h = Harness::new(ScreenSettings::default());
    assert_eq!(
        stage_labels(),
        [
            "candidate",
            "fast_reject",
            "decode",
            "fingerprint",
            "recover",
            "backpressure",
            "probe"
        ]
    );
    let raw = raw(1, 0, &[0xa9, 0x05, 0x9c, 0xbb, 1]);
    assert!(h.submit(&raw).await.is_ok());
    assert_eq!(h.laps(), vec![1; 7]);
    h.apply(&[invalidation(&raw)]);
    // The same tx again: refused by the recent-failure stage.
    assert_eq!(reason(h.submit(&raw).await), Some(Reason::RecentFailure));
    assert_eq!(h.laps(), vec![2, 2, 1, 1, 1, 1, 1]);
    // Not hex: refused while making the candidate.
    assert!(h.submit("0xzz").await.is_err());
    assert_eq!(h.laps(), vec![3, 2, 1, 1, 1, 1, 1]);
}

#[test]
fn raw_param_takes_the_first_string() {
    let p = |s: &str| RawValue::from_string(s.to_string()).unwrap();
    let v = p(r#"["0xab", {"knownAccounts": {}}]"#);
    assert_eq!(raw_param(Some(&v)).as_deref(), Some("0xab"));
    let v = p(r#"["0x\u0061b"]"#);
    assert_eq!(raw_param(Some(&v)).as_deref(), Some("0xab"));
    for bad in [r#"[]"#, r#"[1]"#, r#"{"tx":"0x"}"#, r#"[null]"#] {
        assert_eq!(raw_param(Some(&p(bad))), None, "{bad}");
    }
    assert_eq!(raw_param(None), None);
    assert!(is_screened("eth_sendRawTransaction"));
    assert!(is_screened("eth_sendRawTransactionConditional"));
    assert!(is_screened("eth_sendRawTransactionSync"));
    assert!(!is_screened("eth_sendRawTransactionX"));
    assert!(!is_screened("eth_call"));
}
