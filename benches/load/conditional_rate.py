#!/usr/bin/env python3
"""The cost-weighted rate limit on eth_sendRawTransactionConditional, under load.

Builds txgate (release), starts anvil and txgate in front of it with
[conditional] rate_per_sec = RATE lookups a second and burst = BURST, then
drives conditional calls to the ERC-4337 EntryPoint, each carrying a
condition of COST lookups, from THREADS keep-alive connections as fast as
they go for DURATION seconds (far above the rate). Every answer is either
txgate's -32005 "rate limited" or something txgate forwarded (anvil does
not implement the method and answers it with its own error). It prints the
lookups accepted per second, second by second, and over the whole run
without the initial burst, against the configured rate (target: within
5%). Loopback only; everything it starts it stops.

Usage: benches/load/conditional_rate.py [--rate 2000] [--burst 1000]
                                        [--cost 10] [--duration 10] [--threads 8]
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINT = "0x0000000071727De22E5E9d8BAf0edAc6f37da032"
KEY0 = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, body: bytes, limit: float = 20.0) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
            urllib.request.urlopen(req, timeout=1).read()
            return
        except Exception:
            time.sleep(0.1)
    sys.exit(f"{url} did not answer")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=2000, help="lookups a second")
    ap.add_argument("--burst", type=int, default=1000, help="lookups at once")
    ap.add_argument("--cost", type=int, default=10, help="lookups per call (even, >= 2)")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "--locked", "-q", "-p", "txgate"], cwd=ROOT, check=True)
    subprocess.run([str(ROOT / "scripts/install-foundry.sh")], check=True, stdout=subprocess.DEVNULL)
    tools = ROOT / ".tools/bin"
    procs = []
    work = tempfile.mkdtemp(prefix="txgate-conditional-rate-")
    try:
        anvil_port, rpc_port, admin_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen([str(tools / "anvil"), "--port", str(anvil_port), "--silent"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        anvil = f"http://127.0.0.1:{anvil_port}"
        chain_id = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
        wait_http(anvil, chain_id)
        config = Path(work) / "txgate.toml"
        config.write_text(f"[conditional]\nrate_per_sec = {args.rate}\nburst = {args.burst}\n")
        procs.append(subprocess.Popen(
            [str(ROOT / "target/release/txgate"), "--config", str(config), "--upstream", anvil,
             "--listen", f"127.0.0.1:{rpc_port}", "--admin-listen", f"127.0.0.1:{admin_port}",
             "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        txgate = f"http://127.0.0.1:{rpc_port}"
        wait_http(txgate, chain_id)
        raw = subprocess.run(
            [str(tools / "cast"), "mktx", "--private-key", KEY0, "--rpc-url", anvil,
             ENTRY_POINT, "--gas-limit", "200000"],
            check=True, capture_output=True, text=True).stdout.strip()
        # cost/2 accounts with a storage root: 2 lookups each.
        accounts = {f"0x{i + 1:040x}": f"0x{i + 1:064x}" for i in range(args.cost // 2)}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransactionConditional",
                           "params": [raw, {"knownAccounts": accounts}]}).encode()

        start = time.time() + 0.5
        stop = start + args.duration
        accepted, limited, other = [], [0], [0]
        lock = threading.Lock()

        def drive() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", rpc_port, timeout=5)
            mine, refused, odd = [], 0, 0
            while time.time() < start:
                time.sleep(0.001)
            while (now := time.time()) < stop:
                conn.request("POST", "/", body, {"content-type": "application/json"})
                answer = json.loads(conn.getresponse().read())
                error = answer.get("error") or {}
                if error.get("code") == -32005 and error.get("message") == "rate limited":
                    refused += 1
                elif "error" in answer and error.get("code") in (-32003, -32602):
                    odd += 1
                else:
                    mine.append(now - start)
            with lock:
                accepted.extend(mine)
                limited[0] += refused
                other[0] += odd

        threads = [threading.Thread(target=drive) for _ in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if other[0]:
            print(f"warning: {other[0]} calls refused for another reason")
        seconds = int(args.duration)
        per_second = [0] * seconds
        for t in accepted:
            if int(t) < seconds:
                per_second[int(t)] += args.cost
        total = len(accepted) * args.cost
        print(f"rate {args.rate} lookups/s, burst {args.burst}, {args.cost} lookups a call, "
              f"{args.threads} connections, {args.duration:.0f} s")
        print(f"calls: {len(accepted)} forwarded, {limited[0]} rate limited "
              f"(offered {(len(accepted) + limited[0]) / args.duration:.0f} calls/s)")
        print("lookups accepted per second: " + ", ".join(str(n) for n in per_second))
        steady = sorted(per_second[1:])
        median = steady[len(steady) // 2]
        whole = (total - args.burst) / args.duration
        print(f"median of seconds 2..{seconds}: {median} lookups/s ({median / args.rate:.3f}x the rate)")
        print(f"whole run less the burst: {whole:.0f} lookups/s ({whole / args.rate:.3f}x the rate; "
              f"target within 5%: {'met' if abs(whole / args.rate - 1) <= 0.05 else 'NOT MET'})")
        return 0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
