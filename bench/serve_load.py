"""``kvmon serve`` under load: scrapes per second and latency (p50 / p99 / max) with N concurrent scrapers.

The exporter runs in its own process, polling the built-in simulator (a real Snapshot with GPUs, slots and alerts),
as ``kvmon serve`` would; N client tasks on loopback scrape ``/metrics`` back to back (a new connection each, as
Prometheus does when it scrapes through ``Connection: close``). Three servers in one run, so the figures compare:
``before`` (what ``kvmon serve`` used to run: wsgiref with a thread per scrape, the standard library's listen
backlog of 5, every scrape rendered), ``backlog`` (the same with the system's backlog) and ``after``
(``kvmon.scrape_server``: four workers, the system's backlog, one render per poll). Target: p99 <= 50 ms at 50.

Usage: python bench/serve_load.py [--scrapers 50] [--seconds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
from kvmon.exporter import Exporter
from kvmon.session import demo_session

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


async def scrape(port: int, timeout_s: float) -> tuple[float, int]:
    """One scrape on a new connection: (seconds from connect to the last byte, bytes received)."""
    t0 = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout_s)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nConnection: close\r\n\r\n")
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout_s)
    writer.close()
    if not data.startswith(b"HTTP/1.") or b" 200 " not in data[:16]:
        raise OSError(f"bad answer {data[:40]!r}")
    return time.perf_counter() - t0, len(data)


async def load(port: int, scrapers: int, seconds: float) -> tuple[list[float], int, int]:
    latencies: list[float] = []
    errors = 0
    size = 0
    end = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors, size
        while time.perf_counter() < end:
            try:
                dt, n = await scrape(port, 10.0)
            except (OSError, asyncio.TimeoutError):
                errors += 1
                continue
            latencies.append(dt)
            size = n

    await asyncio.gather(*(worker() for _ in range(scrapers)))
    return latencies, errors, size


def run_variant(name: str, scrapers: int, seconds: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, name], cwd=ROOT,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
        lat, errors, size = asyncio.run(load(port, scrapers, seconds))
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
