"""Intel Arc GPUs as the OS names them, found in kvmon's table with their published bandwidth and memory (the xe and
i915 drivers publish neither to an ordinary user, so this table is where an Arc card's ceiling comes from)."""

from __future__ import annotations

import pytest

from kvmon.physics.gpu_spec import GB, GIB
from kvmon.physics.gpus import lookup_gpu, lookup_pci


@pytest.mark.parametrize(("reported", "name", "gb_s", "vram_gib"), [
    ("Intel(R) Arc(TM) A770 Graphics", "Arc A770", 560, 16),
    ("Intel(R) Arc(TM) B580 Graphics", "Arc B580", 456, 12),
    ("Intel(R) Arc(TM) B570 Graphics", "Arc B570", 380, 10),
])
def test_a_card_by_the_name_the_os_reports(reported: str, name: str, gb_s: float, vram_gib: float) -> None:
    spec = lookup_gpu(reported)
    assert spec is not None and spec.name == name
    assert spec.bandwidth_bytes_per_s == gb_s * GB
    assert spec.vram_bytes == vram_gib * GIB


def test_a_card_by_its_pci_id() -> None:
    spec = lookup_pci("8086:56a0")
    assert spec is not None and spec.name == "Arc A770"


def test_a_pro_card_pci_ids_do_not_name_is_found_by_name_only() -> None:
    spec = lookup_gpu("Intel(R) Arc(TM) Pro B50 Graphics")
    assert spec is not None and spec.name == "Arc Pro B50"
    assert spec.pci_ids == ()
