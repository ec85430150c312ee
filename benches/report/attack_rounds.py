#!/usr/bin/env python3
"""Medians over rounds of the attack benchmark's JSON summaries.

Reads DIR/<setting>-r<N>.json (benches/load/attack_rounds.sh writes them)
and prints one Markdown row per setting: honest success and latency
without and with the attack, the p99 ratio, the attack's share refused and
the share that reached the upstream, the ShouldForward questions, and
txgate's CPU per call while under attack (from /proc). Each
figure is the median over the rounds (the rounds' values in brackets for
the shares that the targets are about), except "pooled p99 ratio": the p99
of every round's honest calls under attack over the p99 of every round's
honest calls alone (8 s at 200 calls/s is 1600 calls a phase, so a round's
p99 rests on its 16 slowest calls; pooled, five rounds give 80), and the
txgate cores, CPU time over the attack phase's wall time.
"""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main() -> None:
    directory = Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-report/attack-rounds")
    runs = defaultdict(list)
    order = []
    for path in sorted(directory.glob("*-r*.json")):
        setting = path.name.rsplit("-r", 1)[0]
        if setting not in order:
            order.append(setting)
        runs[setting].append(json.loads(path.read_text()))

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else float("nan")

    def p99(values):
        values = sorted(values)
        return values[min(len(values) - 1, int(0.99 * len(values)))] if values else float("nan")

    def pooled_ratio(rs):
        try:
            alone = [x for r in rs for x in r["series"]["honest"]["baseline"]["latency_ms"]]
            attack = [x for r in rs for x in r["series"]["honest"]["under_attack"]["latency_ms"]]
        except (KeyError, TypeError):
            return "n/a"
        return f"{p99(attack) / p99(alone):.2f}×"

    print(
        "| setting | rounds | honest ok | p50 alone | p99 alone | p50 attack | p99 attack "
        "| p99 ratio | pooled p99 ratio | attack/s | reached upstream "
        "| asked: forward / deny / timeout / saturated "
        "| txgate CPU per call under attack | txgate cores under attack |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for setting in order:
        rs = runs[setting]
        ok = sum(r["baseline"]["ok"] + r["under_attack"]["ok"] for r in rs)
        sent = ok + sum(r["baseline"]["failed"] + r["under_attack"]["failed"] for r in rs)
        reached = [r["attack"]["reached_upstream_share"] * 100 for r in rs]
        probes = [r.get("should_forward_probes", {}) for r in rs]

        def probe(key):
            return med([p.get(key, 0) for p in probes])

        cpu = [
            r["txgate_cpu_under_attack"]["us_per_call"]
            for r in rs
            if r.get("txgate_cpu_under_attack", {}).get("us_per_call") is not None
        ]
        cpu_cell = f"{med(cpu):.1f} µs ({', '.join(f'{v:.1f}' for v in cpu)})" if cpu else "n/a"
        cores = [
            r["txgate_cpu_under_attack"]["cores"]
            for r in rs
            if r.get("txgate_cpu_under_attack", {}).get("cores") is not None
        ]
        cores_cell = f"{med(cores):.2f}" if cores else "n/a"

        print(
            f"| {setting} | {len(rs)} | {ok}/{sent} "
            f"| {med([r['baseline']['p50_ms'] for r in rs]):.2f} ms "
            f"| {med([r['baseline']['p99_ms'] for r in rs]):.2f} ms "
            f"| {med([r['under_attack']['p50_ms'] for r in rs]):.2f} ms "
            f"| {med([r['under_attack']['p99_ms'] for r in rs]):.2f} ms "
            f"| {med([r['p99_ratio'] for r in rs]):.2f}× "
            f"| {pooled_ratio(rs)} "
            f"| {med([r['attack']['per_second'] for r in rs]) / 1000:.1f}k "
            f"| {med(reached):.3f}% ({', '.join(f'{v:.3f}' for v in reached)}) "
            f"| {probe('forward'):.0f} / {probe('deny'):.0f} / {probe('timeout'):.0f} "
            f"/ {probe('saturated'):.0f} | {cpu_cell} | {cores_cell} |"
        )


if __name__ == "__main__":
    main()
