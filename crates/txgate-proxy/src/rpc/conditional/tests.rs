//! The checks in order, with the codes op-geth and op-txproxy use.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::value::RawValue;

use super::*;
use crate::screening::tests::raw;

const ENTRY_POINT: &str = "0x5FF137D4b0FDCD49DcA30c7CF57E578a026d2789";

fn conditions(config: ConditionalConfig) -> (Conditions, Metrics) {
    let metrics = Metrics::new();
    (Conditions::new(&config, &metrics), metrics)
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
    assert_eq!(c.check(Some(&ok), Instant::now(), false), Ok(()));
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
            .check(Some(&params(text)), Instant::now(), false)
            .unwrap_err();
        assert_eq!(refusal.as_str(), *label, "{text}");
    }
    assert_eq!(
        c.check(None, Instant::now(), false).unwrap_err(),
        ConditionRefusal::Missing
    );
    // A malformed condition is refused before the transaction is decoded.
    let both_bad = params(r#"["0xzz", {"timestampMin": "x"}]"#);
    assert_eq!(
        c.check(Some(&both_bad), Instant::now(), false)
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
        .check(Some(&params(&two_roots)), Instant::now(), false)
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
        off.check(Some(&params(&two_roots)), Instant::now(), false),
        Err(ConditionRefusal::Disabled)
    );
    // Monitor-only does not override the switch...
    assert_eq!(
        off.check(Some(&params(&two_roots)), Instant::now(), true),
        Err(ConditionRefusal::Disabled)
    );
    // ...and lets a refusal of the checks through, counted.
    assert_eq!(
        c.check(Some(&params(&two_roots)), Instant::now(), true),
        Ok(())
    );
    let (any, _) = conditions(ConditionalConfig {
        targets: Vec::new(),
        ..ConditionalConfig::default()
    });
    let elsewhere = params(&format!(r#"["{}", {{}}]"#, raw(3, 0, &[1])));
    assert_eq!(any.check(Some(&elsewhere), Instant::now(), false), Ok(()));
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
    assert_eq!(c.check(Some(&four), t0, false), Ok(()));
    assert_eq!(c.check(Some(&four), t0, false), Ok(()));
    // 8 of 10 used: 4 more do not fit; they will in 20 ms (2 lookups at 100/s).
    let refused = c.check(Some(&four), t0, false).unwrap_err();
    assert_eq!(
        refused,
        ConditionRefusal::RateLimited { retry_after_ms: 20 }
    );
    // Monitor-only charges nothing and refuses nothing.
    assert_eq!(c.check(Some(&four), t0, true), Ok(()));
    assert_eq!(
        c.check(Some(&four), t0 + Duration::from_millis(20), false),
        Ok(())
    );
    // A refused condition is never charged.
    let bad = params(r#"["0x01", {"nope": 1}]"#);
    for _ in 0..100 {
        assert!(
            c.check(Some(&bad), t0 + Duration::from_millis(60), false)
                .is_err()
        );
    }
    assert_eq!(
        c.check(Some(&four), t0 + Duration::from_millis(60), false),
        Ok(())
    );
    let text = String::from_utf8(metrics.render()).unwrap();
    assert!(text.contains("txgate_conditional_total{result=\"rate_limited\"} 1"));
}
