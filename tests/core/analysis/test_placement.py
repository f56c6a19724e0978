"""Placement: which bytes live where — weights and KV per GPU from the log or by process memory, in host RAM, spilled
over PCIe."""

from __future__ import annotations

from dataclasses import replace

import pytest
from analysis_readings import GIB, KV_PER_TOKEN_8B, L8B, FixedRates, gpu, gpus, reading

from kvmon.core.analysis import NO_HOST_BANDWIDTH, Analyzer, AnalyzerSettings
from kvmon.core.readings import HostReading, PcieLink, ServerConfig
from kvmon.core.snapshot import AlertLevel


def test_two_gpus_split_by_the_log() -> None:
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1,
                       model_buffer_bytes_by_device={"CUDA0": 3_000_000_000, "CUDA1": 1_800_000_000,
                                                     "CPU_Mapped": 120_000_000},
                       kv_buffer_bytes_by_device={"CUDA0": 3 * GIB, "CUDA1": 1 * GIB},
                       offloaded_layers=31, total_layers=33)  # two layers on the CPU: read per token
    g0, g1 = gpu(0, name="NVIDIA GeForce RTX 3090", bw=936e9), gpu(1, name="NVIDIA GeForce RTX 3090", bw=936e9)
    a = Analyzer(AnalyzerSettings(host_bandwidth_bytes_per_s=80e9), rate_tracker=FixedRates(decode=30.0))
    s = a.update(reading(config=cfg), gpus(0.0, g0, g1))
    w = L8B.weight_bytes / 4.92e9  # weight read per token scales the resident buffers to the model size
    kv = KV_PER_TOKEN_8B * 8192
    t_step = (3e9 * w + kv * 0.75) / 936e9 + (1.8e9 * w + kv * 0.25) / 936e9 + 0.12e9 * w / 80e9
    assert s.ceiling_tok_s == pytest.approx(1 / t_step)
    assert [g.weights_bytes for g in s.gpus] == [3_000_000_000, 1_800_000_000]
    assert [g.kv_allocated_bytes for g in s.gpus] == [3 * GIB, 1 * GIB]
    assert s.host.weights_in_host_bytes == 120_000_000
    assert s.extra["placement"] == "log"
    # without a host bandwidth the host part makes the ceiling unknown, and says so
    s = Analyzer(rate_tracker=FixedRates()).update(reading(config=cfg), gpus(0.0, g0, g1))
    assert s.ceiling_tok_s is None and s.reasons["ceiling_tok_s"] == NO_HOST_BANDWIDTH


def test_host_buffer_with_every_layer_offloaded_is_the_embedding_table() -> None:
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1,
                       model_buffer_bytes_by_device={"CUDA0": 4_620_000_000, "CPU_Mapped": 300_000_000},
                       offloaded_layers=33, total_layers=33)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(ctx=0, config=cfg), gpus())  # no host bandwidth needed
    # the GPU reads its whole model buffer per token; the host buffer (token embeddings) gives one row
    assert s.ceiling_tok_s == pytest.approx(1008e9 / 4.62e9)
    assert not any(a.code in ("weights_in_host", "kv_in_host") for a in s.alerts)
    assert "embeddings" in s.reasons["placement"]
    assert s.host.weights_in_host_bytes == 300_000_000  # still resident there


def test_two_gpus_without_a_log_split_by_process_memory_or_evenly() -> None:
    g0 = gpu(0, bw=1000e9, server=9 * GIB)
    g1 = gpu(1, bw=500e9, server=3 * GIB)
    s = Analyzer(rate_tracker=FixedRates()).update(reading(ctx=0), gpus(0.0, g0, g1))
    assert s.ceiling_tok_s == pytest.approx(1 / (4.92e9 * 0.75 / 1000e9 + 4.92e9 * 0.25 / 500e9))
    s = Analyzer(rate_tracker=FixedRates()).update(reading(ctx=0), gpus(0.0, replace(g0, server_used_bytes=None), g1))
    assert s.ceiling_tok_s == pytest.approx(1 / (2.46e9 / 1000e9 + 2.46e9 / 500e9))
    assert "even" in s.reasons["placement"]


def test_ollama_partial_offload() -> None:
    host = HostReading(t_monotonic=0.0, host_bandwidth_bytes_per_s=60e9)
    r = reading(ctx=4096, backend="ollama", weight_bytes_vram=int(4.92e9 * 0.75), weight_bytes_host=int(4.92e9 * 0.25))
    s = Analyzer(rate_tracker=FixedRates(decode=20.0)).update(r, gpus(), host)
    kv = KV_PER_TOKEN_8B * 4096
    expect = 1 / ((4.92e9 * 0.75 + kv * 0.75) / 1008e9 + (4.92e9 * 0.25 + kv * 0.25) / 60e9)
    assert s.ceiling_tok_s == pytest.approx(expect, rel=1e-6)
    assert s.host.weights_in_host_bytes == pytest.approx(4.92e9 * 0.25, rel=1e-6)
    codes = {a.code: a for a in s.alerts}
    assert codes["weights_in_host"].level is AlertLevel.WARNING
    assert f"on the CPU with their KV cache; decode capped at ~{expect:.0f} tok/s" in codes["weights_in_host"].message
    assert "kv_in_host" not in codes  # the CPU layers' KV is part of the partial offload, not a separate spill
    assert s.host.kv_in_host_bytes == pytest.approx(4 * GIB * 0.25, rel=1e-6)


