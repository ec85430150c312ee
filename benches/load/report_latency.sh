#!/usr/bin/env bash
# Report to first refusal (see benches/src/bin/report_latency.rs): builds
# txgate and the tool (release), then runs it. Loopback only, bounded.
# Extra arguments go to the tool (--rounds).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p txgate-benches
exec target/release/report_latency "$@"
