//! Failure reports, posted as the production Credible Layer sidecar posts
//! them: for every transaction judged to fail an assertion (in a block, or
//! injected through the admin endpoint as `raw_tx`), `POST` to the report
//! URL with its path replaced by `/report` (the query string kept, so
//! `http://host:port/anything?token=abc` posts to
//! `http://host:port/report?token=abc`; user-info `user:pass@` in the URL
//! is sent as HTTP Basic auth, percent-decoded, as reqwest does) a JSON
//! body `[tx_hash, tx_env]`, `tx_env` in the shape of revm's serde
//! `TxEnv` (revm 33, revm-context 12.1):
//!
//! ```json
//! {"tx_type":2,"caller":"0x…","gas_limit":100000,"gas_price":2000000000,
//!  "kind":"0x…" (null for a creation),"value":"0x1","data":"0x…","nonce":7,
//!  "chain_id":31337,"access_list":[{"address":"0x…","storageKeys":["0x…"]}],
//!  "gas_priority_fee":1000000000 (null before EIP-1559),"blob_hashes":[],
//!  "max_fee_per_blob_gas":0,"authorization_list":[{"Left":{"chainId":"0x…",
//!  "address":"0x…","nonce":"0x…","yParity":"0x…","r":"0x…","s":"0x…"}}]}
//! ```
//!
//! `gas_price` is the fee cap (`maxFeePerGas`) from EIP-1559 on, as revm
//! sets it. Fire and forget: one attempt, a 2 s timeout, a non-2xx answer
//! or a failure logged at warn; posting never blocks judging (each report
//! is its own task), and beyond [`MAX_IN_FLIGHT`] reports in flight a new
//! one is dropped and counted (logged at warn at 1, 2, 4, 8… drops).
//!
//! Only `http://` URLs: the sidecar's HTTP client (the one it uses for the
//! node) has no TLS.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use alloy_consensus::{Transaction, TxEnvelope};
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{Address, B256, Bytes, U8, U64, U256};
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use txgate_screen::Tx;

use crate::node::{hex_bytes, hex_u64};

/// How long one report may take.
pub(crate) const REPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// Reports in flight at most; beyond, new ones are dropped and counted.
pub(crate) const MAX_IN_FLIGHT: usize = 256;

/// Where reports go: the URL with its path replaced by `/report`, and its
/// user-info as an `Authorization: Basic` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `http://host[:port]/report[?query]`, without user-info.
    pub(crate) uri: Uri,
    /// `Basic base64(user:password)`, when the URL has user-info.
    pub(crate) authorization: Option<HeaderValue>,
}

impl Target {
    /// The report URL from a configured URL (see the module doc).
    pub(crate) fn parse(url: &str) -> Result<Target, String> {
        let url = url.trim();
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("{url:?}: not an absolute URL"))?;
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(format!(
                "{scheme}: only http:// report URLs are supported (no TLS)"
            ));
        }
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let tail = tail.split('#').next().unwrap_or_default();
        let query = tail
            .split_once('?')
            .map(|(_, q)| q)
            .filter(|q| !q.is_empty());
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(format!("{url:?}: no host"));
        }
        let mut uri = format!("http://{host}/report");
        if let Some(query) = query {
            uri.push('?');
            uri.push_str(query);
        }
        let uri: Uri = uri.parse().map_err(|e| format!("{url:?}: {e}"))?;
        let authorization = userinfo
            .map(|userinfo| {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let mut credentials = percent_decode(user);
                credentials.push(b':');
                credentials.extend(percent_decode(password));
                let mut value = HeaderValue::try_from(format!("Basic {}", base64(&credentials)))
                    .map_err(|e| e.to_string())?;
                value.set_sensitive(true);
                Ok::<_, String>(value)
            })
            .transpose()?;
        Ok(Target { uri, authorization })
    }

    /// The report URL as it may be logged: without the query (it may hold
    /// a token); credentials never are in [`Target::uri`].
    pub(crate) fn redacted(&self) -> String {
        let authority = self.uri.authority().map(|a| a.as_str()).unwrap_or("");
        let query = if self.uri.query().is_some() {
            "?…"
        } else {
            ""
        };
        format!("http://{authority}{}{query}", self.uri.path())
    }
}

