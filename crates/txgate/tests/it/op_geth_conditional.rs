//! `eth_sendRawTransactionConditional` against op-geth (issue 42): its
//! conditional endpoint on (`--rollup.sequencertxconditionalenabled`, its
//! cost rate limit raised so it never waits), txgate in front of it with
//! its defaults.
//!
//! A condition that holds is executed by op-geth; one the chain's state
//! fails is op-geth's refusal, passed back byte for byte. Every condition
//! txgate refuses itself is also sent straight to op-geth and the answers
//! compared: the same code and message where txgate answers as op-geth
//! does, and the difference asserted where it does not (HEURISTICS.md,
//! "Conditional transactions", lists them).
//!
//! op-geth checks a condition against the latest block and against its
//! parent: at genesis there is no parent, so each test has a block mined
//! first. It judges the condition before it decodes the transaction, so a
//! refused condition's answer does not depend on the transaction sent.

use std::time::Duration;

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, TxKind, U256, keccak256};
use hyper::StatusCode;
use serde_json::{Map, Value, json};

use crate::support::{
    ANVIL_ACCOUNTS, ANVIL_KEYS, Answer, Eoa, Geth, Txgate, receipt, rpc, rpc_json,
};

/// The ERC-4337 EntryPoint v0.7: a target txgate allows by default.
const ENTRY_POINT: &str = "0x0000000071727De22E5E9d8BAf0edAc6f37da032";
/// The storage root of an account with no storage (and of one that does
/// not exist, as op-geth reads it).
const EMPTY_ROOT: &str = "0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421";
const ZERO: &str = "0x0000000000000000000000000000000000000000000000000000000000000000";
const ONE: &str = "0x0000000000000000000000000000000000000000000000000000000000000001";
const GWEI: u128 = 1_000_000_000;

/// A call of `to` (a 4-byte selector as input), signed by `sender`.
fn signed(sender: &Eoa, nonce: u64, to: Address) -> String {
    sender.sign_tx(TxEip1559 {
        chain_id: 31337,
        nonce,
        gas_limit: 100_000,
        max_fee_per_gas: 20 * GWEI,
        max_priority_fee_per_gas: GWEI,
        to: TxKind::Call(to),
        value: U256::ZERO,
        access_list: Default::default(),
        input: vec![0x1f, 0xad, 0x94, 0x8c].into(),
    })
}

fn entry_point() -> Address {
    ENTRY_POINT.parse().unwrap()
}

fn hash_of(raw: &str) -> String {
    keccak256(alloy_primitives::hex::decode(raw).expect("hex")).to_string()
}

fn conditional(raw: &str, condition: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransactionConditional",
        "params": [raw, condition]})
    .to_string()
}

fn text(answer: &Answer) -> String {
    String::from_utf8_lossy(&answer.2).into_owned()
}

fn json_of(answer: &Answer) -> Value {
    serde_json::from_slice(&answer.2).unwrap_or_else(|e| panic!("{e}: {}", text(answer)))
}

/// op-geth with its conditional endpoint, txgate in front of it, and
/// block 1 mined (a transfer from anvil's last account).
async fn started() -> (Geth, Txgate) {
    let node = Geth::op_geth().await;
    let txgate = Txgate::start(&node.url, &[]);

    // At genesis op-geth cannot read the parent block's state: every
    // condition, even an empty one, is refused.
    let early = signed(&Eoa::from_key(ANVIL_KEYS[9]), 0, entry_point());
    let (_, answer) = rpc_json(&node.url, &conditional(&early, &json!({}))).await;
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000,
            "message": "header for hash not found"}})
    );

    let first = signed(&Eoa::from_key(ANVIL_KEYS[9]), 0, Address::repeat_byte(1));
    let (_, sent) = rpc_json(
        &node.url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction",
            "params": [first]})
        .to_string(),
    )
    .await;
    assert_eq!(sent["result"], hash_of(&first), "{sent}");
    let mined = receipt(&node.url, &hash_of(&first), Duration::from_secs(30)).await;
    assert_eq!(mined["blockNumber"], "0x1", "{mined}");
    (node, txgate)
}

