"""A fake NVML (a test double): the pynvml functions kvmon calls, answered from mutable ``FakeGpu`` records.

The simulator's GPUs (``kvmon.sim.gpu``) and the tests use it, so that the real NVML code path in
``kvmon.sources.nvml`` runs without a GPU. Errors are pynvml's own ``NVMLError`` subclasses with NVML's own
codes; any call can be made to fail per GPU (``FakeGpu.failing``) or for the whole library
(``FakeNvml.failing``), and a GPU can be lost mid-run (``FakeGpu.lost``). All calls take one lock, so a
simulator thread may change fields over time (hold ``FakeNvml.lock`` or use ``FakeNvml.update`` to change several
fields at once).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from kvmon.sim.permit import require

_GPM_METRIC_SLOTS = 8


@dataclass
class FakeGpu:
    """One simulated GPU; change fields at any time (memory rising, a PCIe burst, the GPU lost).

    ``processes`` are compute processes as (pid, used bytes); used bytes ``None`` mimics Windows WDDM.
    ``failing`` maps a pynvml function name to the NVML error code it raises on this GPU
    ("nvmlDeviceGetMemoryInfo_v2" fails only the v2 form of the memory call).
    ``dram_bw_util_percent`` is what GPM reports; ``None`` means the GPU has no GPM support.
    ``pcie_tx_bytes_total``/``pcie_rx_bytes_total`` are the cumulative PCIe byte counters that
    ``nvmlDeviceGetFieldValues`` reports (``None``: that field is not supported, as on GeForce).
    ``clocks_event_reasons`` is the mask ``nvmlDeviceGetCurrentClocksEventReasons`` answers (pynvml's
    ``nvmlClocksEventReason*`` bits); ``process_busy_percent`` maps a pid to the SM share that
    ``nvmlDeviceGetProcessUtilization`` reports for it (empty: no process ran a kernel lately).
    """

    name: str = "NVIDIA GeForce RTX 4090"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total_bytes: int = 24 * 1024**3
    memory_used_bytes: int = 0  # allocations only (what the v2 call reports as used)
    memory_reserved_bytes: int = 0  # driver/firmware reservation (v1 "used" includes it)
    mem_clock_mhz: int = 10501
    mem_clock_max_mhz: int = 10501
    core_clock_mhz: int = 2520
    core_clock_max_mhz: int = 2520
    clocks_event_reasons: int = 0
    process_busy_percent: dict[int, float] = field(default_factory=dict)
    bus_width_bits: int = 384
    pcie_gen: int = 4
    pcie_width: int = 16
    pcie_max_gen: int = 4
    pcie_max_width: int = 16
    pcie_tx_kb_s: int = 0
    pcie_rx_kb_s: int = 0
    gpu_util_percent: int = 0
    mem_util_percent: int = 0
    power_mw: int = 30_000
    power_limit_mw: int = 450_000
    energy_mj: int | None = None  # total energy since the driver loaded; None: the query is not supported (pre-Volta)
    temperature_c: int = 40
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    failing: dict[str, int] = field(default_factory=dict)
    lost: bool = False
    graphics_processes: list[tuple[int, int | None]] = field(default_factory=list)
    dram_bw_util_percent: float | None = None
    pcie_tx_bytes_total: int | None = None
    pcie_rx_bytes_total: int | None = None
    pci_bus_id: str | None = "00000000:01:00.0"  # NVML's form; None: the query is not supported
    pci_device_id: int = 0x268410DE  # NVML's pciDeviceId: device << 16 | vendor (an RTX 4090)


class _FakeHandle:
    """An opaque device handle, as ``nvmlDeviceGetHandleByIndex`` returns."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}>"


class _FakeGpmSample:
    """A GPM sample buffer: which GPU it was taken on and the DRAM utilisation at that moment."""

    def __init__(self) -> None:
        self.index: int | None = None
        self.dram_bw_util_percent: float | None = None
        self.freed = False


