"""The GPU table: names as NVML and macOS report them, variants kept apart, PCIe link bandwidth."""

from __future__ import annotations

import pytest

from kvmon.physics.gpus import GB, GIB, KNOWN_GPUS, lookup_gpu, lookup_pci, pcie_bandwidth_bytes_per_s


@pytest.mark.parametrize(
    ("reported", "table_name"),
    [
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", "RTX 4070 Ti SUPER"),
        ("NVIDIA GeForce RTX 4070 Ti", "RTX 4070 Ti"),
        ("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 SUPER"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("Apple M2 Max", "Apple M2 Max"),
        ("Apple M4 Pro", "Apple M4 Pro"),
        ("Apple M2", "Apple M2"),  # the base chip, not its Max
        ("AMD Radeon RX 7900 XTX", "Radeon RX 7900 XTX"),
        ("AMD Radeon RX 7900 XT", "Radeon RX 7900 XT"),  # not the XTX
        ("AMD Radeon RX 7600 XT", "Radeon RX 7600 XT"),
        ("AMD Instinct MI300X", "Instinct MI300X"),
        ("Intel(R) Arc(TM) A770 Graphics", "Arc A770"),
        ("Intel(R) Arc(TM) Pro B60 Graphics", "Arc Pro B60"),
    ],
)
def test_lookup_by_reported_name(reported: str, table_name: str) -> None:
    spec = lookup_gpu(reported)
    assert spec is not None and spec.name == table_name


@pytest.mark.parametrize("reported", ["NVIDIA GeForce RTX 4090 Laptop GPU", "Quadro RTX 6000", "Apple M6", "", None,
                                      "AMD Radeon RX 5700 XT", "Intel(R) UHD Graphics 770", "AMD Radeon Graphics"])
def test_unknown_or_different_parts_are_not_guessed(reported: str | None) -> None:
    assert lookup_gpu(reported) is None


def test_seed_and_reference_bandwidths() -> None:
    assert lookup_gpu("RTX 3090").bandwidth_bytes_per_s == 936 * GB  # type: ignore[union-attr]
    assert lookup_gpu("RTX 4090").bandwidth_bytes_per_s == 1008 * GB  # type: ignore[union-attr]
    assert lookup_gpu("Apple M2 Max").bandwidth_bytes_per_s == 400 * GB  # type: ignore[union-attr]


def test_table_is_consistent() -> None:
    names = [g.name for g in KNOWN_GPUS]
    assert len(names) == len(set(names))
    for g in KNOWN_GPUS:
        assert g.bandwidth_bytes_per_s > 0 and g.vram_bytes > 0
        assert lookup_gpu(g.name) is g, g.name  # every entry finds itself


def test_pcie_bandwidth() -> None:
    assert pcie_bandwidth_bytes_per_s(4, 16) == pytest.approx(31.5e9, rel=0.001)
    assert pcie_bandwidth_bytes_per_s(3, 16) == pytest.approx(15.75e9, rel=0.001)
    assert pcie_bandwidth_bytes_per_s(5, 8) == pcie_bandwidth_bytes_per_s(4, 16)
    assert pcie_bandwidth_bytes_per_s(None, 16) is None
    assert pcie_bandwidth_bytes_per_s(4, 0) is None
    assert pcie_bandwidth_bytes_per_s(9, 16) is None


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
