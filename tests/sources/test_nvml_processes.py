"""The model server's share of VRAM, attributed against real processes (a parent with a child, a stranger)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from kvmon.physics.gpus import GIB
from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.procs import expand_server_pids

# A "server" that starts one child (as Ollama starts llama-server), prints the child's pid, then waits.
_PARENT = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
    "child.kill()\n"
)


@pytest.fixture
def processes() -> Iterator[tuple[int, int, int]]:
    """(server parent pid, its child pid, an unrelated sleeper's pid); all ended afterwards."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        yield parent.pid, child_pid, stranger.pid
    finally:
        for proc in (parent, stranger):
            try:
                for c in psutil.Process(proc.pid).children(recursive=True):
                    c.kill()
            except psutil.Error:
                pass
            proc.kill()
            proc.wait(timeout=10)
        if parent.stdout is not None:
            parent.stdout.close()
        if parent.stdin is not None:
            parent.stdin.close()


def _fake(parent: int, child: int, stranger: int) -> FakeNvml:
    return FakeNvml([
        FakeGpu(memory_used_bytes=7 * GIB, processes=[(parent, 1 * GIB), (child, 2 * GIB), (stranger, 4 * GIB)]),
        FakeGpu(name="NVIDIA GeForce RTX 3090", mem_clock_max_mhz=9751, memory_used_bytes=5 * GIB,
                processes=[(child, 5 * GIB)]),
    ])


def test_children_are_found_with_psutil(processes: tuple[int, int, int]) -> None:
    parent, child, stranger = processes
    assert expand_server_pids([parent]) == {parent, child}
    assert expand_server_pids([]) == frozenset()
    assert expand_server_pids([stranger, 2**22 + 12345]) == {stranger, 2**22 + 12345}  # a gone pid stays as given


def test_server_share_counts_the_parent_and_its_child(processes: tuple[int, int, int]) -> None:
    parent, child, stranger = processes
    g0, g1 = NvmlSource(_fake(parent, child, stranger)).poll(server_pids=(parent,)).gpus
    assert g0.server_used_bytes == 3 * GIB and g0.other_processes_used_bytes == 4 * GIB
    assert {p.pid for p in g0.processes or () if p.is_server} == {parent, child}
    assert g1.server_used_bytes == 5 * GIB and g1.other_processes_used_bytes == 0


def test_explicit_parent_and_child_without_expansion(processes: tuple[int, int, int]) -> None:
    parent, child, stranger = processes
    children = [c.pid for c in psutil.Process(parent).children(recursive=True)]
    assert children == [child]
    src = NvmlSource(_fake(parent, child, stranger), include_child_processes=False)
    assert src.poll(server_pids=(parent,)).gpus[0].server_used_bytes == 1 * GIB
    g0 = src.poll(server_pids=(parent, *children)).gpus[0]
    assert g0.server_used_bytes == 3 * GIB and g0.other_processes_used_bytes == 4 * GIB


def test_server_elsewhere_holds_a_measured_zero(processes: tuple[int, int, int]) -> None:
    parent, child, stranger = processes
    g0 = NvmlSource(_fake(parent, child, stranger)).poll(server_pids=(stranger,)).gpus[0]
    assert g0.server_used_bytes == 4 * GIB and g0.other_processes_used_bytes == 3 * GIB
    g1 = NvmlSource(_fake(parent, child, stranger)).poll(server_pids=(stranger,)).gpus[1]
    assert g1.server_used_bytes == 0 and g1.other_processes_used_bytes == 5 * GIB


def test_unknown_server_leaves_the_split_unknown(processes: tuple[int, int, int]) -> None:
    g0 = NvmlSource(_fake(*processes)).poll().gpus[0]
    assert g0.processes is not None and len(g0.processes) == 3
    assert g0.server_used_bytes is None and "not known" in g0.reasons["server_used_bytes"]


def test_wddm_gives_no_per_process_memory(processes: tuple[int, int, int]) -> None:
    parent, _child, stranger = processes
    fake = FakeNvml([FakeGpu(memory_used_bytes=7 * GIB, processes=[(parent, None), (stranger, None)])])
    g = NvmlSource(fake).poll(server_pids=(parent,)).gpus[0]
    assert g.processes is not None and all(p.used_bytes is None for p in g.processes)
    assert g.server_used_bytes is None and g.other_processes_used_bytes is None
    assert "WDDM" in g.reasons["server_used_bytes"]


def test_container_pids_that_do_not_exist_here(processes: tuple[int, int, int]) -> None:
    parent = processes[0]
    ghost = [p for p in range(4_000_000, 4_000_100) if not psutil.pid_exists(p)][:2]
    fake = FakeNvml([FakeGpu(memory_used_bytes=7 * GIB, processes=[(ghost[0], 3 * GIB), (ghost[1], 4 * GIB)])])
    g = NvmlSource(fake).poll(server_pids=(parent,)).gpus[0]
    assert g.server_used_bytes is None and "PID namespace" in g.reasons["server_used_bytes"]


def test_empty_process_list_with_memory_in_use_is_not_a_zero(processes: tuple[int, int, int]) -> None:
    parent = processes[0]
    g = NvmlSource(FakeNvml([FakeGpu(memory_used_bytes=7 * GIB)])).poll(server_pids=(parent,)).gpus[0]
    assert g.processes == () and g.server_used_bytes is None and "no processes" in g.reasons["server_used_bytes"]
    idle = NvmlSource(FakeNvml([FakeGpu(memory_used_bytes=0)])).poll(server_pids=(parent,)).gpus[0]
    assert idle.server_used_bytes == 0 and idle.other_processes_used_bytes == 0
