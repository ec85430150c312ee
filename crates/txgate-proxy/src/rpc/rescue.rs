//! The one place where failures become HTTP responses.
//!
//! Every refusal in the request path is a [`Refusal`]; this module picks its
//! HTTP status, JSON-RPC code and message. Messages name what the caller did
//! wrong or which limit applies, never internal detail.

use http::StatusCode;
use serde_json::value::RawValue;
use txgate_jsonrpc::code;
use txgate_screen::{Rejection, UnitRejection};

use crate::limits::admission::Overloaded;
use crate::limits::clients::ClientRefusal;
use crate::metrics::Outcome;
use crate::request::{Class, Refuse};
use crate::rpc::bundle::parse::Malformed;
use crate::rpc::conditional::ConditionRefusal;

/// Why a request is refused as a whole.
#[derive(Debug)]
pub enum Refusal {
    /// Over the global in-flight cap.
    Overloaded,
    /// Over `admission.max_sync_in_flight`.
    SyncOverloaded,
    /// Over a per-client rate, or an unknown API key.
    Client(ClientRefusal),
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
    /// More transactions to screen in one message (an HTTP body, a
    /// WebSocket frame) than `rpc.max_message_txs`.
    TooManyTxs {
        /// Transactions the message holds (bundles' counted one by one).
        txs: usize,
        /// The cap.
        max: usize,
    },
    /// Method refused by the policy.
    MethodDenied,
    /// Upstream unreachable, broken, or answered with a non-JSON-RPC error.
    UpstreamUnavailable,
    /// The TLS handshake with an `https://` node failed (its certificate:
    /// expired, another host's, an unknown CA; txgate's log says which).
    UpstreamTls,
    /// Upstream did not answer within the call timeout.
    UpstreamTimeout,
    /// No healthy node of the call's role in the node group (HTTP 503,
    /// -32603), answered at once.
    NoHealthyUpstream,
    /// A screened call without a usable raw-transaction param (-32602).
    InvalidParams(&'static str),
    /// Refused by screening.
    Screened(Rejection),
    /// An `eth_sendBundle` refused by screening: one of its transactions,
    /// told what it would be told alone.
    Bundle(Box<UnitRejection>),
    /// An `eth_sendBundle` whose params are not one bundle (-32602).
    MalformedBundle(Malformed),
    /// A conditional transaction refused before screening.
    Conditional(crate::rpc::conditional::ConditionRefusal),
    /// `eth_subscribe` over a WebSocket subscription cap.
    TooManySubscriptions {
        /// The cap.
        max: usize,
        /// The socket's own cap (else the process's).
        per_connection: bool,
    },
}

impl From<Overloaded> for Refusal {
    fn from(_: Overloaded) -> Refusal {
        Refusal::Overloaded
    }
}

impl From<ClientRefusal> for Refusal {
    fn from(refusal: ClientRefusal) -> Refusal {
        Refusal::Client(refusal)
    }
}

impl Refuse for Refusal {
    fn class(&self) -> Class {
        match self {
            Refusal::Overloaded => Overloaded.class(),
            Refusal::SyncOverloaded => Class::new(
                StatusCode::TOO_MANY_REQUESTS,
                code::LIMIT_EXCEEDED,
                Outcome::SyncOverloaded,
            ),
            Refusal::Client(refusal) => refusal.class(),
            Refusal::BadHttpMethod => Class::new(
                StatusCode::METHOD_NOT_ALLOWED,
                code::INVALID_REQUEST,
                Outcome::BadHttpMethod,
            ),
            Refusal::BadContentType => Class::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code::INVALID_REQUEST,
                Outcome::BadContentType,
            ),
            Refusal::BodyTooLarge(_) => Class::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                code::LIMIT_EXCEEDED,
                Outcome::BodyTooLarge,
            ),
            Refusal::BodyTimeout => Class::new(
                StatusCode::REQUEST_TIMEOUT,
                code::INVALID_REQUEST,
                Outcome::BodyTimeout,
            ),
            Refusal::BodyError => Class::new(
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Outcome::BodyError,
            ),
            Refusal::Parse => Class::new(
                StatusCode::BAD_REQUEST,
                code::PARSE_ERROR,
                Outcome::ParseError,
            ),
            Refusal::InvalidRequest(_) => Class::new(
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                Outcome::InvalidRequest,
            ),
            Refusal::BatchTooLarge { .. } => Class::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                code::LIMIT_EXCEEDED,
                Outcome::BatchTooLarge,
            ),
            Refusal::TooManyTxs { .. } => Class::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                code::LIMIT_EXCEEDED,
                Outcome::TooManyTxs,
            ),
            // Like a node that lacks the method: HTTP 200, error in the body.
            Refusal::MethodDenied => Class::new(
                StatusCode::OK,
                code::METHOD_NOT_FOUND,
                Outcome::MethodDenied,
            ),
            Refusal::UpstreamUnavailable | Refusal::UpstreamTls => Class::new(
                StatusCode::BAD_GATEWAY,
                code::INTERNAL_ERROR,
                Outcome::UpstreamUnavailable,
            ),
            Refusal::NoHealthyUpstream => Class::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code::INTERNAL_ERROR,
                Outcome::NoHealthyUpstream,
            ),
            Refusal::UpstreamTimeout => Class::new(
                StatusCode::GATEWAY_TIMEOUT,
                code::INTERNAL_ERROR,
                Outcome::UpstreamTimeout,
            ),
            // Like a node refusing a transaction: HTTP 200, error in the body.
            Refusal::InvalidParams(_) | Refusal::MalformedBundle(_) => {
                Class::new(StatusCode::OK, code::INVALID_PARAMS, Outcome::InvalidParams)
            }
            Refusal::Screened(rejection) => screened_class(rejection),
            Refusal::Bundle(refused) => screened_class(&refused.rejection),
            Refusal::TooManySubscriptions { .. } => {
                Class::new(StatusCode::OK, code::LIMIT_EXCEEDED, Outcome::RateLimited)
            }
            // op-geth's and op-txproxy's codes, HTTP 200 as theirs.
            Refusal::Conditional(refusal) => match refusal {
                ConditionRefusal::Missing | ConditionRefusal::Undecodable(_) => {
                    Class::new(StatusCode::OK, code::INVALID_PARAMS, Outcome::InvalidParams)
                }
                ConditionRefusal::Condition(c) => {
                    Class::new(StatusCode::OK, c.code(), Outcome::Screened)
                }
                ConditionRefusal::RateLimited { .. } => Class::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    code::LIMIT_EXCEEDED,
                    Outcome::RateLimited,
                ),
                ConditionRefusal::Disabled | ConditionRefusal::Target => Class::new(
                    StatusCode::OK,
                    code::TRANSACTION_REJECTED,
                    Outcome::Screened,
                ),
                ConditionRefusal::Unauthenticated
                | ConditionRefusal::BadAuthentication(_)
                | ConditionRefusal::CallerDenied => Class::new(
                    StatusCode::OK,
                    code::TRANSACTION_REJECTED,
                    Outcome::Unauthorized,
                ),
            },
        }
    }

    fn message(&self) -> String {
        match self {
            Refusal::Overloaded => Overloaded.message(),
            Refusal::SyncOverloaded => {
                "limit exceeded: too many eth_sendRawTransactionSync calls in flight, retry later"
                    .into()
            }
            Refusal::Client(refusal) => refusal.message(),
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
            Refusal::TooManyTxs { txs, max } => format!(
                "limit exceeded: {txs} transactions to screen in one message exceed the limit of {max}"
            ),
            Refusal::MethodDenied => "the method does not exist/is not available".into(),
            Refusal::UpstreamUnavailable => "upstream unavailable".into(),
            Refusal::UpstreamTls => {
                "upstream unavailable: the TLS handshake with the node failed".into()
            }
            Refusal::UpstreamTimeout => "upstream timed out".into(),
            Refusal::NoHealthyUpstream => "no healthy upstream".into(),
            Refusal::InvalidParams(message) => (*message).into(),
            Refusal::TooManySubscriptions {
                max,
                per_connection,
            } => format!(
                "limit exceeded: {} of {max} subscriptions",
                if *per_connection {
                    "this connection already holds its maximum"
                } else {
                    "txgate already holds its maximum"
                }
            ),
            Refusal::Conditional(refusal) => match refusal {
                ConditionRefusal::Disabled => "endpoint disabled".into(),
                ConditionRefusal::Missing => {
                    "invalid params: expected [raw transaction, condition]".into()
                }
                ConditionRefusal::Condition(c) => c.to_string(),
                ConditionRefusal::Undecodable(e) => format!("invalid params: {e}"),
                ConditionRefusal::Target => "only 4337 Entrypoint contract support".into(),
                ConditionRefusal::Unauthenticated => "missing authentication".into(),
                // What is wrong with it is counted, not told (op-txproxy's
                // one message).
                ConditionRefusal::BadAuthentication(_) => "invalid authentication".into(),
                ConditionRefusal::CallerDenied => "caller not allowed".into(),
                ConditionRefusal::RateLimited { .. } => "rate limited".into(),
            },
            Refusal::Screened(rejection) => screened_message(rejection),
            Refusal::Bundle(refused) => format!(
                "{} (bundle_index {})",
                screened_message(&refused.rejection),
                refused.index
            ),
            Refusal::MalformedBundle(malformed) => malformed.message(),
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Refusal::Client(refusal) => refusal.retry_after_secs(),
            Refusal::Bundle(refused) => match refused.rejection {
                Rejection::SenderBackoff { retry_after } => Some(retry_after.div_ceil(1000).max(1)),
                _ => None,
            },
            Refusal::Screened(Rejection::SenderBackoff { retry_after })
            | Refusal::Conditional(ConditionRefusal::RateLimited {
                retry_after_ms: retry_after,
                ..
            }) => Some(retry_after.div_ceil(1000).max(1)),
            _ => None,
        }
    }

    /// The error's `data`: for screening refusals, the reason, the
    /// fingerprint, the assertion ids and a retry hint.
    fn data(&self) -> Option<Box<RawValue>> {
        if let Refusal::TooManySubscriptions {
            max,
            per_connection,
        } = self
        {
            let reason = if *per_connection {
                "subscriptions_per_connection"
            } else {
                "subscriptions"
            };
            let data = serde_json::json!({"reason": reason, "max": max});
            return serde_json::value::to_raw_value(&data).ok();
        }
        if let Refusal::Client(refusal) = self {
            return refusal.data();
        }
        if let Refusal::TooManyTxs { txs, max } = self {
            let data =
                serde_json::json!({"reason": "too_many_txs", "txs": txs, "max_message_txs": max});
            return serde_json::value::to_raw_value(&data).ok();
        }
        if let Refusal::Conditional(refusal) = self {
            let mut data =
                serde_json::json!({ "reason": format!("conditional_{}", refusal.as_str()) });
            if let ConditionRefusal::RateLimited { retry_after_ms, .. } = refusal {
                data["retry_after_ms"] = (*retry_after_ms).into();
            }
            return serde_json::value::to_raw_value(&data).ok();
        }
        let data = match self {
            Refusal::Screened(rejection) => screened_data(rejection),
            Refusal::Bundle(refused) => {
                let mut data = screened_data(&refused.rejection);
                data.insert("bundle_index".into(), refused.index.into());
                if let Some(tx_hash) = &refused.tx_hash {
                    data.insert("tx_hash".into(), format!("{tx_hash}").into());
                }
                data
            }
            Refusal::MalformedBundle(malformed) => {
                let mut data = serde_json::Map::new();
                data.insert("reason".into(), "malformed_bundle".into());
                data.insert("problem".into(), malformed.as_str().into());
                if let Malformed::TooMany { max } = malformed {
                    data.insert("max_bundle_txs".into(), (*max).into());
                }
                data
            }
            _ => return None,
        };
        serde_json::value::to_raw_value(&data).ok()
    }
}

