"""Depth sweeps of the simulated servers that hold several models: a router or llama-swap sweeps the loaded model and
loads nothing, a model not loaded is refused; and a partial offload is measured as the configuration it is. Each
backend's own sweep is tested beside its module (``tests/sources/<backend>/test_sweep.py``); every sweep's decode
speeds are the simulated server's physics at those depths."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from sweep_sim import QUIET, _monitor, _physics, _sweep

from kvmon.app.demo import scenario_backend
from kvmon.app.group_monitor import GroupMonitor
from kvmon.sim.multi import MultiSim
from kvmon.sim.multi_scenarios import MULTI_SCENARIOS
from kvmon.sim.scenarios import get_scenario
from kvmon.sources.detect import source_class
from kvmon.sources.nvml import NvmlSource


def _multi(name: str) -> MultiSim:
    sc = MULTI_SCENARIOS[name]
    models = tuple(replace(m, scenario=replace(m.scenario, script=QUIET)) for m in sc.models)
    sim = MultiSim(replace(sc, models=models, plan=((0.5, "load", "qwen3-8b"),)), speed=20.0)
    sim.start()
    deadline = time.monotonic() + 10
    while not sim.running("qwen3-8b") or sim.status("qwen3-8b") != "loaded":
        assert time.monotonic() < deadline, "qwen3-8b did not load"
        time.sleep(0.05)
    return sim


def _group(sim: MultiSim) -> GroupMonitor:
    from kvmon.sources.host import HostSource

    clock = sim.clock.now
    source = source_class(scenario_backend(sim.scenario))(sim.url, timeout_s=5.0, clock=clock)
    return GroupMonitor(source, NvmlSource(nvml=sim.nvml, clock=clock), HostSource(64e9, clock=clock), clock=clock,
                        model_pids=sim.model_pids, timeout_s=5.0)


@pytest.mark.parametrize("kind", ["router", "llama-swap"])
def test_a_router_or_llama_swap_sweeps_the_loaded_model_and_loads_nothing(kind: str) -> None:
    sim = _multi(kind)
    try:
        monitor = _group(sim)
        try:
            result = _sweep(monitor, 4096)
        finally:
            monitor.close()
        assert result.model and "qwen3" in result.model.lower()
        assert [n for n, c in sim.children.items() if c.status(sim.clock.now()) != "unloaded"] == ["qwen3-8b"]
        assert sim.autoloads == [] and sim.upstream_starts == []
        child = sim.children["qwen3-8b"].server
        for row in result.rows:
            assert row.decode_tok_s == pytest.approx(_physics(child, row.depth_tokens + 8), rel=0.06)
    finally:
        sim.stop()


def test_the_router_refuses_a_model_that_is_not_loaded_instead_of_loading_it() -> None:
    from kvmon.sources.llamacpp.sweep import LlamaServerSweep

    sim = _multi("router")
    try:
        target = LlamaServerSweep(sim.url, model_id="gemma-3-12b")
        with pytest.raises(Exception, match="not loaded"):
            target.prepare(None)
        assert not sim.running("gemma-3-12b")
    finally:
        sim.stop()




def test_a_partial_offload_is_a_configuration_not_a_spill(single: Any) -> None:
    """ollama-partial: a third of gemma3:27b's layers (and their KV cache) run on the CPU, as Ollama placed them:
    the curve of that placement is measured."""
    sim = single(replace(get_scenario("ollama-partial"), script=QUIET))
    result = _sweep(_monitor(sim), 2048)
    for row in result.rows:
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 8), rel=0.06)
