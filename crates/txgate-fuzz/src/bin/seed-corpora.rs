//! Writes the seed corpora under `fuzz/corpus/<target>/`: a few valid
//! inputs of each kind (signed transactions of every type txgate reads,
//! requests, responses, snapshots, sidecar messages, config, PROXY
//! headers, conditions with a signature), from which libFuzzer mutates.
//! Deterministic: the same files every run. Usage: `cargo run -p
//! txgate-fuzz --bin seed-corpora` from the repository root.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEip2930, TxEnvelope, TxLegacy};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, Signature, TxKind, U256};
use prost::Message;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("fuzz/corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn key() -> secp256k1::SecretKey {
    secp256k1::SecretKey::from_byte_array([0x5a; 32]).unwrap()
}

fn sign<T: SignableTransaction<Signature>>(tx: T) -> alloy_consensus::Signed<T> {
    let digest = secp256k1::Message::from_digest(tx.signature_hash().0);
    let (id, compact) = secp256k1::SECP256K1
        .sign_ecdsa_recoverable(digest, &key())
        .serialize_compact();
    let signature = Signature::new(
        U256::from_be_slice(&compact[..32]),
        U256::from_be_slice(&compact[32..]),
        i32::from(id) == 1,
    );
    tx.into_signed(signature)
}

/// One signed transaction of each type txgate reads.
fn transactions() -> Vec<(&'static str, Vec<u8>)> {
    let to = TxKind::Call(Address::repeat_byte(0x42));
    let input = Bytes::from(vec![0xa9, 0x05, 0x9c, 0xbb, 0, 0, 0, 1]);
    let legacy: TxEnvelope = sign(TxLegacy {
        chain_id: Some(31337),
        nonce: 1,
        gas_price: 1_000_000_000,
        gas_limit: 21_000,
        to,
        value: U256::from(1u8),
        input: input.clone(),
    })
    .into();
    let access: TxEnvelope = sign(TxEip2930 {
        chain_id: 31337,
        nonce: 2,
        gas_price: 1_000_000_000,
        gas_limit: 50_000,
        to,
        value: U256::ZERO,
        access_list: Default::default(),
        input: input.clone(),
    })
    .into();
    let dynamic: TxEnvelope = sign(TxEip1559 {
        chain_id: 31337,
        nonce: 3,
        gas_limit: 100_000,
        max_fee_per_gas: 20_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to,
        value: U256::from(10u64).pow(U256::from(18u8)),
        access_list: Default::default(),
        input,
    })
    .into();
    let creation: TxEnvelope = sign(TxEip1559 {
        chain_id: 31337,
        nonce: 4,
        gas_limit: 500_000,
        max_fee_per_gas: 20_000_000_000,
        max_priority_fee_per_gas: 1,
        to: TxKind::Create,
        value: U256::ZERO,
        access_list: Default::default(),
        input: Bytes::from(vec![0x60, 0x80, 0x60, 0x40, 0x52]),
    })
    .into();
    vec![
        ("legacy", legacy.encoded_2718()),
        ("eip2930", access.encoded_2718()),
        ("eip1559", dynamic.encoded_2718()),
        ("creation", creation.encoded_2718()),
    ]
}

fn hex(bytes: &[u8]) -> String {
    format!("0x{}", alloy_primitives::hex::encode(bytes))
}

