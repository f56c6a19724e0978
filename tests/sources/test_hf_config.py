"""Hugging Face config.json and model folders: the shape, multimodal text parts, configs kvmon does not size, bad
configs, where a model folder is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvmon.physics.kv import kv_bytes_per_token
from kvmon.physics.shape import ModelShape
from kvmon.sim.files import write_safetensors
from kvmon.sources.hf_config import config_dtype, config_metadata, model_folder, read_model

QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 40960, "torch_dtype": "bfloat16", "sliding_window": None,
            "use_sliding_window": False}


def test_config_shape_is_vllms_page() -> None:
    md, why, arch = config_metadata(QWEN3_8B)
    assert why is None and arch == "qwen3"
    shape = ModelShape.from_gguf(md)
    # vllm/v1/kv_cache_interface.py: 2 × KV heads × head size × dtype bytes, per layer and token
    assert kv_bytes_per_token(shape, "bf16", "bf16").total == 36 * 2 * 8 * 128 * 2
    assert shape.n_ctx_train == 40960 and config_dtype(QWEN3_8B) == "bf16"


def test_config_without_kv_heads_is_multi_head() -> None:
    cfg = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16}
    shape = ModelShape.from_gguf(config_metadata(cfg)[0])
    assert kv_bytes_per_token(shape, "f16", "f16").total == 4 * 2 * 16 * 128 * 2


def test_multimodal_config_reads_its_text_part() -> None:
    cfg = {"model_type": "llava", "text_config": dict(QWEN3_8B), "torch_dtype": "float16"}
    md, why, _ = config_metadata(cfg)
    assert why is None and md is not None and md["qwen3.block_count"] == 36


@pytest.mark.parametrize(("extra", "words"), [
    ({"kv_lora_rank": 512}, "latent"), ({"layer_types": ["sliding_attention", "full_attention"]}, "per layer"),
    ({"sliding_window": 4096}, "sliding-window"), ({"layers_block_type": ["mamba", "attention"]}, "hybrid"),
    ({"attention_chunk_size": 8192}, "chunked")])
def test_configs_kvmon_does_not_size(extra: dict, words: str) -> None:
    md, why, _ = config_metadata({**QWEN3_8B, "use_sliding_window": None, **extra})
    assert md is None and why is not None and words in why


@pytest.mark.parametrize("cfg", [{"model_type": "llama"}, [], "x", {"num_hidden_layers": True, "hidden_size": 1}])
def test_bad_configs_say_why(cfg: object) -> None:
    md, why, _ = config_metadata(cfg)
    assert md is None and why


def test_model_folder_reads(tmp_path: Path) -> None:

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    write_safetensors(str(tmp_path / "model-00001-of-00002.safetensors"),
                      [("model.embed_tokens.weight", "BF16", (151936, 4096))])
    write_safetensors(str(tmp_path / "model-00002-of-00002.safetensors"), [("model.norm.weight", "BF16", (4096,))])
    m = read_model(str(tmp_path))
    assert m.metadata is not None and m.dtype == "bf16" and m.storage == "BF16"
    assert m.weight_bytes == (151936 * 4096 + 4096) * 2  # the headers' shapes × dtype, never the files' sizes
    assert m.weights_note is not None and "2 safetensors headers" in m.weights_note
    assert m.n_params is None  # this config gives no vocab_size or intermediate_size: no inventory to count
    (tmp_path / "config.json").write_text("{not json")
    assert "not readable JSON" in (read_model(str(tmp_path)).why_not or "")
    (tmp_path / "config.json").unlink()
    assert "not readable here" in (read_model(str(tmp_path)).why_not or "")


def test_a_relative_root_is_the_servers_and_not_looked_up_here(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's ``root`` relative to its own working directory names nothing kvmon can find from its own."""
    (tmp_path / "models" / "qwen").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert model_folder("models/qwen", {"HF_HUB_CACHE": str(tmp_path / "hub")}) is None
    assert model_folder(str(tmp_path / "models" / "qwen"), {}) == str(tmp_path / "models" / "qwen")


def test_repo_id_found_in_the_local_hub_cache(tmp_path: Path) -> None:
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(QWEN3_8B))
    assert model_folder("Qwen/Qwen3-8B", {"HF_HUB_CACHE": str(tmp_path / "hub")}) == str(snap)
    assert model_folder("Qwen/Other", {"HF_HUB_CACHE": str(tmp_path / "hub")}) is None
    assert model_folder("../../etc", {"HF_HUB_CACHE": str(tmp_path / "hub")}) is None


# the whole config of Qwen3-8B as published, with the sizes an estimate of the weights needs
QWEN3_8B_FULL = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
                 "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960, "vocab_size": 151936,
                 "torch_dtype": "bfloat16", "tie_word_embeddings": False, "use_sliding_window": False,
                 "sliding_window": None}


def test_without_weight_files_the_parameters_and_dtype_remain_for_an_estimate(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B_FULL))
    m = read_model(str(tmp_path))
    assert m.weight_bytes is None and "no .safetensors files" in (m.weights_why or "")
    assert m.n_params == 8_190_735_360 and m.storage == "BF16"  # Qwen3-8B's model card: 8.2B, 6.95B non-embedding


def test_a_quantized_checkpoint_is_not_estimated_from_its_torch_dtype(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**QWEN3_8B_FULL, "torch_dtype": "float16",
                                                      "quantization_config": {"quant_method": "awq", "bits": 4}}))
    assert read_model(str(tmp_path)).storage == "awq"  # no bits-per-weight figure: the estimate says so
