//! The ban list, `GET /bans` and `POST /bans/import`: its format
//! (`txgate-bans` version 1), written a shard at a time on export, read
//! and checked whole on import.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::str::FromStr;

use alloy_primitives::B256;
use bytes::Bytes;
use http::Response;
use http::header::CONTENT_TYPE;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde::Deserialize;
use serde_json::{Value, json};
use txgate_screen::snapshot::BanRecord;
use txgate_screen::{AssertionKey, Millis};

use super::{AdminBody, Bans, Clock, Refused};
use crate::metrics::admin::Change;

/// Longest ban an import may ask for.
pub const MAX_IMPORT_TTL_MS: Millis = 7 * 24 * 3_600_000;
/// The export format's name and version.
const FORMAT: &str = "txgate-bans";
const VERSION: u64 = 1;

impl Bans {
    pub(super) fn import(&self, list: List, peer: IpAddr, now: Millis) -> Result<Value, Refused> {
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
    pub(super) fn export(&self, now: Millis) -> Response<AdminBody> {
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
            .insert(CONTENT_TYPE, crate::request::JSON);
        response
    }
}

/// An export, or an import.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct List {
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
