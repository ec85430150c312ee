//! keccak-256 of many short messages: one at a time on the assembly
//! keccak txgate uses (`keccak-asm`, through alloy's `asm-keccak`), against
//! eight at a time on RustCrypto's `keccak` portable-SIMD backend (one
//! message per 64-bit lane of a 512-bit vector), the same messages, in
//! interleaved rounds. The 8-way side absorbs, permutes and squeezes
//! eight equal-length messages together, transposes included.
//!
//! Nightly only (portable SIMD), from this folder:
//!
//! ```text
//! RUSTFLAGS='--cfg keccak_backend="simd512" -C target-cpu=native' \
//!     cargo +nightly run --release -- [message bytes ...]
//! ```
//!
//! (`simd256` for the 4-way backend.) Without the `keccak_backend` cfg the
//! crate's "parallel" function is a loop over its scalar code, which the
//! program reports as such.

use std::hint::black_box;
use std::time::Instant;

use hybrid_array::Array;
use keccak::{Backend, BackendClosure, State1600};

/// keccak-256's rate in bytes.
const RATE: usize = 136;
/// Messages a round (a 100-transaction hook request).
const MESSAGES: usize = 96;
const ROUNDS: usize = 11;
const REPEATS: usize = 400;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("message sizes in bytes"))
        .collect();
    let sizes = if sizes.is_empty() {
        // One block (the fingerprint's 52-byte preimage, a short
        // argument hash), two (a transfer's signed RLP with some calldata).
        vec![52, 180]
    } else {
        sizes
    };
    keccak::Keccak::new().with_backend(Run { sizes });
}

struct Run {
    sizes: Vec<usize>,
}

impl BackendClosure for Run {
    fn call_once<B: Backend>(self) {
        let ways = <B::ParSize1600 as hybrid_array::typenum::Unsigned>::USIZE;
        println!(
            "backend ways: {ways}{}",
            if cfg!(target_feature = "avx512f") {
                " (avx512f on)"
            } else {
                ""
            }
        );
        println!(
            "| message bytes | one at a time (keccak-asm), ns per message | {ways} at a time, ns per message | ratio |"
        );
        println!("|---|---|---|---|");
        for &size in &self.sizes {
            let messages: Vec<Vec<u8>> = (0..MESSAGES)
                .map(|m| (0..size).map(|i| (m * 31 + i * 7) as u8).collect())
                .collect();
            // Same digests both ways.
            let scalar: Vec<[u8; 32]> = messages.iter().map(|m| asm(m)).collect();
            let mut parallel = vec![[0u8; 32]; MESSAGES];
            many::<B>(&messages, &mut parallel);
            assert_eq!(scalar, parallel, "{ways}-way digests differ");

            let (mut one, mut par) = (Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                let t = Instant::now();
                for _ in 0..REPEATS {
                    for m in &messages {
                        black_box(asm(black_box(m)));
                    }
                }
                one.push(t.elapsed().as_nanos() as f64 / (REPEATS * MESSAGES) as f64);
                let t = Instant::now();
                for _ in 0..REPEATS {
                    many::<B>(black_box(&messages), &mut parallel);
                    black_box(&parallel);
                }
                par.push(t.elapsed().as_nanos() as f64 / (REPEATS * MESSAGES) as f64);
            }
            let ratios: Vec<f64> = one.iter().zip(&par).map(|(o, p)| p / o).collect();
            println!(
                "| {size} | {:.1} | {:.1} | {:.3} |",
                median(one),
                median(par),
                median(ratios)
            );
        }
    }
}

fn asm(message: &[u8]) -> [u8; 32] {
    keccak_asm::Keccak256::digest(message).into()
}

/// keccak-256 of `messages` (all the same length), `ways` at a time.
fn many<B: Backend>(messages: &[Vec<u8>], out: &mut [[u8; 32]]) {
    let ways = <B::ParSize1600 as hybrid_array::typenum::Unsigned>::USIZE;
    let permute = B::get_par_f1600();
    let single = B::get_f1600();
    let mut start = 0;
    while start < messages.len() {
        let group = &messages[start..(start + ways).min(messages.len())];
        if group.len() < ways {
            for (m, o) in group.iter().zip(&mut out[start..]) {
                let mut state = [0u64; 25];
                absorb(&mut state, m, &mut |s| single(s));
                *o = squeeze(&state);
            }
            break;
        }
        let mut states: Array<State1600, B::ParSize1600> = Array::from_fn(|_| [0u64; 25]);
        let len = group[0].len();
        let blocks = len / RATE + 1;
        for block in 0..blocks {
            for (state, m) in states.iter_mut().zip(group) {
                xor_block(state, m, block);
            }
            permute(&mut states);
        }
        for (state, o) in states.iter().zip(&mut out[start..]) {
            *o = squeeze(state);
        }
        start += ways;
    }
}

/// XORs block `block` of `message`, padded (keccak's 0x01 ... 0x80), into
/// `state`.
fn xor_block(state: &mut State1600, message: &[u8], block: usize) {
    let mut bytes = [0u8; RATE];
    let from = block * RATE;
    let part = &message[from.min(message.len())..(from + RATE).min(message.len())];
    bytes[..part.len()].copy_from_slice(part);
    if from + RATE > message.len() {
        bytes[part.len()] ^= 0x01;
        bytes[RATE - 1] ^= 0x80;
    }
    for (lane, chunk) in state.iter_mut().zip(bytes.chunks_exact(8)) {
        *lane ^= u64::from_le_bytes(chunk.try_into().unwrap());
    }
}

fn absorb(state: &mut State1600, message: &[u8], permute: &mut impl FnMut(&mut State1600)) {
    for block in 0..message.len() / RATE + 1 {
        xor_block(state, message, block);
        permute(state);
    }
}

fn squeeze(state: &State1600) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (chunk, lane) in out.chunks_exact_mut(8).zip(state) {
        chunk.copy_from_slice(&lane.to_le_bytes());
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
