//! The conditional switch on the admin listener: `GET /conditional` says
//! whether `eth_sendRawTransactionConditional` is accepted; `POST
//! /conditional` with `{"enabled": true|false}` turns it on or off for
//! every worker at once, open connections kept (the same switch SIGHUP
//! sets from the config file; a later SIGHUP applies the file's value
//! again). Access as the ban endpoints: the admin token when
//! `admin.token_file` is set, else loopback only. Every change is logged
//! (target `txgate::admin`, with the peer) and counted
//! (`txgate_conditional_switches_total`).

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::json_http::{AdminBody, Refused, authorize, ok, parse, read};
use crate::rpc::conditional::Conditions;

/// The path.
pub const PATH: &str = "/conditional";

/// The switch's endpoint.
#[derive(Debug)]
pub struct Switch {
    conditions: Arc<Conditions>,
    token: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Set {
    enabled: bool,
}

impl Switch {
    /// The endpoint over `conditions`; `token` from `admin.token_file`.
    pub fn new(conditions: Arc<Conditions>, token: Option<String>) -> Switch {
        Switch { conditions, token }
    }

    /// Answers one request to [`PATH`] from `peer`.
    pub async fn handle<B>(&self, req: Request<B>, peer: IpAddr) -> Response<AdminBody>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        match self.serve(req, peer).await {
            Ok(response) => response,
            Err(refused) => refused.response("GET, POST"),
        }
    }

    async fn serve<B>(&self, req: Request<B>, peer: IpAddr) -> Result<Response<AdminBody>, Refused>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let method = req.method().clone();
        if method != Method::GET && method != Method::POST {
            return Err(Refused {
                status: StatusCode::METHOD_NOT_ALLOWED,
                answered: crate::metrics::admin::Answered::BadRequest,
                message: "use GET or POST".into(),
            });
        }
        authorize(self.token.as_deref(), &req, peer)?;
        if method == Method::GET {
            return Ok(ok(&json!({ "enabled": self.conditions.enabled() })));
        }
        let set: Set = parse(&read(req, 1024).await?)?;
        let was = self.conditions.set_enabled(set.enabled);
        if was != set.enabled {
            tracing::warn!(
                target: "txgate::admin",
                peer = %peer,
                enabled = set.enabled,
                "conditional transactions switched by the admin endpoint"
            );
        }
        Ok(ok(&json!({ "enabled": set.enabled, "was": was })))
    }
}
