"""Property tests: KV bytes never negative and monotone in context; q8_0 < f16; hybrids < dense twins."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kvmon.physics.cache_types import CACHE_TYPES
from kvmon.physics.ceiling import DeviceShare, ceiling_tok_s, max_context_fitting
from kvmon.physics.kv import kv_allocation, kv_bytes_in_use, kv_bytes_per_token
from kvmon.physics.layers import ShapeError
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape

SHAPES = [p.shape() for p in PRESETS.values()]
shapes = st.sampled_from(SHAPES)
types = st.sampled_from(sorted(CACHE_TYPES))
contexts = st.integers(min_value=0, max_value=1 << 20)
FAST = settings(max_examples=60, deadline=None)


@st.composite
def dense_metadata(draw: st.DrawFn) -> dict[str, Any]:
    heads = draw(st.sampled_from([4, 8, 16, 32]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4, 8, 16, 32) if h <= heads]))
    head_dim = draw(st.sampled_from([64, 128, 256]))
    layers = draw(st.integers(min_value=4, max_value=64)) // 4 * 4
    return {"general.architecture": "llama", "llama.block_count": layers,
            "llama.embedding_length": heads * head_dim, "llama.attention.head_count": heads,
            "llama.attention.head_count_kv": kv}


@FAST
@given(shapes, contexts, contexts, types, types)
def test_bytes_in_use_nonnegative_and_monotone(shape: ModelShape, a: int, b: int, tk: str, tv: str) -> None:
    lo, hi = sorted((a, b))
    x, y = kv_bytes_in_use(shape, lo, tk, tv), kv_bytes_in_use(shape, hi, tk, tv)
    assert 0 <= x <= y


@FAST
@given(shapes, contexts, contexts, st.integers(1, 8), st.booleans(), types)
def test_allocation_nonnegative_and_monotone(shape: ModelShape, a: int, b: int, n_seq: int, unified: bool,
                                             t: str) -> None:
    lo, hi = sorted((a, b))
    x = kv_allocation(shape, lo, n_seq=n_seq, unified=unified, type_k=t, type_v=t)
    y = kv_allocation(shape, hi, n_seq=n_seq, unified=unified, type_k=t, type_v=t)
    assert min(x.k_bytes, x.v_bytes, x.recurrent_bytes) >= 0
    assert x.total_bytes <= y.total_bytes
    assert x.cells % 256 == 0 and x.swa_cells % 256 == 0


@FAST
@given(shapes, st.integers(min_value=1, max_value=1 << 20))
def test_q8_0_smaller_than_f16(shape: ModelShape, n: int) -> None:
    if kv_bytes_per_token(shape).total == 0:
        return  # all-state models have no KV to compare
    assert kv_bytes_per_token(shape, "q8_0", "q8_0").total < kv_bytes_per_token(shape).total
    assert kv_bytes_in_use(shape, n, "q8_0", "q8_0") < kv_bytes_in_use(shape, n)
    assert kv_allocation(shape, n, type_k="q8_0", type_v="q8_0").kv_bytes < kv_allocation(shape, n).kv_bytes


@FAST
@given(dense_metadata(), st.integers(min_value=2, max_value=4), st.integers(min_value=256, max_value=1 << 19))
def test_hybrid_cache_smaller_than_dense_twin(meta: dict[str, Any], interval: int, n: int) -> None:
    # the same attention layers, but all others recurrent (qwen35 rule): fewer KV bytes at every depth
    dense = ModelShape.from_gguf(meta)
    hybrid_meta = {k.replace("llama", "qwen35"): v for k, v in meta.items()}
    hybrid_meta["general.architecture"] = "qwen35"
    hybrid_meta |= {"qwen35.full_attention_interval": interval, "qwen35.ssm.inner_size": 256,
                    "qwen35.ssm.state_size": 16, "qwen35.ssm.conv_kernel": 4, "qwen35.ssm.group_count": 1}
    hybrid = ModelShape.from_gguf(hybrid_meta)
    assert hybrid.n_kv_layers < dense.n_kv_layers
    assert kv_bytes_per_token(hybrid).total < kv_bytes_per_token(dense).total
    assert kv_bytes_in_use(hybrid, n) < kv_bytes_in_use(dense, n)
    assert kv_allocation(hybrid, n).kv_bytes < kv_allocation(dense, n).kv_bytes


@FAST
@given(shapes, st.floats(min_value=0, max_value=2e11, allow_nan=False), types)
def test_max_context_fitting_really_fits(shape: ModelShape, free: float, t: str) -> None:
    n = max_context_fitting(shape, free, type_k=t, type_v=t)
    assert n >= 0 and n % 256 == 0
    if n:
        assert kv_allocation(shape, n, type_k=t, type_v=t).total_bytes <= free


@FAST
@given(st.floats(min_value=1e9, max_value=5e12), st.floats(min_value=0, max_value=1e11),
       st.floats(min_value=0, max_value=1e11), st.floats(min_value=0, max_value=1e11))
def test_ceiling_falls_as_kv_grows(bw: float, weights: float, kv1: float, kv2: float) -> None:
    dev = [DeviceShare("gpu", bw, weights + 1, 1.0)]
    lo, hi = sorted((kv1, kv2))
    a, b = ceiling_tok_s(dev, lo), ceiling_tok_s(dev, hi)
    assert a is not None and b is not None and a >= b > 0


_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(1 << 40), max_value=1 << 40), st.floats(),
    st.text(max_size=5), st.binary(max_size=5), st.lists(st.integers(min_value=-2, max_value=64), max_size=8),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_ARCHS = st.sampled_from(["llama", "gemma2", "gemma3", "gemma3n", "gemma4", "gpt-oss", "llama4", "deepseek2",
                          "qwen35", "qwen3next", "granitehybrid", "jamba", "nemotron_h", "mamba", "rwkv7",
                          "falcon-h1", "qwen3moe", "phi3", "brandnew"])
_SUFFIXES = ["block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
             "attention.key_length", "attention.value_length", "attention.sliding_window",
             "attention.sliding_window_pattern", "attention.shared_kv_layers", "attention.key_length_mla",
             "attention.recurrent_layers", "full_attention_interval", "feed_forward_length", "expert_count",
             "expert_used_count", "ssm.inner_size", "ssm.state_size", "ssm.conv_kernel", "ssm.group_count",
             "wkv.head_size", "nextn_predict_layers", "context_length"]


@settings(max_examples=150, deadline=None)
@given(_ARCHS, st.dictionaries(st.sampled_from(_SUFFIXES), _VALUES, max_size=12),
       st.integers(min_value=1, max_value=8))
def test_any_metadata_gives_a_shape_or_a_shape_error(arch: str, keys: dict[str, Any], n_layers: int) -> None:
    meta: dict[str, Any] = {"general.architecture": arch, f"{arch}.block_count": n_layers,
                            f"{arch}.embedding_length": 64, f"{arch}.attention.head_count": 4}
    meta.update({f"{arch}.{k}": v for k, v in keys.items()})
    try:
        shape = ModelShape.from_gguf(meta)
    except ShapeError:
        return
    assert len(shape.layers) == shape.n_layers > 0
    assert kv_bytes_per_token(shape).total >= 0
    assert kv_allocation(shape, 1000, n_seq=2).total_bytes >= 0
