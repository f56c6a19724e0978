"""NvmlSource against the fake NVML: every field, every NVML error in every call, a GPU lost mid-run."""

from __future__ import annotations

import dataclasses
from typing import Any

import pynvml
import pytest

from kvmon.core.readings import GpuReading, GpuSetReading
from kvmon.physics.gpus import GB, GIB, lookup_gpu
from kvmon.sim.fake_nvml import FAKE_FUNCTIONS, FakeGpu, FakeNvml
from kvmon.sources.nvml import NvmlSource, choose_peak_bandwidth, nvml_peak_bandwidth_bytes_per_s

MIB = 1024**2


def _gpus() -> list[FakeGpu]:
    return [
        FakeGpu(
            name="NVIDIA GeForce RTX 4090", uuid="GPU-aaaa", memory_total_bytes=24 * GIB,
            memory_used_bytes=18 * GIB, memory_reserved_bytes=400 * MIB, mem_clock_mhz=10501,
            mem_clock_max_mhz=10501, bus_width_bits=384, pcie_gen=1, pcie_width=16, pcie_max_gen=4,
            pcie_max_width=16, pcie_tx_kb_s=2000, pcie_rx_kb_s=3_000_000, gpu_util_percent=97,
            mem_util_percent=81, power_mw=412_345, power_limit_mw=450_000, temperature_c=71, energy_mj=123_456_789,
            processes=[(4242, 16 * GIB), (777, 1 * GIB)], graphics_processes=[(777, 1 * GIB), (900, 300 * MIB)],
            dram_bw_util_percent=None,
        ),
        FakeGpu(
            name="NVIDIA H200", uuid="GPU-bbbb", memory_total_bytes=141 * GB, memory_used_bytes=100 * GIB,
            memory_reserved_bytes=600 * MIB, mem_clock_mhz=3201, mem_clock_max_mhz=3201, bus_width_bits=6144,
            pcie_gen=5, pcie_width=16, pcie_max_gen=5, pcie_max_width=16, gpu_util_percent=50,
            mem_util_percent=40, power_mw=500_000, power_limit_mw=700_000, temperature_c=55, energy_mj=9_000_000,
            processes=[(4242, 90 * GIB)], dram_bw_util_percent=63.5, pcie_tx_kb_s=7, pcie_rx_kb_s=9,
        ),
    ]


# What a GPU is known to be whatever fails: its place, kind, vendor and which source read it.
IDENTITY = ("index", "kind", "vendor", "source", "vendor_index")


def _flat(g: GpuReading) -> dict[str, Any]:
    d = dataclasses.asdict(g)
    pcie = d.pop("pcie")
    d.pop("reasons")
    d.update({f"pcie.{k}": v for k, v in pcie.items()})
    return d


def _poll_twice(fake: FakeNvml, pids: tuple[int, ...] = (4242,)) -> GpuSetReading:
    src = NvmlSource(fake, include_child_processes=False)
    src.poll(pids)
    return src.poll(pids)


