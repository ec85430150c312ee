//! The checks in order, with the codes op-geth and op-txproxy use.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::value::RawValue;

use super::*;
use crate::screening::tests::raw;

const ENTRY_POINT: &str = "0x5FF137D4b0FDCD49DcA30c7CF57E578a026d2789";

fn conditions(config: ConditionalConfig) -> (Conditions, Metrics) {
    let metrics = Metrics::new();
    let rates = Rates::new(
        &config,
        &txgate_config::RedisConfig::default(),
        None,
        &metrics,
    )
    .map(Arc::new);
    let (targets, callers) = (
        config.target_addresses().unwrap(),
        config.caller_addresses().unwrap(),
    );
    (
        Conditions::new(&config, &targets, &callers, rates, &metrics),
        metrics,
    )
}

/// The checks of a request without a signature header.
trait Unsigned {
    fn check_unsigned(
        &self,
        params: Option<&RawValue>,
        now: Instant,
        monitor_only: bool,
    ) -> Result<(), ConditionRefusal>;
}

impl Unsigned for Conditions {
    fn check_unsigned(
        &self,
        params: Option<&RawValue>,
        now: Instant,
        monitor_only: bool,
    ) -> Result<(), ConditionRefusal> {
        Conditions::check(self, params, &Signed::new(None, b""), now, monitor_only)
    }
}

