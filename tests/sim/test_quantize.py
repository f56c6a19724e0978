"""The simulated model files against published ones: the tensor inventory's parameter counts and the llama-quantize
type mix's file sizes."""

from __future__ import annotations

import pytest

from kvmon.physics.presets import PRESETS
from kvmon.physics.tensors import tensor_inventory
from kvmon.sim.model import model_tensors
from kvmon.sim.quantize import quantize


def test_q4_k_m_gives_the_more_sensitive_tensors_more_bits() -> None:
    md = PRESETS["llama-3.1-8b"].metadata
    inv = tensor_inventory(md)
    assert inv is not None
    types = {t.name: t.ggml_type.name for t in quantize(inv, "Q4_K_M", md)}
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    assert types["blk.0.attn_v.weight"] == "Q6_K" and types["blk.4.attn_v.weight"] == "Q4_K"  # use_more_bits
    assert types["blk.6.ffn_down.weight"] == "Q6_K" and types["blk.5.ffn_down.weight"] == "Q4_K"
    assert types["blk.0.attn_q.weight"] == "Q4_K"
    assert types["blk.0.attn_norm.weight"] == "F32"
    tied = PRESETS["gemma-3-27b"].metadata  # no output head of its own: the embedding is quantized as the head
    gt = {t.name: t.ggml_type.name for t in model_tensors(tied, "Q4_K_M") or ()}
    assert "output.weight" not in gt and gt["token_embd.weight"] == "Q6_K"
    with pytest.raises(ValueError, match="no IQ2_XS files"):
        quantize(inv, "IQ2_XS", md)
