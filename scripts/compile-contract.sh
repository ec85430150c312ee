#!/usr/bin/env bash
# Recompiles contracts/Guarded.sol into contracts/Guarded.bin (creation
# bytecode, hex) with solcjs from npm, pinned, installed into .tools/.
# The repo ships the output; this script is how it was made.
set -euo pipefail
cd "$(dirname "$0")/.."
SOLC_VERSION=0.8.37
if [ ! -x .tools/solc/node_modules/.bin/solcjs ]; then
  mkdir -p .tools/solc
  npm install --silent --prefix .tools/solc "solc@${SOLC_VERSION}" >/dev/null
fi
out=$(mktemp -d)
.tools/solc/node_modules/.bin/solcjs --bin --optimize -o "$out" contracts/Guarded.sol >/dev/null
cp "$out"/*Guarded.bin contracts/Guarded.bin
rm -rf "$out"
echo "contracts/Guarded.bin: $(wc -c < contracts/Guarded.bin) hex characters"
