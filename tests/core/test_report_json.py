"""The once --json document of a Snapshot: every section filled, an empty and a non-finite one, the regime, the fit and
an uncertain ceiling."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvmon.cli.once import format_text
from kvmon.core.report_json import snapshot_to_json
from kvmon.core.snapshot import (
    Alert,
    AlertLevel,
    CeilingSuspect,
    Connection,
    ConnectionStatus,
    Forecast,
    GpuView,
    Milestone,
    ModelView,
    Regime,
    SlotView,
    Snapshot,
)

TOP_LEVEL = {"kvmon_version", "backend", "server_version", "url", "model", "slots", "decode_tok_s", "prefill_tok_s",
             "ceiling_tok_s", "efficiency", "gpus", "alerts", "provenance"}


def _snapshot(**kw: Any) -> Snapshot:
    base: dict[str, Any] = {"seq": 1, "t_monotonic": 1.0, "t_wall": 1.7e9,
                            "connection": Connection(ConnectionStatus.CONNECTED)}
    base.update(kw)
    return Snapshot(**base)


def test_snapshot_to_json_full() -> None:
    s = _snapshot(
        backend="ollama", server_version="0.33.0", url="http://127.0.0.1:11434",
        model=ModelView(name="m", arch="llama", n_params=8_000_000_000, weight_bytes=4_900_000_000, n_ctx=8192,
                        n_layers=32, kv_type_k="q8_0", kv_type_v="q8_0", kv_bytes_per_token=69632.0,
                        kv_allocated_bytes=570425344),
        slots=(SlotView(0, 8192, 4000, True, 41.5),),
        decode_tok_s=41.5, prefill_tok_s=None, ceiling_tok_s=60.0, efficiency=41.5 / 60.0,
        gpus=(GpuView(0, "NVIDIA GeForce RTX 4090", 24 * 1024**3, 20 * 1024**3, 4 * 1024**3,
                      peak_bandwidth_bytes_per_s=1.008e12, bandwidth_source="nvml"),),
        alerts=(Alert(AlertLevel.WARNING, "ctx_full_soon", "context full in 2 min"),),
        provenance={"decode_tok_s": "measured", "kv_type": "command_line"},
    )
    doc = snapshot_to_json(s)
    json.dumps(doc, allow_nan=False)
    assert doc["model"]["kv_type_k"] == "q8_0" and doc["model"]["kv_bytes_per_token"] == 69632.0
    assert doc["slots"][0] == {"id": 0, "n_ctx": 8192, "context_tokens": 4000, "processing": True,
                               "decode_tok_s": 41.5}
    assert doc["gpus"][0]["bandwidth_source"] == "nvml" and doc["gpus"][0]["vram_free_bytes"] == 4 * 1024**3
    assert doc["alerts"] == [{"level": "warning", "code": "ctx_full_soon", "message": "context full in 2 min"}]
    assert doc["connection"] == {"status": "connected", "reason": None}
    assert doc["efficiency"] == pytest.approx(0.6917, abs=1e-3)


def test_snapshot_to_json_empty_and_nonfinite() -> None:
    doc = snapshot_to_json(_snapshot(decode_tok_s=float("nan"), ceiling_tok_s=float("inf")))
    json.dumps(doc, allow_nan=False)
    assert doc["decode_tok_s"] is None and doc["ceiling_tok_s"] is None
    assert doc["model"]["name"] is None and doc["slots"] == [] and doc["gpus"] == []
    assert TOP_LEVEL <= set(doc)
    assert "—" in format_text(doc)


def test_snapshot_to_json_carries_the_regime_the_fit_and_an_uncertain_ceiling() -> None:
    fc = Forecast(fit_points=14, fit_form="bandwidth+attention", fit_efficiency=0.81, fit_overhead_s=0.002,
                  fit_attention_factor=1.5,
                  regime=Regime(2, "reload", "reloaded; n_ctx 32,768 → 131,072", 40.0, 1.7e9 + 40, 33426),
                  milestones=(Milestone(65536, 4.9, 3.1, 7.5, 7.5),))
    doc = snapshot_to_json(_snapshot(decode_tok_s=11.0, ceiling_tok_s=10.9, forecast=fc,
                                     ceiling_suspect=CeilingSuspect("placement", "measured 11.0 tok/s exceeds …")))
    json.dumps(doc, allow_nan=False)
    assert doc["efficiency"] is None and doc["ceiling_uncertain"] is True
    assert doc["ceiling_suspect"] == {"input": "placement", "message": "measured 11.0 tok/s exceeds …"}
    assert doc["forecast"]["regime"] == {"index": 2, "cause": "reload", "description": "reloaded; n_ctx 32,768 → "
                                         "131,072", "since_t_wall": 1.7e9 + 40, "since_context_tokens": 33426}
    assert doc["forecast"]["fit"] == {"form": "bandwidth+attention", "points": 14, "efficiency": 0.81,
                                      "overhead_s": 0.002, "attention_factor": 1.5, "reason": None,
                                      "valid_to_tokens": None}
    text = format_text(doc)
    assert "ceiling uncertain (where kvmon thinks the model lives is likely wrong)" in text
    assert ("bytes read per token at a fitted bandwidth, plus attention work growing with depth, on 14 measured points "
            "since reloaded") in text
    empty = snapshot_to_json(_snapshot())
    assert empty["ceiling_uncertain"] is False and empty["ceiling_suspect"] is None
    assert empty["forecast"]["regime"]["index"] is None and empty["forecast"]["fit"]["form"] is None