/// A condition that holds (an account's storage root, another's slot, a
/// block-number and a timestamp window) is executed by op-geth, through
/// txgate as straight; conditions the chain fails are op-geth's refusals,
/// the same bytes through txgate.
#[tokio::test(flavor = "multi_thread")]
async fn op_geth_executes_what_holds_and_its_refusals_pass_back_unchanged() {
    let (node, txgate) = started().await;
    let holds = json!({
        "knownAccounts": {
            ANVIL_ACCOUNTS[9].to_lowercase(): EMPTY_ROOT,
            "0x000000000000000000000000000000000000abcd": {ZERO: ZERO},
        },
        "blockNumberMin": "0x1",
        "blockNumberMax": "0x1000",
        "timestampMax": "0xffffffffff",
    });
    for (url, key) in [(&node.url, ANVIL_KEYS[1]), (&txgate.url, ANVIL_KEYS[5])] {
        let raw = signed(&Eoa::from_key(key), 0, entry_point());
        let (status, answer) = rpc_json(url, &conditional(&raw, &holds)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["result"], hash_of(&raw), "{url}: {answer}");
        let mined = receipt(url, &hash_of(&raw), Duration::from_secs(30)).await;
        assert_eq!(mined["status"], "0x1", "{mined}");
        assert_eq!(mined["to"], ENTRY_POINT.to_lowercase(), "{mined}");
    }

    // Conditions the chain fails: refused by op-geth, with -32003 and its
    // message, which txgate passes back as it came (the trailing newline
    // op-geth ends its bodies with included).
    let raw = signed(&Eoa::from_key(ANVIL_KEYS[6]), 0, entry_point());
    let bb = "0x00000000000000000000000000000000000000000000000000000000000000bb";
    let account = ANVIL_ACCOUNTS[9].to_lowercase();
    let cases = [
        (
            json!({"knownAccounts": {account.clone(): bb}}),
            format!(
                "failed state check: failed account storage root constraint. Got {EMPTY_ROOT}, \
                 Expected {bb}"
            ),
        ),
        (
            json!({"knownAccounts": {account.clone(): {ZERO: ONE}}}),
            format!(
                "failed state check: failed account storage slot key {ZERO} constraint. \
                 Got {ZERO}, Expected {ONE}"
            ),
        ),
        (
            json!({"blockNumberMin": "0x100"}),
            "failed header check: failed block number minimum constraint".into(),
        ),
        (
            json!({"timestampMax": 1}),
            "failed header check: failed timestamp maximum constraint".into(),
        ),
    ];
    for (condition, message) in &cases {
        let body = conditional(&raw, condition);
        let direct = rpc(&node.url, &body).await.expect("op-geth");
        let through = rpc(&txgate.url, &body).await.expect("txgate");
        let expected = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{{\"code\":-32003,\"message\":\"{message}\"}}}}\n"
        );
        assert_eq!(
            (direct.0, text(&direct)),
            (StatusCode::OK, expected),
            "{condition}"
        );
        assert_eq!(
            (through.0, text(&through)),
            (direct.0, text(&direct)),
            "{condition}: txgate's answer (left) is not op-geth's (right)"
        );
    }
    // None of them was executed: the refused transaction is unknown.
    let (_, unknown) = rpc_json(
        &node.url,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getTransactionByHash",
            "params": [hash_of(&raw)]})
        .to_string(),
    )
    .await;
    assert_eq!(unknown["result"], Value::Null, "{unknown}");
}

