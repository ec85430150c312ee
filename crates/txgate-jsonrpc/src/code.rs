//! JSON-RPC error codes (JSON-RPC 2.0 and EIP-1474).

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not allowed here.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters (bad hex, bad RLP, bad signature).
pub const INVALID_PARAMS: i64 = -32602;
/// Internal JSON-RPC error; also used for an unreachable upstream.
pub const INTERNAL_ERROR: i64 = -32603;
/// Transaction rejected by screening.
pub const TRANSACTION_REJECTED: i64 = -32003;
/// Request exceeds a defined limit (sent with HTTP 429).
pub const LIMIT_EXCEEDED: i64 = -32005;
