#!/usr/bin/env bash
# The main job: txgate in front of a local anvil, with real traffic through
# it. Installs what it needs, starts everything on free loopback ports,
# prints each step, and stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-foundry.sh >/dev/null
echo "==> building txgate (release)"
cargo build --release --locked -q -p txgate

ANVIL=.tools/bin/anvil
CAST=.tools/bin/cast
TXGATE=target/release/txgate
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_rpc() {
  for _ in $(seq 1 100); do
    curl -sf -H 'content-type: application/json' -d '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}' "$1" >/dev/null && return 0
    sleep 0.1
  done
  echo "$1 did not come up" >&2; exit 1
}
rpc() { curl -s -w '  [HTTP %{http_code}]\n' -H 'content-type: application/json' -d "$2" "$1"; }

anvil_port=$(free_port); tx_port=$(free_port); admin_port=$(free_port)
NODE=http://127.0.0.1:$anvil_port
PROXY=http://127.0.0.1:$tx_port
ADMIN=http://127.0.0.1:$admin_port

echo "==> starting anvil on $NODE"
$ANVIL --host 127.0.0.1 --port "$anvil_port" --silent & pids+=($!)
wait_rpc "$NODE"

echo "==> starting txgate on $PROXY (admin $ADMIN) in front of anvil"
$TXGATE --listen "127.0.0.1:$tx_port" --admin-listen "127.0.0.1:$admin_port" --upstream "$NODE" \
  --log-level warn & pids+=($!)
wait_rpc "$PROXY"

KEY0=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80
TO=0x70997970C51812dc3A010C7d01b50e0d17dc79C8

echo
echo "==> 1. a signed transfer of 1 ETH sent through txgate with cast (eth_sendRawTransaction)"
echo "    balance before: $($CAST balance $TO --rpc-url "$PROXY" --ether) ETH"
$CAST send --rpc-url "$PROXY" --private-key $KEY0 $TO --value 1ether --json \
  | python3 -c 'import json,sys; r=json.load(sys.stdin); print("    tx", r["transactionHash"], "status", r["status"], "block", int(r["blockNumber"],16))'
echo "    balance after:  $($CAST balance $TO --rpc-url "$PROXY" --ether) ETH"

echo
echo "==> 2. a batch with mixed ids comes back in order, with the caller's ids"
rpc "$PROXY" '[{"jsonrpc":"2.0","id":"a","method":"eth_chainId"},{"jsonrpc":"2.0","id":7,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":null,"method":"net_version"}]'

echo
echo "==> 3. refusals: a denied method, invalid JSON, a wrong content type"
rpc "$PROXY" '{"jsonrpc":"2.0","id":1,"method":"admin_nodeInfo","params":[]}'
rpc "$PROXY" '{"jsonrpc":"2.0","id":1,'
curl -s -w '  [HTTP %{http_code}]\n' -H 'content-type: text/plain' -d '{}' "$PROXY"

echo
echo "==> 4. screening of raw transactions: malformed ones never reach the node"
echo "    bad hex:"
rpc "$PROXY" '{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0xzz"]}'
echo "    bad RLP:"
rpc "$PROXY" '{"jsonrpc":"2.0","id":2,"method":"eth_sendRawTransaction","params":["0x02c0"]}'
echo "    a signed transfer with one byte too many:"
raw=$($CAST mktx --rpc-url "$PROXY" --private-key $KEY0 $TO --value 1gwei)
rpc "$PROXY" "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"eth_sendRawTransaction\",\"params\":[\"${raw}00\"]}"
echo "    the same transfer as signed: screened (sender recovered, fingerprint checked) and forwarded:"
rpc "$PROXY" "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"eth_sendRawTransaction\",\"params\":[\"${raw}\"]}"

echo
echo "==> 5. readiness and the counters from $ADMIN/metrics"
curl -s "$ADMIN/readyz"
curl -s "$ADMIN/metrics" | grep -E '^txgate_(rpc_calls_total|http_responses_total|upstream_up|screen_decisions_total|screen_sender_cache_total)' | grep -v ' 0$'

echo
echo "==> stopping txgate with SIGTERM (drains, exits 0)"
kill -TERM "${pids[1]}"; wait "${pids[1]}"; echo "    txgate exited with $?"
