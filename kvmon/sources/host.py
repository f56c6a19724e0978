"""Host telemetry through psutil: RAM and swap, the model server's resident memory, host memory bandwidth.

Host RAM is a device too: where a CPU-only server keeps weights and KV, where layers of a partial offload and
spilled KV live, and on Apple Silicon the unified memory itself. Its bandwidth comes from the user, else the
chip table (Apple, by bin), else a short streaming-copy probe measured once per machine (well under a second;
``kvmon.app.monitor.Monitor`` runs it only while no slot decodes) and kept in kvmon's settings folder with the date,
else the peak of the memory the system reports (udev's DMI database, kind × speed × channels), labelled so.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import psutil

from kvmon.core.readings import HostReading
from kvmon.physics.apple_chips import apple_bandwidth, apple_chip_name
from kvmon.physics.host_memory import memory_kind, table_host_bandwidth
from kvmon.sources.apple import run_command
from kvmon.sources.localfile import open_regular, read_tail
from kvmon.sources.procs import PidTreeCache
from kvmon.sources.rapl import cpu_energy

CACHE_FILE_NAME = "host_bandwidth.json"
CACHE_MAX_BYTES = 64 * 1024  # the cache is one small JSON record
DEFAULT_BENCH_BYTES = 128 * 1024**2  # per array (two arrays); the copy reads one and writes the other
DEFAULT_BENCH_REPEATS = 4
UDEV_DMI_DB = "run/udev/data/+dmi:id"  # systemd's dmi_memory_id properties, readable without root


def default_cache_dir() -> Path:
    """kvmon's per-user settings directory (platformdirs), where the measured bandwidth is kept."""
    import platformdirs

    return Path(platformdirs.user_config_dir("kvmon", appauthor=False))


def parse_dmi_memory(text: str) -> tuple[str | None, float | None, int | None, int]:
    """udev's DMI properties (``E:MEMORY_DEVICE_<n>_<KEY>=<value>``) → (kind, MT/s, channels, modules).

    The configured speed is the one the controller runs (the rated one is only the module's label); channels are
    the distinct ``CHANNEL x`` bank locators where the firmware names them, else one per populated module.
    """
    slots: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        line = line.strip().removeprefix("E:").strip()
        if not line.startswith("MEMORY_DEVICE_"):
            continue
        key, sep, value = line.partition("=")
        index, _, name = key.removeprefix("MEMORY_DEVICE_").partition("_")
        if sep and index.isdigit():
            slots.setdefault(index, {})[name] = value.strip()
    present = [d for d in slots.values() if d.get("SIZE", "0").isdigit() and int(d.get("SIZE", "0")) > 0]
    kinds = {memory_kind(d.get("TYPE")) for d in present} - {None}
    speeds = []
    for d in present:
        for key in ("CONFIGURED_SPEED_MTS", "SPEED_MTS"):
            if d.get(key, "").isdigit() and int(d[key]) > 0:
                speeds.append(int(d[key]))
                break
    banks = {d.get("BANK_LOCATOR", "").upper().split("CHANNEL")[-1].strip() for d in present
             if "CHANNEL" in d.get("BANK_LOCATOR", "").upper()}
    channels = len(banks) if banks else (len(present) or None)
    kind = kinds.pop() if len(kinds) == 1 else None
    return kind, float(min(speeds)) if speeds else None, channels, len(present)


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


def _sysctl(*names: str) -> list[str]:
    return [line.strip() for line in (run_command(["sysctl", "-n", *names]) or "").splitlines()]


def _apple_chip_name() -> str | None:
    if sys.platform != "darwin":
        return None
    values = _sysctl("machdep.cpu.brand_string")
    return values[0] if values and values[0] else None


def _cpu_name(root: Path) -> str | None:
    """The CPU's model name: /proc/cpuinfo on Linux, the brand string on macOS."""
    if sys.platform == "darwin":
        return _apple_chip_name()
    try:
        with open_regular(root / "proc" / "cpuinfo") as f:
            text = f.read(256 * 1024).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "Model"):
            return value.strip() or None
    return None


