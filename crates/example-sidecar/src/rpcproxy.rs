//! The gRPC service `rpcproxy.v1.RpcProxyHeuristics`, the reference proxy's
//! protocol, on the same port as txgate's own.
//!
//! - `StreamInvalidations` streams the same invalidations as the
//!   `txgate.sidecar.v1` service (the hub's), in this protocol's form: no
//!   tx hash and no sender (it has neither), `observed_at` a
//!   `google.protobuf.Timestamp`.
//! - `ShouldForward` answers from the same verdicts: a fingerprint judged
//!   invalid is `DENY` with (the first of) its assertions. The request
//!   carries only the fingerprint, not the transaction, so nothing can be
//!   simulated; the rules that need only the fingerprint's parts are
//!   applied instead: a call to a contract no assertion protects is
//!   `ALLOW`; one whose selector an assertion forbids is `DENY`; one to a
//!   contract a `no_revert` assertion protects (where `txgate.sidecar.v1`
//!   would simulate it) is `UNKNOWN`; otherwise `ALLOW`.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use txgate_proto::rpcproxy::{self, Verdict};
use txgate_proto::rpcproxy_v1 as wire;
use txgate_proto::rpcproxy_v1::rpc_proxy_heuristics_server::RpcProxyHeuristics;

use crate::config::{Config, Kind};
use crate::hub::{Hub, Invalidated};

/// The wire form of an invalidation in this protocol.
pub(crate) fn invalidation_message(event: &Invalidated) -> wire::Invalidation {
    rpcproxy::invalidation_message(&event.fp, Some(event.assertion), event.block, event.at)
}

/// The verdict on a fingerprint: from what the hub judged, else from the
/// assertions that need only the fingerprint's parts (see the module doc).
pub(crate) fn decide(hub: &Hub, fp: &wire::Fingerprint) -> Result<Verdict, String> {
    if fp.hash.len() != 32 {
        return Err("fingerprint hash must be 32 bytes".into());
    }
    if let Some(assertions) = hub.verdict(&B256::from_slice(&fp.hash)) {
        return Ok(Verdict::Deny(assertions.first().copied()));
    }
    if fp.target.len() != 20 {
        // No target: no telling which assertions apply.
        return Ok(Verdict::Unknown);
    }
    Ok(by_rules(
        &hub.config,
        Address::from_slice(&fp.target),
        &fp.selector,
    ))
}

/// The verdict of the configured assertions on a call to `target` with
/// `selector`, without running it.
fn by_rules(config: &Config, target: Address, selector: &[u8]) -> Verdict {
    if !config.protects(target) {
        return Verdict::Allow;
    }
    if let Some(a) = config.violated(target, selector, None).first() {
        return Verdict::Deny(Some(a.key()));
    }
    let needs_simulation = config
        .assertion
        .iter()
        .any(|a| a.contract == target && a.kind == Kind::NoRevert);
    if needs_simulation {
        Verdict::Unknown
    } else {
        Verdict::Allow
    }
}

/// The gRPC service over the hub.
#[derive(Debug)]
pub(crate) struct Service {
    hub: Arc<Hub>,
}

impl Service {
    /// The service over `hub`.
    pub(crate) fn new(hub: Arc<Hub>) -> Service {
        Service { hub }
    }
}

type InvalidationStream = Pin<Box<dyn Stream<Item = Result<wire::Invalidation, Status>> + Send>>;

#[tonic::async_trait]
impl RpcProxyHeuristics for Service {
    type StreamInvalidationsStream = InvalidationStream;

