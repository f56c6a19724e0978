"""Hostile files named by a server or the user: a FIFO as the model, a GGUF nested without end, log lines with
numbers no type holds. Each makes its own facts unknown (with a reason) and leaves the reading and the log reader
going; none may block.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers_http import LLAMA_FIXTURES, FixtureServer, serve_llama_state
from small_gguf import write_small_gguf

from kvmon.cli.once import run
from kvmon.core.readings import SourceError
from kvmon.sources.llamacpp.log import LogFollower
from kvmon.sources.llamacpp.source import LlamaServerSource

HUGE = "9" * 400


def _args(url: str, **kw: Any) -> argparse.Namespace:
    base = {"url": url, "api_key": None, "log": None, "timeout": 1.0, "json": True, "interval": 0.3}
    base.update(kw)
    return argparse.Namespace(**base)


def _once(args: argparse.Namespace) -> tuple[int, dict[str, Any] | None, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = run(args, out, err)
    return rc, (json.loads(out.getvalue()) if rc == 0 else None), err.getvalue()


def _llama_with_model(model_path: str) -> FixtureServer:
    server = FixtureServer()
    serve_llama_state(server, "generating")
    props = json.loads((LLAMA_FIXTURES / "props.generating.json").read_text())
    props["model_path"] = model_path
    server.set("/props", 200, json.dumps(props))
    return server


def _gguf_string(s: str) -> bytes:
    data = s.encode()
    return struct.pack("<Q", len(data)) + data


def write_nested_gguf(path: Path, depth: int) -> None:
    """A llama-looking GGUF header with one key whose value is an array of an array of … ``depth`` levels deep."""
    kvs = [
        _gguf_string("general.architecture") + struct.pack("<I", 8) + _gguf_string("llama"),
        _gguf_string("llama.block_count") + struct.pack("<II", 4, 4),
        _gguf_string("deep") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * (depth - 1)
        + struct.pack("<IQI", 4, 1, 7),
    ]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))


# ------------------------------------------------------------------------------------------------ 2: FIFO


def _run_bounded(target: Any, seconds: float) -> list[Any]:
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(target()), daemon=True)
    t.start()
    t.join(seconds)
    return result


def _unblock(fifo: Path) -> None:
    """Open the FIFO's write end, so a reader stuck in open() (the old behaviour) gets EOF and ends."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    os.close(fd)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_as_the_model_file_does_not_block_the_poll(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    server = _llama_with_model(str(fifo))
    try:
        result = _run_bounded(lambda: _once(_args(server.url)), 15)
    finally:
        _unblock(fifo)
        server.stop()
    assert result, "once blocked on a FIFO named as the model file"
    rc, doc, _ = result[0]
    assert rc == 0 and doc is not None
    assert doc["context_tokens"] == 1066  # the rest of the reading is there
    reasons = " ".join(doc.get("reasons", {}).values()) if isinstance(doc.get("reasons"), dict) else ""
    assert "not a regular file" in reasons


