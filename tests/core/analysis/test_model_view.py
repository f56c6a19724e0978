"""The model as the dashboard shows it: the KV cache the log states over the computed one, every slot's KV summed,
Ollama's weights from its loaded size."""

from __future__ import annotations

from dataclasses import replace

import pytest
from analysis_readings import GIB, KV_PER_TOKEN_8B, L8B, SHAPE_8B, FixedRates, ceiling_8b, gpus, reading

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import ModelInfo, ServerConfig, SlotReading


def test_log_kv_size_wins_over_the_computed_one() -> None:
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, type_k="q8_0", type_v="q8_0", kv_bytes_allocated=2176 * 2**20,
                       provenance={})
    s = Analyzer(rate_tracker=FixedRates()).update(reading(config=cfg), gpus())
    assert s.kv_allocated_bytes == 2176 * 2**20
    assert s.provenance["kv_allocated_bytes"] == "log"
    assert s.model.kv_type_k == "q8_0"
    assert s.model.kv_bytes_per_token == 32 * 8 * 128 * 2 * 34 / 32


def test_several_slots_sum_their_kv() -> None:
    slots = (SlotReading(0, 16384, 1000, True), SlotReading(1, 16384, 5000, False), SlotReading(2, 16384, None, False))
    s = Analyzer(rate_tracker=FixedRates()).update(reading(slots=slots,
                                                           config=ServerConfig(n_ctx_total=49152, n_parallel=3)),
                                                   gpus())
    assert s.kv_in_use_bytes == 6000 * KV_PER_TOKEN_8B
    assert s.context_tokens == 1000  # the deepest *active* conversation
    assert s.model.n_ctx == 16384 and s.model.n_slots == 3
    assert s.ceiling_tok_s == pytest.approx(ceiling_8b(1000))
    s = Analyzer(rate_tracker=FixedRates()).update(reading(slots=tuple(replace(x, processing=False) for x in slots)),
                                                   gpus())
    assert s.context_tokens == 5000


def test_ollama_weights_estimated_from_its_loaded_size() -> None:
    """Ollama's size = weights + KV cache (+ graph): without a tensor list, weights = size − computed KV."""
    m = ModelInfo(name="llama3.1:8b", weight_bytes=None, shape=SHAPE_8B)
    size = 4_920_000_000 + 4 * GIB
    r = reading(ctx=None, backend="ollama", model=m, weight_bytes_vram=size, weight_bytes_host=0,
                slots=(), config=ServerConfig(n_ctx_total=32768, n_parallel=1))
    s = Analyzer(rate_tracker=FixedRates()).update(r, gpus())
    assert s.model.weight_bytes == 4_920_000_000
    assert s.provenance["weight_bytes"] == "estimated" and "KV" in s.reasons["weight_bytes"]
    assert s.ceiling_tok_s is None and "depth unknown" in s.reasons["ceiling_tok_s"]
    assert s.ceiling_curve[0] == (0, pytest.approx(1008e9 / 4.92e9))  # the curve needs no depth
    assert s.kv_in_use_bytes is None  # unknown, not 0
    assert "kvmon proxy" in s.reasons["context_tokens"]
    assert not any(a.code in ("weights_in_host", "kv_in_host") for a in s.alerts)


def test_the_model_view_follows_the_readings_reasons_config_and_slots() -> None:
    """A poll while a reply decodes shows the same model; a reason, another config or slot size shows at once, and a
    reason that is gone leaves the screen."""
    model = ModelInfo(name="Llama-3.1-8B-Q4_K_M.gguf", arch="llama", weight_bytes=L8B.weight_bytes, shape=SHAPE_8B)
    config = ServerConfig(n_ctx_total=32768, n_parallel=1)
    a = Analyzer(rate_tracker=FixedRates(decode=40.0))
    first = a.update(reading(0.0, model=model, config=config), gpus(0.0))
    second = a.update(reading(1.0, ctx=8300, model=model, config=config), gpus(1.0))
    assert second.model == first.model and second.context_tokens == 8300
    assert second.provenance["kv_bytes_per_token"] == first.provenance["kv_bytes_per_token"] == "computed"
    noted = a.update(reading(2.0, model=model, config=config, reasons={"weight_bytes": "size hidden"}), gpus(2.0))
    assert noted.reasons["weight_bytes"] == "size hidden"  # the reading's own reason stays
    after = a.update(reading(3.0, model=model, config=config), gpus(3.0))
    assert "weight_bytes" not in after.reasons
    q8 = a.update(reading(4.0, model=model, config=replace(config, type_k="q8_0", type_v="q8_0")), gpus(4.0))
    assert q8.model.kv_type_k == "q8_0"
    assert q8.model.kv_bytes_per_token == pytest.approx(first.model.kv_bytes_per_token * 34 / 64)
    wider = a.update(reading(5.0, n_ctx=65536, model=model, config=config), gpus(5.0))
    assert wider.model.n_ctx == 65536
