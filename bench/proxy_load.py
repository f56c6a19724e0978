"""``kvmon proxy`` under load: N concurrent streams through the proxy, byte for byte, with throughput and per-chunk
latency (p50 / p99), against the same streams read directly from the upstream.

A local upstream streams Ollama-style NDJSON answers (chunked), ``--chunks`` per request, each stamped with the
time it was sent (``time.perf_counter``, one clock for every process of this machine) and paced ``--gap-ms``
apart, as a server generating tokens does; every byte it writes is kept per stream. N clients at once post a
request and read the answer to its end: each stream must arrive exactly as the upstream wrote it (no byte lost,
added or moved). The proxy runs as its own process (``python -m kvmon proxy``), as a user would run it.

Usage: python bench/proxy_load.py [--streams 20] [--chunks 400] [--gap-ms 1] [--rounds 3]
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


class StreamingUpstream(RawUpstream):
    """Answers every POST with ``chunks`` stamped NDJSON chunks; ``written[stream]`` is every byte it sent."""

    def __init__(self, chunks: int, gap_s: float) -> None:
        self.chunks, self.gap_s = chunks, gap_s
        self.written: dict[str, bytes] = {}
        self._lock = threading.Lock()
        super().__init__(backlog=256)

    def stream(self, conn: socket.socket, body: bytes) -> None:
        stream = json.loads(body)["stream"]
        out = [CHUNKED_HEAD]
        conn.sendall(out[0])
        for k in range(self.chunks):
            if self.gap_s:
                time.sleep(self.gap_s)
            line = json.dumps({"model": "bench", "message": {"role": "assistant", "content": f" {stream}-{k}"},
                               "done": False, "t": time.perf_counter()}).encode() + b"\n"
            piece = b"%x\r\n%s\r\n" % (len(line), line)
            conn.sendall(piece)
            out.append(piece)
        out.append(b"0\r\n\r\n")
        conn.sendall(out[-1])
        with self._lock:
            self.written[stream] = b"".join(out)


def one_stream(port: int, stream: str, got: dict[str, bytes], lat: list[float], lock: threading.Lock) -> None:
    """Post one request, read the answer to its end; every complete chunk's latency from its stamp."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = json.dumps({"model": "bench", "stream": stream}).encode()
    s.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    data = bytearray()
    mine: list[float] = []
    scanned = 0
    while piece := s.recv(65536):
        now = time.perf_counter()
        data += piece
        while (j := data.find(b"\n", scanned)) >= 0:  # each NDJSON line carries the time it was sent
            line = bytes(data[scanned:j])
            scanned = j + 1
            k = line.find(b'"t": ')
            if line.startswith(b"{") and k >= 0:
                mine.append(now - float(line[k + 5:].rstrip(b"}\r")))
    s.close()
    with lock:
        got[stream] = bytes(data)
        lat.extend(mine)


def run_round(port: int, up: StreamingUpstream, streams: int, tag: str) -> tuple[float, int, list[float], int]:
    """(seconds, bytes, chunk latencies, streams that differ from what the upstream wrote)."""
    got: dict[str, bytes] = {}
    lat: list[float] = []
    lock = threading.Lock()
    names = [f"{tag}{i}" for i in range(streams)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one_stream, args=(port, n, got, lat, lock)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    dt = time.perf_counter() - t0
    time.sleep(0.05)
    bad = sum(1 for n in names if got.get(n) != up.written.get(n))
    return dt, sum(len(v) for v in got.values()), lat, bad


def q(xs: list[float], p: float) -> float:
    return statistics.quantiles(xs, n=100)[int(p) - 1] if len(xs) >= 100 else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--chunks", type=int, default=400)
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    up = StreamingUpstream(args.chunks, args.gap_ms / 1000)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    proxy_port = probe.getsockname()[1]
    probe.close()
    proc = subprocess.Popen([sys.executable, "-m", "kvmon", "proxy", "--listen", f"127.0.0.1:{proxy_port}",
                             "--upstream", f"http://127.0.0.1:{up.port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{proxy_port}/kvmon/stats", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    print("proxy did not start", file=sys.stderr)
                    return 1
                time.sleep(0.1)
        results: dict[str, list[tuple[float, int, list[float], int]]] = {"direct": [], "proxied": []}
        for r in range(args.rounds):  # interleaved, so the machine's load hits both alike
            results["direct"].append(run_round(up.port, up, args.streams, f"d{r}-"))
            results["proxied"].append(run_round(proxy_port, up, args.streams, f"p{r}-"))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"kvmon proxy: {args.streams} concurrent streams x {args.chunks} chunks ({args.gap_ms:g} ms apart), "
          f"{args.rounds} rounds ({os.cpu_count()} CPUs)")
    bad_total = 0
    for name, rounds in results.items():
        secs = sum(r[0] for r in rounds)
        size = sum(r[1] for r in rounds)
        lat = [x for r in rounds for x in r[2]]
        bad = sum(r[3] for r in rounds)
        bad_total += bad if name == "proxied" else 0
        print(f"  {name:8s} {size / secs / 1e6:6.2f} MB/s  {len(lat) / secs:8.0f} chunks/s   chunk latency p50 "
              f"{q(lat, 50) * 1e3:6.2f} ms  p99 {q(lat, 99) * 1e3:6.2f} ms   streams not byte-exact: {bad} of "
              f"{args.streams * len(rounds)}")
    return 0 if bad_total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
