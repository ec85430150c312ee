//! The checks in order, with the codes op-geth and op-txproxy use.

#![allow(clippy::unwrap_used)]

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
    assert_eq!(c.check(Some(&ok), false), Ok(()));
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
        let refusal = c.check(Some(&params(text)), false).unwrap_err();
        assert_eq!(refusal.as_str(), *label, "{text}");
    }
    assert_eq!(c.check(None, false).unwrap_err(), ConditionRefusal::Missing);
    // A malformed condition is refused before the transaction is decoded.
    let both_bad = params(r#"["0xzz", {"timestampMin": "x"}]"#);
    assert_eq!(
        c.check(Some(&both_bad), false).unwrap_err().as_str(),
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
    let refusal = c.check(Some(&params(&two_roots)), false).unwrap_err();
    assert_eq!(
        refusal,
        ConditionRefusal::Condition(Invalid::CostExceeded { cost: 2, max: 1 })
    );
    let (off, _) = conditions(ConditionalConfig {
        enabled: false,
        ..ConditionalConfig::default()
    });
    assert_eq!(
        off.check(Some(&params(&two_roots)), false),
        Err(ConditionRefusal::Disabled)
    );
    // Monitor-only: counted, let through.
    assert_eq!(off.check(Some(&params(&two_roots)), true), Ok(()));
    let (any, _) = conditions(ConditionalConfig {
        targets: Vec::new(),
        ..ConditionalConfig::default()
    });
    let elsewhere = params(&format!(r#"["{}", {{}}]"#, raw(3, 0, &[1])));
    assert_eq!(any.check(Some(&elsewhere), false), Ok(()));
}
