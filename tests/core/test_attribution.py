"""GPU memory attributed to the model processes that hold it."""

from __future__ import annotations

from kvmon.core.attribution import for_processes
from kvmon.core.readings import GpuProcess, GpuReading, GpuSetReading


def _gpu(procs: tuple[GpuProcess, ...] | None, server: int | None = 0, other: int | None = 0) -> GpuSetReading:
    return GpuSetReading(t_monotonic=1.0, gpus=(GpuReading(index=0, processes=procs, server_used_bytes=server,
                                                           other_processes_used_bytes=other),))


def test_gpu_memory_is_split_per_model_process() -> None:
    procs = (GpuProcess(10, 5_000, "compute"), GpuProcess(11, 7_000, "compute"), GpuProcess(11, 7_000, "graphics"),
             GpuProcess(99, 1_000, "compute"))
    whole = _gpu(procs, 12_000, 1_000)
    first = for_processes(whole, (10,))
    assert first is not None
    g = first.gpus[0]
    assert (g.server_used_bytes, g.other_processes_used_bytes) == (5_000, 8_000)  # the other model counts as other
    assert [p.is_server for p in g.processes or ()] == [True, False, False, False]
    assert for_processes(whole, ()) is whole  # no processes known: as read
    unknown = _gpu(procs, None, None)  # the split was not known (WDDM, one list only): it stays unknown
    again = for_processes(unknown, (10,))
    assert again is not None and again.gpus[0].server_used_bytes is None
    assert for_processes(None, (10,)) is None
