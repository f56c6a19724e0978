"""KV bytes against llama.cpp's own allocation log lines and the seeds' worked examples."""

from __future__ import annotations

import re
import shlex

import pytest
from repo_paths import FIXTURES

from kvmon.physics.kv import (
    KvAllocation,
    kv_allocation,
    kv_bytes_in_use,
    kv_bytes_per_token,
    pad_cells,
    recurrent_state_bytes,
)
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape

MIB = 1024 * 1024
FIXTURE = FIXTURES / "llama-server" / "kv-log-lines.txt"

# The two test models of the captures (fixtures README): llama architecture, context_length 32768.
CAPTURE_MODELS = {
    "tiny-llama-e256-l4.gguf": {"layers": 4, "heads": 4, "kv": 2, "embd": 256},  # head dim 64
    "tiny-llama-e1024-l8.gguf": {"layers": 8, "heads": 8, "kv": 2, "embd": 1024},  # head dim 128
}
SIZE_LINE = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)


def capture_shape(model_file: str) -> ModelShape:
    m = CAPTURE_MODELS[model_file]
    return ModelShape.from_gguf({
        "general.architecture": "llama",
        "llama.block_count": m["layers"],
        "llama.embedding_length": m["embd"],
        "llama.attention.head_count": m["heads"],
        "llama.attention.head_count_kv": m["kv"],
        "llama.context_length": 32768,
    })


def _runs() -> list[tuple[str, dict[str, str], re.Match[str]]]:
    """(command line, parsed flags, size line) for every run in the capture that printed a size line."""
    runs: list[tuple[str, dict[str, str], re.Match[str]]] = []
    cmd: str | None = None
    for line in FIXTURE.read_text().splitlines():
        if line.startswith("## llama-server"):
            cmd = line[3:]
            continue
        match = SIZE_LINE.search(line)
        if match and cmd:
            argv = shlex.split(cmd)
            flags = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("-")}
            runs.append((cmd, flags, match))
    return runs


RUNS = _runs()


def test_capture_has_all_configurations() -> None:
    # f16 and q8_0, -np 1, -np 2 and the default (-np auto → 4 unified), small and large model
    assert len(RUNS) >= 8
    kinds = {(f.get("-np", "auto"), m.group(6)) for _, f, m in RUNS}
    assert {("1", "f16"), ("1", "q8_0"), ("2", "f16"), ("auto", "f16")} <= kinds


@pytest.mark.parametrize(("cmd", "flags", "line"), RUNS, ids=[c.split("llama-server ")[1][:60] for c, _, _ in RUNS])
def test_allocation_matches_llama_cpp_log(cmd: str, flags: dict[str, str], line: re.Match[str]) -> None:
    shape = capture_shape(flags["-m"])
    n_ctx = int(flags.get("-c", "0")) or shape.n_ctx_train or 0
    if "-np" in flags:
        n_seq, unified = int(flags["-np"]), False
    else:
        n_seq, unified = 4, True  # "n_parallel is set to auto, using n_parallel = 4 and kv_unified = true"
    type_k = flags.get("-ctk", "f16")
    type_v = flags.get("-ctv", "f16")
    a = kv_allocation(shape, n_ctx, n_seq=n_seq, unified=unified, type_k=type_k, type_v=type_v)
    size_mib, cells, layers, seqs, streams = (float(line.group(1)), *map(int, line.group(2, 3, 4, 5)))
    assert a.cells == cells
    assert a.n_kv_layers == layers
    assert a.n_streams == streams and n_seq == seqs
    assert a.k_bytes / MIB == pytest.approx(float(line.group(7)), abs=0.005)
    assert a.v_bytes / MIB == pytest.approx(float(line.group(9)), abs=0.005)
    assert a.kv_bytes / MIB == pytest.approx(size_mib, abs=0.005)
    assert a.total_bytes == a.kv_bytes  # no recurrent layers


def test_readme_sizes() -> None:
    # the fixtures README: small 32 MiB f16 / 17 MiB q8_0, large 128 / 68 MiB at 16384; large 256 MiB at 32768
    small, large = capture_shape("tiny-llama-e256-l4.gguf"), capture_shape("tiny-llama-e1024-l8.gguf")
    assert kv_allocation(small, 16384).total_bytes == 32 * MIB
    assert kv_allocation(small, 16384, type_k="q8_0", type_v="q8_0").total_bytes == 17 * MIB
    assert kv_allocation(large, 16384).total_bytes == 128 * MIB
    assert kv_allocation(large, 16384, type_k="q8_0", type_v="q8_0").total_bytes == 68 * MIB
    assert kv_allocation(large, 32768).total_bytes == 256 * MIB


