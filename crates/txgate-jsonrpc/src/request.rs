//! Zero-copy parsing of JSON-RPC 2.0 request bodies.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::code;

/// A call's id exactly as the caller wrote it: a number, a string or `null`.
///
/// Kept as raw JSON so that `1.0`, `"0x01"` and `1e3` come back unchanged.
#[derive(Clone, Copy)]
pub struct Id<'a>(&'a RawValue);

impl<'a> Id<'a> {
    /// The id's JSON text.
    pub fn as_str(&self) -> &'a str {
        self.0.get()
    }

    /// The id as raw JSON.
    pub fn raw(&self) -> &'a RawValue {
        self.0
    }

    /// Accepts only the id types JSON-RPC 2.0 allows.
    fn validate(raw: &'a RawValue) -> Option<Self> {
        match raw.get().as_bytes().first() {
            Some(b'"' | b'-' | b'0'..=b'9') => Some(Id(raw)),
            Some(b'n') => Some(Id(raw)), // `null`; the parser already checked the literal
            _ => None,
        }
    }
}

impl fmt::Debug for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A well-formed call.
#[derive(Debug)]
pub struct Call<'a> {
    /// `None` for a notification (no `id` member at all).
    pub id: Option<Id<'a>>,
    /// The method name, borrowed unless it contained escapes.
    pub method: Cow<'a, str>,
    /// Raw params (an array or an object), if present.
    pub params: Option<&'a RawValue>,
}

impl Call<'_> {
    /// Whether the caller expects no response.
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }
}

/// A batch element or lone request that is valid JSON but not a valid call.
#[derive(Debug)]
pub struct Invalid<'a> {
    /// The id to answer with when one could be read, else `null`.
    pub id: Option<Id<'a>>,
    /// What is wrong, for the caller.
    pub message: &'static str,
}

impl Invalid<'_> {
    /// The JSON-RPC code for this error.
    pub fn code(&self) -> i64 {
        code::INVALID_REQUEST
    }
}

/// One entry of a request body.
#[derive(Debug)]
pub enum Entry<'a> {
    /// A valid call.
    Call(Call<'a>),
    /// An invalid request; it is answered with -32600.
    Invalid(Invalid<'a>),
}

/// A parsed request body.
#[derive(Debug)]
pub enum Frame<'a> {
    /// A lone request object.
    Single(Entry<'a>),
    /// A non-empty batch, in the caller's order.
    Batch(Vec<Entry<'a>>),
}

/// A body that cannot be answered call by call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Not valid JSON (-32700).
    Parse,
    /// Valid JSON, but neither an object nor an array (-32600).
    NotARequest,
    /// `[]` (-32600).
    EmptyBatch,
    /// Arrays and objects nested deeper than [`MAX_DEPTH`] (-32600).
    TooDeep,
    /// More calls than the batch cap allows.
    BatchTooLarge {
        /// Calls in the batch.
        len: usize,
        /// The configured cap.
        max: usize,
    },
}

impl FrameError {
    /// The JSON-RPC code for this error.
    pub fn code(&self) -> i64 {
        match self {
            FrameError::Parse => code::PARSE_ERROR,
            FrameError::NotARequest | FrameError::EmptyBatch | FrameError::TooDeep => {
                code::INVALID_REQUEST
            }
            FrameError::BatchTooLarge { .. } => code::LIMIT_EXCEEDED,
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Parse => f.write_str("parse error: body is not valid JSON"),
            FrameError::NotARequest => {
                f.write_str("invalid request: body must be a request object or a batch array")
            }
            FrameError::EmptyBatch => f.write_str("invalid request: empty batch"),
            FrameError::TooDeep => f.write_str(TOO_DEEP),
            FrameError::BatchTooLarge { len, max } => {
                write!(f, "batch of {len} calls exceeds the limit of {max}")
            }
        }
    }
}

/// A request object's members, each kept raw so that a wrong type becomes
/// -32600 with the caller's id rather than a failed parse.
///
/// A member name is taken as written: a name that a case-insensitive
/// reader would take for one of the four (`Params`, `METHOD`, `ſ` for `s`
/// as Go's Unicode folding has it), a name holding escapes, or a member
/// given twice, makes the object malformed. Go's JSON decoding matches
/// names that way and keeps the last duplicate, so a node written in Go
/// (geth, op-geth, a builder) could read a member txgate did not screen in
/// a body forwarded as it came.
struct Wire<'a> {
    jsonrpc: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for Wire<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Wire<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a request object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Wire<'de>, A::Error> {
                let mut wire = Wire {
                    jsonrpc: None,
                    id: None,
                    method: None,
                    params: None,
                };
                // A name with escapes cannot be borrowed: refused.
                while let Some(name) = map.next_key::<&'de str>()? {
                    let slot = match name {
                        "jsonrpc" => &mut wire.jsonrpc,
                        "id" => &mut wire.id,
                        "method" => &mut wire.method,
                        "params" => &mut wire.params,
                        other if MEMBERS.iter().any(|m| folds_to(other, m)) => {
                            return Err(de::Error::custom("a member name differs only in case"));
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    if slot.is_some() {
                        return Err(de::Error::custom("a member given twice"));
                    }
                    // Present, even `null`: how a notification (no id)
                    // differs from a call whose id is `null`.
                    *slot = Some(map.next_value::<&'de RawValue>()?);
                }
                Ok(wire)
            }
        }
        d.deserialize_map(Members)
    }
}