/// `%XX` sequences decoded; a `%` not followed by two hex digits is kept.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// Standard base64, padded (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> shift & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An access list entry, as alloy (and so revm) serialize it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccessItem {
    address: Address,
    #[serde(default)]
    storage_keys: Vec<B256>,
}

/// A signed EIP-7702 authorization, as alloy serializes it (and as
/// JSON-RPC carries it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Authorization {
    chain_id: U256,
    address: Address,
    nonce: U64,
    y_parity: U8,
    r: U256,
    s: U256,
}

/// An entry of revm's `authorization_list`:
/// `Either<SignedAuthorization, RecoveredAuthorization>`, always the
/// signed form here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) enum AuthorizationItem {
    /// `Either::Left`: the authorization as signed.
    Left(Authorization),
}

/// A transaction in the shape of revm's serde `TxEnv`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TxEnv {
    pub(crate) tx_type: u8,
    pub(crate) caller: Address,
    pub(crate) gas_limit: u64,
    pub(crate) gas_price: u128,
    /// The call target; `None` (null) for a creation.
    pub(crate) kind: Option<Address>,
    pub(crate) value: U256,
    pub(crate) data: Bytes,
    pub(crate) nonce: u64,
    pub(crate) chain_id: Option<u64>,
    pub(crate) access_list: Vec<AccessItem>,
    pub(crate) gas_priority_fee: Option<u128>,
    pub(crate) blob_hashes: Vec<B256>,
    pub(crate) max_fee_per_blob_gas: u128,
    pub(crate) authorization_list: Vec<AuthorizationItem>,
}

fn hex_u128(v: &Value) -> Option<u128> {
    u128::from_str_radix(v.as_str()?.strip_prefix("0x")?, 16).ok()
}

fn list<T: for<'de> Deserialize<'de>>(v: &Value, what: &str) -> Result<Vec<T>, String> {
    if v.is_null() {
        return Ok(Vec::new());
    }
    serde_json::from_value(v.clone()).map_err(|e| format!("bad {what}: {e}"))
}

