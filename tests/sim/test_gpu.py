"""The simulated GPUs as the fake NVML shows them: kvmon's own NVML reading gives each scenario's card its published
bandwidth and memory, and the bus width comes from the table's memory description."""

from __future__ import annotations

import pytest

from kvmon.physics.gpus import lookup_gpu
from kvmon.sim.gpu import SimGpus, bus_width_bits
from kvmon.sim.scenarios import get_scenario
from kvmon.sources.nvml import NvmlSource


@pytest.mark.parametrize(("scenario", "n_gpus"), [("spill-4090", 1), ("seed-3090x2", 2)])
def test_kvmons_nvml_reading_of_a_simulated_card_gives_its_published_figures(scenario: str, n_gpus: int) -> None:
    sim = SimGpus(get_scenario(scenario))
    reading = NvmlSource(sim.nvml, include_child_processes=False).poll()
    assert len(reading.gpus) == n_gpus
    for g in reading.gpus:
        spec = lookup_gpu(g.name)
        assert spec is not None and spec is sim.spec
        assert g.vram_total_bytes == spec.vram_bytes
        assert g.bandwidth_source == "nvml"  # from the clock and the bus, not looked up in the table
        assert g.peak_bandwidth_bytes_per_s == pytest.approx(spec.bandwidth_bytes_per_s, rel=0.002)


def test_the_bus_width_is_read_from_the_memory_description() -> None:
    assert bus_width_bits("GDDR6X 21 Gbps, 384-bit") == 384
    assert bus_width_bits("GDDR6 17.5 Gbps, 256-bit (8 or 16 GB)") == 256
    assert bus_width_bits("HBM3") == 256  # no width given: a common one, the bandwidth still from the clock
