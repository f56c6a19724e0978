"""Host telemetry through psutil: RAM and swap, the model server's resident memory, host memory bandwidth.

Host bandwidth matters when layers or KV live in system RAM (CPU-only machines, spills) and on Apple
unified memory. It comes from the user, else the known-chip table (Apple), else a short copy benchmark
that runs only when asked (``HostSource.measure_bandwidth``) and is cached on disk per machine.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import psutil

from kvmon.core.readings import HostReading
from kvmon.physics.gpus import lookup_gpu
from kvmon.sources.localfile import read_tail
from kvmon.sources.procs import PidTreeCache

CACHE_FILE_NAME = "host_bandwidth.json"
CACHE_MAX_BYTES = 64 * 1024  # the cache is one small JSON record
DEFAULT_BENCH_BYTES = 128 * 1024**2  # per array (two arrays); the copy reads one and writes the other
DEFAULT_BENCH_REPEATS = 4


def default_cache_dir() -> Path:
    """kvmon's per-user cache directory (platformdirs), where the measured bandwidth is kept."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("kvmon", appauthor=False))


def machine_fingerprint() -> str:
    """Identifies this machine well enough that a cache copied from elsewhere is not believed."""
    try:
        ram = psutil.virtual_memory().total
    except Exception:  # psutil can fail in odd containers; the fingerprint is then weaker
        ram = 0
    return f"{platform.node()}|{platform.machine()}|{os.cpu_count()}|{ram}"


