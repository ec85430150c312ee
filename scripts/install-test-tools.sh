#!/usr/bin/env bash
# Installs the Debian packages the tests use beyond the Rust toolchain:
# faketime (the hash-seed test freezes the clock with it; setarch, from
# util-linux, turns address randomisation off).
set -euo pipefail
need=()
command -v faketime >/dev/null || need+=(faketime)
command -v setarch >/dev/null || need+=(util-linux)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
