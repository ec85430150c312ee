//! The role of each JSON-RPC method, and when a read goes to the sequencer.
//!
//! Defaults ([`default_role`]):
//!
//! - Submissions go to a sequencer: `eth_sendRawTransaction`,
//!   `eth_sendRawTransactionConditional`, `eth_sendRawTransactionSync`,
//!   `eth_sendPrivateRawTransaction`; and `eth_subscribe` to
//!   `newPendingTransactions`, since only the sequencer's pool sees pending
//!   transactions.
//! - Bundles go to a builder: `eth_sendBundle`, `eth_callBundle`,
//!   `mev_sendBundle`, `eth_cancelBundle`.
//! - Filters live on the node that made them: `eth_newFilter`,
//!   `eth_newBlockFilter`, `eth_newPendingTransactionFilter`,
//!   `eth_getFilterChanges`, `eth_getFilterLogs` and `eth_uninstallFilter`
//!   all go to the sequencer, so a filter's id means something to the node
//!   asked about it (replicas chosen call by call would not know it; the
//!   pending one exists only at the sequencer anyway).
//! - Everything else is a read, for a replica.
//!
//! An override from the configuration wins over the default ([`role`]).
//!
//! A read goes to the sequencer instead ([`needs_sequencer`]) when it asks
//! for the `pending` block (the pending state exists only at the
//! sequencer), or when it is one of the reads of a client's own writes
//! ([`reads_own_writes`]: `eth_getTransactionCount`,
//! `eth_getTransactionReceipt`, `eth_call`) and the client submitted
//! within the read-your-writes window ([`crate::writes`]).

use std::collections::BTreeMap;

use crate::Role;

/// The default role of `method`; `pending_subscription` says that an
/// `eth_subscribe` asks for `newPendingTransactions` (ignored for other
/// methods).
pub fn default_role(method: &str, pending_subscription: bool) -> Role {
    match method {
        "eth_sendRawTransaction"
        | "eth_sendRawTransactionConditional"
        | "eth_sendRawTransactionSync"
        | "eth_sendPrivateRawTransaction" => Role::Sequencer,
        "eth_sendBundle" | "eth_callBundle" | "mev_sendBundle" | "eth_cancelBundle" => {
            Role::Builder
        }
        "eth_subscribe" if pending_subscription => Role::Sequencer,
        "eth_newFilter"
        | "eth_newBlockFilter"
        | "eth_newPendingTransactionFilter"
        | "eth_getFilterChanges"
        | "eth_getFilterLogs"
        | "eth_uninstallFilter" => Role::Sequencer,
        _ => Role::Replica,
    }
}

/// The role of `method`: its entry in `overrides` if any, else
/// [`default_role`].
pub fn role(method: &str, pending_subscription: bool, overrides: &BTreeMap<String, Role>) -> Role {
    overrides
        .get(method)
        .copied()
        .unwrap_or_else(|| default_role(method, pending_subscription))
}

/// Whether `method` reads what the client's own recent submissions change:
/// `eth_getTransactionCount`, `eth_getTransactionReceipt`, `eth_call`.
pub fn reads_own_writes(method: &str) -> bool {
    matches!(
        method,
        "eth_getTransactionCount" | "eth_getTransactionReceipt" | "eth_call"
    )
}

/// Whether a read of `method` goes to the sequencer: its params name the
/// `pending` block, or the method reads the client's own writes and the
/// client submitted lately (`recent_write`, from
/// [`crate::RecentWrites::recent`]).
pub fn needs_sequencer(method: &str, params_has_pending_tag: bool, recent_write: bool) -> bool {
    params_has_pending_tag || (recent_write && reads_own_writes(method))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        for m in [
            "eth_sendRawTransaction",
            "eth_sendRawTransactionConditional",
            "eth_sendRawTransactionSync",
            "eth_sendPrivateRawTransaction",
            "eth_newFilter",
            "eth_newBlockFilter",
            "eth_newPendingTransactionFilter",
            "eth_getFilterChanges",
            "eth_getFilterLogs",
            "eth_uninstallFilter",
        ] {
            assert_eq!(default_role(m, false), Role::Sequencer, "{m}");
        }
        for m in [
            "eth_sendBundle",
            "eth_callBundle",
            "mev_sendBundle",
            "eth_cancelBundle",
        ] {
            assert_eq!(default_role(m, true), Role::Builder, "{m}");
        }
        assert_eq!(default_role("eth_subscribe", true), Role::Sequencer);
        assert_eq!(default_role("eth_subscribe", false), Role::Replica);
        for m in [
            "eth_call",
            "eth_getBalance",
            "eth_blockNumber",
            "",
            "ETH_SENDRAWTRANSACTION",
        ] {
            assert_eq!(default_role(m, true), Role::Replica, "{m}");
        }
    }

    #[test]
    fn overrides_win() {
        let overrides = BTreeMap::from([
            ("eth_sendBundle".to_string(), Role::Sequencer),
            ("eth_subscribe".to_string(), Role::Replica),
            ("debug_traceTransaction".to_string(), Role::Sequencer),
        ]);
        assert_eq!(role("eth_sendBundle", false, &overrides), Role::Sequencer);
        assert_eq!(role("eth_subscribe", true, &overrides), Role::Replica);
        assert_eq!(
            role("debug_traceTransaction", false, &overrides),
            Role::Sequencer
        );
        assert_eq!(role("mev_sendBundle", false, &overrides), Role::Builder);
        assert_eq!(role("eth_getLogs", false, &overrides), Role::Replica);
    }

    #[test]
    fn reads_that_go_to_the_sequencer() {
        assert!(needs_sequencer("eth_getBalance", true, false));
        assert!(!needs_sequencer("eth_getBalance", false, true));
        for m in [
            "eth_getTransactionCount",
            "eth_getTransactionReceipt",
            "eth_call",
        ] {
            assert!(needs_sequencer(m, false, true), "{m}");
            assert!(!needs_sequencer(m, false, false), "{m}");
            assert!(needs_sequencer(m, true, false), "{m}");
        }
    }
}
