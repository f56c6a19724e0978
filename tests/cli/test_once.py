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

from helpers_http import LLAMA_FIXTURES, FixtureServer, serve_llama_state
from repo_paths import ROOT
from small_gguf import write_small_gguf

from kvmon.cli.once import run

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
