"""ModelShape.from_gguf: every family's layer rules, value types from gguf and Ollama, and bad metadata."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvmon.physics.kv import kv_allocation, kv_bytes_in_use, kv_bytes_per_token, recurrent_state_bytes
from kvmon.physics.layers import AttentionKind, ShapeError, layer_kinds_summary
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape

A = AttentionKind


def md(arch: str, **keys: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"general.architecture": arch}
    out.update({f"{arch}.{k.replace('__', '.')}": v for k, v in keys.items()})
    return out


def kinds(shape: ModelShape) -> list[AttentionKind]:
    return [layer.kind for layer in shape.layers]


def test_llama_from_numpy_values_as_gguf_reader_gives_them() -> None:
    shape = ModelShape.from_gguf(md("llama", block_count=np.uint32(32), embedding_length=np.uint32(4096),
                                    attention__head_count=np.uint32(32), attention__head_count_kv=np.uint32(8),
                                    context_length=np.uint32(131072)) | {"general.name": b"Llama"})
    assert shape.n_layers == 32 and shape.n_head == 32 and shape.n_ctx_train == 131072
    assert kv_bytes_per_token(shape).total == 128 * 1024
    assert not shape.partial and shape.notes == ()


def test_per_layer_head_count_kv_as_numpy_array_and_list() -> None:
    arr = np.array([8, 8, 4, 4], dtype=np.int32)
    base = dict(block_count=4, embedding_length=1024, attention__head_count=8)
    a = ModelShape.from_gguf(md("llama", **base, attention__head_count_kv=arr))
    b = ModelShape.from_gguf(md("llama", **base, attention__head_count_kv=[8, 8, 4, 4]))
    assert a == b
    assert [layer.n_head_kv for layer in a.layers] == [8, 8, 4, 4]
    assert kv_bytes_per_token(a).total == (8 + 8 + 4 + 4) * 128 * 2 * 2


def test_phi3_without_gqa_and_its_disabled_window() -> None:
    shape = ModelShape.from_gguf(md("phi3", block_count=32, embedding_length=3072, attention__head_count=32,
                                    attention__sliding_window=2047))
    assert kinds(shape) == [A.FULL] * 32
    assert shape.layers[0].n_head_kv == 32 and shape.layers[0].key_length == 96
    assert any("head_count_kv" in n for n in shape.notes) and any("sliding window" in n for n in shape.notes)


def test_qwen3moe_experts() -> None:
    shape = PRESETS["qwen3-30b-a3b"].shape()
    assert shape.is_moe and (shape.expert_count, shape.expert_used_count) == (128, 8)
    assert kinds(shape) == [A.FULL] * 48


def test_gemma2_default_window_even_layers() -> None:
    shape = ModelShape.from_gguf(md("gemma2", block_count=4, embedding_length=2304, attention__head_count=8,
                                    attention__head_count_kv=4, attention__key_length=256,
                                    attention__value_length=256))
    assert kinds(shape) == [A.SWA, A.FULL, A.SWA, A.FULL]
    assert shape.layers[0].window == 4096
    assert any("4096" in n for n in shape.notes)


def test_gemma3_pattern_and_no_window() -> None:
    g = PRESETS["gemma-3-27b"].shape()
    assert kinds(g)[:6] == [A.SWA] * 5 + [A.FULL]
    no_window = dict(PRESETS["gemma-3-27b"].metadata)
    del no_window["gemma3.attention.sliding_window"]
    assert kinds(ModelShape.from_gguf(no_window)) == [A.FULL] * 62


def test_gpt_oss_alternating_window() -> None:
    shape = PRESETS["gpt-oss-20b"].shape()
    assert kinds(shape)[:4] == [A.SWA, A.FULL, A.SWA, A.FULL]
    assert shape.layers[0].window == 128
    a = kv_allocation(shape, 131072)
    assert a.swa_cells == 768  # pad256(128 + 512)
    missing = dict(PRESETS["gpt-oss-20b"].metadata)
    del missing["gpt-oss.attention.sliding_window"]
    with pytest.raises(ShapeError):
        ModelShape.from_gguf(missing)


def test_llama4_chunked_and_disabled() -> None:
    base = dict(block_count=8, embedding_length=5120, attention__head_count=40, attention__head_count_kv=8,
                attention__key_length=128, attention__value_length=128, expert_count=16, expert_used_count=1)
    shape = ModelShape.from_gguf(md("llama4", **base))
    assert kinds(shape)[:4] == [A.CHUNKED] * 3 + [A.FULL]
    assert shape.layers[0].window == 8192
    per_layer = 8 * 128 * 2 * 2
    assert kv_bytes_in_use(shape, 100_000) == per_layer * (2 * 100_000 + 6 * 8192)
    off = ModelShape.from_gguf(md("llama4", **base, attention__sliding_window=0))
    assert kinds(off) == [A.FULL] * 8


def test_gemma3n_shared_kv_layers() -> None:
    shape = ModelShape.from_gguf(md("gemma3n", block_count=30, embedding_length=2048, attention__head_count=8,
                                    attention__head_count_kv=2, attention__key_length=256,
                                    attention__value_length=256, attention__sliding_window=512))
    assert kinds(shape)[:5] == [A.SWA] * 4 + [A.FULL]
    shared = [layer for layer in shape.layers if layer.kind is A.SHARED]
    assert len(shared) == 10 and shape.n_kv_layers == 20
    # a shared layer reads the last earlier layer of its own kind: SWA → 18, full → 19
    assert {layer.shares_kv_with for layer in shared} == {18, 19}
    per_layer = 2 * 256 * 2 * 2
    assert kv_allocation(shape, 4096, swa_full=True).kv_bytes == per_layer * 20 * 4096
    # shared layers cost no memory but are read again at each step
    assert kv_bytes_in_use(shape, 100) == per_layer * 30 * 100


def test_gemma4_shared_kv_layers_and_swa_head_sizes() -> None:
    shape = ModelShape.from_gguf(md("gemma4", block_count=12, embedding_length=2560, attention__head_count=8,
                                    attention__head_count_kv=2, attention__key_length=512,
                                    attention__value_length=512, attention__key_length_swa=256,
                                    attention__value_length_swa=256, attention__sliding_window=512,
                                    attention__sliding_window_pattern=[True] * 5 + [False] + [True] * 5 + [False],
                                    attention__shared_kv_layers=4))
    assert shape.n_kv_layers == 8
    assert [layer.key_length for layer in shape.layers[:6]] == [256] * 5 + [512]
    assert kv_bytes_per_token(shape).total == 2 * 2 * 2 * (7 * 256 + 1 * 512)
    with pytest.raises(ShapeError):
        ModelShape.from_gguf(md("gemma4", block_count=2, embedding_length=64, attention__head_count=1,
                                attention__shared_kv_layers=2))


def test_deepseek2_without_mla_keys_caches_full_heads() -> None:
    shape = ModelShape.from_gguf(md("deepseek2", block_count=27, embedding_length=2048, attention__head_count=16,
                                    attention__head_count_kv=16, attention__key_length=192,
                                    attention__value_length=128, attention__kv_lora_rank=512))
    assert kinds(shape) == [A.FULL] * 27
    assert kv_bytes_per_token(shape).total == 27 * 16 * (192 + 128) * 2
    assert any("without MLA" in n for n in shape.notes)


def test_qwen35_interval_and_recurrent_layers_key() -> None:
    shape = PRESETS["qwen3.5-27b"].shape()
    assert kinds(shape)[:4] == [A.RECURRENT] * 3 + [A.FULL]
    assert layer_kinds_summary(shape.layers) == "48 recurrent + 16 full"
    explicit = dict(PRESETS["qwen3.5-27b"].metadata)
    explicit["qwen35.attention.recurrent_layers"] = np.array([i % 2 == 0 for i in range(64)])
    assert ModelShape.from_gguf(explicit).n_kv_layers == 32
    trimmed = dict(PRESETS["qwen3.5-27b"].metadata)
    trimmed["qwen35.attention.recurrent_layers"] = []  # Ollama /api/show without verbose
    t = ModelShape.from_gguf(trimmed)
    assert t.partial and t.n_kv_layers == 16


def test_qwen3next_mtp_layers_hold_no_kv() -> None:
    meta = {k.replace("qwen35", "qwen3next"): v for k, v in PRESETS["qwen3.5-27b"].metadata.items()}
    meta["general.architecture"] = "qwen3next"
    meta["qwen3next.nextn_predict_layers"] = 1
    shape = ModelShape.from_gguf(meta)
    assert shape.layers[-1].kind is A.NONE and shape.n_kv_layers == 15


@pytest.mark.parametrize("arch", ["granitehybrid", "jamba"])
def test_headcount_hybrids(arch: str) -> None:
    hkv = [0, 0, 0, 8] * 2
    shape = ModelShape.from_gguf(md(arch, block_count=8, embedding_length=4096, attention__head_count=32,
                                    attention__head_count_kv=hkv, ssm__conv_kernel=4, ssm__inner_size=8192,
                                    ssm__state_size=128, ssm__group_count=1))
    assert kinds(shape) == [A.RECURRENT] * 3 + [A.FULL] + [A.RECURRENT] * 3 + [A.FULL]
    assert recurrent_state_bytes(shape) == 6 * (3 * (8192 + 2 * 128) + 128 * 8192) * 4
    with pytest.raises(ShapeError, match="verbose"):
        ModelShape.from_gguf(md(arch, block_count=8, embedding_length=4096, attention__head_count=32,
                                attention__head_count_kv=[]))


def test_nemotron_h_three_layer_kinds() -> None:
    shape = ModelShape.from_gguf(md("nemotron_h", block_count=4, embedding_length=3072, attention__head_count=32,
                                    attention__head_count_kv=[0, 8, 0, 0], feed_forward_length=[0, 0, 12288, 0],
                                    attention__key_length=128, attention__value_length=128, ssm__conv_kernel=4,
                                    ssm__inner_size=6144, ssm__state_size=128, ssm__group_count=8))
    assert kinds(shape) == [A.RECURRENT, A.FULL, A.NONE, A.RECURRENT]
    with pytest.raises(ShapeError):
        ModelShape.from_gguf(md("nemotron_h", block_count=2, embedding_length=64, attention__head_count=1,
                                attention__head_count_kv=[0, 1]))


def test_mamba_and_rwkv_are_all_state() -> None:
    mamba = ModelShape.from_gguf(md("mamba", block_count=64, embedding_length=2560, ssm__conv_kernel=4,
                                    ssm__inner_size=5120, ssm__state_size=16))
    assert kinds(mamba) == [A.RECURRENT] * 64 and kv_bytes_per_token(mamba).total == 0
    assert recurrent_state_bytes(mamba) == 64 * (3 * 5120 + 16 * 5120) * 4
    assert kv_bytes_in_use(mamba, 1_000_000) == 0
    rwkv = ModelShape.from_gguf(md("rwkv7", block_count=24, embedding_length=2048, wkv__head_size=64))
    assert recurrent_state_bytes(rwkv, n_seq=2) == 2 * 24 * (2 * 2048 + 2048 * 64) * 4
    with pytest.raises(ShapeError):
        ModelShape.from_gguf(md("mamba2", block_count=4, embedding_length=256))


def test_falcon_h1_has_kv_and_state_on_every_layer() -> None:
    shape = ModelShape.from_gguf(md("falcon-h1", block_count=4, embedding_length=1024, attention__head_count=8,
                                    attention__head_count_kv=2, attention__key_length=128, ssm__conv_kernel=4,
                                    ssm__inner_size=2048, ssm__state_size=128, ssm__group_count=1))
    assert shape.n_kv_layers == 4 and shape.n_recurrent_layers == 4
    a = kv_allocation(shape, 1024)
    assert a.kv_bytes == 4 * 2 * 128 * 2 * 2 * 1024 and a.recurrent_bytes > 0


def test_unknown_architecture_falls_back_and_says_so() -> None:
    shape = ModelShape.from_gguf(md("brandnew", block_count=10, embedding_length=1024, attention__head_count=8,
                                    attention__head_count_kv=2, attention__sliding_window=256))
    assert shape.partial and any("unknown architecture" in n for n in shape.notes)
    assert kinds(shape) == [A.FULL] * 10
    patterned = ModelShape.from_gguf(md("brandnew", block_count=4, embedding_length=1024, attention__head_count=8,
                                        attention__sliding_window=256, attention__sliding_window_pattern=2))
    assert kinds(patterned) == [A.SWA, A.FULL, A.SWA, A.FULL]


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        ({}, "general.architecture"),
        ({"general.architecture": 5}, "general.architecture"),
        (md("llama", embedding_length=4096, attention__head_count=32), "block_count"),
        (md("llama", block_count=0, embedding_length=4096, attention__head_count=32), "block_count"),
        (md("llama", block_count=32, attention__head_count=32), "embedding_length"),
        (md("llama", block_count=32, embedding_length=4096), "head_count"),
        (md("llama", block_count=2, embedding_length=64, attention__head_count=4, attention__head_count_kv=8),
         "exceed"),
        (md("llama", block_count=3, embedding_length=64, attention__head_count=4, attention__head_count_kv=[1, 2]),
         "entries"),
        (md("llama", block_count="32", embedding_length=64, attention__head_count=4), "not an integer"),
        (md("llama", block_count=-3, embedding_length=64, attention__head_count=4), "negative"),
        (md("llama", block_count=2, embedding_length=64, attention__head_count=0), "key/value"),
        (md("qwen3moe", block_count=2, embedding_length=64, attention__head_count=4, expert_count=8,
            expert_used_count=9), "expert_used_count"),
        (md("qwen35", block_count=4, embedding_length=64, attention__head_count=4), "ssm"),
        (md("qwen35", block_count=4, embedding_length=64, attention__head_count=4, full_attention_interval=0,
            ssm__inner_size=8, ssm__state_size=8), "interval"),
    ],
)
def test_bad_metadata_raises_shape_error(meta: dict[str, Any], match: str) -> None:
    with pytest.raises(ShapeError, match=match):
        ModelShape.from_gguf(meta)


def test_not_a_mapping() -> None:
    with pytest.raises(ShapeError):
        ModelShape.from_gguf(["general.architecture"])  # type: ignore[arg-type]
    assert issubclass(ShapeError, ValueError)


def test_moe_without_used_count_is_partial() -> None:
    shape = ModelShape.from_gguf(md("qwen3moe", block_count=2, embedding_length=64, attention__head_count=4,
                                    expert_count=8))
    assert shape.partial and any("expert_used_count" in n for n in shape.notes)


def test_ollama_json_values() -> None:
    # /api/show model_info is JSON: ints, lists, and [] for arrays longer than 5 unless verbose
    info = {"general.architecture": "llama", "llama.block_count": 32, "llama.embedding_length": 4096,
            "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8, "llama.context_length": 131072,
            "llama.vocab_size": 128256, "tokenizer.ggml.tokens": []}
    shape = ModelShape.from_gguf(info)
    assert shape.vocab_size == 128256 and kv_bytes_per_token(shape).total == 131072


def _write_gguf(path: str) -> None:
    import gguf

    w = gguf.GGUFWriter(path, "gemma3")
    w.add_block_count(6)
    w.add_embedding_length(1152)
    w.add_head_count(4)
    w.add_head_count_kv([1, 1, 1, 1, 1, 1])
    w.add_key_length(256)
    w.add_value_length(256)
    w.add_sliding_window(512)
    w.add_context_length(32768)
    w.add_array("gemma3.attention.sliding_window_pattern", [True] * 5 + [False])
    w.add_tensor("x", np.zeros(32, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_real_gguf_file_read_back_with_the_gguf_reader(tmp_path: Any) -> None:
    import gguf

    path = str(tmp_path / "tiny-gemma3.gguf")
    _write_gguf(path)
    reader = gguf.GGUFReader(path)
    contents = {f.name: f.contents() for f in reader.fields.values()}
    # the raw numpy parts too: scalars as one-element memmaps, arrays as numpy arrays
    raw: dict[str, Any] = {}
    for f in reader.fields.values():
        if isinstance(contents[f.name], str) or not f.data:
            raw[f.name] = contents[f.name]
        elif len(f.data) == 1:
            raw[f.name] = f.parts[f.data[0]]
        else:
            raw[f.name] = np.concatenate([f.parts[i] for i in f.data])
    expected = [A.SWA] * 5 + [A.FULL]
    for meta in (contents, raw):
        shape = ModelShape.from_gguf(meta)
        assert kinds(shape) == expected and shape.n_ctx_train == 32768
        assert kv_bytes_per_token(shape).total == 6 * 256 * 2 * 2
        assert kv_allocation(shape, 32768).swa_cells == 1024
    try:
        from kvmon.sources.gguf_meta import read_gguf_metadata
    except ImportError:
        return
    assert ModelShape.from_gguf(read_gguf_metadata(path)) == ModelShape.from_gguf(contents)


def test_shapes_hash_and_compare_by_value() -> None:
    from dataclasses import replace

    a, b = PRESETS["llama-3.1-8b"].shape(), PRESETS["llama-3.1-8b"].shape()
    assert a == b and hash(a) == hash(b) and a is not b
    c = replace(a, partial=True, notes=("x",))
    assert c != a and hash(c) == hash(c)
    assert {a: 1}[b] == 1


def test_cohere2_and_gemma4_without_pattern() -> None:
    c = ModelShape.from_gguf(md("cohere2", block_count=8, embedding_length=4096, attention__head_count=32,
                                attention__head_count_kv=8, attention__sliding_window=4096))
    assert kinds(c)[:4] == [A.SWA] * 3 + [A.FULL] and not c.partial
    g = ModelShape.from_gguf(md("gemma4", block_count=6, embedding_length=1024, attention__head_count=4,
                                attention__sliding_window=512))
    assert g.partial and any("sliding_window_pattern" in n for n in g.notes)
