#!/usr/bin/env python3
"""Pass-through load test: txgate against nginx in front of the same upstream.

Builds txgate (release), starts a static JSON-RPC responder (an nginx
`return 200` server, one worker), nginx as a plain keep-alive reverse proxy
in front of it, and txgate in front of it; then drives each with h2load over
HTTP/1.1 in interleaved rounds:

  * 50 connections for throughput,
  * 1 connection for per-hop latency,

with a warm-up excluded from every measurement. It prints req/s, p50 and p99
for direct, nginx and txgate, the ratios txgate/nginx of each round, and the
medians over rounds. Everything listens on loopback and stops by itself.

With --limits, two more txgate targets run in the same rounds with
per-client limits on (rates far above the load, so nothing is refused; the
cost measured is the charging itself): "ip_lim" charges every call to the
client IP (one client: the hottest table entry), "key_lim" to an API key
sent in x-api-key. Their throughput ratio and added p50 are printed against
"txgate" (limits off).

With --redis (implies --limits), "ip_redis" and "key_redis" run the same
limits shared through a redis-server started on a free loopback port
([redis] url, sync every 20 ms): the cost a call pays with Redis on, which
must be the local charge alone (Redis is never on a call's path).

With --cpu LIST (for example --cpu 0), every process of the run (responder,
nginx, txgate, h2load, redis-server) is bound to those CPUs with taskset.
On one CPU nothing waits on a wake-up from another core, so the added p50
per hop is each proxy's own work on the path, and the throughput at 50
connections is the inverse of the CPU the whole chain spends per call:
the comparison with the scheduler's placement taken out. nginx and txgate
then both run one worker per CPU of the list (nginx's "auto" would count
the machine's CPUs, txgate's default the allowed ones). Unbound runs are
the targets' measurement; a bound run says how much of a gap is placement.

With --ws-node, the node is rpc_echo (benches/src/bin/rpc_echo.rs), which
answers over HTTP/1.1 and WebSocket with each call's own id, in place of
nginx's static `return 200`: txgate's HTTP clients' calls then travel on
its lanes (websocket.http_lanes, the default), and a second txgate target,
"pool", runs the same binary with http_lanes = false (each call on a pooled
HTTP connection, as nginx sends it). Each target's CPU per call (utime +
stime of its process tree, nginx's workers included, over the measured
part of the 50-connection run) is printed beside its rate, with the ratio
txgate/nginx: issue 41's "CPU per proxied call <= 0.75x nginx's".

With --io-hops, three more targets run in the same rounds: uring_hop
(benches/src/bin/uring_hop), a minimal HTTP/1.1 pass-through hop written
twice with the same logic, "epoll_hop" on tokio (epoll, as txgate's
workers) and "uring_hop" on io_uring (multishot accept and receive with
provided buffers, a loop turn's sends submitted with its wait), and
"defer_hop", the io_uring hop with IORING_SETUP_DEFER_TASKRUN. Their CPU
per call (and everyone's) is printed with the ratio uring/epoll: what
io_uring alone changes, issue 41's item 2 ("keep only if >= 10% less CPU
per call").

With --ws-node, a third txgate target, "lanes_always", runs with
websocket.http_lane_min_overlap = 0: a call takes the lane even when no
other call is in flight (the default, 1, sends a lone call over the pool).

With --alternate N, each round ends with N calls to every target at one
connection, alternated call by call from one client (alternate.py): the
added p50 per hop of each target against the node, with the machine's
drift between runs taken out. With --alternate-only, the h2load runs are
skipped.

With --baseline-bin PATH, a second txgate binary (for example the build
of the previous commit) runs beside the current one as target "before", in
the same interleaved rounds, and the ratios current/before are printed:
the same-run comparison a change is kept or dropped by.

With --rate N, the 50-connection runs are paced at N requests/s in all
(h2load --rps, N/50 per connection) in place of as fast as each target
goes, and every proxy's CPU per call is printed (with --baseline-bin, the
ratio current/before too): what a call costs a proxy that is not
saturated, where each call more often finds its worker asleep and pays
the wake-up. At saturation a change of a few percent of CPU is lost in
the scheduler's noise on two shared cores; at a fixed rate the CPU is
counted over the same number of calls for each target.

Usage: benches/load/passthrough.py [--rounds 3] [--duration 5] [--warmup 1]
                                   [--json results.json] [--baseline-bin PATH]
                                   [--limits] [--redis] [--cpu LIST] [--ws-node] [--io-hops]
                                   [--rate N]
Needs: nginx and h2load (Debian: nginx-light, nghttp2-client), and
redis-server for --redis; scripts/install-bench-tools.sh and
scripts/install-test-tools.sh install them.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import alternate  # noqa: E402  (beside this script)

ROOT = Path(__file__).resolve().parents[2]
BODY = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
ANSWER = '{"jsonrpc":"2.0","id":1,"result":"0x7a69"}'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, name, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{name} exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{name} did not listen on {port}")


def nginx_conf(work, name, workers, server_block, upstream_block=""):
    temp = work / f"{name}-temp"
    temp.mkdir(exist_ok=True)
    conf = work / f"{name}.conf"
    conf.write_text(f"""
