"""The fake NVML itself: pynvml's errors, NVML's rules, and safe to change from another thread."""

from __future__ import annotations

import threading

import pynvml
import pytest

from kvmon.physics.gpus import GIB
from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
from kvmon.sources.nvml import NvmlSource


def test_errors_are_pynvml_classes_and_calls_need_init() -> None:
    fake = FakeNvml([FakeGpu()])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(1)
    fake.gpus[0].failing["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError_NotSupported) as info:
        fake.nvmlDeviceGetPowerUsage(h)
    assert info.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetFanSpeed(h)  # a pynvml function the fake does not implement
    with pytest.raises(AttributeError):
        fake.not_an_nvml_name  # noqa: B018
    assert fake.NVML_CLOCK_MEM == pynvml.NVML_CLOCK_MEM and fake.NVMLError is pynvml.NVMLError
    fake.gpus[0].lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetUUID(h)


def test_memory_v1_and_v2_views() -> None:
    fake = FakeNvml([FakeGpu(memory_total_bytes=24 * GIB, memory_used_bytes=10 * GIB, memory_reserved_bytes=GIB)])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    v2 = fake.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    v1 = fake.nvmlDeviceGetMemoryInfo(h)
    assert (v2.used, v2.reserved, v2.free) == (10 * GIB, GIB, 13 * GIB)
    assert (v1.used, v1.free, v1.total) == (11 * GIB, 13 * GIB, 24 * GIB)
    with pytest.raises(AttributeError):
        fake.update(0, no_such_field=1)


def test_gpm_metrics_need_two_samples_of_one_gpu() -> None:
    fake = FakeNvml([FakeGpu(dram_bw_util_percent=12.5), FakeGpu(dram_bw_util_percent=None)])
    fake.nvmlInit()
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    assert fake.nvmlGpmQueryDeviceSupport(h1).isSupportedDevice == 0
    a, b = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlGpmSampleGet(h1, a)
    mg = fake.c_nvmlGpmMetricsGet_t()
    mg.sample1, mg.sample2, mg.numMetrics = a, b, 1
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlGpmMetricsGet(mg)  # samples never taken
    fake.nvmlGpmSampleGet(h0, a)
    fake.nvmlGpmSampleGet(h0, b)
    mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
    assert fake.nvmlGpmMetricsGet(mg).metrics[0].value == 12.5


def test_a_simulator_thread_can_change_memory_while_kvmon_polls() -> None:
    total = 24 * GIB
    fake = FakeNvml([FakeGpu(memory_total_bytes=total), FakeGpu(memory_total_bytes=total)])
    src = NvmlSource(fake, include_child_processes=False)
    stop = threading.Event()

    def simulate() -> None:
        step = 0
        while not stop.is_set():
            step = (step + 1) % 1000
            used = step * 20 * 1024**2
            fake.update(0, memory_used_bytes=used, memory_reserved_bytes=step * 1024, processes=[(1, used)])
            fake.update(1, memory_used_bytes=used // 2)

    thread = threading.Thread(target=simulate, daemon=True)
    thread.start()
    try:
        seen: set[int] = set()
        for _ in range(200):
            reading = src.poll((1,))
            for g in reading.gpus:
                assert g.vram_used_bytes is not None and g.vram_free_bytes is not None
                assert g.vram_used_bytes + (g.vram_reserved_bytes or 0) + g.vram_free_bytes == total
            seen.add(reading.gpus[0].vram_used_bytes or 0)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert len(seen) > 1  # the changes were seen
