"""What a depth sweep costs on the real llama-server of the tests (llama.cpp b11549 in xllamacpp, the tiny llama
model trained for 32K, one thread, -c 16384): the wall time of ``kvmon sweep --to 8192``, the prompt tokens the server
processed against the depth reached (the cache carrying each step: the server's own log and /metrics), and kvmon's
own CPU while it ran (this process: the sweep runs in it; the server is a process of its own).

Prints numbers and the sweep's table; asserts nothing. Run: python bench/sweep_cost.py [--to 8192] [--generate 64]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
from real_llama_server import RealLlamaServer  # noqa: E402
from tiny_gguf import make_gguf  # noqa: E402

from kvmon.app.build import open_monitor  # noqa: E402
from kvmon.app.sweep import DepthSweep, target_for  # noqa: E402
from kvmon.core.sweep import plan_sweep  # noqa: E402
from kvmon.core.sweep_table import summary_lines  # noqa: E402
from kvmon.sources.backends import by_name  # noqa: E402

PROMPT = re.compile(r"prompt eval time =\s+[0-9.]+ ms /\s+(\d+) tokens")


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--to", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--generate", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvmon-sweep-bench-") as d:
        model = make_gguf("llama-long", Path(d))
        server = RealLlamaServer(model, ["-c", "16384", "-np", "1", "--metrics"], Path(d) / "server.log").start()
        try:
            monitor = open_monitor(server.url, atlas=False)
            monitor.poll()
            snap = monitor.poll()
            plan = plan_sweep(snap, by_name(str(snap.backend)), args.to, args.steps, args.generate)
            if plan.refusal:
                sys.exit(f"refused: {plan.refusal}")
            load = os.getloadavg()
            cpu0, t0 = _cpu_s(), time.monotonic()
            result = DepthSweep(target_for(monitor, snap), plan, snap).run()
            wall, cpu = time.monotonic() - t0, _cpu_s() - cpu0
            monitor.close()
            log_read = sum(int(m.group(1)) for m in map(PROMPT.search, server.log_lines()) if m)
            metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
            counted = re.search(r"^llamacpp:prompt_tokens_total (\S+)", metrics, re.M)
            cached = re.search(r"^llamacpp:prompt_tokens_cached_total (\S+)", metrics, re.M)
        finally:
            server.stop()
    print("\n".join(summary_lines(result)))
    print()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    print(f"sweep to {result.depth_reached:,} tokens ({len(result.rows)} depths, {args.generate} generated at each): "
          f"{wall:.1f} s wall, outcome {result.outcome}")
    print(f"prompt tokens the server processed: {log_read:,} (its log), "
          f"{float(counted.group(1)) if counted else float('nan'):,.0f} (/metrics prompt_tokens_total), "
          f"{float(cached.group(1)) if cached else float('nan'):,.0f} reused from its cache; "
          f"{log_read / max(1, result.depth_reached):.3f}× the depth reached")
    print(f"kvmon's own CPU during the sweep: {cpu:.2f} s ({100 * cpu / wall:.1f}% of one core)")


if __name__ == "__main__":
    main()
