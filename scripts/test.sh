#!/usr/bin/env bash
# Runs every check and test: formatting, clippy (warnings are errors), unit,
# doc and end-to-end tests (anvil, the example sidecar, the txgate binary),
# and checks that the benchmarks build. Installs anvil, cast and the test
# tools first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-foundry.sh
./scripts/install-test-tools.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --benches --no-run
# The end-to-end tests run the example sidecar as its own process.
cargo build --locked -p example-sidecar
cargo test --workspace --locked -- --test-threads 2
