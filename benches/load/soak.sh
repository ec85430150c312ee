#!/usr/bin/env bash
# The soak (see benches/src/bin/soak/main.rs): builds txgate, the example sidecar
# and the tool (release), runs it (30 minutes by default; --minutes M), and
# plots txgate's RSS and descriptors (benches/report/soak_plot.py, with the
# matplotlib of scripts/install-plot-tools.sh). Loopback only, bounded in
# time. Extra arguments go to the tool (--minutes, --rate, --attack-rate,
# --storm-every, --storm-size, --sample-secs, --json FILE).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p example-sidecar -p txgate-benches

out=${SOAK_DIR:-target/bench-report}
mkdir -p "$out"
json=$out/soak.json
prev=""
for arg in "$@"; do
  [ "$prev" = "--json" ] && json=$arg
  prev=$arg
done
status=0
target/release/soak --json "$json" "$@" || status=$?

if [ -x .venv-plots/bin/python ]; then
  .venv-plots/bin/python benches/report/soak_plot.py "$json" --out "${json%.json}.png"
else
  echo "no plot: run scripts/install-plot-tools.sh once, then" \
    ".venv-plots/bin/python benches/report/soak_plot.py $json" >&2
fi
exit "$status"