def measure_copy_bandwidth_bytes_per_s(size_bytes: int = DEFAULT_BENCH_BYTES,
                                       repeats: int = DEFAULT_BENCH_REPEATS) -> float:
    """Best of ``repeats`` numpy copies of ``size_bytes``: (bytes read + bytes written) / seconds.

    A STREAM-style "copy" figure: a floor for what decode on the CPU can stream from RAM.
    """
    import numpy as np

    n = max(1, int(size_bytes) // 8)
    src = np.ones(n, dtype=np.float64)  # touch every page before timing
    dst = np.zeros(n, dtype=np.float64)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n * 8 / best


def _apple_chip_name() -> str | None:
    if sys.platform != "darwin":
        return None
    try:
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                             timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    name = out.stdout.strip()
    return name or None


class HostSource:
    """Reads RAM, swap and the server's RSS each poll; host bandwidth from user, table or a cached measurement.

    ``cache_dir`` defaults to kvmon's user cache directory; tests pass a temporary one. ``chip_name``
    overrides the detected Apple chip (e.g. "Apple M3 Max") for the table lookup.
    """

    _CHIP_UNSET: Any = object()

    def __init__(
        self,
        user_host_bandwidth_bytes_per_s: float | None = None,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        chip_name: str | None = _CHIP_UNSET,
        include_child_processes: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._user_bw = user_host_bandwidth_bytes_per_s
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._chip_name = chip_name
        self._include_children = include_child_processes
        self._pid_tree = PidTreeCache()
        self._clock = clock
        self._measured: float | None = None
        self._measured_reason: str | None = None
        self._cache_loaded = False

    # -- bandwidth -------------------------------------------------------------------------------------
    @property
    def cache_path(self) -> Path:
        """Where the measured bandwidth is cached."""
        return (self._cache_dir if self._cache_dir is not None else default_cache_dir()) / CACHE_FILE_NAME

    def measure_bandwidth(self, size_bytes: int = DEFAULT_BENCH_BYTES, repeats: int = DEFAULT_BENCH_REPEATS
                          ) -> float:
        """Run the copy benchmark now (well under a second for the default size), cache and return it."""
        bw = measure_copy_bandwidth_bytes_per_s(size_bytes, repeats)
        self._measured, self._measured_reason, self._cache_loaded = bw, None, True
        record = {"bandwidth_bytes_per_s": bw, "size_bytes": int(size_bytes), "repeats": int(repeats),
                  "measured_at_unix_s": time.time(), "machine": machine_fingerprint()}
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(record), encoding="utf-8")
            tmp.replace(self.cache_path)
        except OSError as exc:
            self._measured_reason = f"measured, but the cache could not be written: {exc}"
        return bw

    def _load_cache(self) -> None:
        if self._cache_loaded:
            return
        self._cache_loaded = True
        path = self.cache_path
        try:
            text = read_tail(path, CACHE_MAX_BYTES).decode("utf-8", "replace")  # regular files only, never waiting
        except FileNotFoundError:
            self._measured_reason = "host bandwidth not measured yet (run the host bandwidth benchmark)"
            return
        except OSError as exc:
            self._measured_reason = f"host bandwidth cache unreadable: {exc}"
            return
        try:
            record = json.loads(text)
            bw = float(record["bandwidth_bytes_per_s"])
            machine = str(record["machine"])
        except (ValueError, KeyError, TypeError) as exc:
            self._measured_reason = f"host bandwidth cache unreadable ({type(exc).__name__}): measure again"
            return
        if machine != machine_fingerprint():
            self._measured_reason = "the cached host bandwidth was measured on another machine: measure again"
            return
        if not bw > 0 or bw == float("inf"):
            self._measured_reason = "the cached host bandwidth is not a positive number: measure again"
            return
        self._measured = bw

    def _chip(self) -> str | None:
        if self._chip_name is HostSource._CHIP_UNSET:
            self._chip_name = _apple_chip_name()
        return self._chip_name

    def _bandwidth(self, reasons: dict[str, str]) -> tuple[float | None, str | None]:
        if self._user_bw is not None and self._user_bw > 0:
            return float(self._user_bw), "user"
        spec = lookup_gpu(self._chip())
        if spec is not None and spec.unified_memory:
            return spec.bandwidth_bytes_per_s, "table"
        self._load_cache()
        if self._measured is not None:
            if self._measured_reason:
                reasons["host_bandwidth_bytes_per_s"] = self._measured_reason
            return self._measured, "measured"
        reasons["host_bandwidth_bytes_per_s"] = self._measured_reason or "host bandwidth unknown"
        return None, None

    def close(self) -> None:
        """Nothing to release (psutil holds no handle between polls)."""

    # -- polling ---------------------------------------------------------------------------------------
    def poll(self, server_pids: Collection[int] = ()) -> HostReading:
        """RAM, swap, server RSS and host bandwidth now; never raises (unknowns carry reasons)."""
        reasons: dict[str, str] = {}
        values: dict[str, Any] = {}
        try:
            vm = psutil.virtual_memory()
            values["ram_total_bytes"], values["ram_available_bytes"] = int(vm.total), int(vm.available)
        except Exception as exc:  # psutil raises OSError/RuntimeError in restricted sandboxes
            reasons["ram_total_bytes"] = reasons["ram_available_bytes"] = f"RAM not readable: {exc}"
        try:
            sw = psutil.swap_memory()
            values["swap_total_bytes"], values["swap_used_bytes"] = int(sw.total), int(sw.used)
        except Exception as exc:
            reasons["swap_total_bytes"] = reasons["swap_used_bytes"] = f"swap not readable: {exc}"
        values["server_rss_bytes"] = self._server_rss(server_pids, reasons)
        bw, source = self._bandwidth(reasons)
        return HostReading(t_monotonic=self._clock(), host_bandwidth_bytes_per_s=bw, host_bandwidth_source=source,
                           reasons=reasons, **values)

    def _server_rss(self, server_pids: Collection[int], reasons: dict[str, str]) -> int | None:
        key = "server_rss_bytes"
        if not server_pids:
            reasons[key] = "the model server's process is not known"
            return None
        pids = self._pid_tree.expand(server_pids) if self._include_children else frozenset(server_pids)
        total, alive = 0, 0
        for pid in sorted(pids):
            try:
                total += int(psutil.Process(pid).memory_info().rss)
                alive += 1
            except psutil.NoSuchProcess:
                continue  # it exited: it holds nothing
            except psutil.AccessDenied:
                reasons[key] = f"no permission to read process {pid}'s memory"
                return None
            except Exception as exc:
                reasons[key] = f"process {pid}'s memory not readable: {exc}"
                return None
        if alive == 0:
            reasons[key] = "the model server's process has exited"
            return None
        return total
