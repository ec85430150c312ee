#!/usr/bin/env python3
"""Prints the screening bench as a table of ratios.

Reads criterion's medians from target/criterion after
`cargo bench -p txgate-benches --bench screen` and divides each decision by
the libsecp256k1 recovery measured in the same group (same run, next to it
in time), then shows how each ratio grows from 10k to 1M denied
fingerprints. Exits 1 if a target is missed.

`--plots DIR` also writes DIR/screen_cost.png (benches/report/
screen_plots.py: cost vs denied-set size, with the targets) when matplotlib
is there (scripts/install-plot-tools.sh); the table and the exit code are
the same with or without it.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2] / "target" / "criterion"
SIZES = ["10k", "100k", "1M"]
# bench name -> (label, target ratio to one recovery, or None for an absolute ms bound)
ROWS = [
    ("full_new_tx_uncached_sender", "full decision, new tx, uncached sender", 1.15),
    ("refuse_recent_failure", "refusal of a recently failed tx hash", 0.03),
    ("refuse_denied_fingerprint_cached_sender", "refusal of a denied fingerprint, cached sender", 0.06),
    ("observe_new_fingerprint", "new fingerprint, bloom miss, observe only", 0.03),
]


def median_ns(group: str, bench: str) -> float:
    path = ROOT / group / bench / "new" / "estimates.json"
    return json.loads(path.read_text())["median"]["point_estimate"]


# The same decisions as a running txgate makes them: through the proxy's
# tower stack with a histogram observed per stage.
TIMED_ROWS = [(f"timed_{bench}", label, target) for bench, label, target in ROWS[:3]]


def timed_table() -> bool:
    """The first three decisions with per-stage histograms on, against the
    same targets; True when every target is met."""
    ok = True
    print()
    print("With per-stage histograms on (the proxy's tower stack, every step timed):")
    print()
    print("| decision | target | " + " | ".join(SIZES) + " | timed / pure at 1M |")
    print("|---|---|" + "---|" * len(SIZES) + "---|")
    for (bench, label, target), (pure_bench, _, _) in zip(TIMED_ROWS, ROWS):
        base = {s: median_ns(f"screen_{s}", "libsecp256k1_recover") for s in SIZES}
        ratios = [median_ns(f"screen_{s}", bench) / base[s] for s in SIZES]
        ok &= all(r <= target for r in ratios)
        cells = " | ".join(f"{r:.3f}× ({median_ns(f'screen_{s}', bench) / 1000:.2f} µs)"
                           for r, s in zip(ratios, SIZES))
        over = median_ns("screen_1M", bench) / median_ns("screen_1M", pure_bench)
        print(f"| {label} | ≤ {target}× | {cells} | {over:.2f}× |")
    return ok


def main() -> int:
    ok = True
    base = {s: median_ns(f"screen_{s}", "libsecp256k1_recover") for s in SIZES}
    same = {s: median_ns(f"screen_{s}", "libsecp256k1_recover_same_tx") for s in SIZES}
    k256 = median_ns("screen_baseline", "alloy_k256_recover")
    unit = median_ns("screen_baseline", "libsecp256k1_recover")
    print(f"unit: libsecp256k1 recovery over the distinct txs of each group "
          f"{', '.join(f'{base[s] / 1000:.1f}' for s in SIZES)} µs (medians; 10k, 100k, 1M); "
          f"of one repeated tx {', '.join(f'{same[s] / 1000:.1f}' for s in SIZES)} µs; "
          f"alloy k256 recovery {k256 / unit:.2f}× libsecp256k1 (one repeated tx, baseline group)")
    print()
    print("| decision | target | " + " | ".join(SIZES) + " | 1M / 10k |")
    print("|---|---|" + "---|" * len(SIZES) + "---|")
    for bench, label, target in ROWS:
        ratios = [median_ns(f"screen_{s}", bench) / base[s] for s in SIZES]
        growth = ratios[-1] / ratios[0]
        ok &= all(r <= target for r in ratios) and growth <= 1.5
        cells = " | ".join(f"{r:.3f}× ({median_ns(f'screen_{s}', bench) / 1000:.2f} µs)"
                           for r, s in zip(ratios, SIZES))
        print(f"| {label} | ≤ {target}× | {cells} | {growth:.2f} |")
    full_same = [median_ns(f"screen_{s}", "full_new_tx_uncached_sender") / same[s] for s in SIZES]
    print(f"| (full decision against one repeated tx's recovery) | | "
          + " | ".join(f"{r:.3f}×" for r in full_same) + " | |")
    applies = [median_ns(f"screen_{s}", "apply_1000_invalidations") / 1e6 for s in SIZES]
    growth = applies[-1] / applies[0]
    ok &= all(a <= 2.0 for a in applies) and growth <= 1.5
    print(f"| apply 1000 invalidations | ≤ 2 ms | "
          + " | ".join(f"{a:.2f} ms" for a in applies) + f" | {growth:.2f} |")
    ok &= timed_table()
    stack = median_ns("screen_tower", "stack_cached_sender_clean")
    pure = median_ns("screen_tower", "pure_cached_sender_clean")
    timed = median_ns("screen_tower", "stack_cached_sender_clean_timed")
    print()
    print(f"tower stack vs the same stages called in a row (clean call, cached sender): "
          f"{stack / 1000:.2f} µs vs {pure / 1000:.2f} µs ({stack / pure:.2f}×); "
          f"with per-stage histograms {timed / 1000:.2f} µs ({timed / stack:.2f}× the stack without)")
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


def plots(out_dir: str) -> None:
    """--plots DIR: the picture of the table, drawn by screen_plots.py with
    an interpreter that has matplotlib (this one, or .venv-plots/'s). Never
    changes the exit code."""
    import subprocess
    here = pathlib.Path(__file__).resolve().parent
    python = sys.executable
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        venv = here.parents[1] / ".venv-plots" / "bin" / "python"
        if not venv.exists():
            print("no plots: matplotlib is not installed; run scripts/install-plot-tools.sh",
                  file=sys.stderr)
            return
        python = str(venv)
    sys.stdout.flush()
    subprocess.run([python, str(here / "screen_plots.py"), "--out", out_dir,
                    "--criterion", str(ROOT)], check=False)


if __name__ == "__main__":
    plots_dir = None
    if "--plots" in sys.argv[1:]:
        at = sys.argv.index("--plots")
        plots_dir = sys.argv[at + 1] if at + 1 < len(sys.argv) else "target/bench-report"
    code = main()
    if plots_dir:
        plots(plots_dir)
    sys.exit(code)
