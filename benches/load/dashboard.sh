#!/usr/bin/env bash
# The dashboard's picture (docs/dashboard.png, shown in docs/operations.md): starts
# anvil (a block per second), the example sidecar, txgate (release) and a
# real Prometheus (Debian's package: scrapes every second, loads
# deploy/prometheus/txgate-rules.yml) on free loopback ports, plays the
# attack bench's story against them at small settings (honest alone, then
# under attack, then invalidation probes; benches/src/bin/attack/main.rs), then
# renders a selection of deploy/grafana/txgate.json's panels from
# Prometheus's query_range (benches/report/dashboard_png.py). Stops what it
# started, by pid; bounded in time; loopback only.
#
#   benches/load/dashboard.sh [--seconds N] [--out FILE] [ATTACK TOOL FLAGS...]
#
# --seconds: length of each honest phase (default 15); --out: the PNG
# (default docs/dashboard.png). Other flags go to the attack tool (defaults
# here: --rate 100 --attackers 200 --connections 8 --probes 10). The
# queried series are kept in target/bench-report/dashboard-data.json and
# the attack tool's result in target/bench-report/dashboard-attack.json.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=15
out=docs/dashboard.png
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2;;
    --out) out=$2; shift 2;;
    *) extra+=("$1"); shift;;
  esac
done

command -v prometheus >/dev/null && command -v promtool >/dev/null || {
  echo "dashboard.sh needs prometheus and promtool (Debian package prometheus:" \
    "scripts/install-test-tools.sh)" >&2
  exit 1
}
./scripts/install-foundry.sh >/dev/null
./scripts/install-plot-tools.sh
cargo build --release --locked -q -p txgate -p example-sidecar -p txgate-benches

ANVIL=.tools/bin/anvil
TXGATE=target/release/txgate
SIDECAR=target/release/example-sidecar
ATTACK=target/release/attack
PY=.venv-plots/bin/python
report=target/bench-report
mkdir -p "$report"
work=$(mktemp -d)
pids=()
cleanup() {
  # Stop what this script started, by pid: TERM, then KILL after 10 s.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {
  for _ in $(seq 1 400); do
    curl -sf -o /dev/null --max-time 2 "$@" && return 0
    sleep 0.05
  done
  echo "$* did not come up" >&2; exit 1
}

anvil_port=$(free_port); tx_port=$(free_port); admin_port=$(free_port)
grpc_port=$(free_port); sidecar_admin_port=$(free_port); prom_port=$(free_port)
NODE=http://127.0.0.1:$anvil_port
PROXY=http://127.0.0.1:$tx_port
ADMIN=http://127.0.0.1:$admin_port
SIDECAR_ADMIN=http://127.0.0.1:$sidecar_admin_port
PROM=http://127.0.0.1:$prom_port

echo "==> anvil on $NODE (a block per second)"
$ANVIL --host 127.0.0.1 --port "$anvil_port" --silent --block-time 1 \
  --gas-limit 3000000000 --order fifo & pids+=($!)
wait_http -H 'content-type: application/json' -d '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}' "$NODE"

echo "==> example sidecar: gRPC 127.0.0.1:$grpc_port, admin $SIDECAR_ADMIN"
RUST_LOG=warn $SIDECAR --listen "127.0.0.1:$grpc_port" --admin-listen "127.0.0.1:$sidecar_admin_port" \
  --node "$NODE" --config config/example-sidecar.toml 2>/dev/null & pids+=($!)
wait_http "$SIDECAR_ADMIN/healthz"

echo "==> txgate on $PROXY (admin $ADMIN)"
$TXGATE --listen "127.0.0.1:$tx_port" --admin-listen "127.0.0.1:$admin_port" \
  --upstream "$NODE" --sidecar "http://127.0.0.1:$grpc_port" --max-in-flight 4096 \
  --log-level warn 2>/dev/null & pids+=($!)
wait_http "$ADMIN/healthz"

cat > "$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/deploy/prometheus/txgate-rules.yml
scrape_configs:
  - job_name: txgate
    static_configs:
      - targets: ['127.0.0.1:$admin_port']
  - job_name: example-sidecar
    static_configs:
      - targets: ['127.0.0.1:$sidecar_admin_port']
YAML
promtool check config "$work/prometheus.yml" >/dev/null
echo "==> prometheus on $PROM (scrapes every 1 s, txgate's rules loaded)"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >/dev/null 2>&1 & pids+=($!)
wait_http "$PROM/-/ready"
# Both targets up, then history enough for every rate window the panels
# use (a window with less history than its length reads low).
for _ in $(seq 1 100); do
  curl -s "$PROM/api/v1/query?query=sum(up)" | grep -q ',"2"\]' && break
  sleep 0.1
done
sleep 8
start=$(( $(date +%s) - 3 ))

echo "==> the attack story: $seconds s honest alone, $seconds s under attack, then probes"
# Bounded: the tool's own phases take about 2 × seconds + 10 s.
timeout --signal=TERM --kill-after=10 $((2 * seconds + 120)) \
  "$ATTACK" --node "$NODE" --txgate "$PROXY" --txgate-admin "$ADMIN" --sidecar-admin "$SIDECAR_ADMIN" \
  --seconds "$seconds" --rate 100 --attackers 200 --connections 8 --probes 10 \
  --json "$report/dashboard-attack.json" "${extra[@]}" > "$work/attack.out"
# The last scrapes and rule evaluations after the story.
sleep 5
end=$(date +%s)

echo "==> rendering $out from $PROM (query_range $((end - start)) s, step 1 s)"
"$PY" benches/report/dashboard_png.py --prometheus "$PROM" --start "$start" --end "$end" --step 1 \
  --phases "$report/dashboard-attack.json" --save-data "$report/dashboard-data.json" --out "$out"
