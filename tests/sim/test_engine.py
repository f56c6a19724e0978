"""The simulation itself: GPUs through the NVML source, slots and queueing, the physics it is built on."""

from __future__ import annotations

import dataclasses

import pytest

from kvmon.sim.clock import SimClock
from kvmon.sim.engine import SimEngine
from kvmon.sim.model import LoadedModel
from kvmon.sim.scenarios import GIB, get_scenario
from kvmon.sim.server import SimServer

SEED = {0: 58.45, 8192: 55.69, 32768: 49.66, 65536: 42.83, 131072: 33.45, 262144: 22.68}


def test_seed_model_matches_the_seed_table_and_stays_under_the_ceiling() -> None:
    s = get_scenario("seed-3090x2")
    m = LoadedModel(s, s.n_ctx)
    for depth, tok_s in SEED.items():
        assert m.decode_tok_s(depth) == pytest.approx(tok_s, rel=0.03), depth
        assert 0 < m.efficiency(depth) <= 1.0
    effs = [m.efficiency(d) for d in SEED]
    assert effs == sorted(effs, reverse=True), "the efficiency curve falls with depth (attention overhead)"
    assert m.prefill_s(0, 2048) < m.prefill_s(200_000, 2048)  # prefill slows with depth
    assert 2048 / m.prefill_s(262_144 - 2048, 2048) == pytest.approx(513, rel=0.05)




def test_gpus_through_the_nvml_source() -> None:
    nvml_mod = pytest.importorskip("kvmon.sources.nvml")
    with SimServer("seed-3090x2", speed=1.0) as sim:
        src = nvml_mod.NvmlSource(nvml=sim.nvml)
        try:
            sim.refresh_gpus()
            idle = src.poll(sim.server_pids)
            sim.clock.advance(6.0)  # inside the first answer's decode
            sim.refresh_gpus()
            busy = src.poll(sim.server_pids)
        finally:
            src.close()
        model = sim.engine.epoch_at(sim.clock.now()).model
    assert model is not None and len(busy.gpus) == 2
    for i, g in enumerate(busy.gpus):
        assert g.name == "NVIDIA GeForce RTX 3090"
        assert g.peak_bandwidth_bytes_per_s == pytest.approx(936e9, rel=0.01)
        assert g.server_used_bytes == model.server_vram_bytes(i)
        assert g.vram_used_bytes == model.server_vram_bytes(i) and not g.other_processes_used_bytes
        assert g.gpu_busy_percent > 90 and g.mem_clock_mhz == g.mem_clock_max_mhz
    assert all(g.mem_clock_mhz < 1000 and g.gpu_busy_percent == 0 for g in idle.gpus)  # idle clocks drop
    # weights + KV + buffers of a 27B Q4_K_M with 256K q8_0 cache: about 12 GiB per card
    assert 11 * GIB < busy.gpus[0].server_used_bytes < 13.5 * GIB


def test_a_second_request_waits_for_the_only_slot() -> None:
    clock = SimClock(1.0, running=False)
    eng = SimEngine(get_scenario("seed-3090x2"), clock, autoplay=False)
    a = eng.submit(1000, 500, t=0.0)
    b = eng.submit(200, 10, t=1.0)
    assert b.t_start == pytest.approx(a.t_end)
    m = eng.metrics(2.0)
    assert (m["requests_processing"], m["requests_deferred"]) == (1, 1)
    m = eng.metrics(b.t_end + 1)
    assert (m["requests_processing"], m["requests_deferred"]) == (0, 0)
    assert m["tokens_predicted_total"] == 510 and m["prompt_tokens_total"] == 1200


def test_the_prompt_counters_move_when_the_prompt_is_read_as_on_the_real_server() -> None:
    """Measured on llama-server b11549 (1 slot, a 5,891-token prompt, 1,500 tokens asked): ``prompt_tokens_total``
    stood at 0 through the prefill and moved to 5,891 as decoding began, ``tokens_predicted_total`` only at the
    reply's end, and ``n_decode_total`` counted the prompt's batches (~11 a second) before the tokens."""
    clock = SimClock(1.0, running=False)
    eng = SimEngine(get_scenario("seed-3090x2"), clock, autoplay=False)
    r = eng.submit(6000, 400, t=0.0)
    mid_prefill = eng.metrics(r.t_start + r.prefill_s / 2)
    assert mid_prefill["prompt_tokens_total"] == 0 and mid_prefill["n_decode_total"] > 0
    decoding = eng.metrics((r.t_prefill_end + r.t_end) / 2)
    assert decoding["prompt_tokens_total"] == r.prompt_n and decoding["prompt_seconds_total"] == pytest.approx(
        r.prefill_s)
    assert decoding["tokens_predicted_total"] == 0 and decoding["requests_processing"] == 1
    done = eng.metrics(r.t_end + 1)
    assert done["prompt_tokens_total"] == r.prompt_n and done["tokens_predicted_total"] == 400


def test_parallel_slots_share_the_context_and_run_together() -> None:
    s = dataclasses.replace(get_scenario("spill-4090"), n_parallel=2)
    clock = SimClock(1.0, running=False)
    eng = SimEngine(s, clock, autoplay=False)
    assert eng.slot_ctx(0.0) == s.n_ctx // 2
    a = eng.submit(100, 200, t=0.0)
    b = eng.submit(100, 200, t=0.0)
    assert {a.slot, b.slot} == {0, 1} and b.t_start == a.t_start
    assert eng.metrics(a.t_prefill_end + 0.1)["requests_processing"] == 2


def test_restart_empties_the_server_and_loading_ramps_its_memory() -> None:
    with SimServer("spill-4090", speed=1.0, faults=["restart:10@30"]) as sim:
        sim.clock.advance(29.0)
        sim.refresh_gpus()
        before = sim.nvml.gpus[0].processes[0][1]
        sim.clock.advance(3.0)  # t = 32: loading, 20 % through
        sim.refresh_gpus()
        loading = sim.nvml.gpus[0].processes[0][1]
        m = sim.engine.metrics(sim.clock.now())
        sim.clock.advance(10.0)
        sim.refresh_gpus()
        after = sim.nvml.gpus[0].processes[0][1]
    assert loading < 0.5 * before and after == before
    assert m["tokens_predicted_total"] == 0 and m["n_decode_total"] == 0


def test_spill_story_on_its_own_timeline() -> None:
    """spill-4090 as shipped: free VRAM all but gone before the reload, layers on the CPU after it."""
    with SimServer("spill-4090", speed=1.0) as sim:
        sim.clock.advance(310.0)
        sim.refresh_gpus()
        g = sim.nvml.gpus[0]
        free_before = g.memory_total_bytes - g.memory_used_bytes
        before = sim.engine.epoch_at(310.0).model
        after = sim.engine.epoch_at(345.0).model
        assert sim.engine.loading(335.0) and not sim.engine.loading(345.0)
    assert before is not None and after is not None
    assert free_before < 0.5 * GIB and not before.partial_offload
    assert after.partial_offload and after.n_ctx == 131072
    assert after.decode_tok_s(20_000) < before.decode_tok_s(20_000) / 3
