"""The vendor tables beside the GPU table: AMD and Intel by PCI id, Apple chips by bin, host RAM by kind and speed."""

from __future__ import annotations

import pytest

from kvmon.physics.gpus import GB
from kvmon.physics.host_memory import HOST_MEMORY_PRESETS, dram_bandwidth_bytes_per_s, memory_kind, table_host_bandwidth


def test_host_memory_arithmetic() -> None:
    assert dram_bandwidth_bytes_per_s(3200, 64) == 25.6 * GB  # DDR4-3200, one channel
    assert dram_bandwidth_bytes_per_s(4800, 64) == 38.4 * GB  # DDR5-4800, one DIMM
    assert dram_bandwidth_bytes_per_s(8000, 256) == 256 * GB  # Strix Halo's LPDDR5X-8000
    bw, how = table_host_bandwidth("DDR5", 5600, 2)
    assert bw == pytest.approx(89.6 * GB) and "DDR5-5600 × 2 channels" in how
    assert table_host_bandwidth("DDR5", 5600, None)[0] is None
    assert table_host_bandwidth(None, None, 2)[0] is None
    assert memory_kind("Unbuffered-DDR5") == "DDR5" and memory_kind("LPDDR5X") == "LPDDR5X"
    assert memory_kind("Low-Power-DDR4-RAM") == "DDR4" and memory_kind("Unknown") is None
    names = [p.name for p in HOST_MEMORY_PRESETS]
    assert len(set(names)) == len(names) and any("DDR4" in n for n in names) and any("DDR5" in n for n in names)
