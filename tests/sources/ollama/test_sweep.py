"""Ollama swept through raw generate on its loaded model, never reloaded (the simulator reloads for another num_ctx, as
Ollama does, so the check can fail)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
import pytest
from sweep_sim import QUIET, _monitor, _physics, _sweep

from kvmon.sim.scenarios import get_scenario
from kvmon.sim.server import SimServer


def test_ollama_sweeps_its_loaded_model_through_raw_generate_and_never_reloads_it(single: Any) -> None:
    # a 12B model on a 24 GiB card: it fits, nothing spills
    sim = single(replace(get_scenario("lmstudio"), name="ollama-fits", backend="ollama", model_alias="gemma3:12b",
                         gpu_name="RTX 4090", script=QUIET))
    loads_before = sim.engine.loads
    ctx_before = httpx.get(f"{sim.url}/api/ps").json()["models"][0]["context_length"]
    result = _sweep(_monitor(sim), 4096)
    assert sim.engine.loads == loads_before, "the sweep made Ollama load the model again"
    assert httpx.get(f"{sim.url}/api/ps").json()["models"][0]["context_length"] == ctx_before
    for row in result.rows:
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 8), rel=0.06)


def test_a_num_ctx_option_would_have_reloaded_the_simulated_ollama() -> None:
    """The simulator's Ollama reloads for another num_ctx, as Ollama does: the check above can fail."""
    sim = SimServer(replace(get_scenario("lmstudio"), backend="ollama", model_alias="gemma3:12b",
                            gpu_name="RTX 4090", script=QUIET), speed=50.0, autoplay=False)
    sim.start()
    try:
        before = sim.engine.loads
        r = httpx.post(f"{sim.url}/api/generate", json={"model": "gemma3:12b", "prompt": "hi", "raw": True,
                                                        "stream": False, "options": {"num_predict": 2,
                                                                                     "num_ctx": 4096}}, timeout=30)
        assert r.json()["load_duration"] > 1e9
        assert sim.engine.loads == before + 1
    finally:
        sim.stop()
