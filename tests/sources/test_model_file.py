"""Model files: a header read once per file version, and once per start of the server that loaded it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from small_gguf import write_small_gguf

from kvmon.sources import model_file
from kvmon.sources.model_file import ModelFiles


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths statted, in order."""
    seen: list[str] = []
    real = model_file.regular_stat
    monkeypatch.setattr(model_file, "regular_stat", lambda p: seen.append(p) or real(p))
    return seen


def test_without_a_start_every_look_stats_and_a_new_version_is_read(tmp_path: Path, stats: list[str]) -> None:
    path = tmp_path / "m.gguf"
    write_small_gguf(path)
    files = ModelFiles()
    first = files.header(str(path))
    assert first[0] is not None and files.header(str(path))[0] is first[0] and len(stats) == 2
    os.utime(path, ns=(10**18, 10**18))
    again = files.header(str(path))
    assert again[2] != first[2] and again[0] is not first[0]  # another version: read anew


def test_one_start_stats_once_another_start_looks_again(tmp_path: Path, stats: list[str]) -> None:
    path = tmp_path / "m.gguf"
    write_small_gguf(path)
    files = ModelFiles()
    first = files.header(str(path), start=(123, 1.0))
    os.utime(path, ns=(10**18, 10**18))  # written anew while that server runs: not what it serves
    assert files.header(str(path), start=(123, 1.0)) is first and stats == [str(path)]
    later = files.header(str(path), start=(456, 2.0))
    assert later[2] != first[2] and len(stats) == 2


def test_a_file_not_there_yet_is_looked_for_again_at_the_same_start(tmp_path: Path, stats: list[str]) -> None:
    path = tmp_path / "m.gguf"
    files = ModelFiles()
    header, why, key = files.header(str(path), start=1)
    assert header is None and key is None and why is not None and "not readable here" in why
    write_small_gguf(path)  # a slow mount came up
    header, why, key = files.header(str(path), start=1)
    assert header is not None and why is None and key is not None and len(stats) == 2


def test_the_starts_remembered_are_bounded(tmp_path: Path, stats: list[str]) -> None:
    path = tmp_path / "m.gguf"
    write_small_gguf(path)
    files = ModelFiles(max_files=3)
    for start in range(10):
        files.header(str(path), start=start)
    assert len(files._by_start) == 3 and len(stats) == 10
    files.header(str(path), start=9)  # the newest stays
    assert len(stats) == 10


def test_the_server_process_start_and_folder_are_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative ``-m`` is resolved against the server's folder: read from /proc once per process, not per poll;
    the process's (pid, start time) names this start of the server."""
    import socket

    import psutil

    from kvmon.sources import procs
    from kvmon.sources.llamacpp.process import LlamaServerProcess

    looked: list[int] = []
    real = procs.process_cwd
    monkeypatch.setattr(procs, "process_cwd", lambda p: looked.append(p.pid) or real(p))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        proc = LlamaServerProcess("127.0.0.1", s.getsockname()[1])
        assert proc.cwd() == os.getcwd() and proc.cwd() == os.getcwd() and looked == [os.getpid()]
        assert proc.identity() == (os.getpid(), psutil.Process().create_time())
    assert LlamaServerProcess("192.0.2.1", 8080).identity() is None  # not on this machine
