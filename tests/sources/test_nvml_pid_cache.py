"""The server's process tree is read once per few seconds, not on every poll of the GPU and host sources."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import pytest

from kvmon.physics.gpus import GIB
from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
from kvmon.sources import procs as procs_mod
from kvmon.sources.host import HostSource
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.procs import PID_TREE_MAX_AGE_S, PidTreeCache


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[frozenset[int]]:
    """Every real process-tree scan, by the pids asked about."""
    seen: list[frozenset[int]] = []
    real = procs_mod.expand_server_pids

    def counting(pids: Collection[int]) -> frozenset[int]:
        seen.append(frozenset(pids))
        return real(pids)

    monkeypatch.setattr(procs_mod, "expand_server_pids", counting)
    return seen


def test_cached_until_the_pids_change_or_the_answer_ages(scans: list[frozenset[int]]) -> None:
    now = [100.0]
    cache = PidTreeCache(clock=lambda: now[0])
    me = os.getpid()
    assert me in cache.expand([me])
    cache.expand((me,))
    now[0] += PID_TREE_MAX_AGE_S - 0.5
    cache.expand([me])
    assert len(scans) == 1
    now[0] += 1.0  # older than the limit: read again
    cache.expand([me])
    assert len(scans) == 2
    cache.expand([me, 1])  # other pids: read again at once
    assert scans[-1] == {me, 1}
    now[0] -= 50.0  # a clock that went backwards never keeps a stale answer
    cache.expand([me, 1])
    assert len(scans) == 4
    assert cache.expand([]) == frozenset()


def test_a_real_child_is_found() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in PidTreeCache().expand([os.getpid()])
    finally:
        child.kill()
        child.wait(timeout=10)


def test_gpu_and_host_sources_scan_once_for_many_polls(scans: list[frozenset[int]], tmp_path: Path) -> None:
    me = os.getpid()
    gpu_src = NvmlSource(FakeNvml([FakeGpu(memory_used_bytes=3 * GIB, processes=[(me, 2 * GIB)])]))
    host_src = HostSource(cache_dir=tmp_path, chip_name=None)
    for _ in range(5):
        g = gpu_src.poll([me])
        h = host_src.poll([me])
    assert g.gpus[0].server_used_bytes == 2 * GIB
    assert h.server_rss_bytes is not None and h.server_rss_bytes > 0
    assert len(scans) == 2  # one per source, not one per poll
