"""GPU smoke check: every GPU's full kvmon reading as JSON, then consistency checks against NVML and the table.

Needs only ``pip install nvidia-ml-py`` and this repository (kvmon is put on ``sys.path`` from here).
Checks: used + reserved + free ≈ total; NVML's clock × bus width within 10% of the known-GPU table for
known names; identity present; every unknown field says why; kvmon's memory figures match a direct NVML
call. With PyTorch or CuPy installed it also streams device memory for a few seconds and reports the copy
bandwidth, GPM's DRAM utilisation and this process's attributed VRAM (``--no-load`` skips that).
Exits 0 when all checks pass or there is no NVIDIA GPU (with a message), 1 when a check fails.
Runs in well under a minute.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvmon.core.report_json import json_safe
from kvmon.physics.gpus import BANDWIDTH_TOLERANCE, lookup_gpu
from kvmon.sources.nvml import FIELDS_NOT_READ, NvmlSource, nvml_peak_bandwidth_bytes_per_s

GIB = 1024**3


class Checks:
    """Collects named pass/fail/info lines and prints them."""

    def __init__(self) -> None:
        self.failed = 0
        self.lines: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        self.lines.append(f"  [{'ok' if ok else 'FAIL'}] {what}")
        self.failed += 0 if ok else 1

    def info(self, what: str) -> None:
        self.lines.append(f"  [info] {what}")


def _check_gpu(g: Any, raw_memory: Any, checks: Checks) -> None:
    checks.lines.append(f"GPU {g.index}: {g.name} ({g.uuid})")
    checks.check(bool(g.name) and bool(g.uuid), "name and UUID read")
    if g.vram_total_bytes is not None and g.vram_used_bytes is not None and g.vram_free_bytes is not None:
        total = g.vram_total_bytes
        summed = g.vram_used_bytes + (g.vram_reserved_bytes or 0) + g.vram_free_bytes
        checks.check(abs(summed - total) <= 0.01 * total,
                     f"used {g.vram_used_bytes / GIB:.2f} + reserved {(g.vram_reserved_bytes or 0) / GIB:.2f} + "
                     f"free {g.vram_free_bytes / GIB:.2f} = {summed / GIB:.2f} GiB ≈ total {total / GIB:.2f} GiB")
    else:
        checks.info(f"memory not readable: {g.reasons.get('vram_total_bytes')}")
    if raw_memory is not None and g.vram_total_bytes is not None:
        checks.check(int(raw_memory.total) == g.vram_total_bytes, "total matches a direct nvmlDeviceGetMemoryInfo")
    from_nvml = nvml_peak_bandwidth_bytes_per_s(g.mem_clock_max_mhz, g.bus_width_bits)
    spec = lookup_gpu(g.name)
    if from_nvml is not None:
        checks.info(f"NVML: max mem clock {g.mem_clock_max_mhz:.0f} MHz × {g.bus_width_bits} bit → "
                    f"{from_nvml / 1e9:.0f} GB/s")
    if spec is not None and from_nvml is not None:
        off = from_nvml / spec.bandwidth_bytes_per_s - 1
        checks.check(abs(off) <= BANDWIDTH_TOLERANCE,
                     f"NVML peak within 10% of the table ({spec.name}: {spec.bandwidth_bytes_per_s / 1e9:.0f} GB/s;"
                     f" off by {off * 100:+.1f}%)")
    elif spec is None:
        checks.info(f"'{g.name}' is not in the known-GPU table: peak bandwidth not cross-checked")
    if g.peak_bandwidth_bytes_per_s is not None:
        checks.info(f"kvmon uses {g.peak_bandwidth_bytes_per_s / 1e9:.0f} GB/s (source: {g.bandwidth_source})")
    checks.info(f"PCIe gen {g.pcie.generation} x{g.pcie.width} now, gen {g.pcie.max_generation} x{g.pcie.max_width} "
                f"max → {(g.pcie.bandwidth_bytes_per_s or 0) / 1e9:.1f} GB/s per direction; "
                f"TX {g.pcie_tx_bytes_per_s} B/s, RX {g.pcie_rx_bytes_per_s} B/s")
    flat = {k: v for k, v in dataclasses.asdict(g).items() if k not in ("reasons", "pcie")}
    flat.update({f"pcie.{k}": v for k, v in dataclasses.asdict(g.pcie).items()})
    silent = [k for k, v in flat.items() if v is None and k != "bandwidth_source" and k not in FIELDS_NOT_READ
              and not (g.reasons.get(k) or g.reasons.get(k.split(".")[0]))]
    checks.check(not silent, "every unknown field gives a reason" + (f" (silent: {silent})" if silent else ""))
    for key, why in sorted(g.reasons.items()):
        checks.info(f"{key}: {why}")


def _raw_memory(index: int) -> Any:
    try:
        import pynvml

        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
    except Exception:
        return None


def _copy_loop(empty: Any, copy: Any, sync: Any, seconds: float, result: dict[str, Any]) -> None:
    """Copy one 2 GiB device buffer into another for ``seconds``; store read + write bytes per second."""
    n = 2 * GIB // 4
    a, b = empty(n), empty(n)
    copy(b, a)
    sync()
    t0, copies = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        copy(b, a)
        copies += 1
        if copies % 20 == 0:
            sync()
    sync()
    result["copy_bytes_per_s"] = 2 * n * 4 * copies / (time.perf_counter() - t0)


def _start_load(seconds: float) -> tuple[threading.Thread, dict[str, Any]] | None:
    """Stream device memory with torch or cupy in a thread; None when neither is usable."""
    result: dict[str, Any] = {}
    args: tuple[Any, Any, Any] | None = None
    try:
        import torch

        if torch.cuda.is_available():
            args = (lambda n: torch.empty(n, dtype=torch.float32, device="cuda"),
                    lambda dst, src: dst.copy_(src), torch.cuda.synchronize)
            result["lib"] = "torch"
    except Exception:  # not installed, or installed without working CUDA libraries
        args = None
    if args is None:
        try:
            import cupy  # type: ignore[import-not-found]

            def _cupy_copy(dst: Any, src: Any) -> None:
                dst[...] = src

            args = (lambda n: cupy.empty(n, dtype=cupy.float32), _cupy_copy,
                    lambda: cupy.cuda.Device().synchronize())
            result["lib"] = "cupy"
        except Exception:
            return None
    empty, copy, sync = args

    def guarded() -> None:
        try:
            _copy_loop(empty, copy, sync, seconds, result)
        except Exception as exc:  # report, do not crash the smoke check
            result["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    return thread, result


def _host_info(checks: Checks) -> None:
    """Host RAM and a measured host copy bandwidth, when psutil and numpy are installed (optional)."""
    import tempfile

    try:
        from kvmon.sources.host import HostSource

        with tempfile.TemporaryDirectory(prefix="kvmon-smoke-") as cache:
            host = HostSource(cache_dir=cache)
            t0 = time.perf_counter()
            bw = host.measure_bandwidth()
            took = time.perf_counter() - t0
            r = host.poll(server_pids=(os.getpid(),))
    except ImportError as exc:
        checks.info(f"host: skipped ({exc})")
        return
    ram, avail = (r.ram_total_bytes or 0) / GIB, (r.ram_available_bytes or 0) / GIB
    checks.info(f"host: RAM {ram:.1f} GiB, available {avail:.1f} GiB; copy bandwidth {bw / 1e9:.1f} GB/s "
                f"(measured in {took:.2f} s; source {r.host_bandwidth_source})")


def main(argv: list[str] | None = None) -> int:
    """Poll every GPU, print the readings as JSON and the checks; 1 when a consistency check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-load", action="store_true", help="skip the optional device-memory load (torch/cupy)")
    parser.add_argument("--load-seconds", type=float, default=4.0)
    parser.add_argument("--no-host", action="store_true", help="skip host RAM and the host copy benchmark")
    parser.add_argument("--fake", action="store_true", help="run the checks on kvmon's fake NVML (a dry run)")
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    try:
        import pynvml  # noqa: F401
    except ImportError:
        print("gpu_smoke: nvidia-ml-py is not installed (pip install nvidia-ml-py); nothing to check.")
        return 0
    fake = None
    if args.fake:
        from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
        from kvmon.sim.permit import allow

        allow("benchmark")  # its fake GPUs stand in for the machine

        fake = FakeNvml([FakeGpu(memory_used_bytes=3 * GIB, memory_reserved_bytes=GIB // 2,
                                 processes=[(os.getpid(), 3 * GIB)]),
                         FakeGpu(name="NVIDIA H200", memory_total_bytes=141 * 10**9, mem_clock_max_mhz=3201,
                                 bus_width_bits=6144, dram_bw_util_percent=12.0)])
        args.no_load = True
    source = NvmlSource(fake)
    pid = os.getpid()
    t0 = time.perf_counter()
    first = source.poll(server_pids=(pid,))
    first_ms = (time.perf_counter() - t0) * 1000
    if first.unavailable_reason is not None:
        print(f"gpu_smoke: {first.unavailable_reason}. Nothing to check on this machine.")
        return 0
    time.sleep(1.0)  # GPM needs two samples some time apart
    poll_ms: list[float] = []
    for _ in range(5):
        t0 = time.perf_counter()
        reading = source.poll(server_pids=(pid,))
        poll_ms.append((time.perf_counter() - t0) * 1000)
    print(json.dumps(json_safe(dataclasses.asdict(reading)), indent=2, allow_nan=False))

    checks = Checks()
    checks.lines.append(f"driver {reading.driver_version}; {len(reading.gpus)} GPU(s); first poll {first_ms:.1f} ms "
                        f"(NVML init included), then {min(poll_ms):.1f}–{max(poll_ms):.1f} ms per poll of all GPUs")
    for g in reading.gpus:
        _check_gpu(g, None if fake is not None else _raw_memory(g.index), checks)

    load = None if args.no_load else _start_load(args.load_seconds)
    if load is None:
        checks.info("no load run (--no-load, or neither torch nor cupy with CUDA is installed)")
    else:
        thread, result = load
        samples = []
        deadline = time.perf_counter() + args.load_seconds + 30
        time.sleep(min(1.5, args.load_seconds / 2))
        while thread.is_alive() and time.perf_counter() < deadline:
            samples.append(source.poll(server_pids=(pid,)).gpus[0])
            time.sleep(0.5)
        thread.join(timeout=max(0.0, deadline - time.perf_counter()))
        if "error" in result:
            checks.info(f"load failed: {result['error']}")
        elif samples and "copy_bytes_per_s" in result:
            g = samples[-1]
            peak = g.peak_bandwidth_bytes_per_s
            copy = result["copy_bytes_per_s"]
            share = f" = {copy / peak * 100:.0f}% of kvmon's peak" if peak else ""
            checks.info(f"{result['lib']} device copy on GPU 0: {copy / 1e9:.0f} GB/s (read + write){share}")
            dram = [s.dram_bandwidth_util_percent for s in samples if s.dram_bandwidth_util_percent is not None]
            busy = [s.memory_busy_percent for s in samples if s.memory_busy_percent is not None]
            checks.info(f"during the load: GPM DRAM utilisation {dram or g.reasons.get('dram_bandwidth_util_percent')}"
                        f"; memory duty cycle {busy}")
            held = max((s.server_used_bytes or 0) for s in samples)
            checks.info(f"this process (as the 'server') holds {held / GIB:.2f} GiB on GPU 0 per NVML "
                        f"({g.reasons.get('server_used_bytes', 'attributed')})")
            checks.check(any(s.vram_used_bytes is not None for s in samples), "readings kept coming during the load")
    source.close()
    if not args.no_host:
        _host_info(checks)
    checks.lines.append(f"total {time.perf_counter() - t_start:.1f} s; {checks.failed} check(s) failed")
    print("\n".join(checks.lines))
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
