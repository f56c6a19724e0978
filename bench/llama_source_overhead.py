"""Figures for the llama-server source: GGUF header read time on a big sparse file, poll latency, rate cost.

Prints numbers; asserts nothing. Run: python bench/llama_source_overhead.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gguf  # noqa: E402
import numpy as np  # noqa: E402
from kvmon.sources.llamacpp.source.source.source import LlamaServerSource  # noqa: E402

from kvmon.core.rates import SlotRateTracker  # noqa: E402
from kvmon.sources.gguf_meta import read_gguf_header  # noqa: E402

CAPTURES = ROOT / "tests" / "fixtures" / "llama-server"
ROUTES = {
    "/health": "health.generating.json",
    "/props": "props.generating.json",
    "/slots": "slots.generating.json",
    "/metrics": "metrics.generating.txt",
    "/v1/models": "v1-models.generating.json",
}


def _ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1000:.2f} ms, max {max(xs) * 1000:.2f} ms (n={len(xs)})"


def bench_gguf(vocab: int = 152_064, size_gib: int = 40) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "big.gguf"
        w = gguf.GGUFWriter(str(p), "llama")
        w.add_block_count(64)
        w.add_context_length(131072)
        w.add_embedding_length(5120)
        w.add_head_count(40)
        w.add_head_count_kv(8)
        w.add_token_list([f"token-{i}" for i in range(vocab)])
        w.add_token_scores([0.0] * vocab)
        w.add_token_types([1] * vocab)
        for i in range(64 * 9):
            w.add_tensor(f"blk.{i // 9}.t{i % 9}.weight", np.zeros((8,), dtype=np.float16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(p, "r+b") as f:
            f.truncate(size_gib * 1024**3)
        times = []
        for _ in range(10):
            t = time.perf_counter()
            h = read_gguf_header(p)
            times.append(time.perf_counter() - t)
        print(f"GGUF header, {size_gib} GiB sparse file, {vocab} tokens, {h.tensor_count} tensors, "
              f"header {h.data_offset_bytes / 1e6:.1f} MB: {_ms(times)}")


def bench_poll(n: int = 50) -> None:
    bodies = {path: (CAPTURES / name).read_bytes() for path, name in ROUTES.items()}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = bodies.get(self.path.split("?")[0], b"{}")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    src = LlamaServerSource(f"http://127.0.0.1:{srv.server_address[1]}", inspect_local_process=False)
    src.poll()
    times = []
    readings = []
    for _ in range(n):
        t = time.perf_counter()
        readings.append(src.poll())
        times.append(time.perf_counter() - t)
    print(f"LlamaServerSource.poll (4 requests to 127.0.0.1, captures): {_ms(times)}")
    tr = SlotRateTracker()
    t = time.perf_counter()
    for r in readings * 20:
        tr.update(r)
    print(f"SlotRateTracker.update: {(time.perf_counter() - t) / (len(readings) * 20) * 1e6:.1f} µs per reading")
    src.close()
    srv.shutdown()


if __name__ == "__main__":
    bench_gguf()
    bench_poll()
