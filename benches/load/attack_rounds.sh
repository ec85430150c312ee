#!/usr/bin/env bash
# Interleaved rounds of the attack benchmark (benches/src/bin/attack/main.rs):
# for each round, one run per setting, so that every setting sees the same
# machine; then the medians over rounds (benches/report/attack_rounds.py).
#
#   benches/load/attack_rounds.sh [ROUNDS] [SETTING...]
#
# A setting is UPSTREAM:SHOULD_FORWARD[:cold][:transfer][:bin=PATH], for example
# sink:hot, anvil:off, sink:hot:cold (the attacked call not judged before
# the attack), sink:hot:transfer (honest transfers to fresh addresses, a
# cold call, instead of pokes of the attacked contract). Default: 3 rounds
# of sink:off sink:hot sink:hot:transfer anvil:off anvil:hot. bin=PATH
# runs another build of txgate in that setting (a same-run comparison of
# two builds, e.g. sink:hot:transfer sink:hot:transfer:bin=/tmp/txgate-old). Extra tool flags go in ATTACK_ARGS (e.g. "--seconds 10").
# JSON per run and the table go to target/bench-report/attack-rounds/.
# Loopback only, bounded in time.
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/install-foundry.sh >/dev/null
cargo build --release --locked -q -p txgate -p example-sidecar -p txgate-benches

rounds=${1:-3}
shift || true
settings=("$@")
if [ ${#settings[@]} -eq 0 ]; then
  settings=(sink:off sink:hot sink:hot:transfer anvil:off anvil:hot)
fi
out=target/bench-report/attack-rounds
rm -rf "$out"
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for setting in "${settings[@]}"; do
    IFS=: read -r upstream probe extras <<<"$setting"
    flags=(--upstream "$upstream" --should-forward "$probe")
    case ":${extras:-}:" in *:cold:*) flags+=(--cold-start) ;; esac
    case ":${extras:-}:" in *:transfer:*) flags+=(--honest-call transfer) ;; esac
    bin=$(tr ':' '\n' <<<"${extras:-}" | sed -n 's/^bin=//p')
    echo "round $round: $setting" >&2
    # shellcheck disable=SC2086
    TXGATE_BIN=${bin:-target/release/txgate} \
      timeout 600 target/release/attack "${flags[@]}" ${ATTACK_ARGS:-} \
      --json "$out/${setting//\//_}-r$round.json" >/dev/null 2>"$out/${setting//\//_}-r$round.log" ||
      echo "round $round: $setting failed (see $out/${setting//\//_}-r$round.log); left out" >&2
  done
done
python3 benches/report/attack_rounds.py "$out" | tee "$out/table.md"
