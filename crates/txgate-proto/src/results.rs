//! The Credible Layer sidecar's result stream (`sidecar.transport.v1`
//! `SubscribeResults`): one result for every executed transaction, of which
//! txgate keeps only assertion failures.

use alloy_primitives::B256;

use crate::transport_v1::{ResultStatus, TransactionResult};

/// A result's status, as a bounded label set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `RESULT_STATUS_UNSPECIFIED`.
    Unspecified,
    /// `RESULT_STATUS_SUCCESS`.
    Success,
    /// `RESULT_STATUS_REVERTED`.
    Reverted,
    /// `RESULT_STATUS_HALTED`.
    Halted,
    /// `RESULT_STATUS_FAILED`.
    Failed,
    /// `RESULT_STATUS_ASSERTION_FAILED`.
    AssertionFailed,
    /// A value this build does not know (counted, ignored).
    Unknown,
}

impl Status {
    /// Every status, in label order.
    pub const ALL: [Status; 7] = [
        Status::Unspecified,
        Status::Success,
        Status::Reverted,
        Status::Halted,
        Status::Failed,
        Status::AssertionFailed,
        Status::Unknown,
    ];

    /// Position in [`Status::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Unspecified => "unspecified",
            Status::Success => "success",
            Status::Reverted => "reverted",
            Status::Halted => "halted",
            Status::Failed => "failed",
            Status::AssertionFailed => "assertion_failed",
            Status::Unknown => "unknown",
        }
    }

    /// The status of a wire value.
    pub fn of(value: i32) -> Status {
        match ResultStatus::try_from(value) {
            Ok(ResultStatus::Unspecified) => Status::Unspecified,
            Ok(ResultStatus::Success) => Status::Success,
            Ok(ResultStatus::Reverted) => Status::Reverted,
            Ok(ResultStatus::Halted) => Status::Halted,
            Ok(ResultStatus::Failed) => Status::Failed,
            Ok(ResultStatus::AssertionFailed) => Status::AssertionFailed,
            Err(_) => Status::Unknown,
        }
    }
}

/// What a result means to txgate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The transaction failed an assertion: learn from it.
    AssertionFailed(B256),
    /// Anything else: counted by status, nothing to learn.
    Ignored(Status),
    /// An assertion failure without a 32-byte tx hash.
    Malformed,
}

/// Sorts one result.
#[inline]
pub fn classify(result: &TransactionResult) -> Outcome {
    match Status::of(result.status) {
        Status::AssertionFailed => match result.tx_execution_id.as_ref() {
            Some(id) if id.tx_hash.len() == 32 => {
                Outcome::AssertionFailed(B256::from_slice(&id.tx_hash))
            }
            _ => Outcome::Malformed,
        },
        other => Outcome::Ignored(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport_v1::TxExecutionId;

    fn result(status: i32, hash: &[u8]) -> TransactionResult {
        TransactionResult {
            tx_execution_id: Some(TxExecutionId {
                block_number: vec![0; 32],
                iteration_id: 1,
                tx_hash: hash.to_vec(),
                index: 0,
            }),
            status,
            gas_used: 21_000,
            error: String::new(),
        }
    }

    #[test]
    fn only_assertion_failures_are_learned() {
        let h = B256::repeat_byte(7);
        assert_eq!(
            classify(&result(5, h.as_slice())),
            Outcome::AssertionFailed(h)
        );
        assert_eq!(classify(&result(5, &[1; 31])), Outcome::Malformed);
        assert_eq!(
            classify(&result(1, h.as_slice())),
            Outcome::Ignored(Status::Success)
        );
        assert_eq!(
            classify(&result(2, h.as_slice())),
            Outcome::Ignored(Status::Reverted)
        );
        // A status from a newer sidecar is counted and ignored.
        assert_eq!(
            classify(&result(6, h.as_slice())),
            Outcome::Ignored(Status::Unknown)
        );
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
        }
    }
}
