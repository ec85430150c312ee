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
//!
//! Here: the routing, by path and method, to `query` (what a request
//! names), `lookup`, `lift` and `list` (the export and import format).

mod lift;
mod list;
mod lookup;
mod query;

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use txgate_screen::{Millis, Screen};

pub use super::json_http::{AdminBody, error};
use super::json_http::{Refused, authorize, ok, parse, read};
use crate::metrics::Metrics;
use crate::metrics::admin::{Answered, Endpoint};
use list::List;
pub use list::MAX_IMPORT_TTL_MS;
use query::Query;

/// Largest lookup or lift request body (a raw transaction fits).
const MAX_SMALL_BODY: usize = 512 * 1024;

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

#[cfg(test)]
mod tests;
