#!/usr/bin/env bash
# Installs the Debian packages the tests use beyond the Rust toolchain:
# faketime (the hash-seed test freezes the clock with it; setarch, from
# util-linux, turns address randomisation off), and the fleet's real parts:
# HAProxy in front of several instances, redis-server for shared limits.
set -euo pipefail
need=()
command -v faketime >/dev/null || need+=(faketime)
command -v setarch >/dev/null || need+=(util-linux)
command -v haproxy >/dev/null || need+=(haproxy)
command -v redis-server >/dev/null || need+=(redis-server)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
