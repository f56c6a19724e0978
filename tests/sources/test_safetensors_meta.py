"""Safetensors headers: a checkpoint's weights from each file's header alone; a bad header is a reason, never a size."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kvmon.sim.files import write_safetensors
from kvmon.sources.hf_config import read_model
from kvmon.sources.safetensors_meta import folder_weights, header_tensor_bytes

QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "max_position_embeddings": 40960, "vocab_size": 151936, "torch_dtype": "bfloat16",
            "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None}


def _raw(path: Path, header: object, data_bytes: int = 0) -> None:
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + data_bytes)


def test_headers_give_the_weights_and_never_read_the_data(tmp_path: Path) -> None:
    p = tmp_path / "model.safetensors"
    n = write_safetensors(str(p), [("a", "BF16", (1024, 4096)), ("b", "F32", (4096,)), ("c", "I8", (3, 5))])
    assert n == 1024 * 4096 * 2 + 4096 * 4 + 15
    assert header_tensor_bytes(str(p)) == (n, 3, {"BF16", "F32", "I8"})
    (header_len,) = struct.unpack("<Q", p.read_bytes()[:8])
    assert header_len % 8 == 0 and p.stat().st_size == 8 + header_len + n  # laid out as the format says


@pytest.mark.parametrize(("header", "data", "words"), [
    ({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}, 8, "offsets disagree"),
    ({"a": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 8]}}, 8, "cannot size"),
    ({"a": {"dtype": "BF16", "shape": [-1], "data_offsets": [0, 8]}}, 8, "bad shape"),
    ({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}, 4, "offsets disagree"),  # file too short
    ([1, 2], 0, "not a JSON object"),
    ({"a": "x"}, 0, "no dtype and shape"),
])
def test_bad_headers_say_why(tmp_path: Path, header: object, data: int, words: str) -> None:
    p = tmp_path / "model.safetensors"
    _raw(p, header, data)
    with pytest.raises(ValueError, match=words):
        header_tensor_bytes(str(p))
    found = folder_weights(str(tmp_path))
    assert found.weight_bytes is None and words in (found.why_not or "")


def test_a_header_length_past_the_file_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "model.safetensors"
    p.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(ValueError, match="does not fit"):
        header_tensor_bytes(str(p))
    (tmp_path / "model.safetensors").write_bytes(b"\x01")
    assert "no safetensors header" in (folder_weights(str(tmp_path)).why_not or "")


def test_the_analysis_estimates_a_checkpoint_it_cannot_read(tmp_path: Path) -> None:
    """vLLM's folder with its config but no weight files here: bf16 × parameters, labelled estimated."""
    from analysis_readings import FixedRates, gpus, reading

    from kvmon.core.analysis import Analyzer
    from kvmon.core.readings import ModelInfo
    from kvmon.physics.shape import ModelShape
    from kvmon.sources.hf_config import config_metadata

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    m = read_model(str(tmp_path))
    md, _why, _arch = config_metadata(QWEN3_8B)
    assert md is not None
    info = ModelInfo(name="Qwen/Qwen3-8B", weight_bytes=m.weight_bytes, n_params=m.n_params,
                     quantization=m.storage, shape=ModelShape.from_gguf(md))
    s = Analyzer(rate_tracker=FixedRates(decode=50.0)).update(reading(model=info, backend="vllm"), gpus())
    assert s.model.weight_bytes == 16_381_470_720 and s.provenance["weight_bytes"] == "estimated"
    assert "8.2B parameters × 16.00 bits per weight (BF16)" in s.reasons["weight_bytes"]
