"""The ceiling: the memory bus of the devices the model runs on (a GPU's, host RAM's, a user's setting), none with a
reason when the device is not known, and a MoE model reading only its active experts."""

from __future__ import annotations

from dataclasses import replace

import pytest
from analysis_readings import GIB, KV_PER_TOKEN_8B, L8B, SHAPE_8B, FixedRates, ceiling_8b, gpu, gpus, reading

from kvmon.core.analysis import NO_GPU_BANDWIDTH, NO_HOST_BANDWIDTH, Analyzer, AnalyzerSettings
from kvmon.core.readings import GpuSetReading, HostReading, ModelInfo, ServerConfig
from kvmon.core.snapshot import AlertLevel
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape


def test_no_gpu_on_a_remote_server_means_no_ceiling_with_a_reason() -> None:
    # a server elsewhere: this machine's devices say nothing about where its model lives
    remote = {"url": "http://10.0.0.5:8080"}
    a = Analyzer(rate_tracker=FixedRates(decode=40.0))
    s = a.update(replace(reading(), **remote),
                 GpuSetReading(t_monotonic=0.0, unavailable_reason="no NVIDIA GPU: driver not loaded"))
    assert s.ceiling_tok_s is None and s.ceiling_curve == () and s.efficiency is None
    assert s.reasons["ceiling_tok_s"] == NO_GPU_BANDWIDTH
    assert s.gpus == () and s.gpus_unavailable_reason == "no NVIDIA GPU: driver not loaded"
    assert s.decode_tok_s == 40.0
    s2 = Analyzer(rate_tracker=FixedRates()).update(reading(), None)  # no device source at all: nothing inferred
    assert s2.reasons["ceiling_tok_s"] == NO_GPU_BANDWIDTH


def test_no_gpu_on_this_machine_means_the_cpu_decodes_at_host_bandwidth() -> None:
    none = GpuSetReading(t_monotonic=0.0, unavailable_reason="no NVIDIA GPU: driver not loaded; no AMD GPU")
    s = Analyzer(rate_tracker=FixedRates(decode=4.0)).update(reading(), none)
    assert s.ceiling_tok_s is None and s.reasons["ceiling_tok_s"] == NO_HOST_BANDWIDTH
    assert s.extra["placement"] == "no_gpu" and "runs on the CPU" in s.reasons["placement"]
    host = HostReading(t_monotonic=0.0, ram_total_bytes=64 * GIB, ram_available_bytes=40 * GIB,
                       host_bandwidth_bytes_per_s=60e9, host_bandwidth_source="measured")
    s = Analyzer(rate_tracker=FixedRates(decode=4.0)).update(reading(), none, host)
    assert s.ceiling_tok_s == pytest.approx(ceiling_8b(8192, 60e9))
    assert s.efficiency == pytest.approx(4.0 / ceiling_8b(8192, 60e9))
    assert s.host.in_ceiling and s.host.host_bandwidth_source == "measured"
    assert s.host.weights_in_host_bytes == L8B.weight_bytes and s.host.kv_in_host_bytes == 4 * GIB
    assert s.host.achieved_bandwidth_bytes_per_s == pytest.approx(4.0 * (L8B.weight_bytes + KV_PER_TOKEN_8B * 8192))
    (alert,) = [a for a in s.alerts if a.code == "cpu_only"]
    assert alert.level is AlertLevel.INFO and "60 GB/s (measured)" in alert.message
    assert not any(a.code in ("kv_in_host", "weights_in_host") for a in s.alerts)


