"""Shared fixtures: a canned-response HTTP server on 127.0.0.1 (see ``tests/helpers_http.py``), real llama.cpp
servers on tiny GGUFs (see ``tests/real_llama_server.py`` and ``tests/tiny_gguf.py``), a keychain in memory
for every test (``tests/memory_keyring.py``), and settings and cache folders of the test run."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_http import FixtureServer
from memory_keyring import MemoryKeyring, using_keyring
from real_llama_server import RealLlamaServer
from tiny_gguf import make_gguf

from kvmon.sim import permit

permit.allow("tests")  # the tests run the real device code on the simulator's doubles


@pytest.fixture(scope="session", autouse=True)
def _private_user_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """kvmon's settings and caches (the host bandwidth measurement among them) go to a folder of this test run,
    never the user's: platformdirs follows the XDG variables, and child processes inherit them."""
    import os

    base = tmp_path_factory.mktemp("user-dirs")
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    os.environ["XDG_CONFIG_HOME"], os.environ["XDG_CACHE_HOME"] = str(base / "config"), str(base / "cache")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def _private_atlas(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's atlas of measured curves (kvmon's data folder) is its own: no test sees another's curves, and
    none touches the user's."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))


@pytest.fixture(autouse=True)
def _keychain_in_memory() -> Iterator[None]:
    """No test touches this machine's real keychain: each one gets an empty keychain in memory."""
    with using_keyring(MemoryKeyring()):
        yield


@pytest.fixture
def fixture_server() -> Iterator[FixtureServer]:
    """A running canned-response server: ``.url``, ``.set(path, status, body, headers)``, ``.hang(path, s)``."""
    server = FixtureServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fixture_server_factory() -> Iterator[Callable[[], FixtureServer]]:
    """Make as many canned-response servers as a test needs; all are stopped afterwards."""
    servers: list[FixtureServer] = []

    def make() -> FixtureServer:
        s = FixtureServer()
        servers.append(s)
        return s

    try:
        yield make
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="session")
def tiny_gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tiny test GGUFs are written, once per session (works without pytest's cache provider)."""
    return tmp_path_factory.mktemp("tiny-gguf")


@pytest.fixture
def llama_server(tiny_gguf_dir: Path, tmp_path: Path) -> Iterator[Callable[..., RealLlamaServer]]:
    """Start real llama.cpp servers: ``llama_server("gemma3", ["-c", "4096"])``; all are stopped afterwards."""
    servers: list[RealLlamaServer] = []

    def start(family: str, args: list[str], **kw: int) -> RealLlamaServer:
        server = RealLlamaServer(make_gguf(family, tiny_gguf_dir), args, tmp_path / f"server-{len(servers)}.log", **kw)
        servers.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
