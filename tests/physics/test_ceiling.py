"""The bandwidth ceiling: the seeds' worked examples, layer splits, spills, and the inverses."""

from __future__ import annotations

import itertools
import math

import pytest

from kvmon.physics.ceiling import (
    DeviceShare,
    ceiling_curve,
    ceiling_tok_s,
    max_context_fitting,
    step_time_s,
    tokens_until_full,
)
from kvmon.physics.gpus import lookup_gpu, pcie_bandwidth_bytes_per_s
from kvmon.physics.kv import kv_allocation, kv_bytes_in_use
from kvmon.physics.presets import PRESETS

GB = 1e9


def rtx3090(weight_bytes: float, kv_fraction: float = 1.0) -> DeviceShare:
    spec = lookup_gpu("NVIDIA GeForce RTX 3090")
    assert spec is not None
    return DeviceShare("RTX 3090", spec.bandwidth_bytes_per_s, weight_bytes, kv_fraction)


def test_seed_rtx_3090_examples() -> None:
    # 000_…: 936 GB/s / (14 GB + 0) ≈ 66.8 tok/s; 936 / (14 + 8) ≈ 42.5 tok/s
    assert ceiling_tok_s([rtx3090(14 * GB)], 0) == pytest.approx(66.86, abs=0.01)
    assert ceiling_tok_s([rtx3090(14 * GB)], 8 * GB) == pytest.approx(42.55, abs=0.01)
    # "cuts generation throughput by ~36%"
    drop = 1 - ceiling_tok_s([rtx3090(14 * GB)], 8 * GB) / ceiling_tok_s([rtx3090(14 * GB)], 0)
    assert drop == pytest.approx(0.36, abs=0.005)


def test_layer_split_times_add() -> None:
    # two 3090s each holding half the weights and half the KV: same ceiling as one card with everything
    one = ceiling_tok_s([rtx3090(14 * GB)], 8 * GB)
    two = ceiling_tok_s([rtx3090(7 * GB, 0.5), rtx3090(7 * GB, 0.5)], 8 * GB)
    assert two == pytest.approx(one)
    t = step_time_s([rtx3090(7 * GB, 0.5), rtx3090(7 * GB, 0.5)], 8 * GB)
    assert t == pytest.approx(22 * GB / 936e9)


def test_spill_to_host_is_a_cliff() -> None:
    pcie = pcie_bandwidth_bytes_per_s(4, 16)
    assert pcie == pytest.approx(31.5e9, rel=0.01)  # the seed's "PCIe 4.0 x16 ~31.5 GB/s"
    gpu_only = ceiling_tok_s([rtx3090(14 * GB, 1.0)], 8 * GB)
    # 1 GB of the KV streamed over PCIe instead of read from VRAM
    spilled = ceiling_tok_s(
        [rtx3090(14 * GB, 7 / 8), DeviceShare("host KV over PCIe", pcie, 0, 1 / 8, "pcie")], 8 * GB
    )
    assert spilled is not None and gpu_only is not None
    assert spilled < gpu_only * 0.6
    # CPU-computed layers read host RAM at host bandwidth (DDR5 ~ 60 GB/s)
    cpu_layers = ceiling_tok_s([rtx3090(10 * GB, 0.7), DeviceShare("CPU", 60 * GB, 4 * GB, 0.3, "host")], 8 * GB)
    assert cpu_layers == pytest.approx(1 / ((10 + 5.6) * GB / 936e9 + (4 + 2.4) * GB / 60e9))


@pytest.mark.parametrize("bad_bw", [None, 0.0, -1.0, math.nan, math.inf])
def test_unknown_bandwidth_gives_none(bad_bw: float | None) -> None:
    assert ceiling_tok_s([DeviceShare("?", bad_bw, 1 * GB, 1.0)], 0) is None


def test_no_devices_or_bad_kv_gives_none() -> None:
    assert ceiling_tok_s([], 0) is None
    assert ceiling_tok_s([rtx3090(14 * GB)], -1) is None
    assert ceiling_tok_s([DeviceShare("empty", 900 * GB, 0, 0.0)], 0) is None  # nothing read: no ceiling
    assert ceiling_curve([DeviceShare("?", None, 1, 1)], PRESETS["llama-3.1-8b"].shape(), "f16", "f16", [0]) == ()


