"""The simulated model files against published ones: the tensor inventory's parameter counts and the llama-quantize
type mix's file sizes."""

from __future__ import annotations

import pytest

from kvmon.physics.presets import PRESETS
from kvmon.physics.quant import bits_per_weight, estimated_weight_bytes, file_type_name
from kvmon.physics.tensors import parameter_count, tensor_inventory
from kvmon.sim.model import model_tensors
from kvmon.sim.quantize import quantize

GIB = 1024**3


@pytest.mark.parametrize(("key", "published"), [
    ("llama-3.1-8b", 8_030_261_248),  # Ollama docs/api.md /api/show: general.parameter_count of llama3 8B
    ("qwen3-8b", 8_190_735_360),  # Qwen3-8B model card: 8.2B (6.95B without the embeddings)
    ("qwen2.5-7b", 7_615_616_512),  # Qwen2.5-7B model card: 7.61B
    ("mistral-7b", 7_248_023_552),  # Mistral-7B-v0.3: 7.25B
])
def test_parameter_counts_are_the_published_ones(key: str, published: int) -> None:
    assert parameter_count(PRESETS[key].metadata) == published


@pytest.mark.parametrize(("ftype", "gib"), [("Q4_K_M", 4.58), ("Q8_0", 7.96), ("F16", 14.96)])
def test_file_sizes_are_what_llama_quantize_lists_for_llama3_8b(ftype: str, gib: float) -> None:
    """tools/quantize/quantize.cpp QUANT_OPTIONS: Q4_K_M 4.58G, Q8_0 7.96G @ Llama-3-8B; F16 14.96 GB (the file
    XiongjieDai/GPU-Benchmarks-on-LLM-Inference lists). The files add a tokenizer's few MB to the tensors."""
    tensors = model_tensors(PRESETS["llama-3.1-8b"].metadata, ftype)
    assert tensors is not None
    assert sum(t.n_bytes for t in tensors) / GIB == pytest.approx(gib, rel=0.005)


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


def test_architectures_without_an_inventory_are_not_guessed() -> None:
    assert tensor_inventory(PRESETS["qwen3-30b-a3b"].metadata) is None
    assert tensor_inventory({"general.architecture": "llama"}) is None  # keys missing


def test_bits_per_weight_estimate_names_its_type() -> None:
    assert file_type_name("Q4_K - Medium") == "Q4_K_M" and file_type_name("bfloat16") == "BF16"
    assert bits_per_weight("Q4_K_M") == pytest.approx(4.90, abs=0.01) and bits_per_weight("BF16") == 16.0
    est, how = estimated_weight_bytes(8_030_261_248, "Q4_K_M")
    assert est == pytest.approx(4.58 * GIB, rel=1e-3) and "Q4_K_M" in how and how.startswith("estimated")
    assert estimated_weight_bytes(None, "Q4_K_M") == (None, "the parameter count is unknown")
    assert estimated_weight_bytes(10**9, "weird")[0] is None
