//! Hash seeds come from the operating system, not the clock.
//!
//! Defect: `KeyState` seeded its hasher from the time, a stack address and
//! a counter, so two processes started with the same clock and the same
//! address layout hashed alike: whoever can guess the start time can grind
//! keys into one bucket. The test runs this test binary twice with the
//! clock frozen (`faketime`) and address randomisation off (`setarch -R`)
//! and asks each for the hash of the same key: they must differ.

#![allow(missing_docs, clippy::unwrap_used)]

use std::process::Command;

use txgate_screen::keyed::KeyState;

const PROBE: &str = "TXGATE_SEED_PROBE";

/// Prints a hash under a fresh seed when run as the probe; a no-op else.
#[test]
fn seed_probe() {
    if std::env::var_os(PROBE).is_some() {
        println!("HASH {}", KeyState::new().hash_bytes(&[7; 32]));
    }
}

fn probe_hash() -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setarch")
        .args([
            std::env::consts::ARCH,
            "-R",
            "faketime",
            // -f: the clock stands still (without it, it starts there and
            // runs on).
            "-f",
            "2026-01-01 00:00:00",
        ])
        .arg(exe)
        .args([
            "--exact",
            "seed_probe",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(PROBE, "1")
        .output()
        .unwrap_or_else(|e| {
            panic!("setarch/faketime not runnable ({e}): run scripts/install-test-tools.sh")
        });
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "probe failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split("HASH ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no hash printed: {stdout}"))
        .to_string()
}

#[test]
fn hash_seeds_do_not_follow_the_clock() {
    let (a, b) = (probe_hash(), probe_hash());
    assert_ne!(a, b, "same frozen clock, same layout, same seed");
}
