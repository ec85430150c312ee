#!/usr/bin/env bash
# The fleet across hosts (see benches/src/bin/fleet_hosts/main.rs): builds
# txgate and the tool (release), then runs it. Needs root for the network
# namespaces, redis-server and redis-cli (scripts/install-test-tools.sh).
# Traffic stays on loopback and the namespaces' bridge; bounded.
#   benches/load/fleet_hosts.sh propagation [--reports 1000] [--rounds 5] [--delay-ms 2]
#   benches/load/fleet_hosts.sh partition [--minutes 30] [--every 120] [--cut 30] [--csv FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p txgate-benches
exec target/release/fleet_hosts "$@"
