"""AMD GPUs as the OS and ROCm name them, found in kvmon's table with their published bandwidth and memory: the
ceiling of a Radeon or an Instinct card comes from here."""

from __future__ import annotations

import pytest

from kvmon.physics.gpu_spec import GB, GIB
from kvmon.physics.gpus import lookup_gpu, lookup_pci


@pytest.mark.parametrize(("reported", "name", "gb_s", "vram_gib"), [
    ("AMD Radeon RX 7900 XTX", "Radeon RX 7900 XTX", 960, 24),
    ("AMD Radeon RX 7900 XT", "Radeon RX 7900 XT", 800, 20),
    ("AMD Radeon PRO W7900", "Radeon PRO W7900", 864, 48),
    ("AMD Instinct MI300X", "Instinct MI300X", 5300, 192),
])
def test_a_card_by_the_name_the_driver_reports(reported: str, name: str, gb_s: float, vram_gib: float) -> None:
    spec = lookup_gpu(reported)
    assert spec is not None and spec.name == name
    assert spec.bandwidth_bytes_per_s == gb_s * GB
    assert spec.vram_bytes == vram_gib * GIB


def test_the_pro_w7900_is_not_taken_for_the_rx_7900_xtx_by_its_id() -> None:
    w7900 = lookup_pci("1002:7448", 48 * GIB)
    assert w7900 is not None and w7900.name == "Radeon PRO W7900"


def test_an_id_shared_by_cards_of_one_bandwidth_names_them_all_and_claims_none() -> None:
    spec = lookup_pci("1002:73bf", 16 * GIB)
    assert spec is not None
    assert spec.bandwidth_bytes_per_s == 512 * GB
    assert "RX 6800 XT" in spec.name and "RX 6900 XT" in spec.name
