"""NVML's clocks, why they are held down, the PCIe link and other processes' share of the GPU, read through the fake
NVML as kvmon reads a real one."""

from __future__ import annotations

import pynvml
import pytest

from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.nvml_clocks import clock_reasons

GIB = 1024**3
POWER_CAP = pynvml.nvmlClocksEventReasonSwPowerCap
HW_THERMAL = pynvml.nvmlClocksEventReasonHwThermalSlowdown
SW_THERMAL = pynvml.nvmlClocksEventReasonSwThermalSlowdown


def _source(gpu: FakeGpu, now: list[float] | None = None) -> tuple[NvmlSource, FakeNvml]:
    clock = (lambda: now[0]) if now is not None else None
    fake = FakeNvml([gpu], clock=clock) if clock else FakeNvml([gpu])
    return NvmlSource(fake, include_child_processes=False), fake


def test_a_memory_clock_held_down_by_the_power_cap_is_read_with_its_reason() -> None:
    src, _ = _source(FakeGpu(mem_clock_mhz=6300, mem_clock_max_mhz=10501, core_clock_mhz=1800,
                             core_clock_max_mhz=2520, clocks_event_reasons=POWER_CAP))
    g = src.poll((1,)).gpus[0]
    assert (g.mem_clock_mhz, g.mem_clock_max_mhz) == (6300.0, 10501.0)
    assert (g.core_clock_mhz, g.core_clock_max_mhz) == (1800.0, 2520.0)
    assert g.clock_reasons == ("power_cap",)
    assert g.peak_bandwidth_bytes_per_s == pytest.approx(2 * 10501e6 * 384 / 8)  # the peak stays the maximum's


def test_every_reason_bit_has_a_word_and_two_thermal_bits_are_one_reason() -> None:
    assert clock_reasons(0) == ()
    assert clock_reasons(HW_THERMAL | SW_THERMAL | POWER_CAP) == ("power_cap", "thermal")
    assert clock_reasons(pynvml.nvmlClocksEventReasonGpuIdle) == ("idle",)
    assert len(clock_reasons(pynvml.nvmlClocksEventReasonAll)) == 8


def test_a_driver_before_535_is_asked_under_the_old_name() -> None:
    gpu = FakeGpu(clocks_event_reasons=HW_THERMAL,
                  failing={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})
    src, fake = _source(gpu)
    assert src.poll((1,)).gpus[0].clock_reasons == ("thermal",)
    g = src.poll((1,)).gpus[0]
    assert g.clock_reasons == ("thermal",) and "clock_reasons" not in g.reasons
    assert fake.call_counts["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # not asked again


def test_no_reasons_on_a_gpu_that_does_not_say_is_unknown_with_why() -> None:
    gpu = FakeGpu(failing={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_NOT_SUPPORTED})
    g = NvmlSource(FakeNvml([gpu])).poll((1,)).gpus[0]
    assert g.clock_reasons is None and "not supported" in g.reasons["clock_reasons"]
    assert g.mem_clock_mhz == 10501.0  # the clocks themselves are still read


def test_a_graphics_clock_not_offered_leaves_the_memory_clock() -> None:
    gpu = FakeGpu(failing={"nvmlDeviceGetClockInfo_graphics": pynvml.NVML_ERROR_NOT_SUPPORTED})
    src, _ = _source(gpu)
    for _ in range(2):  # the graphics clock's failure is remembered on its own, not as the whole call's
        g = src.poll((1,)).gpus[0]
        assert g.core_clock_mhz is None and g.mem_clock_mhz == 10501.0 and "core_clock_mhz" in g.reasons


def test_a_pcie_link_trained_at_x4_is_read_against_its_maximum() -> None:
    g = NvmlSource(FakeNvml([FakeGpu(pcie_gen=4, pcie_width=4, pcie_max_gen=4, pcie_max_width=16)])).poll().gpus[0]
    assert (g.pcie.generation, g.pcie.width, g.pcie.max_generation, g.pcie.max_width) == (4, 4, 4, 16)


def test_other_processes_share_of_the_gpu_is_the_sum_of_theirs() -> None:
    now = [10.0]
    gpu = FakeGpu(processes=[(100, 20 * GIB), (200, 2 * GIB), (300, GIB)],
                  process_busy_percent={100: 60.0, 200: 25.0, 300: 10.0})
    src, fake = _source(gpu, now)
    g = src.poll((100,)).gpus[0]
    assert g.other_processes_busy_percent == 35.0
    assert {p.pid: p.busy_percent for p in g.processes or ()} == {100: 60.0, 200: 25.0, 300: 10.0}
    now[0] += 1.0
    fake.update(0, process_busy_percent={})  # nobody ran a kernel since: NVML answers "not found"
    g = src.poll((100,)).gpus[0]
    assert g.other_processes_busy_percent == 0.0 and "other_processes_busy_percent" not in g.reasons


def test_other_processes_share_unknown_without_the_server_or_the_query() -> None:
    gpu = FakeGpu(process_busy_percent={5: 50.0})
    assert NvmlSource(FakeNvml([gpu])).poll(()).gpus[0].other_processes_busy_percent is None
    gpu = FakeGpu(failing={"nvmlDeviceGetProcessUtilization": pynvml.NVML_ERROR_NOT_SUPPORTED})
    g = NvmlSource(FakeNvml([gpu])).poll((1,)).gpus[0]
    assert g.other_processes_busy_percent is None and "not supported" in g.reasons["other_processes_busy_percent"]
