"""All of this machine's device sources as one: NVIDIA (NVML), AMD and Intel (sysfs), Apple Silicon (sysctl, Metal).

Each source returns the same reading per device; ``DeviceSources`` polls them in that order and numbers the devices
of one poll 0, 1, … (NVIDIA's keep the indexes NVML gives them, as before). A source that finds nothing is not an
error: with no device at all, ``unavailable_reason`` says what each one found, and the host's RAM is the device.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kvmon.core.readings import GpuReading, GpuSetReading
from kvmon.sources.base import GpuSource


class DeviceSources:
    """Several device sources polled as one ``GpuSource``; one failing source blanks only its own devices."""

    def __init__(self, sources: Sequence[GpuSource], *, clock: Callable[[], float] = time.monotonic) -> None:
        self.sources = tuple(sources)
        self._clock = clock

    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        """Every device of every source now; never raises."""
        devices: list[GpuReading] = []
        why_none: list[str] = []
        driver: str | None = None
        for src in self.sources:
            try:
                reading = src.poll(server_pids)
            except Exception as exc:  # a source bug must not hide the other sources' devices
                why_none.append(f"{type(src).__name__} failed: {type(exc).__name__}: {exc}")
                continue
            driver = driver or reading.driver_version
            if not reading.gpus:
                why_none.append(reading.unavailable_reason or f"{type(src).__name__}: no device")
            for g in reading.gpus:
                devices.append(replace(g, index=len(devices)))
        if devices:
            return GpuSetReading(t_monotonic=self._clock(), gpus=tuple(devices), driver_version=driver)
        return GpuSetReading(t_monotonic=self._clock(), driver_version=driver,
                             unavailable_reason="; ".join(why_none) or "no device source")

    def close(self) -> None:
        """Close every source."""
        for src in self.sources:
            with contextlib.suppress(Exception):  # closing is best effort
                src.close()


def default_device_sources(nvml: Any = None, user_bandwidth_bytes_per_s: Mapping[int, float] | None = None,
                           *, platform: str | None = None) -> DeviceSources:
    """The sources that can find a device on this system: NVML everywhere, sysfs on Linux, Apple on macOS."""
    from kvmon.sources.nvml import NvmlSource

    plat = platform or sys.platform
    sources: list[GpuSource] = [NvmlSource(nvml, user_bandwidth_bytes_per_s=user_bandwidth_bytes_per_s)]
    if plat.startswith("linux"):
        from kvmon.sources.amdgpu import AmdGpuSource
        from kvmon.sources.intel_gpu import IntelGpuSource

        sources += [AmdGpuSource(), IntelGpuSource()]
    if plat == "darwin":
        from kvmon.sources.apple import AppleSource

        sources.append(AppleSource())
    return DeviceSources(sources)
