"""The test helpers themselves: the tiny GGUFs are deterministic and small, and the server leaves nothing behind."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest
from real_llama_server import RealLlamaServer, ServerFailed
from tiny_gguf import FAMILIES, make_gguf, write_family

from kvmon.physics.shape import ModelShape
from kvmon.sources.gguf_meta import read_gguf_metadata


def test_the_same_family_gives_the_same_bytes(tmp_path: Path) -> None:
    a = write_family(FAMILIES["gemma3"], tmp_path / "a.gguf")
    b = write_family(FAMILIES["gemma3"], tmp_path / "b.gguf")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_is_small_and_kvmon_reads_its_shape(name: str, tiny_gguf_dir: Path) -> None:
    path = make_gguf(name, tiny_gguf_dir)
    assert path.stat().st_size < 5 * 1024 * 1024
    shape = ModelShape.from_gguf(read_gguf_metadata(path))
    assert shape.arch == FAMILIES[name].arch and not shape.partial, shape.notes


def test_the_server_stops_and_leaves_no_process(llama_server: Callable[..., RealLlamaServer]) -> None:
    server = llama_server("llama", ["-c", "512", "-np", "1"])
    pid = server.proc.pid if server.proc else -1
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert "llama_kv_cache: size" in server.log_path.read_text()
    server.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health", timeout=2)


def test_a_model_the_server_cannot_load_is_a_clear_failure(llama_server: Callable[..., RealLlamaServer],
                                                            tmp_path: Path, tiny_gguf_dir: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(make_gguf("llama", tiny_gguf_dir).read_bytes()[:4096])  # the header, no tensors
    server = RealLlamaServer(broken, ["-c", "512"], tmp_path / "broken.log")
    with pytest.raises(ServerFailed, match="FAILED"):
        server.start()
    assert server.proc is None