def test_ceiling_curve_falls_with_context() -> None:
    shape = PRESETS["llama-3.1-8b"].shape()
    contexts = [0, 8192, 32768, 65536, 131072]
    curve = ceiling_curve([rtx3090(PRESETS["llama-3.1-8b"].weight_bytes)], shape, "f16", "f16", contexts)
    assert [c for c, _ in curve] == contexts
    speeds = [s for _, s in curve]
    assert all(a > b for a, b in itertools.pairwise(speeds))
    assert speeds[3] == pytest.approx(936e9 / (4.92e9 + 8 * 1024**3))


def test_sliding_window_flattens_the_curve() -> None:
    gemma = PRESETS["gemma-3-27b"]
    dev = [rtx3090(gemma.weight_bytes)]
    curve = dict(ceiling_curve(dev, gemma.shape(), "f16", "f16", [2048, 131072]))
    global_only = 10 * 16 * 128 * 2 * 2  # bytes/token still growing past the window
    expected = 936e9 / (gemma.weight_bytes + kv_bytes_in_use(gemma.shape(), 131072))
    assert curve[131072] == pytest.approx(expected)
    assert kv_bytes_in_use(gemma.shape(), 131072) - kv_bytes_in_use(gemma.shape(), 2048) == global_only * (
        131072 - 2048
    )


def test_max_context_fitting_is_the_inverse_of_allocation() -> None:
    shape = PRESETS["llama-3.1-8b"].shape()
    free = 6 * 1024**3 + 12345
    n = max_context_fitting(shape, free)
    assert n == 49152  # 6 GiB / 128 KiB
    assert kv_allocation(shape, n).total_bytes <= free < kv_allocation(shape, n + 256).total_bytes
    assert max_context_fitting(shape, free, type_k="q8_0", type_v="q8_0") > n
    # capped at the training context by default; a limit may be given
    assert max_context_fitting(shape, 1e15) == 131072
    assert max_context_fitting(shape, 1e15, limit_tokens=1_000_000) == 999_936
    assert max_context_fitting(shape, 0) == 0
    assert max_context_fitting(shape, 1000) == 0


def test_max_context_fitting_streams_and_state() -> None:
    shape = PRESETS["qwen3.5-27b"].shape()
    free = 4 * 1024**3
    n = max_context_fitting(shape, free, n_seq=2)
    assert n % 512 == 0
    a = kv_allocation(shape, n, n_seq=2)
    assert a.total_bytes <= free < kv_allocation(shape, n + 512, n_seq=2).total_bytes


def test_tokens_until_full() -> None:
    assert tokens_until_full(131072, 41210) == 89862
    assert tokens_until_full(4096, 5000) == 0


def test_seed_dual_3090_table_against_the_ceiling() -> None:
    # 000_…: 27B hybrid Q4_K_M split over two RTX 3090s, q8_0 KV. The layer split adds times, so the two cards
    # act as one 936 GB/s bus reading ~16.5 GB of weights plus the KV of 16 attention layers.
    p = PRESETS["qwen3.5-27b"]
    devs = [rtx3090(p.weight_bytes / 2, 0.5), rtx3090(p.weight_bytes / 2, 0.5)]
    measured = {0: 58.45, 8192: 55.69, 32768: 49.66, 65536: 42.83, 131072: 33.45, 262144: 22.68}
    curve = dict(ceiling_curve(devs, p.shape(), "q8_0", "q8_0", list(measured)))
    ratios = {n: measured[n] / curve[n] for n in measured}
    print("\n" + "\n".join(f"{n:>7} tokens: ceiling {curve[n]:5.1f}, measured {measured[n]:5.2f} tok/s "
                           f"({ratios[n]:.0%})" for n in measured))
    # At empty context the seed measures 3% above a 16.5 GB read (the exact file size is not given, and the
    # token-embedding table is read one row per token); deeper in, measured speed falls faster than the KV
    # bytes alone explain (attention compute), so measured/ceiling drops — what the forecast's slope captures.
    assert ratios[0] < 1.05
    assert all(ratios[n] < 1 for n in measured if n)
    values = [ratios[n] for n in sorted(measured)]
    assert values == sorted(values, reverse=True)
    assert curve[262144] == pytest.approx(936e9 / (16.5e9 + 262144 * 16 * 2 * 4 * 8 * 34), rel=1e-9)
