#!/usr/bin/env bash
# The attack benchmark (see benches/src/bin/attack/main.rs): builds txgate, the
# example sidecar and the load tool (release), then runs it. Loopback only,
# bounded in time. Extra arguments go to the tool (--seconds, --rate,
# --attackers, --connections, --probes, --json FILE, --sample-ms,
# --upstream anvil|sink, --should-forward off|hot|all, --cold-start,
# --honest-call poke|transfer; see benches/src/bin/attack/main.rs). Several
# settings in interleaved rounds: benches/load/attack_rounds.sh.
#
# Then plots the run next to its JSON (benches/report/attack_plots.py, with
# the matplotlib of scripts/install-plot-tools.sh): PNGs of honest latency
# without and with the attack, decisions by reason over time, and
# invalidation-to-refusal times, in target/bench-report/ (or
# ATTACK_PLOTS_DIR). Without --json, the JSON goes there too (attack.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p example-sidecar -p txgate-benches

plots=${ATTACK_PLOTS_DIR:-target/bench-report}
json=""
prev=""
for arg in "$@"; do
  [ "$prev" = "--json" ] && json=$arg
  prev=$arg
done
args=("$@")
if [ -z "$json" ]; then
  mkdir -p "$plots"
  json=$plots/attack.json
  args+=(--json "$json")
fi

target/release/attack "${args[@]}"

if [ -x .venv-plots/bin/python ]; then
  echo "plots of this run (from $json):" >&2
  .venv-plots/bin/python benches/report/attack_plots.py "$json" --out "$plots" | sed 's/^/  /' >&2
else
  echo "no plots: run scripts/install-plot-tools.sh once (matplotlib in .venv-plots/)," \
    "then .venv-plots/bin/python benches/report/attack_plots.py $json" >&2
fi