/// Every condition txgate refuses itself, sent straight to op-geth too.
#[tokio::test(flavor = "multi_thread")]
async fn what_txgate_refuses_itself_compared_with_op_geth() {
    let (node, txgate) = started().await;
    let direct_sender = Eoa::from_key(ANVIL_KEYS[2]);
    let through_sender = Eoa::from_key(ANVIL_KEYS[7]);
    let mut nonce = 0;
    // Each case sends its own transaction each way (op-geth executes
    // what it accepts); nonces run on, gaps left by refusals are harmless.
    let mut both = |body: &dyn Fn(&str) -> String| {
        let direct_raw = signed(&direct_sender, nonce, entry_point());
        let through_raw = signed(&through_sender, nonce, entry_point());
        nonce += 1;
        let (direct_body, through_body) = (body(&direct_raw), body(&through_raw));
        let (node_url, txgate_url) = (node.url.clone(), txgate.url.clone());
        async move {
            let direct = rpc(&node_url, &direct_body).await.expect("op-geth");
            let through = rpc(&txgate_url, &through_body).await.expect("txgate");
            assert_eq!((direct.0, through.0), (StatusCode::OK, StatusCode::OK));
            (json_of(&direct), json_of(&through), direct_raw)
        }
    };
    let error = |code: i64, message: &str| json!({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": message}});
    let with_reason = |mut answer: Value, reason: &str| {
        answer["error"]["data"] = json!({"reason": reason});
        answer
    };

    // The same code and message: the range checks (op-geth's Validate) and
    // the cost over 1000 lookups (1001 accounts, each with a root: 2002).
    // txgate adds `data.reason`, as on every refusal of its own.
    let roots: Map<String, Value> = (1..=1001u32)
        .map(|i| (format!("0x{i:040x}"), json!(EMPTY_ROOT)))
        .collect();
    for (condition, code, message, reason) in [
        (
            json!({"blockNumberMin": 9, "blockNumberMax": 8}),
            -32003,
            "failed conditional validation: block number minimum constraint must be less than the maximum",
            "conditional_invalid",
        ),
        (
            json!({"timestampMin": "0x9", "timestampMax": "0x8"}),
            -32003,
            "failed conditional validation: timestamp minimum constraint must be less than the maximum",
            "conditional_invalid",
        ),
        (
            json!({"knownAccounts": roots}),
            -32005,
            "conditional cost, 2002, exceeded max: 1000",
            "conditional_cost_exceeded",
        ),
    ] {
        let (direct, through, _) = both(&|raw| conditional(raw, &condition)).await;
        assert_eq!(direct, error(code, message), "op-geth");
        assert_eq!(through, with_reason(error(code, message), reason), "txgate");
    }

    // No condition at all: -32602 from both, each in its own words.
    let (direct, through, _) = both(&|raw| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransactionConditional",
            "params": [raw]})
        .to_string()
    })
    .await;
    assert_eq!(
        direct,
        error(-32602, "missing value for required argument 1")
    );
    assert_eq!(
        through,
        with_reason(
            error(
                -32602,
                "invalid params: expected [raw transaction, condition]"
            ),
            "conditional_missing"
        )
    );

    // Malformed values: op-geth's RPC layer cannot decode the argument and
    // answers -32602 "invalid argument 1: " and Go's decoder error; txgate
    // answers the same code and prefix, naming the defect in its own words
    // (Go's text names Go types).
    let account = ANVIL_ACCOUNTS[9].to_lowercase();
    for (condition, geth_says, txgate_says) in [
        (
            json!({"knownAccounts": {"0x12": EMPTY_ROOT}}),
            "invalid argument 1: hex string has length 2, want 40 for common.Address",
            "an account key is not a 0x-prefixed 20-byte address",
        ),
        (
            json!({"knownAccounts": {"0000000000000000000000000000000000000001": EMPTY_ROOT}}),
            "invalid argument 1: json: cannot unmarshal hex string without 0x prefix into Go \
             struct field TransactionConditional.knownAccounts of type common.Address",
            "an account key is not a 0x-prefixed 20-byte address",
        ),
        (
            json!({"knownAccounts": {account.clone(): "0x12"}}),
            "invalid argument 1: json: cannot unmarshal string into Go struct field \
             TransactionConditional.knownAccounts of type map[common.Hash]common.Hash",
            "an account must be a 0x-prefixed 32-byte storage root or an object of slots",
        ),
        (
            json!({"knownAccounts": {account.clone(): {"0x01": "0x02"}}}),
            "invalid argument 1: hex string has length 2, want 64 for common.Hash",
            "a slot or its value is not 0x-prefixed 32 bytes",
        ),
        (
            json!({"knownAccounts": []}),
            "invalid argument 1: json: cannot unmarshal array into Go struct field \
             TransactionConditional.knownAccounts of type types.KnownAccounts",
            "knownAccounts must be an object of accounts",
        ),
        (
            json!({"blockNumberMin": "x"}),
            "invalid argument 1: invalid hex or decimal integer \"x\"",
            "a block number bound is not a number of at most 256 bits",
        ),
        (
            json!({"timestampMax": "0x10000000000000000"}),
            "invalid argument 1: invalid hex or decimal integer \"0x10000000000000000\"",
            "a timestamp bound is not a number of at most 64 bits",
        ),
        (
            json!("x"),
            "invalid argument 1: json: cannot unmarshal string into Go value of type \
             types.TransactionConditional",
            "the condition must be a JSON object",
        ),
        (
            json!([]),
            "invalid argument 1: json: cannot unmarshal array into Go value of type \
             types.TransactionConditional",
            "the condition must be a JSON object",
        ),
    ] {
        let (direct, through, _) = both(&|raw| conditional(raw, &condition)).await;
        assert_eq!(direct, error(-32602, geth_says), "op-geth, {condition}");
        assert_eq!(
            through,
            with_reason(
                error(-32602, &format!("invalid argument 1: {txgate_says}")),
                "conditional_invalid"
            ),
            "txgate, {condition}"
        );
    }

    // Accepted by op-geth, refused by txgate on purpose ("Stricter than
    // op-geth"): an unknown field (op-geth's decoder ignores it; the issue
    // expected -32602, op-geth v1.101702.3 accepts), a key given twice (Go
    // keeps the last), a null condition (none at all to Go), a negative
    // block number (a big.Int to Go; no block has one). op-geth takes the
    // transaction into its pool: it answers with its hash. txgate answers
    // a shape it refuses as a value (null, a negative number) with the
    // RPC layer's -32602, the rest with -32003.
    let unknown = "unknown field (knownAccounts, blockNumberMin, blockNumberMax, timestampMin, \
                   timestampMax)";
    let validation = |what: &str| error(-32003, &format!("failed conditional validation: {what}"));
    let argument = |what: &str| error(-32602, &format!("invalid argument 1: {what}"));
    for (condition, txgate_says) in [
        (r#"{"extra":true}"#, validation(unknown)),
        (
            r#"{"blockNumberMax":"0x1","blockNumberMax":"0x100"}"#,
            validation("a field or key is given twice"),
        ),
        ("null", argument("the condition must be a JSON object")),
        (
            r#"{"blockNumberMin":-1}"#,
            argument("a block number bound is not a number of at most 256 bits"),
        ),
    ] {
        // Written by hand: a JSON value cannot hold a key twice.
        let (direct, through, direct_raw) = both(&|raw| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransactionConditional","params":["{raw}",{condition}]}}"#
            )
        })
        .await;
        assert_eq!(
            direct,
            json!({"jsonrpc": "2.0", "id": 1, "result": hash_of(&direct_raw)}),
            "op-geth, {condition}"
        );
        assert_eq!(
            through,
            with_reason(txgate_says, "conditional_invalid"),
            "txgate, {condition}"
        );
    }

    // A call of a contract other than an EntryPoint: op-geth does not care;
    // txgate refuses it as op-txproxy does (`conditional.targets`).
    let elsewhere = Address::repeat_byte(0x09);
    let direct_raw = signed(&direct_sender, 100, elsewhere);
    let through_raw = signed(&through_sender, 100, elsewhere);
    let (_, direct) = rpc_json(&node.url, &conditional(&direct_raw, &json!({}))).await;
    assert_eq!(direct["result"], hash_of(&direct_raw), "{direct}");
    let (_, through) = rpc_json(&txgate.url, &conditional(&through_raw, &json!({}))).await;
    assert_eq!(
        through,
        with_reason(
            error(-32003, "only 4337 Entrypoint contract support"),
            "conditional_target"
        )
    );
}
