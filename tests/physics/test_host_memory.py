"""The vendor tables beside the GPU table: AMD and Intel by PCI id, Apple chips by bin, host RAM by kind and speed."""

from __future__ import annotations

import pytest

from kvmon.physics.apple_chips import apple_bandwidth, apple_chip_name, estimated_working_set_bytes
from kvmon.physics.gpus import GB, GIB, KNOWN_GPUS, lookup_pci
from kvmon.physics.host_memory import (
    HOST_MEMORY_PRESETS,
    dram_bandwidth_bytes_per_s,
    memory_kind,
    table_host_bandwidth,
)


def test_one_pci_id_for_several_cards_is_told_apart_by_memory_size() -> None:
    # 1002:744c is the 7900 XTX, XT and GRE (pci.ids); the 24 GiB one is the XTX (LACT's `lact cli info`: 24560 MiB)
    assert lookup_pci("1002:744c", 24560 * 2**20).name == "Radeon RX 7900 XTX"  # type: ignore[union-attr]
    assert lookup_pci("1002:744C", 20 * GIB).name == "Radeon RX 7900 XT"  # type: ignore[union-attr]
    assert lookup_pci("0x1002:0x744c", 16 * GIB).name == "Radeon RX 7900 GRE"  # type: ignore[union-attr]
    assert lookup_pci("1002:744c") is None  # without the size it would be a guess
    # the LACT RX 6900 XT snapshot: 1002:73BF with 17163091968 bytes; the 6800, 6800 XT and 6900 XT all have
    # 512 GB/s and 16 GB, so the bandwidth is known though the card is not
    spec = lookup_pci("1002:73bf", 17163091968)
    assert spec is not None and spec.bandwidth_bytes_per_s == 512 * GB
    assert lookup_pci("8086:e20b").name == "Arc B580"  # type: ignore[union-attr]
    assert lookup_pci("8086:56a0").bandwidth_bytes_per_s == 560 * GB  # type: ignore[union-attr]
    assert lookup_pci("1002:ffff") is None and lookup_pci(None) is None


def test_every_table_row_is_sane() -> None:
    for g in KNOWN_GPUS:
        assert 50 * GB <= g.bandwidth_bytes_per_s <= 10_000 * GB, g.name
        assert g.vendor in ("nvidia", "amd", "intel", "apple"), g.name
        assert all(len(i) == 9 and i[4] == ":" for i in g.pci_ids), g.name
    assert any(g.unified_memory and g.vendor == "amd" for g in KNOWN_GPUS)  # the Ryzen AI Max


@pytest.mark.parametrize(("brand", "chip"), [
    ("Apple M1", "M1"), ("Apple M1 Pro", "M1 Pro"), ("Apple M3 Max", "M3 Max"), ("MTL0 (Apple M1 Max)", "M1 Max"),
    ("Apple M5", "M5"), ("Intel(R) Core(TM) i5-1038NG7 CPU @ 2.00GHz", None), ("Apple processor", None), (None, None),
])
def test_chip_names_from_brand_strings(brand: str | None, chip: str | None) -> None:
    # brand strings as sysctl prints them (archspec-json darwin targets, cpufetch #139), as llama.cpp's Metal
    # init names the device, and the first macOS 11 builds' "Apple processor" (archspec #38)
    assert apple_chip_name(brand) == chip


def test_binned_chips_by_their_core_counts() -> None:
    # archspec-json darwin-sequoia-m3: 14 cores (10 performance) = the 300 GB/s M3 Max
    assert apple_bandwidth("Apple M3 Max", cpu_cores=14, perf_cores=10) == (300 * GB, None)
    assert apple_bandwidth("Apple M3 Max", perf_cores=12) == (400 * GB, None)
    # darwin-sequoia-m4: 16 cores (12 performance) = the 546 GB/s M4 Max
    assert apple_bandwidth("Apple M4 Max", cpu_cores=16, perf_cores=12) == (546 * GB, None)
    assert apple_bandwidth("Apple M4 Max", gpu_cores=32)[0] == 410 * GB
    bw, note = apple_bandwidth("Apple M4 Max")
    assert bw == 546 * GB and note is not None and "410 or 546" in note
    assert apple_bandwidth("Apple M2 Max", perf_cores=8) == (400 * GB, None)  # one figure for both GPU bins
    bw, note = apple_bandwidth("Apple M5 Max", gpu_cores=32)
    assert bw is None and note is not None and "publishes no bandwidth" in note
    assert apple_bandwidth("Apple M5 Max", gpu_cores=40) == (614 * GB, None)
    assert apple_bandwidth("Apple M9 Ultra")[0] is None


def test_working_set_estimate_follows_the_lower_measured_rule() -> None:
    # 16 GB → 10.67 GiB (exo #1672, llama.cpp logs on an M1 Pro), 32 GB → 21.33 GiB (metal-01: 22906.50 MB),
    # 96 GB → 72 GiB (the 2023 M2 Max log's 73728 MiB)
    assert estimated_working_set_bytes(16 * GIB) == pytest.approx(10.667 * GIB, rel=1e-3)
    assert estimated_working_set_bytes(32 * GIB) == pytest.approx(22906.50e6, rel=1e-3)
    assert estimated_working_set_bytes(96 * GIB) == 72 * GIB


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