def test_seed_128_kib_per_token_llama_3_1_8b() -> None:
    # 000_…: "positions × 32 layers × 2 (K + V) × 8 KV heads × 128 head dimension × bytes per element"
    shape = PRESETS["llama-3.1-8b"].shape()
    per_token = kv_bytes_per_token(shape)
    assert per_token.total == 32 * 2 * 8 * 128 * 2 == 128 * 1024
    assert per_token.k_bytes == per_token.v_bytes == 64 * 1024
    assert kv_allocation(shape, 8192).total_bytes == 1024**3  # apis.md §4: 1 GiB at 8192
    # the seed's "64K context, ~8 GB standard cache"
    assert kv_bytes_in_use(shape, 65536) == 8 * 1024**3


def test_seed_003_multi_head_examples() -> None:
    # 003_…: Memory = 2 × layers × hidden × context × 2 bytes (full multi-head attention, no GQA).
    # Its "Llama 3.1 7B" (32 layers, hidden 4096) is Llama 2 7B's shape; 13B likewise Llama 2 13B.
    assert kv_bytes_per_token(PRESETS["llama-2-7b"].shape()).total * 4096 == 2_147_483_648
    assert kv_bytes_per_token(PRESETS["llama-2-13b"].shape()).total * 8192 == 6_710_886_400
    # The 70B example (2 × 80 × 8192 × 4096 × 2 = 10,737,418,240) ignores GQA: the real Llama 2/3 70B has 8 KV
    # heads of 128 for 64 query heads, so its cache is 8× smaller. kvmon computes the real shape.
    seventy = kv_bytes_per_token(PRESETS["llama-2-70b"].shape()).total
    assert 2 * 80 * 8192 * 4096 * 2 == 10_737_418_240
    assert seventy * 4096 == 1_342_177_280 == 10_737_418_240 // 8
    # the same seed's "70B at 16K needs another 43 GB" is likewise the no-GQA figure; the real one is 5 GiB
    assert kv_bytes_per_token(PRESETS["llama-3.1-70b"].shape()).total * 16384 == 5 * 1024**3


