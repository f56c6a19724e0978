"""The shape of one row of kvmon's device tables (``kvmon.physics.gpus`` and the vendor tables beside it)."""

from __future__ import annotations

from dataclasses import dataclass

GB = 1_000_000_000
GIB = 1024**3


@dataclass(frozen=True)
class GpuSpec:
    """A device's published peak memory bandwidth and memory size.

    ``unified_memory``: the device computes from the machine's own RAM (Apple Silicon, AMD APUs), so its memory
    is the host's. ``pci_ids`` are ``vendor:device`` in lower-case hex; one id often covers several cards (the
    memory size tells them apart, see ``kvmon.physics.gpus.lookup_pci``).
    """

    name: str
    bandwidth_bytes_per_s: float
    vram_bytes: int
    memory: str
    unified_memory: bool = False
    vendor: str = "nvidia"
    pci_ids: tuple[str, ...] = ()