impl TxEnv {
    /// From a transaction as JSON-RPC gives it (`eth_getBlockByNumber` with
    /// full transactions, `eth_getTransactionByHash`).
    pub(crate) fn from_rpc(tx: &Value) -> Result<TxEnv, String> {
        let tx_type = match &tx["type"] {
            Value::Null => 0,
            t => hex_u64(t)
                .and_then(|t| u8::try_from(t).ok())
                .ok_or("bad type")?,
        };
        let gas_price = if tx_type >= 2 {
            hex_u128(&tx["maxFeePerGas"]).ok_or("bad maxFeePerGas")?
        } else {
            hex_u128(&tx["gasPrice"]).ok_or("bad gasPrice")?
        };
        let gas_priority_fee = if tx_type >= 2 {
            Some(hex_u128(&tx["maxPriorityFeePerGas"]).ok_or("bad maxPriorityFeePerGas")?)
        } else {
            None
        };
        let kind = match &tx["to"] {
            Value::Null => None,
            to => Some(to.as_str().and_then(|s| s.parse().ok()).ok_or("bad to")?),
        };
        Ok(TxEnv {
            tx_type,
            caller: tx["from"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .ok_or("bad from")?,
            gas_limit: hex_u64(&tx["gas"]).ok_or("bad gas")?,
            gas_price,
            kind,
            value: tx["value"]
                .as_str()
                .and_then(|s| U256::from_str_radix(s.strip_prefix("0x")?, 16).ok())
                .ok_or("bad value")?,
            data: hex_bytes(&tx["input"]).ok_or("bad input")?.into(),
            nonce: hex_u64(&tx["nonce"]).ok_or("bad nonce")?,
            chain_id: hex_u64(&tx["chainId"]),
            access_list: list(&tx["accessList"], "accessList")?,
            gas_priority_fee,
            blob_hashes: list(&tx["blobVersionedHashes"], "blobVersionedHashes")?,
            max_fee_per_blob_gas: hex_u128(&tx["maxFeePerBlobGas"]).unwrap_or(0),
            authorization_list: list(&tx["authorizationList"], "authorizationList")?
                .into_iter()
                .map(AuthorizationItem::Left)
                .collect(),
        })
    }

    /// From a raw transaction decoded by txgate's library (`tx`, its
    /// `sender` recovered by it); what that decoder does not keep (nonce,
    /// fees, access list, blobs, authorizations) is read from the same
    /// bytes with alloy's envelope decoder.
    pub(crate) fn from_raw(tx: &Tx, raw: &[u8], sender: Address) -> Result<TxEnv, String> {
        let envelope = TxEnvelope::decode_2718(&mut &raw[..]).map_err(|e| e.to_string())?;
        Ok(TxEnv {
            tx_type: tx.ty,
            caller: sender,
            gas_limit: tx.gas_limit,
            // The fee cap from EIP-1559 on, the gas price before.
            gas_price: envelope.max_fee_per_gas(),
            kind: tx.to,
            value: tx.value,
            data: tx.input.clone(),
            nonce: envelope.nonce(),
            chain_id: tx.chain_id,
            access_list: envelope
                .access_list()
                .map(|list| {
                    list.iter()
                        .map(|item| AccessItem {
                            address: item.address,
                            storage_keys: item.storage_keys.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            gas_priority_fee: envelope.max_priority_fee_per_gas(),
            blob_hashes: envelope
                .blob_versioned_hashes()
                .map(<[B256]>::to_vec)
                .unwrap_or_default(),
            max_fee_per_blob_gas: envelope.max_fee_per_blob_gas().unwrap_or(0),
            authorization_list: envelope
                .authorization_list()
                .unwrap_or_default()
                .iter()
                .map(|a| {
                    AuthorizationItem::Left(Authorization {
                        chain_id: *a.chain_id(),
                        address: *a.address(),
                        nonce: U64::from(a.nonce()),
                        y_parity: U8::from(a.y_parity()),
                        r: a.r(),
                        s: a.s(),
                    })
                })
                .collect(),
        })
    }
}

/// The JSON body of a report: `[tx_hash, tx_env]`.
pub(crate) fn body(tx_hash: B256, env: &TxEnv) -> Result<Vec<u8>, String> {
    serde_json::to_vec(&(tx_hash, env)).map_err(|e| e.to_string())
}

#[derive(Debug)]
struct Inner {
    target: Target,
    client: Client<HttpConnector, Full<bytes::Bytes>>,
    timeout: Duration,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    dropped: AtomicU64,
}

/// A report's slot among those in flight, freed when the post ends.
struct Slot(Arc<Inner>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Posts failure reports, or nothing when no report URL is configured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reporter {
    inner: Option<Arc<Inner>>,
}

impl Reporter {
    /// A reporter that reports nothing.
    pub(crate) fn disabled() -> Reporter {
        Reporter::default()
    }

    /// A reporter posting to `url`'s `/report` (see the module doc).
    pub(crate) fn new(url: &str) -> Result<Reporter, String> {
        Reporter::with_limits(url, REPORT_TIMEOUT, MAX_IN_FLIGHT)
    }

    fn with_limits(url: &str, timeout: Duration, max_in_flight: usize) -> Result<Reporter, String> {
        Ok(Reporter {
            inner: Some(Arc::new(Inner {
                target: Target::parse(url)?,
                client: Client::builder(TokioExecutor::new()).build_http(),
                timeout,
                max_in_flight: max_in_flight.max(1),
                in_flight: AtomicUsize::new(0),
                dropped: AtomicU64::new(0),
            })),
        })
    }

    /// Where reports go, if anywhere.
    pub(crate) fn target(&self) -> Option<&Target> {
        self.inner.as_ref().map(|inner| &inner.target)
    }

    /// Reports dropped so far (too many in flight, or no runtime).
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |inner| inner.dropped.load(Ordering::Relaxed))
    }

    /// Posts `[tx_hash, env]` in the background; returns whether a post was
    /// started (not when disabled, or dropped because too many are in
    /// flight). Never waits.
    pub(crate) fn report(&self, tx_hash: B256, env: &TxEnv) -> bool {
        let Some(inner) = &self.inner else {
            return false;
        };
        let body = match body(tx_hash, env) {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(tx = %tx_hash, error = %e, "cannot encode a failure report");
                return false;
            }
        };
        let admitted = inner.in_flight.fetch_add(1, Ordering::AcqRel) < inner.max_in_flight;
        // Counted in flight from here: the slot frees it when dropped.
        let slot = Slot(inner.clone());
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if admitted => runtime,
            _ => {
                drop(slot);
                let dropped = inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(tx = %tx_hash, dropped, max_in_flight = inner.max_in_flight,
                        "too many failure reports in flight; report dropped");
                }
                return false;
            }
        };
        runtime.spawn(post(slot, tx_hash, body));
        true
    }
}

/// One attempt at posting a report; the outcome is logged.
async fn post(slot: Slot, tx_hash: B256, body: Vec<u8>) {
    let inner = &slot.0;
    let mut request = http::Request::post(inner.target.uri.clone())
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(bytes::Bytes::from(body)));
    if let (Ok(request), Some(authorization)) = (&mut request, &inner.target.authorization) {
        request
            .headers_mut()
            .insert(AUTHORIZATION, authorization.clone());
    }
    let request = match request {
        Ok(request) => request,
        Err(e) => {
            tracing::warn!(tx = %tx_hash, error = %e, "cannot build a failure report");
            return;
        }
    };
    let attempt = async {
        let response = inner.client.request(request).await?;
        let status = response.status();
        // Read the (short) answer so the connection can be reused.
        let _ = response.into_body().collect().await;
        Ok::<_, hyper_util::client::legacy::Error>(status)
    };
    match tokio::time::timeout(inner.timeout, attempt).await {
        Ok(Ok(status)) if status.is_success() => {
            tracing::debug!(tx = %tx_hash, status = status.as_u16(), "failure report posted");
        }
        Ok(Ok(status)) => {
            tracing::warn!(tx = %tx_hash, status = status.as_u16(), to = %inner.target.redacted(),
                "failure report refused");
        }
        Ok(Err(e)) => {
            tracing::warn!(tx = %tx_hash, error = %e, to = %inner.target.redacted(),
                "failure report failed");
        }
        Err(_) => {
            tracing::warn!(tx = %tx_hash, timeout_ms = inner.timeout.as_millis() as u64,
                to = %inner.target.redacted(), "failure report timed out");
        }
    }
}

