#!/usr/bin/env bash
# Installs cargo-fuzz (crates.io, pinned) into .tools/cargo-fuzz for the
# fuzz campaigns (scripts/fuzz.sh). Needs the nightly toolchain (rustup
# toolchain install nightly), which libFuzzer's sanitizer flags require.
# CI does not need it: the checked-in corpora are replayed on stable
# (cargo test -p txgate-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.13.1
BIN=.tools/cargo-fuzz/bin/cargo-fuzz
if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q " $VERSION"; then
  exit 0
fi
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo install cargo-fuzz --version "$VERSION" --locked --root .tools/cargo-fuzz
