"""A sweep of a KV cache that already spills is refused with the reason, unless the spilled curve is asked for."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sweep_sim import QUIET, _monitor

from kvmon.app.sweep import DepthSweep, target_for
from kvmon.core.sweep import plan_sweep
from kvmon.sim.scenarios import get_scenario
from kvmon.sim.server import SimServer
from kvmon.sources.backends import by_name


def test_a_kv_cache_that_spills_is_refused_with_the_reason() -> None:
    """spill-4090 after its reload with 128K: 71% of the KV cache sits in host RAM, read over PCIe."""
    sim = SimServer(replace(get_scenario("spill-4090"), script=QUIET), speed=20.0, autoplay=False, start_at_s=360.0)
    sim.start()
    try:
        monitor = _monitor(sim)
        monitor.poll()
        snap = monitor.poll()
        plan = plan_sweep(snap, by_name(str(snap.backend)), 4096, 3, 16)
        assert plan.refusal is not None
        assert plan.refusal.startswith("the KV cache already spills out of the device's memory (KV cache in host "
                                       "RAM (11.3 GiB, 71%)")
        assert "every depth would measure the spill" in plan.refusal
        with pytest.raises(Exception, match="spills"):
            DepthSweep(target_for(monitor, snap), plan, snap)
        assert plan_sweep(snap, by_name(str(snap.backend)), 4096, 3, 16, allow_spill=True).refusal is None
    finally:
        sim.stop()
