use super::*;

#[test]
fn submissions_are_never_resent() {
    for m in [
        "eth_sendRawTransaction",
        "eth_sendRawTransactionConditional",
        "eth_sendRawTransactionSync",
        "eth_sendBundle",
        "mev_sendBundle",
        "eth_cancelBundle",
    ] {
        assert!(is_submission(m), "{m}");
    }
    for m in [
        "eth_call",
        "eth_getBalance",
        "eth_blockNumber",
        "eth_callBundle",
    ] {
        assert!(!is_submission(m), "{m}");
    }
}