/// The request object's member names.
const MEMBERS: [&str; 4] = ["jsonrpc", "id", "method", "params"];

/// Whether Go's case-insensitive name matching takes `name` for `member`
/// (lowercase ASCII): ASCII letters in either case, and the two non-ASCII
/// letters Unicode simple folding maps to ASCII ones, `ſ` (s) and the
/// Kelvin sign (k).
fn folds_to(name: &str, member: &str) -> bool {
    let mut theirs = name.chars();
    for ours in member.chars() {
        let folded = match theirs.next() {
            Some('\u{17f}') => 's',
            Some('\u{212a}') => 'k',
            Some(c) if c.is_ascii() => c.to_ascii_lowercase(),
            _ => return false,
        };
        if folded != ours {
            return false;
        }
    }
    theirs.next().is_none()
}

/// Deepest nesting of arrays and objects a body may have: the deepest
/// serde_json reads (its recursion limit, 128, refuses the 128th level),
/// which Rust nodes enforce; Go's encoding/json stops at 10 000. No
/// Ethereum method's params come near it (`eth_simulateV1` with state
/// overrides is under ten). A body beyond it is refused before any
/// parsing, so the node never spends time on one.
pub const MAX_DEPTH: usize = 127;

/// The refusal's message, one copy for the error and its display.
pub const TOO_DEEP: &str = "invalid request: JSON nested deeper than 127 levels";

/// Whether `body` opens more than `max` arrays or objects at once (outside
/// strings). One pass over the bytes, no allocation; meaningful for valid
/// JSON, harmless for the rest (the parser refuses it next). [`parse`]
/// runs it on bodies over `2 * MAX_DEPTH` bytes; public for its benchmark.
///
/// Strings, most of an Ethereum body (hex), are crossed with `memchr2` to
/// the next quote or backslash (SIMD), not byte by byte.
pub fn nested_deeper_than(body: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                // To the closing quote, past escaped characters.
                i += 1;
                loop {
                    let Some(at) = body
                        .get(i..)
                        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
                    else {
                        // An unterminated string: nothing nests after it.
                        return false;
                    };
                    if body[i + at] == b'"' {
                        i += at + 1;
                        break;
                    }
                    i += at + 2;
                }
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    false
}

