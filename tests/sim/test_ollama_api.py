"""The simulated Ollama over real HTTP: bodies shaped like the Ollama fixtures, streaming chat with final stats."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from repo_paths import FIXTURES

from kvmon.sim.server import SimServer

OLLAMA_FIXTURES = FIXTURES / "ollama"


def fixture(name: str) -> object:
    return json.loads((OLLAMA_FIXTURES / name).read_text(encoding="utf-8"))


def shape(obj: object) -> object:
    """Keys and value types of a JSON value (ints and floats both "number")."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape(obj[0])] if obj else []
    if isinstance(obj, bool):
        return "bool"
    return "number" if isinstance(obj, (int, float)) else type(obj).__name__


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    s = SimServer("ollama-partial", speed=50.0, autoplay=False)
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def client(sim: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=10.0) as c:
        yield c


def test_root_version_and_unknown_path(client: httpx.Client) -> None:
    assert client.get("/").text == "Ollama is running"
    assert client.get("/api/version").json() == fixture("version.json")
    r = client.get("/health")  # not an Ollama route: lets backend detection tell the two apart
    assert r.status_code == 404 and "server" not in r.headers


def test_ps_is_a_partial_offload_shaped_like_the_fixture(client: httpx.Client) -> None:
    body = client.get("/api/ps").json()
    want = fixture("ps.partial-offload.json")
    assert shape(body) == shape(want)
    m = body["models"][0]
    assert list(m) == list(want["models"][0])  # type: ignore[index]
    assert m["size_vram"] < m["size"] and m["context_length"] == 32768
    assert m["expires_at"].endswith("Z") and len(m["expires_at"].split(".")[1]) == 10  # ns + Z


def test_show_non_verbose_drops_long_arrays_and_verbose_keeps_them(client: httpx.Client) -> None:
    short = client.post("/api/show", json={"model": "gemma3:27b"}).json()
    assert {"details", "model_info", "capabilities", "modified_at", "modelfile"} <= set(short)
    info = short["model_info"]
    assert info["general.architecture"] == "gemma3" and info["gemma3.block_count"] > 0
    assert all(not isinstance(v, list) or len(v) <= 5 for v in info.values())
    verbose = client.post("/api/show", json={"model": "gemma3:27b", "verbose": True}).json()
    assert set(verbose["model_info"]) == set(info)
    r = client.post("/api/show", json={"model": "nosuch"})
    assert r.status_code == 404 and shape(r.json()) == shape(fixture("error.model-not-found.json"))


def test_chat_streams_ndjson_with_final_stats_in_ns(sim: SimServer, client: httpx.Client) -> None:
    want = [json.loads(ln) for ln in (OLLAMA_FIXTURES / "chat.stream.ndjson").read_text().splitlines() if ln]
    with client.stream("POST", "/api/chat", json={"model": "gemma3:27b", "messages": [
            {"role": "user", "content": "why is the sky blue? " * 10}], "options": {"num_predict": 5}}) as r:
        assert r.headers["content-type"] == "application/x-ndjson"
        got = [json.loads(ln) for ln in r.iter_lines() if ln]
    assert len(got) == 6
    assert shape(got[0]) == shape(want[0]) and shape(got[-1]) == shape(want[-1])
    final = got[-1]
    assert final["done"] is True and final["eval_count"] == 5
    tok_s = final["eval_count"] / final["eval_duration"] * 1e9
    model = sim.engine.epoch_at(sim.clock.now()).model
    assert model is not None
    assert tok_s == pytest.approx(model.decode_tok_s(final["prompt_eval_count"]), rel=0.25)  # noise ±20 % at most


def test_generate_non_stream_and_v1_chat(client: httpx.Client) -> None:
    r = client.post("/api/generate", json={"model": "gemma3:27b", "prompt": "hi", "stream": False,
                                          "options": {"num_predict": 3}})
    assert shape(r.json()) == shape(fixture("generate.nonstream.json"))
    r = client.post("/v1/chat/completions", json={"model": "gemma3:27b", "max_tokens": 2,
                                                 "messages": [{"role": "user", "content": "hi"}]})
    assert shape(r.json()) == shape(fixture("v1-chat.nonstream.json"))
    assert r.json()["usage"]["completion_tokens"] == 2


def test_show_lists_the_model_files_tensors_as_ollama_does(sim: SimServer, client: httpx.Client) -> None:
    """Every GGUF model's /api/show has its tensors (name, type, shape innermost first), verbose or not, and a
    modelfile whose FROM is the blob; the blob is a GGUF whose directory holds the same tensors at their sizes."""
    import os

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    from kvmon.sources.gguf_meta import read_gguf_header

    body = client.post("/api/show", json={"model": "gemma3:27b"}).json()
    tensors = body["tensors"]
    assert shape(tensors[:1]) == shape(fixture("show.llama3.1-8b.json")["tensors"][:1])  # type: ignore[index]
    names = {t["name"] for t in tensors}
    assert {"token_embd.weight", "blk.61.ffn_down.weight", "output_norm.weight"} <= names
    assert "output.weight" not in names  # gemma ties its output head to the token embedding

    def size(t: dict[str, object]) -> int:
        block, bytes_ = GGML_QUANT_SIZES[GGMLQuantizationType[str(t["type"])]]
        n = 1
        for d in t["shape"]:  # type: ignore[attr-defined]
            n *= d
        return n // block * bytes_

    total = sum(size(t) for t in tensors)
    # bartowski/google_gemma-3-27b-it-GGUF Q4_K_M (text weights): 16.5 GB
    assert total == pytest.approx(16.5e9, rel=0.005)
    assert body["model_info"]["general.parameter_count"] == 27_009_346_304
    blob = body["modelfile"].split("\nFROM ", 1)[1].split("\n", 1)[0]
    assert os.path.basename(blob).startswith("sha256-") and blob == sim.model_path
    header = read_gguf_header(blob)
    assert header.tensor_count == len(tensors) and header.tensor_bytes == total
    assert os.stat(blob).st_blocks * 512 < 1 << 20  # sparse: the directory is real, the data never written


def test_server_log_holds_ollamas_lines_and_its_model_servers(sim: SimServer) -> None:
    from kvmon.sources.ollama.child import ollama_log_config

    cfg, why = ollama_log_config(sim.log_path)
    assert why is None and cfg is not None
    assert [d.description for d in cfg.devices] == ["NVIDIA GeForce RTX 4060 Ti"]
    model = sim.engine.epoch_at(0.0).model
    assert sum(cfg.model_buffer_bytes_by_device.values()) == pytest.approx(model.weight_bytes, abs=2 * 2**20)
    assert cfg.model_buffer_bytes_by_device["CPU_Mapped"] > 2e9  # the layers that did not fit
    assert cfg.flash_attn == "on" and cfg.n_parallel == 1
