"""GPU telemetry through NVML (nvidia-ml-py's ``pynvml``): VRAM, peak bandwidth, PCIe, processes, power.

Every NVML call is wrapped: an unsupported, forbidden or failing query makes that one field ``None`` with
the reason in ``GpuReading.reasons`` and the reading survives; a lost GPU degrades to its index and
identity; no driver at all gives an empty ``GpuSetReading`` whose ``unavailable_reason`` starts with
"no NVIDIA GPU", and kvmon runs on without it.

Longer than most modules because NVML has many queries (memory v1/v2, clocks, PCIe counters and samples,
process lists, power, GPM), each read through the same guarded path; it is still one job, one GPU library.
The peak bandwidth is chosen by ``kvmon.physics.gpus.choose_peak_bandwidth``, the server's process tree comes
from ``kvmon.sources.procs``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Any

from kvmon.core.readings import DeviceKind, GpuProcess, GpuReading, GpuSetReading, PcieLink
from kvmon.physics import gpus
from kvmon.physics.gpus import pcie_bandwidth_bytes_per_s
from kvmon.sources.nvml_calls import (
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    LIB_RM_VERSION_MISMATCH,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    NOT_FOUND,
    PERMANENT,
    V2_ABSENT,
    DeviceState,
    GpmState,
    GpuRead,
    Lost,
    describe,
    nvml_code,
    text_of,
)
from kvmon.sources.nvml_clocks import EVENT_REASONS, THROTTLE_REASONS, clock_reasons, processes_busy
from kvmon.sources.procs import PidTreeCache

# nvmlDeviceGetPcieThroughput counts KB/s; NVIDIA's tools (and nvitop) treat that KB as 1024 bytes.
PCIE_THROUGHPUT_BYTES_PER_KB = 1024
# With the server known, an empty NVML process list while this much VRAM is in use is not believable.
_EMPTY_PROCESS_LIST_SUSPECT_BYTES = 512 * 1024**2

_GPU_FIELDS: tuple[str, ...] = (
    "name", "uuid", "pci_bus_id", "vram_total_bytes", "vram_used_bytes", "vram_free_bytes", "vram_reserved_bytes",
    "gpu_busy_percent", "memory_busy_percent", "mem_clock_mhz", "mem_clock_max_mhz", "core_clock_mhz",
    "core_clock_max_mhz", "clock_reasons", "bus_width_bits",
    "peak_bandwidth_bytes_per_s", "dram_bandwidth_util_percent", "pcie.generation", "pcie.width",
    "pcie.max_generation", "pcie.max_width", "pcie.bandwidth_bytes_per_s", "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s", "power_w", "power_limit_w", "energy_j", "temperature_c", "processes", "server_used_bytes",
    "other_processes_used_bytes", "other_processes_busy_percent",
)

# Fields of the device reading that other device sources fill and NVML has no query for (GTT spill, unified
# memory's working set, memory type): always None here, and not a gap to explain.
FIELDS_NOT_READ: frozenset[str] = frozenset({"memory_type", "spill_total_bytes", "spill_used_bytes",
                                             "server_spill_bytes", "working_set_limit_bytes", "working_set_source"})


# why nvmlInit failed, in words, for the codes that have a plain cause
_INIT_FAILURES = {LIBRARY_NOT_FOUND: "the NVML library was not found (no NVIDIA driver on this machine)",
                  DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded",
                  LIB_RM_VERSION_MISMATCH: "NVML and the kernel driver versions differ (reboot after a driver update)",
                  NO_PERMISSION: "no permission to use NVML"}


def nvml_peak_bandwidth_bytes_per_s(mem_clock_max_mhz: float | None, bus_width_bits: int | None) -> float | None:
    """Peak DRAM bandwidth from NVML's max memory clock: 2 × MHz × 1e6 × bus bits / 8 (None when unknown)."""
    if not mem_clock_max_mhz or not bus_width_bits or mem_clock_max_mhz <= 0 or bus_width_bits <= 0:
        return None
    return 2.0 * float(mem_clock_max_mhz) * 1e6 * float(bus_width_bits) / 8.0


def pci_bus_id(nvml_bus_id: Any) -> str | None:
    """NVML's "00000000:01:00.0" as llama.cpp and Linux print it: "0000:01:00.0" (lower case)."""
    text = text_of(nvml_bus_id).strip().strip("\x00").lower()
    parts = text.split(":")
    if len(parts) != 3:
        return text or None
    return f"{parts[0][-4:].rjust(4, '0')}:{parts[1]}:{parts[2]}"


