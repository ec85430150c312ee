#!/usr/bin/env bash
# The main job: the whole screening loop on local components. Installs what
# it needs, starts a node (anvil, or with `--node geth` a geth dev node), the
# example sidecar and txgate on free loopback ports, deploys a protected
# contract (contracts/Guarded.sol), plays an attack and prints what happened
# at each step, then stops what it started.
#
#   scripts/demo.sh               # anvil (the default)
#   scripts/demo.sh --node geth   # geth v1.17.10 --dev (built by scripts/install-nodes.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

node_kind=anvil
while [ $# -gt 0 ]; do
  case "$1" in
    --node) [ $# -ge 2 ] || { echo "usage: $0 [--node anvil|geth]" >&2; exit 2; }
      node_kind="$2"; shift 2 ;;
    --node=*) node_kind="${1#--node=}"; shift ;;
    *) echo "usage: $0 [--node anvil|geth]" >&2; exit 2 ;;
  esac
done
case "$node_kind" in
  anvil|geth) ;;
  *) echo "--node: anvil or geth, not '$node_kind'" >&2; exit 2 ;;
esac

./scripts/install-foundry.sh >/dev/null
if [ "$node_kind" = geth ]; then
  echo "==> geth and op-geth (built once into .tools/)"
  ./scripts/install-nodes.sh >/dev/null
fi
echo "==> building txgate and the example sidecar (release)"
cargo build --release --locked -q -p txgate -p example-sidecar

ANVIL=.tools/bin/anvil
GETH=.tools/bin/geth
CAST=.tools/bin/cast
TXGATE=target/release/txgate
SIDECAR=target/release/example-sidecar
work=$(mktemp -d)
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  # A failed run shows the node's log before it goes with the scratch dir.
  if [ "$status" -ne 0 ]; then
    for log in "$work"/geth-init.log "$work"/geth.log; do
      [ -s "$log" ] && { echo "--- last lines of $(basename "$log"):" >&2; tail -n 20 "$log" >&2; }
    done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {
  for _ in $(seq 1 200); do
    curl -sf -o /dev/null "$@" && return 0
    sleep 0.05
  done
  echo "$* did not come up" >&2; exit 1
}
rpc() { curl -s -H 'content-type: application/json' -d "$2" "$1"; }
send() { curl -s -w ' [HTTP %{http_code}]' -H 'content-type: application/json' \
  -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_sendRawTransaction\",\"params\":[\"$2\"]}" "$1"; }