def test_healthy_reading_has_every_field_in_its_unit() -> None:
    fake = FakeNvml(_gpus(), driver_version="580.95.05")
    reading = _poll_twice(fake)
    assert reading.unavailable_reason is None and reading.driver_version == "580.95.05"
    g0, g1 = reading.gpus
    assert (g0.index, g0.name, g0.uuid) == (0, "NVIDIA GeForce RTX 4090", "GPU-aaaa")
    # v2 memory: used excludes reserved; free = total - used - reserved
    assert g0.vram_used_bytes == 18 * GIB and g0.vram_reserved_bytes == 400 * MIB
    assert g0.vram_free_bytes == 24 * GIB - 18 * GIB - 400 * MIB
    assert (g0.gpu_busy_percent, g0.memory_busy_percent) == (97.0, 81.0)
    assert g0.peak_bandwidth_bytes_per_s == pytest.approx(1008.096e9) and g0.bandwidth_source == "nvml"
    assert (g0.pcie.generation, g0.pcie.width, g0.pcie.max_generation, g0.pcie.max_width) == (1, 16, 4, 16)
    assert g0.pcie.bandwidth_bytes_per_s == pytest.approx(31.5e9, rel=0.01)  # at the max link, not idle gen 1
    assert g0.pcie_rx_bytes_per_s == 3_000_000 * 1024 and g0.pcie_tx_bytes_per_s == 2000 * 1024
    assert (g0.power_w, g0.power_limit_w, g0.temperature_c) == (pytest.approx(412.345), 450.0, 71.0)
    assert g0.energy_j == pytest.approx(123_456.789)  # the driver's counter, mJ since it loaded
    pre_volta = _poll_twice(FakeNvml([dataclasses.replace(_gpus()[0], energy_mj=None)])).gpus[0]
    assert pre_volta.energy_j is None and "not supported" in pre_volta.reasons["energy_j"]  # no counter before Volta
    assert pre_volta.power_w == pytest.approx(412.345)  # its power still is: kvmon integrates that instead
    assert g0.dram_bandwidth_util_percent is None and "GPM" in g0.reasons["dram_bandwidth_util_percent"]
    # process 777 is in both lists: its one allocation counts once
    assert g0.server_used_bytes == 16 * GIB and g0.other_processes_used_bytes == 1 * GIB + 300 * MIB
    assert {(p.pid, p.kind, p.is_server) for p in g0.processes or ()} == {
        (4242, "compute", True), (777, "compute", False), (777, "graphics", False), (900, "graphics", False)}
    assert set(g0.reasons) == {"dram_bandwidth_util_percent"}
    assert g1.peak_bandwidth_bytes_per_s == pytest.approx(4917.1e9, rel=1e-3) and g1.bandwidth_source == "nvml"
    assert g1.dram_bandwidth_util_percent == 63.5 and g1.reasons == {}
    assert g1.pcie_tx_bytes_per_s == 7 * 1024 and g1.pcie_rx_bytes_per_s == 9 * 1024
    assert g1.server_used_bytes == 90 * GIB and g1.other_processes_used_bytes == 0


def test_memory_pcie_and_gpm_follow_the_fake_over_time() -> None:
    fake = FakeNvml(_gpus())
    src = NvmlSource(fake, include_child_processes=False)
    first = src.poll((4242,))
    assert first.gpus[1].dram_bandwidth_util_percent is None
    assert "two samples" in first.gpus[1].reasons["dram_bandwidth_util_percent"]
    fake.update(0, memory_used_bytes=22 * GIB, pcie_rx_kb_s=12_000_000, processes=[(4242, 21 * GIB)])
    fake.update(1, dram_bw_util_percent=88.0)
    second = src.poll((4242,))
    g0, g1 = second.gpus
    assert g0.vram_used_bytes == 22 * GIB and g0.vram_free_bytes == 2 * GIB - 400 * MIB
    assert g0.pcie_rx_bytes_per_s == 12_000_000 * 1024 and g0.server_used_bytes == 21 * GIB
    assert g1.dram_bandwidth_util_percent == 88.0


