"""vLLM: /metrics and /v1/models parsed (new and old names, data-parallel engines, bad lines), the model's shape
from an HF config.json, and the source over real HTTP against the simulated vLLM, through the Analyzer."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from helpers_http import FixtureServer
from repo_paths import FIXTURES

from kvmon.core.analysis import Analyzer
from kvmon.core.rates import SlotRateTracker
from kvmon.core.readings import FailureKind, ServerConfig, ServerReading, SourceError
from kvmon.physics.kv import kv_bytes_per_token
from kvmon.physics.shape import ModelShape
from kvmon.sim.scenarios import get_scenario
from kvmon.sim.server import SimServer
from kvmon.sources.hf_config import config_metadata
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.vllm.parse import parse_metrics
from kvmon.sources.vllm.source import VllmSource, kv_type_of

FIXTURES = FIXTURES / "vllm"
MODEL = "Qwen/Qwen3-8B"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


# ------------------------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(("cache", "model", "want"), [
    ("auto", "bf16", "bf16"), ("fp8", None, "fp8"), ("fp8_e5m2", None, "fp8"), ("bfloat16", None, "bf16"),
    ("float16", None, "f16"), ("auto", None, None), ("weird", None, None), (None, "bf16", None)])
def test_cache_dtype(cache: str | None, model: str | None, want: str | None) -> None:
    got, why = kv_type_of(cache, model)
    assert got == want
    assert (why is None) == (want is not None)


# ------------------------------------------------------------------------------------------------ HF config


QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 40960, "torch_dtype": "bfloat16", "sliding_window": None,
            "use_sliding_window": False}


# ------------------------------------------------------------------------------------------------ rates


def _reading(t: float, generated: float | None, running: int, prefill: tuple[float, float] | None = None
             ) -> ServerReading:
    metrics = {} if generated is None else {"generation_tokens_total": generated}
    if prefill is not None:
        metrics["request_prefill_kv_computed_tokens_sum"], metrics["request_prefill_time_seconds_sum"] = prefill
    return ServerReading(t_monotonic=t, t_wall=t, backend="vllm", url="http://x", metrics=metrics,
                         requests_running=running, config=ServerConfig())


def test_step_counter_rates_and_reset() -> None:
    tr = SlotRateTracker(tau_s=0.0)
    assert tr.update(_reading(0.0, 0.0, 1)).decode_tok_s is None  # baseline
    assert tr.update(_reading(1.0, 100.0, 1)).decode_tok_s == pytest.approx(100.0)
    assert tr.update(_reading(2.0, 300.0, 1)).decode_tok_s == pytest.approx(200.0)
    assert tr.update(_reading(3.0, 10.0, 1)).decode_tok_s is None  # restarted server: the counter fell
    assert tr.update(_reading(4.0, 110.0, 1)).decode_tok_s == pytest.approx(100.0)
    assert tr.update(_reading(5.0, 110.0, 0)).decode_tok_s is None  # idle
    assert tr.update(_reading(6.0, 500.0, 1)).decode_tok_s is None  # began inside the interval: not a rate
    s = tr.update(_reading(7.0, 600.0, 1, (1000.0, 0.5)))
    assert s.decode_tok_s == pytest.approx(100.0) and s.decode_rate_source == "metrics"
    assert tr.update(_reading(8.0, 700.0, 1, (3000.0, 1.0))).prefill_tok_s == pytest.approx(4000.0)


# ------------------------------------------------------------------------------------------------ the source


def _poll_until(src: VllmSource, sim: SimServer, cond, timeout_s: float = 20.0) -> list:
    an = Analyzer(clock=sim.clock.now)
    gpus = NvmlSource(nvml=sim.nvml, clock=sim.clock.now)
    snaps = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        snap = an.update(src.poll(), gpus.poll(sim.server_pids))
        snaps.append(snap)
        if cond(snaps):
            break
        time.sleep(0.15)
    return snaps


def test_source_on_the_simulated_vllm() -> None:
    with SimServer("vllm", speed=4.0) as sim:
        src = VllmSource(sim.url, clock=sim.clock.now)
        try:
            snaps = _poll_until(src, sim, lambda ss: any(s.decode_tok_s and s.ceiling_tok_s for s in ss)
                                and any(s.prefill_tok_s for s in ss))
            r = src.poll()
        finally:
            src.close()
    assert r.backend == "vllm" and r.server_version == "0.33.0" and r.model is not None
    assert r.model.name == MODEL and r.model.shape_source == "hf_config"
    per_token = 36 * 2 * 8 * 128 * 2  # Qwen3-8B, bf16 (cache_dtype auto, the checkpoint's torch_dtype)
    assert r.config.n_ctx_total == 40960 and r.config.kv_bytes_allocated == 40960 * per_token
    assert r.config.type_k == "bf16" and r.config.n_ctx_per_slot == 32768
    s = next(s for s in snaps if s.decode_tok_s and s.ceiling_tok_s)
    assert s.kv_allocated_bytes == 40960 * per_token and s.model.n_ctx == 32768
    assert s.kv_in_use_bytes and s.context_tokens and s.provenance["context_tokens"] == "computed"
    assert 0.3 < (s.efficiency or 0) < 1.0  # the simulator's speed sits below the bus ceiling
    assert any(x.prefill_tok_s and 8000 < x.prefill_tok_s < 14000 for x in snaps)  # the scenario's ~12,000 tok/s
    # Qwen3-8B as published: 8,190,735,360 parameters in bf16 (its model.safetensors.index.json total_size)
    assert s.model.weight_bytes == 16_381_470_720 and s.model.n_params == 8_190_735_360
    assert s.model.quantization == "BF16" and "safetensors headers" in s.reasons["weight_bytes"]
    assert 45 < (s.ceiling_tok_s or 0) < 62  # 1008 GB/s over 16.4 GB of weights and the KV in use


def test_old_vllm_names_over_http() -> None:
    scenario = replace(get_scenario("vllm"), vllm_metric_names="v0")
    with SimServer(scenario, speed=4.0) as sim:
        src = VllmSource(sim.url, clock=sim.clock.now)
        try:
            snaps = _poll_until(src, sim, lambda ss: any(s.kv_in_use_bytes for s in ss))
        finally:
            src.close()
        assert "gpu_cache_usage_perc" in sim.api.metrics_text()
    assert any(s.kv_in_use_bytes for s in snaps)


def test_no_model_folder_says_why(fixture_server: FixtureServer) -> None:
    fixture_server.set("/metrics", 200, _text("metrics.v1.txt"), {"Content-Type": "text/plain"})
    fixture_server.set("/v1/models", 200, _text("v1-models.json"))
    fixture_server.set("/version", 200, '{"version":"0.33.0"}')
    src = VllmSource(fixture_server.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.model is not None and r.model.shape is None and r.config.kv_bytes_allocated is None
    assert "not found on this machine" in r.reasons["model_shape"]
    assert "cache_dtype is auto" in r.reasons["kv_type"]
    assert r.config.n_ctx_total == 438848 and r.kv_in_use_fraction == 0.25 and r.requests_running == 1
    snap = Analyzer().update(r)
    assert snap.kv_allocated_bytes is None and snap.kv_in_use_bytes is None and snap.context_tokens == 109712


@pytest.mark.parametrize(("status", "kind"), [(401, FailureKind.AUTH_REJECTED), (500, FailureKind.SERVER_ERROR)])
def test_metrics_refused(fixture_server: FixtureServer, status: int, kind: FailureKind) -> None:
    fixture_server.set("/metrics", status, '{"error":"Unauthorized"}')
    src = VllmSource(fixture_server.url)
    try:
        with pytest.raises(SourceError) as e:
            src.poll()
    finally:
        src.close()
    assert e.value.failure.kind == kind


def test_usage_past_one_is_unknown(fixture_server: FixtureServer) -> None:
    text = _text("metrics.v1.txt").replace('model_name="Qwen/Qwen3-8B"} 0.25', 'model_name="Qwen/Qwen3-8B"} 7.5')
    fixture_server.set("/metrics", 200, text, {"Content-Type": "text/plain"})
    src = VllmSource(fixture_server.url)
    try:
        snap = Analyzer().update(src.poll())
    finally:
        src.close()
    assert snap.kv_in_use_bytes is None and snap.context_tokens is None
    assert "impossible" in snap.reasons["kv_in_use_fraction"]


def test_demo() -> None:
    from kvmon.app.demo import demo_session

    session = demo_session("vllm", None, speed=4.0)
    mon = session.factory()
    try:
        seen = []
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(s.decode_tok_s and s.efficiency for s in seen):
            seen.append(mon.poll())
            time.sleep(0.2)
        assert any(s.decode_tok_s and s.efficiency for s in seen)
        assert seen[-1].backend == "vllm" and seen[-1].gpus and seen[-1].kv_allocated_bytes
    finally:
        mon.close()
        session.close()


def test_a_sleeping_engine_reads_as_sleeping(fixture_server: FixtureServer) -> None:
    lines = "".join(f'vllm:engine_sleep_state{{engine="0",model_name="{MODEL}",sleep_state="{s}"}} {v}\n'
                    for s, v in (("awake", 0.0), ("weights_offloaded", 1.0), ("discard_all", 0.0)))
    assert parse_metrics(lines).models[MODEL].awake is False
    awake = lines.replace('sleep_state="awake"} 0.0', 'sleep_state="awake"} 1.0')
    assert parse_metrics(awake).models[MODEL].awake is True
    assert parse_metrics(_text("metrics.v1.txt")).models[MODEL].awake is None  # older servers have no such series
    fixture_server.set("/metrics", 200, _text("metrics.v1.txt") + lines, {"Content-Type": "text/plain"})
    src = VllmSource(fixture_server.url)
    try:
        r = src.poll()
    finally:
        src.close()
    assert r.state == "sleeping" and "asleep" in r.reasons["state"]
    assert Analyzer().update(r).connection.status.value == "sleeping"


def test_several_requests_decoding_together_have_a_batch_ceiling(fixture_server: FixtureServer) -> None:
    """Two requests running: one step reads the weights once and both requests' KV, and gives two tokens."""
    from kvmon.core.readings import GpuReading, GpuSetReading
    from kvmon.physics.gpus import lookup_gpu

    text = _text("metrics.v1.txt").replace('vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 1.0',
                                           'vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 2.0')
    fixture_server.set("/metrics", 200, text, {"Content-Type": "text/plain"})
    src = VllmSource(fixture_server.url)
    try:
        r = src.poll()
    finally:
        src.close()
    shape = ModelShape.from_gguf(config_metadata(QWEN3_8B)[0])
    per_token = kv_bytes_per_token(shape, "bf16", "bf16").total
    r = replace(r, model=replace(r.model, shape=shape, weight_bytes=16 * 10**9),
                config=replace(r.config, type_k="bf16", type_v="bf16", kv_bytes_allocated=438848 * per_token))
    gpu = GpuReading(index=0, name="NVIDIA H100 80GB HBM3", vram_total_bytes=80 * 2**30, vram_used_bytes=74 * 2**30,
                     vram_free_bytes=6 * 2**30)
    snap = Analyzer().update(r, GpuSetReading(t_monotonic=r.t_monotonic, gpus=(gpu,)))
    assert snap.context_tokens is None and "2 requests" in snap.reasons["context_tokens"]
    assert snap.kv_in_use_bytes == round(0.25 * 438848 * per_token)
    spec = lookup_gpu("H100")
    assert spec is not None
    one = 1.0 / ((16 * 10**9 + snap.kv_in_use_bytes) / spec.bandwidth_bytes_per_s)
    assert snap.ceiling_tok_s == pytest.approx(2 * one, rel=0.02)
    assert "decoding together" in snap.reasons["ceiling_tok_s"]