class FakeGpmMetricsGet:
    """Stands in for pynvml's ``c_nvmlGpmMetricsGet_t`` (same attribute names)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(_GPM_METRIC_SLOTS)]


def _clock_mhz(clock_type: int, mem_mhz: int, core_mhz: int) -> int:
    """The memory clock, or the graphics and SM clocks (one clock in this fake); NotSupported for any other."""
    if clock_type not in (pynvml.NVML_CLOCK_MEM, pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    return int(mem_mhz if clock_type == pynvml.NVML_CLOCK_MEM else core_mhz)


class FakeNvml:
    """A module-like stand-in for ``pynvml``: the same function names, constants and exception classes.

    Constants and exception classes (``NVML_*``, ``NVMLError*``, ``nvmlMemory_v2``) are pynvml's own.
    A pynvml function the fake does not implement raises ``NVMLError_FunctionNotFound`` when called,
    as an old driver would.
    """

    c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet

    def __init__(self, gpus: list[FakeGpu], driver_version: str = "580.95.05",
                 clock: Callable[[], float] = time.monotonic) -> None:
        require("FakeNvml")
        self.gpus = gpus
        self.driver_version = driver_version
        self.clock = clock  # seconds; field values carry it as a microsecond timestamp
        self.failing: dict[str, int] = {}  # library-wide: "nvmlInit", "nvmlDeviceGetCount", ...
        self.lock = threading.RLock()
        self.initialized = 0
        self.call_counts: Counter[str] = Counter()

    # -- helpers ---------------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "NVMLError", "nvmlMemory_", "NVMLLibrary")):
            return getattr(pynvml, name)
        if name.startswith("nvml") and callable(getattr(pynvml, name, None)):
            def _missing(*_args: Any, **_kwargs: Any) -> Any:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return _missing
        raise AttributeError(name)

    def update(self, index: int, **changes: Any) -> None:
        """Change several fields of GPU ``index`` atomically (seen together by the next NVML call)."""
        with self.lock:
            gpu = self.gpus[index]
            for key, value in changes.items():
                if not hasattr(gpu, key):
                    raise AttributeError(f"FakeGpu has no field {key!r}")
                setattr(gpu, key, value)

    def _lib_call(self, fname: str) -> None:
        self.call_counts[fname] += 1
        code = self.failing.get(fname)
        if code is not None:
            raise pynvml.NVMLError(code)
        if fname != "nvmlInit" and self.initialized <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, fname: str, handle: Any, *, variant: str | None = None) -> FakeGpu:
        self._lib_call(fname)
        if not isinstance(handle, _FakeHandle) or not 0 <= handle.index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        for key in (fname, variant):
            if key is not None and key in gpu.failing:
                raise pynvml.NVMLError(gpu.failing[key])
        return gpu

    # -- library ---------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        """Start the library (counted, like NVML); fails with ``failing['nvmlInit']``."""
        with self.lock:
            self._lib_call("nvmlInit")
            self.initialized += 1

    def nvmlShutdown(self) -> None:
        """Stop the library (one count down)."""
        with self.lock:
            self._lib_call("nvmlShutdown")
            self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        """The driver version string."""
        with self.lock:
            self._lib_call("nvmlSystemGetDriverVersion")
            return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        """How many GPUs there are."""
        with self.lock:
            self._lib_call("nvmlDeviceGetCount")
            return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _FakeHandle:
        """A handle for GPU ``index`` (InvalidArgument past the end)."""
        with self.lock:
            handle = _FakeHandle(index)
            self._gpu("nvmlDeviceGetHandleByIndex", handle)
            return handle

    # -- memory (name, UUID and the other one-field getters: ``_FIELD_GETTERS``) -------------------------
    def nvmlDeviceGetPciInfo(self, handle: Any) -> SimpleNamespace:
        """The PCI bus id (bytes, as NVML gives it) and ``pciDeviceId``; NotSupported when the GPU has no bus id."""
        with self.lock:
            gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
            if gpu.pci_bus_id is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return SimpleNamespace(busId=gpu.pci_bus_id.encode(), pciDeviceId=gpu.pci_device_id)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        """v1 (used includes reserved) or, with ``version``, v2 (used excludes reserved)."""
        with self.lock:
            variant = "nvmlDeviceGetMemoryInfo_v2" if version else None
            gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle, variant=variant)
            total, used, reserved = gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_reserved_bytes
            free = max(0, total - used - reserved)
            if version:
                return pynvml.c_nvmlMemory_v2_t(version=version, total=total, reserved=reserved, free=free, used=used)
            return pynvml.c_nvmlMemory_t(total=total, free=free, used=used + reserved)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        """Kernel and memory duty cycles in percent."""
        with self.lock:
            gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
            return pynvml.c_nvmlUtilization_t(gpu=int(gpu.gpu_util_percent), memory=int(gpu.mem_util_percent))

    # -- clocks and bus --------------------------------------------------------------------------------
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        """Current clock in MHz: memory, graphics or SM (others NotSupported); ``failing`` may name
        "nvmlDeviceGetClockInfo_graphics" to fail only the graphics and SM clocks."""
        with self.lock:
            variant = None if clock_type == pynvml.NVML_CLOCK_MEM else "nvmlDeviceGetClockInfo_graphics"
            gpu = self._gpu("nvmlDeviceGetClockInfo", handle, variant=variant)
            return _clock_mhz(clock_type, gpu.mem_clock_mhz, gpu.core_clock_mhz)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int) -> int:
        """Max clock in MHz: memory, graphics or SM (others NotSupported)."""
        with self.lock:
            gpu = self._gpu("nvmlDeviceGetMaxClockInfo", handle)
            return _clock_mhz(clock_type, gpu.mem_clock_max_mhz, gpu.core_clock_max_mhz)

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        """PCIe TX or RX in KB/s (NVML samples 20 ms)."""
        with self.lock:
            gpu = self._gpu("nvmlDeviceGetPcieThroughput", handle)
            if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
                return int(gpu.pcie_tx_kb_s)
            if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
                return int(gpu.pcie_rx_kb_s)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> list[SimpleNamespace]:
        """Field values; only the cumulative PCIe TX/RX byte counters are known, others NotSupported."""
        with self.lock:
            gpu = self._gpu("nvmlDeviceGetFieldValues", handle)
            stamp = int(self.clock() * 1e6)
            counters = {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: gpu.pcie_tx_bytes_total,
                        pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: gpu.pcie_rx_bytes_total}
            out = []
            for fid in field_ids:
                value = counters.get(fid)
                ret = pynvml.NVML_SUCCESS if value is not None else pynvml.NVML_ERROR_NOT_SUPPORTED
                out.append(SimpleNamespace(fieldId=fid, scopeId=0, timestamp=stamp, latencyUsec=0, valueType=4,
                                           nvmlReturn=ret, value=SimpleNamespace(ullVal=int(value or 0))))
            return out

    # -- processes -------------------------------------------------------------------------------------
    @staticmethod
    def _procs(entries: list[tuple[int, int | None]]) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for pid, used in entries]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        """Compute processes: objects with ``pid`` and ``usedGpuMemory`` (None = WDDM)."""
        with self.lock:
            return self._procs(list(self._gpu("nvmlDeviceGetComputeRunningProcesses", handle).processes))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        """Graphics processes, shaped like the compute list."""
        with self.lock:
            return self._procs(list(self._gpu("nvmlDeviceGetGraphicsRunningProcesses", handle).graphics_processes))

    def nvmlDeviceGetProcessUtilization(self, handle: Any, last_seen_timestamp: int) -> list[SimpleNamespace]:
        """One sample per busy process, stamped now (µs); NotFound when no process ran a kernel since
        ``last_seen_timestamp`` (as NVML answers)."""
        with self.lock:
            gpu = self._gpu("nvmlDeviceGetProcessUtilization", handle)
            stamp = int(self.clock() * 1e6)
            if not gpu.process_busy_percent or stamp <= int(last_seen_timestamp):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            return [SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=round(busy), memUtil=round(busy),
                                    encUtil=0, decUtil=0) for pid, busy in gpu.process_busy_percent.items()]

    # -- power and temperature -------------------------------------------------------------------------
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        """GPU temperature in °C (the GPU sensor only)."""
        with self.lock:
            gpu = self._gpu("nvmlDeviceGetTemperature", handle)
            if sensor != pynvml.NVML_TEMPERATURE_GPU:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return int(gpu.temperature_c)

    # -- GPM (Hopper and newer) ------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> SimpleNamespace:
        """Whether GPM works on this GPU (``isSupportedDevice``)."""
        with self.lock:
            gpu = self._gpu("nvmlGpmQueryDeviceSupport", handle)
            return SimpleNamespace(version=1, isSupportedDevice=int(gpu.dram_bw_util_percent is not None))

    def nvmlGpmSampleAlloc(self) -> _FakeGpmSample:
        """A GPM sample buffer."""
        with self.lock:
            self._lib_call("nvmlGpmSampleAlloc")
            return _FakeGpmSample()

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        """Free a GPM sample buffer."""
        with self.lock:
            self._lib_call("nvmlGpmSampleFree")
            if isinstance(sample, _FakeGpmSample):
                sample.freed = True

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        """Take a GPM sample on this GPU into ``sample``."""
        with self.lock:
            gpu = self._gpu("nvmlGpmSampleGet", handle)
            if gpu.dram_bw_util_percent is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if not isinstance(sample, _FakeGpmSample) or sample.freed:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            sample.index = handle.index
            sample.dram_bw_util_percent = gpu.dram_bw_util_percent
            return sample

    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any:
        """Fill the requested metrics from two samples of one GPU (DRAM bandwidth utilisation only)."""
        with self.lock:
            self._lib_call("nvmlGpmMetricsGet")
            s1, s2 = metrics_get.sample1, metrics_get.sample2
            taken = isinstance(s1, _FakeGpmSample) and isinstance(s2, _FakeGpmSample) and s1.index is not None
            if not taken or s1.index != s2.index:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            gpu = self.gpus[s2.index] if s2.index is not None else None
            if gpu is not None and "nvmlGpmMetricsGet" in gpu.failing:
                raise pynvml.NVMLError(gpu.failing["nvmlGpmMetricsGet"])
            for metric in metrics_get.metrics[: metrics_get.numMetrics]:
                if metric.metricId == pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL and s2.dram_bw_util_percent is not None:
                    metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, float(s2.dram_bw_util_percent)
                else:
                    metric.nvmlReturn, metric.value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0
            return metrics_get


# the pynvml getters that answer one FakeGpu field: a text as it is, a number as an int, None as NotSupported
_FIELD_GETTERS = {
    "nvmlDeviceGetName": "name",  # the marketing name, e.g. 'NVIDIA GeForce RTX 4090'
    "nvmlDeviceGetUUID": "uuid",
    "nvmlDeviceGetCurrentClocksEventReasons": "clocks_event_reasons",  # a mask of pynvml's nvmlClocksEventReason*
    "nvmlDeviceGetCurrentClocksThrottleReasons": "clocks_event_reasons",  # the same mask, named as before driver 535
    "nvmlDeviceGetMemoryBusWidth": "bus_width_bits",
    "nvmlDeviceGetCurrPcieLinkGeneration": "pcie_gen",  # drops at idle on real GPUs
    "nvmlDeviceGetCurrPcieLinkWidth": "pcie_width",
    "nvmlDeviceGetMaxPcieLinkGeneration": "pcie_max_gen",  # of GPU and slot
    "nvmlDeviceGetMaxPcieLinkWidth": "pcie_max_width",
    "nvmlDeviceGetPowerUsage": "power_mw",
    "nvmlDeviceGetEnforcedPowerLimit": "power_limit_mw",
    "nvmlDeviceGetTotalEnergyConsumption": "energy_mj",  # since the driver loaded (Volta and later)
}


def _field_getter(fname: str, attr: str) -> Callable[[FakeNvml, Any], Any]:
    def get(self: FakeNvml, handle: Any) -> Any:
        with self.lock:
            value = getattr(self._gpu(fname, handle), attr)
            if value is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return value if isinstance(value, str) else int(value)

    get.__name__ = fname
    return get


for _fname, _attr in _FIELD_GETTERS.items():
    setattr(FakeNvml, _fname, _field_getter(_fname, _attr))

FAKE_FUNCTIONS: tuple[str, ...] = tuple(
    name for name, value in vars(FakeNvml).items() if name.startswith("nvml") and callable(value)
)
"""Every pynvml function the fake implements (tests inject an error into each)."""