/// Parses a request body: one call or a batch of at most `max_batch` calls.
pub fn parse(body: &[u8], max_batch: usize) -> Result<Frame<'_>, FrameError> {
    // Nesting deeper than MAX_DEPTH needs at least twice as many bytes.
    if body.len() > 2 * MAX_DEPTH && nested_deeper_than(body, MAX_DEPTH) {
        return Err(FrameError::TooDeep);
    }
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => parse_object(body).map(Frame::Single),
        Some(b'[') => {
            let raws: Vec<&RawValue> =
                serde_json::from_slice(body).map_err(|_| FrameError::Parse)?;
            if raws.is_empty() {
                return Err(FrameError::EmptyBatch);
            }
            if raws.len() > max_batch {
                return Err(FrameError::BatchTooLarge {
                    len: raws.len(),
                    max: max_batch,
                });
            }
            Ok(Frame::Batch(raws.into_iter().map(parse_element).collect()))
        }
        _ => match serde_json::from_slice::<&RawValue>(body) {
            Ok(_) => Err(FrameError::NotARequest),
            Err(_) => Err(FrameError::Parse),
        },
    }
}

fn parse_object(body: &[u8]) -> Result<Entry<'_>, FrameError> {
    match serde_json::from_slice::<Wire<'_>>(body) {
        Ok(wire) => Ok(validate(wire)),
        Err(e) if e.is_data() => Ok(Entry::Invalid(Invalid {
            id: None,
            message: "invalid request: malformed request object",
        })),
        Err(_) => Err(FrameError::Parse),
    }
}

fn parse_element(raw: &RawValue) -> Entry<'_> {
    if !raw.get().starts_with('{') {
        return Entry::Invalid(Invalid {
            id: None,
            message: "invalid request: batch element is not an object",
        });
    }
    match serde_json::from_str::<Wire<'_>>(raw.get()) {
        Ok(wire) => validate(wire),
        // The batch already parsed, so this is a data error (duplicate member).
        Err(_) => Entry::Invalid(Invalid {
            id: None,
            message: "invalid request: malformed request object",
        }),
    }
}

