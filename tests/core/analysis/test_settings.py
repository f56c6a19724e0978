"""Settings that change llama.cpp's KV allocation, read from the command line and the log and passed to the physics.

The rules are llama.cpp b11549's (``llama-context.cpp``, ``llama-kv-cache*.cpp``, ``src/models/*.cpp``); the
real-server matrix in ``tests/acceptance/test_real_llamacpp_kv.py`` checks them against the server's own log lines.
"""

from __future__ import annotations

from tiny_gguf import metadata

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import GpuReading, GpuSetReading, ModelInfo, ServerConfig, ServerReading, SlotReading
from kvmon.physics.kv import kv_allocation
from kvmon.physics.shape import ModelShape
from kvmon.sources.llamacpp.args import parse_llama_server_args
from kvmon.sources.llamacpp.log import parse_llama_log

MIB = 1024 * 1024
GEMMA3 = ModelShape.from_gguf(metadata("gemma3"))  # 5 SWA layers (window 128) + 1 full, 2 KV heads × 32
LOG_HEAD = ["0.00.010.637 I llama_context: n_batch               = 2048",
            "0.00.010.637 I llama_context: n_ubatch              = 512"]


def _analyze(shape: ModelShape, cfg: ServerConfig) -> int | None:
    """kvmon's allocated KV bytes for a one-slot server with ``cfg`` (no GPU: the allocation needs none)."""
    slot = SlotReading(id=0, n_ctx=cfg.n_ctx_total, context_tokens=10, processing=False)
    r = ServerReading(t_monotonic=0.0, t_wall=1.8e9, backend="llama-server", url="http://127.0.0.1:8080",
                      model=ModelInfo(name="m.gguf", arch=shape.arch, weight_bytes=10 * MIB, shape=shape),
                      slots=(slot,), total_slots=1, metrics_enabled=True, config=cfg)
    return Analyzer().update(r, GpuSetReading(t_monotonic=0.0, gpus=())).kv_allocated_bytes


# 1. --swa-full: the sliding-window layers keep every cell

def test_swa_full_is_read_from_the_command_line_and_the_environment() -> None:
    on = parse_llama_server_args(["-m", "g.gguf", "--swa-full"]).config
    assert on.swa_full is True and on.provenance["swa_full"] == "command_line"
    off = parse_llama_server_args(["-m", "g.gguf"]).config
    assert off.swa_full is False and off.provenance["swa_full"] == "default"
    assert parse_llama_server_args([], {"LLAMA_ARG_SWA_FULL": "1"}).config.swa_full is True


def test_swa_full_is_read_from_the_log() -> None:
    full = parse_llama_log([*LOG_HEAD,
                            "0.00.010.646 W llama_kv_cache_iswa: using full-size SWA cache (ref: https://github.com/"
                            "ggml-org/llama.cpp/pull/13194#issuecomment-2868343055)",
                            "0.00.010.647 I llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells",
                            "0.00.012.012 I llama_kv_cache_iswa: creating     SWA KV cache, size = 4096 cells"])
    assert full.swa_full is True and full.provenance["swa_full"] == "log"
    windowed = parse_llama_log([*LOG_HEAD,
                                "0.00.010.647 I llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells",
                                "0.00.012.012 I llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells"])
    assert windowed.swa_full is False
    assert parse_llama_log(LOG_HEAD).swa_full is None  # a model without SWA layers: the log cannot tell


def test_swa_full_reaches_the_allocation() -> None:
    cfg = parse_llama_server_args(["-m", "g.gguf", "-c", "4096", "-np", "1", "--swa-full"]).config
    full = kv_allocation(GEMMA3, 4096, swa_full=True).kv_bytes
    assert full == 6 * 4096 * 2 * 64 * 2  # every layer at 4096 cells: 6 MiB, as llama.cpp prints
    assert _analyze(GEMMA3, cfg) == full
    windowed = parse_llama_server_args(["-m", "g.gguf", "-c", "4096", "-np", "1"]).config
    assert _analyze(GEMMA3, windowed) == kv_allocation(GEMMA3, 4096).kv_bytes < full


# 2. -b/--batch-size: n_batch ≤ n_ctx, n_ubatch = min(n_batch, n_ubatch), and SWA cells hold window + n_ubatch

