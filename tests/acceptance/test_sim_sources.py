"""kvmon's own sources read the simulator with no special case: the seed's curve, the spill, Ollama."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from kvmon.core.readings import FailureKind, ServerReading, SourceError
from kvmon.sim.scenarios import GIB, ChatScript, Reload, get_scenario
from kvmon.sim.server import SimServer

llamacpp = pytest.importorskip("kvmon.sources.llamacpp.source")

SEED = {0: 58.45, 8192: 55.69, 32768: 49.66, 65536: 42.83, 131072: 33.45, 262144: 22.68}


def test_seed_curve_measured_through_the_source_falls_like_the_seed() -> None:
    """50 turns to ~256K, the simulated clock stepped 20 s per poll: decode speed of the turns finished
    between polls (from /metrics counter deltas) against the depth they ran at (n_tokens_max, mid-interval)."""
    base = get_scenario("seed-3090x2")
    # same hardware, model and physics; shorter answers and pauses so the whole conversation takes fewer polls
    scenario = dataclasses.replace(base, script=dataclasses.replace(base.script, generated_tokens=200, think_s=2.0,
                                                                    start_delay_s=0.0, loop=False))
    points: list[tuple[int, float]] = []
    with SimServer(scenario, speed=1.0) as sim:
        src = llamacpp.LlamaServerSource(sim.url, timeout_s=5.0, log_path=sim.log_path)
        try:
            prev: ServerReading = src.poll()
            for _ in range(200):
                sim.clock.advance(20.0)
                r = src.poll()
                d_tok = r.metrics["tokens_predicted_total"] - prev.metrics["tokens_predicted_total"]
                d_s = r.metrics["tokens_predicted_seconds_total"] - prev.metrics["tokens_predicted_seconds_total"]
                if d_tok > 0 and d_s > 0:
                    depth = (r.metrics["n_tokens_max"] + prev.metrics["n_tokens_max"]) / 2
                    points.append((int(depth), d_tok / d_s))
                prev = r
                if sim.engine._script_done and not r.slots[0].processing:
                    break
        finally:
            src.close()
        assert r.model is not None and r.model.shape is not None, "shape from the GGUF header /props points at"
        assert r.config.type_k == "q8_0" and r.config.kv_bytes_allocated, "KV type and size from the server log"
    assert points and max(d for d, _ in points) > 240_000, f"conversation did not reach 256K: {points[-3:]}"
    # binned curve: monotone fall
    edges = [0, 20_000, 60_000, 100_000, 140_000, 180_000, 220_000, 270_000]
    bins = []
    for lo, hi in itertools.pairwise(edges):
        sel = [v for d, v in points if lo <= d < hi]
        assert sel, f"no measurement between {lo} and {hi} tokens"
        bins.append(sum(sel) / len(sel))
    assert all(a > b for a, b in itertools.pairwise(bins)), f"not a monotone fall: {bins}"
    empty = [v for d, v in points if d < 16_000]
    deep = [v for d, v in points if d > 245_000]
    ratio = (sum(deep) / len(deep)) / (sum(empty) / len(empty))
    seed_ratio = SEED[262144] / SEED[0]
    assert abs(ratio / seed_ratio - 1) < 0.15, f"256K/empty {ratio:.3f} vs the seed's {seed_ratio:.3f}"


def _spill_scenario() -> object:
    base = get_scenario("spill-4090")
    # the same story on a compressed timeline: other VRAM climbs from 10 s to 40 s, reload at 50 s
    return dataclasses.replace(base, other_vram=((0.0, 1 * GIB), (10.0, 1 * GIB), (40.0, 14 * GIB)),
                               reload=Reload(at_s=50.0, n_ctx=131072, load_s=5.0),
                               script=ChatScript(n_turns=40, first_prompt_tokens=800, target_context_tokens=30000,
                                                 generated_tokens=300, think_s=1.0, start_delay_s=0.0))


def test_spill_shows_partial_offload_pcie_traffic_and_the_cliff() -> None:
    """The spill story read through the llama-server source (with the server's log) and the NVML source."""
    nvml_mod = pytest.importorskip("kvmon.sources.nvml")
    with SimServer(_spill_scenario(), speed=1.0) as sim:  # type: ignore[arg-type]
        sim.clock.pause()  # only the test moves time: a loaded machine must not shift the phases it aims at
        src = llamacpp.LlamaServerSource(sim.url, timeout_s=5.0, log_path=sim.log_path)
        gpus = nvml_mod.NvmlSource(nvml=sim.nvml)

        def at(t: float) -> tuple[ServerReading, object]:
            sim.clock.advance(max(0.0, t - sim.clock.now()))
            r = src.poll()
            sim.refresh_gpus()
            return r, gpus.poll(r.server_pids or sim.server_pids).gpus[0]

        def phase_time(phase: str) -> float:
            """The middle of the next prefill or decode of the scripted chat (stepping simulated time to it)."""
            for _ in range(2000):
                now = sim.clock.now()
                sim.engine.advance(now)
                for r in sim.engine.live_requests(now):
                    lo, hi = (r.t_start, r.t_prefill_end) if phase == "prefill" else (r.t_prefill_end, r.t_end)
                    if hi > now and hi - lo > 0.2:
                        return max(now, (lo + hi) / 2)
                sim.clock.advance(0.1)
            raise AssertionError(f"no {phase} within 200 s")

        try:
            early, g_early = at(5.0)
            t = phase_time("decode")
            _, g_decode_gpu = at(t)
            full, g_full = at(46.0)
            sim.clock.advance(52.0 - sim.clock.now())
            with pytest.raises(SourceError) as loading:
                src.poll()
            at(56.0)  # reloaded: the chat resends its whole history
            _, g_prefill = at(phase_time("prefill"))
            _, g_decode_cpu = at(phase_time("decode"))
            sim.clock.advance(sim.engine.live_requests(sim.clock.now())[0].t_end + 0.5 - sim.clock.now())
            after, _ = at(sim.clock.now())
        finally:
            src.close()
            gpus.close()
    assert loading.value.failure.kind is FailureKind.MODEL_LOADING
    # before: everything on the GPU; the other application's VRAM rises until almost nothing is free
    assert early.config.offloaded_layers == early.config.total_layers
    assert g_full.other_processes_used_bytes > g_early.other_processes_used_bytes + 10 * GIB
    assert g_full.vram_free_bytes < 1 * GIB
    # after the reload with a 128K context: layers on the CPU (from the server's own log)
    assert after.config.n_ctx_total == 131072
    assert after.config.offloaded_layers < after.config.total_layers
    assert "CPU" in after.config.kv_buffer_bytes_by_device
    # PCIe: prompt batches stream the CPU layers' weights to the GPU; each decoded token crosses the link
    assert g_prefill.pcie_rx_bytes_per_s > 1e9
    assert g_decode_cpu.pcie_rx_bytes_per_s > 10 * g_decode_gpu.pcie_rx_bytes_per_s
    assert g_decode_cpu.gpu_busy_percent < g_decode_gpu.gpu_busy_percent  # the GPU waits for the CPU
    # the cliff: decode speed of the reloaded server (its counters started afresh with the new process)
    before_tok_s = full.metrics["tokens_predicted_total"] / full.metrics["tokens_predicted_seconds_total"]
    after_tok_s = after.metrics["tokens_predicted_total"] / after.metrics["tokens_predicted_seconds_total"]
    assert before_tok_s > 80 and after_tok_s < before_tok_s / 3, (before_tok_s, after_tok_s)


def test_ollama_partial_shows_size_vram_below_size() -> None:
    ollama = pytest.importorskip("kvmon.sources.ollama.source")
    with SimServer("ollama-partial", speed=20.0) as sim:
        src = ollama.OllamaSource(sim.url, timeout_s=5.0, find_child=False)
        try:
            r = src.poll()
        finally:
            src.close()
    assert r.backend == "ollama"
    assert r.model is not None and r.model.name == "gemma3:27b"
    assert r.weight_bytes_host is not None and r.weight_bytes_host > 1 * GIB
    assert r.weight_bytes_vram is not None and r.weight_bytes_vram < 16 * GIB
    assert r.model.shape is not None, "shape from /api/show model_info"


@pytest.mark.parametrize(("scenario", "backend"), [("seed-3090x2", "llama-server"), ("ollama-partial", "ollama")])
def test_backend_detection_tells_the_simulated_servers_apart(scenario: str, backend: str) -> None:
    detect = pytest.importorskip("kvmon.sources.detect")
    with SimServer(scenario, speed=1.0) as sim:
        assert detect.detect_backend(sim.url, timeout_s=3.0) == backend
        src = detect.open_source(sim.url, timeout_s=3.0)
        try:
            assert src.backend == backend
            assert src.poll().backend == backend
        finally:
            src.close()
