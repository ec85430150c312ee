//! Writing JSON-RPC responses and upstream batches.
//!
//! Everything here copies caller params and upstream results as raw JSON;
//! only the envelope is written.

use std::io::Write as _;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::request::{Call, Id};

const NULL: &str = "null";

/// Writes a JSON string literal.
fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Writes an error response object into `out`.
pub fn write_error(
    out: &mut Vec<u8>,
    id: Option<&str>,
    code: i64,
    message: &str,
    data: Option<&RawValue>,
) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.unwrap_or(NULL).as_bytes());
    out.extend_from_slice(b",\"error\":{\"code\":");
    let _ = write!(out, "{code}");
    out.extend_from_slice(b",\"message\":");
    write_str(out, message);
    if let Some(data) = data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data.get().as_bytes());
    }
    out.extend_from_slice(b"}}");
}

/// An error response as bytes.
pub fn error(id: Option<Id<'_>>, code: i64, message: &str, data: Option<&RawValue>) -> Bytes {
    let mut out = Vec::with_capacity(96 + message.len());
    write_error(&mut out, id.map(|i| i.as_str()), code, message, data);
    Bytes::from(out)
}

/// Writes `call` as a lone request under the caller's own id (a
/// notification stays one).
pub fn write_call(out: &mut Vec<u8>, call: &Call<'_>) {
    write_call_params(out, call, call.params.map(RawValue::get));
}

/// [`write_call`] with `params` (JSON text, or none) in place of the
/// call's own.
pub fn write_call_params(out: &mut Vec<u8>, call: &Call<'_>, params: Option<&str>) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",");
    if let Some(id) = &call.id {
        out.extend_from_slice(b"\"id\":");
        out.extend_from_slice(id.as_str().as_bytes());
        out.push(b',');
    }
    write_method_params(out, call, params);
}

/// Writes `call` for an upstream batch, with `upstream_id` in place of the
/// caller's id (notifications stay notifications).
pub fn write_upstream_call(out: &mut Vec<u8>, call: &Call<'_>, upstream_id: usize) {
    write_upstream_call_params(out, call, upstream_id, call.params.map(RawValue::get));
}

/// [`write_upstream_call`] with `params` (JSON text, or none) in place of
/// the call's own.
pub fn write_upstream_call_params(
    out: &mut Vec<u8>,
    call: &Call<'_>,
    upstream_id: usize,
    params: Option<&str>,
) {
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",");
    if !call.is_notification() {
        out.extend_from_slice(b"\"id\":");
        let _ = write!(out, "{upstream_id}");
        out.push(b',');
    }
    write_method_params(out, call, params);
}

fn write_method_params(out: &mut Vec<u8>, call: &Call<'_>, params: Option<&str>) {
    out.extend_from_slice(b"\"method\":");
    write_str(out, &call.method);
    if let Some(params) = params {
        out.extend_from_slice(b",\"params\":");
        out.extend_from_slice(params.as_bytes());
    }
    out.push(b'}');
}

/// One response object from an upstream.
#[derive(Debug, Deserialize)]
pub struct UpstreamResponse<'a> {
    /// The id the upstream echoed.
    #[serde(borrow)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
    /// Set in a server's notification (`eth_subscription`), not in an
    /// answer.
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

impl<'a> UpstreamResponse<'a> {
    /// The upstream's error object, if it answered with one.
    pub fn error(&self) -> Option<&'a RawValue> {
        self.error
    }

    /// A notification from the server (a method and no id), not an answer.
    pub fn is_notification(&self) -> bool {
        self.method.is_some() && self.id.is_none()
    }

    /// The upstream's result, if it answered with one.
    pub fn result(&self) -> Option<&'a RawValue> {
        self.result
    }

    /// Reads the upstream id as the index txgate gave the call.
    pub fn index(&self) -> Option<usize> {
        self.id.and_then(|raw| raw.get().parse().ok())
    }

    /// Writes this response with the caller's `id`.
    pub fn write_with_id(&self, out: &mut Vec<u8>, id: Option<&str>) {
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        out.extend_from_slice(id.unwrap_or(NULL).as_bytes());
        match (self.error, self.result) {
            (Some(error), _) => {
                out.extend_from_slice(b",\"error\":");
                out.extend_from_slice(error.get().as_bytes());
            }
            (None, Some(result)) => {
                out.extend_from_slice(b",\"result\":");
                out.extend_from_slice(result.get().as_bytes());
            }
            (None, None) => {
                out.extend_from_slice(b",\"result\":null");
            }
        }
        out.push(b'}');
    }
}