worker_processes {workers};
daemon off;
pid {work}/{name}.pid;
error_log {work}/{name}-error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {temp}/body;
  proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi;
  scgi_temp_path {temp}/scgi;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  {upstream_block}
  {server_block}
}}
""")
    return conf


# Prefix of every command started: taskset when --cpu is given.
PIN = []


def cpu_count(cpus):
    """How many CPUs a taskset list names ("0", "0,2", "0-3", "0-6:2")."""
    n = 0
    for part in cpus.split(","):
        span, _, stride = part.partition(":")
        lo, _, hi = span.partition("-")
        n += len(range(int(lo), int(hi or lo) + 1, int(stride or 1)))
    return n


def h2load(port, connections, duration, warmup, log, rps=None):
    """h2load's requests/s, errors and latency; `rps`: each connection paced
    at that many requests a second (h2load --rps), else as fast as it can."""
    cmd = PIN + [
        "h2load", "--h1", "-t", "1", "-c", str(connections), "-m", "1",
    ] + (["--rps", str(rps)] if rps else []) + [
        "-D", str(duration), f"--warm-up-time={warmup}",
        "-d", str(log.parent / "body.json"),
        "-H", "content-type: application/json",
        "-H", "x-api-key: bench-key-1",
        f"--log-file={log}",
        f"http://127.0.0.1:{port}/",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + warmup + 60)
    if out.returncode != 0:
        sys.exit(f"h2load failed: {out.stderr or out.stdout}")
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    log.unlink()
    if not rows:
        sys.exit(f"h2load logged no requests: {out.stdout}")
    # Drop anything that started during the warm-up, whatever h2load logs.
    first = min(r[0] for r in rows)
    rows = [r for r in rows if r[0] >= first + warmup * 1_000_000]
    ok = [r for r in rows if 200 <= r[1] < 300]
    lat = sorted(r[2] for r in ok)
    span = (max(r[0] + r[2] for r in rows) - min(r[0] for r in rows)) / 1e6
    return {
        "requests": len(rows),
        "errors": len(rows) - len(ok),
        "rps": len(ok) / span if span > 0 else 0.0,
        "p50_us": lat[len(lat) // 2] if lat else None,
        "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
    }


def tree_cpu_ms(pid):
    """CPU (user + system) of a process and its descendants, in ms, from
    /proc (10 ms ticks); threads included, exited children not."""
    total = 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) * 10.0
        for task in Path(f"/proc/{pid}/task").iterdir():
            children = (task / "children").read_text().split()
            total += sum(tree_cpu_ms(int(c)) for c in children)
    except (OSError, IndexError, ValueError):
        pass
    return total


def h2load_cpu(port, connections, duration, warmup, log, pid, rps=None):
    """h2load as h2load() does, and the CPU of process tree `pid` over the
    measured part (from the end of the warm-up to h2load's end), per call."""
    box = {}

    def sample():
        time.sleep(warmup)
        box["cpu0"] = tree_cpu_ms(pid)

    import threading
    t = threading.Thread(target=sample)
    t.start()
    r = h2load(port, connections, duration, warmup, log, rps)
    cpu1 = tree_cpu_ms(pid)
    t.join()
    r["cpu_us_per_call"] = (cpu1 - box["cpu0"]) * 1000.0 / max(1, r["requests"] - r["errors"])
    return r


def wait_redis_link(admin_port, name, timeout=10.0):
    """Waits until the instance's /readyz says its Redis link is up."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=1) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
        except OSError:
            body = {}
        if (body.get("redis") or {}).get("link") == "up":
            return
        time.sleep(0.05)
    sys.exit(f"{name}: Redis link not up")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="seconds measured per run")
    ap.add_argument("--warmup", type=int, default=1, help="seconds of warm-up per run")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--baseline-bin", help="another txgate binary to measure as target 'before'")
    ap.add_argument("--limits", action="store_true", help="also measure txgate with per-client limits on")
    ap.add_argument("--redis", action="store_true", help="also with the limits shared through redis-server")
    ap.add_argument("--cpu", help="bind every process to these CPUs (taskset list, e.g. 0)")
    ap.add_argument("--ws-node", action="store_true",
                    help="node: rpc_echo over HTTP and WebSocket; adds target 'pool' (lanes off) and CPU per call")
    ap.add_argument("--io-hops", action="store_true",
                    help="adds targets 'epoll_hop', 'uring_hop' and 'defer_hop' (uring_hop) and CPU per call")
    ap.add_argument("--alternate", type=int, default=0,
                    help="end each round with this many calls per target at 1 connection, alternated"
                         " call by call from one client: added p50 per hop without the drift between runs")
    ap.add_argument("--alternate-only", action="store_true", help="with --alternate: skip the h2load runs")
    ap.add_argument("--rate", type=int,
                    help="pace the 50-connection runs at this many requests/s in all (h2load --rps per"
                         " connection) and measure CPU per call there: a call's cost below saturation")
    args = ap.parse_args()
    cpu_per_call = args.ws_node or args.io_hops or bool(args.rate)
    # h2load paces each connection; the 50 together make the rate.
    paced = -(-args.rate // 50) if args.rate else None
    if args.cpu:
        if not shutil.which("taskset"):
            sys.exit("taskset not found (Debian: util-linux)")
        PIN.extend(["taskset", "-c", args.cpu])
    workers = cpu_count(args.cpu) if args.cpu else None

    for tool in ("nginx", "h2load"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            sys.exit(f"{tool} not found: run scripts/install-bench-tools.sh")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"

    if not args.no_build:
        packages = ["-p", "txgate"] + (["-p", "txgate-benches"] if args.ws_node or args.io_hops else [])
        subprocess.run(["cargo", "build", "--release", "-q"] + packages, cwd=ROOT, check=True)
    txgate_bin = ROOT / "target/release/txgate"

    work = Path(tempfile.mkdtemp(prefix="txgate-load-"))
    (work / "body.json").write_bytes(BODY)
    ports = {"direct": free_port(), "nginx": free_port(), "txgate": free_port()}
    if args.baseline_bin:
        ports["before"] = free_port()
    if args.ws_node:
        ports["pool"] = free_port()
        ports["lanes_always"] = free_port()
        ports["direct_ws"] = free_port()
    hops = ["epoll_hop", "uring_hop", "defer_hop"] if args.io_hops else []
    hop_io = {"epoll_hop": "epoll", "uring_hop": "uring", "defer_hop": "uring-defer"}
    for name in hops:
        ports[name] = free_port()
    args.limits = args.limits or args.redis
    limited = ["ip_lim", "key_lim"] if args.limits else []
    if args.redis:
        if not shutil.which("redis-server"):
            sys.exit("redis-server not found: run scripts/install-test-tools.sh")
        limited += ["ip_redis", "key_redis"]
        ports["redis"] = free_port()
    for name in limited:
        ports[name] = free_port()
    # Rates far above any load here: the cost of charging, never a refusal.
    limit_confs = {
        "ip_lim": "[limits]\nunknown_key = \"anonymous\"\n"
                  "ip = { calls_per_sec = 100000000, calls_burst = 100000000 }\n",
        "key_lim": "[limits]\nip = { calls_per_sec = 100000000, calls_burst = 100000000 }\n"
                   "[limits.tiers.bench]\ncalls_per_sec = 100000000\ncalls_burst = 100000000\n"
                   "[limits.keys]\n\"bench-key-1\" = \"bench\"\n",
    }
    for name in ("ip", "key"):
        if args.redis:
            limit_confs[f"{name}_redis"] = (limit_confs[f"{name}_lim"]
                                            + f"[redis]\nurl = \"redis://127.0.0.1:{ports['redis']}\"\n")
    admins = {}
    procs = []
    try:
        if args.redis:
            r = subprocess.Popen(PIN + ["redis-server", "--port", str(ports["redis"]), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(r)
            wait_port(ports["redis"], r, "redis-server")
        responder = None if args.ws_node else nginx_conf(
            work, "responder", 1,
            f"""server {{ listen 127.0.0.1:{ports['direct']} reuseport;
                location / {{ default_type application/json; return 200 '{ANSWER}'; }} }}""")
        proxy = nginx_conf(
            work, "proxy", workers or "auto",
            f"""server {{ listen 127.0.0.1:{ports['nginx']} reuseport;
                location / {{ proxy_pass http://rpc; proxy_http_version 1.1;
                              proxy_set_header Connection ""; }} }}""",
            f"upstream rpc {{ server 127.0.0.1:{ports['direct']}; keepalive 256; }}")
        started = {}
        for name, conf in (("responder", responder), ("nginx", proxy)):
            if conf is None:
                p = subprocess.Popen(PIN + [str(ROOT / "target/release/rpc_echo"),
                                            "--http", f"127.0.0.1:{ports['direct']}",
                                            "--ws", f"127.0.0.1:{ports['direct_ws']}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            else:
                p = subprocess.Popen(PIN + [nginx, "-c", str(conf), "-p", str(work)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            started[name] = p
        wait_port(ports["direct"], started["responder"], "responder")
        wait_port(ports["nginx"], started["nginx"], "nginx")
        pids = {"nginx": started["nginx"].pid}
        for name in hops:
            p = subprocess.Popen(PIN + [str(ROOT / "target/release/uring_hop"), "--io", hop_io[name],
                                        "--listen", f"127.0.0.1:{ports[name]}",
                                        "--upstream", f"127.0.0.1:{ports['direct']}"]
                                 + (["--threads", str(workers)] if workers else []),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            pids[name] = p.pid
            wait_port(ports[name], p, name)
        bins = {"txgate": txgate_bin}
        if args.baseline_bin:
            bins["before"] = Path(args.baseline_bin)
        if args.ws_node:
            bins["pool"] = txgate_bin
            bins["lanes_always"] = txgate_bin
        for name in limited:
            bins[name] = txgate_bin
        for name, binary in bins.items():
            extra = []
            text = (f"[server]\nworkers = {workers}\n" if workers else "") + limit_confs.get(name, "")
            if args.ws_node:
                text += (f"[websocket]\nupstream_url = \"ws://127.0.0.1:{ports['direct_ws']}\"\n"
                         f"http_lanes = {'false' if name == 'pool' else 'true'}\n"
                         + ("http_lane_min_overlap = 0\n" if name == "lanes_always" else ""))
            if text:
                conf = work / f"{name}.toml"
                conf.write_text(text)
                extra = ["-c", str(conf)]
            admins[name] = free_port()
            tx = subprocess.Popen(
                PIN + [str(binary), "--listen", f"127.0.0.1:{ports[name]}",
                 "--admin-listen", f"127.0.0.1:{admins[name]}",
                 "--upstream", f"http://127.0.0.1:{ports['direct']}", "--log-level", "warn"] + extra,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(tx)
            pids[name] = tx.pid
            wait_port(ports[name], tx, name)
        for name in limited:
            if name.endswith("_redis"):
                wait_redis_link(admins[name], name)

        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        print(f"machine: {os.cpu_count()} cores, {cpu}")
        if args.cpu:
            print(f"every process bound to CPU {args.cpu}")
        if args.rate:
            print(f"50-connection runs paced at {args.rate} requests/s ({paced} per connection)")
        print(f"h2load HTTP/1.1, {args.duration}s measured + {args.warmup}s warm-up per run, {args.rounds} rounds\n")
        order = (["direct", "nginx", "txgate"] + (["pool", "lanes_always"] if args.ws_node else [])
                 + (["before"] if args.baseline_bin else []) + hops + limited)
        alternated = []

        def alternate_round():
            """One round of alternated calls at 1 connection, printed."""
            got = alternate.alternate({tg: ports[tg] for tg in order}, args.alternate, BODY)
            alternated.append(got)
            d = got["direct"]["p50_us"]
            print(f"  alternating at 1c, {args.alternate} calls each: " + ", ".join(
                f"{tg} p50 {got[tg]['p50_us']:.1f} us (+{got[tg]['p50_us'] - d:.1f}), p90 {got[tg]['p90_us']:.1f}"
                for tg in order))

        def alternate_summary():
            """Medians over rounds of each target's p50, p90 and added p50."""
            out = {}
            for tg in order:
                out[tg] = {
                    "p50_us": statistics.median(a[tg]["p50_us"] for a in alternated),
                    "p90_us": statistics.median(a[tg]["p90_us"] for a in alternated),
                    "added_p50_us": statistics.median(a[tg]["p50_us"] - a["direct"]["p50_us"]
                                                      for a in alternated),
                }
            print(f"alternating at 1c, medians over {len(alternated)} rounds:")
            for tg in order:
                print(f"  {tg:12} p50 {out[tg]['p50_us']:6.1f} us  p90 {out[tg]['p90_us']:6.1f} us"
                      f"  added p50 per hop {out[tg]['added_p50_us']:+6.1f} us")
            return out

        if args.alternate and args.alternate_only:
            for rnd in range(args.rounds):
                print(f"round {rnd + 1}:")
                alternate_round()
            summary = {"alternating_1c": alternate_summary()}
            if args.json:
                Path(args.json).write_text(json.dumps(summary, indent=2))
            return
        results = []
        for rnd in range(args.rounds):
            # Rotate the order so no target always runs first or last.
            k = rnd % len(order)
            rot = order[k:] + order[:k]
            row = {}
            for mode, conns in (("throughput", 50), ("latency", 1)):
                for target in rot:
                    if cpu_per_call and mode == "throughput" and target in pids:
                        r = h2load_cpu(ports[target], conns, args.duration, args.warmup,
                                       work / "h2load.log", pids[target],
                                       paced if mode == "throughput" else None)
                    else:
                        r = h2load(ports[target], conns, args.duration, args.warmup, work / "h2load.log",
                                   paced if mode == "throughput" else None)
                    row[(mode, target)] = r
            results.append(row)
            t, l = "throughput", "latency"
            print(f"round {rnd + 1}:")
            for target in order:
                a, b = row[(t, target)], row[(l, target)]
                print(f"  {target:9} 50c: {a['rps']:9.0f} req/s p50 {a['p50_us']:6} us p99 {a['p99_us']:6} us"
                      f" | 1c: {b['rps']:7.0f} req/s p50 {b['p50_us']:5} us p99 {b['p99_us']:5} us"
                      f" | errors {a['errors'] + b['errors']}")
            ratio = row[(t, "txgate")]["rps"] / row[(t, "nginx")]["rps"]
            hop_n = row[(l, "nginx")]["p50_us"] - row[(l, "direct")]["p50_us"]
            hop_t = row[(l, "txgate")]["p50_us"] - row[(l, "direct")]["p50_us"]
            print(f"  txgate/nginx throughput {ratio:.2f}x; added p50 per hop: nginx {hop_n} us, txgate {hop_t} us")
            if cpu_per_call:
                cpu = {tg: row[(t, tg)]["cpu_us_per_call"] for tg in pids}
                print("  CPU per call at 50c: " + ", ".join(f"{tg} {v:.2f} us" for tg, v in cpu.items())
                      + f"; txgate/nginx {cpu['txgate'] / cpu['nginx']:.2f}x")
            if args.ws_node:
                print(f"  pool/nginx CPU per call {cpu['pool'] / cpu['nginx']:.2f}x,"
                      f" txgate/pool throughput {row[(t, 'txgate')]['rps'] / row[(t, 'pool')]['rps']:.2f}x")
            if args.io_hops:
                for name in ("uring_hop", "defer_hop"):
                    print(f"  {name}/epoll_hop: CPU per call {cpu[name] / cpu['epoll_hop']:.2f}x,"
                          f" throughput {row[(t, name)]['rps'] / row[(t, 'epoll_hop')]['rps']:.2f}x")
            for name in limited:
                hop_x = row[(l, name)]["p50_us"] - row[(l, "direct")]["p50_us"]
                print(f"  {name}/txgate throughput {row[(t, name)]['rps'] / row[(t, 'txgate')]['rps']:.2f}x;"
                      f" added p50 per hop: {name} {hop_x} us (limits off {hop_t} us)")
            if args.alternate:
                alternate_round()
            if args.baseline_bin:
                hop_b = row[(l, "before")]["p50_us"] - row[(l, "direct")]["p50_us"]
                print(f"  txgate/before throughput {row[(t, 'txgate')]['rps'] / row[(t, 'before')]['rps']:.2f}x;"
                      f" added p50 per hop: before {hop_b} us")
                if cpu_per_call:
                    print(f"  txgate/before CPU per call at 50c"
                          f" {row[(t, 'txgate')]['cpu_us_per_call'] / row[(t, 'before')]['cpu_us_per_call']:.2f}x")
            print()

        def med(mode, target, key):
            return statistics.median(r[(mode, target)][key] for r in results)

        ratios = [r[("throughput", "txgate")]["rps"] / r[("throughput", "nginx")]["rps"] for r in results]
        hops = {tg: [r[("latency", tg)]["p50_us"] - r[("latency", "direct")]["p50_us"] for r in results]
                for tg in order if tg != "direct"}
        summary = {
            "targets": {
                tg: {
                    "rps_50c": med("throughput", tg, "rps"),
                    "p50_us_50c": med("throughput", tg, "p50_us"),
                    "p99_us_50c": med("throughput", tg, "p99_us"),
                    "rps_1c": med("latency", tg, "rps"),
                    "p50_us_1c": med("latency", tg, "p50_us"),
                    "p99_us_1c": med("latency", tg, "p99_us"),
                } for tg in order
            },
            "txgate_over_nginx_throughput_median": statistics.median(ratios),
            "added_p50_us_median": {tg: statistics.median(v) for tg, v in hops.items()},
            "errors": sum(r[k]["errors"] for r in results for k in r),
        }
        print("medians over rounds:")
        print(f"  {'target':9} {'req/s 50c':>10} {'p50 50c':>8} {'p99 50c':>8} {'req/s 1c':>9} {'p50 1c':>7} {'p99 1c':>7}")
        for tg in order:
            s = summary["targets"][tg]
            print(f"  {tg:9} {s['rps_50c']:10.0f} {s['p50_us_50c']:8.0f} {s['p99_us_50c']:8.0f}"
                  f" {s['rps_1c']:9.0f} {s['p50_us_1c']:7.0f} {s['p99_us_1c']:7.0f}")
        print(f"  txgate/nginx throughput (median of per-round ratios): {summary['txgate_over_nginx_throughput_median']:.2f}x")
        print(f"  added p50 per hop (median): nginx {summary['added_p50_us_median']['nginx']:.0f} us,"
              f" txgate {summary['added_p50_us_median']['txgate']:.0f} us")
        if args.baseline_bin:
            before = [r[("throughput", "txgate")]["rps"] / r[("throughput", "before")]["rps"] for r in results]
            summary["txgate_over_before_throughput_median"] = statistics.median(before)
            print(f"  txgate/before throughput (median of per-round ratios): {statistics.median(before):.2f}x;"
                  f" added p50 per hop: before {summary['added_p50_us_median']['before']:.0f} us")
        for name in limited:
            over = [r[("throughput", name)]["rps"] / r[("throughput", "txgate")]["rps"] for r in results]
            extra = [(r[("latency", name)]["p50_us"] - r[("latency", "txgate")]["p50_us"]) for r in results]
            summary[f"{name}_over_txgate_throughput_median"] = statistics.median(over)
            summary[f"{name}_minus_txgate_p50_us_median"] = statistics.median(extra)
            print(f"  {name}/txgate throughput (median of per-round ratios): {statistics.median(over):.2f}x;"
                  f" p50 {name} - txgate (median): {statistics.median(extra):+.0f} us")
        if cpu_per_call:
            for tg in pids:
                summary["targets"][tg]["cpu_us_per_call_50c"] = med("throughput", tg, "cpu_us_per_call")
            cpu_ratio = [r[("throughput", "txgate")]["cpu_us_per_call"] / r[("throughput", "nginx")]["cpu_us_per_call"]
                         for r in results]
            summary["txgate_over_nginx_cpu_per_call_median"] = statistics.median(cpu_ratio)
            print("  CPU per call at 50c (medians): " + ", ".join(
                f"{tg} {summary['targets'][tg]['cpu_us_per_call_50c']:.2f} us" for tg in pids))
            print(f"  txgate/nginx CPU per call (median of per-round ratios): {statistics.median(cpu_ratio):.2f}x")
            if args.baseline_bin:
                over = statistics.median(r[("throughput", "txgate")]["cpu_us_per_call"]
                                         / r[("throughput", "before")]["cpu_us_per_call"] for r in results)
                summary["txgate_over_before_cpu_per_call_median"] = over
                print(f"  txgate/before CPU per call (median of per-round ratios): {over:.2f}x")
        if args.io_hops:
            def per_round(key, a, b):
                return statistics.median(r[("throughput", a)][key] / r[("throughput", b)][key] for r in results)
            for other in ("epoll_hop", "nginx", "txgate"):
                summary[f"uring_hop_over_{other}_cpu_per_call_median"] = per_round("cpu_us_per_call", "uring_hop", other)
                summary[f"uring_hop_over_{other}_throughput_median"] = per_round("rps", "uring_hop", other)
            for name in ("defer_hop",):
                summary[f"{name}_over_epoll_hop_cpu_per_call_median"] = per_round("cpu_us_per_call", name, "epoll_hop")
                summary[f"{name}_over_epoll_hop_throughput_median"] = per_round("rps", name, "epoll_hop")
            print(f"  defer_hop/epoll_hop (medians of per-round ratios): CPU per call"
                  f" {summary['defer_hop_over_epoll_hop_cpu_per_call_median']:.2f}x, throughput"
                  f" {summary['defer_hop_over_epoll_hop_throughput_median']:.2f}x;"
                  f" added p50 per hop: defer_hop {summary['added_p50_us_median']['defer_hop']:.0f} us")
            print(f"  uring_hop/epoll_hop (medians of per-round ratios): CPU per call"
                  f" {summary['uring_hop_over_epoll_hop_cpu_per_call_median']:.2f}x, throughput"
                  f" {summary['uring_hop_over_epoll_hop_throughput_median']:.2f}x;"
                  f" epoll_hop/nginx CPU per call {per_round('cpu_us_per_call', 'epoll_hop', 'nginx'):.2f}x;"
                  f" added p50 per hop: epoll_hop {summary['added_p50_us_median']['epoll_hop']:.0f} us,"
                  f" uring_hop {summary['added_p50_us_median']['uring_hop']:.0f} us")
        if args.ws_node:
            pool_ratio = [r[("throughput", "txgate")]["rps"] / r[("throughput", "pool")]["rps"] for r in results]
            summary["txgate_over_pool_throughput_median"] = statistics.median(pool_ratio)
            print(f"  txgate (lanes)/pool throughput: {statistics.median(pool_ratio):.2f}x;"
                  f" added p50 per hop: pool {summary['added_p50_us_median']['pool']:.0f} us")
        print(f"  non-2xx answers: {summary['errors']}")
        if args.alternate:
            summary["alternating_1c"] = alternate_summary()
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
