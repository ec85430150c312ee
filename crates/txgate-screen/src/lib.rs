//! txgate's screening logic, with no I/O and no async, so that every piece
//! is easy to test and to bench.
//!
//! - [`tx`]: hex and EIP-2718 decoding of a raw transaction parameter, and
//!   the chain-id allow-list.
//! - [`recover`]: sender recovery with libsecp256k1, high-s refused.
//! - [`fingerprint`]: the fingerprint of a call and its value and gas
//!   buckets.

pub mod fingerprint;
pub mod recover;
pub mod tx;

pub use fingerprint::Fingerprint;
pub use recover::{SignatureError, recover_sender};
pub use tx::{DecodeError, Tx, check_chain_id, decode, decode_hex};
