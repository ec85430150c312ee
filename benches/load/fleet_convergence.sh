#!/usr/bin/env bash
# Fleet convergence (see benches/src/bin/fleet_convergence.rs): builds
# txgate, the example sidecar and the tool (release), then runs it.
# Loopback only, bounded. Extra arguments go to the tool (--probes,
# --starts).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p example-sidecar -p txgate-benches
exec target/release/fleet_convergence "$@"
