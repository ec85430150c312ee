//! The condition of `eth_sendRawTransactionConditional` (the second
//! param), checked with no state and no I/O, before anything costly
//! touches the call: its shape, its bounds, and its cost in state lookups,
//! counted as op-geth counts it.
//!
//! ```text
//! {
//!   "knownAccounts": {                       // address → what the sequencer must find
//!     "0x…20 bytes": "0x…32 bytes",          //   its storage root, or
//!     "0x…20 bytes": { "0x…slot": "0x…value" } //   these slots with these values
//!   },
//!   "blockNumberMin": "0x…", "blockNumberMax": 123,   // hex or decimal, quoted or not
//!   "timestampMin": "0x…",   "timestampMax": 1700000000
//! }
//! ```
//!
//! **Cost** (op-geth `TransactionConditional.Cost()`, `core/types/
//! transaction_conditional.go` at commit c0a8d77e, unchanged since the
//! merge of the conditional method): 1 per known account (an empty account
//! still costs a lookup), plus 1 for a storage root or 1 per listed slot,
//! plus 1 when a block-number bound is set, plus 1 when a timestamp bound
//! is set. Over `max` (1000 in op-geth, an inclusive limit) is
//! [`Refusal::CostExceeded`], answered with op-geth's code and message.
//!
//! **Shape**: anything op-geth would not accept is [`Refusal::Invalid`]:
//! not an object, bad hex or a wrong length (addresses 20 bytes, roots,
//! slots and values 32, each `0x`-prefixed), a bound that is not a number
//! or too large (block numbers 256 bits, timestamps 64), a minimum above
//! its maximum. Stricter than op-geth on two points, because both make a
//! condition ambiguous: an unknown field (op-geth's newest decoder ignores
//! it; earlier ones refused it) and a key given twice (Go keeps the last).
//!
//! Work and memory are bounded by the JSON's length: one pass, nothing
//! kept but the keys of one object at a time (to find duplicates); the
//! nesting is the schema's (three levels), so a deeper body fails at its
//! first unexpected `{` or `[`.
//!
//! ```
//! let condition = r#"{"knownAccounts": {
//!     "0x5ff137d4b0fdcd49dca30c7cf57e578a026d2789": {
//!         "0x0000000000000000000000000000000000000000000000000000000000000001":
//!         "0x00000000000000000000000000000000000000000000000000000000000000aa"
//!     }
//! }, "blockNumberMax": "0x100"}"#;
//! let checked = txgate_conditional::check(condition, 1000).unwrap();
//! assert_eq!(checked.cost, 1 + 1 + 1); // the account, its slot, the block bound
//! assert!(txgate_conditional::check(r#"{"timestampMin": 9, "timestampMax": 8}"#, 1000).is_err());
//! ```

pub mod caller;
mod parse;

pub use parse::{Checked, Reason, Refusal, check};

/// op-geth's limit on a condition's cost (inclusive).
pub const MAX_COST: u64 = 1000;
/// op-geth's code for a condition that costs too much.
pub const COST_EXCEEDED_CODE: i64 = -32005;
/// op-geth's code for a condition that fails validation.
pub const REJECTED_CODE: i64 = -32003;
/// go-ethereum's RPC layer's code for an argument it cannot decode (a
/// condition value of the wrong type, hex or length).
pub const INVALID_ARGUMENT_CODE: i64 = -32602;
