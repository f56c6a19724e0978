"""Cache-type counterfactuals and MoE weight reads."""

from __future__ import annotations

import pytest

from kvmon.physics.advice import cache_type_counterfactuals
from kvmon.physics.cache_types import UnknownCacheType
from kvmon.physics.ceiling import DeviceShare
from kvmon.physics.kv import kv_allocation
from kvmon.physics.presets import PRESETS

GIB = 1024**3


def test_counterfactuals_for_llama_on_a_4090() -> None:
    p = PRESETS["llama-3.1-8b"]
    shape = p.shape()
    dev = [DeviceShare("RTX 4090", 1008e9, p.weight_bytes, 1.0)]
    opts = cache_type_counterfactuals(shape, n_ctx=65536, context_tokens=40_000, devices=dev,
                                      vram_free_bytes=2 * GIB)
    assert [(o.type_k, o.type_v) for o in opts] == [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")]
    cur, q8, q4 = opts
    assert cur.is_current and cur.vram_freed_bytes == 0 and cur.ceiling_change == 0
    assert cur.kv_allocated_bytes == 8 * GIB
    assert q8.kv_allocated_bytes == 8 * GIB * 34 // 64  # 34 bytes per 32 values instead of 64
    assert q8.vram_freed_bytes == 8 * GIB - q8.kv_allocated_bytes
    # 40K tokens × 128 KiB = 5 GiB of KV read per step in f16
    f16_time = (p.weight_bytes + 40_000 * 131072) / 1008e9
    q8_time = (p.weight_bytes + 40_000 * 131072 * 34 / 64) / 1008e9
    assert cur.ceiling_tok_s == pytest.approx(1 / f16_time)
    assert q8.ceiling_tok_s == pytest.approx(1 / q8_time)
    assert q8.ceiling_change == pytest.approx(f16_time / q8_time - 1)
    assert q4.ceiling_tok_s > q8.ceiling_tok_s > cur.ceiling_tok_s
    assert q8.needs_flash_attention and not cur.needs_flash_attention
    # room = 2 GiB free + today's 8 GiB: f16 fits 80K tokens, q8_0 reaches the training context
    assert cur.max_context_before_spill == 10 * GIB // 131072 // 256 * 256
    assert q8.max_context_before_spill == 131072
    assert all(o.fits for o in opts)


def test_counterfactuals_without_gpu_facts() -> None:
    shape = PRESETS["qwen3.5-27b"].shape()
    opts = cache_type_counterfactuals(shape, n_ctx=32768, context_tokens=1000, current_type_k="q8_0",
                                      current_type_v="q8_0", n_seq=2)
    assert opts[0].type_k == "q8_0" and opts[0].is_current
    assert len(opts) == 3  # q8_0 (current), f16, q4_0
    f16 = next(o for o in opts if o.type_k == "f16")
    assert f16.vram_freed_bytes < 0  # going back to f16 costs memory
    assert f16.kv_allocated_bytes == kv_allocation(shape, 32768, n_seq=2).total_bytes
    assert all(o.ceiling_tok_s is None and o.max_context_before_spill is None and o.fits is None for o in opts)


def test_counterfactual_that_would_not_fit() -> None:
    shape = PRESETS["llama-3.1-8b"].shape()
    opts = cache_type_counterfactuals(shape, n_ctx=65536, context_tokens=0, current_type_k="q4_0",
                                      current_type_v="q4_0", vram_free_bytes=0)
    f16 = next(o for o in opts if o.type_k == "f16")
    assert f16.fits is False and f16.max_context_before_spill is not None
    assert f16.max_context_before_spill < 65536


def test_unknown_cache_type_is_a_typed_error() -> None:
    with pytest.raises(UnknownCacheType):
        cache_type_counterfactuals(PRESETS["llama-3.1-8b"].shape(), n_ctx=4096, context_tokens=0,
                                   current_type_k="q3_k")
