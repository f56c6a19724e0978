"""``kvmon once --json`` against the captures over real HTTP: schema, numbers, exit codes, no credentials."""

from __future__ import annotations

import argparse
import io
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers_http import LLAMA_FIXTURES, FixtureServer, serve_llama_state
from test_gguf_meta import write_small_gguf

from kvmon.cli.once import format_text, run
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

ROOT = Path(__file__).resolve().parents[1]
KEY = "sekrit-key-9876"
TOP_LEVEL = {"kvmon_version", "backend", "server_version", "url", "model", "slots", "decode_tok_s", "prefill_tok_s",
             "ceiling_tok_s", "efficiency", "gpus", "alerts", "provenance"}
MODEL_KEYS = {"name", "arch", "n_params", "weight_bytes", "n_ctx", "n_layers", "kv_type_k", "kv_type_v",
              "kv_bytes_per_token", "kv_allocated_bytes"}
GPU_KEYS = {"index", "name", "vram_total_bytes", "vram_used_bytes", "vram_free_bytes", "peak_bandwidth_bytes_per_s",
            "bandwidth_source"}


def _args(url: str | None, **kw: Any) -> argparse.Namespace:
    base = {"url": url, "api_key": None, "log": None, "timeout": 1.0, "json": True, "interval": 0.3}
    base.update(kw)
    return argparse.Namespace(**base)


def _run(args: argparse.Namespace) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = run(args, out, err)
    return rc, out.getvalue(), err.getvalue()


def _serve_generating(server: FixtureServer, gguf_dir: Path) -> None:
    """The main run's generating → generating-later captures, with the model's GGUF readable locally."""
    model = gguf_dir / "tiny-llama-e256-l4.gguf"
    write_small_gguf(model)  # same shape as the capture's model: 4 layers, 2 KV heads × 64, n_embd 256
    serve_llama_state(server, "generating")
    props = json.loads((LLAMA_FIXTURES / "props.generating.json").read_text())
    props["model_path"] = str(model)
    server.set("/props", 200, json.dumps(props))
    server.sequence_captures("/slots", ["slots.generating.json", "slots.generating-later.json"])


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_once_json_against_captures(fixture_server: FixtureServer, tmp_path: Path) -> None:
    _serve_generating(fixture_server, tmp_path)
    rc, out, err = _run(_args(fixture_server.url))
    assert rc == 0, err
    doc = json.loads(out)
    assert TOP_LEVEL <= set(doc)
    assert MODEL_KEYS <= set(doc["model"])
    assert doc["backend"] == "llama-server" and doc["server_version"] == "b11549-unknown"
    assert doc["url"] == fixture_server.url
    m = doc["model"]
    assert (m["name"], m["arch"], m["n_params"], m["weight_bytes"]) == (
        "tiny-llama-e256-l4.gguf", "llama", 2666752, 5338112)
    assert (m["n_ctx"], m["n_layers"], m["kv_type_k"], m["kv_type_v"]) == (16384, 4, "f16", "f16")
    # 4 layers × 2 KV heads × 64 × (K+V) × 2 bytes; the server's log said "size = 32.00 MiB" at n_ctx 16384
    assert m["kv_bytes_per_token"] == 2048
    assert m["kv_allocated_bytes"] == 32 * 1024 * 1024
    assert doc["slots"] == [{"id": 0, "n_ctx": 16384, "context_tokens": 1663, "processing": True,
                             "decode_tok_s": doc["slots"][0]["decode_tok_s"]}]
    # 598 tokens decoded between the two polls, which were at least the interval apart
    assert 598 / 3.0 < doc["decode_tok_s"] <= 598 / 0.3
    assert doc["decode_rate_source"] == "slots"
    assert doc["prefill_tok_s"] is None
    assert doc["provenance"]["decode_tok_s"] == "measured"
    assert doc["provenance"]["kv_bytes_per_token"] == "computed"
    for g in doc["gpus"]:
        assert GPU_KEYS <= set(g)
    assert doc["gpus"] or doc["gpus_unavailable_reason"]


def test_once_text_output(fixture_server: FixtureServer, tmp_path: Path) -> None:
    _serve_generating(fixture_server, tmp_path)
    rc, out, _ = _run(_args(fixture_server.url, json=False))
    assert rc == 0
    assert "llama-server" in out and "tiny-llama-e256-l4.gguf" in out and "tok/s" in out


def test_idle_gives_null_rates(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    rc, out, _ = _run(_args(fixture_server.url, interval=0.0))
    assert rc == 0
    doc = json.loads(out)
    assert doc["decode_tok_s"] is None and doc["prefill_tok_s"] is None  # no data, not 0


def test_unreachable_exits_2() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    rc, out, err = _run(_args(url, json=False))
    assert rc == 2 and out == ""
    assert err.startswith(f"kvmon: Cannot connect to {url}") and err.count("\n") == 1
    assert "Is the server running? kvmon once --list finds the servers on this machine" in err
    # with --json the document says it too: the headline's verdict, the same sentence, critical
    rc, out, err_json = _run(_args(url))
    doc = json.loads(out)
    assert rc == 2 and err_json == err and doc["connection"]["status"] == "unreachable"
    assert doc["verdict"]["level"] == "critical" and doc["verdict"]["cause"] == "connection"
    assert f"kvmon: {doc['verdict']['sentence']}\n" == err and doc["decode_tok_s"] is None


def test_bad_url_exits_2() -> None:
    rc, out, err = _run(_args("ftp://nowhere", json=False))
    assert rc == 2 and out == "" and "scheme" in err and err.count("\n") == 1


def test_loading_exits_2(fixture_server: FixtureServer) -> None:
    for p in ("/health", "/props", "/slots", "/metrics", "/v1/models"):
        fixture_server.set_capture(p, "health.loading.json")
    rc, _, err = _run(_args(fixture_server.url))
    assert rc == 2 and "loading" in err


def test_api_key_rejected_exits_2_and_never_printed(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    for path, cap in (("/props", "api-key/props.apikey.no-key.json"), ("/slots", "api-key/slots.apikey.no-key.json"),
                      ("/metrics", "api-key/metrics.apikey.no-key.txt"),
                      ("/v1/models", "api-key/v1-models.apikey.wrong-key.json")):
        fixture_server.set_capture(path, cap)
    rc, out, err = _run(_args(fixture_server.url, api_key=KEY))
    assert rc == 2 and "API key rejected" in err
    assert KEY not in out and KEY not in err


def test_api_key_accepted_never_in_json(fixture_server: FixtureServer, tmp_path: Path) -> None:
    _serve_generating(fixture_server, tmp_path)
    rc, out, err = _run(_args(fixture_server.url, api_key=KEY))
    assert rc == 0
    assert any(h.get("Authorization") == f"Bearer {KEY}" for _, _, h in fixture_server.requests)
    assert KEY not in out and KEY not in err


def test_cli_subprocess_json(fixture_server: FixtureServer, tmp_path: Path) -> None:
    _serve_generating(fixture_server, tmp_path)
    env_cmd = [sys.executable, "-m", "kvmon", "once", fixture_server.url, "--json", "--interval", "0.3",
               "--api-key", KEY]
    p = subprocess.run(env_cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["model"]["kv_allocated_bytes"] == 32 * 1024 * 1024
    assert KEY not in p.stdout and KEY not in p.stderr


# ---- snapshot_to_json on hand-made snapshots ------------------------------------------------------

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
