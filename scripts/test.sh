#!/usr/bin/env bash
# Runs every test: unit, doc and end-to-end (anvil, the example sidecar, the
# txgate binary), and checks that the benchmarks build. Installs anvil and
# cast first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-foundry.sh
cargo test --workspace --locked --benches --no-run
# The end-to-end tests run the example sidecar as its own process.
cargo build --locked -p example-sidecar
cargo test --workspace --locked -- --test-threads 2
