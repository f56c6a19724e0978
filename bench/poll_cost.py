"""The CPU cost of one ``Monitor.poll``, broken down by part (server source, GPUs, host, analysis).

By default on the simulator, in its own process (``kvmon sim``) so only the monitor's own work is measured, with the
fake NVML's two GPUs as in ``bench/gui_cost.py``. With ``--real``, on the real llama-server of the tests (xllamacpp,
a tiny llama, generating without pause, as in ``bench/side_by_side.py``) with this machine's own device sources,
as the dashboard reads it. CPU is this thread's (``time.thread_time``). Budget on the real server: median ≤ 1 ms.

    python bench/poll_cost.py [--real] [--polls 120] [--interval 0.05] [--profile [--profile-sort tottime]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


class _Timed:
    """Wraps one source so each ``poll`` adds its thread CPU time to a list."""

    def __init__(self, inner: object, sink: list[float]) -> None:
        self.inner = inner
        self.sink = sink

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def poll(self, *args: object) -> object:
        t0 = time.thread_time()
        try:
            return self.inner.poll(*args)  # type: ignore[attr-defined]
        finally:
            self.sink.append(time.thread_time() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polls", type=int, default=120, help="polls measured (after 10 warm-up polls)")
    ap.add_argument("--interval", type=float, default=0.05, help="seconds between polls (wall clock)")
    ap.add_argument("--scenario", default="seed-3090x2")
    ap.add_argument("--profile", action="store_true", help="also print the top functions by cumulative time")
    ap.add_argument("--profile-sort", default="cumulative", help="pstats order of that list (e.g. tottime)")
    ap.add_argument("--profile-dump", help="also write the profile to this file (for pstats)")
    ap.add_argument("--real", action="store_true", help="the real llama-server, generating, and this machine's devices")
    args = ap.parse_args()
    if args.real:
        return _real(args)

    from gui_cost import start_sim

    from kvmon.app.build import default_host_source
    from kvmon.app.monitor import Monitor
    from kvmon.core.analysis import Analyzer
    from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
    from kvmon.sim.permit import allow
    from kvmon.sources.detect import open_source
    from kvmon.sources.nvml import NvmlSource

    allow("benchmark")  # its fake GPUs stand in for the machine

    sim, url = start_sim(args.scenario)
    try:
        gpus = [FakeGpu(name="NVIDIA GeForce RTX 3090", memory_used_bytes=14 * 1024**3,
                        processes=[(sim.pid, 13 * 1024**3)]) for _ in range(2)]
        parts: dict[str, list[float]] = {"server source": [], "GPU source": [], "host source": [], "analysis": []}
        analyzer = Analyzer()
        mon = Monitor(_Timed(open_source(url, backend="llama-server", timeout_s=3.0), parts["server source"]),
                      _Timed(NvmlSource(nvml=FakeNvml(gpus)), parts["GPU source"]),
                      _Timed(default_host_source(), parts["host source"]), analyzer)
        _measure(mon, analyzer, parts, args, args.scenario)
    finally:
        sim.terminate()
        sim.wait(10)
    return 0


def _real(args: argparse.Namespace) -> int:
    """The poll on the real llama-server while it generates, with the devices the dashboard would read here."""
    sys.path.insert(0, str(ROOT / "tests"))
    from side_by_side import busy_server

    from kvmon.app.build import default_gpu_source, default_host_source
    from kvmon.app.monitor import Monitor
    from kvmon.core.analysis import Analyzer
    from kvmon.sources.detect import open_source

    with busy_server("kvmon-poll-") as (_work, url, _gen):
        parts: dict[str, list[float]] = {"server source": [], "GPU source": [], "host source": [], "analysis": []}
        analyzer = Analyzer()
        gpu, host = default_gpu_source(), default_host_source()
        mon = Monitor(_Timed(open_source(url, timeout_s=3.0), parts["server source"]),
                      _Timed(gpu, parts["GPU source"]) if gpu is not None else None,
                      _Timed(host, parts["host source"]) if host is not None else None, analyzer)
        _measure(mon, analyzer, parts, args, "the real llama-server, generating")
    return 0


def _measure(mon: object, analyzer: object, parts: dict[str, list[float]], args: argparse.Namespace,
             what: str) -> None:
    """Poll ``mon`` (10 warm-up polls, then ``args.polls``) and print each part's thread CPU."""
    real_update = analyzer.update  # type: ignore[attr-defined]

    def timed_update(*a: object) -> object:
        t0 = time.thread_time()
        try:
            return real_update(*a)  # type: ignore[arg-type]
        finally:
            parts["analysis"].append(time.thread_time() - t0)

    analyzer.update = timed_update  # type: ignore[attr-defined]
    total: list[float] = []
    for _ in range(10):
        mon.poll()  # type: ignore[attr-defined]
        time.sleep(args.interval)
    for v in parts.values():
        v.clear()
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile(time.thread_time)  # CPU, not wall time: waiting on the server is not cost
    for _ in range(args.polls):
        t0 = time.thread_time()
        if prof is not None:
            prof.enable()
        mon.poll()  # type: ignore[attr-defined]
        if prof is not None:
            prof.disable()
        total.append(time.thread_time() - t0)
        time.sleep(args.interval)
    mon.close()  # type: ignore[attr-defined]
    print(f"kvmon poll cost ({args.polls} polls on {what}, thread CPU)")
    print(f"  {'part':16} {'median ms':>10} {'mean ms':>9} {'p95 ms':>8}")
    for name, v in [*parts.items(), ("whole poll", total)]:
        if not v:
            print(f"  {name:16} (none on this machine)")
            continue
        s = sorted(v)
        p95 = s[min(len(s) - 1, int(len(s) * 0.95))] if s else float("nan")
        reads = f"   ({len(s)} reads in {len(total)} polls)" if len(s) != len(total) else ""
        print(f"  {name:16} {statistics.median(s) * 1e3:10.2f} {statistics.fmean(s) * 1e3:9.2f} {p95 * 1e3:8.2f}"
              f"{reads}")
    print(f"  at 1 Hz: {statistics.fmean(total) * 60:.2f} CPU-s/min; at one poll per 5 s: "
          f"{statistics.fmean(total) * 12:.2f} CPU-s/min")
    print(f"  machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    if prof is not None:
        import pstats

        pstats.Stats(prof).sort_stats(args.profile_sort).print_stats(45)
        if args.profile_dump:
            prof.dump_stats(args.profile_dump)


if __name__ == "__main__":
    sys.exit(main())
