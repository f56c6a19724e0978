"""Apple chips: names from brand strings, binned chips by core count, and the GPU working-set estimate."""

from __future__ import annotations

import pytest

from kvmon.physics.apple_chips import apple_bandwidth, apple_chip_name, estimated_working_set_bytes
from kvmon.physics.gpus import GB, GIB


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
