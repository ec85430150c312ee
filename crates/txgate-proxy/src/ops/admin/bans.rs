//! The ban endpoints of the admin listener: why a transaction, a
//! fingerprint, a sender or a call is refused, and lifting, exporting and
//! importing bans by hand.
//!
//! | endpoint | what |
//! |---|---|
//! | `GET /bans/lookup?tx_hash=…&fingerprint=…&sender=…&raw=…`, or `POST /bans/lookup` with the same keys in a JSON object | what is held against each, and which rule would refuse it now |
//! | `GET /bans` | every ban in force or suspect, as JSON, streamed a shard at a time |
//! | `POST /bans/lift` `{"fingerprint"?, "sender"?, "tx_hash"?}` | lifts a ban, a sender's backoff, a failed tx hash |
//! | `POST /bans/import` (what `GET /bans` gave) | adds those bans (moving bans between instances, seeding a new one) |
//!
//! An import never moves the assertion table (a ban naming an assertion
//! held here at another version is skipped), ages the bans by the time
//! since the export was taken, and caps them at this instance's ban time.
//! A cooldown is not lifted here: it ends by itself (its duration) or with
//! a new version of its assertion.
//!
//! Access: with `admin.token_file`, every request needs `Authorization:
//! Bearer <token>` (401 otherwise); without it, only loopback peers are
//! served (403 otherwise). Checked before the body is read. Bad input is a
//! 400 with a JSON `{"error": …}` that says what was wrong. Every change is
//! logged (target `txgate::admin`, with the peer) and counted
//! (`txgate_admin_ban_changes_total{action}`); every request is counted by
//! endpoint and result (`txgate_admin_ban_requests_total`).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use alloy_primitives::{Address, B256};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde::Deserialize;
use serde_json::{Value, json};
use txgate_screen::snapshot::BanRecord;
use txgate_screen::{
    AssertionKey, BanView, CooldownView, Fingerprint, Millis, Screen, decode, decode_hex,
    recover_sender, tx_hash,
};

pub use super::json_http::{AdminBody, error};
use super::json_http::{Refused, authorize, ok, parse, read};
use crate::ops::metrics::Metrics;
use crate::ops::metrics::admin::{Answered, Change, Endpoint};

/// Largest lookup or lift request body (a raw transaction fits).
const MAX_SMALL_BODY: usize = 512 * 1024;
/// Longest ban an import may ask for.
pub const MAX_IMPORT_TTL_MS: Millis = 7 * 24 * 3_600_000;
/// The export format's name and version.
const FORMAT: &str = "txgate-bans";
const VERSION: u64 = 1;

/// See the module docs.
#[derive(Debug)]
pub struct Bans {
    screen: Arc<Screen>,
    token: Option<String>,
    max_import_bytes: usize,
    metrics: Arc<Metrics>,
}

impl Bans {
    /// The endpoints over `screen`; `token` from `admin.token_file`.
    pub fn new(
        screen: Arc<Screen>,
        token: Option<String>,
        max_import_bytes: usize,
        metrics: Arc<Metrics>,
    ) -> Bans {
        Bans {
            screen,
            token,
            max_import_bytes,
            metrics,
        }
    }

