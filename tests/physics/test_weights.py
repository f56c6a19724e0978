"""The weight bytes read per token: dense models read all, MoE models their active share, an untied embedding table
none."""

from __future__ import annotations

import pytest

from kvmon.physics.presets import PRESETS
from kvmon.physics.weights import weight_bytes_read_per_token


def test_dense_weights_all_read() -> None:
    p = PRESETS["llama-3.1-8b"]
    w = weight_bytes_read_per_token(p.shape(), p.weight_bytes)
    assert w.bytes == p.weight_bytes and not w.estimated


@pytest.mark.parametrize(("key", "active_fraction"), [
    ("qwen3-30b-a3b", 3.3 / 30.5),  # published: 3.3B active of 30.5B
    ("gpt-oss-20b", 3.6 / 21.0),  # 3.6B of 21B
    ("deepseek-v3", 37 / 671),  # 37B of 671B
])
def test_moe_weight_read_estimate_near_published_active_share(key: str, active_fraction: float) -> None:
    p = PRESETS[key]
    w = weight_bytes_read_per_token(p.shape(), p.weight_bytes)
    assert w.estimated and "MoE" in w.note
    # an estimate from the shape alone: within a factor 1.5 of the published active-parameter share
    ratio = w.bytes / p.weight_bytes / active_fraction
    assert 1 / 1.5 < ratio < 1.5, ratio


def test_moe_weight_read_with_known_expert_bytes() -> None:
    shape = PRESETS["qwen3-30b-a3b"].shape()
    w = weight_bytes_read_per_token(shape, 18e9, expert_weight_bytes=16e9)
    assert w.bytes == pytest.approx(2e9 + 16e9 * 8 / 128)
    with pytest.raises(ValueError):
        weight_bytes_read_per_token(shape, -1)


def test_untied_embedding_table_is_not_read_per_token() -> None:
    p = PRESETS["llama-3.1-8b"]
    emb = 128256 * 4096 * 0.5625  # Q4_0-sized table
    w = weight_bytes_read_per_token(p.shape(), p.weight_bytes, embedding_bytes=emb)
    assert w.bytes == pytest.approx(p.weight_bytes - emb) and not w.estimated and "embedding" in w.note
    # nonsense sizes are ignored rather than trusted
    assert weight_bytes_read_per_token(p.shape(), p.weight_bytes, embedding_bytes=2e10).bytes == p.weight_bytes
    moe = PRESETS["qwen3-30b-a3b"]
    with_emb = weight_bytes_read_per_token(moe.shape(), 18e9, expert_weight_bytes=16e9, embedding_bytes=0.3e9)
    assert with_emb.bytes == pytest.approx(1.7e9 + 16e9 * 8 / 128)


def test_moe_without_sizes_is_an_upper_bound() -> None:
    from kvmon.physics.shape import ModelShape

    shape = ModelShape.from_gguf({"general.architecture": "qwen3moe", "qwen3moe.block_count": 2,
                                  "qwen3moe.embedding_length": 64, "qwen3moe.attention.head_count": 4,
                                  "qwen3moe.expert_count": 8, "qwen3moe.expert_used_count": 2})
    w = weight_bytes_read_per_token(shape, 1e9)
    assert w.bytes == 1e9 and w.estimated and "upper bound" in w.note