def test_seed_3090x2_hybrid_is_64_kib_per_token() -> None:
    # 64 layers: 48 gated-delta-net (recurrent) + 16 full attention × 4 KV heads × 256 → 65,536 B/token at f16
    shape = PRESETS["qwen3.5-27b"].shape()
    assert shape.n_kv_layers == 16 and shape.n_recurrent_layers == 48
    assert kv_bytes_per_token(shape).total == 65_536
    # q8_0 (the seed's measured table): 34/32 of half the f16 bytes
    assert kv_bytes_per_token(shape, "q8_0", "q8_0").total == 16 * 2 * 4 * (256 // 32) * 34
    # recurrent state: f32, (conv 3 × (6144 + 2·16·128) + 128 × 6144) per layer and sequence
    per_layer = 3 * (6144 + 2 * 16 * 128) + 128 * 6144
    assert recurrent_state_bytes(shape) == 48 * per_layer * 4
    assert recurrent_state_bytes(shape, n_seq=4) == 4 * 48 * per_layer * 4
    a = kv_allocation(shape, 32768, n_seq=2)
    assert a.recurrent_bytes == recurrent_state_bytes(shape, 2)
    assert a.total_bytes == a.kv_bytes + a.recurrent_bytes


def test_swa_allocation_and_reads_gemma3() -> None:
    shape = PRESETS["gemma-3-27b"].shape()
    swa = [layer for layer in shape.layers if layer.kind.value == "swa"]
    assert len(swa) == 52 and len(shape.layers) - len(swa) == 10  # 5 local : 1 global over 62 layers
    per_layer = 16 * 128 * 2 * 2
    a = kv_allocation(shape, 131072)
    assert a.cells == 131072
    assert a.swa_cells == pad_cells(1024 + 512) == 1536
    assert a.kv_bytes == per_layer * (10 * 131072 + 52 * 1536)
    # unified with 4 sequences: window × 4 + ubatch
    assert kv_allocation(shape, 131072, n_seq=4, unified=True).swa_cells == pad_cells(4 * 1024 + 512)
    # --swa-full gives SWA layers the whole context
    assert kv_allocation(shape, 131072, swa_full=True).kv_bytes == per_layer * 62 * 131072
    # a decode step at depth 50,000 reads the window on SWA layers, everything on global ones
    assert kv_bytes_in_use(shape, 50_000) == per_layer * (10 * 50_000 + 52 * 1024)
    assert kv_bytes_in_use(shape, 500) == per_layer * 62 * 500


def test_non_unified_streams_divide_context() -> None:
    shape = PRESETS["llama-3.1-8b"].shape()
    a = kv_allocation(shape, 16384, n_seq=2)
    assert (a.cells, a.n_streams) == (8192, 2)
    a = kv_allocation(shape, 16385, n_seq=2)  # pad256(16385) = 16640, / 2 = 8320, pad256 → 8448
    assert (a.cells, a.n_streams) == (8448, 2)
    b = kv_allocation(shape, 1000)
    assert b.cells == 1024
    # llama_context pads n_ctx to 256 before dividing: -c 513 -np 2 → 768 / 2 = 384 → 512 cells per stream
    assert kv_allocation(shape, 513, n_seq=2).cells == 512
    assert kv_allocation(shape, 513, n_seq=2, unified=True).cells == 768


def test_mla_caches_only_the_latent() -> None:
    # apis.md §4: DeepSeek-V3 f16 = 61 × 576 × 2 B ≈ 68.6 KiB per token, V not cached
    shape = PRESETS["deepseek-v3"].shape()
    t = kv_bytes_per_token(shape)
    assert t.k_bytes == 61 * 576 * 2 and t.v_bytes == 0
    assert t.total / 1024 == pytest.approx(68.6, abs=0.05)


def test_allocation_rejects_negative_context() -> None:
    with pytest.raises(ValueError):
        kv_allocation(PRESETS["llama-3.1-8b"].shape(), -1)


def test_allocation_total_property() -> None:
    a = KvAllocation(cells=256, swa_cells=0, k_bytes=10, v_bytes=20, recurrent_bytes=5)
    assert a.total_bytes == 35 and a.kv_bytes == 30


def test_without_flash_attention_v_is_padded_to_the_widest_layer() -> None:
    # gemma4-like: SWA layers 2 × 256 wide, full layers 2 × 512; -fa off pads every V row to 1024 values
    shape = ModelShape.from_gguf({
        "general.architecture": "gemma4", "gemma4.block_count": 6, "gemma4.embedding_length": 2560,
        "gemma4.attention.head_count": 8, "gemma4.attention.head_count_kv": 2, "gemma4.attention.key_length": 512,
        "gemma4.attention.value_length": 512, "gemma4.attention.key_length_swa": 256,
        "gemma4.attention.value_length_swa": 256, "gemma4.attention.sliding_window": 4096,
    })
    fa = kv_allocation(shape, 1024)
    no_fa = kv_allocation(shape, 1024, flash_attn=False)
    assert fa.k_bytes == no_fa.k_bytes == 1024 * 2 * 2 * (5 * 256 + 512)
    assert fa.v_bytes == fa.k_bytes
    assert no_fa.v_bytes == 1024 * 2 * 6 * 2 * 512
    # uniform layers: no difference (the fixtures' -fa off run printed the same 32 MiB)
    small = capture_shape("tiny-llama-e256-l4.gguf")
    assert kv_allocation(small, 16384, flash_attn=False) == kv_allocation(small, 16384)


@pytest.mark.parametrize(("key", "kib_per_token"), [
    ("mistral-7b", 128),  # 32 × 8 × 128 × 2 × 2
    ("qwen2.5-7b", 56),  # 28 × 4 × 128 × 2 × 2
    ("qwen3-8b", 144),  # 36 × 8 × 128 × 2 × 2
    ("phi-3-mini", 384),  # 32 × 32 × 96 × 2 × 2: no GQA
    ("gemma-2-9b", 336),  # 42 × 8 × 256 × 2 × 2 (half of it windowed at 4096)
    ("gemma-3-12b", 384),  # 48 × 8 × 256 × 2 × 2 (40 of 48 layers windowed at 1024)
])
def test_preset_bytes_per_token(key: str, kib_per_token: int) -> None:
    shape = PRESETS[key].shape()
    assert kv_bytes_per_token(shape).total == kib_per_token * 1024
    assert not shape.partial


def test_every_preset_builds_cleanly() -> None:
    for key, p in PRESETS.items():
        shape = p.shape()
        assert shape.n_layers == len(shape.layers) > 0, key
        assert p.weight_bytes > 0 and p.quantization, key
        assert not shape.partial, (key, shape.notes)
