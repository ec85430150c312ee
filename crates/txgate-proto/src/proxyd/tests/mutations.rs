//! The hook's own JSON reader against serde_json on mutated bodies: a
//! typical body with its bytes changed, inserted and dropped at random
//! (a fixed seed: the same inputs every run). Whatever the reader accepts
//! must be JSON to serde_json, with the transactions it read and no other
//! (one direction only: the reader is stricter than serde_json's skipping,
//! see `scan.rs`);
//! and a body that differs only in how its JSON is written (whitespace,
//! escapes, key order, keys to skip) reads the same.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::*;

/// The body's shape as serde_json reads it, values checked as serde_json
/// checks what it skips (a number beyond f64 is still JSON).
#[derive(Deserialize)]
struct Shape {
    txs: std::collections::BTreeMap<String, IgnoredAny>,
}

/// xorshift64*: a deterministic stream of numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes JSON is made of, the ones mutations favour.
const JSON_BYTES: &[u8] = b"{}[]\":,\\ \n0x1aeEfFnul-+.tr/";

fn mutate(rng: &mut Rng, body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    for _ in 0..=rng.below(3) {
        let at = rng.below(out.len() + 1);
        let byte = if rng.below(4) == 0 {
            rng.next() as u8
        } else {
            JSON_BYTES[rng.below(JSON_BYTES.len())]
        };
        match rng.below(3) {
            0 if at < out.len() => out[at] = byte,
            1 if at < out.len() => {
                out.remove(at);
            }
            _ => out.insert(at, byte),
        }
    }
    out
}

#[test]
fn the_reader_never_accepts_what_serde_json_refuses() {
    let txs: Vec<Value> = (0..3).map(|n| json_of(&typical(n))).collect();
    let map: serde_json::Map<String, Value> = txs.iter().map(|t| (hash_of(t), t.clone())).collect();
    let body = serde_json::to_vec(&json!({ "txs": map })).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let input = mutate(&mut rng, &body);
        let Ok(request) = parse(&input, MAX_TXS) else {
            refused += 1;
            continue;
        };
        accepted += 1;
        let shape: Shape = serde_json::from_slice(&input).unwrap_or_else(|e| {
            panic!(
                "accepted, serde_json refuses ({e}): {}",
                String::from_utf8_lossy(&input)
            )
        });
        assert_eq!(shape.txs.len(), request.txs.len());
        for tx in &request.txs {
            assert!(shape.txs.contains_key(tx.key));
        }
    }
    // Both sides are reached: mutations inside a value's padding or
    // whitespace still read; most break the body.
    assert!(
        accepted > 100 && refused > 10_000,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn how_the_json_is_written_does_not_change_what_is_read() {
    let tx = json_of(&typical(4));
    let hash = hash_of(&tx);
    let plain = body_of(&hash, &tx);
    let expected = parse(&plain, MAX_TXS).unwrap();
    let text = String::from_utf8(plain.clone()).unwrap();
    let pretty =
        serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&plain).unwrap()).unwrap();
    let escaped = text.replace(":\"0x", ":\"\\u0030\\u0078");
    let skipped = text.replacen(
        "{\"txs\":",
        "{\"a\":[{\"b\":[1e3,-0.5,1e400,true,false,null,\"\\\"\"]}],\"txs\":",
        1,
    );
    let unknown = text.replacen("\"nonce\"", "\"blobs\":[[\"x\"],{}],\"nonce\"", 1);
    for variant in [
        pretty,
        escaped.into_bytes(),
        skipped.into_bytes(),
        unknown.into_bytes(),
    ] {
        let read = parse(&variant, MAX_TXS)
            .unwrap_or_else(|e| panic!("{e:?}: {}", String::from_utf8_lossy(&variant)));
        assert_eq!(read, expected, "{}", String::from_utf8_lossy(&variant));
    }
}
