#!/usr/bin/env bash
# Installs the Debian packages the tests use beyond the Rust toolchain:
# faketime (the hash-seed test freezes the clock with it; setarch, from
# util-linux, turns address randomisation off), the fleet's real parts:
# HAProxy in front of several instances, redis-server for shared limits
# and redis-sentinel for a primary that fails over, iproute2 for the
# network hosts (namespaces) the fleet tests make, Prometheus
# (prometheus and promtool: the rule tests and the proof of the
# dashboard's queries), and for the TLS tests nginx (an https://
# upstream) and curl (an OpenSSL client); the daemons are installed without
# starting.
set -euo pipefail
# PyYAML (PyPI): scripts/check-deploy.sh reads the rule files with it.
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install --quiet pyyaml
need=()
command -v faketime >/dev/null || need+=(faketime)
command -v setarch >/dev/null || need+=(util-linux)
command -v haproxy >/dev/null || need+=(haproxy)
command -v redis-server >/dev/null || need+=(redis-server)
command -v ip >/dev/null || need+=(iproute2)
command -v curl >/dev/null || need+=(curl)
# Packages whose maintainer scripts start a daemon.
services=()
command -v promtool >/dev/null || services+=(prometheus)
{ command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; } || services+=(nginx-light)
command -v redis-sentinel >/dev/null || services+=(redis-sentinel)
if [ ${#need[@]} -eq 0 ] && [ ${#services[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ ${#services[@]} -gt 0 ] || exit 0

# The pid of the process listening on TCP port $1, if any.
listener_pid() {
  command -v ss >/dev/null || return 0
  { ss -ltnpH "sport = :$1" 2>/dev/null || true; } | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1
}

# The packages' maintainer scripts start their daemons (Prometheus on port
# 9090, nginx on 80, redis-sentinel on 26379) and enable them at boot. A policy-rc.d that forbids
# starting services keeps them from starting during the install (one
# already there, as in Docker images, is left as it is); whatever started
# anyway is stopped by its pid.
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
before_nginx=$(listener_pid 80)
before_sentinel=$(listener_pid 26379)
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${services[@]}" >/dev/null
if [ -n "$placed" ]; then
  $SUDO rm -f "$policy"
  trap - EXIT
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  $SUDO systemctl disable prometheus nginx redis-sentinel >/dev/null 2>&1 || true
  $SUDO systemctl stop redis-sentinel >/dev/null 2>&1 || true
fi
after=$(listener_pid 9090)
if [ -n "$after" ] && [ "$after" != "$before" ]; then
  echo "install-test-tools: stopping the prometheus daemon the package started (pid $after)" >&2
  $SUDO kill "$after"
fi
after=$(listener_pid 80)
if [ -n "$after" ] && [ "$after" != "$before_nginx" ]; then
  echo "install-test-tools: stopping the nginx daemon the package started (pid $after)" >&2
  $SUDO kill "$after"
fi
after=$(listener_pid 26379)
if [ -n "$after" ] && [ "$after" != "$before_sentinel" ]; then
  echo "install-test-tools: stopping the redis-sentinel daemon the package started (pid $after)" >&2
  $SUDO kill "$after"
fi