def test_kv_spill_over_pcie_is_estimated_and_alerted() -> None:
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, model_buffer_bytes_by_device={"CUDA0": 4_920_000_000},
                       kv_buffer_bytes_by_device={"CUDA0": 4 * GIB}, compute_buffer_bytes_by_device={"CUDA0": GIB // 2})
    pcie = PcieLink(generation=4, width=16, max_generation=4, max_width=16)
    g = gpu(free=0, others=16 * GIB, server=8 * GIB, pcie=pcie)
    s = Analyzer(rate_tracker=FixedRates(decode=6.0)).update(reading(ctx=16384, config=cfg), gpus(0.0, g))
    # need 4.92e9 + 4 GiB + 0.5 GiB, room 8 GiB: ~1.08 GiB of the KV cache lives across PCIe
    over = 4.92e9 + 4.5 * GIB - 8 * GIB
    frac = over / (4 * GIB)
    kv = KV_PER_TOKEN_8B * 16384
    pcie_bw = 16e9 * 128 / 130 / 8 * 16
    expect = 1 / ((4.92e9 + kv * (1 - frac)) / 1008e9 + kv * frac / pcie_bw)
    assert s.ceiling_tok_s == pytest.approx(expect)
    (alert,) = [a for a in s.alerts if a.code == "kv_in_host"]
    assert alert.level is AlertLevel.CRITICAL
    assert f"decode capped at ~{expect:.0f} tok/s by PCIe" in alert.message
    assert s.host.kv_in_host_bytes == pytest.approx(over, abs=2)



def test_no_pcie_spill_is_built_on_figures_that_contradict_each_other() -> None:
    """The driver's fallback is estimated from the weights said to live on the GPU: when the server holds less there
    than those weights, or the spill would be larger than host RAM, no spill is shown (never a cache in host RAM
    larger than host RAM, nor a PCIe ceiling on weights that are not there)."""
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, model_buffer_bytes_by_device={"CUDA0": 4_920_000_000},
                       kv_buffer_bytes_by_device={"CUDA0": 4 * GIB}, compute_buffer_bytes_by_device={"CUDA0": GIB // 2})
    pcie = PcieLink(generation=4, width=16, max_generation=4, max_width=16)
    denied = gpu(free=0, others=16 * GIB, server=2 * GIB, pcie=pcie)  # 2 GiB held, 4.92 GB of weights said here
    s = Analyzer(rate_tracker=FixedRates(decode=6.0)).update(reading(ctx=16384, config=cfg), gpus(0.0, denied))
    assert not [a for a in s.alerts if a.code == "kv_in_host"] and not s.host.kv_in_host_bytes
    assert "how the model splits over this GPU is unknown" in s.reasons["gpu0.vram"]
    small = HostReading(t_monotonic=0.0, ram_total_bytes=GIB // 2, ram_available_bytes=GIB // 4)
    g = gpu(free=0, others=16 * GIB, server=8 * GIB, pcie=pcie)  # ~1.08 GiB to spill into 0.5 GiB of RAM
    s = Analyzer(rate_tracker=FixedRates(decode=6.0)).update(reading(ctx=16384, config=cfg), gpus(0.0, g), small)
    assert not [a for a in s.alerts if a.code == "kv_in_host"] and not s.host.kv_in_host_bytes

def test_kv_cache_in_host_ram_from_the_log() -> None:
    """-nkvo (or a load that put the cache on the CPU): the log's CPU KV buffer; the host bandwidth caps decode."""
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, model_buffer_bytes_by_device={"CUDA0": 4_920_000_000},
                       kv_buffer_bytes_by_device={"CPU": 4 * GIB}, offloaded_layers=33, total_layers=33)
    host = HostReading(t_monotonic=0.0, host_bandwidth_bytes_per_s=50e9)
    s = Analyzer(rate_tracker=FixedRates(decode=8.0)).update(reading(ctx=16384, config=cfg), gpus(), host)
    kv = KV_PER_TOKEN_8B * 16384
    expect = 1 / (4.92e9 / 1008e9 + kv / 50e9)
    assert s.ceiling_tok_s == pytest.approx(expect)
    (a,) = [x for x in s.alerts if x.code == "kv_in_host"]
    assert a.level is AlertLevel.CRITICAL
    assert a.message.startswith(
        f"KV cache in host RAM (4.00 GiB, 100%): decode capped at ~{expect:.0f} tok/s by host RAM")
    assert s.gpus[0].kv_allocated_bytes is None and s.host.kv_in_host_bytes == 4 * GIB
