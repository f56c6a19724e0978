"""``kvmon serve`` under load: scrapes per second and latency (p50 / p99 / max) with N concurrent scrapers.

The exporter runs in its own process, polling the built-in simulator (a real Snapshot with GPUs, slots and
alerts), as ``kvmon serve`` would; N scrapers on loopback (one selector loop in this process) scrape
``/metrics`` back to back, a new connection each, as Prometheus does when it scrapes through
``Connection: close``. Three servers in one run, so the figures compare: ``before`` (what ``kvmon serve`` once
ran: wsgiref with a thread per scrape, the standard library's listen backlog of 5, every scrape rendered),
``backlog`` (prometheus_client's own server, ``ThreadingWSGIServer``: the same with the system's backlog) and
``after`` (``kvmon.cli.scrape_server``: prometheus_client's WSGI app answered from one selector thread, each head
against its deadline, the system's backlog, one render per poll). Target: p99 <= 50 ms at 50 scrapers.

Usage: python bench/serve_load.py [--scrapers 50] [--seconds 8]
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("before", "backlog", "after")

CHILD = """
import socket, sys, threading, time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from prometheus_client import make_wsgi_app
from kvmon.cli.serve import Exporter
from kvmon.app.demo import demo_session

class Quiet(WSGIRequestHandler):
    def log_message(self, *a):
        pass

class ThreadPerScrape(ThreadingMixIn, WSGIServer):  # kvmon serve's server before: backlog 5 unless told
    daemon_threads = True
    allow_reuse_address = True

variant = sys.argv[1]
session = demo_session("seed-3090x2", None)
monitor = session.factory()
exporter = Exporter(monitor, interval_s=1.0)
exporter.start_polling()
if variant == "after":
    exporter.listen("127.0.0.1", 0)
    url = exporter.metrics_url
else:
    if variant == "backlog":
        ThreadPerScrape.request_queue_size = socket.SOMAXCONN
    httpd = make_server("127.0.0.1", 0, make_wsgi_app(exporter.registry), ThreadPerScrape, Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/metrics"
time.sleep(1.5)
print(url, flush=True)
sys.stdin.read()
exporter.stop(); monitor.close(); session.close()
"""


REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"


def load(port: int, scrapers: int, seconds: float) -> tuple[list[float], int, int]:
    """``scrapers`` connections at a time, each scraping back to back on a new connection, for ``seconds``:
    (latency of each scrape from connect to the last byte, errors, bytes of one answer). One selector loop drives
    them all, so the client spends as little CPU as it can and the figures are the server's."""
    sel = selectors.DefaultSelector()
    latencies: list[float] = []
    errors = 0
    size = 0
    end = time.perf_counter() + seconds

    def start() -> None:
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE, [time.perf_counter(), bytearray(), False])

    for _ in range(scrapers):
        start()
    while sel.get_map():
        for key, _ in sel.select(timeout=1.0):
            s, st = key.fileobj, key.data
            assert isinstance(s, socket.socket)
            try:
                if not st[2]:  # connected: send the request
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        raise OSError("connect failed")
                    s.sendall(REQUEST)
                    st[2] = True
                    sel.modify(s, selectors.EVENT_READ, st)
                    continue
                data = s.recv(1 << 16)
                if data:
                    st[1] += data
                    continue
                if not st[1].startswith(b"HTTP/1.") or b" 200 " not in st[1][:16]:
                    raise OSError("bad answer")
                latencies.append(time.perf_counter() - st[0])
                size = len(st[1])
            except OSError:
                errors += 1
            sel.unregister(s)
            s.close()
            if time.perf_counter() < end:
                start()
        now = time.perf_counter()
        for key in list(sel.get_map().values()):  # a scrape that never ends counts as an error after 10 s
            if now - key.data[0] > 10.0:
                sel.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
                errors += 1
                if now < end:
                    start()
    return latencies, errors, size


def run_variant(name: str, scrapers: int, seconds: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, name], cwd=ROOT,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        lat, errors, size = load(port, scrapers, seconds)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(20)
    lat.sort()
    q = statistics.quantiles(lat, n=100) if len(lat) >= 100 else [float("nan")] * 99
    return {"scrapes_per_s": len(lat) / seconds, "p50_ms": q[49] * 1e3, "p99_ms": q[98] * 1e3,
            "max_ms": lat[-1] * 1e3 if lat else float("nan"), "errors": errors, "bytes": size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapers", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    print(f"kvmon serve, {args.scrapers} concurrent scrapers on loopback, {args.seconds:g} s each "
          f"({os.cpu_count()} CPUs)")
    results = {}
    for name in VARIANTS:
        r = run_variant(name, args.scrapers, args.seconds)
        results[name] = r
        print(f"  {name:8s} {r['scrapes_per_s']:7.0f} scrapes/s   p50 {r['p50_ms']:6.1f} ms   p99 {r['p99_ms']:7.1f} ms"
              f"   max {r['max_ms']:7.1f} ms   errors {r['errors']:.0f}   ({r['bytes']:.0f} B each)", flush=True)
    ok = results["after"]["p99_ms"] <= 50.0 and results["after"]["errors"] == 0
    print(f"  target p99 <= 50 ms with no errors: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
