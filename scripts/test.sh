#!/usr/bin/env bash
# Runs every test: unit, property and end-to-end (anvil, the txgate binary).
# Installs anvil and cast first if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-foundry.sh
cargo test --workspace --locked --all-targets -- --test-threads 2
cargo test --workspace --locked --doc
