"""GGUF header reading: a file written by gguf.GGUFWriter, a sparse multi-GB file, bad files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers_http import LLAMA_FIXTURES, FixtureServer, serve_llama_state
from small_gguf import write_small_gguf

from kvmon.sources.gguf_meta import GgufError, read_gguf_header, read_gguf_metadata
from kvmon.sources.llamacpp.source import LlamaServerSource


def test_small_gguf_metadata(tmp_path: Path) -> None:
    p = tmp_path / "tiny.gguf"
    write_small_gguf(p)
    h = read_gguf_header(p)
    m = h.metadata
    assert m["general.architecture"] == "llama"
    assert m["general.name"] == "tiny test model"
    assert m["llama.block_count"] == 4 and m["llama.attention.head_count_kv"] == 2
    assert m["llama.context_length"] == 32768
    assert m["llama.attention.sliding_window_pattern"] == [True, False, True, False]
    assert m["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert "tokenizer.ggml.tokens" not in m and "tokenizer.ggml.tokens" in h.skipped_keys
    assert "tokenizer.ggml.scores" in h.skipped_keys
    assert h.tensor_count == 2
    assert h.tensor_bytes == 64 * 32 * 2 + 32 * 4
    assert h.data_offset_bytes is not None and h.data_offset_bytes % 32 == 0
    assert h.file_size_bytes == os.path.getsize(p)
    assert read_gguf_metadata(p) == m


def test_short_arrays_are_kept(tmp_path: Path) -> None:
    p = tmp_path / "v.gguf"
    write_small_gguf(p, vocab=10)
    m = read_gguf_metadata(p)
    assert m["tokenizer.ggml.tokens"][:2] == ["tok0", "tok1"]


def test_sparse_multi_gb_file(tmp_path: Path) -> None:
    p = tmp_path / "big.gguf"
    write_small_gguf(p)
    with open(p, "r+b") as f:
        f.truncate(6 * 1024**3)  # sparse: 6 GiB on paper, nothing written
    h = read_gguf_header(p)  # walks the header only (see bench figures in the project notes)
    assert h.file_size_bytes == 6 * 1024**3
    assert h.metadata["llama.block_count"] == 4


@pytest.mark.parametrize(
    "content",
    [b"", b"GGUF", b"NOTAGGUF" + b"\0" * 40, b"GGUF\x03\0\0\0" + b"\xff" * 16, b"GGUF\x09\0\0\0" + b"\0" * 16],
)
def test_bad_files(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    with pytest.raises(GgufError):
        read_gguf_header(p)


def test_truncated_header(tmp_path: Path) -> None:
    p = tmp_path / "t.gguf"
    write_small_gguf(p, vocab=10)
    data = p.read_bytes()
    for cut in (30, 100, 400):
        q = tmp_path / f"t{cut}.gguf"
        q.write_bytes(data[:cut])
        with pytest.raises(GgufError):
            read_gguf_header(q)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        read_gguf_header(tmp_path / "nope.gguf")


def test_source_reads_shape_from_local_gguf(tmp_path: Path, fixture_server: FixtureServer) -> None:
    p = tmp_path / "tiny.gguf"
    write_small_gguf(p)
    serve_llama_state(fixture_server, "idle")
    props = json.loads((LLAMA_FIXTURES / "props.idle.json").read_text())
    props["model_path"] = str(p)
    fixture_server.set("/props", 200, json.dumps(props))
    r = LlamaServerSource(fixture_server.url, inspect_local_process=False).poll()
    assert r.model is not None
    assert r.model.arch == "llama"
    assert r.model.shape_source == "gguf"
    assert r.model.shape is not None and r.model.shape.n_layers == 4
    assert "model.shape" not in r.reasons


def test_source_bad_gguf_gives_reason(tmp_path: Path, fixture_server: FixtureServer) -> None:
    p = tmp_path / "broken.gguf"
    p.write_bytes(b"GGUF\x03\0\0\0garbage")
    serve_llama_state(fixture_server, "idle")
    props = json.loads((LLAMA_FIXTURES / "props.idle.json").read_text())
    props["model_path"] = str(p)
    fixture_server.set("/props", 200, json.dumps(props))
    r = LlamaServerSource(fixture_server.url, inspect_local_process=False).poll()
    assert r.model is not None and r.model.shape is None
    assert "unreadable" in r.reasons["model.shape"]
    assert r.model.n_params == 2666752  # /v1/models meta still used


def test_user_metadata_override(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    meta = {"general.architecture": "llama", "llama.block_count": 4, "llama.embedding_length": 256,
            "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2, "llama.context_length": 32768}
    r = LlamaServerSource(fixture_server.url, inspect_local_process=False, model_metadata_override=meta).poll()
    assert r.model is not None and r.model.shape_source == "user" and r.model.shape.n_layers == 4