def test_batch_size_is_read_and_caps_the_ubatch() -> None:
    c = parse_llama_server_args(["-m", "g.gguf", "-c", "4096", "-b", "256"]).config
    assert (c.n_batch, c.n_ubatch) == (256, 256)
    assert c.provenance["n_batch"] == "command_line" and c.provenance["n_ubatch"] == "command_line"
    c = parse_llama_server_args(["--batch-size=1024", "--ubatch-size", "2048"]).config
    assert (c.n_batch, c.n_ubatch) == (1024, 1024)
    c = parse_llama_server_args(["-c", "640"]).config  # the batch is capped at the context
    assert (c.n_batch, c.n_ubatch) == (640, 512)
    c = parse_llama_server_args(["-m", "g.gguf"]).config
    assert (c.n_batch, c.n_ubatch) == (2048, 512) and c.provenance["n_batch"] == "default"
    assert parse_llama_server_args([], {"LLAMA_ARG_BATCH": "128"}).config.n_ubatch == 128


def test_batch_size_is_read_from_the_log() -> None:
    c = parse_llama_log(["0.00.009.380 I llama_context: n_batch               = 256",
                         "0.00.009.381 I llama_context: n_ubatch              = 256"])
    assert (c.n_batch, c.n_ubatch) == (256, 256) and c.provenance["n_batch"] == "log"


def test_batch_size_reaches_the_swa_cells() -> None:
    # llama.cpp b11549, gemma3 -c 4096 -b 256: 1.00 MiB (4096 cells, 1 layer) + 0.62 MiB (512 cells, 5 layers)
    alloc = kv_allocation(GEMMA3, 4096, n_batch=256)
    assert (alloc.cells, alloc.swa_cells) == (4096, 512)
    assert alloc.kv_bytes == 4096 * 256 + 5 * 512 * 256
    assert kv_allocation(GEMMA3, 640).swa_cells == 768  # n_batch 640, n_ubatch 512: pad256(128 + 512)
    assert kv_allocation(GEMMA3, 300, n_ubatch=512).swa_cells == 512  # n_ubatch ≤ n_batch ≤ 300: 428 → 512
    cfg = parse_llama_server_args(["-m", "g.gguf", "-c", "4096", "-np", "1", "-b", "256"]).config
    assert _analyze(GEMMA3, cfg) == alloc.kv_bytes


# 3. -fa off: without flash attention V is stored transposed, every layer's V row as wide as the widest layer's

GEMMA4 = ModelShape.from_gguf(metadata("gemma4"))  # SWA V rows 2 × 32, the global layer's 2 × 64; 2 layers share


def test_flash_attention_off_pads_v_to_the_widest_layer() -> None:
    # llama.cpp b11549, gemma4 -c 4096 -np 1 -fa off: "padding V cache to 128";
    # 2.00 MiB (4096 cells, 1 layer) + 0.84 MiB (768 cells, 3 layers; K 0.28, V 0.56)
    off = kv_allocation(GEMMA4, 4096, flash_attn=False)
    assert (off.swa_k_bytes, off.swa_v_bytes) == (3 * 768 * 64 * 2, 3 * 768 * 128 * 2)
    assert off.kv_bytes == 2 * MIB + 3 * 768 * (64 + 128) * 2
    on = kv_allocation(GEMMA4, 4096)
    assert on.kv_bytes == 2 * MIB + 3 * 768 * (64 + 64) * 2
    cfg_off = parse_llama_server_args(["-m", "g.gguf", "-c", "4096", "-np", "1", "-fa", "off"]).config
    assert _analyze(GEMMA4, cfg_off) == off.kv_bytes
    for fa in ("on", "auto"):  # auto: llama.cpp lays the cache out for flash attention before it resolves
        cfg = parse_llama_server_args(["-m", "g.gguf", "-c", "4096", "-np", "1", "-fa", fa]).config
        assert _analyze(GEMMA4, cfg) == on.kv_bytes


# 4. deepseek2 with trailing nextn / MTP blocks (GLM-4.7-Flash): KV for the trunk layers only

def test_deepseek2_nextn_layers_hold_no_kv() -> None:
    shape = ModelShape.from_gguf(metadata("deepseek2-nextn"))  # 3 trunk MLA layers + 1 MTP block
    assert shape.n_kv_layers == 3
    assert [ly.kind.value for ly in shape.layers] == ["mla", "mla", "mla", "none"]
    # llama.cpp b11549, -c 4096 -np 1: "size = 2.25 MiB (4096 cells, 3 layers, 1/1 seqs), K (f16): 2.25 MiB"
    assert kv_allocation(shape, 4096).kv_bytes == 3 * 4096 * (64 + 32) * 2
    assert ModelShape.from_gguf(metadata("deepseek2")).n_kv_layers == 3  # no MTP block: every layer


