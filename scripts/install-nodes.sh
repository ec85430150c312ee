#!/usr/bin/env bash
# Builds geth (go-ethereum) and op-geth (pinned) from their Go modules into
# .tools/, which git ignores: .tools/geth/<version>/geth and
# .tools/op-geth/<version>/geth, linked as .tools/bin/geth and
# .tools/bin/op-geth (what the tests run). Idempotent: a node is rebuilt
# only when its binary is missing or its stamp no longer matches the pins.
#
# The pins are the small modules under scripts/nodes/: each names its node's
# cmd/geth as a tool, and its go.sum fixes every dependency. op-geth's
# go.mod declares the module github.com/ethereum/go-ethereum, so its module
# builds that path with a replace directive to op-geth's version. To move a
# pin, change the version here and in that folder's go.mod, then run
# `go mod tidy` there.
#
# Needs Go 1.25 or later (go-ethereum's floor). From nothing (no modules
# downloaded, nothing compiled) on 2 cores: about 5 minutes for both (geth
# 130 s, op-geth about 3 minutes; twice that beside another build); a warm
# run only checks the stamps (0.1 s).
set -euo pipefail

GETH_VERSION="v1.17.10"
OP_GETH_VERSION="v1.101702.3"
GO_FLOOR="1.25"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

command -v go >/dev/null || { echo "Go $GO_FLOOR or later is required to build geth and op-geth" >&2; exit 1; }
go_version="$(go env GOVERSION)"
go_version="${go_version#go}"
if [ "$(printf '%s\n%s\n' "$GO_FLOOR" "$go_version" | sort -V | head -n1)" != "$GO_FLOOR" ]; then
  echo "Go $GO_FLOOR or later is required to build geth and op-geth (found $go_version)" >&2
  exit 1
fi

# The stamp: the pins (go.mod and go.sum) the binary was built from.
stamp_of() {
  cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -d' ' -f1
}

link() {
  mkdir -p "$root/.tools/bin"
  ln -sfn "../$1/$2/geth" "$root/.tools/bin/$1"
}

# install NAME VERSION [LDFLAGS]: builds scripts/nodes/NAME's cmd/geth into
# .tools/NAME/VERSION/geth unless the stamp beside it matches, and links
# .tools/bin/NAME to it.
install() {
  local name="$1" version="$2" ldflags="${3:-}"
  local module="$root/scripts/nodes/$name"
  local dir="$root/.tools/$name/$version"
  local stamp
  stamp="$(stamp_of "$module")"
  # (The version is read whole before it is matched: grep -q closing the
  # pipe early would fail the check under pipefail.)
  if [ -x "$dir/geth" ] && [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ] &&
    [[ "$("$dir/geth" version 2>/dev/null)" == *"Version: ${version#v}-"* ]]; then
    echo "$name $version already in .tools/$name/$version"
    link "$name" "$version"
    return
  fi
  local start=$SECONDS
  mkdir -p "$dir"
  rm -f "$dir/stamp"
  go build -C "$module" -trimpath -ldflags "$ldflags" -o "$dir/geth.tmp" github.com/ethereum/go-ethereum/cmd/geth
  mv "$dir/geth.tmp" "$dir/geth"
  local built
  built="$("$dir/geth" version)"
  [[ "$built" == *"Version: ${version#v}-"* ]] ||
    { echo "$name $version did not build correctly: $built" >&2; exit 1; }
  echo "$stamp" >"$dir/stamp"
  link "$name" "$version"
  echo "built $name $version into .tools/$name/$version in $((SECONDS - start)) s"
}

grep -qE "^\s*github.com/ethereum/go-ethereum $GETH_VERSION( |$)" "$root/scripts/nodes/geth/go.mod" ||
  { echo "scripts/nodes/geth/go.mod does not pin go-ethereum $GETH_VERSION" >&2; exit 1; }
grep -qE "=> github.com/ethereum-optimism/op-geth $OP_GETH_VERSION$" "$root/scripts/nodes/op-geth/go.mod" ||
  { echo "scripts/nodes/op-geth/go.mod does not pin op-geth $OP_GETH_VERSION" >&2; exit 1; }

install geth "$GETH_VERSION"
# op-geth reads its own version from a tag its release build links in;
# without it, it calls itself 0.1.0-untagged.
install op-geth "$OP_GETH_VERSION" "-X github.com/ethereum/go-ethereum/version.gitTag=$OP_GETH_VERSION"
