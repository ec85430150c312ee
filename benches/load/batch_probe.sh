#!/usr/bin/env bash
# The batch-probe benchmark (see benches/src/bin/batch_probe.rs): builds
# txgate, the example sidecar and the tool (release), then runs it.
# Loopback only, bounded. Extra arguments go to the tool (--rounds,
# --batch, --delay-ms).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p example-sidecar -p txgate-benches
exec target/release/batch_probe "$@"
