//! `/bans/lookup`: what is held against a tx hash, a fingerprint, a
//! sender and a call, and which rule would refuse it now, as JSON.

use serde_json::{Value, json};
use txgate_screen::{AssertionKey, BanView, CooldownView, Millis};

use super::query::{Facts, Query};
use super::{Bans, Clock, Refused};

impl Bans {
    /// What is held against what the query names; see the module docs.
    pub(super) fn lookup(&self, query: &Query, now: Millis) -> Result<Value, Refused> {
        let facts = Facts::of(query, &self.screen, now)?;
        let screen = &self.screen;
        let clock = Clock::now();
        let mut out = serde_json::Map::new();
        let mut refused_by: Option<&str> = None;
        let mut refuse = |reason: &'static str| {
            refused_by.get_or_insert(reason);
        };
        if let Some(hash) = facts.tx_hash {
            let failure = screen.failure_of(&hash, now);
            if failure.is_some() {
                refuse("recent_failure");
            }
            out.insert(
                "tx_hash".into(),
                json!({
                    "value": hash.to_string(),
                    "recent_failure": failure.map(|f| json!({
                        "expires_in_ms": f.expires_in,
                        "until_unix_ms": clock.until(f.expires_in),
                        "assertion": f.assertion.map(assertion),
                        "charged": f.charged,
                    })),
                    "forwarded": facts.forwarded.map(|(fp, sender)| json!({
                        "fingerprint": fp.to_string(),
                        "sender": sender.to_string(),
                    })),
                }),
            );
        }
        // The sender is checked after the fingerprint and the call, as on
        // the request path (no ECDSA before the cheaper checks).
        let mut backed_off = false;
        if let Some(sender) = facts.sender {
            let bucket = screen.sender_of(&sender, now);
            backed_off = bucket.is_some_and(|b| b.backoff_for > 0);
            out.insert(
                "sender".into(),
                json!({
                    "value": sender.to_string(),
                    "backpressure": bucket.map(|b| json!({
                        "tokens": b.tokens,
                        "backoff_ms": b.backoff_for,
                        "until_unix_ms": clock.until(b.backoff_for),
                        "backoffs_in_a_row": b.level,
                    })),
                }),
            );
        }
        if let Some(fp) = facts.fingerprint {
            let ban = screen.ban_of(&fp, now);
            if ban.as_ref().is_some_and(|b| b.denied) {
                refuse("denied_fingerprint");
            }
            out.insert(
                "fingerprint".into(),
                json!({
                    "value": fp.to_string(),
                    "ban": ban.as_ref().map(|b| ban_json(b, &clock)),
                }),
            );
        }
        if let Some((target, selector)) = facts.call {
            let cooldown = screen.cooldown_of(target, selector, now);
            let state = match cooldown {
                CooldownView::Clear => json!({"state": "clear"}),
                CooldownView::Open(a) => json!({
                    "state": "open",
                    "assertion": a.map(assertion),
                }),
                CooldownView::Closed(a, retry) => {
                    refuse("assertion_cooldown");
                    json!({
                        "state": "closed",
                        "assertion": a.map(assertion),
                        "retry_after_ms": retry,
                    })
                }
            };
            out.insert(
                "call".into(),
                json!({
                    "target": target.to_string(),
                    "selector": format!("0x{}", alloy_primitives::hex::encode(selector)),
                    "cooldown": state,
                }),
            );
        }
        if backed_off {
            refuse("sender_backoff");
        }
        // A suspect fingerprint is not refused on its own: one forward of
        // it at a time (its state shows in `fingerprint.ban`).
        out.insert("refused_by".into(), json!(refused_by));
        Ok(Value::Object(out))
    }
}

fn ban_json(b: &BanView, clock: &Clock) -> Value {
    json!({
        "state": if b.denied { "denied" } else { "suspect" },
        "expires_in_ms": b.expires_in,
        "until_unix_ms": clock.until(b.expires_in),
        "suspect_for_ms": b.suspect_for,
        "assertions": b.assertions.iter().map(|a| assertion(*a)).collect::<Vec<_>>(),
        "unconditional": b.unconditional,
    })
}

/// An assertion, or a call key (a cooldown counted for failures that name
/// no assertion: never an assertion id of the sidecar's).
fn assertion(a: AssertionKey) -> Value {
    if a.is_call() {
        json!({"call_key": a.id.to_string()})
    } else {
        json!({"id": a.id.to_string(), "version": a.version})
    }
}
