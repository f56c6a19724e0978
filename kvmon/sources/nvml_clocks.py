"""NVML's clocks event reasons and per-process utilisation, in kvmon's words: why a GPU holds its clocks down, and how
much of the GPU's time other processes took.

``nvmlDeviceGetCurrentClocksEventReasons`` (named ...ThrottleReasons before driver 535) answers a bit mask; its bits
(nvml.h ``nvmlClocksEventReason*``) become ``kvmon.core.readings.ClockReason`` codes. Process utilisation
(``nvmlDeviceGetProcessUtilization``) answers the samples taken since a timestamp, one or more per process.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvmon.core.readings import CLOCK_REASONS, ClockReason

# nvml.h's nvmlClocksEventReason* bits (the same values under their old ...ThrottleReason* names)
REASON_BITS: tuple[tuple[int, ClockReason], ...] = (
    (0x1, "idle"),  # GpuIdle
    (0x2, "applications_clocks"),  # ApplicationsClocksSetting (user-defined clocks)
    (0x4, "power_cap"),  # SwPowerCap
    (0x8, "hw_slowdown"),  # HwSlowdown: thermal or power brake asserted by the board
    (0x10, "sync_boost"),  # SyncBoost
    (0x20, "thermal"),  # SwThermalSlowdown
    (0x40, "thermal"),  # HwThermalSlowdown
    (0x80, "power_brake"),  # HwPowerBrakeSlowdown
    (0x100, "display"),  # DisplayClockSetting
)
EVENT_REASONS = "nvmlDeviceGetCurrentClocksEventReasons"
THROTTLE_REASONS = "nvmlDeviceGetCurrentClocksThrottleReasons"  # its name before driver 535


def clock_reasons(mask: int) -> tuple[ClockReason, ...]:
    """The reasons a clocks event mask holds, in ``CLOCK_REASONS`` order, each once."""
    found = {reason for bit, reason in REASON_BITS if mask & bit}
    return tuple(r for r in CLOCK_REASONS if r in found)


def processes_busy(samples: Iterable[Any]) -> dict[int, float]:
    """Each process's mean SM share (percent) over its samples."""
    per_pid: dict[int, list[float]] = {}
    for s in samples:
        per_pid.setdefault(int(getattr(s, "pid", 0) or 0), []).append(float(getattr(s, "smUtil", 0) or 0))
    return {pid: sum(v) / len(v) for pid, v in per_pid.items() if pid > 0}
