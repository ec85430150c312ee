"""Latency per hop, call by call: one client, one kept-alive HTTP/1.1
connection to each target, the targets' calls alternated (the order
reversed every other turn), so that whatever the shared machine does to
one call it does to its neighbours of every other target. What h2load's
separate runs at one connection cannot give: the drift between runs
(±5 µs here) is larger than the differences asked about.

Used by passthrough.py (--alternate N); loopback only, bounded by N.
"""

import socket
import time


def _call(sock, request):
    """Sends `request` and reads one answer whole (by Content-Length)."""
    sock.sendall(request)
    buf = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the target closed the connection")
        buf += chunk
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            continue
        head = buf[:end].lower()
        if not head.startswith(b"http/1.1 200"):
            raise RuntimeError(f"not 200: {head[:40]!r}")
        at = head.find(b"content-length:")
        if at < 0:
            raise RuntimeError("an answer without Content-Length")
        length = int(head[at + 15:].split(b"\r\n")[0])
        if len(buf) >= end + 4 + length:
            return


def alternate(ports, calls, body, warmup=1000):
    """{target: {"p50_us", "p90_us"}} over `calls` calls each, alternated
    call by call across `ports` ({target: port}), after `warmup` each."""
    request = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    names = list(ports)
    socks = {}
    try:
        for name in names:
            s = socket.create_connection(("127.0.0.1", ports[name]), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks[name] = s
        for _ in range(warmup):
            for name in names:
                _call(socks[name], request)
        took = {name: [] for name in names}
        for k in range(calls):
            for name in (names if k % 2 == 0 else reversed(names)):
                t = time.perf_counter_ns()
                _call(socks[name], request)
                took[name].append(time.perf_counter_ns() - t)
    finally:
        for s in socks.values():
            s.close()
    out = {}
    for name, ns in took.items():
        ns.sort()
        out[name] = {"p50_us": ns[len(ns) // 2] / 1000, "p90_us": ns[len(ns) * 9 // 10] / 1000}
    return out
