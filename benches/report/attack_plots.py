#!/usr/bin/env python3
"""Plots of the attack bench (benches/src/bin/attack/main.rs) from its --json file.

    .venv-plots/bin/python benches/report/attack_plots.py RESULT.json [--out DIR]

Writes into DIR (default target/bench-report/):
- attack_honest_latency.png: every honest call's latency over time, alone
  and under attack (two panels, one scale), with its p50 and p99 per second;
- attack_refusals.png: txgate's screening decisions per second by reason
  over the whole run (from txgate_screen_decisions_total, sampled by the
  tool), and the refused share;
- attack_propagation.png: invalidation injected at the sidecar → first
  refusal by txgate, over the probes (histogram and CDF, with the target).

Needs matplotlib (scripts/install-plot-tools.sh puts it in .venv-plots/).
"""
import argparse
import json
import math
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "target" / "bench-report"

# Targets from PERFORMANCE.md (the attack section).
HONEST_P99_TARGET_MS = 2.0
PROPAGATION_TARGET_MS = 100.0

PHASES = [
    # key in series.phases, label, colour
    ("baseline", "honest alone", "#4c72b0"),
    ("attackers", "attack", "#c44e52"),
    ("propagation", "probes", "#8172b2"),
]

# A stable colour per reason, so that every figure and run reads the same.
REASON_COLOURS = {
    "denied_fingerprint": "#c44e52",
    "assertion_cooldown": "#dd8452",
    "recent_failure": "#8c564b",
    "sender_backoff": "#e377c2",
    "suspect_pending": "#bcbd22",
    "invalid_transaction": "#7f7f7f",
    "wrong_chain_id": "#17becf",
    "invalid_signature": "#9467bd",
    "clean": "#55a868",
    "suspect": "#8dd3c7",
    "contract_creation": "#1f77b4",
}


def ms_formatter():
    def fmt(v, _pos):
        if v >= 1000:
            return f"{v / 1000:g} s"
        if v >= 1:
            return f"{v:g} ms"
        return f"{v * 1000:g} µs"
    return FuncFormatter(fmt)


def percentile(sorted_values, p):
    """As the tool computes it: the nearest rank, halves rounded up."""
    if not sorted_values:
        return math.nan
    return sorted_values[math.floor((len(sorted_values) - 1) * p + 0.5)]


def shade_phases(ax, phases, offset=0.0, labels=True):
    """Shades the run's phases on a time axis in seconds since the origin
    (minus `offset`)."""
    for key, label, colour in PHASES:
        span = phases.get(key)
        if not span:
            continue
        ax.axvspan(span[0] - offset, span[1] - offset, color=colour, alpha=0.08, lw=0)
        if labels:
            ax.text((span[0] + span[1]) / 2 - offset, 1.0, label, transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=8, color=colour)


