"""Apple Silicon: the one unified-memory device that holds weights and KV, read through macOS's own tools.

``sysctl`` gives the RAM (``hw.memsize``), the chip (``machdep.cpu.brand_string``) and its core counts
(``hw.ncpu``, ``hw.perflevel0.physicalcpu``) that pick the bandwidth bin in kvmon's chip table; ``ioreg`` the GPU
core count where it answers; ``vm_stat`` how much memory is in use and compressed (the pressure before swap). The
GPU's working-set limit — the cliff on unified memory, not PCIe — is Metal's ``recommendedMaxWorkingSetSize``
when ``pyobjc-framework-Metal`` is installed (``pip install kvmon[apple]``), else the ``iogpu.wired_limit_mb``
override when one is set, else an estimate labelled as such (``kvmon.physics.apple_chips``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from kvmon.core.readings import DeviceKind, GpuReading, GpuSetReading
from kvmon.core.units import MIB
from kvmon.physics.apple_chips import apple_bandwidth, apple_chip_name, estimated_working_set_bytes

Runner = Callable[[Sequence[str]], "str | None"]
SYSCTL_NAMES = ("hw.memsize", "machdep.cpu.brand_string", "hw.ncpu", "hw.perflevel0.physicalcpu",
                "hw.perflevel1.physicalcpu", "hw.pagesize")
STATIC_REREAD_S = 60.0  # the working-set limit follows `sysctl iogpu.wired_limit_mb=…`: look again this often
_SYSCTL_LINE = re.compile(r"^([a-z0-9_.]+):\s*(.*)$")
_VM_PAGE = re.compile(r"page size of (\d+) bytes")
_VM_LINE = re.compile(r'^"?([A-Za-z][A-Za-z -]*[a-z])"?:\s+(\d+)\.?\s*$')
_GPU_CORES = re.compile(r'"gpu-core-count"\s*=\s*(\d+)')
NOT_PER_PROCESS = "macOS tells no other process how much GPU memory the model server holds"


def run_command(argv: Sequence[str], timeout_s: float = 2.0) -> str | None:
    """A macOS tool's standard output, or None when it cannot be run or fails to answer in time."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.stdout else None


def parse_sysctl(text: str | None) -> dict[str, str]:
    """``sysctl`` output ("hw.memsize: 68719476736" lines) → {name: value}; other lines are skipped."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        m = _SYSCTL_LINE.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def parse_vm_stat(text: str | None) -> tuple[int | None, dict[str, int]]:
    """``vm_stat`` → (page size in bytes, {"Pages free": n, …}); the page size comes from the header line."""
    page, counts = None, {}
    for line in (text or "").splitlines():
        m = _VM_PAGE.search(line)
        if m:
            page = int(m.group(1))
            continue
        m = _VM_LINE.match(line.strip())
        if m:
            counts[m.group(1)] = int(m.group(2))
    return page, counts


def vm_memory_bytes(page: int | None, counts: dict[str, int]) -> tuple[int | None, int | None]:
    """(available, compressed) bytes from ``vm_stat``: free + inactive + speculative pages are there for the taking;
    the compressor's own pages are memory squeezed to make room (the pressure before swap)."""
    if not page:
        return None, None
    keys = ("Pages free", "Pages inactive", "Pages speculative")
    available = sum(counts[k] for k in keys) * page if all(k in counts for k in keys) else None
    comp = counts.get("Pages occupied by compressor")
    return available, None if comp is None else comp * page


def _int(values: dict[str, str], key: str) -> int | None:
    try:
        return int(values[key])
    except (KeyError, ValueError):
        return None


def metal_working_set_bytes(metal: Any) -> tuple[int | None, str | None]:
    """(recommendedMaxWorkingSetSize, None) from the Metal framework module, or (None, why)."""
    if metal is None:
        return None, "pyobjc-framework-Metal is not installed (pip install 'kvmon[apple]' to read the real limit)"
    try:
        dev = metal.MTLCreateSystemDefaultDevice()
        value = int(dev.recommendedMaxWorkingSetSize())
    except Exception as exc:  # no GPU, an old binding: the estimate stands in
        return None, f"Metal did not answer ({type(exc).__name__}: {exc})"
    return (value, None) if value > 0 else (None, "Metal reports no working-set limit")


def _import_metal() -> Any:
    try:
        import Metal  # type: ignore[import-not-found]  # pyobjc-framework-Metal, an optional extra
    except Exception:  # ImportError, or a broken pyobjc install
        return None
    return Metal


