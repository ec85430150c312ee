#!/usr/bin/env bash
# Runs every check and test: formatting, clippy (warnings are errors), unit,
# doc and end-to-end tests (anvil, the example sidecar, the txgate binary),
# checks that the benchmarks build, and validates deploy/. Installs anvil,
# cast, the test tools, the WebSocket clients (viem, web3.py) and geth and
# op-geth (built with Go) first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-off build on CI gains nothing from incremental state, which would
# double the target directory on a shared disk.
if [[ "${CI:-}" == "true" ]]; then export CARGO_INCREMENTAL=0; fi
./scripts/install-foundry.sh
./scripts/install-test-tools.sh
./scripts/install-ws-clients.sh
./scripts/install-nodes.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --benches --no-run
# The end-to-end tests run the example sidecar as its own process.
cargo build --locked -p example-sidecar
# The deployment files: HAProxy's own check, the Kubernetes manifests
# decoded strictly into the API types, their txgate.toml checked by txgate.
./scripts/check-deploy.sh
cargo test --workspace --locked -- --test-threads 2
