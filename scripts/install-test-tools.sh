#!/usr/bin/env bash
# Installs the Debian packages the tests use beyond the Rust toolchain:
# faketime (the hash-seed test freezes the clock with it; setarch, from
# util-linux, turns address randomisation off), the fleet's real parts:
# HAProxy in front of several instances, redis-server for shared limits,
# and Prometheus (prometheus and promtool: the rule tests and the proof of
# the dashboard's queries), installed without starting its daemon.
set -euo pipefail
# PyYAML (PyPI): scripts/check-deploy.sh reads the rule files with it.
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install --quiet pyyaml
need=()
command -v faketime >/dev/null || need+=(faketime)
command -v setarch >/dev/null || need+=(util-linux)
command -v haproxy >/dev/null || need+=(haproxy)
command -v redis-server >/dev/null || need+=(redis-server)
need_prometheus=""
command -v promtool >/dev/null || need_prometheus=1
if [ ${#need[@]} -eq 0 ] && [ -z "$need_prometheus" ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ -n "$need_prometheus" ] || exit 0

# The pid of the process listening on TCP port $1, if any.
listener_pid() {
  command -v ss >/dev/null || return 0
  { ss -ltnpH "sport = :$1" 2>/dev/null || true; } | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1
}

# The package's maintainer scripts start the daemon (port 9090) and enable
# it at boot. A policy-rc.d that forbids starting services keeps it from
# starting during the install (one already there, as in Docker images, is
# left as it is); whatever started anyway is stopped by its pid.
policy=/usr/sbin/policy-rc.d
placed=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# scripts/install-test-tools.sh: no service starts during its install.\nexit 101\n' \
    | $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  placed=1
  trap '$SUDO rm -f "$policy"' EXIT
fi
before=$(listener_pid 9090)
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
if [ -n "$placed" ]; then
  $SUDO rm -f "$policy"
  trap - EXIT
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  $SUDO systemctl disable prometheus >/dev/null 2>&1 || true
fi
after=$(listener_pid 9090)
if [ -n "$after" ] && [ "$after" != "$before" ]; then
  echo "install-test-tools: stopping the prometheus daemon the package started (pid $after)" >&2
  $SUDO kill "$after"
fi
