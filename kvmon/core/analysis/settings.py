"""What the user can set for the analysis, and the reasons it gives when a bandwidth is not known."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvmon.core.alerts import AlertThresholds

MILESTONES = (8192, 16384, 32768, 65536, 131072, 262144)
NO_GPU_BANDWIDTH = "no GPU bandwidth known (set one in settings)"
NO_HOST_BANDWIDTH = "host memory bandwidth unknown (set one in settings)"


@dataclass(frozen=True)
class AnalyzerSettings:
    """What the user can set: thresholds, bandwidths the hardware cannot report, forecast milestones."""

    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    gpu_bandwidth_bytes_per_s: Mapping[int, float] = field(default_factory=dict)  # by GPU index, user-set
    host_bandwidth_bytes_per_s: float | None = None  # user-set host RAM bandwidth
    milestones: tuple[int, ...] = MILESTONES
    curve_points: int = 48
    max_fit_points: int = 4096
    advice_types: tuple[str, ...] = ("q8_0",)  # q4_0 costs quality: not suggested unasked