class HostSource:
    """Reads RAM, swap and the server's RSS each poll; host bandwidth from user, table or a cached measurement.

    ``cache_dir`` defaults to kvmon's user settings directory; tests pass a temporary one. ``chip_name``
    overrides the detected Apple chip (e.g. "Apple M3 Max") for the table lookup. ``auto_probe``: whether
    ``probe_due`` may ask for the one-time measurement (the session's host sources do; a plain one does not).
    ``system_root`` is where ``/proc`` and ``/run/udev`` are read (tests give a fixture tree).
    """

    _CHIP_UNSET: Any = object()

    def __init__(
        self,
        user_host_bandwidth_bytes_per_s: float | None = None,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        chip_name: str | None = _CHIP_UNSET,
        include_child_processes: bool = True,
        auto_probe: bool = False,
        system_root: str | os.PathLike[str] = "/",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._user_bw = user_host_bandwidth_bytes_per_s
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._chip_name = chip_name
        self.auto_probe = auto_probe
        self._root = Path(system_root)
        self._pid_tree = PidTreeCache(include_children=include_child_processes)
        self._clock = clock
        self._measured: float | None = None
        self._measured_at: float | None = None
        self._measured_reason: str | None = None
        self._cache_loaded = False
        self._probe_attempted = False
        self._static: tuple[str | None, str | None, float | None, str | None] | None = None
        self._apple_bw: tuple[float | None, str | None] | None = None
        self._cpu_primed = False  # psutil's CPU shares are since the previous call: the first one says nothing
        self._server_procs: dict[int, psutil.Process] = {}

    # -- bandwidth -------------------------------------------------------------------------------------
    @property
    def cache_path(self) -> Path:
        """Where the measured bandwidth is cached."""
        return (self._cache_dir if self._cache_dir is not None else default_cache_dir()) / CACHE_FILE_NAME

    def measure_bandwidth(self, size_bytes: int = DEFAULT_BENCH_BYTES, repeats: int = DEFAULT_BENCH_REPEATS
                          ) -> float:
        """Run the copy benchmark now (well under a second for the default size), cache and return it."""
        self._probe_attempted = True
        bw = measure_copy_bandwidth_bytes_per_s(size_bytes, repeats)
        self._measured, self._measured_reason, self._cache_loaded = bw, None, True
        self._measured_at = time.time()
        record = {"bandwidth_bytes_per_s": bw, "size_bytes": int(size_bytes), "repeats": int(repeats),
                  "measured_at_unix_s": self._measured_at, "machine": machine_fingerprint()}
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
            self._measured_reason = ("host bandwidth not measured yet (kvmon measures it once, while no slot decodes; "
                                     "or set it in settings or with --bandwidth host=GB/s)")
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
        at = record.get("measured_at_unix_s") if isinstance(record, dict) else None
        self._measured_at = float(at) if isinstance(at, (int, float)) else None

    def _chip(self) -> str | None:
        if self._chip_name is HostSource._CHIP_UNSET:
            self._chip_name = _apple_chip_name()
        return self._chip_name

    def _apple(self) -> tuple[float | None, str | None]:
        """The Apple chip's bandwidth by bin (core counts from sysctl on a Mac, once), or (None, None) elsewhere."""
        if self._apple_bw is None:
            chip = self._chip()
            if apple_chip_name(chip) is None:
                self._apple_bw = (None, None)
            else:
                cores = _sysctl("hw.ncpu", "hw.perflevel0.physicalcpu") if sys.platform == "darwin" else []
                ints = [int(c) if c.isdigit() else None for c in cores] + [None, None]
                self._apple_bw = apple_bandwidth(chip, cpu_cores=ints[0], perf_cores=ints[1])
        return self._apple_bw

    def _system(self) -> tuple[str | None, str | None, float | None, str | None]:
        """(CPU name, memory type, table bandwidth, how it was made), read once: none of it changes while running."""
        if self._static is None:
            kind = mts = channels = None
            with contextlib.suppress(OSError), open_regular(self._root / UDEV_DMI_DB) as f:
                kind, mts, channels, _n = parse_dmi_memory(f.read(256 * 1024).decode("utf-8", "replace"))
            bw, how = table_host_bandwidth(kind, mts, channels)
            mem = f"{kind}-{mts:.0f}" if kind and mts else kind
            self._static = (_cpu_name(self._root), mem, bw, how)
        return self._static

    def probe_due(self) -> bool:
        """Whether the one-time measurement should run now: allowed, no value the user set or the chip table has,
        nothing measured on this machine yet, and not tried already in this process."""
        if not self.auto_probe or self._probe_attempted or (self._user_bw is not None and self._user_bw > 0):
            return False
        if self._apple()[0] is not None:
            return False
        self._load_cache()
        return self._measured is None

    def _bandwidth(self, reasons: dict[str, str]) -> tuple[float | None, str | None, str | None]:
        """(bytes/s, source, note): the user's, the chip table's, the measurement's, or the memory table's."""
        if self._user_bw is not None and self._user_bw > 0:
            return float(self._user_bw), "user", None
        apple_bw, apple_note = self._apple()
        if apple_bw is not None:
            return apple_bw, "table", apple_note
        self._load_cache()
        if self._measured is not None:
            if self._measured_reason:
                reasons["host_bandwidth_bytes_per_s"] = self._measured_reason
            return self._measured, "measured", None
        _cpu, _mem, table_bw, how = self._system()
        if table_bw is not None:
            return table_bw, "table", f"peak of the reported memory, not measured yet: {how}"
        reasons["host_bandwidth_bytes_per_s"] = self._measured_reason or "host bandwidth unknown"
        if how:
            reasons["host_bandwidth_bytes_per_s"] += f"; {how}"
        return None, None, None

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
        values.update(self._cpu_load(server_pids, reasons))
        bw, source, note = self._bandwidth(reasons)
        cpu, mem, _bw, _how = self._system()
        energy, wrap, why = cpu_energy(self._root)
        if why:
            reasons["cpu_energy_j"] = why
        return HostReading(t_monotonic=self._clock(), host_bandwidth_bytes_per_s=bw, host_bandwidth_source=source,
                           host_bandwidth_measured_at_unix_s=self._measured_at if source == "measured" else None,
                           host_bandwidth_note=note, memory_type=mem, cpu_name=cpu, cpu_energy_j=energy,
                           cpu_energy_range_j=wrap, reasons=reasons, **values)

    def cpu_energy(self) -> tuple[float | None, float | None, str | None]:
        """The CPU package's energy counter now (one file read: polled every time, unlike the rest of the host)."""
        return cpu_energy(self._root)

    def _cpu_load(self, server_pids: Collection[int], reasons: dict[str, str]) -> dict[str, Any]:
        """The logical CPUs, how many of them every process and the model server's kept busy since the last poll
        (in cores); unknown on the first poll (psutil measures from one call to the next)."""
        out: dict[str, Any] = {"cpu_count": psutil.cpu_count(logical=True)}
        try:
            busy = psutil.cpu_percent(interval=None) / 100.0 * (out["cpu_count"] or 0)
        except Exception as exc:
            reasons["cpu_busy_cores"] = reasons["server_cpu_cores"] = f"CPU load not readable: {exc}"
            return out
        pids = self._pid_tree.expand(server_pids)
        server = 0.0
        for pid in pids:
            proc = self._server_procs.get(pid)
            try:
                if proc is None:
                    proc = self._server_procs[pid] = psutil.Process(pid)
                    proc.cpu_percent(interval=None)  # its first share is since nothing: 0
                else:
                    server += proc.cpu_percent(interval=None) / 100.0
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self._server_procs.pop(pid, None)
        for gone in set(self._server_procs) - set(pids):
            del self._server_procs[gone]
        primed, self._cpu_primed = self._cpu_primed, True
        if not primed:
            reasons["cpu_busy_cores"] = reasons["server_cpu_cores"] = "the CPU load is measured from the next poll"
            return out
        out["cpu_busy_cores"] = busy
        if pids:
            out["server_cpu_cores"] = server
        else:
            reasons["server_cpu_cores"] = "the model server's process is not known"
        return out

    def _server_rss(self, server_pids: Collection[int], reasons: dict[str, str]) -> int | None:
        key = "server_rss_bytes"
        if not server_pids:
            reasons[key] = "the model server's process is not known"
            return None
        pids = self._pid_tree.expand(server_pids)
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
