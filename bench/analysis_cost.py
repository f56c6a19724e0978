"""The analysis of one poll as a session grows: does a long day cost more per poll than its first minutes?

Real readings are recorded from the real llama-server of the tests (xllamacpp, a tiny llama generating without
pause, a reply ending about every poll), then replayed through one ``Analyzer`` pass after pass with their times
shifted, as one long session: thousands of replies, a full store of measured points. Prints the median thread CPU
of ``Analyzer.update`` over each stretch of the session. Warm loop figures (no server beside it, caches hot): the
dashboard's poll measures the same code at 1 Hz in ``bench/poll_cost.py``.

    python bench/analysis_cost.py [--readings 60] [--passes 90]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))


def record(n: int) -> list[tuple[object, object, object]]:
    """``n`` readings (server, GPUs, host) of the real llama-server while it generates, half a second apart."""
    from side_by_side import busy_server

    from kvmon.app.build import default_gpu_source, default_host_source
    from kvmon.sources.detect import open_source

    out = []
    with busy_server("kvmon-analysis-") as (_work, url, _gen):
        src, gpu, host = open_source(url, timeout_s=3.0), default_gpu_source(), default_host_source()
        try:
            for _ in range(n):
                out.append((src.poll(), gpu.poll() if gpu else None, host.poll() if host else None))
                time.sleep(0.5)
        finally:
            src.close()
    return out


def _shifted(reading: object, dt: float) -> object:
    return None if reading is None else replace(reading, t_monotonic=reading.t_monotonic + dt)  # type: ignore[type-var]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readings", type=int, default=60, help="readings recorded (half a second apart)")
    ap.add_argument("--passes", type=int, default=90, help="times the recording is replayed as one session")
    args = ap.parse_args()
    from kvmon.core.analysis import Analyzer

    readings = record(args.readings)
    span = readings[-1][0].t_monotonic - readings[0][0].t_monotonic + 0.5  # type: ignore[attr-defined]
    analyzer = Analyzer()
    cost: list[tuple[int, float]] = []  # (replies in the session so far, ms)
    for k in range(args.passes):
        for server, gpus, host in readings:
            s, g, h = (_shifted(x, k * span) for x in (server, gpus, host))
            t0 = time.thread_time()
            snap = analyzer.update(s, g, h)  # type: ignore[arg-type]
            ms = (time.thread_time() - t0) * 1e3
            cost.append((snap.latency.replies if snap.latency is not None else 0, ms))
    print(f"kvmon analysis per poll over one long session ({len(cost):,} polls replayed from {len(readings)} real "
          f"readings, thread CPU, warm)")
    print(f"  {'replies so far':>20} {'polls':>7} {'median ms':>10} {'p95 ms':>8}")
    bounds = [(10, 500), (500, 2000), (2000, 4096), (4096, None)]
    for lo, hi in bounds:
        part = sorted(ms for n, ms in cost if n >= lo and (hi is None or n < hi))
        if not part:
            continue
        label = f"{lo:,}–{hi:,}" if hi is not None else f"{lo:,} and more"
        print(f"  {label:>20} {len(part):7,} {statistics.median(part):10.3f} {part[int(len(part) * 0.95)]:8.3f}")
    print("  (the session's reply percentiles are kept over the last 4,096 replies)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
