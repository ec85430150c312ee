#!/usr/bin/env python3
"""Plot of the soak (benches/src/bin/soak/main.rs) from its --json file.

    .venv-plots/bin/python benches/report/soak_plot.py RESULT.json [--out FILE]

Writes one PNG (default target/bench-report/soak.png): txgate's resident
memory and open file descriptors every sample, the denied set's size, and
the honest calls that failed, over the run; the settling time, the two
windows whose median RSS the growth target compares (the first after the
settle and the last), and the bound (+5% of the first window's median)
are drawn in.

Needs matplotlib (scripts/install-plot-tools.sh puts it in .venv-plots/).
"""
import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("result")
    parser.add_argument("--out", default=str(ROOT / "target" / "bench-report" / "soak.png"))
    args = parser.parse_args()
    run = json.loads(pathlib.Path(args.result).read_text())
    summary, samples = run["summary"], run["samples"]
    minutes = [s["t_s"] / 60 for s in samples]
    rss = [s["rss_bytes"] / 2**20 for s in samples]
    fds = [s["fds"] for s in samples]
    other = [s.get("other_fds", s["fds"]) for s in samples]
    senders = [s.get("senders") for s in samples]
    denied = [s["denied"] if s["denied"] == s["denied"] else None for s in samples]
    failed = [s["honest_failed"] for s in samples]
    settle = summary["settle_s"] / 60
    fds_range = summary.get("other_fds_after_settle") or summary.get("fds_after_settle")

    # The windows of the trend and their medians, from the tool's summary.
    end = samples[-1]["t_s"]
    window = summary["rss_window_s"]
    first = summary["rss_median_first_window_mib"]
    last = summary["rss_median_last_window_mib"]
    trend = summary["rss_trend_growth"]

    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    top.plot(minutes, rss, color="tab:blue", label="txgate RSS (MiB)")
    allocated = [s.get("allocated_bytes") for s in samples]
    if any(a is not None and a == a for a in allocated):
        top.plot(minutes, [a / 2**20 if a is not None and a == a else None for a in allocated],
                 color="tab:cyan", label="allocated by txgate (jemalloc, MiB)")
    bound = first * 1.05
    top.axhline(bound, color="tab:red", linestyle="--", linewidth=1,
                label=f"+5% of the first window's median ({bound:.1f} MiB)")
    for lo, med in ((summary["settle_s"], first), (end - window, last)):
        top.hlines(med, lo / 60, (lo + window) / 60, color="black", linewidth=2)
    top.plot([], [], color="black", linewidth=2, label=f"window medians ({first:.1f}, {last:.1f} MiB)")
    top.axvline(settle, color="grey", linestyle=":", linewidth=1)
    top.set_ylabel("MiB")
    top.set_ylim(bottom=0)
    top.legend(loc="lower right")
    top.set_title(
        f"Soak, {summary['minutes']:.0f} min: RSS trend after {settle:.0f} min "
        f"{trend * 100:+.1f}% (peak over the {settle:.0f}-min sample "
        f"{summary['rss_growth_after_settle'] * 100:+.1f}%),\ndescriptors "
        f"{fds_range[0]}–{fds_range[1]}, "
        f"honest calls {summary['honest_ok']} ok / {summary['honest_failed']} failed"
    )
    middle.plot(minutes, fds, color="tab:green", label="open file descriptors")
    if any(o != f for o, f in zip(other, fds)):
        middle.plot(minutes, other, color="tab:olive", label="descriptors other than client connections")
    middle.axvline(settle, color="grey", linestyle=":", linewidth=1)
    middle.set_ylabel("descriptors")
    middle.set_ylim(bottom=0, top=max(fds) * 1.5 + 1)
    middle.legend(loc="lower right")
    bottom.plot(minutes, denied, color="tab:orange", label="denied set entries")
    if any(x is not None for x in senders):
        bottom.plot(minutes, senders, color="tab:purple", label="sender cache entries")
    bottom.set_ylabel("entries")
    bottom.set_xlabel("minutes")
    twin = bottom.twinx()
    twin.plot(minutes, failed, color="tab:red", label="honest calls failed (cumulative)")
    twin.set_ylabel("failed")
    twin.set_ylim(bottom=0, top=max(max(failed), 1) * 1.2)
    lines = bottom.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    bottom.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left")
    fig.tight_layout()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
