"""Host RAM bandwidth from its kind, speed and channels, and the what-if presets for CPUs.

Peak bytes/s = MT/s × 10⁶ × bus bits / 8: DDR4-3200 gives 25.6 GB/s per 64-bit channel and DDR5-4800 38.4 GB/s
per DIMM (two 32-bit sub-channels), as JEDEC's speed grades and Micron's DDR5 paper state; LPDDR5(X) counts its
bus width in total (128-bit on most laptops). This is the memory bus's peak: a measured streaming copy reaches
roughly 60–90 % of it, which is why kvmon prefers its own measurement and uses this only where the system reports
the memory (``kvmon.sources.host``) and none was taken yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvmon.physics.gpu_spec import GB, GIB

DIMM_CHANNEL_BITS = 64  # a DDR4 DIMM channel; a DDR5 DIMM's two 32-bit sub-channels together


def dram_bandwidth_bytes_per_s(mt_s: float, bus_bits: int) -> float:
    """Peak bandwidth of a memory bus: MT/s × bus width."""
    return float(mt_s) * 1e6 * bus_bits / 8


@dataclass(frozen=True)
class HostMemoryPreset:
    """A common host memory system for the what-if calculator."""

    name: str
    kind: str
    mt_s: int
    bus_bits: int
    ram_bytes: int  # a typical size for the fit verdict

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return dram_bandwidth_bytes_per_s(self.mt_s, self.bus_bits)


def _preset(kind: str, mt_s: int, channels: int, ram_gib: int, what: str = "") -> HostMemoryPreset:
    bits = channels * DIMM_CHANNEL_BITS
    label = f"CPU · {kind}-{mt_s} × {channels} channels{what}"
    return HostMemoryPreset(label, kind, mt_s, bits, ram_gib * GIB)


HOST_MEMORY_PRESETS: tuple[HostMemoryPreset, ...] = (
    _preset("DDR4", 2666, 2, 32),
    _preset("DDR4", 3200, 2, 64),
    _preset("DDR4", 3200, 4, 128, " (workstation)"),
    _preset("DDR4", 3200, 8, 256, " (server)"),
    _preset("DDR5", 4800, 2, 64),
    _preset("DDR5", 5600, 2, 64),
    _preset("DDR5", 6000, 2, 64),
    _preset("DDR5", 6400, 2, 96),
    _preset("DDR5", 4800, 8, 384, " (server)"),
    _preset("DDR5", 4800, 12, 768, " (server)"),
    HostMemoryPreset("CPU · LPDDR5X-7500, 128-bit (laptop)", "LPDDR5X", 7500, 128, 32 * GIB),
)

_KIND = re.compile(r"(LPDDR[0-9]X?|DDR[0-9])", re.IGNORECASE)


def memory_kind(text: str | None) -> str | None:
    """"DDR5", "LPDDR5X" … from what the system reports ("Unbuffered-DDR5", "DDR4", "LPDDR5"), else None."""
    if not text:
        return None
    m = _KIND.search(text)
    return m.group(1).upper() if m else None


def table_host_bandwidth(kind: str | None, mt_s: float | None, channels: int | None) -> tuple[float | None, str]:
    """(peak bytes/s, how it was computed) for ``channels`` 64-bit channels of ``kind`` at ``mt_s``; None + why."""
    if kind is None or not mt_s or mt_s <= 0:
        return None, "the system does not report the memory's kind and speed"
    if not channels or channels <= 0:
        return None, f"{kind}-{mt_s:.0f} reported, but not how many channels it has"
    bw = dram_bandwidth_bytes_per_s(mt_s, channels * DIMM_CHANNEL_BITS)
    return bw, f"{kind}-{mt_s:.0f} × {channels} channel{'s' if channels != 1 else ''} = {bw / GB:.1f} GB/s peak"