    /// Answers one request to a `/bans` path from `peer`.
    pub async fn handle<B>(&self, req: Request<B>, peer: IpAddr) -> Response<AdminBody>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let Some((endpoint, allowed)) = endpoint(req.uri().path()) else {
            return error(StatusCode::NOT_FOUND, "no such ban endpoint");
        };
        let answer = self.serve(endpoint, allowed, req, peer).await;
        let (answered, response) = match answer {
            Ok(response) => (Answered::Ok, response),
            Err(refused) => (refused.answered, refused.response(allowed)),
        };
        self.metrics.admin.request(endpoint, answered);
        response
    }

    async fn serve<B>(
        &self,
        endpoint: Endpoint,
        allowed: &str,
        req: Request<B>,
        peer: IpAddr,
    ) -> Result<Response<AdminBody>, Refused>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let method = req.method();
        let method_ok = match endpoint {
            Endpoint::Lookup => method == Method::GET || method == Method::POST,
            Endpoint::Export => method == Method::GET,
            Endpoint::Lift | Endpoint::Import => method == Method::POST,
        };
        if !method_ok {
            return Err(Refused {
                status: StatusCode::METHOD_NOT_ALLOWED,
                answered: Answered::BadRequest,
                message: format!("use {allowed}"),
            });
        }
        // Who may ask, before anything is read.
        self.authorize(&req, peer)?;
        let now = self.screen.millis(tokio::time::Instant::now().into_std());
        match endpoint {
            Endpoint::Export => Ok(self.export(now)),
            Endpoint::Lookup if req.method() == Method::GET => {
                let query = Query::from_query(req.uri().query().unwrap_or(""))?;
                Ok(ok(&self.lookup(&query, now)?))
            }
            Endpoint::Lookup => {
                let query: Query = parse(&read(req, MAX_SMALL_BODY).await?)?;
                Ok(ok(&self.lookup(&query, now)?))
            }
            Endpoint::Lift => {
                let lift: Query = parse(&read(req, MAX_SMALL_BODY).await?)?;
                Ok(ok(&self.lift(&lift, peer, now)?))
            }
            Endpoint::Import => {
                let list: List = parse(&read(req, self.max_import_bytes).await?)?;
                Ok(ok(&self.import(list, peer, now)?))
            }
        }
    }

    fn authorize<B>(&self, req: &Request<B>, peer: IpAddr) -> Result<(), Refused> {
        authorize(self.token.as_deref(), req, peer)
    }

    /// What is held against what the query names; see [`Lookup`].
    fn lookup(&self, query: &Query, now: Millis) -> Result<Value, Refused> {
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

    fn lift(&self, lift: &Query, peer: IpAddr, now: Millis) -> Result<Value, Refused> {
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

    fn import(&self, list: List, peer: IpAddr, now: Millis) -> Result<Value, Refused> {
        if list.format != FORMAT || list.version != VERSION {
            return Err(Refused::bad(format!(
                "expected format \"{FORMAT}\" version {VERSION} (what GET /bans gives)"
            )));
        }
        // An export taken a while ago: its times have run on since.
        let aged = list
            .taken_at_unix_ms
            .map_or(0, |taken| Clock::now().unix_ms.saturating_sub(taken));
        let records = list
            .bans
            .iter()
            .enumerate()
            .map(|(i, ban)| {
                ban.record()
                    .map(|mut r| {
                        r.expires_in = r.expires_in.saturating_sub(aged);
                        r.suspect_for = r.suspect_for.saturating_sub(aged);
                        r
                    })
                    .map_err(|e| Refused::bad(format!("bans[{i}]: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let imported = self.screen.import_bans_by_hand(&records, now);
        self.metrics
            .admin
            .change(Change::Import)
            .inc_by(imported as u64);
        tracing::warn!(
            target: "txgate::admin",
            action = Change::Import.as_str(),
            imported,
            given = records.len(),
            peer = %peer,
            "bans imported by hand"
        );
        Ok(json!({
            "imported": imported,
            "skipped": records.len() - imported,
        }))
    }

    /// Every ban in force or suspect, a shard at a time: memory holds one
    /// shard's records, whatever the set's size.
    fn export(&self, now: Millis) -> Response<AdminBody> {
        let screen = self.screen.clone();
        let clock = Clock::now();
        let head = format!(
            "{{\"format\":\"{FORMAT}\",\"version\":{VERSION},\"taken_at_unix_ms\":{},\"bans\":[",
            clock.unix_ms
        );
        let shards = screen.ban_shards();
        let mut first = true;
        let chunks = (0..shards).map(move |shard| {
            let mut out = String::new();
            for record in screen.export_bans_in(shard, now) {
                out.push_str(if first { "\n" } else { ",\n" });
                first = false;
                write_record(&mut out, &record);
            }
            Bytes::from(out)
        });
        let body = std::iter::once(Bytes::from(head))
            .chain(chunks)
            .chain(std::iter::once(Bytes::from_static(b"\n]}\n")))
            .map(|b| Ok::<_, Infallible>(Frame::data(b)));
        let mut response =
            Response::new(StreamBody::new(futures_util::stream::iter(body)).boxed_unsync());
        response
            .headers_mut()
            .insert(CONTENT_TYPE, crate::rpc::rescue::JSON);
        response
    }
}

/// The endpoint at `path` and the methods it takes.
pub fn endpoint(path: &str) -> Option<(Endpoint, &'static str)> {
    match path {
        "/bans/lookup" => Some((Endpoint::Lookup, "GET, POST")),
        "/bans" => Some((Endpoint::Export, "GET")),
        "/bans/lift" => Some((Endpoint::Lift, "POST")),
        "/bans/import" => Some((Endpoint::Import, "POST")),
        _ => None,
    }
}

/// What a lookup or a lift names (JSON object or query string); hex
/// strings, `0x` optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    tx_hash: Option<String>,
    fingerprint: Option<String>,
    sender: Option<String>,
    raw: Option<String>,
}

impl Query {
    fn from_query(query: &str) -> Result<Query, Refused> {
        let mut q = Query::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match key {
                "tx_hash" => &mut q.tx_hash,
                "fingerprint" => &mut q.fingerprint,
                "sender" => &mut q.sender,
                "raw" => &mut q.raw,
                _ => {
                    return Err(Refused::bad(format!(
                        "unknown parameter `{}` (tx_hash, fingerprint, sender, raw)",
                        key.chars().take(32).collect::<String>()
                    )));
                }
            };
            *slot = Some(value.to_owned());
        }
        Ok(q)
    }
}

/// What a lookup learns from its query.
#[derive(Debug, Default)]
struct Facts {
    tx_hash: Option<B256>,
    fingerprint: Option<B256>,
    sender: Option<Address>,
    call: Option<(Address, [u8; 4])>,
    /// The forwarded map's entry for the tx hash.
    forwarded: Option<(B256, Address)>,
}

impl Facts {
    fn of(q: &Query, screen: &Screen, now: Millis) -> Result<Facts, Refused> {
        if q.tx_hash.is_none() && q.fingerprint.is_none() && q.sender.is_none() && q.raw.is_none() {
            return Err(Refused::bad(
                "name a tx_hash, fingerprint, sender or raw transaction",
            ));
        }
        let mut f = Facts {
            tx_hash: q.tx_hash.as_deref().map(b256("tx_hash")).transpose()?,
            fingerprint: q
                .fingerprint
                .as_deref()
                .map(b256("fingerprint"))
                .transpose()?,
            sender: q.sender.as_deref().map(address).transpose()?,
            ..Facts::default()
        };
        if let Some(raw) = &q.raw {
            let bytes = decode_hex(raw).map_err(|e| Refused::bad(format!("raw: {e}")))?;
            let tx = decode(&bytes).map_err(|e| Refused::bad(format!("raw: {e}")))?;
            f.tx_hash.get_or_insert(tx_hash(&bytes));
            if let Some(fp) = Fingerprint::of(&tx) {
                f.fingerprint.get_or_insert(fp.hash);
                f.call = Some((fp.target, fp.selector));
            }
            let sender = recover_sender(&tx).map_err(|e| Refused::bad(format!("raw: {e}")))?;
            f.sender.get_or_insert(sender);
        }
        // A tx hash this instance forwarded names its fingerprint and
        // sender too.
        if let Some(forward) = f.tx_hash.and_then(|h| screen.forwarded(&h, now)) {
            f.forwarded = Some((forward.fingerprint.hash, forward.sender));
            f.fingerprint.get_or_insert(forward.fingerprint.hash);
            f.sender.get_or_insert(forward.sender);
            f.call
                .get_or_insert((forward.fingerprint.target, forward.fingerprint.selector));
        }
        Ok(f)
    }
}

/// An export, or an import.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct List {
    format: String,
    version: u64,
    /// When the export was taken: imported times are aged by what has
    /// passed since.
    #[serde(default)]
    taken_at_unix_ms: Option<u64>,
    bans: Vec<BanJson>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BanJson {
    fingerprint: String,
    expires_in_ms: Millis,
    suspect_for_ms: Millis,
    #[serde(default)]
    assertions: Vec<AssertionJson>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AssertionJson {
    id: String,
    version: u64,
}

impl BanJson {
    fn record(&self) -> Result<BanRecord, String> {
        let fingerprint = B256::from_str(&self.fingerprint)
            .map_err(|_| "fingerprint is not 32 bytes of hex".to_string())?;
        if self.expires_in_ms > MAX_IMPORT_TTL_MS || self.suspect_for_ms > 2 * MAX_IMPORT_TTL_MS {
            return Err(format!(
                "a ban of at most {MAX_IMPORT_TTL_MS} ms (suspect window twice that) may be imported"
            ));
        }
        if self.suspect_for_ms < self.expires_in_ms {
            return Err("suspect_for_ms is shorter than expires_in_ms".into());
        }
        if self.assertions.len() > 2 {
            return Err("at most 2 assertions per ban".into());
        }
        let assertions = self
            .assertions
            .iter()
            .map(|a| {
                B256::from_str(&a.id)
                    .map(|id| AssertionKey {
                        id,
                        version: a.version,
                    })
                    .map_err(|_| "assertion id is not 32 bytes of hex".to_string())
            })
            .collect::<Result<_, _>>()?;
        Ok(BanRecord {
            fingerprint,
            expires_in: self.expires_in_ms,
            suspect_for: self.suspect_for_ms,
            assertions,
        })
    }
}

fn write_record(out: &mut String, r: &BanRecord) {
    let _ = write!(
        out,
        "{{\"fingerprint\":\"{}\",\"expires_in_ms\":{},\"suspect_for_ms\":{},\"assertions\":[",
        r.fingerprint, r.expires_in, r.suspect_for
    );
    for (i, a) in r.assertions.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"id\":\"{}\",\"version\":{}}}",
            if i == 0 { "" } else { "," },
            a.id,
            a.version
        );
    }
    out.push_str("]}");
}

/// Unix time now, to show when something ends.
#[derive(Debug, Clone, Copy)]
struct Clock {
    unix_ms: u64,
}

impl Clock {
    fn now() -> Clock {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Clock { unix_ms }
    }

    fn until(&self, in_ms: Millis) -> u64 {
        self.unix_ms.saturating_add(in_ms)
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

fn b256(what: &'static str) -> impl Fn(&str) -> Result<B256, Refused> {
    move |text| {
        B256::from_str(text.trim())
            .map_err(|_| Refused::bad(format!("{what} is not 32 bytes of hex")))
    }
}

fn address(text: &str) -> Result<Address, Refused> {
    Address::from_str(text.trim()).map_err(|_| Refused::bad("sender is not 20 bytes of hex"))
}

#[cfg(test)]
mod tests;