#[cfg(test)]
mod tests {
    use alloy_consensus::{TxEip1559, TxLegacy};
    use alloy_eips::eip2930::{AccessList, AccessListItem};
    use alloy_primitives::TxKind;
    use serde_json::json;

    use super::*;
    use crate::testutil::{Logs, receiver, sign};

    #[test]
    fn the_path_becomes_report_and_the_query_is_kept() {
        for (url, want) in [
            ("http://127.0.0.1:9000", "http://127.0.0.1:9000/report"),
            ("http://127.0.0.1:9000/", "http://127.0.0.1:9000/report"),
            ("http://h:1/a/b/c", "http://h:1/report"),
            (
                "http://h:1/ingest?token=abc&x=1",
                "http://h:1/report?token=abc&x=1",
            ),
            ("http://h:1?token=abc", "http://h:1/report?token=abc"),
            ("http://h:1/x?token=abc#frag", "http://h:1/report?token=abc"),
            ("HTTP://h:1/x?", "http://h:1/report"),
        ] {
            let target = Target::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(target.uri.to_string(), want, "{url}");
            assert_eq!(target.authorization, None, "{url}");
        }
    }

    #[test]
    fn user_info_becomes_basic_auth_and_leaves_the_url() {
        let target = Target::parse("http://user:pass@h:1/x?token=abc").expect("parses");
        assert_eq!(target.uri.to_string(), "http://h:1/report?token=abc");
        let auth = target.authorization.expect("basic auth");
        assert!(auth.is_sensitive());
        // base64("user:pass")
        assert_eq!(auth, "Basic dXNlcjpwYXNz");
        // Percent-decoded, as reqwest does; no password is "user:".
        let target = Target::parse("http://us%40er:p%3Ass@h:1").expect("parses");
        assert_eq!(
            target.authorization.expect("auth"),
            format!("Basic {}", base64(b"us@er:p:ss"))
        );
        let target = Target::parse("http://user@h:1").expect("parses");
        assert_eq!(
            target.authorization.as_ref().expect("auth"),
            "Basic dXNlcjo="
        );
        assert_eq!(target.redacted(), "http://h:1/report");
        let target = Target::parse("http://u:p@h:1/?token=secret").expect("parses");
        assert_eq!(target.redacted(), "http://h:1/report?…");
    }

