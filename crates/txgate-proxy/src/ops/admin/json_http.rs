//! The HTTP side of the admin endpoints that answer JSON, the ban
//! endpoints ([`super::bans`]) and the conditional switch
//! ([`super::switch`]): who may ask, a request body read within its size
//! and time limits and parsed, and the answers, refusals included.

use std::convert::Infallible;
use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::metrics::admin::Answered;

/// The body of every admin answer.
pub type AdminBody = UnsyncBoxBody<Bytes, Infallible>;

/// How long a request body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// A refusal of an admin request.
pub(super) struct Refused {
    pub(super) status: StatusCode,
    pub(super) answered: Answered,
    pub(super) message: String,
}

impl Refused {
    pub(super) fn bad(message: impl Into<String>) -> Refused {
        Refused {
            status: StatusCode::BAD_REQUEST,
            answered: Answered::BadRequest,
            message: message.into(),
        }
    }

    /// The answer: a JSON error, which names the methods `allowed` on a
    /// 405 and asks for the bearer token on a 401.
    pub(super) fn response(&self, allowed: &'static str) -> Response<AdminBody> {
        let mut response = error(self.status, &self.message);
        let headers = response.headers_mut();
        match self.status {
            StatusCode::METHOD_NOT_ALLOWED => {
                headers.insert(ALLOW, HeaderValue::from_static(allowed));
            }
            StatusCode::UNAUTHORIZED => {
                headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

/// Who may use an endpoint that changes state: with `admin.token_file`
/// (`token`), a request with `Authorization: Bearer <token>`; without it,
/// loopback peers only.
pub(super) fn authorize<B>(
    token: Option<&str>,
    req: &Request<B>,
    peer: IpAddr,
) -> Result<(), Refused> {
    let Some(token) = token else {
        if peer.to_canonical().is_loopback() {
            return Ok(());
        }
        return Err(Refused {
            status: StatusCode::FORBIDDEN,
            answered: Answered::Forbidden,
            message: "this endpoint answers loopback only unless admin.token_file is set".into(),
        });
    };
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token)
        })
        .map(str::trim);
    match given {
        Some(given) if crate::ops::secret::equal(given.as_bytes(), token.as_bytes()) => Ok(()),
        _ => Err(Refused {
            status: StatusCode::UNAUTHORIZED,
            answered: Answered::Unauthorized,
            message: "missing or wrong bearer token".into(),
        }),
    }
}

pub(super) fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Refused> {
    serde_json::from_slice(body).map_err(|e| Refused::bad(format!("bad JSON body: {e}")))
}

/// The body, at most `max` bytes, within [`BODY_TIMEOUT`].
pub(super) async fn read<B>(req: Request<B>, max: usize) -> Result<Bytes, Refused>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let too_large = || Refused {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        answered: Answered::BadRequest,
        message: format!("body over {max} bytes"),
    };
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64) {
        return Err(too_large());
    }
    let read = Limited::new(req.into_body(), max).collect();
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(_)) => Err(Refused::bad("the body could not be read")),
        Err(_) => Err(Refused {
            status: StatusCode::REQUEST_TIMEOUT,
            answered: Answered::BadRequest,
            message: "the body did not arrive in time".into(),
        }),
    }
}

pub(super) fn ok(value: &Value) -> Response<AdminBody> {
    json_response(StatusCode::OK, format!("{value}\n"))
}

/// A JSON error answer.
pub fn error(status: StatusCode, message: &str) -> Response<AdminBody> {
    json_response(status, format!("{}\n", json!({ "error": message })))
}

fn json_response(status: StatusCode, body: String) -> Response<AdminBody> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, crate::request::JSON);
    response
}