metric() { curl -s "$ADMIN/metrics" | awk -v s="$1" 'index($0, s" ") == 1 { print $2 }'; }
# A one-screen summary of a /metrics text: screening decisions by reason as
# a bar chart (bars scaled to the largest), what was forwarded and refused,
# what the invalidations did, the sidecar link. Pure awk.
summary() {
  awk '
    function label(line, name,   i, rest) {
      i = index(line, name "=\"")
      if (i == 0) return ""
      rest = substr(line, i + length(name) + 2)
      return substr(rest, 1, index(rest, "\"") - 1)
    }
    function bar(n, width,   s) { s = ""; for (; width > 0; width--) s = s "\342\226\210"; return s }
    /^txgate_screen_decisions_total\{/ && $NF > 0 {
      d = label($0, "decision"); r = label($0, "reason")
      key = d " " r; n[key] = $NF; order[++k] = key
      if (length(key) > w) w = length(key)
      if ($NF > max) max = $NF
      if (d == "forwarded") { fwd += $NF; fwd_parts = fwd_parts (fwd_parts ? ", " : "") r " " $NF }
      else refused += $NF
    }
    /^txgate_invalidations_total\{/ && $NF > 0 {
      inv = inv (inv ? ", " : "") label($0, "result") " " $NF
    }
    /^txgate_sidecar_up / { up = $NF }
    /^txgate_sidecar_invalidations_received_total / { received = $NF }
    /^txgate_sidecar_reconnects_total / { reconnects = $NF }
    END {
      for (i = 2; i <= k; i++)  # the largest first
        for (j = i; j > 1 && n[order[j]] > n[order[j - 1]]; j--) {
          t = order[j]; order[j] = order[j - 1]; order[j - 1] = t
        }
      print "    screening decisions by reason:"
      for (i = 1; i <= k; i++) {
        len = int(n[order[i]] * 40 / max + 0.5); if (len < 1) len = 1
        printf "      %-" w "s  %s %d\n", order[i], bar(n[order[i]], len), n[order[i]]
      }
      printf "    forwarded: %d (%s)\n", fwd, fwd_parts ? fwd_parts : "none"
      printf "    refused:   %d\n", refused
      printf "    invalidations applied: %s\n", inv ? inv : "none"
      printf "    sidecar link up: %s, invalidations received: %d, reconnects: %d\n", up == 1 ? "yes" : "no", received, reconnects
    }' "$1"
}

node_port=$(free_port); tx_port=$(free_port); admin_port=$(free_port)
grpc_port=$(free_port); sidecar_admin_port=$(free_port)
NODE=http://127.0.0.1:$node_port
PROXY=http://127.0.0.1:$tx_port
ADMIN=http://127.0.0.1:$admin_port

DEPLOYER=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80
HONEST=0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d
ATTACKER=0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a
# Step 4's fresh EOAs: 50 keys, each funded with 100 ether.
keys=(); addrs=()
for i in $(seq 1 50); do k=$(printf '0x%064x' $((i + 7000))); keys+=("$k"); addrs+=("$($CAST wallet address --private-key "$k")"); done

if [ "$node_kind" = geth ]; then
  echo "==> geth --dev on $NODE ($($GETH version | awk '/^Version:/ { print $2 }'))"
  # geth's own developer chain, with anvil's chain id and the demo's
  # accounts funded in its genesis (geth has no anvil_setBalance), on the
  # forks mainnet runs (--dev also turns on the fork in development).
  $GETH --dev dumpgenesis 2>/dev/null | python3 -c '
import json, sys
genesis = json.load(sys.stdin)
mainnet = ("shanghaiTime", "cancunTime", "pragueTime", "osakaTime")
config = genesis["config"]
for key in [k for k in config if k.endswith("Time") and k not in mainnet]:
    del config[key]
config["chainId"] = 31337
for key in sys.argv[1:4]:
    genesis["alloc"][key] = {"balance": "0x21e19e0c9bab2400000"}
for addr in sys.argv[4:]:
    genesis["alloc"][addr] = {"balance": "0x56bc75e2d63100000"}
json.dump(genesis, sys.stdout)
' "$($CAST wallet address --private-key $DEPLOYER)" "$($CAST wallet address --private-key $HONEST)" \
    "$($CAST wallet address --private-key $ATTACKER)" "${addrs[@]}" > "$work/genesis.json"
  $GETH init --datadir "$work/geth" "$work/genesis.json" 2>"$work/geth-init.log"
  # A block is sealed as soon as a transaction is pending (--dev.period 0).
  $GETH --dev --datadir "$work/geth" --ipcdisable --nodiscover --maxpeers 0 --networkid 31337 \
    --http --http.addr 127.0.0.1 --http.port "$node_port" --http.api eth,net,web3,txpool \
    --ws --ws.addr 127.0.0.1 --ws.port "$node_port" --ws.api eth,net,web3,txpool \
    2>"$work/geth.log" & pids+=($!)
else
  echo "==> anvil on $NODE"
  $ANVIL --host 127.0.0.1 --port "$node_port" --silent & pids+=($!)
fi
wait_http -H 'content-type: application/json' -d '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}' "$NODE"

echo "==> example sidecar: gRPC 127.0.0.1:$grpc_port, assertions from config/example-sidecar.toml"
RUST_LOG=warn $SIDECAR --listen "127.0.0.1:$grpc_port" --admin-listen "127.0.0.1:$sidecar_admin_port" \
  --node "$NODE" --config config/example-sidecar.toml & pids+=($!)
wait_http "http://127.0.0.1:$sidecar_admin_port/healthz"

cat > "$work/txgate.toml" <<TOML
[screen.backpressure]
# Small for the demo: three invalidations back a sender off.
tokens = 3
refill_per_sec = 0.05
TOML
echo "==> txgate on $PROXY (admin $ADMIN), subscribed to the sidecar"
$TXGATE --config "$work/txgate.toml" --listen "127.0.0.1:$tx_port" --admin-listen "127.0.0.1:$admin_port" \
  --upstream "$NODE" --sidecar "http://127.0.0.1:$grpc_port" --log-level warn & pids+=($!)
wait_http "$ADMIN/healthz"
for _ in $(seq 1 100); do curl -s "$ADMIN/readyz" | grep -q '"sidecar":"up"' && break; sleep 0.05; done
echo "    /readyz: $(curl -s "$ADMIN/readyz")"

# A receipt's field, asked again for up to 100 tries (5 s of pauses, more
# on a slow machine): a block is sealed at once
# on either node, but geth may answer "transaction indexing is in progress"
# for a moment after it.
receipt_field() {
  for _ in $(seq 1 100); do
    got=$(rpc "$NODE" "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_getTransactionReceipt\",\"params\":[\"$1\"]}" \
      | python3 -c 'import json,sys; r=json.load(sys.stdin).get("result"); print(r[sys.argv[1]] if r else "")' "$2")
    [ -n "$got" ] && { echo "$got"; return; }
    sleep 0.05
  done
  echo "pending"
}
status_of() { receipt_field "$1" status; }
hash_of() { python3 -c 'import json,sys; print(json.loads(sys.argv[1].rsplit(" [HTTP",1)[0]).get("result",""))' "$1"; }

echo
echo "==> 0. deploy the protected contract (contracts/Guarded.sol) through txgate"
out=$(send "$PROXY" "$($CAST mktx --rpc-url "$NODE" --private-key $DEPLOYER --create "$(cat contracts/Guarded.bin)")")
GUARDED=$(receipt_field "$(hash_of "$out")" contractAddress)
[[ "$GUARDED" == 0x* ]] || { echo "the deployment failed: $out" >&2; exit 1; }
echo "    Guarded at $GUARDED (a contract creation: screened, no fingerprint)"

mktx() { $CAST mktx --rpc-url "$NODE" --private-key "$1" "$GUARDED" "${@:2}"; }

echo
echo "==> 1. an honest call goes through: poke(1)"
out=$(send "$PROXY" "$(mktx $HONEST 'poke(uint256)' 1)"); echo "    $out"
echo "    receipt status: $(status_of "$(hash_of "$out")")"

echo
echo "==> 2. the attacker's call reverts on chain: poke(13); the sidecar sees it and invalidates it"
attack=$(mktx $ATTACKER 'poke(uint256)' 13 --gas-limit 100000)
start=$(date +%s%N)
out=$(send "$PROXY" "$attack"); echo "    $out"
echo "    receipt status: $(status_of "$(hash_of "$out")") (reverted)"
for _ in $(seq 1 200); do [ "$(metric 'txgate_invalidations_total{result="banned"}')" != "0" ] && break; sleep 0.01; done
echo "    txgate applied the invalidation $(( ($(date +%s%N) - start) / 1000000 )) ms after the attack was sent"

echo
echo "==> 3. the same raw transaction again: refused by hash, before any ECDSA"
echo "    $(send "$PROXY" "$attack")"

echo
echo "==> 4. the same calldata from 50 fresh EOAs (funded, fresh nonces): refused by fingerprint"
if [ "$node_kind" = anvil ]; then
  # (geth's genesis funded them.)
  python3 - "$NODE" "${addrs[@]}" <<'PY'
import json, sys, urllib.request
node, addrs = sys.argv[1], sys.argv[2:]
calls = [{"jsonrpc": "2.0", "id": i, "method": "anvil_setBalance", "params": [a, "0x56bc75e2d63100000"]} for i, a in enumerate(addrs)]
urllib.request.urlopen(urllib.request.Request(node, json.dumps(calls).encode(), {"content-type": "application/json"})).read()
PY
fi
refused=0; first=""
for k in "${keys[@]}"; do
  out=$(send "$PROXY" "$(mktx "$k" 'poke(uint256)' 13 --gas-limit 100000)")
  case "$out" in *denied_fingerprint*) refused=$((refused + 1)); [ -z "$first" ] && first=$out;; esac
done
echo "    refused $refused of 50; the first answer:"
echo "    $first"

echo
echo "==> 5. at an extreme tip, with the attacker's next nonce: refused all the same"
echo "    $(send "$PROXY" "$(mktx $ATTACKER 'poke(uint256)' 13 --gas-limit 100000 --priority-gas-price 500gwei --gas-price 600gwei)")"

echo
echo "==> 6. the attacker switches to sweep(), a forbidden selector, three times: each is invalidated"
echo "    and charged to the attacker, whose bucket (3 tokens in this demo) runs dry: backed off"
for salt in 1 2 3; do
  out=$(send "$PROXY" "$(mktx $ATTACKER 'sweep(uint256)' $salt)"); echo "    sweep($salt): $out"
done
for _ in $(seq 1 200); do [ "$(metric 'txgate_invalidations_total{result="sender_backoff"}')" != "0" ] && break; sleep 0.01; done
echo "    the attacker's next call, even an innocent deposit():"
curl -s -D - -o "$work/body" -H 'content-type: application/json' \
  -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_sendRawTransaction\",\"params\":[\"$(mktx $ATTACKER 'deposit()' --value 1wei)\"]}" \
  "$PROXY" | grep -iE '^(HTTP|retry-after)' | sed 's/^/    /'
echo "    $(cat "$work/body")"

echo
echo "==> 7. an honest user of the same contract is never refused"
out=$(send "$PROXY" "$(mktx $HONEST 'poke(uint256)' 2)"); echo "    poke(2):  $out"
out=$(send "$PROXY" "$(mktx $HONEST 'deposit()' --value 1gwei)"); echo "    deposit(): $out"

echo
echo "==> 8. what txgate counted, from $ADMIN/metrics"
curl -s "$ADMIN/metrics" > "$work/metrics"
summary "$work/metrics"

echo
echo "==> stopping txgate with SIGTERM (drains, exits 0), then the sidecar and $node_kind"
kill -TERM "${pids[2]}"; wait "${pids[2]}"; echo "    txgate exited with $?"