def honest_latency(data, out):
    series = data["series"]
    phases = [("baseline", "honest client alone (baseline)", data.get("baseline", {})),
              ("under_attack", "honest client under attack", data.get("under_attack", {}))]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    everything = [ms for key, _, _ in phases for ms in series["honest"][key]["latency_ms"] if ms]
    top = max(everything, default=10.0) * 1.6
    for ax, (key, title, summary) in zip(axes, phases):
        h = series["honest"][key]
        sent, lat = h["sent_s"], h["latency_ms"]
        start = sent[0] if sent else 0.0
        ok_t = [t - start for t, ms in zip(sent, lat) if ms is not None]
        ok_ms = [ms for ms in lat if ms is not None]
        bad_t = [t - start for t, ms in zip(sent, lat) if ms is None]
        ax.scatter(ok_t, ok_ms, s=4, alpha=0.35, color="#4c72b0", lw=0, label="one call")
        if bad_t:
            ax.scatter(bad_t, [top / 1.3] * len(bad_t), marker="x", s=18, color="#c44e52",
                       label=f"failed ({len(bad_t)})")
        # p50 and p99 over each second.
        buckets = {}
        for t, ms in zip(ok_t, ok_ms):
            buckets.setdefault(int(t), []).append(ms)
        secs = sorted(buckets)
        for p, style, name in [(0.5, "-", "p50"), (0.99, "--", "p99")]:
            ys = [percentile(sorted(buckets[s]), p) for s in secs]
            ax.step([s + 1 for s in secs], ys, where="pre", ls=style, color="#222222", lw=1.2,
                    label=f"{name} per second")
        ax.axhline(HONEST_P99_TARGET_MS, color="#55a868", ls=":", lw=1.2,
                   label=f"p99 target {HONEST_P99_TARGET_MS:g} ms")
        ax.set_yscale("log")
        ax.set_ylim(top=top)
        ax.yaxis.set_major_formatter(ms_formatter())
        ax.set_xlabel("time since the phase started (s)")
        p50, p99 = summary.get("p50_ms"), summary.get("p99_ms")
        stats = ""
        if p50 is not None and p99 is not None:
            stats = f"\np50 {p50:.2f} ms, p99 {p99:.1f} ms, success {summary.get('success', 0) * 100:.1f}%"
        ax.set_title(title + stats, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("eth_sendRawTransaction round trip through txgate")
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label.split(" (")[0], (handle, label))
    fig.legend([h for h, _ in handles.values()], [lbl for _, lbl in handles.values()],
               loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
               markerscale=2)
    fig.suptitle(f"Honest latency, {data.get('rate', '?')} tx/s, without and with "
                 f"{data.get('attackers', '?')} attacker EOAs", fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path = out / "attack_honest_latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def rates(t, counter):
    """Per-second rates between consecutive samples of a counter (a reset
    counts from zero)."""
    xs, ys = [], []
    for i in range(1, len(t)):
        dt = t[i] - t[i - 1]
        if dt <= 0:
            continue
        d = counter[i] - counter[i - 1]
        if d < 0:
            d = counter[i]
        xs.append((t[i] + t[i - 1]) / 2)
        ys.append(d / dt)
    return xs, ys


def refusals(data, out):
    series = data["series"]
    d = series["decisions"]
    t, counters = d["t_s"], d["counters"]
    fig, (ax, share_ax) = plt.subplots(2, 1, figsize=(13, 7), sharex=True,
                                       gridspec_kw={"height_ratios": [2.2, 1]})
    total = [0.0] * len(t)
    refused_total = [0.0] * len(t)
    forwarded_total = [0.0] * len(t)
    drawn = 0
    for key in sorted(counters, key=lambda k: (not k.startswith("refused"), k)):
        values = counters[key]
        decision, _, reason = key.partition(":")
        for i, v in enumerate(values):
            total[i] += v
            if decision in ("refused", "would_refuse"):
                refused_total[i] += v
            elif decision == "forwarded":
                forwarded_total[i] += v
        if decision == "forwarded" or not values or values[-1] == values[0]:
            continue
        xs, ys = rates(t, values)
        ys = [y if y > 0 else math.nan for y in ys]
        colour = REASON_COLOURS.get(reason)
        # A dash pattern per line: reasons at the same rate (the attack
        # alternates replays and fresh calls) stay visible on each other.
        dashes = [(None, None), (5, 3), (1.5, 2), (6, 2, 1.5, 2)][drawn % 4]
        line, = ax.plot(xs, ys, lw=1.8, color=colour, label=f"{decision}: {reason}")
        if dashes[0] is not None:
            line.set_dashes(dashes)
        # A burst within one sample interval has no neighbour to draw a
        # line to: a dot shows it.
        alone = [i for i, y in enumerate(ys) if not math.isnan(y)
                 and (i == 0 or math.isnan(ys[i - 1]))
                 and (i == len(ys) - 1 or math.isnan(ys[i + 1]))]
        ax.scatter([xs[i] for i in alone], [ys[i] for i in alone], s=14,
                   color=line.get_color(), zorder=3)
        drawn += 1
    xs, ys = rates(t, forwarded_total)
    ax.plot(xs, [y if y > 0 else math.nan for y in ys], lw=1.2, color="#55a868",
            label="forwarded (all reasons)")
    if drawn or any(y > 0 for y in ys):
        ax.set_yscale("log")
    ax.set_ylabel("decisions per second")
    ax.legend(loc="upper left", fontsize=8, ncol=2, framealpha=0.9)
    ax.grid(True, which="major", alpha=0.3)
    shade_phases(ax, series["phases"])
    ax.set_title(f"Screening decisions by reason (txgate_screen_decisions_total, "
                 f"sampled every {d.get('sample_ms', '?')} ms)", fontsize=11, pad=14)

    xs, tot = rates(t, total)
    _, ref = rates(t, refused_total)
    share = [r / n * 100 if n > 0 else math.nan for r, n in zip(ref, tot)]
    share_ax.plot(xs, share, color="#c44e52", lw=1.4)
    share_ax.set_ylim(-2, 102)
    share_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}%"))
    share_ax.set_ylabel("refused share")
    share_ax.set_xlabel("time since the honest baseline started (s)")
    share_ax.grid(True, alpha=0.3)
    shade_phases(share_ax, series["phases"], labels=False)
    fig.tight_layout()
    path = out / "attack_refusals.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def propagation(data, out):
    probes = data["series"].get("probes", [])
    values = sorted(p["ms"] for p in probes if p.get("ms") is not None)
    missed = sum(1 for p in probes if p.get("ms") is None)
    fig, (hist_ax, cdf_ax) = plt.subplots(1, 2, figsize=(12, 4.2))
    if values:
        lo, hi = max(min(values) / 1.5, 0.05), max(max(values) * 1.5, PROPAGATION_TARGET_MS * 1.5)
        n_bins = max(8, min(40, len(values)))
        edges = [lo * (hi / lo) ** (i / n_bins) for i in range(n_bins + 1)]
        hist_ax.hist(values, bins=edges, color="#4c72b0", edgecolor="white")
        hist_ax.set_xscale("log")
        cdf_ax.step(values, [(i + 1) / len(probes) * 100 for i in range(len(values))],
                    where="post", color="#4c72b0", lw=1.6)
        cdf_ax.set_xscale("log")
        cdf_ax.set_xlim(lo, hi)
        p50 = percentile(values, 0.5)
        for ax in (hist_ax, cdf_ax):
            ax.axvline(PROPAGATION_TARGET_MS, color="#55a868", ls=":", lw=1.4,
                       label=f"target {PROPAGATION_TARGET_MS:g} ms")
            ax.axvline(p50, color="#222222", ls="--", lw=1, label=f"median {p50:.1f} ms")
            ax.xaxis.set_major_formatter(ms_formatter())
            ax.grid(True, alpha=0.3)
            ax.set_xlabel("invalidation injected at the sidecar → first refusal by txgate")
        hist_ax.legend(fontsize=8)
    else:
        hist_ax.text(0.5, 0.5, "no probe was refused", ha="center", transform=hist_ax.transAxes)
    hist_ax.set_ylabel("probes")
    hist_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    cdf_ax.set_ylabel("probes refused by then")
    cdf_ax.set_ylim(0, 101)
    cdf_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}%"))
    note = f", {missed} never refused within 5 s" if missed else ""
    fig.suptitle(f"Invalidation to refusal over {len(probes)} probes{note}", fontsize=12)
    fig.tight_layout()
    path = out / "attack_propagation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", help="the attack tool's --json file")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="directory for the PNGs")
    args = ap.parse_args(argv)
    data = json.loads(pathlib.Path(args.json).read_text())
    if "series" not in data:
        print(f"{args.json} has no time series (written by an older attack tool?)", file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in (honest_latency(data, out), refusals(data, out), propagation(data, out)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
