//! `/bans/lift`: lifts a fingerprint's ban, a sender's backoff, a failed
//! tx hash, each logged and counted.

use std::net::IpAddr;

use serde_json::{Value, json};
use txgate_screen::Millis;

use super::query::{Query, address, b256};
use super::{Bans, Refused};
use crate::metrics::admin::Change;

impl Bans {
    pub(super) fn lift(&self, lift: &Query, peer: IpAddr, now: Millis) -> Result<Value, Refused> {
        if lift.raw.is_some() {
            return Err(Refused::bad(
                "lift takes fingerprint, sender and/or tx_hash, not raw",
            ));
        }
        if lift.tx_hash.is_none() && lift.fingerprint.is_none() && lift.sender.is_none() {
            return Err(Refused::bad(
                "name a fingerprint, sender or tx_hash to lift",
            ));
        }
        let fingerprint = lift
            .fingerprint
            .as_deref()
            .map(b256("fingerprint"))
            .transpose()?;
        let sender = lift.sender.as_deref().map(address).transpose()?;
        let hash = lift.tx_hash.as_deref().map(b256("tx_hash")).transpose()?;
        let mut out = serde_json::Map::new();
        let mut done = |key: &str, change: Change, value: String, lifted: bool| {
            if lifted {
                self.metrics.admin.change(change).inc();
                tracing::warn!(
                    target: "txgate::admin",
                    action = change.as_str(),
                    value = %value,
                    peer = %peer,
                    "lifted by hand"
                );
            }
            out.insert(key.into(), json!({"value": value, "lifted": lifted}));
        };
        if let Some(fp) = fingerprint {
            let lifted = self.screen.lift_ban(&fp);
            done(
                "fingerprint",
                Change::LiftFingerprint,
                fp.to_string(),
                lifted,
            );
        }
        if let Some(sender) = sender {
            let lifted = self.screen.lift_backoff(&sender);
            done("sender", Change::LiftSender, sender.to_string(), lifted);
        }
        if let Some(hash) = hash {
            let lifted = self.screen.lift_failure(&hash, now);
            done("tx_hash", Change::LiftTxHash, hash.to_string(), lifted);
        }
        Ok(Value::Object(out))
    }
}
