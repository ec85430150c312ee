#!/usr/bin/env bash
# Installs anvil and cast (pinned) from their npm packages into .tools/,
# which git ignores. Idempotent: does nothing when the pinned version is there.
set -euo pipefail

FOUNDRY_VERSION="1.7.1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.tools/foundry"
bin="$root/.tools/bin"

installed() {
  [ -x "$bin/anvil" ] && [ -x "$bin/cast" ] &&
    "$bin/anvil" --version 2>/dev/null | grep -q "Version: $FOUNDRY_VERSION" &&
    "$bin/cast" --version 2>/dev/null | grep -q "Version: $FOUNDRY_VERSION"
}

if installed; then
  echo "anvil and cast $FOUNDRY_VERSION already in .tools/bin"
  exit 0
fi

command -v npm >/dev/null || { echo "npm is required to install anvil and cast" >&2; exit 1; }
mkdir -p "$prefix" "$bin"
npm install --no-audit --no-fund --loglevel=error --prefix "$prefix" \
  "@foundry-rs/anvil-linux-amd64@$FOUNDRY_VERSION" \
  "@foundry-rs/cast-linux-amd64@$FOUNDRY_VERSION"
ln -sf "../foundry/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil" "$bin/anvil"
ln -sf "../foundry/node_modules/@foundry-rs/cast-linux-amd64/bin/cast" "$bin/cast"
installed || { echo "anvil/cast $FOUNDRY_VERSION did not install correctly" >&2; exit 1; }
echo "installed anvil and cast $FOUNDRY_VERSION into .tools/bin"
