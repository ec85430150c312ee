//! What a request carries through every stage, the ground the stages
//! stand on: the response body type and JSON responses, the client it
//! comes from ([`Client`]), its connection's place ([`ConnectionSlot`]),
//! and how a stage's refusal becomes a JSON-RPC error ([`Refuse`]). Each
//! stage defines its own refusal type and implements [`Refuse`] for it;
//! nothing here knows the stages.

mod refuse;
mod slot;

use std::net::IpAddr;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;

pub use refuse::{Class, Refuse};
pub use slot::{ConnectionSlot, InFlight};

/// The response body type of every txgate response.
pub type Body = Full<Bytes>;

/// `application/json`, shared.
pub(crate) const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// The client of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// The client's address: what limits and logs use.
    pub ip: IpAddr,
    /// The TCP peer the request came in on (the balancer, behind one).
    pub peer: IpAddr,
}

/// A JSON response.
pub fn json_response(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, JSON);
    response
}

/// 204 for a request made only of notifications.
pub fn no_content() -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}
