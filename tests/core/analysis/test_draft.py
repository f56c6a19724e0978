"""Speculative decoding's draft context in memory: its weights and KV beside the model's, on the devices, in the
spill estimate and the exported documents; the log's draft lines kept apart from the model's."""

from __future__ import annotations

import json

import pytest
from analysis_readings import GIB, L8B, SHAPE_8B, gpu, gpus, reading

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import ModelInfo, ServerConfig
from kvmon.core.recorder import snapshot_from_dict, snapshot_to_dict
from kvmon.core.report_json import snapshot_to_json
from kvmon.core.report_prometheus import snapshot_families
from kvmon.physics.kv import kv_allocation
from kvmon.physics.shape import ModelShape
from kvmon.sources.llamacpp.args import parse_llama_server_args
from kvmon.sources.llamacpp.log import parse_llama_log

# Llama-3.2-1B's shape: 16 layers, 8 KV heads of 64: 32 KiB of f16 KV per token
DRAFT_META = {"general.architecture": "llama", "llama.block_count": 16, "llama.embedding_length": 2048,
              "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8, "llama.context_length": 131072}
DRAFT_SHAPE = ModelShape.from_gguf(DRAFT_META)
DRAFT_WEIGHTS = 1_320_000_000


def _with_draft(config: ServerConfig | None = None, **model: object) -> ModelInfo:
    return ModelInfo(name="Llama-3.1-8B", arch="llama", weight_bytes=L8B.weight_bytes, shape=SHAPE_8B,
                     draft_weight_bytes=DRAFT_WEIGHTS, draft_shape=DRAFT_SHAPE, draft_name="llama-1b.gguf",
                     **model)  # type: ignore[arg-type]


def test_the_command_line_names_the_draft_its_cache_types_and_the_speculative_decoders() -> None:
    cfg = parse_llama_server_args(["llama-server", "-m", "m.gguf", "--spec-draft-model", "d.gguf", "-ctkd", "q8_0",
                                   "--spec-draft-type-v", "q4_0", "--spec-type", "draft-simple,ngram-simple"]).config
    assert (cfg.draft_model_path, cfg.draft_type_k, cfg.draft_type_v) == ("d.gguf", "q8_0", "q4_0")
    assert cfg.spec_types == ("draft-simple", "ngram-simple")
    assert (cfg.type_k, cfg.type_v) == ("f16", "f16")  # the model's own stay its own
    plain = parse_llama_server_args(["llama-server", "-m", "m.gguf"]).config
    assert (plain.draft_type_k, plain.spec_types) == (None, None)
    bad = parse_llama_server_args(["llama-server", "--spec-type", "draft simple;", "-ctkd", "q9"])
    assert bad.config.spec_types is None and bad.config.draft_type_k is None
    assert any("--spec-type" in n for n in bad.notes) and any("'q9'" in n for n in bad.notes)


def test_the_drafts_kv_weights_and_buffers_in_the_log_are_kept_apart_from_the_models() -> None:
    """The draft context's load repeats the model's context fields and names its own file and cache types: none of
    that may overwrite the model's; its KV size line is the draft's, its buffers the draft's (lines of b11549)."""
    lines = """\
llama_model_loader: loaded meta data with 21 key-value pairs and 38 tensors from m.gguf (version GGUF V3 (latest))
load_tensors:        CUDA0 model buffer size =  4403.49 MiB
llama_context: n_ctx                 = 4096
llama_context: n_seq_max             = 2
llama_kv_cache:      CUDA0 KV buffer size =   512.00 MiB
llama_kv_cache: size =  512.00 MiB (  2048 cells,  32 layers,  2/2 seqs), K (f16):  256.00 MiB, V (f16):  256.00 MiB
sched_reserve:      CUDA0 compute buffer size =   300.00 MiB
common_speculative_init_result: loading draft model 'd.gguf'
llama_model_loader: loaded meta data with 21 key-value pairs and 20 tensors from d.gguf (version GGUF V3 (latest))
load_tensors:        CUDA0 model buffer size =   800.00 MiB
llama_init_from_model: enabling flash_attn since it is required for quantized V cache
llama_context: n_ctx                 = 4096
llama_context: n_seq_max             = 2
llama_context: flash_attn            = enabled
llama_kv_cache:      CUDA0 KV buffer size =    68.00 MiB
llama_kv_cache: size =   68.00 MiB (  2048 cells,  16 layers,  2/2 seqs), K (q8_0):   34.00 MiB, V (q8_0):   34.00 MiB
sched_reserve:      CUDA0 compute buffer size =   100.00 MiB
srv    load_model: initializing, n_slots = 2, n_ctx_slot = 2048, kv_unified = 'false'
""".splitlines()
    cfg = parse_llama_log(lines)
    mib = 1024 * 1024
    assert cfg.model_path == "m.gguf" and (cfg.type_k, cfg.type_v) == ("f16", "f16")
    assert cfg.kv_bytes_allocated == 512 * mib and cfg.draft_kv_bytes_allocated == 68 * mib
    assert (cfg.draft_type_k, cfg.draft_type_v) == ("q8_0", "q8_0")
    assert cfg.model_buffer_bytes_by_device == {"CUDA0": round(4403.49 * mib)}
    assert cfg.draft_model_buffer_bytes_by_device == {"CUDA0": 800 * mib}
    assert cfg.kv_buffer_bytes_by_device == {"CUDA0": 512 * mib}
    assert cfg.draft_kv_buffer_bytes_by_device == {"CUDA0": 68 * mib}
    assert cfg.compute_buffer_bytes_by_device == {"CUDA0": 400 * mib}  # both contexts' compute buffers are memory
    assert (cfg.n_ctx_total, cfg.n_parallel, cfg.flash_attn) == (4096, 2, None)


def test_the_draft_holds_its_weights_and_kv_beside_the_models_on_the_gpu() -> None:
    """llama.cpp gives the draft the model's cells and sequences: its KV is sized by the draft's shape and types;
    the GPU bar's draft part is its weights plus that KV, and the server's other memory is what is left."""
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, draft_model_path="/m/llama-1b.gguf", draft_type_k="q8_0",
                       draft_type_v="q8_0")
    want_kv = kv_allocation(DRAFT_SHAPE, 32768, type_k="q8_0", type_v="q8_0").kv_bytes
    held = L8B.weight_bytes + kv_allocation(SHAPE_8B, 32768).kv_bytes + DRAFT_WEIGHTS + want_kv + 500_000_000
    s = Analyzer().update(reading(model=_with_draft(), config=cfg), gpus(0.0, gpu(server=held, free=8 * GIB)))
    assert want_kv == 16 * 8 * 64 * 2 * 34 // 32 * 32768  # 16 layers × 512 K + 512 V values × 1.0625 B
    m = s.model
    assert (m.draft_weight_bytes, m.draft_kv_allocated_bytes) == (DRAFT_WEIGHTS, want_kv)
    assert m.draft_kv_bytes_per_token == 16 * 8 * 64 * 2 * 34 / 32
    assert (m.draft_kv_type_k, m.draft_kv_type_v, m.draft_name) == ("q8_0", "q8_0", "llama-1b.gguf")
    assert s.kv_allocated_bytes == m.kv_allocated_bytes  # the model's KV stays the model's
    g = s.gpus[0]
    assert g.draft_bytes == DRAFT_WEIGHTS + want_kv
    assert g.server_other_bytes == 500_000_000  # what the server holds less its weights, KV and the draft
    doc = snapshot_to_json(s)
    assert doc["model"]["draft"]["kv_allocated_bytes"] == want_kv
    assert doc["gpus"][0]["draft_bytes"] == DRAFT_WEIGHTS + want_kv
    assert s.provenance["draft_kv_allocated_bytes"] == "computed"
    families = {f.name: f for f in snapshot_families(s, backend="llama-server", server="http://127.0.0.1:8080")}
    assert families["kvmon_draft_kv_cache_allocated_bytes"].samples[0].value == want_kv
    assert families["kvmon_draft_model_weight_bytes"].samples[0].value == DRAFT_WEIGHTS
    assert families["kvmon_gpu_draft_bytes"].samples[0].value == DRAFT_WEIGHTS + want_kv


