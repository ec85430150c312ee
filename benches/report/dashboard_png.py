#!/usr/bin/env python3
"""Renders a selection of the Grafana dashboard's panels (deploy/grafana/
txgate.json) from a real Prometheus's query_range, as one PNG grid: the
picture docs/operations.md shows (docs/dashboard.png; benches/load/dashboard.sh makes it
while the attack bench plays against a scraped txgate).

    .venv-plots/bin/python benches/report/dashboard_png.py \\
        --prometheus http://127.0.0.1:PORT --start UNIX --end UNIX \\
        [--step 1] [--phases attack.json] [--out docs/dashboard.png] \\
        [--save-data FILE]
    .venv-plots/bin/python benches/report/dashboard_png.py --from-data FILE

Each panel's queries are the dashboard's own, with `$instance` as `.+` and
`$__rate_interval` as 5s (`--rate-interval`: what Grafana itself picks for
a short range scraped every second, 4 scrapes; a longer window smears a
20-second attack over the next 15 s); titles are the panels' titles, the y
axes carry their units. Recording rules keep their own 5 min windows. `--phases` takes the attack tool's --json file and shades its
phases. `--save-data` keeps what was queried, `--from-data` renders it again
without a Prometheus. Needs matplotlib (scripts/install-plot-tools.sh).
"""
import argparse
import json
import math
import pathlib
import re
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "txgate.json"

# The panels that tell the story of an attack, in reading order.
PANELS = [
    "Responses by outcome",
    "Screening decisions by reason",
    "Paced refusals",
    "Screening latency p50 / p99",
    "Stage latency p99",
    "Upstream latency p50 / p99",
    "Sidecar link up, per source",
    "Invalidations received and applied",
    "Cache fill (entries / bound)",
]
RATE_INTERVAL = "5s"

PHASES = [
    ("baseline", "honest alone", "#4c72b0"),
    ("attackers", "attack", "#c44e52"),
    ("propagation", "probes", "#8172b2"),
]


def substitute(expr, rate_interval=RATE_INTERVAL):
    """The dashboard's variables, as the Prometheus proof substitutes them."""
    for var, value in [("${__rate_interval}", rate_interval), ("$__rate_interval", rate_interval),
                       ("${__interval}", "5s"), ("$__interval", "5s"),
                       ("${__range}", "1m"), ("$__range", "1m"),
                       ("${instance}", ".+"), ("$instance", ".+")]:
        expr = expr.replace(var, value)
    return expr


def dashboard_panels(path):
    """title -> panel, rows' panels included."""
    d = json.loads(pathlib.Path(path).read_text())
    out = {}

    def walk(panels):
        for p in panels:
            out.setdefault(p.get("title", ""), p)
            walk(p.get("panels", []))
    walk(d.get("panels", []))
    return out


