"""One GPU reading seen from another set of server processes: each model of a router or llama-swap is its own child
process, so the VRAM that is "the server's" differs per model while the GPUs are read once per poll.

Only a reading whose per-process split was known is split again (its process list is then complete, counted the way
the GPU source counts it: a process in two lists holds one allocation); any other keeps its reasons.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from kvmon.core.readings import GpuReading, GpuSetReading


def _split(g: GpuReading, pids: frozenset[int]) -> GpuReading:
    if g.server_used_bytes is None or g.other_processes_used_bytes is None or g.processes is None:
        return g
    by_pid: dict[int, int] = {}
    for p in g.processes:
        by_pid[p.pid] = max(by_pid.get(p.pid, 0), p.used_bytes or 0)
    server = sum(u for pid, u in by_pid.items() if pid in pids)
    return replace(g, server_used_bytes=server, other_processes_used_bytes=sum(by_pid.values()) - server,
                   processes=tuple(replace(p, is_server=p.pid in pids) for p in g.processes))


def for_processes(reading: GpuSetReading | None, server_pids: Collection[int]) -> GpuSetReading | None:
    """``reading`` with each GPU's memory split between ``server_pids`` and every other process."""
    if reading is None or not server_pids:
        return reading
    pids = frozenset(int(p) for p in server_pids)
    return replace(reading, gpus=tuple(_split(g, pids) for g in reading.gpus))