fn params(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

/// A raw transaction to `to` (the test signer's), as 0x-hex.
fn raw_to(to: Address) -> String {
    crate::screening::tests::raw_to(7, to, &[1, 2, 3, 4])
}

#[test]
fn each_check_refuses_in_order_and_counts() {
    let (c, metrics) = conditions(ConditionalConfig::default());
    let entry: Address = ENTRY_POINT.parse().unwrap();
    let to_entry = raw_to(entry);
    let ok = params(&format!(r#"["{to_entry}", {{"blockNumberMax": "0x10"}}]"#));
    assert_eq!(c.check_unsigned(Some(&ok), Instant::now(), false), Ok(()));
    let cases = [
        (format!(r#"["{to_entry}"]"#), "missing"),
        (format!(r#"["{to_entry}", {{"nope": 1}}]"#), "invalid"),
        (
            format!(r#"["{to_entry}", {{"timestampMin": 2, "timestampMax": 1}}]"#),
            "invalid",
        ),
        (r#"["0xzz", {}]"#.to_string(), "undecodable"),
        (format!(r#"["{}", {{}}]"#, raw(3, 0, &[1])), "target"),
    ];
    for (text, label) in &cases {
        let refusal = c
            .check_unsigned(Some(&params(text)), Instant::now(), false)
            .unwrap_err();
        assert_eq!(refusal.as_str(), *label, "{text}");
    }
    assert_eq!(
        c.check_unsigned(None, Instant::now(), false).unwrap_err(),
        ConditionRefusal::Missing
    );
    // A malformed condition is refused before the transaction is decoded.
    let both_bad = params(r#"["0xzz", {"timestampMin": "x"}]"#);
    assert_eq!(
        c.check_unsigned(Some(&both_bad), Instant::now(), false)
            .unwrap_err()
            .as_str(),
        "invalid"
    );
    let text = String::from_utf8(metrics.render()).unwrap();
    assert!(text.contains("txgate_conditional_total{result=\"accepted\"} 1"));
    assert!(text.contains("txgate_conditional_total{result=\"invalid\"} 3"));
    assert!(text.contains("txgate_conditional_invalid_total{reason=\"timestamp_range\"} 1"));
    assert!(text.contains("txgate_conditional_total{result=\"target\"} 1"));
}

#[test]
fn cost_over_the_max_disabled_any_target_and_monitor_only() {
    let entry: Address = ENTRY_POINT.parse().unwrap();
    let two_roots = format!(
        r#"["{}", {{"knownAccounts": {{"0x{:040x}": "0x{:064x}"}}}}]"#,
        raw_to(entry),
        1,
        2
    );
    let (c, _) = conditions(ConditionalConfig {
        max_cost: 1,
        ..ConditionalConfig::default()
    });
    let refusal = c
        .check_unsigned(Some(&params(&two_roots)), Instant::now(), false)
        .unwrap_err();
    assert_eq!(
        refusal,
        ConditionRefusal::Condition(Invalid::CostExceeded { cost: 2, max: 1 })
    );
    let (off, _) = conditions(ConditionalConfig {
        enabled: false,
        ..ConditionalConfig::default()
    });
    assert_eq!(
        off.check_unsigned(Some(&params(&two_roots)), Instant::now(), false),
        Err(ConditionRefusal::Disabled)
    );
    // Monitor-only does not override the switch...
    assert_eq!(
        off.check_unsigned(Some(&params(&two_roots)), Instant::now(), true),
        Err(ConditionRefusal::Disabled)
    );
    // ...and lets a refusal of the checks through, counted.
    assert_eq!(
        c.check_unsigned(Some(&params(&two_roots)), Instant::now(), true),
        Ok(())
    );
    let (any, _) = conditions(ConditionalConfig {
        targets: Vec::new(),
        ..ConditionalConfig::default()
    });
    let elsewhere = params(&format!(r#"["{}", {{}}]"#, raw(3, 0, &[1])));
    assert_eq!(
        any.check_unsigned(Some(&elsewhere), Instant::now(), false),
        Ok(())
    );
}

/// The instance's bucket in lookups: a burst, then the rate; each call
/// charged its condition's cost; a refusal says when it would fit.
#[test]
fn calls_are_charged_their_cost_against_one_rate() {
    let (c, metrics) = conditions(ConditionalConfig {
        rate_per_sec: 100,
        burst: 10,
        ..ConditionalConfig::default()
    });
    let entry: Address = ENTRY_POINT.parse().unwrap();
    // Two accounts with a root each: 4 lookups.
    let four = params(&format!(
        r#"["{}", {{"knownAccounts": {{"0x{:040x}": "0x{:064x}", "0x{:040x}": "0x{:064x}"}}}}]"#,
        raw_to(entry),
        1,
        1,
        2,
        2
    ));
    let t0 = Instant::now();
    assert_eq!(c.check_unsigned(Some(&four), t0, false), Ok(()));
    assert_eq!(c.check_unsigned(Some(&four), t0, false), Ok(()));
    // 8 of 10 used: 4 more do not fit; they will in 20 ms (2 lookups at 100/s).
    let refused = c.check_unsigned(Some(&four), t0, false).unwrap_err();
    assert_eq!(
        refused,
        ConditionRefusal::RateLimited {
            scope: Scope::All,
            retry_after_ms: 20
        }
    );
    // Monitor-only refuses nothing: over the rate, the call is counted as
    // one that would be refused, and charges nothing.
    assert_eq!(c.check_unsigned(Some(&four), t0, true), Ok(()));
    assert_eq!(
        c.check_unsigned(Some(&four), t0 + Duration::from_millis(20), false),
        Ok(())
    );
    // A refused condition is never charged.
    let bad = params(r#"["0x01", {"nope": 1}]"#);
    for _ in 0..100 {
        assert!(
            c.check_unsigned(Some(&bad), t0 + Duration::from_millis(60), false)
                .is_err()
        );
    }
    assert_eq!(
        c.check_unsigned(Some(&four), t0 + Duration::from_millis(60), false),
        Ok(())
    );
    let text = String::from_utf8(metrics.render()).unwrap();
    assert!(text.contains("txgate_conditional_total{result=\"rate_limited\"} 1"));
    assert!(text.contains("txgate_conditional_total{result=\"would_refuse\"} 1"));
}

/// A request signed by the test key `n` (`X-Optimism-Signature` over its
/// body): the signer and the header.
fn signed_by(n: u8, body: &[u8]) -> (Address, Vec<u8>) {
    let key = secp256k1::SecretKey::from_byte_array([n; 32]).unwrap();
    let (address, header) = txgate_conditional::caller::sign(&key, body);
    (address, header.into_bytes())
}

/// Open by default: unsigned calls pass, a signed one is verified (a bad
/// signature refused), and the two are counted apart; with a list of
/// callers, only a listed signer passes.
#[test]
fn callers_are_verified_counted_and_listed() {
    let entry: Address = ENTRY_POINT.parse().unwrap();
    let call = params(&format!(r#"["{}", {{}}]"#, raw_to(entry)));
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransactionConditional"}"#;
    let (alice, header) = signed_by(1, body);
    let now = Instant::now();
    let (open, metrics) = conditions(ConditionalConfig::default());
    assert_eq!(
        open.check(Some(&call), &Signed::new(None, body), now, false),
        Ok(())
    );
    assert_eq!(
        open.check(Some(&call), &Signed::new(Some(&header), body), now, false),
        Ok(())
    );
    // The same header over another body: another signer recovers.
    assert_eq!(
        open.check(Some(&call), &Signed::new(Some(&header), b"{}"), now, false),
        Err(ConditionRefusal::BadAuthentication(CallerError::Mismatch))
    );
    assert_eq!(
        open.check(
            Some(&call),
            &Signed::new(Some(b"nonsense"), body),
            now,
            false
        ),
        Err(ConditionRefusal::BadAuthentication(CallerError::Malformed))
    );
    // Monitor-only counts a bad signature and forwards.
    assert_eq!(
        open.check(Some(&call), &Signed::new(Some(&header), b"{}"), now, true),
        Ok(())
    );
    let text = String::from_utf8(metrics.render()).unwrap();
    for line in [
        "txgate_conditional_callers_total{kind=\"signed\"} 1",
        "txgate_conditional_callers_total{kind=\"unsigned\"} 1",
        "txgate_conditional_auth_failures_total{reason=\"mismatch\"} 2",
        "txgate_conditional_auth_failures_total{reason=\"malformed\"} 1",
        "txgate_conditional_total{result=\"bad_authentication\"} 2",
        "txgate_conditional_total{result=\"would_refuse\"} 1",
    ] {
        assert!(text.contains(line), "{line}");
    }

    let (listed, _) = conditions(ConditionalConfig {
        callers: vec![format!("{alice}")],
        ..ConditionalConfig::default()
    });
    assert_eq!(
        listed.check(Some(&call), &Signed::new(Some(&header), body), now, false),
        Ok(())
    );
    assert_eq!(
        listed.check(Some(&call), &Signed::new(None, body), now, false),
        Err(ConditionRefusal::Unauthenticated)
    );
    let (_, bob) = signed_by(2, body);
    assert_eq!(
        listed.check(Some(&call), &Signed::new(Some(&bob), body), now, false),
        Err(ConditionRefusal::CallerDenied)
    );
    // A bad condition is refused before the signature costs a recovery.
    let bad = params(r#"["0x01", {"nope": 1}]"#);
    let signed = Signed::new(Some(&header), body);
    assert!(listed.check(Some(&bad), &signed, now, false).is_err());
    assert!(signed.verified.get().is_none());
}

/// Each signed caller has its own bucket; unsigned calls only the
/// instance's.
#[test]
fn a_caller_over_its_rate_is_refused_alone() {
    let entry: Address = ENTRY_POINT.parse().unwrap();
    let call = params(&format!(
        r#"["{}", {{"blockNumberMax": 9}}]"#,
        raw_to(entry)
    ));
    let body = b"{}";
    let (_, alice) = signed_by(1, body);
    let (_, bob) = signed_by(2, body);
    let (c, metrics) = conditions(ConditionalConfig {
        caller_rate_per_sec: 2,
        ..ConditionalConfig::default()
    });
    let now = Instant::now();
    let check =
        |header: Option<&[u8]>| c.check(Some(&call), &Signed::new(header, body), now, false);
    assert_eq!(check(Some(&alice)), Ok(()));
    assert_eq!(check(Some(&alice)), Ok(()));
    assert!(matches!(
        check(Some(&alice)),
        Err(ConditionRefusal::RateLimited {
            scope: Scope::Caller,
            retry_after_ms: 500
        })
    ));
    assert_eq!(check(Some(&bob)), Ok(()));
    assert_eq!(check(None), Ok(()));
    let text = String::from_utf8(metrics.render()).unwrap();
    assert!(text.contains("txgate_conditional_total{result=\"caller_rate_limited\"} 1"));
}

/// The gates in order: for each pair of neighbours, a call that fails
/// both is refused by the first, and the later one's work is not done (a
/// target off the list never costs the signature's recovery).
#[test]
fn the_gates_run_cheapest_first_and_stop_at_the_first_refusal() {
    let entry: Address = ENTRY_POINT.parse().unwrap();
    let (_, header) = signed_by(1, b"{}");
    let body: &[u8] = b"{}";
    let forged: &[u8] = b"0x12:0x34";
    let now = Instant::now();
    // Switch before condition.
    let (off, _) = conditions(ConditionalConfig {
        enabled: false,
        ..ConditionalConfig::default()
    });
    let bad_condition = params(r#"["0x01", {"nope": 1}]"#);
    assert_eq!(
        off.check_unsigned(Some(&bad_condition), now, false),
        Err(ConditionRefusal::Disabled)
    );
    // Condition before target (the target would not decode either).
    let (c, _) = conditions(ConditionalConfig {
        rate_per_sec: 1,
        burst: 1,
        ..ConditionalConfig::default()
    });
    assert_eq!(
        c.check_unsigned(Some(&bad_condition), now, false)
            .unwrap_err()
            .as_str(),
        "invalid"
    );
    // Target before caller: the header is never looked at.
    let elsewhere = params(&format!(r#"["{}", {{}}]"#, raw(3, 0, &[1])));
    let signed = Signed::new(Some(&header), body);
    assert_eq!(
        c.check(Some(&elsewhere), &signed, now, false),
        Err(ConditionRefusal::Target)
    );
    assert!(signed.verified.get().is_none());
    // Caller before charge: a good call spends the bucket (one lookup); a
    // forged one then gets the caller's refusal, not the rate's...
    let one = params(&format!(
        r#"["{}", {{"blockNumberMax": 1}}]"#,
        raw_to(entry)
    ));
    assert_eq!(c.check(Some(&one), &signed, now, false), Ok(()));
    assert!(signed.verified.get().is_some());
    assert!(matches!(
        c.check(Some(&one), &Signed::new(Some(forged), body), now, false),
        Err(ConditionRefusal::BadAuthentication(_))
    ));
    // ...and the same call, signed, meets the rate.
    assert!(matches!(
        c.check(Some(&one), &Signed::new(Some(&header), body), now, false),
        Err(ConditionRefusal::RateLimited { .. })
    ));
}