# What each call's failure is allowed to take away (fields of the flattened reading). Written out by hand,
# so that a change in the source that loses more than this fails the test.
AFFECTS: dict[str, set[str]] = {
    "nvmlDeviceGetName": {"name"},
    "nvmlDeviceGetUUID": {"uuid"},
    "nvmlDeviceGetPciInfo": {"pci_bus_id", "pci_device_id"},
    "nvmlDeviceGetMemoryInfo": {"vram_total_bytes", "vram_used_bytes", "vram_free_bytes", "vram_reserved_bytes"},
    "nvmlDeviceGetUtilizationRates": {"gpu_busy_percent", "memory_busy_percent"},
    "nvmlDeviceGetClockInfo": {"mem_clock_mhz", "core_clock_mhz"},
    "nvmlDeviceGetMaxClockInfo": {"mem_clock_max_mhz", "core_clock_max_mhz"},
    "nvmlDeviceGetCurrentClocksEventReasons": {"clock_reasons"},
    "nvmlDeviceGetCurrentClocksThrottleReasons": set(),  # asked only of a driver that lacks the newer name
    "nvmlDeviceGetProcessUtilization": {"other_processes_busy_percent"},
    "nvmlDeviceGetMemoryBusWidth": {"bus_width_bits"},
    "nvmlDeviceGetCurrPcieLinkGeneration": {"pcie.generation"},
    "nvmlDeviceGetCurrPcieLinkWidth": {"pcie.width"},
    "nvmlDeviceGetMaxPcieLinkGeneration": {"pcie.max_generation"},
    "nvmlDeviceGetMaxPcieLinkWidth": {"pcie.max_width"},
    "nvmlDeviceGetPcieThroughput": {"pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"},
    "nvmlDeviceGetComputeRunningProcesses": {"server_used_bytes", "other_processes_used_bytes"},
    "nvmlDeviceGetGraphicsRunningProcesses": {"server_used_bytes", "other_processes_used_bytes"},
    "nvmlDeviceGetPowerUsage": {"power_w"},
    "nvmlDeviceGetTotalEnergyConsumption": {"energy_j"},
    "nvmlDeviceGetEnforcedPowerLimit": {"power_limit_w"},
    "nvmlDeviceGetTemperature": {"temperature_c"},
    "nvmlGpmQueryDeviceSupport": {"dram_bandwidth_util_percent"},
    "nvmlGpmSampleGet": {"dram_bandwidth_util_percent"},
    "nvmlGpmMetricsGet": {"dram_bandwidth_util_percent"},
    "nvmlDeviceGetFieldValues": set(),  # PCIe byte counters: the throughput sample stands in (own test)
}
# Fields that change (not vanish) when a call fails: peak bandwidth falls back to the table; the PCIe
# link bandwidth falls back to the current link; the process list loses one of its two halves.
CHANGES: dict[str, set[str]] = {
    "nvmlDeviceGetMaxClockInfo": {"bandwidth_source", "peak_bandwidth_bytes_per_s"},
    "nvmlDeviceGetMemoryBusWidth": {"bandwidth_source", "peak_bandwidth_bytes_per_s"},
    "nvmlDeviceGetMaxPcieLinkGeneration": {"pcie.bandwidth_bytes_per_s"},
    "nvmlDeviceGetMaxPcieLinkWidth": {"pcie.bandwidth_bytes_per_s"},
    "nvmlDeviceGetComputeRunningProcesses": {"processes"},
    "nvmlDeviceGetGraphicsRunningProcesses": {"processes"},
    "nvmlDeviceGetProcessUtilization": {"processes"},  # its processes' busy shares
}
# a driver without the newer call is asked under its old name: nothing is lost
FALLS_BACK = {("nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)}
LIBRARY_CALLS = {"nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlDeviceGetCount",
                 "nvmlDeviceGetHandleByIndex", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree"}
FIELD_ERRORS = [
    pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_TIMEOUT, pynvml.NVML_ERROR_INSUFFICIENT_POWER,
    pynvml.NVML_ERROR_RESET_REQUIRED, pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_UNINITIALIZED,
]


def test_the_table_covers_every_call_the_fake_offers() -> None:
    assert set(AFFECTS) | LIBRARY_CALLS == set(FAKE_FUNCTIONS)


@pytest.mark.parametrize("code", FIELD_ERRORS, ids=lambda c: pynvml.NVMLError(c).__class__.__name__)
@pytest.mark.parametrize("fname", sorted(AFFECTS))
def test_each_error_in_each_call_costs_only_its_fields(fname: str, code: int) -> None:
    healthy_gpus = _poll_twice(FakeNvml(_gpus())).gpus
    healthy = [_flat(g) for g in healthy_gpus]
    gpus = _gpus()
    for g in gpus:
        g.failing[fname] = code
    reading = _poll_twice(FakeNvml(gpus))
    assert reading.unavailable_reason is None and len(reading.gpus) == 2
    for gpu, before, old in zip(reading.gpus, healthy, healthy_gpus, strict=True):
        after = _flat(gpu)
        new_reasons = set(gpu.reasons) - set(old.reasons) - {"processes"}
        assert new_reasons <= AFFECTS[fname] | CHANGES.get(fname, set()), (fname, new_reasons)
        lost = {k for k in AFFECTS[fname] if before[k] is not None} if (fname, code) not in FALLS_BACK else set()
        for key in lost:
            assert after[key] is None, key
            assert gpu.reasons.get(key) or gpu.reasons.get(key.split(".")[0]), key
        changed = {k for k in after if after[k] != before[k]}
        assert changed <= lost | CHANGES.get(fname, set()), (fname, changed)


OLD_NAMES = {"nvmlDeviceGetCurrentClocksThrottleReasons"}  # asked only when the newer name is missing


@pytest.mark.parametrize("fname", sorted(set(AFFECTS) - OLD_NAMES | {"nvmlDeviceGetHandleByIndex"}))
def test_gpu_lost_in_any_call_degrades_that_gpu_only(fname: str) -> None:
    gpus = _gpus()
    gpus[1].failing[fname] = pynvml.NVML_ERROR_GPU_IS_LOST
    g0, g1 = _poll_twice(FakeNvml(gpus)).gpus
    assert g0.vram_used_bytes == 18 * GIB and g0.reasons.keys() == {"dram_bandwidth_util_percent"}
    assert g1.index == 1 and g1.name in (None, "NVIDIA H200")
    after = _flat(g1)
    assert all(after[k] is None for k in after if k not in ("name", "uuid", *IDENTITY)), after
    assert "lost" in g1.reasons["vram_used_bytes"] and "lost" in g1.reasons["power_w"]


def test_gpu_lost_mid_run_keeps_identity_then_back_after_reset() -> None:
    gpus = _gpus()
    fake = FakeNvml(gpus)
    src = NvmlSource(fake, include_child_processes=False)
    assert src.poll().gpus[1].vram_used_bytes == 100 * GIB
    gpus[1].lost = True
    g0, g1 = src.poll().gpus
    assert g0.vram_used_bytes == 18 * GIB
    assert (g1.name, g1.uuid) == ("NVIDIA H200", "GPU-bbbb")  # identity known from before
    assert g1.vram_total_bytes is None and "lost" in g1.reasons["vram_total_bytes"]
    gpus[1].lost = False
    g1_again = src.poll((4242,)).gpus[1]
    assert g1_again.vram_used_bytes == 100 * GIB and g1_again.server_used_bytes == 90 * GIB
    assert g1_again.reasons.keys() == {"dram_bandwidth_util_percent"}  # GPM starts its two samples again


def test_lost_gpu_is_asked_once_not_once_per_field() -> None:
    fake = FakeNvml(_gpus()[:1])
    src = NvmlSource(fake)
    src.poll()
    fake.gpus[0].lost = True
    before = sum(fake.call_counts.values())
    src.poll()
    assert sum(fake.call_counts.values()) - before == 2  # nvmlDeviceGetCount, then the first call that fails


def test_pcie_counters_give_the_average_since_the_last_poll() -> None:
    now = [100.0]
    gpus = _gpus()
    gpus[1].pcie_tx_bytes_total, gpus[1].pcie_rx_bytes_total = 10**12, 2 * 10**12
    fake = FakeNvml(gpus, clock=lambda: now[0])
    src = NvmlSource(fake, include_child_processes=False)
    first = src.poll().gpus
    assert first[1].pcie_rx_bytes_per_s == 9 * 1024  # first poll: no interval yet, the 20 ms sample
    assert first[0].pcie_rx_bytes_per_s == 3_000_000 * 1024  # GeForce: no counters, always the sample
    now[0] += 2.0
    fake.update(1, pcie_rx_bytes_total=2 * 10**12 + 50 * 10**9, pcie_tx_bytes_total=10**12 + 10**9)
    g1 = src.poll().gpus[1]
    assert g1.pcie_rx_bytes_per_s == pytest.approx(25e9) and g1.pcie_tx_bytes_per_s == pytest.approx(0.5e9)
    now[0] += 1.0
    fake.update(1, pcie_rx_bytes_total=0, pcie_tx_bytes_total=0)  # counters reset (driver reload)
    assert src.poll().gpus[1].pcie_rx_bytes_per_s == 9 * 1024
    now[0] += 1.0
    fake.update(1, pcie_rx_bytes_total=4 * 10**9)
    assert src.poll().gpus[1].pcie_rx_bytes_per_s == pytest.approx(4e9)
    # GPU 0 answered NOT_SUPPORTED for the fields on the first poll and is not asked again; GPU 1 every poll
    assert fake.call_counts["nvmlDeviceGetFieldValues"] == 1 + 4
    # a transient failure: the sample for now, counters again two polls later
    gpus[1].failing["nvmlDeviceGetFieldValues"] = pynvml.NVML_ERROR_UNKNOWN
    now[0] += 1.0
    assert src.poll().gpus[1].pcie_rx_bytes_per_s == 9 * 1024
    del gpus[1].failing["nvmlDeviceGetFieldValues"]
    for _ in range(2):
        now[0] += 1.0
        fake.update(1, pcie_rx_bytes_total=gpus[1].pcie_rx_bytes_total + 10**9)
        last = src.poll().gpus[1]
    assert last.pcie_rx_bytes_per_s == pytest.approx(1e9)


def test_v1_memory_when_v2_is_missing_says_used_includes_reserved() -> None:
    gpus = _gpus()
    gpus[0].failing["nvmlDeviceGetMemoryInfo_v2"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    fake = FakeNvml(gpus)
    src = NvmlSource(fake, include_child_processes=False)
    g0 = src.poll().gpus[0]
    assert g0.vram_used_bytes == 18 * GIB + 400 * MIB and g0.vram_reserved_bytes is None
    assert "includes reserved" in g0.reasons["vram_reserved_bytes"]
    assert g0.vram_free_bytes == 24 * GIB - 18 * GIB - 400 * MIB
    n = fake.call_counts["nvmlDeviceGetMemoryInfo"]
    src.poll()
    assert fake.call_counts["nvmlDeviceGetMemoryInfo"] - n == 2  # v1 only now, one per GPU


def test_not_supported_is_asked_once_then_remembered() -> None:
    gpus = _gpus()
    gpus[0].failing["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake = FakeNvml(gpus)
    src = NvmlSource(fake, include_child_processes=False)
    for _ in range(3):
        reading = src.poll()
    assert fake.call_counts["nvmlDeviceGetPowerUsage"] == 1 + 3  # GPU 0 once, GPU 1 every poll
    assert "not supported" in reading.gpus[0].reasons["power_w"]


def test_library_level_failures() -> None:
    fake = FakeNvml(_gpus())
    fake.failing["nvmlSystemGetDriverVersion"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    reading = NvmlSource(fake).poll()
    assert reading.driver_version is None and len(reading.gpus) == 2

    fake = FakeNvml(_gpus())
    fake.failing["nvmlDeviceGetCount"] = pynvml.NVML_ERROR_UNKNOWN
    reading = NvmlSource(fake).poll()
    assert reading.gpus == () and "could not count" in (reading.unavailable_reason or "")

    fake = FakeNvml(_gpus())
    fake.failing["nvmlGpmSampleAlloc"] = pynvml.NVML_ERROR_MEMORY
    src = NvmlSource(fake)
    src.poll()
    g1 = src.poll().gpus[1]
    assert g1.dram_bandwidth_util_percent is None and "nvmlGpmSampleAlloc" in g1.reasons["dram_bandwidth_util_percent"]
    assert g1.vram_used_bytes == 100 * GIB

    fake = FakeNvml(_gpus())
    fake.failing["nvmlShutdown"] = pynvml.NVML_ERROR_UNKNOWN
    fake.failing["nvmlGpmSampleFree"] = pynvml.NVML_ERROR_UNKNOWN
    src = NvmlSource(fake)
    src.poll()
    src.poll()
    src.close()  # failures while closing are swallowed


@pytest.mark.parametrize(("code", "words"), [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "library was not found"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "versions differ"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    (pynvml.NVML_ERROR_UNKNOWN, "NVML did not start"),
])
def test_no_driver_says_no_nvidia_gpu_once(code: int, words: str) -> None:
    fake = FakeNvml(_gpus())
    fake.failing["nvmlInit"] = code
    src = NvmlSource(fake)
    first, second = src.poll(), src.poll()
    assert first.gpus == () and second.gpus == ()
    assert first.unavailable_reason == second.unavailable_reason
    assert (first.unavailable_reason or "").startswith("no NVIDIA GPU: ") and words in (first.unavailable_reason or "")
    assert fake.call_counts["nvmlInit"] == 1


def test_no_gpus_listed() -> None:
    reading = NvmlSource(FakeNvml([])).poll()
    assert reading.gpus == () and reading.unavailable_reason == "no NVIDIA GPU: the driver reports none"


def test_real_pynvml_on_this_machine_never_raises() -> None:
    src = NvmlSource()
    reading = src.poll()
    src.close()
    if reading.unavailable_reason is not None:
        assert reading.gpus == () and reading.unavailable_reason.startswith("no NVIDIA GPU")
    else:
        assert reading.gpus and all(g.index == i for i, g in enumerate(reading.gpus))


def test_unexpected_exception_from_a_binding_is_a_field_reason() -> None:
    class Odd(FakeNvml):
        def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
            raise RuntimeError("ctypes went sideways")

    g0 = NvmlSource(Odd(_gpus())).poll().gpus[0]
    assert g0.temperature_c is None and "RuntimeError" in g0.reasons["temperature_c"]
    assert g0.vram_used_bytes == 18 * GIB


def test_gpm_close_frees_samples_and_shuts_down() -> None:
    fake = FakeNvml(_gpus())
    src = NvmlSource(fake)
    src.poll()
    src.poll()
    assert fake.initialized == 1
    src.close()
    assert fake.initialized == 0 and fake.call_counts["nvmlGpmSampleFree"] == 2
    assert src.poll().gpus[1].vram_used_bytes == 100 * GIB  # starts again after close
    assert fake.initialized == 1


# -- peak bandwidth --------------------------------------------------------------------------------------

def test_peak_bandwidth_from_nvml_clock_matches_published_figures() -> None:
    assert nvml_peak_bandwidth_bytes_per_s(10501, 384) == pytest.approx(1008.1e9, rel=1e-4)  # RTX 4090
    assert nvml_peak_bandwidth_bytes_per_s(14001, 512) == pytest.approx(1792.1e9, rel=1e-4)  # RTX 5090
    assert nvml_peak_bandwidth_bytes_per_s(0, 384) is None and nvml_peak_bandwidth_bytes_per_s(10501, 0) is None
    assert nvml_peak_bandwidth_bytes_per_s(None, None) is None
    bw, source, note = choose_peak_bandwidth("NVIDIA GeForce RTX 5090", 14001, 512)
    assert source == "nvml" and note is None and bw == pytest.approx(1792.128e9)


def test_disagreeing_clock_uses_the_table_and_says_why() -> None:
    # a "21000 MHz effective" style clock would give 2× the real figure
    bw, source, note = choose_peak_bandwidth("NVIDIA GeForce RTX 4090", 21000, 384)
    spec = lookup_gpu("RTX 4090")
    assert spec is not None and bw == spec.bandwidth_bytes_per_s and source == "table"
    assert note is not None and "2016 GB/s" in note
    # within 10%: NVML's own number stands
    bw, source, _ = choose_peak_bandwidth("NVIDIA GeForce RTX 4090", 10501 * 1.09, 384)
    assert source == "nvml"


def test_the_user_value_wins_then_nvml_then_the_table_then_none() -> None:
    assert choose_peak_bandwidth("NVIDIA GB10", None, None, 273e9) == (273e9, "user", None)
    bw, source, why = choose_peak_bandwidth("NVIDIA GB10", None, None)
    assert bw is None and source is None and why is not None and "no value was set" in why
    assert choose_peak_bandwidth("Some Future GPU", 5000, 256)[1] == "nvml"  # not in the table: trust NVML
    assert choose_peak_bandwidth("NVIDIA GeForce RTX 3090", None, None, 1e12)[1] == "user"  # the user's value wins
    assert choose_peak_bandwidth("NVIDIA GeForce RTX 3090", None, None)[1] == "table"


def test_unified_memory_gpu_through_the_source_uses_the_user_value() -> None:
    gb10 = FakeGpu(name="NVIDIA GB10", mem_clock_max_mhz=0, bus_width_bits=0,
                   failing={"nvmlDeviceGetMemoryInfo": pynvml.NVML_ERROR_NOT_SUPPORTED})
    g = NvmlSource(FakeNvml([gb10]), user_bandwidth_bytes_per_s={0: 273e9}).poll().gpus[0]
    assert g.peak_bandwidth_bytes_per_s == 273e9 and g.bandwidth_source == "user"
    assert g.bus_width_bits is None and "unified" in g.reasons["bus_width_bits"]
    assert g.vram_total_bytes is None and "not supported" in g.reasons["vram_total_bytes"]


@pytest.mark.parametrize("code", FIELD_ERRORS, ids=lambda c: pynvml.NVMLError(c).__class__.__name__)
def test_no_handle_for_one_gpu_leaves_the_others(code: int) -> None:
    gpus = _gpus()
    gpus[0].failing["nvmlDeviceGetHandleByIndex"] = code
    g0, g1 = NvmlSource(FakeNvml(gpus)).poll().gpus
    assert g0.index == 0 and all(v is None for k, v in _flat(g0).items() if k not in IDENTITY)
    assert "no handle for GPU 0" in g0.reasons["vram_used_bytes"]
    assert g1.vram_used_bytes == 100 * GIB


def test_gpm_nan_is_unknown_with_a_reason() -> None:
    """An idle H200 answered GPM's DRAM metric with NaN: that is no value, not a number to show or export."""
    fake = FakeNvml(_gpus())
    src = NvmlSource(fake, include_child_processes=False)
    src.poll((4242,))
    fake.update(1, dram_bw_util_percent=float("nan"))
    g1 = src.poll((4242,)).gpus[1]
    assert g1.dram_bandwidth_util_percent is None
    assert "NaN" in g1.reasons["dram_bandwidth_util_percent"]


def test_device_identity_kind_vendor_and_pci_bus_id() -> None:
    # NVML's bus id has an 8-digit domain ("00000000:01:00.0"); llama.cpp and Linux print four ("0000:01:00.0")
    fake = FakeNvml([FakeGpu(pci_bus_id="00000000:0A:00.0", pci_device_id=0x268410DE)])
    (g,) = NvmlSource(fake).poll().gpus
    assert (g.kind, g.vendor, g.source, g.vendor_index) == ("discrete_gpu", "nvidia", "nvml", 0)
    assert g.pci_bus_id == "0000:0a:00.0" and g.pci_device_id == "10de:2684"
    # a part with no memory bus of its own (NVML: 0 bits) shares the host's RAM
    (u,) = NvmlSource(FakeNvml([FakeGpu(name="NVIDIA GB10", bus_width_bits=0, pci_bus_id=None)])).poll().gpus
    assert u.kind == "unified_memory" and u.pci_bus_id is None and u.reasons["pci_bus_id"]
