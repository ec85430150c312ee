//! JSON-RPC 2.0 framing for txgate, with no I/O.
//!
//! - [`parse`] reads a request body (one call or a batch) without copying:
//!   ids, methods and params borrow from the body, so a lone call can be
//!   forwarded as the bytes that came in.
//! - [`code`] holds the EIP-1474 error codes txgate answers with.
//! - [`encode`] writes error responses, upstream batches and rewritten
//!   upstream responses; it never re-encodes a caller's params or an
//!   upstream's result, it copies their raw JSON.
//!
//! ```
//! use txgate_jsonrpc::{parse, Entry, Frame};
//! let body = br#"{"jsonrpc":"2.0","id":7,"method":"eth_chainId","params":[]}"#;
//! let Frame::Single(Entry::Call(call)) = parse(body, 100).unwrap() else { panic!() };
//! assert_eq!(call.method, "eth_chainId");
//! assert_eq!(call.id.unwrap().as_str(), "7");
//! ```

pub mod code;
pub mod encode;
mod request;

pub use request::{
    Call, Entry, Frame, FrameError, Id, Invalid, MAX_DEPTH, TOO_DEEP, nested_deeper_than, parse,
};