/// What an upstream sent back for a batch.
#[derive(Debug)]
pub enum UpstreamBatch<'a> {
    /// An array of responses, in any order.
    Responses(Vec<UpstreamResponse<'a>>),
    /// One response object for the whole batch (an upstream that refuses
    /// batches, or one that failed as a whole).
    Whole(UpstreamResponse<'a>),
}

/// Parses an upstream's answer to a batch; `None` when it is not JSON-RPC.
pub fn parse_upstream_batch(body: &[u8]) -> Option<UpstreamBatch<'_>> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => serde_json::from_slice(body)
            .ok()
            .map(UpstreamBatch::Responses),
        Some(b'{') => serde_json::from_slice(body).ok().map(UpstreamBatch::Whole),
        _ => None,
    }
}

/// Joins response objects into a batch array.
pub fn join_batch<'a>(parts: impl Iterator<Item = &'a [u8]>, capacity: usize) -> Bytes {
    let mut out = Vec::with_capacity(capacity + 2);
    out.push(b'[');
    for (i, part) in parts.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(part);
    }
    out.push(b']');
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Entry, Frame, parse};

    #[test]
    fn error_escapes_message_and_keeps_id() {
        let mut out = Vec::new();
        write_error(&mut out, Some("\"a\""), -32600, "bad \"x\"", None);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "a");
        assert_eq!(v["error"]["code"], -32600);
        assert_eq!(v["error"]["message"], "bad \"x\"");
        assert_eq!(v["jsonrpc"], "2.0");
        let data = RawValue::from_string(r#"{"reason":"r"}"#.into()).unwrap();
        let mut out = Vec::new();
        write_error(&mut out, None, -32003, "m", Some(&data));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v["id"].is_null());
        assert_eq!(v["error"]["data"]["reason"], "r");
    }

    #[test]
    fn upstream_call_rewrites_id_and_keeps_params() {
        let body = br#"{"jsonrpc":"2.0","id":"caller","method":"eth_getBalance","params":["0xab", "latest"]}"#;
        let Ok(Frame::Single(Entry::Call(call))) = parse(body, 1) else {
            panic!()
        };
        let mut out = Vec::new();
        write_upstream_call(&mut out, &call, 17);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":17,"method":"eth_getBalance","params":["0xab", "latest"]}"#
        );
        let body = br#"{"jsonrpc":"2.0","method":"n"}"#;
        let Ok(Frame::Single(Entry::Call(call))) = parse(body, 1) else {
            panic!()
        };
        let mut out = Vec::new();
        write_upstream_call(&mut out, &call, 3);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","method":"n"}"#
        );
    }

    #[test]
    fn upstream_responses_map_back() {
        let body = br#"[{"jsonrpc":"2.0","id":1,"result":null},{"jsonrpc":"2.0","id":0,"error":{"code":3,"message":"reverted"}}]"#;
        let Some(UpstreamBatch::Responses(rs)) = parse_upstream_batch(body) else {
            panic!()
        };
        assert_eq!(rs[0].index(), Some(1));
        let mut out = Vec::new();
        rs[0].write_with_id(&mut out, Some("\"x\""));
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":"x","result":null}"#
        );
        let mut out = Vec::new();
        rs[1].write_with_id(&mut out, Some("9"));
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":9,"error":{"code":3,"message":"reverted"}}"#
        );
        assert!(matches!(
            parse_upstream_batch(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no batches"}}"#),
            Some(UpstreamBatch::Whole(r)) if r.error().is_some()
        ));
        assert!(parse_upstream_batch(b"<html>").is_none());
    }

    #[test]
    fn join() {
        let parts: [&[u8]; 2] = [b"{}", b"{\"a\":1}"];
        assert_eq!(&join_batch(parts.into_iter(), 10)[..], b"[{},{\"a\":1}]");
    }
}