/// A screening refusal's class, alone or in a bundle.
fn screened_class(rejection: &Rejection) -> Class {
    match rejection {
        Rejection::Invalid(_) | Rejection::Signature(_) => {
            Class::new(StatusCode::OK, code::INVALID_PARAMS, Outcome::InvalidParams)
        }
        Rejection::SenderBackoff { .. } => Class::new(
            StatusCode::TOO_MANY_REQUESTS,
            code::LIMIT_EXCEEDED,
            Outcome::Screened,
        ),
        _ => Class::new(
            StatusCode::OK,
            code::TRANSACTION_REJECTED,
            Outcome::Screened,
        ),
    }
}

/// A screening refusal's message, alone or in a bundle.
fn screened_message(rejection: &Rejection) -> String {
    match rejection {
        Rejection::Invalid(e) => format!("invalid params: {e}"),
        Rejection::Signature(e) => format!("invalid params: {e}"),
        Rejection::RecentFailure { .. } => {
            "transaction rejected: this transaction invalidated an assertion recently".into()
        }
        Rejection::SenderBackoff { .. } => {
            "limit exceeded: sender backed off after repeated invalidations, retry later".into()
        }
        Rejection::Denied { .. } => {
            "transaction rejected: a transaction with this fingerprint invalidated an \
         assertion"
                .into()
        }
        Rejection::Cooldown { .. } => {
            "transaction rejected: calls like this one are in cooldown after repeated \
         invalidations, retry later"
                .into()
        }
        Rejection::Shaped { .. } => {
            "transaction rejected: a transaction with this suspect fingerprint is \
         pending, retry later"
                .into()
        }
    }
}