def test_unknown_gpu_bandwidth_and_the_user_setting() -> None:
    unknown = gpu(name="Some Future GPU", bw=None)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(), gpus(0.0, unknown))
    assert s.ceiling_tok_s is None and s.reasons["ceiling_tok_s"] == NO_GPU_BANDWIDTH
    assert s.gpus[0].reasons["peak_bandwidth_bytes_per_s"] == NO_GPU_BANDWIDTH
    a = Analyzer(AnalyzerSettings(gpu_bandwidth_bytes_per_s={0: 500e9}), rate_tracker=FixedRates())
    s = a.update(reading(), gpus(0.0, unknown))
    assert s.gpus[0].bandwidth_source == "user"
    assert s.ceiling_tok_s == pytest.approx(ceiling_8b(8192, 500e9))
    # the GPU table stands in when the reading has no bandwidth but a known name
    s = Analyzer(rate_tracker=FixedRates()).update(reading(), gpus(0.0, gpu(name="NVIDIA GeForce RTX 3090", bw=None)))
    assert s.gpus[0].bandwidth_source == "table" and s.ceiling_tok_s == pytest.approx(ceiling_8b(8192, 936e9))


def test_cpu_only_server_uses_host_bandwidth() -> None:
    cfg = ServerConfig(n_ctx_total=16384, n_parallel=1, model_buffer_bytes_by_device={"AMX": 4_718_592,
                                                                                       "CPU_Mapped": 5_337_251})
    host = HostReading(t_monotonic=0.0, host_bandwidth_bytes_per_s=40e9, host_bandwidth_source="user")
    tiny = ModelInfo(name="tiny", weight_bytes=None, shape=SHAPE_8B)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(ctx=0, n_ctx=16384, model=tiny, config=cfg),
                                                   GpuSetReading(0.0, unavailable_reason="no NVIDIA GPU"), host)
    assert s.model.weight_bytes == 4_718_592 + 5_337_251 and s.provenance["weight_bytes"] == "log"
    assert s.ceiling_tok_s == pytest.approx(40e9 / (4_718_592 + 5_337_251))
    assert s.extra["placement"] == "host_only"


def test_moe_reads_only_active_experts() -> None:
    p = PRESETS["qwen3-30b-a3b"]
    m = ModelInfo(name="qwen3", weight_bytes=p.weight_bytes, shape=ModelShape.from_gguf(p.metadata))
    s = Analyzer(rate_tracker=FixedRates()).update(reading(model=m), gpus())
    assert s.model.weight_bytes_read_per_token < p.weight_bytes / 3
    assert s.provenance["weight_bytes_read_per_token"] == "estimated"
    assert "MoE" in s.reasons["weight_bytes_read_per_token"]


def _l8b(shape: ModelShape) -> ModelInfo:
    return ModelInfo(name="Llama-3.1-8B-Q4_K_M.gguf", arch="llama", weight_bytes=L8B.weight_bytes, shape=shape)


def test_an_equal_shape_parsed_again_each_poll_draws_the_same_curve() -> None:
    a = Analyzer()
    first = a.update(reading(0.0, model=_l8b(ModelShape.from_gguf(L8B.metadata))), gpus(0.0))
    # a source that parses the model again each poll hands over an equal, new shape object
    second = a.update(reading(1.0, ctx=8200, model=_l8b(ModelShape.from_gguf(L8B.metadata))), gpus(1.0))
    assert second.ceiling_curve == first.ceiling_curve
    assert second.ceiling_curve[-1] == (32768, pytest.approx(ceiling_8b(32768)))


def test_the_curve_follows_the_bandwidth_n_ctx_and_model() -> None:
    a = Analyzer()
    a.update(reading(0.0), gpus(0.0))
    slower = a.update(reading(1.0), gpus(1.0, gpu(bw=504e9)))
    assert slower.ceiling_curve[-1] == (32768, pytest.approx(ceiling_8b(32768, bw=504e9)))
    longer = a.update(reading(2.0, n_ctx=65536), gpus(2.0, gpu(bw=504e9)))
    assert longer.ceiling_curve[-1] == (65536, pytest.approx(ceiling_8b(65536, bw=504e9)))
    # Llama-2-7B: same weights here, but no GQA, so 4× the KV bytes per token and a lower ceiling at depth
    other = a.update(reading(3.0, model=_l8b(ModelShape.from_gguf(PRESETS["llama-2-7b"].metadata))), gpus(3.0))
    assert other.ceiling_curve[-1][1] < ceiling_8b(32768)
