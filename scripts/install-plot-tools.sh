#!/usr/bin/env bash
# Installs the plotting tools of the bench reports: a project-local virtual
# environment, .venv-plots/, with matplotlib from PyPI (pinned). Used by
# benches/load/attack.sh, benches/report/screen.py --plots and
# benches/load/dashboard.sh. Idempotent; quiet when already there.
#
# Use it as `.venv-plots/bin/python SCRIPT`; nothing outside the venv is
# touched. Remove the folder to start over.
set -euo pipefail
cd "$(dirname "$0")/.."

MATPLOTLIB_VERSION=3.11.2
VENV=.venv-plots
PY=$VENV/bin/python

installed() {
  [ -x "$PY" ] && "$PY" - "$MATPLOTLIB_VERSION" <<'PY' 2>/dev/null
import sys
import matplotlib
sys.exit(0 if matplotlib.__version__ == sys.argv[1] else 1)
PY
}

installed && exit 0

if [ ! -x "$PY" ]; then
  if ! python3 -m venv "$VENV" 2>/dev/null; then
    # Debian splits venv (and its ensurepip) into python3-venv.
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$VENV"
    python3 -m venv "$VENV"
  fi
fi
echo "install-plot-tools: matplotlib $MATPLOTLIB_VERSION into $VENV/" >&2
"$PY" -m pip install --quiet --disable-pip-version-check "matplotlib==$MATPLOTLIB_VERSION"
installed || { echo "install-plot-tools: matplotlib did not install" >&2; exit 1; }
