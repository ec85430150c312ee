#!/usr/bin/env bash
# The pool's VerifyTransaction questions over loopback, txgate against a
# plain tonic server on the same engine (see benches/src/bin/aeges_load/main.rs):
# builds txgate and the tool (release), then runs it. Loopback only,
# bounded. Extra arguments go to the tool (--rate, --seconds, --rounds).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -q -p txgate -p txgate-benches
exec target/release/aeges_load "$@"
