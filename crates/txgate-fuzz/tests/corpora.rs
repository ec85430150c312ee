//! Replays every checked-in input of every fuzz target (`fuzz/corpus/` and
//! `fuzz/regressions/`, one folder per target) through its body, on
//! stable, in CI: an input that once broke a target breaks the build.

#![allow(missing_docs, clippy::unwrap_used)]

use std::path::Path;

#[test]
fn every_checked_in_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut replayed = 0;
    for (target, body) in txgate_fuzz::TARGETS {
        let mut seen = 0;
        for kind in ["corpus", "regressions"] {
            let dir = root.join(kind).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let input = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| body(&input));
                assert!(outcome.is_ok(), "{target}: {} fails", path.display());
                seen += 1;
            }
        }
        assert!(seen > 0, "{target} has no checked-in input");
        replayed += seen;
    }
    eprintln!(
        "replayed {replayed} inputs over {} targets",
        txgate_fuzz::TARGETS.len()
    );
}

/// The seeds reach past each target's first check (a corpus of inputs
/// refused at the door would fuzz nothing): every seed of these targets
/// is accepted by the first thing its target calls.
#[test]
fn the_seeds_are_valid_inputs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let seeds = |target: &str| -> Vec<Vec<u8>> {
        std::fs::read_dir(root.join(target))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect()
    };
    for raw in seeds("raw_tx_differential") {
        let tx = txgate_screen::decode(&raw).unwrap();
        txgate_screen::recover_sender(&tx).unwrap();
    }
    for text in seeds("raw_tx") {
        let text = String::from_utf8(text).unwrap();
        txgate_screen::decode(&txgate_screen::decode_hex(&text).unwrap()).unwrap();
    }
    for body in seeds("proxyd_hook") {
        let parsed = txgate_proto::proxyd::parse(&body, txgate_proto::proxyd::MAX_TXS);
        assert!(parsed.is_ok_and(|r| !r.txs.is_empty()));
    }
    for body in seeds("jsonrpc") {
        let parsed = txgate_jsonrpc::parse(&body, 100);
        let answers = txgate_jsonrpc::encode::parse_upstream_batch(&body);
        assert!(parsed.is_ok() || answers.is_some());
    }
    for bytes in seeds("snapshot") {
        txgate_screen::snapshot::decode(&bytes).unwrap();
    }
    for text in seeds("config") {
        let config = txgate_config::Config::from_toml(std::str::from_utf8(&text).unwrap()).unwrap();
        config.validate().unwrap();
    }
    for input in seeds("conditional") {
        let condition = input.split(|&b| b == 0).next().unwrap();
        txgate_conditional::check(std::str::from_utf8(condition).unwrap(), 1000).unwrap();
        if let [_, header, body] = input.splitn(3, |&b| b == 0).collect::<Vec<_>>()[..] {
            txgate_conditional::caller::verify(header, body).unwrap();
        }
    }
    for input in seeds("identity")
        .iter()
        .filter(|i| i.starts_with(b"PROXY") || i.starts_with(b"\r\n"))
    {
        assert!(
            txgate_identity::proxy_protocol::parse(input)
                .unwrap()
                .is_some()
        );
    }
}
