"""LM Studio's model lists read: v1 and v0 as documented, and odd lists giving fewer values."""

from __future__ import annotations

import json

import pytest
from repo_paths import FIXTURES

from kvmon.sources.lmstudio.parse import parse_v0, parse_v1

FIXTURES = FIXTURES / "lmstudio"


def _json(name: str) -> object:
    return json.loads((FIXTURES / name).read_text())


def test_v1_list_from_the_docs() -> None:
    models, notes = parse_v1(_json("v1-models.json"))
    assert not notes and [m.key for m in models] == ["google/gemma-4-26b-a4b",
                                                     "text-embedding-nomic-embed-text-v1.5-embedding"]
    g = models[0]
    assert (g.arch, g.quantization, g.size_bytes, g.max_context_length, g.format) == (
        "gemma4", "Q4_K_M", 17990911801, 262144, "gguf")
    inst = g.instances[0]
    assert (inst.context_length, inst.parallel, inst.flash_attention, inst.offload_kv_cache_to_gpu,
            inst.eval_batch_size) == (4096, 4, True, True, 512)
    assert g.loaded and g.is_llm and not models[1].loaded and not models[1].is_llm


def test_v0_list_from_the_docs() -> None:
    models, notes = parse_v0(_json("v0-models.json"))
    assert not notes
    loaded = [m for m in models if m.loaded]
    assert [(m.key, m.arch, m.quantization, m.format) for m in loaded] == [
        ("meta-llama-3.1-8b-instruct", "llama", "Q4_K_M", "gguf")]
    assert loaded[0].instances[0].context_length is None  # v0 has no load settings


@pytest.mark.parametrize("body", [None, [], {"models": "x"}, {"models": [1, {"key": 7}, {"no": "key"}]},
                                  {"models": [{"key": "a", "loaded_instances": [5, {"config": "x"}],
                                               "quantization": 3, "size_bytes": -1, "max_context_length": 1e400}]}])
def test_odd_v1_lists_give_fewer_values(body: object) -> None:
    models, notes = parse_v1(body)
    for m in models:
        assert m.size_bytes is None and m.max_context_length is None and m.quantization is None
        assert all(i.context_length is None for i in m.instances)
    assert models or notes
