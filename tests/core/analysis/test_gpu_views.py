"""The machine's device views: the user's bandwidths applied to every device."""

from __future__ import annotations

from kvmon.core.analysis import AnalyzerSettings
from kvmon.core.analysis.gpu_views import machine_views
from kvmon.core.readings import GpuReading, GpuSetReading, HostReading

GIB = 1024**3


def _gpus() -> GpuSetReading:
    return GpuSetReading(0.0, (
        GpuReading(index=0, name="NVIDIA GeForce RTX 4090", vram_total_bytes=24 * GIB, vram_used_bytes=2 * GIB,
                   vram_free_bytes=22 * GIB),
        GpuReading(index=1, name="AMD Radeon 780M", kind="unified_memory", vendor="amd", vram_total_bytes=8 * GIB,
                   vram_used_bytes=1 * GIB, vram_free_bytes=7 * GIB),
    ))


HOST = HostReading(0.0, ram_total_bytes=64 * GIB, ram_available_bytes=40 * GIB, host_bandwidth_bytes_per_s=60e9,
                   host_bandwidth_source="table")


def test_machine_views_apply_the_users_bandwidths_to_every_device() -> None:
    settings = AnalyzerSettings(gpu_bandwidth_bytes_per_s={0: 900e9}, host_bandwidth_bytes_per_s=80e9)
    gviews, why, host = machine_views(_gpus(), HOST, settings)
    assert why is None
    assert (gviews[0].peak_bandwidth_bytes_per_s, gviews[0].bandwidth_source) == (900e9, "user")
    assert (gviews[1].peak_bandwidth_bytes_per_s, gviews[1].bandwidth_source) == (80e9, "host")  # the iGPU reads RAM
    assert (host.host_bandwidth_bytes_per_s, host.host_bandwidth_source) == (80e9, "user")
    plain, _, plain_host = machine_views(_gpus(), HOST, AnalyzerSettings())
    assert plain[0].bandwidth_source == "table" and plain_host.host_bandwidth_source == "table"
    none, why, _ = machine_views(GpuSetReading(0.0, unavailable_reason="NVML: driver not loaded"), HOST, settings)
    assert none == () and why == "NVML: driver not loaded"