fn main() {
    let txs = transactions();
    for (name, raw) in &txs {
        write("raw_tx_differential", name, raw);
        write("raw_tx", name, hex(raw).as_bytes());
    }
    write(
        "raw_tx",
        "upper",
        hex(&txs[2].1)
            .to_uppercase()
            .replacen("0X", "0x", 1)
            .as_bytes(),
    );

    // proxyd's hook: each transaction alone, all of them in one body, and
    // one written with whitespace, escapes and keys the reader skips.
    for (name, raw) in &txs {
        let body = txgate_proto::proxyd::encode::request(&[raw]).unwrap();
        write("proxyd_hook", name, &body);
    }
    let all: Vec<&[u8]> = txs.iter().map(|(_, raw)| raw.as_slice()).collect();
    let body = txgate_proto::proxyd::encode::request(&all).unwrap();
    write("proxyd_hook", "bundle", &body);
    let odd = String::from_utf8(body)
        .unwrap()
        .replacen(
            "\"txs\":",
            "\"extra\": [1, -2.5e3, {\"a\": null}, true], \"txs\" : ",
            1,
        )
        .replace(":\"0x", ":\"\\u0030x")
        .replace(",\"", " ,\n \"");
    write("proxyd_hook", "unusual", odd.as_bytes());

    let raw = hex(&txs[2].1);
    for (name, body) in [
        ("single", format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["{raw}"]}}"#)),
        ("batch", format!(r#"[{{"jsonrpc":"2.0","id":"a","method":"eth_chainId","params":[]}},{{"jsonrpc":"2.0","method":"eth_sendRawTransaction","params":["{raw}"]}},{{"jsonrpc":"2.0","id":null,"method":"eth_call","params":[{{"to":"0x00","data":"0x"}},"latest"]}},{{"id":1}},7]"#)),
        ("notification", r#"{"jsonrpc":"2.0","method":"eth_blockNumber"}"#.to_string()),
        ("answers", r#"[{"jsonrpc":"2.0","id":0,"result":"0x1"},{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"}}]"#.to_string()),
        ("ids", r#"[{"jsonrpc":"2.0","id":-1.5e3,"method":"a"},{"jsonrpc":"2.0","id":"\u00e9\"","method":"b"}]"#.to_string()),
    ] {
        write("jsonrpc", name, body.as_bytes());
    }

    for (name, wire) in [
        ("length", &b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello"[..]),
        ("chunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n"),
        ("close", b"HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nuntil the end"),
        ("no_content", b"HTTP/1.1 204 No Content\r\n\r\n"),
        ("error", b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    ] {
        for (step, cap) in [(1u8, 3u8), (7, 8), (255, 11)] {
            let mut input = vec![step, cap];
            input.extend_from_slice(wire);
            write("upstream_response", &format!("{name}_{step}"), &input);
        }
    }

    let record = |n: u8, assertions: usize| txgate_screen::snapshot::BanRecord {
        fingerprint: B256::repeat_byte(n),
        expires_in: 60_000 * u64::from(n),
        suspect_for: 1_000,
        assertions: (0..assertions)
            .map(|i| txgate_screen::AssertionKey {
                id: B256::repeat_byte(i as u8 + 1),
                version: i as u64,
            })
            .collect(),
    };
    write("snapshot", "empty", &txgate_screen::snapshot::encode(&[]));
    write(
        "snapshot",
        "three",
        &txgate_screen::snapshot::encode(&[record(1, 0), record(2, 1), record(3, 3)]),
    );

    let fingerprint = txgate_screen::Fingerprint::from_parts(
        Address::repeat_byte(0x42),
        &[0xa9, 0x05, 0x9c, 0xbb, 1],
        U256::from(1u8),
        100_000,
    );
    let v1 = txgate_proto::v1::Invalidation {
        fingerprint: Some(txgate_proto::v1::Fingerprint {
            hash: fingerprint.hash.to_vec(),
            target: vec![0x42; 20],
            selector: vec![0xa9, 0x05, 0x9c, 0xbb],
            arg_hash16: vec![7; 16],
            value_bucket: 1,
            gas_bucket: 2,
        }),
        assertion: Some(txgate_proto::v1::Assertion {
            assertion_id: vec![9; 32],
            assertion_version: 3,
        }),
        tx_hash: vec![1; 32],
        sender: vec![2; 20],
        schema_version: 2,
        kind: 1,
        age_ms: 500,
        observed_at: 1_700_000_000_000,
        ..Default::default()
    };
    write("sidecar", "txgate_v1", &v1.encode_to_vec());
    let rpcproxy = txgate_proto::rpcproxy_v1::Invalidation {
        fingerprint: Some(txgate_proto::rpcproxy_v1::Fingerprint {
            hash: fingerprint.hash.to_vec(),
            target: vec![0x42; 20],
            selector: vec![0xa9, 0x05, 0x9c, 0xbb],
            arg_hash16: vec![7; 16],
            value_bucket: 1,
            gas_bucket: 2,
        }),
        assertion: Some(txgate_proto::rpcproxy_v1::Assertion {
            assertion_id: vec![9; 32],
            assertion_version: 3,
        }),
        adopter: "0x4242424242424242424242424242424242424242".into(),
        l2_block_number: 12,
        ..Default::default()
    };
    write("sidecar", "rpcproxy_v1", &rpcproxy.encode_to_vec());
    let aeges = txgate_proto::aeges_v1::VerifyTransactionRequest {
        event_id: 7,
        transaction: Some(txgate_proto::aeges_v1::Transaction {
            hash: vec![1; 32].into(),
            sender: vec![2; 20].into(),
            to: Some(vec![0x42; 20].into()),
            value: vec![1].into(),
            nonce: 3,
            r#type: 2,
            chain_id: Some(31337),
            payload: vec![0xa9, 0x05, 0x9c, 0xbb].into(),
            gas_limit: 100_000,
            ..Default::default()
        }),
    };
    write("sidecar", "aeges", &aeges.encode_to_vec());
    write(
        "sidecar",
        "report",
        br#"["0x1111111111111111111111111111111111111111111111111111111111111111", {"tx_type":2, "caller":"0x70997970c51812dc3a010c7d01b50e0d17dc79c8", "gas_limit":100000, "gas_price":2000000000, "kind":"0x000000000000000000000000000000000000dead", "value":"0x1", "data":"0xa9059cbb", "nonce":7, "chain_id":31337, "access_list":[], "gas_priority_fee":1000000000, "blob_hashes":[], "max_fee_per_blob_gas":0, "authorization_list":[]}]"#,
    );

    write(
        "config",
        "shipped",
        std::fs::read_to_string("config/txgate.toml")
            .unwrap()
            .as_bytes(),
    );
    write(
        "config",
        "small",
        b"[upstream]\nurl = \"http://127.0.0.1:8545\"\n[limits]\nip = { calls_per_sec = 5 }\n[conditional]\ncallers = [\"0x5FF137D4b0FDCD49DcA30c7CF57E578a026d2789\"]\n",
    );

    write(
        "identity",
        "v1_tcp4",
        b"PROXY TCP4 203.0.113.7 10.0.0.1 5000 80\r\nGET / HTTP/1.1\r\n",
    );
    write(
        "identity",
        "v1_tcp6",
        b"PROXY TCP6 2001:db8::7 2001:db8::1 5000 80\r\n",
    );
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2.extend_from_slice(&[
        0x21, 0x11, 0, 12, 203, 0, 113, 7, 10, 0, 0, 1, 0x13, 0x88, 0, 80,
    ]);
    write("identity", "v2_tcp4", &v2);
    write("identity", "xff", b"203.0.113.9, 10.0.0.2\n198.51.100.1");
    write(
        "identity",
        "forwarded",
        b"for=192.0.2.60;proto=http;by=203.0.113.43, for=\"[2001:db8:cafe::17]:4711\"",
    );

    let condition = r#"{"knownAccounts":{"0x5ff137d4b0fdcd49dca30c7cf57e578a026d2789":{"0x0000000000000000000000000000000000000000000000000000000000000001":"0x00000000000000000000000000000000000000000000000000000000000000aa"},"0x0000000000000000000000000000000000000001":"0x00000000000000000000000000000000000000000000000000000000000000bb"},"blockNumberMin":"0x10","blockNumberMax":100,"timestampMax":"0x7fffffff"}"#;
    let body =
        br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransactionConditional","params":[]}"#;
    let (_, header) = txgate_conditional::caller::sign(&key(), body);
    let mut signed = condition.as_bytes().to_vec();
    signed.push(0);
    signed.extend_from_slice(header.as_bytes());
    signed.push(0);
    signed.extend_from_slice(body);
    write("conditional", "signed", &signed);
    write(
        "conditional",
        "bounds_only",
        br#"{"timestampMin": 1, "timestampMax": 2}"#,
    );
}
