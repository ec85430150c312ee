#!/usr/bin/env bash
# Installs the real JSON-RPC clients the end-to-end tests drive over
# WebSocket: viem (npm, pinned by crates/txgate/tests/clients/package-lock.json,
# into node_modules beside the test scripts) and web3.py (PyPI, pinned, in a
# virtualenv at .tools/py, ignored by git). Needs node with npm, and python3
# with venv. Does nothing when both are there.
set -euo pipefail
cd "$(dirname "$0")/.."
WEB3_VERSION=8.0.0
clients=crates/txgate/tests/clients
if [ ! -d "$clients/node_modules/viem" ]; then
  command -v npm >/dev/null || { echo "install-ws-clients: npm is required" >&2; exit 1; }
  (cd "$clients" && npm ci --silent --no-audit --no-fund)
fi
if ! .tools/py/bin/python -c "import web3, sys; sys.exit(web3.__version__ != '$WEB3_VERSION')" 2>/dev/null; then
  python3 -m venv .tools/py
  .tools/py/bin/pip install --quiet --disable-pip-version-check "web3==$WEB3_VERSION"
fi
