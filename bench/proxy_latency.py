"""Added latency per streamed chunk through ``kvmon proxy`` versus a direct connection (target: <= 1 ms median).

A local upstream streams Ollama-style NDJSON chunks one at a time; the client signals receipt of each
chunk before the next is sent, so every chunk is timed alone (send → receive) with no queueing. The
proxy runs as its own process (``python -m kvmon proxy``), as a user would run it. Prints the figures.

Usage: python bench/proxy_latency.py [--chunks N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ollama_upstream import CHUNKED_HEAD, RawUpstream  # noqa: E402


class GatedUpstream(RawUpstream):
    """Streams ``n`` NDJSON chunks per request, each only after the client confirmed the previous one."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.sent_at: list[float] = []
        self.go = threading.Semaphore(0)
        super().__init__()

    def stream(self, conn: socket.socket, body: bytes) -> None:
        conn.sendall(CHUNKED_HEAD)
        for i in range(self.n):
            self.go.acquire()
            line = json.dumps({"model": "bench", "created_at": "2026-11-30T18:00:00Z",
                               "message": {"role": "assistant", "content": f" word{i}"}, "done": False}).encode()
            payload = b"%x\r\n%s\n\r\n" % (len(line) + 1, line)
            self.sent_at.append(time.perf_counter())
            conn.sendall(payload)
        conn.sendall(b"0\r\n\r\n")


def measure(port: int, up: GatedUpstream) -> list[float]:
    """Per-chunk latency in seconds for one streamed request through ``port``."""
    up.sent_at.clear()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = b'{"model":"bench","messages":[]}'
    s.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    buf = buf.split(b"\r\n\r\n", 1)[1]
    lat: list[float] = []
    for i in range(up.n):
        up.go.release()
        while True:
            end = _chunk_end(buf)
            if end:
                break
            buf += s.recv(65536)
        t = time.perf_counter()
        lat.append(t - up.sent_at[i])
        buf = buf[end:]
    s.close()
    return lat


def _chunk_end(buf: bytes) -> int:
    j = buf.find(b"\r\n")
    if j < 0:
        return 0
    size = int(buf[:j], 16)
    end = j + 2 + size + 2
    return end if len(buf) >= end else 0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    up = GatedUpstream(args.chunks)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    proxy_port = probe.getsockname()[1]
    probe.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvmon", "proxy", "--listen", f"127.0.0.1:{proxy_port}",
         "--upstream", f"http://127.0.0.1:{up.port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{proxy_port}/kvmon/stats", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        else:
            print("proxy did not start", file=sys.stderr)
            return 1
        measure(up.port, up)  # warm-up both paths
        measure(proxy_port, up)
        direct: list[float] = []
        proxied: list[float] = []
        for _ in range(args.rounds):  # interleave so machine load hits both alike
            direct += measure(up.port, up)
            proxied += measure(proxy_port, up)
        stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{proxy_port}/kvmon/stats").read())
    finally:
        proc.terminate()
        proc.wait(5)
    ms = 1000.0
    d50, d95 = statistics.median(direct) * ms, pct(direct, 0.95) * ms
    p50, p95 = statistics.median(proxied) * ms, pct(proxied, 0.95) * ms
    print(f"chunks timed: {len(direct)} direct, {len(proxied)} through the proxy (one at a time)")
    print(f"direct   per-chunk latency: median {d50:.3f} ms, p95 {d95:.3f} ms")
    print(f"proxied  per-chunk latency: median {p50:.3f} ms, p95 {p95:.3f} ms")
    print(f"added by the proxy:         median {p50 - d50:.3f} ms, p95 {p95 - d95:.3f} ms  (target: median <= 1 ms)")
    last = stats["recent"][-1] if stats["recent"] else {}
    print(f"proxy counted {last.get('chunks')} chunks in the last stream; in-flight rate source works: "
          f"{last.get('decode_tok_s_source')}")
    return 0 if p50 - d50 <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