fn validate(wire: Wire<'_>) -> Entry<'_> {
    let id = match wire.id {
        None => None,
        Some(raw) => match Id::validate(raw) {
            Some(id) => Some(id),
            None => {
                return invalid(
                    None,
                    "invalid request: id must be a string, a number or null",
                );
            }
        },
    };
    if wire.jsonrpc.map(RawValue::get) != Some("\"2.0\"") {
        return invalid(id, "invalid request: jsonrpc must be \"2.0\"");
    }
    let Some(method) = wire.method else {
        return invalid(id, "invalid request: missing method");
    };
    let Some(method) = json_str(method) else {
        return invalid(id, "invalid request: method must be a string");
    };
    if method.is_empty() {
        return invalid(id, "invalid request: method is empty");
    }
    if let Some(params) = wire.params
        && !matches!(params.get().as_bytes().first(), Some(b'[' | b'{'))
    {
        return invalid(id, "invalid request: params must be an array or an object");
    }
    Entry::Call(Call {
        id,
        method,
        params: wire.params,
    })
}

fn invalid<'a>(id: Option<Id<'a>>, message: &'static str) -> Entry<'a> {
    Entry::Invalid(Invalid { id, message })
}

/// Reads a raw JSON string without allocating unless it holds escapes.
fn json_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(text).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(body: &str) -> Entry<'_> {
        match parse(body.as_bytes(), 10) {
            Ok(Frame::Single(entry)) => entry,
            other => panic!("expected a single entry, got {other:?}"),
        }
    }

    /// A member a case-insensitive reader (Go's JSON) would take for one of
    /// the four, a member with an escaped name, or one given twice: the
    /// object is malformed (-32600), alone or in a batch, never a call
    /// whose screened members differ from what a Go node reads. Other
    /// names are ignored, as before.
    #[test]
    fn member_names_a_go_node_would_read_otherwise_are_refused() {
        let bad = [
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_sendBundle","params":[{"txs":[]}],"Params":[{"txs":["0x01"]}]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","METHOD":"eth_sendRawTransaction"}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_chainId\",\"param\u{17f}\":[]}",
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","p\u0061rams":[]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","method":"eth_sendRawTransaction"}"#,
            r#"{"jsonrpc":"2.0","iD":1,"method":"eth_chainId"}"#,
        ];
        for body in bad {
            assert!(
                matches!(single(body), Entry::Invalid(_)),
                "{body} was taken"
            );
            let batch = format!("[{body}]");
            match parse(batch.as_bytes(), 10) {
                Ok(Frame::Batch(entries)) => {
                    assert!(matches!(entries[0], Entry::Invalid(_)), "{batch}")
                }
                other => panic!("{batch}: {other:?}"),
            }
        }
        let fine = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[],"extra":{"Params":1},"methods":2}"#;
        assert!(matches!(single(fine), Entry::Call(_)), "{fine}");
        assert!(folds_to("PaRaMs", "params") && folds_to("\u{17f}", "s"));
        assert!(!folds_to("param", "params") && !folds_to("paramss", "params"));
    }

    /// The scan as first written, a byte at a time: the reference the
    /// memchr version must agree with on any input.
    fn nested_deeper_than_bytewise(body: &[u8], max: usize) -> bool {
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        for &b in body {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > max {
                        return true;
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        false
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// Any mix of brackets, quotes, backslashes and other bytes, at any
        /// cap: the same answer as the byte-at-a-time scan.
        #[test]
        fn depth_scan_agrees_with_the_bytewise_reference(
            body in proptest::collection::vec(
                proptest::sample::select(vec![b'[', b']', b'{', b'}', b'"', b'\\', b'a', b' ', b'0']),
                0..400,
            ),
            max in 0usize..12,
        ) {
            proptest::prop_assert_eq!(
                nested_deeper_than(&body, max),
                nested_deeper_than_bytewise(&body, max)
            );
        }
    }

    #[test]
    fn depth_scan_edges() {
        // Escapes as the last byte inside a string, lone quotes, escaped
        // backslashes before a quote.
        let cases: [&[u8]; 7] = [
            b"\"",
            b"[\"\\",
            b"[[[\"a\\\"]]]",
            b"[[\"\\\\\"[[]]",
            b"",
            b"[[[[",
            b"[\"\\\\\\\"\"[",
        ];
        for body in cases {
            for max in 0..5 {
                assert_eq!(
                    nested_deeper_than(body, max),
                    nested_deeper_than_bytewise(body, max),
                    "{:?} at {max}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    #[test]
    fn nesting_is_capped_at_max_depth_outside_strings() {
        let nest = |depth: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{}{}}}"#,
                "[".repeat(depth - 1),
                "]".repeat(depth - 1)
            )
        };
        // The request object is level 1: params may open 126 more.
        assert!(matches!(
            parse(nest(MAX_DEPTH).as_bytes(), 10),
            Ok(Frame::Single(Entry::Call(_)))
        ));
        assert_eq!(
            parse(nest(MAX_DEPTH + 1).as_bytes(), 10).unwrap_err(),
            FrameError::TooDeep
        );
        let batch = format!("[{}]", nest(MAX_DEPTH));
        assert_eq!(
            parse(batch.as_bytes(), 10).unwrap_err(),
            FrameError::TooDeep
        );
        // Brackets in strings, escaped quotes included, do not count.
        let quoted = format!(
            r#"{{"jsonrpc":"2.0","id":"a\"[{{","method":"m","params":["{}"]}}"#,
            "[{".repeat(500)
        );
        assert!(matches!(
            parse(quoted.as_bytes(), 10),
            Ok(Frame::Single(Entry::Call(_)))
        ));
        assert_eq!(FrameError::TooDeep.to_string(), TOO_DEEP);
        assert!(TOO_DEEP.contains(&MAX_DEPTH.to_string()));
    }

    #[test]
    fn ids_keep_their_exact_text() {
        for id in [
            "1",
            "1.0",
            "1e3",
            "-5",
            "\"abc\"",
            "\"\\u0041\"",
            "null",
            "18446744073709551616",
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
            let Entry::Call(call) = single(&body) else {
                panic!("{body}")
            };
            assert_eq!(call.id.map(|i| i.as_str()), Some(id));
            assert!(!call.is_notification());
        }
    }

    #[test]
    fn missing_id_is_a_notification_but_null_is_not() {
        let Entry::Call(call) = single(r#"{"jsonrpc":"2.0","method":"m"}"#) else {
            panic!()
        };
        assert!(call.is_notification());
        let Entry::Call(call) = single(r#"{"jsonrpc":"2.0","method":"m","id":null}"#) else {
            panic!()
        };
        assert!(!call.is_notification());
    }

    #[test]
    fn method_borrows_unless_escaped() {
        let Entry::Call(call) = single(r#"{"jsonrpc":"2.0","id":1,"method":"eth_call"}"#) else {
            panic!()
        };
        assert!(matches!(call.method, Cow::Borrowed("eth_call")));
        let Entry::Call(call) = single(r#"{"jsonrpc":"2.0","id":1,"method":"eth\u005fcall"}"#)
        else {
            panic!()
        };
        assert_eq!(call.method, "eth_call");
    }

    #[test]
    fn invalid_requests_keep_the_id_when_readable() {
        let cases = [
            (
                r#"{"jsonrpc":"1.0","id":3,"method":"m"}"#,
                Some("3"),
                "jsonrpc",
            ),
            (r#"{"id":3,"method":"m"}"#, Some("3"), "jsonrpc"),
            (
                r#"{"jsonrpc":"2.0","id":"x"}"#,
                Some("\"x\""),
                "missing method",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":5}"#,
                Some("4"),
                "method must be",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":""}"#,
                Some("4"),
                "empty",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"m","params":7}"#,
                Some("4"),
                "params",
            ),
            (
                r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#,
                None,
                "id must be",
            ),
            (
                r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
                None,
                "id must be",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
                None,
                "malformed",
            ),
        ];
        for (body, id, needle) in cases {
            let Entry::Invalid(inv) = single(body) else {
                panic!("{body} parsed as a call")
            };
            assert_eq!(inv.id.map(|i| i.as_str()), id, "{body}");
            assert!(inv.message.contains(needle), "{body}: {}", inv.message);
            assert_eq!(inv.code(), code::INVALID_REQUEST);
        }
    }

    #[test]
    fn frame_errors() {
        assert_eq!(parse(b"{", 10).unwrap_err(), FrameError::Parse);
        assert_eq!(parse(b"", 10).unwrap_err(), FrameError::Parse);
        assert_eq!(parse(b"nope", 10).unwrap_err(), FrameError::Parse);
        assert_eq!(parse(b"[1,", 10).unwrap_err(), FrameError::Parse);
        assert_eq!(parse(b"42", 10).unwrap_err(), FrameError::NotARequest);
        assert_eq!(parse(b"\"x\"", 10).unwrap_err(), FrameError::NotARequest);
        assert_eq!(parse(b" [ ] ", 10).unwrap_err(), FrameError::EmptyBatch);
        let big = format!("[{}]", ["1"; 11].join(","));
        assert_eq!(
            parse(big.as_bytes(), 10).unwrap_err(),
            FrameError::BatchTooLarge { len: 11, max: 10 }
        );
        assert_eq!(FrameError::Parse.code(), code::PARSE_ERROR);
    }

    #[test]
    fn batch_keeps_order_and_marks_bad_elements() {
        let body = br#"[{"jsonrpc":"2.0","id":"a","method":"x"}, 1, {"jsonrpc":"2.0","method":"n"}, {"foo":1}]"#;
        let Ok(Frame::Batch(entries)) = parse(body, 10) else {
            panic!()
        };
        assert_eq!(entries.len(), 4);
        assert!(matches!(&entries[0], Entry::Call(c) if c.method == "x"));
        assert!(matches!(&entries[1], Entry::Invalid(i) if i.id.is_none()));
        assert!(matches!(&entries[2], Entry::Call(c) if c.is_notification()));
        assert!(matches!(&entries[3], Entry::Invalid(_)));
    }
}
