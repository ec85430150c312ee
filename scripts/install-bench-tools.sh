#!/usr/bin/env bash
# Installs the load tools the end-to-end benchmarks use, from Debian's
# packages: nginx (baseline proxy and static responder), h2load, wrk.
set -euo pipefail
need=()
command -v h2load >/dev/null || need+=(nghttp2-client)
{ command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; } || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -eq 0 ]; then
  echo "bench tools already installed"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