def choose_peak_bandwidth(
    name: str | None,
    mem_clock_max_mhz: float | None,
    bus_width_bits: int | None,
    user_bandwidth_bytes_per_s: float | None = None,
) -> tuple[float | None, str | None, str | None]:
    """A GPU's peak bandwidth from NVML's clock × bus width: ``kvmon.physics.gpus.choose_peak_bandwidth``'s order
    (the user's value, then NVML's checked against the table, then the table)."""
    return gpus.choose_peak_bandwidth(name, nvml_peak_bandwidth_bytes_per_s(mem_clock_max_mhz, bus_width_bits),
                                      user_bandwidth_bytes_per_s)


class NvmlSource:
    """Reads every NVIDIA GPU through NVML; ``nvml=None`` imports pynvml lazily, tests pass a FakeNvml.

    ``user_bandwidth_bytes_per_s`` maps a GPU index to the peak bandwidth the user set: it wins over NVML's
    figure and the known-GPU table (``kvmon.physics.gpus.choose_peak_bandwidth``). ``poll(server_pids)`` splits
    per-process VRAM into the model server's share (those pids and their children) and everything else's.
    """

    def __init__(
        self,
        nvml: Any = None,
        *,
        user_bandwidth_bytes_per_s: Mapping[int, float] | None = None,
        include_child_processes: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        self._user_bw = dict(user_bandwidth_bytes_per_s or {})
        self._pid_tree = PidTreeCache(include_children=include_child_processes)
        self._clock = clock
        self._lock = threading.Lock()
        self._initialized = False
        self._unavailable_reason: str | None = None
        self._driver_version: str | None = None
        self._devices: dict[int, DeviceState] = {}

    # -- lifecycle -------------------------------------------------------------------------------------
    def _ensure_init(self) -> str | None:
        """Initialise NVML once; returns the reason there is no GPU reading, or None when ready."""
        if self._unavailable_reason is not None:
            return self._unavailable_reason
        if self._initialized:
            return None
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py: imported only when GPU telemetry is wanted
            except ImportError as exc:
                self._unavailable_reason = f"no NVIDIA GPU: nvidia-ml-py is not installed ({exc})"
                return self._unavailable_reason
            self._nvml = pynvml
        try:
            self._nvml.nvmlInit()
        except Exception as exc:
            why = _INIT_FAILURES.get(nvml_code(exc) or 0, f"NVML did not start: {describe(exc)}")
            self._unavailable_reason = f"no NVIDIA GPU: {why}"
            return self._unavailable_reason
        self._initialized = True
        try:
            self._driver_version = text_of(self._nvml.nvmlSystemGetDriverVersion())
        except Exception:  # the version is a nicety; its absence costs nothing
            self._driver_version = None
        return None

    def close(self) -> None:
        """Free GPM buffers and shut NVML down; a later poll starts it again."""
        with self._lock:
            if not self._initialized:
                return
            for state in self._devices.values():
                self._free_gpm(state)
            self._devices.clear()
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._initialized = False

    def _free_gpm(self, state: DeviceState) -> None:
        for sample in state.gpm.samples:
            with contextlib.suppress(Exception):  # freeing on a lost GPU or at exit may fail; nothing else to do
                self._nvml.nvmlGpmSampleFree(sample)
        state.gpm = GpmState()

    # -- polling ---------------------------------------------------------------------------------------
    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        """Read all GPUs now; never raises (failures become None fields with reasons)."""
        with self._lock:
            t = self._clock()
            reason = self._ensure_init()
            if reason is not None:
                return GpuSetReading(t_monotonic=t, unavailable_reason=reason)
            try:
                count = int(self._nvml.nvmlDeviceGetCount())
            except Exception as exc:
                return GpuSetReading(t_monotonic=t, driver_version=self._driver_version,
                                     unavailable_reason=f"NVML could not count GPUs: {describe(exc)}")
            if count <= 0:
                return GpuSetReading(t_monotonic=t, driver_version=self._driver_version,
                                     unavailable_reason="no NVIDIA GPU: the driver reports none")
            pids = self._pid_tree.expand(server_pids)
            gpus = tuple(self._read_gpu(i, pids, bool(server_pids)) for i in range(count))
            return GpuSetReading(t_monotonic=t, gpus=gpus, driver_version=self._driver_version)

    def _read_gpu(self, index: int, server_pids: frozenset[int], server_known: bool) -> GpuReading:
        state = self._devices.setdefault(index, DeviceState())
        r = GpuRead(self._nvml, state)
        try:
            if state.handle is None:
                try:
                    state.handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
                except Exception as exc:
                    if nvml_code(exc) == GPU_IS_LOST:
                        raise Lost(describe(exc)) from exc
                    r.fail(_GPU_FIELDS, f"no handle for GPU {index}: {describe(exc)}")
                    return GpuReading(index=index, reasons=r.reasons, vendor="nvidia", source="nvml",
                                      vendor_index=index)
            self._read_fields(index, r, server_pids, server_known)
        except Lost as lost:
            state.handle = None  # ask again next time: a reset GPU comes back with a new handle
            self._free_gpm(state)
            r.values.clear()
            r.reasons.clear()
            r.fail(tuple(f for f in _GPU_FIELDS if f not in ("name", "uuid")), str(lost))
            return GpuReading(index=index, name=state.name, uuid=state.uuid, reasons=r.reasons, vendor="nvidia",
                              source="nvml", vendor_index=index)
        v = r.values
        pcie = PcieLink(
            generation=v.get("pcie.generation"), width=v.get("pcie.width"),
            max_generation=v.get("pcie.max_generation"), max_width=v.get("pcie.max_width"),
            bandwidth_bytes_per_s=v.get("pcie.bandwidth_bytes_per_s"),
        )
        plain = {k: val for k, val in v.items() if not k.startswith("pcie.")}
        # a GPU with no memory bus of its own (NVML says 0 bits: GB10 and other NVLink-C2C parts) shares the RAM
        kind = DeviceKind.UNIFIED_MEMORY if "unified" in r.reasons.get("bus_width_bits", "") else \
            DeviceKind.DISCRETE_GPU
        return GpuReading(index=index, pcie=pcie, reasons=dict(r.reasons), kind=kind.value, vendor="nvidia",
                          source="nvml", vendor_index=index, **plain)

    def _read_fields(self, index: int, r: GpuRead, server_pids: frozenset[int], server_known: bool) -> None:
        nvml, state, v, h = self._nvml, r.state, r.values, r.state.handle
        if state.name is None:
            name = r.call(("name",), "nvmlDeviceGetName", h)
            state.name = None if name is None else text_of(name)
        v["name"] = state.name
        if state.uuid is None:
            uuid = r.call(("uuid",), "nvmlDeviceGetUUID", h)
            state.uuid = None if uuid is None else text_of(uuid)
        v["uuid"] = state.uuid
        pci_fields = ("pci_bus_id", "pci_device_id")
        if state.pci is None:
            info = r.call(pci_fields, "nvmlDeviceGetPciInfo", h)
            if info is None:
                state.pci = (None, None)
                state.skip.setdefault("nvmlDeviceGetPciInfo", r.reasons.get("pci_bus_id", "no PCI info"))
            else:
                dev_id = int(getattr(info, "pciDeviceId", 0) or 0)
                state.pci = (pci_bus_id(info.busId), f"{dev_id & 0xFFFF:04x}:{dev_id >> 16:04x}" if dev_id else None)
        elif state.pci[0] is None:
            r.fail(pci_fields, state.skip.get("nvmlDeviceGetPciInfo", "NVML gave no PCI bus id for this GPU"))
        v["pci_bus_id"], v["pci_device_id"] = state.pci

        self._read_memory(r)

        util = r.call(("gpu_busy_percent", "memory_busy_percent"), "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            v["gpu_busy_percent"] = float(util.gpu)
            v["memory_busy_percent"] = float(util.memory)

        clock_mem = nvml.NVML_CLOCK_MEM
        cur = r.call(("mem_clock_mhz",), "nvmlDeviceGetClockInfo", h, clock_mem)
        v["mem_clock_mhz"] = None if cur is None else float(cur)
        mx = r.call(("mem_clock_max_mhz",), "nvmlDeviceGetMaxClockInfo", h, clock_mem)
        v["mem_clock_max_mhz"] = float(mx) if mx else None
        if mx == 0:
            r.fail(("mem_clock_max_mhz",), "NVML reports a max memory clock of 0 (unified memory?)")
        self._read_clocks(r)
        bus = r.call(("bus_width_bits",), "nvmlDeviceGetMemoryBusWidth", h)
        v["bus_width_bits"] = int(bus) if bus else None
        if bus == 0:
            r.fail(("bus_width_bits",), "NVML reports a memory bus width of 0 (unified memory)")
        bw, source, note = choose_peak_bandwidth(state.name, v["mem_clock_max_mhz"], v["bus_width_bits"],
                                                 self._user_bw.get(index))
        v["peak_bandwidth_bytes_per_s"], v["bandwidth_source"] = bw, source
        if note is not None:
            r.fail(("peak_bandwidth_bytes_per_s",), note)

        self._read_pcie(r)
        self._read_processes(r, server_pids, server_known)

        for key, fname in (("power_w", "nvmlDeviceGetPowerUsage"), ("energy_j", "nvmlDeviceGetTotalEnergyConsumption"),
                           ("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")):  # mW, mJ
            milli = r.call((key,), fname, h)
            v[key] = None if milli is None else milli / 1000.0
        temp = r.call(("temperature_c",), "nvmlDeviceGetTemperature", h, nvml.NVML_TEMPERATURE_GPU)
        v["temperature_c"] = None if temp is None else float(temp)

        self._read_gpm(r)

    def _read_clocks(self, r: GpuRead) -> None:
        """The graphics clock against its maximum, and why the clocks are held down (NVML's clocks event reasons)."""
        v, h, graphics = r.values, r.state.handle, self._nvml.NVML_CLOCK_GRAPHICS
        core = r.call(("core_clock_mhz",), "nvmlDeviceGetClockInfo", h, graphics, skip_key="graphics clock")
        v["core_clock_mhz"] = None if core is None else float(core)
        top = r.call(("core_clock_max_mhz",), "nvmlDeviceGetMaxClockInfo", h, graphics, skip_key="graphics max")
        v["core_clock_max_mhz"] = float(top) if top else None
        state = r.state
        mask = r.call(("clock_reasons",), THROTTLE_REASONS if state.throttle_reasons_call else EVENT_REASONS, h)
        if mask is None and not state.throttle_reasons_call and r.last_code == FUNCTION_NOT_FOUND:  # before 535
            state.throttle_reasons_call = True
            r.reasons.pop("clock_reasons", None)
            mask = r.call(("clock_reasons",), THROTTLE_REASONS, h)
        v["clock_reasons"] = None if mask is None else clock_reasons(int(mask))

    def _read_memory(self, r: GpuRead) -> None:
        v, state, h = r.values, r.state, r.state.handle
        fields = ("vram_total_bytes", "vram_used_bytes", "vram_free_bytes", "vram_reserved_bytes")
        if state.memory_v2:
            try:
                mem = self._nvml.nvmlDeviceGetMemoryInfo(h, version=self._nvml.nvmlMemory_v2)
            except Exception as exc:
                code = nvml_code(exc)
                if code == GPU_IS_LOST:
                    raise Lost(describe(exc)) from exc
                if code in V2_ABSENT:
                    state.memory_v2 = False  # an older driver or binding: use v1 from now on
            else:
                v["vram_total_bytes"], v["vram_used_bytes"] = int(mem.total), int(mem.used)
                v["vram_free_bytes"], v["vram_reserved_bytes"] = int(mem.free), int(mem.reserved)
                return
        mem = r.call(fields, "nvmlDeviceGetMemoryInfo", h)
        if mem is None:
            return
        v["vram_total_bytes"], v["vram_used_bytes"], v["vram_free_bytes"] = int(mem.total), int(mem.used), int(
            mem.free)
        v["vram_reserved_bytes"] = None
        r.fail(("vram_reserved_bytes",), "the v2 memory query is unavailable: used includes reserved memory")

    def _read_pcie(self, r: GpuRead) -> None:
        v, h = r.values, r.state.handle
        for key, fname in (
            ("pcie.generation", "nvmlDeviceGetCurrPcieLinkGeneration"),
            ("pcie.width", "nvmlDeviceGetCurrPcieLinkWidth"),
            ("pcie.max_generation", "nvmlDeviceGetMaxPcieLinkGeneration"),
            ("pcie.max_width", "nvmlDeviceGetMaxPcieLinkWidth"),
        ):
            value = r.call((key,), fname, h)
            v[key] = int(value) if value else None
            if value == 0:
                r.fail((key,), "NVML reports 0 (no PCIe link, e.g. an integrated or NVLink-C2C GPU)")
        bw = pcie_bandwidth_bytes_per_s(v["pcie.max_generation"], v["pcie.max_width"])
        if bw is None and v["pcie.generation"] is not None and v["pcie.width"] is not None:
            bw = pcie_bandwidth_bytes_per_s(v["pcie.generation"], v["pcie.width"])
            if bw is not None:
                r.fail(("pcie.bandwidth_bytes_per_s",), "max link unknown: bandwidth of the current link")
        elif bw is None:
            r.fail(("pcie.bandwidth_bytes_per_s",), "PCIe link generation/width unknown")
        v["pcie.bandwidth_bytes_per_s"] = bw
        rates = self._pcie_counter_rates(r.state)
        if rates is not None:
            v["pcie_tx_bytes_per_s"], v["pcie_rx_bytes_per_s"] = rates
            return
        for key, counter in (("pcie_tx_bytes_per_s", self._nvml.NVML_PCIE_UTIL_TX_BYTES),
                             ("pcie_rx_bytes_per_s", self._nvml.NVML_PCIE_UTIL_RX_BYTES)):
            kb = r.call((key,), "nvmlDeviceGetPcieThroughput", h, counter)
            v[key] = None if kb is None else float(kb) * PCIE_THROUGHPUT_BYTES_PER_KB

    def _pcie_counter_rates(self, state: DeviceState) -> tuple[float, float] | None:
        """TX/RX bytes/s averaged since the last poll from NVML's cumulative counters, or None (then the
        20 ms throughput sample is used): unsupported (GeForce), first poll, or a counter reset."""
        if state.pcie_counters is False:
            return None
        nvml = self._nvml
        try:
            fields = nvml.nvmlDeviceGetFieldValues(
                state.handle, [nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES])
            tx_f, rx_f = fields[0], fields[1]
            if tx_f.nvmlReturn != 0 or rx_f.nvmlReturn != 0:
                state.pcie_counters = False
                return None
            now = (int(tx_f.value.ullVal), int(rx_f.value.ullVal), int(tx_f.timestamp))
        except Exception as exc:
            code = nvml_code(exc)
            if code == GPU_IS_LOST:
                raise Lost(describe(exc)) from exc
            if code in PERMANENT or code is None:
                state.pcie_counters = False
            state.pcie_last = None
            return None
        state.pcie_counters = True
        last, state.pcie_last = state.pcie_last, now
        if last is None:
            return None
        dt_s = (now[2] - last[2]) / 1e6
        d_tx, d_rx = now[0] - last[0], now[1] - last[1]
        if dt_s <= 0 or d_tx < 0 or d_rx < 0:
            return None
        return d_tx / dt_s, d_rx / dt_s

    def _read_processes(self, r: GpuRead, server_pids: frozenset[int], server_known: bool) -> None:
        v, h = r.values, r.state.handle
        procs: list[GpuProcess] = []
        answered = 0
        for kind, fname in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            listed = r.call(("processes",), fname, h)
            if listed is None:
                continue
            answered += 1
            for p in listed:
                used = getattr(p, "usedGpuMemory", None)
                pid = int(p.pid)
                procs.append(GpuProcess(pid=pid, used_bytes=None if used is None else int(used), kind=kind,
                                        is_server=pid in server_pids))
        busy = self._process_busy(r)
        if busy is not None and server_known:
            v["other_processes_busy_percent"] = min(100.0, sum(b for pid, b in busy.items() if pid not in server_pids))
            procs = [replace(p, busy_percent=busy.get(p.pid, 0.0)) for p in procs]
        elif busy is not None:
            r.fail(("other_processes_busy_percent",), "the model server's process is not known")
        share = ("server_used_bytes", "other_processes_used_bytes")
        if answered == 0:
            v["processes"] = None
            r.fail(share, r.reasons.get("processes", "NVML gave no process list"))
            return
        v["processes"] = tuple(procs)
        r.reasons.pop("processes", None)
        if answered == 1:
            r.fail(share, "only one of the compute/graphics process lists could be read")
            return
        # A process in both lists holds one allocation: count each pid once.
        by_pid: dict[int, int | None] = {}
        for p in procs:
            if p.pid in by_pid and by_pid[p.pid] is not None and p.used_bytes is not None:
                by_pid[p.pid] = max(by_pid[p.pid] or 0, p.used_bytes)
            elif p.pid not in by_pid or p.used_bytes is None:
                by_pid[p.pid] = p.used_bytes
        if any(used is None for used in by_pid.values()):
            r.fail(share, "the driver gives no per-process memory (Windows WDDM / WSL)")
            return
        if not server_known:
            r.fail(share, "the model server's process is not known")
            return
        vram_used = v.get("vram_used_bytes")
        if not by_pid and vram_used is not None and vram_used > _EMPTY_PROCESS_LIST_SUSPECT_BYTES:
            r.fail(share, f"NVML lists no processes although {vram_used / 1024**3:.1f} GiB is in use "
                          "(a container without the host's PID namespace?)")
            return
        if by_pid and not server_pids.intersection(by_pid) and _pids_foreign(by_pid):
            r.fail(share, "NVML's process ids are not visible here (a container's PID namespace?)")
            return
        v["server_used_bytes"] = sum(u or 0 for pid, u in by_pid.items() if pid in server_pids)
        v["other_processes_used_bytes"] = sum(u or 0 for pid, u in by_pid.items() if pid not in server_pids)

    def _process_busy(self, r: GpuRead) -> dict[int, float] | None:
        """Each process's share of the GPU's time since the last poll (NVML keeps a few seconds of samples); {}: no
        process ran a kernel since; None: not supported (the reason is said)."""
        state = r.state
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(state.handle, state.util_seen_us)
        except Exception as exc:
            code = nvml_code(exc)
            if code == GPU_IS_LOST:
                raise Lost(describe(exc)) from exc
            if code == NOT_FOUND:  # no sample since the last one: nobody used the GPU meanwhile
                return {}
            r.fail(("other_processes_busy_percent",), f"{describe(exc)} (nvmlDeviceGetProcessUtilization)")
            return None
        samples = list(samples or ())
        state.util_seen_us = max([state.util_seen_us, *(int(getattr(s, "timeStamp", 0) or 0) for s in samples)])
        return processes_busy(samples)

    def _read_gpm(self, r: GpuRead) -> None:
        key = ("dram_bandwidth_util_percent",)
        gpm, h = r.state.gpm, r.state.handle
        r.values["dram_bandwidth_util_percent"] = None
        if gpm.supported is None:
            support = r.call(key, "nvmlGpmQueryDeviceSupport", h)
            if support is None:
                gpm.supported, gpm.reason = False, r.reasons.get(key[0])
                return
            gpm.supported = bool(getattr(support, "isSupportedDevice", 0))
            if not gpm.supported:
                gpm.reason = "GPM (DRAM bandwidth counters) not supported on this GPU (Hopper-class and newer only)"
        if not gpm.supported:
            r.fail(key, gpm.reason or "GPM not supported")
            return
        if not gpm.samples:
            for _ in range(2):
                sample = r.call(key, "nvmlGpmSampleAlloc")
                if sample is None:
                    gpm.supported, gpm.reason = False, r.reasons.get(key[0])
                    return
                gpm.samples.append(sample)
        current, previous = gpm.samples[1], gpm.samples[0]
        if r.call(key, "nvmlGpmSampleGet", h, current) is None:
            gpm.have_previous = False
            return
        gpm.samples.reverse()  # this sample is the previous one next time
        if not gpm.have_previous:
            gpm.have_previous = True
            r.fail(key, "GPM needs two samples: available from the next poll")
            return
        mg = self._nvml.c_nvmlGpmMetricsGet_t()
        mg.version = getattr(self._nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
        mg.numMetrics = 1
        mg.sample1, mg.sample2 = previous, current
        mg.metrics[0].metricId = self._nvml.NVML_GPM_METRIC_DRAM_BW_UTIL
        if r.call(key, "nvmlGpmMetricsGet", mg) is None:
            return
        metric = mg.metrics[0]
        if metric.nvmlReturn != 0:
            r.fail(key, f"GPM DRAM bandwidth metric failed (NVML error {metric.nvmlReturn})")
            return
        value = float(metric.value)
        if not math.isfinite(value):  # seen on an idle H200: the metric comes back NaN
            r.fail(key, "GPM returned no DRAM bandwidth value for this interval (NaN)")
            return
        r.values["dram_bandwidth_util_percent"] = value


def _pids_foreign(pids: Collection[int]) -> bool:
    """True when none of NVML's pids exists in this PID namespace (psutil missing: assume visible)."""
    try:
        import psutil
    except ImportError:
        return False
    return not any(psutil.pid_exists(pid) for pid in pids)
