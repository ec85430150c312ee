#!/usr/bin/env bash
# Validates the deployment files under deploy/ without a cluster or a
# Docker engine (the end-to-end test crates/txgate/tests/it/deploy.rs also
# runs deploy/haproxy/haproxy.cfg in front of real instances):
#   - deploy/haproxy/haproxy.cfg: `haproxy -c` with every address set;
#   - deploy/kubernetes: each manifest decoded strictly into the Kubernetes
#     API types (deploy/kubernetes/check, Go), cross-checked, and the
#     ConfigMap's txgate.toml accepted by `txgate check-config`.
# deploy/Dockerfile is not built here (no Docker engine on these machines).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v haproxy >/dev/null || { echo "haproxy missing: run scripts/install-test-tools.sh" >&2; exit 1; }
command -v go >/dev/null || { echo "go missing: the Kubernetes manifests are checked with Go (the Go toolchain)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

TXGATE_LB_BIND=127.0.0.1:8545 TXGATE_LB_STATS="$work/haproxy.sock" \
TXGATE_1=127.0.0.1:18545 TXGATE_2=127.0.0.1:28545 TXGATE_3=127.0.0.1:38545 \
TXGATE_1_ADMIN=19545 TXGATE_2_ADMIN=29545 TXGATE_3_ADMIN=39545 \
  haproxy -c -q -f deploy/haproxy/haproxy.cfg
echo "deploy/haproxy/haproxy.cfg: valid"

(cd deploy/kubernetes/check && go run . -dir .. -toml "$work/txgate.toml")
# The snapshot folder is the pod's emptyDir; here, a temporary one.
mkdir -p "$work/state"
sed -i "s#/var/lib/txgate#$work/state#" "$work/txgate.toml"
cargo build --locked -q -p txgate
target/debug/txgate check-config --config "$work/txgate.toml" >/dev/null
echo "deploy/kubernetes/configmap.yaml: txgate.toml accepted by txgate check-config"