def query_range(prometheus, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    url = f"{prometheus.rstrip('/')}/api/v1/query_range?{params}"
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.loads(r.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]["result"]


def fetch(prometheus, titles, start, end, step, dashboard=DASHBOARD,
          rate_interval=RATE_INTERVAL):
    """The selected panels with their series: a JSON-able list."""
    panels = dashboard_panels(dashboard)
    out = []
    for title in titles:
        panel = panels.get(title)
        if panel is None:
            print(f"dashboard_png: no panel titled {title!r} in {dashboard}", file=sys.stderr)
            continue
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        targets = []
        for t in panel.get("targets", []):
            expr = t.get("expr")
            if not expr:
                continue
            result = query_range(prometheus, substitute(expr, rate_interval), start, end, step)
            targets.append({"expr": expr, "legend": t.get("legendFormat", ""), "result": result})
        out.append({"title": title, "unit": unit, "targets": targets})
    return {"start": start, "end": end, "step": step, "rate_interval": rate_interval,
            "panels": out}


def legend(fmt, labels, single_instance):
    def sub(m):
        name = m.group(1).strip()
        if name == "instance" and single_instance:
            return ""
        return labels.get(name, "")
    text = re.sub(r"\{\{\s*([^}]+?)\s*\}\}", sub, fmt or "")
    text = " ".join(text.split())
    return text or ", ".join(f"{k}={v}" for k, v in labels.items() if k != "__name__") or "value"


def seconds_formatter(top):
    scale, suffix = (1e6, "µs") if top < 1e-3 else (1e3, "ms") if top < 1 else (1, "s")
    return FuncFormatter(lambda v, _p: f"{v * scale:g} {suffix}")


UNITS = {
    # unit -> (axis label, formatter factory from the largest value)
    "s": ("latency", seconds_formatter),
    "reqps": ("per second", lambda top: FuncFormatter(lambda v, _p: f"{v:g}/s")),
    "percentunit": ("share", lambda top: FuncFormatter(lambda v, _p: f"{v * 100:g}%")),
    "short": ("count", lambda top: FuncFormatter(lambda v, _p: f"{v:g}")),
}


def load_phases(path):
    if not path:
        return None
    data = json.loads(pathlib.Path(path).read_text())
    series = data.get("series") or {}
    if "origin_unix_s" not in series:
        return None
    return series["origin_unix_s"], series.get("phases", {})


def render(data, out, phases=None, title=None):
    panels = data["panels"]
    start = float(data["start"])
    instances = {s["metric"].get("instance") for p in panels for t in p["targets"]
                 for s in t["result"] if "instance" in s["metric"]}
    single = len(instances) <= 1
    cols = 3
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 3.6 * rows), squeeze=False)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels):
        unit = panel["unit"] if panel["unit"] in UNITS else "short"
        exprs = [t["expr"] for t in panel["targets"]]
        if unit == "short" and exprs and all("rate(" in e for e in exprs):
            unit = "reqps"  # a rate with no unit set: still per second
        lines = []
        for target in panel["targets"]:
            for s in target["result"]:
                xs, ys = [], []
                for t, v in s["values"]:
                    xs.append(float(t) - start)
                    v = float(v)
                    ys.append(v if math.isfinite(v) else math.nan)
                lines.append((xs, ys, legend(target["legend"], s["metric"], single)))
        finite = {i: [y for y in ys if not math.isnan(y)] for i, (_, ys, _) in enumerate(lines)}
        nonzero = {i for i, f in finite.items() if any(y != 0 for y in f)}
        top, drawn, hidden = 0.0, 0, 0
        positive, values = [], set()
        for i, (xs, ys, name) in enumerate(lines):
            # Label sets are created up front: a series with no value, or
            # one that stayed at zero beside others that moved, would only
            # crowd the legend.
            if not finite[i] or (nonzero and i not in nonzero):
                hidden += 1
                continue
            top = max(top, max(finite[i]))
            positive.extend(y for y in finite[i] if y > 0)
            values.update(finite[i])
            ax.plot(xs, ys, lw=1.4, color=palette[drawn % len(palette)], label=name)
            drawn += 1
        label, formatter = UNITS[unit]
        if unit == "reqps" and positive and max(positive) / min(positive) > 200:
            ax.set_yscale("log")
            label += " (log)"
        elif unit == "short" and values and values <= {0.0, 1.0}:
            ax.set_ylim(-0.05, 1.15)  # a 0/1 gauge: up or down
            ax.set_yticks([0, 1])
            label = "1 = up, 0 = down"
        elif drawn:
            ax.set_ylim(bottom=0, top=top * 1.15 if top > 0 else 1)
        ax.yaxis.set_major_formatter(formatter(top or 1))
        if ax.get_yscale() != "log" and not values <= {0.0, 1.0}:
            ax.yaxis.set_major_locator(MaxNLocator(5))
        ax.set_ylabel(label, fontsize=8)
        ax.set_title(panel["title"], fontsize=10, loc="left")
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.set_xlabel("seconds since the range started", fontsize=8)
        if phases:
            origin, spans = phases
            for key, name, c in PHASES:
                span = spans.get(key)
                if span:
                    ax.axvspan(origin + span[0] - start, origin + span[1] - start,
                               color=c, alpha=0.08, lw=0)
        if drawn:
            ax.legend(fontsize=7, loc="best", framealpha=0.85,
                      ncol=2 if drawn > 4 else 1)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        if hidden:
            ax.text(1.0, 1.01, f"{hidden} all-zero series hidden", transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=7, color="#777777")
    if phases:
        handles = [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.2) for _, _, c in PHASES]
        fig.legend(handles, [n for _, n, _ in PHASES], loc="lower center", ncol=len(PHASES),
                   fontsize=9, frameon=False)
    note = (f"Prometheus query_range, step {data.get('step', '?')} s, "
            f"$__rate_interval = {data.get('rate_interval', RATE_INTERVAL)}")
    fig.suptitle(title or f"txgate dashboard (deploy/grafana/txgate.json), rendered from {note}",
                 fontsize=13)
    fig.tight_layout(rect=(0, 0.03 if phases else 0, 1, 1))
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prometheus", help="Prometheus base URL")
    ap.add_argument("--start", type=float, help="range start, unix seconds")
    ap.add_argument("--end", type=float, help="range end, unix seconds")
    ap.add_argument("--step", default="1", help="query_range step in seconds")
    ap.add_argument("--rate-interval", default=RATE_INTERVAL, help="for $__rate_interval")
    ap.add_argument("--dashboard", default=str(DASHBOARD))
    ap.add_argument("--panel", action="append", help="a panel title (repeat; default: the story's)")
    ap.add_argument("--phases", help="the attack tool's --json file: shade its phases")
    ap.add_argument("--out", default=str(ROOT / "docs" / "dashboard.png"))
    ap.add_argument("--save-data", help="also write the queried series here (JSON)")
    ap.add_argument("--from-data", help="render series saved by --save-data, no Prometheus")
    ap.add_argument("--title")
    args = ap.parse_args(argv)
    if args.from_data:
        data = json.loads(pathlib.Path(args.from_data).read_text())
    else:
        if not (args.prometheus and args.start and args.end):
            ap.error("--prometheus, --start and --end (or --from-data)")
        data = fetch(args.prometheus, args.panel or PANELS, args.start, args.end, args.step,
                     args.dashboard, args.rate_interval)
        if args.save_data:
            pathlib.Path(args.save_data).write_text(json.dumps(data))
    empty = [p["title"] for p in data["panels"] if not any(t["result"] for t in p["targets"])]
    for title in empty:
        print(f"dashboard_png: panel {title!r} has no series", file=sys.stderr)
    print(render(data, args.out, load_phases(args.phases), args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
