#!/usr/bin/env bash
# The attack benchmark (see benches/src/bin/attack.rs): builds txgate, the
# example sidecar and the load tool (release), then runs it. Loopback only,
# bounded in time. Extra arguments go to the tool (--seconds, --rate,
# --attackers, --connections, --probes, --json FILE).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p example-sidecar -p txgate-benches
exec target/release/attack "$@"
