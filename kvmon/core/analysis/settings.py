"""What the user can set for the analysis, and the reasons it gives when a bandwidth is not known."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from kvmon.core.alert_types import AlertThresholds
from kvmon.core.snapshot import MILESTONES

NO_GPU_BANDWIDTH = "no GPU bandwidth known (set one in settings)"
NO_HOST_BANDWIDTH = "host memory bandwidth unknown (set one in settings)"


@dataclass(frozen=True)
class AnalyzerSettings:
    """What the user can set: thresholds, bandwidths the hardware cannot report, forecast milestones."""

    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    gpu_bandwidth_bytes_per_s: Mapping[int, float] = field(default_factory=dict)  # by GPU index, user-set
    host_bandwidth_bytes_per_s: float | None = None  # user-set host RAM bandwidth
    device_bandwidth_bytes_per_s: Mapping[str, float] = field(default_factory=dict)  # by the server's name: CUDA0
    milestones: tuple[int, ...] = MILESTONES
    curve_points: int = 48
    max_fit_points: int = 4096
    advice_types: tuple[str, ...] = ("q8_0",)  # q4_0 costs quality: not suggested unasked


class BandwidthSpecError(ValueError):
    """A bandwidth setting that is not ``DEVICE=GB/s`` (host=60, 0=936, CUDA0=936)."""


BANDWIDTH_SPEC_HELP = ("DEVICE=GB/s: host (the host's RAM), a device number as kvmon shows it (0, 1) or the "
                       "server's name for it (CUDA0, ROCm1, Vulkan0, MTL0, RPC[host:port])")


def parse_bandwidth(text: str) -> tuple[str, float]:
    """``"host=60"`` → ("host", 60e9); ``"0=936"`` → ("0", 936e9); raises BandwidthSpecError with what to write."""
    name, sep, value = text.strip().partition("=")
    name = name.strip()
    if not sep or not name:
        raise BandwidthSpecError(f"bandwidth {text!r} is not {BANDWIDTH_SPEC_HELP}")
    try:
        gb_s = float(value.strip().removesuffix("GB/s").strip())
    except ValueError:
        raise BandwidthSpecError(f"bandwidth {text!r}: {value.strip()!r} is not a number of GB/s") from None
    if not 0.1 <= gb_s <= 100_000:  # a floppy's worth to ten times an H200: anything else is a typo
        raise BandwidthSpecError(f"bandwidth {text!r}: {gb_s:g} GB/s is outside 0.1–100000 GB/s")
    if name.lower() in ("gpu", "host"):
        name = name.lower()
    if name.lower().startswith("gpu") and name[3:].isdigit():
        name = name[3:]
    return name, gb_s * 1e9


def with_bandwidths(settings: AnalyzerSettings, specs: Iterable[str]) -> AnalyzerSettings:
    """``settings`` with the user's bandwidths (later specs win): host RAM, devices by number or by server name."""
    host = settings.host_bandwidth_bytes_per_s
    by_index = dict(settings.gpu_bandwidth_bytes_per_s)
    by_name = dict(settings.device_bandwidth_bytes_per_s)
    for spec in specs:
        name, bw = parse_bandwidth(spec)
        if name == "host":
            host = bw
        elif name.isdigit():
            by_index[int(name)] = bw
        else:
            by_name[name] = bw
    return replace(settings, host_bandwidth_bytes_per_s=host, gpu_bandwidth_bytes_per_s=by_index,
                   device_bandwidth_bytes_per_s=by_name)


def split_specs(text: str) -> list[str]:
    """A line of specs as a user types it ("host=60, CUDA0=936" or space-separated) → the specs."""
    return [p for p in (part.strip() for part in text.replace(";", ",").replace(" ", ",").split(",")) if p]