# 5. llama4: the attention chunk is 8192 whatever the GGUF's sliding_window says (0 turns chunking off)

def test_llama4_chunk_is_fixed_at_8192() -> None:
    shape = ModelShape.from_gguf(metadata("llama4"))  # sliding_window 256 in the GGUF
    chunked = [ly for ly in shape.layers if ly.kind.value == "chunked"]
    assert len(chunked) == 3 and {ly.window for ly in chunked} == {8192}
    # llama.cpp b11549, -c 4096 -np 1: 1.00 MiB (4096 cells, 1 layer) + 3.00 MiB (4096 cells, 3 layers)
    alloc = kv_allocation(shape, 4096)
    assert (alloc.cells, alloc.swa_cells) == (4096, 4096)
    assert alloc.kv_bytes == 4 * 4096 * 2 * 64 * 2
    off = ModelShape.from_gguf({**metadata("llama4"), "llama4.attention.sliding_window": 0})
    assert {ly.kind.value for ly in off.layers} == {"full"}


# hybrids: the KV cache and the recurrent state are llama.cpp's two size lines, and kvmon's two numbers

def _analyze_snapshot(shape: ModelShape, cfg: ServerConfig, *gpus: GpuReading):  # type: ignore[no-untyped-def]
    slot = SlotReading(id=0, n_ctx=cfg.n_ctx_total, context_tokens=10, processing=False)
    r = ServerReading(t_monotonic=0.0, t_wall=1.8e9, backend="llama-server", url="http://127.0.0.1:8080",
                      model=ModelInfo(name="m.gguf", arch=shape.arch, weight_bytes=10 * MIB, shape=shape),
                      slots=(slot,), total_slots=1, metrics_enabled=True, config=cfg)
    return Analyzer().update(r, GpuSetReading(t_monotonic=0.0, gpus=gpus))


def test_hybrid_kv_bytes_exclude_the_recurrent_state() -> None:
    shape = ModelShape.from_gguf(metadata("qwen35"))  # 3 gated-delta-net layers + 1 full attention layer
    alloc = kv_allocation(shape, 4096)
    assert alloc.recurrent_bytes > 0
    s = _analyze_snapshot(shape, parse_llama_server_args(["-m", "q.gguf", "-c", "4096", "-np", "1"]).config)
    assert s.model.kv_allocated_bytes == alloc.kv_bytes  # llama_kv_cache: size = 1.00 MiB
    assert s.model.recurrent_state_bytes == alloc.recurrent_bytes  # llama_memory_recurrent: size = 0.06 MiB
    assert s.provenance["kv_allocated_bytes"] == "computed"


def test_recurrent_state_size_is_read_from_the_log() -> None:
    line = ("0.00.018.454 I llama_memory_recurrent: size =    0.22 MiB (     4 cells,   4 layers,  4 seqs  0 rs_seq), "
            "R (f32):    0.04 MiB, S (f32):    0.19 MiB, P (f32):    0.00 MiB")
    cfg = parse_llama_log([line])
    assert cfg.recurrent_bytes_allocated == round(0.22 * MIB) and cfg.provenance["recurrent_bytes_allocated"] == "log"
    shape = ModelShape.from_gguf(metadata("qwen35"))
    s = _analyze_snapshot(shape, cfg)
    assert s.model.recurrent_state_bytes == round(0.22 * MIB)
    assert s.provenance["recurrent_state_bytes"] == "log"


def test_the_recurrent_state_still_counts_in_vram() -> None:
    shape = ModelShape.from_gguf(metadata("qwen35"))
    alloc = kv_allocation(shape, 4096)
    gpu = GpuReading(index=0, name="NVIDIA GeForce RTX 4090", vram_total_bytes=24 << 30, vram_used_bytes=1 << 30,
                     vram_free_bytes=23 << 30, peak_bandwidth_bytes_per_s=1008e9, bandwidth_source="table")
    s = _analyze_snapshot(shape, parse_llama_server_args(["-m", "q.gguf", "-c", "4096", "-np", "1"]).config, gpu)
    assert s.kv_allocated_bytes == alloc.kv_bytes  # the KV number is llama.cpp's KV line
    assert s.gpus[0].kv_allocated_bytes == alloc.kv_bytes + alloc.recurrent_bytes  # the memory bar holds both
