"""A depth sweep of every simulated backend, each through its own API: llama-server (token arrays, ``id_slot``),
Ollama (``raw`` generate on the loaded model, never reloaded), vLLM (token ids to ``/v1/completions``, timed by the
stream), LM Studio (its REST chat's stats), the router (the loaded model, ``autoload=false``) and llama-swap (the
running model's own server). Each sweep's decode speeds are the simulated server's physics at those depths."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from kvmon.app.demo import scenario_backend
from kvmon.app.group_monitor import GroupMonitor
from kvmon.app.monitor import Monitor
from kvmon.app.sweep import DepthSweep, target_for
from kvmon.core.analysis import Analyzer
from kvmon.core.sweep import plan_sweep
from kvmon.sim.multi import MultiSim
from kvmon.sim.multi_scenarios import MULTI_SCENARIOS
from kvmon.sim.scenarios import ChatScript, get_scenario
from kvmon.sim.server import SimServer
from kvmon.sources.backends import by_name
from kvmon.sources.detect import source_class
from kvmon.sources.nvml import NvmlSource

QUIET = ChatScript(n_turns=0, first_prompt_tokens=16, target_context_tokens=16, generated_tokens=16, think_s=1.0,
                   loop=False)


def _monitor(sim: SimServer) -> Monitor:
    clock = sim.clock.now
    backend = by_name(sim.scenario.backend)
    options: dict[str, Any] = {"timeout_s": 5.0, "clock": clock}
    if backend.name == "ollama":
        options["find_child"] = False
    server = source_class(backend)(sim.url, **options)
    return Monitor(server, NvmlSource(nvml=sim.nvml, clock=clock), sim.host_source(), Analyzer(clock=clock),
                   server_pids=sim.server_pids, clock=clock)


def _sweep(monitor: Any, to: int, steps: int = 3, generate: int = 16) -> Any:
    snap = monitor.poll()
    time.sleep(0.1)
    snap = monitor.poll()
    plan = plan_sweep(snap, by_name(str(snap.backend)), to, steps, generate)
    assert plan.refusal is None, plan.refusal
    result = DepthSweep(target_for(monitor, snap), plan, snap).run()
    assert result.outcome == "done", result.reason
    assert [r.depth_tokens for r in result.rows][-1] >= to - 8
    return result


def _physics(sim: SimServer, depth: float) -> float:
    """The simulated server's own decode speed at ``depth`` (its model, noise aside)."""
    model = sim.engine.epoch_at(sim.clock.now()).model
    return float(model.decode_tok_s(depth))


@pytest.fixture
def single() -> Iterator[Any]:
    sims: list[SimServer] = []

    def start(scenario: Any, speed: float = 20.0) -> SimServer:
        sim = SimServer(scenario, speed=speed, autoplay=False)
        sim.start()
        sims.append(sim)
        return sim

    yield start
    for sim in sims:
        sim.stop()


def test_llama_server_sweeps_with_token_arrays_on_its_free_slot(single: Any) -> None:
    sim = single("seed-3090x2")
    result = _sweep(_monitor(sim), 8192)
    for row in result.rows:
        assert row.timing == "server"
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 8), rel=0.06)
    assert result.prompt_tokens_read is not None and result.prompt_tokens_read <= 1.2 * result.depth_reached


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


def test_vllm_sweeps_token_ids_timed_by_the_stream(single: Any) -> None:
    sim = single(replace(get_scenario("vllm"), script=QUIET), speed=1.0)  # the stream is timed in real seconds
    result = _sweep(_monitor(sim), 4096, steps=2, generate=64)
    for row in result.rows:  # timed over ~1.2 s of tokens: a busy machine's scheduling costs a few percent
        assert row.timing == "stream"
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 32), rel=0.15)


def test_lm_studio_sweeps_through_its_rest_chat_stats(single: Any) -> None:
    sim = single(replace(get_scenario("lmstudio"), script=QUIET))
    result = _sweep(_monitor(sim), 4096)
    for row in result.rows:
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 8), rel=0.06)


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


def test_a_partial_offload_is_a_configuration_not_a_spill(single: Any) -> None:
    """ollama-partial: a third of gemma3:27b's layers (and their KV cache) run on the CPU, as Ollama placed them:
    the curve of that placement is measured."""
    sim = single(replace(get_scenario("ollama-partial"), script=QUIET))
    result = _sweep(_monitor(sim), 2048)
    for row in result.rows:
        assert row.decode_tok_s == pytest.approx(_physics(sim, row.depth_tokens + 8), rel=0.06)
