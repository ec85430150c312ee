#!/usr/bin/env bash
# The node group under load (see benches/src/bin/group_load.rs): txgate's
# CPU per call over a group of three anvils against one, then reads under
# failover while a replica is killed and restarted every 10 s. Builds
# txgate and the tool (release), then runs it. Loopback only, bounded.
# Extra arguments go to the tool (--rate, --seconds, --rounds,
# --failover-rate, --failover-seconds).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p txgate-benches
exec target/release/group_load "$@"