    #[test]
    fn only_http_urls() {
        for url in ["https://h/report", "h:1", "http:///x", "ftp://h/"] {
            assert!(Target::parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input}");
        }
        assert_eq!(percent_decode("a%2Fb%zz%4"), b"a/b%zz%4");
    }

    fn rpc_1559() -> Value {
        json!({
            "type": "0x2", "hash": format!("0x{}", "11".repeat(32)),
            "from": "0x00000000000000000000000000000000000000f1",
            "to": "0x5fbdb2315678afecb367f032d93f642f64180aa3",
            "gas": "0x186a0", "gasPrice": "0x6fc23ac0",
            "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x3b9aca00",
            "value": "0x1", "input": "0xaa60e733", "nonce": "0x7", "chainId": "0x7a69",
            "accessList": [{"address": "0x00000000000000000000000000000000000000a0",
                "storageKeys": [format!("0x{}", "00".repeat(31) + "01")]}],
            "v": "0x1", "yParity": "0x1", "r": "0x1", "s": "0x2"
        })
    }

    #[test]
    fn a_json_rpc_transaction_in_revms_tx_env_shape() {
        let env = TxEnv::from_rpc(&rpc_1559()).expect("tx env");
        let json = serde_json::to_value(&env).expect("json");
        assert_eq!(
            json,
            json!({
                "tx_type": 2,
                "caller": "0x00000000000000000000000000000000000000f1",
                "gas_limit": 100_000,
                "gas_price": 2_000_000_000u64,
                "kind": "0x5fbdb2315678afecb367f032d93f642f64180aa3",
                "value": "0x1",
                "data": "0xaa60e733",
                "nonce": 7,
                "chain_id": 31337,
                "access_list": [{"address": "0x00000000000000000000000000000000000000a0",
                    "storageKeys": [format!("0x{}", "00".repeat(31) + "01")]}],
                "gas_priority_fee": 1_000_000_000u64,
                "blob_hashes": [],
                "max_fee_per_blob_gas": 0,
                "authorization_list": []
            })
        );
        // The field order of revm's struct.
        let text = serde_json::to_string(&env).expect("json");
        let order = [
            "tx_type",
            "caller",
            "gas_limit",
            "gas_price",
            "kind",
            "value",
            "data",
            "nonce",
            "chain_id",
            "access_list",
            "gas_priority_fee",
            "blob_hashes",
            "max_fee_per_blob_gas",
            "authorization_list",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|k| text.find(&format!("\"{k}\"")).expect(k))
            .collect();
        assert!(positions.is_sorted(), "{text}");
        // A two-element array body.
        let body: Value =
            serde_json::from_slice(&body(B256::repeat_byte(0x11), &env).expect("body"))
                .expect("json");
        assert_eq!(body[0], json!(format!("0x{}", "11".repeat(32))));
        assert_eq!(body[1], json);
        assert_eq!(body.as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn legacy_creations_and_7702_authorizations() {
        let mut tx = rpc_1559();
        tx["type"] = json!("0x0");
        tx["to"] = Value::Null;
        tx["chainId"] = Value::Null;
        tx.as_object_mut().map(|o| o.remove("accessList"));
        let env = TxEnv::from_rpc(&tx).expect("tx env");
        assert_eq!(env.gas_price, 0x6fc23ac0, "the gas price before EIP-1559");
        let json = serde_json::to_value(&env).expect("json");
        assert_eq!(json["kind"], Value::Null, "a creation");
        assert_eq!(json["gas_priority_fee"], Value::Null);
        assert_eq!(json["chain_id"], Value::Null);
        assert_eq!(json["access_list"], json!([]));

        let mut tx = rpc_1559();
        tx["type"] = json!("0x4");
        tx["authorizationList"] = json!([{"chainId": "0x7a69",
            "address": "0x00000000000000000000000000000000000000b1", "nonce": "0x3",
            "yParity": "0x1", "r": "0x5", "s": "0x6"}]);
        let json = serde_json::to_value(TxEnv::from_rpc(&tx).expect("tx env")).expect("json");
        assert_eq!(
            json["authorization_list"],
            json!([{"Left": {"chainId": "0x7a69",
                "address": "0x00000000000000000000000000000000000000b1", "nonce": "0x3",
                "yParity": "0x1", "r": "0x5", "s": "0x6"}}])
        );
        let mut bad = rpc_1559();
        bad["from"] = json!("nope");
        assert!(TxEnv::from_rpc(&bad).is_err());
    }

    #[test]
    fn a_raw_transaction_in_revms_tx_env_shape() {
        let target = Address::repeat_byte(0xa0);
        let raw = sign(TxEip1559 {
            chain_id: 31337,
            nonce: 7,
            gas_limit: 100_000,
            max_fee_per_gas: 2_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(target),
            value: U256::from(1),
            access_list: AccessList(vec![AccessListItem {
                address: target,
                storage_keys: vec![B256::repeat_byte(1)],
            }]),
            input: vec![0xaa, 0x60, 0xe7, 0x33].into(),
        });
        let tx = txgate_screen::decode(&raw).expect("decodes");
        let sender = txgate_screen::recover_sender(&tx).expect("recovers");
        let env = TxEnv::from_raw(&tx, &raw, sender).expect("tx env");
        assert_eq!(
            env,
            TxEnv {
                tx_type: 2,
                caller: sender,
                gas_limit: 100_000,
                gas_price: 2_000_000_000,
                kind: Some(target),
                value: U256::from(1),
                data: vec![0xaa, 0x60, 0xe7, 0x33].into(),
                nonce: 7,
                chain_id: Some(31337),
                access_list: vec![AccessItem {
                    address: target,
                    storage_keys: vec![B256::repeat_byte(1)],
                }],
                gas_priority_fee: Some(1_000_000_000),
                blob_hashes: Vec::new(),
                max_fee_per_blob_gas: 0,
                authorization_list: Vec::new(),
            }
        );

        let raw = sign(TxLegacy {
            chain_id: Some(31337),
            nonce: 1,
            gas_price: 3_000_000_000,
            gas_limit: 21_000,
            to: TxKind::Create,
            value: U256::ZERO,
            input: vec![0x60, 0x00].into(),
        });
        let tx = txgate_screen::decode(&raw).expect("decodes");
        let sender = txgate_screen::recover_sender(&tx).expect("recovers");
        let env = TxEnv::from_raw(&tx, &raw, sender).expect("tx env");
        assert_eq!(
            (
                env.tx_type,
                env.gas_price,
                env.gas_priority_fee,
                env.kind,
                env.nonce
            ),
            (0, 3_000_000_000, None, None, 1)
        );
    }

    fn env() -> TxEnv {
        TxEnv::from_rpc(&rpc_1559()).expect("tx env")
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_report_is_posted_to_report_with_the_query_and_basic_auth() {
        let (addr, mut got) = receiver(200, Duration::ZERO).await;
        let reporter =
            Reporter::new(&format!("http://user:pass@{addr}/ignored?token=abc")).expect("reporter");
        assert!(reporter.report(B256::repeat_byte(0x11), &env()));
        let (path, auth, body) = tokio::time::timeout(Duration::from_secs(5), got.recv())
            .await
            .expect("in time")
            .expect("a report");
        assert_eq!(path, "/report?token=abc");
        assert_eq!(auth.as_deref(), Some("Basic dXNlcjpwYXNz"));
        assert_eq!(body[0], json!(format!("0x{}", "11".repeat(32))));
        assert_eq!(body[1]["nonce"], json!(7));
        assert_eq!(reporter.dropped(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_refused_report_is_logged_at_warn() {
        let logs = Logs::default();
        let _guard = logs.capture();
        let (addr, mut got) = receiver(503, Duration::ZERO).await;
        let reporter = Reporter::new(&format!("http://{addr}")).expect("reporter");
        assert!(reporter.report(B256::repeat_byte(0x11), &env()));
        let (path, auth, _) = got.recv().await.expect("a report");
        assert_eq!((path.as_str(), auth), ("/report", None));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !logs.text().contains("failure report refused") {
            assert!(tokio::time::Instant::now() < deadline, "{}", logs.text());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let text = logs.text();
        assert!(
            text.contains("WARN") && text.contains("status=503"),
            "{text}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn beyond_the_cap_in_flight_reports_are_dropped_and_counted() {
        // The receiver holds every answer: posts stay in flight.
        let (addr, mut got) = receiver(200, Duration::from_secs(30)).await;
        let reporter = Reporter::with_limits(&format!("http://{addr}"), Duration::from_secs(30), 2)
            .expect("reporter");
        let started: Vec<bool> = (0..5)
            .map(|i| reporter.report(B256::repeat_byte(i), &env()))
            .collect();
        assert_eq!(started, [true, true, false, false, false], "never waits");
        assert_eq!(reporter.dropped(), 3);
        for _ in 0..2 {
            got.recv().await.expect("a report");
        }
        // Without a runtime (or when disabled), nothing is posted.
        assert!(!Reporter::disabled().report(B256::ZERO, &env()));
        assert_eq!(Reporter::disabled().dropped(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_slot_is_freed_when_a_post_ends() {
        let (addr, mut got) = receiver(200, Duration::ZERO).await;
        let reporter = Reporter::with_limits(&format!("http://{addr}"), Duration::from_secs(5), 1)
            .expect("reporter");
        for i in 0..3 {
            assert!(reporter.report(B256::repeat_byte(i), &env()), "report {i}");
            got.recv().await.expect("a report");
            let inner = reporter.inner.as_ref().expect("enabled");
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            while inner.in_flight.load(Ordering::Acquire) > 0 {
                assert!(tokio::time::Instant::now() < deadline);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        assert_eq!(reporter.dropped(), 0);
    }

    #[test]
    fn without_a_runtime_a_report_is_dropped_not_a_panic() {
        let reporter = Reporter::new("http://127.0.0.1:9/").expect("reporter");
        assert!(!reporter.report(B256::ZERO, &env()));
        assert_eq!(reporter.dropped(), 1);
        let inner = reporter.inner.as_ref().expect("enabled");
        assert_eq!(inner.in_flight.load(Ordering::Acquire), 0);
    }
}
