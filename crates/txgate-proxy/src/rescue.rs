//! The one place where failures become HTTP responses.
//!
//! Every refusal in the request path is a [`Refusal`]; this module picks its
//! HTTP status, JSON-RPC code and message. Messages name what the caller did
//! wrong or which limit applies, never internal detail.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;
use txgate_jsonrpc::{Id, code, encode};

use crate::metrics::Outcome;

/// The response body type of every txgate response.
pub type Body = Full<Bytes>;

/// `application/json`, shared.
pub(crate) const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// Why a request is refused as a whole.
#[derive(Debug)]
pub enum Refusal {
    /// Over the global in-flight cap.
    Overloaded,
    /// Not a POST.
    BadHttpMethod,
    /// Content type is not JSON.
    BadContentType,
    /// Body over `rpc.max_body_bytes`.
    BodyTooLarge(usize),
    /// Client did not send its body in time.
    BodyTimeout,
    /// Body could not be read.
    BodyError,
    /// Not JSON.
    Parse,
    /// JSON, but not a request (with the caller's id when readable).
    InvalidRequest(&'static str),
    /// Batch over `rpc.max_batch_size`.
    BatchTooLarge {
        /// Calls in the batch.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// Method refused by the policy.
    MethodDenied,
    /// Upstream unreachable, broken, or answered with a non-JSON-RPC error.
    UpstreamUnavailable,
    /// Upstream did not answer within the call timeout.
    UpstreamTimeout,
}

impl Refusal {
    /// HTTP status, JSON-RPC code and outcome label.
    pub fn classify(&self) -> (StatusCode, i64, Outcome) {
        match self {
            Refusal::Overloaded => (
                StatusCode::TOO_MANY_REQUESTS,
                code::LIMIT_EXCEEDED,
                Outcome::Overloaded,
            ),
            Refusal::BadHttpMethod => (
                StatusCode::METHOD_NOT_ALLOWED,
                code::INVALID_REQUEST,
                Outcome::BadHttpMethod,
            ),
            Refusal::BadContentType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code::INVALID_REQUEST,
                Outcome::BadContentType,
            ),
            Refusal::BodyTooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                code::LIMIT_EXCEEDED,
                Outcome::BodyTooLarge,
            ),
            Refusal::BodyTimeout => (
                StatusCode::REQUEST_TIMEOUT,
                code::INVALID_REQUEST,
                Outcome::BodyTimeout,
            ),
            Refusal::BodyError => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Outcome::BodyError,
            ),
            Refusal::Parse => (
                StatusCode::BAD_REQUEST,
                code::PARSE_ERROR,
                Outcome::ParseError,
            ),
            Refusal::InvalidRequest(_) => (
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Outcome::InvalidRequest,
            ),
            Refusal::BatchTooLarge { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                code::LIMIT_EXCEEDED,
                Outcome::BatchTooLarge,
            ),
            // Like a node that lacks the method: HTTP 200, error in the body.
            Refusal::MethodDenied => (
                StatusCode::OK,
                code::METHOD_NOT_FOUND,
                Outcome::MethodDenied,
            ),
            Refusal::UpstreamUnavailable => (
                StatusCode::BAD_GATEWAY,
                code::INTERNAL_ERROR,
                Outcome::UpstreamUnavailable,
            ),
            Refusal::UpstreamTimeout => (
                StatusCode::GATEWAY_TIMEOUT,
                code::INTERNAL_ERROR,
                Outcome::UpstreamTimeout,
            ),
        }
    }

    /// The message the caller reads.
    pub fn message(&self) -> String {
        match self {
            Refusal::Overloaded => {
                "limit exceeded: too many requests in flight, retry later".into()
            }
            Refusal::BadHttpMethod => "invalid request: JSON-RPC requests must be POST".into(),
            Refusal::BadContentType => {
                "invalid request: content-type must be application/json".into()
            }
            Refusal::BodyTooLarge(max) => {
                format!("limit exceeded: request body is larger than {max} bytes")
            }
            Refusal::BodyTimeout => "invalid request: request body not received in time".into(),
            Refusal::BodyError => "invalid request: request body could not be read".into(),
            Refusal::Parse => "parse error: body is not valid JSON".into(),
            Refusal::InvalidRequest(message) => (*message).into(),
            Refusal::BatchTooLarge { len, max } => {
                format!("limit exceeded: batch of {len} calls exceeds the limit of {max}")
            }
            Refusal::MethodDenied => "the method does not exist/is not available".into(),
            Refusal::UpstreamUnavailable => "upstream unavailable".into(),
            Refusal::UpstreamTimeout => "upstream timed out".into(),
        }
    }

    /// Writes this refusal as one error object (a batch element).
    pub fn write(&self, out: &mut Vec<u8>, id: Option<Id<'_>>) {
        let (_, code, _) = self.classify();
        encode::write_error(out, id.map(|i| i.as_str()), code, &self.message(), None);
    }

    /// The whole HTTP response for this refusal.
    pub fn respond(&self, id: Option<Id<'_>>, retry_after: &HeaderValue) -> Response<Body> {
        let (status, code, _) = self.classify();
        let body = encode::error(id, code, &self.message(), None);
        let mut response = json_response(status, body);
        if status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(RETRY_AFTER, retry_after.clone());
        }
        response
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overloaded_carries_retry_after_and_limit_code() {
        let r = Refusal::Overloaded.respond(None, &HeaderValue::from_static("3"));
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[RETRY_AFTER], "3");
        assert_eq!(Refusal::Overloaded.classify().1, code::LIMIT_EXCEEDED);
    }

    #[test]
    fn only_429_carries_retry_after() {
        let r = Refusal::Parse.respond(None, &HeaderValue::from_static("3"));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert!(r.headers().get(RETRY_AFTER).is_none());
        assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
    }
}
