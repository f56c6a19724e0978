"""Intel Arc GPUs: published peak memory bandwidth, memory size and PCI device ids.

Alchemist figures are Intel's own as reproduced by 3DCenter, Hardwareluxx, PurePC and SvetHardware; Battlemage
B570/B580 by TechCommand and launch spec tables; the Pro parts (A40/A50, A60, B50, B60) come from Intel's release
text and spec databases (technical.city, topcpu.net, alldbin). PCI ids from pci.ids (2025.06.21); the Pro B50/B60
ids are not named there, so those match by name only. Upstream xe/i915 publish neither VRAM size nor use to an
ordinary user in sysfs, so this table is where an Intel card's bandwidth and size come from.
"""

from __future__ import annotations

from kvmon.physics.gpu_spec import GB, GIB, GpuSpec


def _intel(name: str, gb_s: float, vram_gib: float, memory: str, *ids: str) -> GpuSpec:
    return GpuSpec(name, gb_s * GB, int(vram_gib * GIB), memory, vendor="intel",
                   pci_ids=tuple(f"8086:{i}" for i in ids))


INTEL_GPUS: tuple[GpuSpec, ...] = (
    _intel("Arc A310", 124, 4, "GDDR6 15.5 Gbps, 64-bit", "56a6"),
    _intel("Arc A380", 186, 6, "GDDR6 15.5 Gbps, 96-bit", "56a5"),
    _intel("Arc A580", 512, 8, "GDDR6 16 Gbps, 256-bit", "56a2"),
    _intel("Arc A750", 512, 8, "GDDR6 16 Gbps, 256-bit", "56a1"),
    _intel("Arc A770", 560, 16, "GDDR6 17.5 Gbps, 256-bit (8 or 16 GB)", "56a0"),
    _intel("Arc B570", 380, 10, "GDDR6, 160-bit", "e20c"),
    _intel("Arc B580", 456, 12, "GDDR6 19 Gbps, 192-bit", "e20b"),
    _intel("Arc Pro A50", 192, 6, "GDDR6 16 Gbps, 96-bit (the A40 shares the id)", "56b1"),
    _intel("Arc Pro A60", 384, 12, "GDDR6, 192-bit", "56b3"),
    _intel("Arc Pro B50", 224, 16, "GDDR6 14 Gbps, 128-bit"),
    _intel("Arc Pro B60", 456, 24, "GDDR6, 192-bit"),
)
