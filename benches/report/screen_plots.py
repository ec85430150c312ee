#!/usr/bin/env python3
"""The screening report's picture (see screen.py, which runs this with
`--plots DIR`): screening cost against the denied-set size (10k, 100k, 1M)
for each decision, as a ratio to one libsecp256k1 recovery measured in the
same group, with each decision's target; the `timed_*` rows (the same
decisions through the proxy's tower stack with per-stage histograms on)
when the run has them; and the cost of applying 1000 invalidations.

    .venv-plots/bin/python benches/report/screen_plots.py [--out DIR]

Reads criterion's medians as screen.py does (target/criterion, or
--criterion DIR). Needs matplotlib (scripts/install-plot-tools.sh).
"""
import argparse
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import screen  # noqa: E402

DEFAULT_OUT = pathlib.Path(__file__).resolve().parents[2] / "target" / "bench-report"
COLOURS = ["#4c72b0", "#c44e52", "#dd8452", "#55a868", "#8172b2", "#937860"]
X = {"10k": 1e4, "100k": 1e5, "1M": 1e6}
SIZE_NAME = {v: k for k, v in X.items()}
RATIO_TICKS = [0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 3]
APPLY_BOUND_MS = 2.0
# Short names for the target lines (the legend has screen.py's labels).
SHORT = {
    "full_new_tx_uncached_sender": "full decision",
    "refuse_recent_failure": "hash refusal",
    "refuse_denied_fingerprint_cached_sender": "fingerprint refusal",
    "observe_new_fingerprint": "observe",
}


def median_or_none(group, bench):
    try:
        return screen.median_ns(group, bench)
    except (OSError, KeyError, ValueError):
        return None


def series(bench):
    """(sizes, ratios, µs) of a bench over the sizes that have it and the
    unit."""
    xs, ratios, micros = [], [], []
    for s in screen.SIZES:
        unit = median_or_none(f"screen_{s}", "libsecp256k1_recover")
        value = median_or_none(f"screen_{s}", bench)
        if unit and value:
            xs.append(X[s])
            ratios.append(value / unit)
            micros.append(value / 1000)
    return xs, ratios, micros


def write(out):
    fig, (ax, apply_ax) = plt.subplots(1, 2, figsize=(14, 5.6),
                                       gridspec_kw={"width_ratios": [2.3, 1]})
    drawn = 0
    targets = {}
    for i, (bench, label, target) in enumerate(screen.ROWS):
        colour = COLOURS[i % len(COLOURS)]
        xs, ratios, micros = series(bench)
        txs, tratios, tmicros = series(f"timed_{bench}")
        # The absolute median at the largest size goes in the legend.
        if xs:
            ax.plot(xs, ratios, marker="o", color=colour, lw=1.8,
                    label=f"{label} ({micros[-1]:.2f} µs at {SIZE_NAME[xs[-1]]})")
            drawn += 1
        if txs:
            ax.plot(txs, tratios, marker="s", mfc="white", color=colour, lw=1.4, ls="--",
                    label=f"{label}, tower stack, per-stage histograms on "
                          f"({tmicros[-1]:.2f} µs at {SIZE_NAME[txs[-1]]})")
        if xs or txs:
            targets.setdefault(target, []).append((SHORT.get(bench, bench), colour))
    for target, whose in targets.items():
        colour = whose[0][1] if len(whose) == 1 else "#555555"
        ax.axhline(target, color=colour, ls=":", lw=1.2)
        ax.annotate(f"target ≤ {target}× ({', '.join(n for n, _ in whose)})",
                    (X[screen.SIZES[0]], target), xytext=(0, 3), textcoords="offset points",
                    fontsize=7, color=colour)
    if not drawn:
        print("screen_plots: no screening medians under "
              f"{screen.ROOT} (run `cargo bench -p txgate-benches --bench screen`)",
              file=sys.stderr)
        plt.close(fig)
        return None
    for a in (ax, apply_ax):
        a.set_xscale("log")
        a.xaxis.set_major_locator(FixedLocator(list(X.values())))
        a.xaxis.set_minor_locator(NullLocator())
        a.xaxis.set_major_formatter(FuncFormatter(
            lambda v, _p: {1e4: "10k", 1e5: "100k", 1e6: "1M"}.get(v, f"{v:g}")))
        a.set_xlim(6e3, 2.2e6)
        a.set_xlabel("denied fingerprints held (and as many recent failures)")
        a.grid(True, which="major", alpha=0.3)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(FixedLocator(RATIO_TICKS))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}×"))
    ax.set_ylabel("cost per call / one libsecp256k1 recovery (same group)")
    ax.set_title("Screening cost per call vs denied-set size (criterion medians)", fontsize=11)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8,
               frameon=False)

    xs, ms = [], []
    for s in screen.SIZES:
        v = median_or_none(f"screen_{s}", "apply_1000_invalidations")
        if v:
            xs.append(X[s])
            ms.append(v / 1e6)
    if xs:
        apply_ax.plot(xs, ms, marker="o", color="#4c72b0", lw=1.8)
        for x, m in zip(xs, ms):
            apply_ax.annotate(f"{m:.2f} ms", (x, m), xytext=(0, 6), textcoords="offset points",
                              ha="center", fontsize=7)
    apply_ax.axhline(APPLY_BOUND_MS, color="#4c72b0", ls=":", lw=1.2)
    apply_ax.annotate(f"bound ≤ {APPLY_BOUND_MS:g} ms", (X[screen.SIZES[0]], APPLY_BOUND_MS),
                      xytext=(0, 3), textcoords="offset points", fontsize=7, color="#4c72b0")
    apply_ax.set_ylim(0, max([APPLY_BOUND_MS] + ms) * 1.2)
    apply_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g} ms"))
    apply_ax.set_ylabel("one batch, at the set's bound")
    apply_ax.set_title("Applying 1000 invalidations", fontsize=11)
    rows = (len(ax.get_legend_handles_labels()[1]) + 1) // 2
    fig.tight_layout(rect=(0, 0.035 * rows + 0.01, 1, 1))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "screen_cost.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="directory for the PNG")
    ap.add_argument("--criterion", help="criterion's output (default target/criterion)")
    args = ap.parse_args(argv)
    if args.criterion:
        screen.ROOT = pathlib.Path(args.criterion)
    path = write(pathlib.Path(args.out))
    if path is None:
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
