"""Ollama from the outside in: backend detection, a Monitor snapshot, and ``kvmon once --json`` on a fake Ollama."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from ollama_fixture import OllamaFixture
from repo_paths import ROOT

from kvmon.sources.ollama.source import OllamaSource


@pytest.fixture
def ollama() -> Iterator[OllamaFixture]:
    server = OllamaFixture()
    try:
        yield server
    finally:
        server.stop()


def test_detected_as_ollama_and_opened_as_ollama_source(ollama: OllamaFixture) -> None:
    from kvmon.sources.detect import detect_backend, open_source

    assert detect_backend(ollama.url, None, 2.0) == "ollama"
    src = open_source(ollama.url, timeout_s=2.0)
    try:
        assert isinstance(src, OllamaSource)
        assert src.poll().model is not None
    finally:
        src.close()


def test_monitor_snapshot_from_ollama(ollama: OllamaFixture) -> None:
    from kvmon.app.monitor import Monitor

    src = OllamaSource(ollama.url, timeout_s=2.0, find_child=False, proxy_url="http://127.0.0.1:9")
    mon = Monitor(src)
    try:
        snap = mon.poll()
    finally:
        mon.close()
    assert snap.backend == "ollama"
    assert snap.model.name == "llama3.1:8b" and snap.model.arch == "llama"
    assert snap.model.n_ctx == 8192 and snap.model.n_layers == 32
    assert snap.model.kv_bytes_per_token == 131072  # 32 layers × 8 KV heads × 128 × (K+V) × f16
    assert snap.decode_tok_s is None  # no live source: unknown, never 0


def test_once_json_against_a_fake_ollama(ollama: OllamaFixture) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "kvmon", "once", ollama.url, "--json", "--interval", "0.2", "--timeout", "2"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["backend"] == "ollama" and doc["server_version"] == "0.33.0"
    assert doc["model"]["name"] == "llama3.1:8b" and doc["model"]["n_ctx"] == 8192
    assert doc["decode_tok_s"] is None


def test_once_json_against_the_simulated_ollama_with_its_log() -> None:
    """``kvmon sim --scenario ollama-partial`` then ``kvmon once URL --log <its server.log>``: the weights (its
    /api/show tensors), where they live (the log's buffers: the GPU and host RAM) and the ceiling, under which the
    measured speed sits. The host's bandwidth is the simulated machine's (this one's RAM is not the simulated)."""
    from kvmon.sim.server import SimServer

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with SimServer("ollama-partial", ollama_child=True, start_at_s=4.0) as sim:  # in its first reply's decode
        out = subprocess.run(
            [sys.executable, "-m", "kvmon", "once", sim.url, "--json", "--log", sim.log_path, "--bandwidth",
             "host=64", "--interval", "1.5", "--timeout", "3"],
            capture_output=True, text=True, timeout=90, env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    m = doc["model"]
    assert m["weight_bytes"] == pytest.approx(16.5e9, rel=0.005) and doc["provenance"]["weight_bytes"] == "measured"
    assert "tensor list" in doc["reasons"]["weight_bytes"]
    (g,) = doc["gpus"]
    assert g["name"] == "NVIDIA GeForce RTX 4060 Ti" and g["peak_bandwidth_bytes_per_s"] == 288e9
    assert g["weights_bytes"] and doc["host"]["weights_in_host_bytes"] > 2e9
    assert doc["ceiling_tok_s"] and 0 < doc["efficiency"] <= 1.0
    assert "weights_in_host" in {a["code"] for a in doc["alerts"]}
    assert all(x["tok_s"] <= x["ceiling_tok_s"] for x in doc["forecast"]["milestones"])
