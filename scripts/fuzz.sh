#!/usr/bin/env bash
# The fuzz campaign: builds every target of fuzz/ with cargo-fuzz
# (nightly, libFuzzer, AddressSanitizer), runs each for RUNS executions
# (default 10 000 000) or SECONDS seconds, whichever ends first, on a
# scratch copy of its checked-in corpus, and prints one line per target:
# executions, coverage (libFuzzer's cov: and ft:), corpus size, crashes.
# A crashing input is kept in fuzz/artifacts/<target>/; add it to
# fuzz/regressions/<target>/ once fixed, so CI replays it.
#
# Usage: scripts/fuzz.sh [--runs N] [--seconds S] [--jobs J] [target...]
# Local only: it reads nothing from the network once built.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=10000000
SECONDS_PER_TARGET=1800
JOBS=1
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --seconds) SECONDS_PER_TARGET="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
bash scripts/install-fuzz.sh
export PATH="$PWD/.tools/cargo-fuzz/bin:$PATH"
if [ ${#TARGETS[@]} -eq 0 ]; then
  mapfile -t TARGETS < <(cd fuzz && cargo +nightly fuzz list)
fi
(cd fuzz && cargo +nightly fuzz build -O "${TARGETS[@]:0:1}" >/dev/null 2>&1 || true)
(cd fuzz && cargo +nightly fuzz build -O)
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
printf '%-22s %12s %8s %8s %8s %8s %7s\n' target executions exec/s cov ft corpus crashes
for t in "${TARGETS[@]}"; do
  mkdir -p "$scratch/$t" "fuzz/artifacts/$t"
  cp -r "fuzz/corpus/$t/." "$scratch/$t/"
  log="$scratch/$t.log"
  started=$(date +%s)
  set +e
  (cd fuzz && cargo +nightly fuzz run -O "$t" "$scratch/$t" -- \
      -runs="$RUNS" -max_total_time="$SECONDS_PER_TARGET" -jobs="$JOBS" -workers="$JOBS" \
      -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$PWD/artifacts/$t/") >"$log" 2>&1
  status=$?
  set -e
  elapsed=$(( $(date +%s) - started ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s+=$2} END {print s+0}')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | awk '{print $2}')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | awk '{print $2}')
  corpus=$(find "$scratch/$t" -type f | wc -l)
  crashes=$(find "fuzz/artifacts/$t" -type f | wc -l)
  rate=$(( execs / (elapsed > 0 ? elapsed : 1) ))
  printf '%-22s %12s %8s %8s %8s %8s %7s\n' "$t" "$execs" "$rate" "${cov:-?}" "${ft:-?}" "$corpus" "$crashes"
  if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then
    echo "  $t exited $status without an artifact; last lines:" >&2
    tail -n 5 "$log" >&2
  fi
done