def test_the_logs_draft_size_wins_and_its_buffers_place_the_draft() -> None:
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, draft_model_path="d.gguf", kv_bytes_allocated=4 * GIB,
                       draft_kv_bytes_allocated=300_000_000, model_buffer_bytes_by_device={"CUDA0": L8B.weight_bytes},
                       kv_buffer_bytes_by_device={"CUDA0": 4 * GIB},
                       draft_model_buffer_bytes_by_device={"CPU": DRAFT_WEIGHTS},
                       draft_kv_buffer_bytes_by_device={"CPU": 300_000_000})
    s = Analyzer().update(reading(model=_with_draft(), config=cfg), gpus())
    assert s.model.draft_kv_allocated_bytes == 300_000_000 and s.provenance["draft_kv_allocated_bytes"] == "log"
    assert s.gpus[0].draft_bytes is None  # -ngld 0: the draft on the CPU, as its buffers say
    assert s.host.draft_in_host_bytes == DRAFT_WEIGHTS + 300_000_000


def test_the_draft_counts_in_the_spill_estimate() -> None:
    """A GPU whose free room the model and its KV just fit: the draft beside them pushes part of the KV over PCIe."""
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1)
    kv = kv_allocation(SHAPE_8B, 32768).kv_bytes
    room = L8B.weight_bytes + kv + 100_000_000  # what the other processes leave
    tight = gpu(total=room + 2 * GIB, others=2 * GIB, server=None, free=100_000_000)
    without = Analyzer().update(reading(config=cfg), gpus(0.0, tight))
    assert not without.host.kv_in_host_bytes
    drafted = Analyzer().update(reading(model=_with_draft(), config=ServerConfig(
        n_ctx_total=32768, n_parallel=1, draft_model_path="d.gguf")), gpus(0.0, tight))
    assert drafted.host.kv_in_host_bytes == pytest.approx(drafted.model.draft_weight_bytes
                                                          + drafted.model.draft_kv_allocated_bytes - 100_000_000,
                                                          abs=2)


def test_a_recording_keeps_the_draft() -> None:
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, draft_model_path="d.gguf")
    s = Analyzer().update(reading(model=_with_draft(), config=cfg), gpus(0.0, gpu(server=None)))
    assert s.model.draft_kv_allocated_bytes and s.gpus[0].draft_bytes
    back = snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(s))))
    assert back.model == s.model and back.gpus == s.gpus and back.host == s.host
