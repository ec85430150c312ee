//! How a refusal becomes a JSON-RPC error: every stage's refusal type
//! says its HTTP status, JSON-RPC code, outcome label, message and data
//! ([`Refuse`]); the framing here is written once.

use http::header::{HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use serde_json::value::RawValue;
use txgate_jsonrpc::{Id, encode};

use super::{Body, json_response};
use crate::metrics::Outcome;

/// How a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    /// The HTTP status of a response made only of this refusal.
    pub status: StatusCode,
    /// The JSON-RPC error code.
    pub code: i64,
    /// The outcome label it is counted under.
    pub outcome: Outcome,
}

impl Class {
    /// A class from its three parts.
    pub const fn new(status: StatusCode, code: i64, outcome: Outcome) -> Class {
        Class {
            status,
            code,
            outcome,
        }
    }
}

/// A refusal: what the caller is told. Messages name what the caller did
/// wrong or which limit applies, never internal detail.
pub trait Refuse {
    /// HTTP status, JSON-RPC code and outcome label.
    fn class(&self) -> Class;

    /// The message the caller reads.
    fn message(&self) -> String;

    /// `Retry-After` seconds, for refusals that carry their own.
    fn retry_after_secs(&self) -> Option<u64> {
        None
    }

    /// The error's `data`, if it has one.
    fn data(&self) -> Option<Box<RawValue>> {
        None
    }

    /// Writes this refusal as one error object (a batch element).
    fn write(&self, out: &mut Vec<u8>, id: Option<Id<'_>>) {
        self.write_raw_id(out, id.map(|i| i.as_str()));
    }

    /// Writes this refusal under an id kept as its JSON text.
    fn write_raw_id(&self, out: &mut Vec<u8>, id: Option<&str>) {
        let data = self.data();
        encode::write_error(out, id, self.class().code, &self.message(), data.as_deref());
    }

    /// The whole HTTP response for this refusal; a 429 carries
    /// `Retry-After`: the refusal's own, else `retry_after`.
    fn respond(&self, id: Option<Id<'_>>, retry_after: &HeaderValue) -> Response<Body> {
        let Class { status, code, .. } = self.class();
        let data = self.data();
        let body = encode::error(id, code, &self.message(), data.as_deref());
        let mut response = json_response(status, body);
        if status == StatusCode::TOO_MANY_REQUESTS {
            let value = match self.retry_after_secs() {
                Some(secs) => HeaderValue::from(secs),
                None => retry_after.clone(),
            };
            response.headers_mut().insert(RETRY_AFTER, value);
        }
        response
    }
}
