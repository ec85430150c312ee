//! What the post-quantum hybrid key exchange costs each side of a TLS 1.3
//! handshake, without the network: the floor under what X25519MLKEM768
//! adds to a handshake against X25519 (issue: the hybrid adds ≤ 10% to
//! txgate's handshake time).
//!
//! With the crypto provider txgate's listener runs (rustls on aws-lc-rs),
//! for each group:
//!
//! - `client_start`: the client's key share (a key pair; for the hybrid,
//!   an ML-KEM-768 key pair as well as an X25519 one);
//! - `server`: what the server does with it (`start_and_complete`: its own
//!   share and the shared secret; for the hybrid, an ML-KEM encapsulation
//!   as well);
//! - `client_complete`: the client's shared secret from the server's share
//!   (for the hybrid, a decapsulation as well);
//!
//! and the transcript hash over the two hello messages' key shares (the
//! hybrid's are 1 216 and 1 120 bytes against 32 and 32), SHA-384 and
//! SHA-256, the hashes of the suites a client may pick.
//!
//! `cargo bench -p txgate-benches --bench tls_kx`

#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use rustls::crypto::SupportedKxGroup;
use rustls::crypto::aws_lc_rs::{cipher_suite, kx_group};

fn groups() -> [(&'static str, &'static dyn SupportedKxGroup); 2] {
    [
        ("X25519", kx_group::X25519),
        ("X25519MLKEM768", kx_group::X25519MLKEM768),
    ]
}

fn key_exchange(c: &mut Criterion) {
    let mut g = c.benchmark_group("tls_kx");
    for (name, group) in groups() {
        g.bench_function(format!("{name}/client_start"), |b| {
            b.iter(|| black_box(group.start().expect("key share")))
        });
        let client = group.start().expect("key share");
        let client_share = client.pub_key().to_vec();
        g.bench_function(format!("{name}/server"), |b| {
            b.iter(|| {
                black_box(
                    group
                        .start_and_complete(black_box(&client_share))
                        .expect("server share"),
                )
            })
        });
        let server_share = group
            .start_and_complete(&client_share)
            .expect("server share")
            .pub_key;
        println!(
            "{name}: client share {} bytes, server share {} bytes",
            client_share.len(),
            server_share.len()
        );
        g.bench_function(format!("{name}/client_complete"), |b| {
            b.iter_batched(
                || group.start().expect("key share"),
                |active| {
                    // The server's share answers another client key: the
                    // work is the same, the secret differs (the hybrid's
                    // decapsulation of a foreign ciphertext still runs in
                    // full, as ML-KEM's implicit rejection requires).
                    black_box(active.complete(black_box(&server_share)).ok())
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn transcript(c: &mut Criterion) {
    let mut g = c.benchmark_group("tls_transcript");
    // The two hellos' key shares: what the hybrid adds to the transcript.
    for (name, bytes) in [("X25519", 32 + 32), ("X25519MLKEM768", 1216 + 1120)] {
        let input = vec![0x5au8; bytes];
        for (hash_name, suite) in [
            ("sha384", cipher_suite::TLS13_AES_256_GCM_SHA384),
            ("sha256", cipher_suite::TLS13_AES_128_GCM_SHA256),
        ] {
            let hash = suite.tls13().expect("a TLS 1.3 suite").common.hash_provider;
            g.bench_function(format!("{name}/{hash_name}"), |b| {
                b.iter(|| {
                    let mut ctx = hash.start();
                    ctx.update(black_box(&input));
                    black_box(ctx.finish())
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, key_exchange, transcript);
criterion_main!(benches);