class AppleSource:
    """The Mac's unified memory as one device; on any other system ``poll`` says there is none.

    ``run`` runs a command and returns its output (tests answer from recorded outputs); ``metal`` is the Metal
    module or None (default: imported when installed); ``platform`` defaults to ``sys.platform``.
    """

    _UNSET: Any = object()

    def __init__(self, *, run: Runner = run_command, metal: Any = _UNSET, platform: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._run = run
        self._metal = metal
        self._platform = platform or sys.platform
        self._clock = clock
        self._lock = threading.Lock()
        self._static: dict[str, Any] | None = None
        self._static_at = 0.0

    def close(self) -> None:
        """Nothing is held open between polls."""

    def _read_static(self) -> dict[str, Any]:
        now = self._clock()
        if self._static is not None and 0.0 <= now - self._static_at < STATIC_REREAD_S:
            return self._static
        values = parse_sysctl(self._run(["sysctl", *SYSCTL_NAMES]))
        wired = parse_sysctl(self._run(["sysctl", "iogpu.wired_limit_mb"]))
        cores = _GPU_CORES.search(self._run(["ioreg", "-rc", "AGXAccelerator", "-d", "1"]) or "")
        if self._metal is AppleSource._UNSET:
            self._metal = _import_metal()
        metal_bytes, metal_why = metal_working_set_bytes(self._metal)
        self._static = {"values": values, "wired_limit_mb": _int(wired, "iogpu.wired_limit_mb"),
                        "gpu_cores": int(cores.group(1)) if cores else None, "metal": (metal_bytes, metal_why)}
        self._static_at = now
        return self._static

    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        """The unified-memory device now (never raises)."""
        with self._lock:
            t = self._clock()
            if self._platform != "darwin":
                return GpuSetReading(t_monotonic=t, unavailable_reason="no Apple Silicon (not macOS)")
            st = self._read_static()
            values = st["values"]
            brand = values.get("machdep.cpu.brand_string")
            if apple_chip_name(brand) is None:
                return GpuSetReading(t_monotonic=t, unavailable_reason=(
                    f"no Apple Silicon ({brand or 'sysctl gave no chip name'}: an Intel Mac?)"))
            return GpuSetReading(t_monotonic=t, gpus=(self._device(st, brand),))

    def _device(self, st: dict[str, Any], brand: str | None) -> GpuReading:
        values = st["values"]
        reasons: dict[str, str] = {}
        total = _int(values, "hw.memsize")
        page, counts = parse_vm_stat(self._run(["vm_stat"]))
        page = page or _int(values, "hw.pagesize")
        available, compressed = vm_memory_bytes(page, counts)
        used = total - available if total is not None and available is not None else None
        if used is None:
            reasons["vram_used_bytes"] = reasons["vram_free_bytes"] = "vm_stat gave no page counts"
        bw, note = apple_bandwidth(brand, cpu_cores=_int(values, "hw.ncpu"),
                                   perf_cores=_int(values, "hw.perflevel0.physicalcpu"), gpu_cores=st["gpu_cores"])
        if note:
            reasons["peak_bandwidth_bytes_per_s"] = note
        metal_bytes, metal_why = st["metal"]
        wired_mb = st["wired_limit_mb"]
        if metal_bytes is not None:
            limit, limit_source = metal_bytes, "metal"
        elif wired_mb:
            limit, limit_source = wired_mb * MIB, "sysctl"
            reasons["working_set_limit_bytes"] = f"iogpu.wired_limit_mb = {wired_mb} (Metal not read: {metal_why})"
        elif total is not None:
            limit, limit_source = estimated_working_set_bytes(total), "estimated"
            reasons["working_set_limit_bytes"] = (
                f"estimated ({limit / total:.0%} of RAM, macOS's usual default; real Macs measure 67-84 %): "
                f"{metal_why}")
        else:
            limit, limit_source = None, None
            reasons["working_set_limit_bytes"] = "RAM size unknown"
        if compressed is None:
            reasons["spill_used_bytes"] = "vm_stat gave no compressor figure"
        reasons["server_used_bytes"] = reasons["other_processes_used_bytes"] = NOT_PER_PROCESS
        chip = apple_chip_name(brand) or "Apple Silicon"
        return GpuReading(
            index=0, name=f"Apple {chip}", vram_total_bytes=total, vram_used_bytes=used,
            vram_free_bytes=available if used is not None else None, peak_bandwidth_bytes_per_s=bw,
            bandwidth_source="table" if bw is not None else None, kind=DeviceKind.UNIFIED_MEMORY.value,
            vendor="apple", source="apple", vendor_index=0,
            spill_used_bytes=compressed, working_set_limit_bytes=limit, working_set_source=limit_source,
            reasons=reasons,
        )