/// A screening refusal's `data`: the reason, the fingerprint, the
/// assertion ids and a retry hint.
fn screened_data(rejection: &Rejection) -> serde_json::Map<String, serde_json::Value> {
    let mut data = serde_json::Map::new();
    data.insert("reason".into(), rejection.reason().as_str().into());
    let hex = |b: &alloy_primitives::B256| serde_json::Value::String(format!("{b}"));
    match rejection {
        Rejection::Invalid(_) | Rejection::Signature(_) => {}
        Rejection::RecentFailure { tx_hash, assertion } => {
            data.insert("tx_hash".into(), hex(tx_hash));
            data.insert(
                "assertion_ids".into(),
                assertion.iter().map(hex).collect::<Vec<_>>().into(),
            );
        }
        Rejection::SenderBackoff { retry_after } => {
            data.insert("retry_after_ms".into(), (*retry_after).into());
        }
        Rejection::Denied {
            fingerprint,
            assertions,
        } => {
            data.insert("fingerprint".into(), hex(fingerprint));
            data.insert(
                "assertion_ids".into(),
                assertions.iter().map(hex).collect::<Vec<_>>().into(),
            );
        }
        Rejection::Cooldown {
            fingerprint,
            assertion,
            retry_after,
        } => {
            data.insert("fingerprint".into(), hex(fingerprint));
            data.insert(
                "assertion_ids".into(),
                assertion.iter().map(hex).collect::<Vec<_>>().into(),
            );
            data.insert("retry_after_ms".into(), (*retry_after).into());
        }
        Rejection::Shaped {
            fingerprint,
            retry_after,
        } => {
            data.insert("fingerprint".into(), hex(fingerprint));
            data.insert("retry_after_ms".into(), (*retry_after).into());
        }
    }
    data
}

/// The screening refusals among a batch's (or a message's) verdicts.
pub(crate) fn refused_submissions(verdicts: &[Option<Refusal>]) -> u32 {
    let refused = verdicts
        .iter()
        .filter(|v| matches!(v, Some(Refusal::Screened(_) | Refusal::Bundle(_))))
        .count();
    u32::try_from(refused).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