    async fn stream_invalidations(
        &self,
        request: Request<wire::Empty>,
    ) -> Result<Response<InvalidationStream>, Status> {
        tracing::info!(peer = ?request.remote_addr(), protocol = "rpcproxy.v1",
            "subscriber joined");
        let stream = self.hub.subscribe().map(|e| Ok(invalidation_message(&e)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn should_forward(
        &self,
        request: Request<wire::ShouldForwardRequest>,
    ) -> Result<Response<wire::ShouldForwardResponse>, Status> {
        let delay = self.hub.config.should_forward_delay_ms;
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let request = request.into_inner();
        let fp = request
            .fingerprint
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("fingerprint missing"))?;
        let verdict = decide(&self.hub, fp).map_err(Status::invalid_argument)?;
        Ok(Response::new(rpcproxy::verdict_message(verdict)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use alloy_primitives::U256;
    use tokio_stream::StreamExt;
    use txgate_screen::{AssertionKey, Fingerprint};

    use super::*;

    const GUARDED: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
    const SELECTORS_ONLY: &str = "0x00000000000000000000000000000000000000b0";

    fn hub() -> Hub {
        let text = format!(
            "[[assertion]]\nid = \"0x{a1}\"\nversion = 1\nkind = \"no_revert\"\ncontract = \"{GUARDED}\"\n\
             [[assertion]]\nid = \"0x{a2}\"\nversion = 3\nkind = \"forbidden_selector\"\ncontract = \"{GUARDED}\"\nselector = \"0xaa60e733\"\n\
             [[assertion]]\nid = \"0x{a3}\"\nversion = 1\nkind = \"forbidden_selector\"\ncontract = \"{SELECTORS_ONLY}\"\nselector = \"0x12345678\"\n",
            a1 = "a1".repeat(32),
            a2 = "a2".repeat(32),
            a3 = "a3".repeat(32),
        );
        Hub::new(Config::parse(&text).expect("config"))
    }

    fn key(byte: u8, version: u64) -> AssertionKey {
        AssertionKey {
            id: B256::repeat_byte(byte),
            version,
        }
    }

    fn fp(target: &str, input: &[u8]) -> Fingerprint {
        Fingerprint::from_parts(target.parse().expect("address"), input, U256::ZERO, 50_000)
    }

    fn wire_fp(fp: &Fingerprint) -> wire::Fingerprint {
        rpcproxy::fingerprint_message(fp)
    }

    #[test]
    fn judged_bad_is_deny_with_its_assertion() {
        let hub = hub();
        let bad = fp(GUARDED, &[1, 2, 3, 4, 9]);
        hub.invalidate(&bad, key(0xa1, 1), None, None, 7);
        assert_eq!(
            decide(&hub, &wire_fp(&bad)),
            Ok(Verdict::Deny(Some(key(0xa1, 1))))
        );
        let answer = rpcproxy::verdict_message(Verdict::Deny(Some(key(0xa1, 1))));
        assert_eq!(
            rpcproxy::verdict(&answer),
            Ok(Verdict::Deny(Some(key(0xa1, 1))))
        );
    }

    #[test]
    fn unjudged_calls_are_decided_by_the_rules_that_need_no_simulation() {
        let hub = hub();
        // Unprotected: known good.
        let other = fp(
            "0x0000000000000000000000000000000000000009",
            &[0xaa, 0x60, 0xe7, 0x33],
        );
        assert_eq!(decide(&hub, &wire_fp(&other)), Ok(Verdict::Allow));
        // A forbidden selector: deny, from the fingerprint's selector alone.
        let sweep = fp(GUARDED, &[0xaa, 0x60, 0xe7, 0x33, 0, 1]);
        assert_eq!(
            decide(&hub, &wire_fp(&sweep)),
            Ok(Verdict::Deny(Some(key(0xa2, 3))))
        );
        // Protected by no_revert: would need the transaction to simulate.
        let poke = fp(GUARDED, &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(decide(&hub, &wire_fp(&poke)), Ok(Verdict::Unknown));
        // Protected by selector rules only, none hit: known good.
        let fine = fp(SELECTORS_ONLY, &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(decide(&hub, &wire_fp(&fine)), Ok(Verdict::Allow));
        let forbidden = fp(SELECTORS_ONLY, &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(
            decide(&hub, &wire_fp(&forbidden)),
            Ok(Verdict::Deny(Some(key(0xa3, 1))))
        );
        // No target on the wire: no opinion. A bad hash: refused.
        let mut bare = wire_fp(&poke);
        bare.target.clear();
        assert_eq!(decide(&hub, &bare), Ok(Verdict::Unknown));
        bare.hash.pop();
        assert!(decide(&hub, &bare).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_stream_carries_the_hubs_invalidations_in_this_protocols_form() {
        let hub = hub();
        let v1 = hub.subscribe();
        let ours = hub.subscribe();
        let bad = fp(GUARDED, &[1, 2, 3, 4, 9]);
        let tx = B256::repeat_byte(0x11);
        let sender = Address::repeat_byte(0x22);
        hub.invalidate(&bad, key(0xa1, 1), Some(tx), Some(sender), 42);
        drop(hub);
        let v1: Vec<_> = v1
            .map(|e| crate::service::invalidation_message(&e))
            .collect()
            .await;
        let ours: Vec<_> = ours.map(|e| invalidation_message(&e)).collect().await;
        assert_eq!((v1.len(), ours.len()), (1, 1));
        let (v1, ours) = (&v1[0], &ours[0]);
        // The same invalidation…
        let inv = rpcproxy::to_invalidation(ours, 0).expect("well formed");
        assert_eq!(inv.fingerprint, bad.hash);
        assert_eq!((inv.target, inv.selector), (bad.target, bad.selector));
        assert_eq!(inv.assertion, Some(key(0xa1, 1)));
        assert_eq!(ours.l2_block_number, 42);
        assert_eq!(ours.adopter, "");
        // …observed at the same time, as a Timestamp…
        assert_eq!(rpcproxy::observed_at_ms(ours), Some(v1.observed_at));
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        assert!(v1.observed_at <= now_ms && v1.observed_at + 60_000 > now_ms);
        // …with no tx hash nor sender (txgate's own form has them).
        assert_eq!((inv.tx_hash, inv.sender), (None, None));
        assert_eq!(v1.tx_hash, tx.to_vec());
        assert_eq!(v1.sender, sender.to_vec());
    }
}