def test_a_remote_servers_model_path_is_never_opened_here(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    write_small_gguf(model)
    server = _llama_with_model(str(model))
    src = LlamaServerSource(server.url, timeout_s=1.0, local_files=False)
    try:
        reading = src.poll()
    finally:
        src.close()
        server.stop()
    assert reading.model is not None and reading.model.shape is None
    assert "another machine" in reading.reasons["model.shape"]


# ------------------------------------------------------------------------------------------------ 5: nesting


def test_a_deeply_nested_gguf_makes_the_shape_unknown_not_the_poll(tmp_path: Path) -> None:
    model = tmp_path / "deep.gguf"
    write_nested_gguf(model, 5000)
    server = _llama_with_model(str(model))
    try:
        rc, doc, err = _once(_args(server.url))
    finally:
        server.stop()
    assert rc == 0, err
    assert doc is not None and doc["context_tokens"] == 1066 and doc["model"]["name"] == "tiny-llama-e256-l4.gguf"
    assert doc["model"]["kv_bytes_per_token"] is None
    assert "nested" in doc["reasons"]["model.shape"]


# ------------------------------------------------------------------------------------------------ 6: log numbers


LOG_LINES = [
    f"llama_kv_cache: size = {HUGE} MiB ( 16384 cells,   4 layers,  1/1 seqs), K (f16): {HUGE} MiB, V (f16): 8 MiB",
    f"load_tensors:        CUDA0 model buffer size = {HUGE}.5 MiB",
    f"llama_context: n_ctx         = {HUGE}",
    "llama_context: n_ubatch      = 512",
    "llama_kv_cache:      CUDA0 KV buffer size =    32.00 MiB",
]


def test_huge_numbers_in_a_log_file_leave_once_working(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(LOG_LINES) + "\n", encoding="utf-8")
    server = FixtureServer()
    serve_llama_state(server, "generating")
    try:
        rc, doc, err = _once(_args(server.url, log=str(log)))
    finally:
        server.stop()
    assert rc == 0, err
    assert doc is not None and doc["context_tokens"] == 1066


def test_huge_numbers_on_a_piped_log_do_not_stop_the_reader() -> None:
    stream = io.StringIO("\n".join(LOG_LINES) + "\n")
    follower = LogFollower("-", stream=stream)
    assert follower._thread is not None
    follower._thread.join(5)
    config = follower.poll()
    assert config.n_ubatch == 512  # lines after the bad ones were read
    assert config.kv_buffer_bytes_by_device == {"CUDA0": 32 * 1024 * 1024}
    assert config.n_ctx_total is None and config.kv_bytes_allocated is None  # the bad values are unknown
    assert follower.error is None or "thread" not in follower.error


def test_undecodable_bytes_on_a_piped_log_are_replaced_not_fatal() -> None:
    raw = io.BytesIO(b"llama_context: n_ctx = 4096 \xff\xfe\n" + b"llama_context: n_ubatch      = 256\n")
    stream = io.TextIOWrapper(raw, encoding="utf-8")  # strict, like sys.stdin in a UTF-8 locale
    follower = LogFollower("-", stream=stream)
    assert follower._thread is not None
    follower._thread.join(5)
    config = follower.poll()
    assert config.n_ubatch == 256 and follower.error is None


def test_the_model_file_is_read_once_per_start_of_the_server(tmp_path: Path, monkeypatch) -> None:
    """Polls of a running server describe the same model and stat its file no more (it loaded the file when it
    started: one written anew in its place is not what it serves); after a failed poll (the server restarted,
    reloaded or went away) the file is looked at again, and a new version of it is read."""
    import gguf

    from kvmon.sources import model_file

    stats: list[str] = []
    real_stat = model_file.regular_stat
    monkeypatch.setattr(model_file, "regular_stat", lambda p: stats.append(p) or real_stat(p))
    model = tmp_path / "tiny.gguf"
    write_small_gguf(model)
    server = _llama_with_model(str(model))
    src = LlamaServerSource(server.url, timeout_s=1.0, local_files=True)
    try:
        first, second = src.poll(), src.poll()
        assert first.model is not None and first.model == second.model
        assert first.model.shape is not None and first.model.shape.n_layers == 4
        assert stats == [str(model)]  # the first poll's stat only
        w = gguf.GGUFWriter(str(model), "llama")  # another model in the same place: six layers
        for add, value in ((w.add_block_count, 6), (w.add_context_length, 8192), (w.add_embedding_length, 256),
                           (w.add_feed_forward_length, 512), (w.add_head_count, 4), (w.add_head_count_kv, 4)):
            add(value)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.utime(model, ns=(10**18, 10**18))
        third = src.poll()  # the same server, still serving the four layers it loaded
        assert third.model == first.model and len(stats) == 1
        loading = '{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
        for path in ("/health", "/props", "/slots", "/metrics"):  # a real llama-server's answer while it loads
            server.set(path, 503, loading)
        with pytest.raises(SourceError):
            src.poll()  # loading: the server is starting again
        serve_llama_state(server, "generating")
        props = json.loads((LLAMA_FIXTURES / "props.generating.json").read_text())
        props["model_path"] = str(model)
        server.set("/props", 200, json.dumps(props))
        fourth = src.poll()
    finally:
        src.close()
        server.stop()
    assert len(stats) == 2
    assert fourth.model is not None and fourth.model != first.model
    assert fourth.model.shape is not None and fourth.model.shape.n_layers == 6
