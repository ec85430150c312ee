#!/usr/bin/env bash
# proxyd's validation hook over loopback, asked as proxyd asks (see
# benches/src/bin/proxyd_load.rs): builds txgate and the tool (release),
# then runs it. Loopback only, bounded. Extra arguments go to the tool
# (--rate, --bundle-rate, --seconds, --rounds).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -q -p txgate -p txgate-benches
exec target/release/proxyd_load "$@"
