"""Ring-buffer history: wrap-around, windows, gaps as NaN, the speed-vs-context points."""

from __future__ import annotations

import numpy as np

from kvmon.core.history import History
from kvmon.core.snapshot import Connection, ConnectionStatus, GpuView, Snapshot

UP = Connection(ConnectionStatus.CONNECTED)
GONE = Connection(ConnectionStatus.UNREACHABLE, "connection refused")


def snap(t: float, decode: float | None = 40.0, ctx: int | None = 1000, conn: Connection = UP,
         gpus: tuple[GpuView, ...] = ()) -> Snapshot:
    return Snapshot(seq=int(t), t_monotonic=t, t_wall=1e9 + t, connection=conn, decode_tok_s=decode,
                    context_tokens=ctx, ceiling_tok_s=100.0, gpus=gpus)


def test_append_and_view_in_order() -> None:
    h = History(capacity=10)
    for i in range(4):
        h.append(snap(float(i), decode=float(i)))
    v = h.view()
    assert len(v) == 4
    assert v.t.tolist() == [0, 1, 2, 3]
    assert v.series["decode_tok_s"].tolist() == [0, 1, 2, 3]
    assert v.series["ceiling_tok_s"].tolist() == [100.0] * 4


def test_ring_wraps_keeping_the_newest() -> None:
    h = History(capacity=5)
    for i in range(12):
        h.append(snap(float(i), decode=float(i)))
    v = h.view()
    assert len(h) == 5
    assert v.t.tolist() == [7, 8, 9, 10, 11]
    assert v.series["decode_tok_s"].tolist() == [7, 8, 9, 10, 11]
    # a window that crosses the wrap point
    w = h.view(2.5)
    assert w.t.tolist() == [9, 10, 11]

    # the newest rows, across the wrap point, for a plot that appends
    t_wall, series = h.tail(3)
    assert t_wall.tolist() == [1e9 + 9, 1e9 + 10, 1e9 + 11]
    assert series["decode_tok_s"].tolist() == [9, 10, 11]
    assert len(h.tail(0)[0]) == 0 and len(h.tail(99)[0]) == 5


def test_windows() -> None:
    h = History(capacity=1000)
    for i in range(600):
        h.append(snap(float(i)))
    assert len(h.view(300.0)) == 301
    assert len(h.view(3600.0)) == 600
    assert len(h.view(None)) == 600
    assert len(History().view(300.0)) == 0


def test_server_gone_is_a_gap_not_zero() -> None:
    h = History(capacity=10)
    g = GpuView(index=0, vram_used_bytes=10, vram_free_bytes=20)
    h.append(snap(0.0, gpus=(g,)))
    h.append(snap(1.0, decode=None, ctx=None, conn=GONE, gpus=(g,)))
    h.append(snap(2.0, decode=None, gpus=(g,)))  # idle: no data, also NaN
    v = h.view()
    d = v.series["decode_tok_s"]
    assert d[0] == 40.0 and np.isnan(d[1]) and np.isnan(d[2])
    assert np.isnan(v.series["ceiling_tok_s"][1])
    # the GPU is still read while the server is gone
    assert v.gpu["vram_used_bytes"][:, 0].tolist() == [10, 10, 10]


def test_per_gpu_columns() -> None:
    h = History(capacity=10)
    h.append(snap(0.0, gpus=(GpuView(index=0, vram_free_bytes=5),)))
    h.append(snap(1.0, gpus=(GpuView(index=0, vram_free_bytes=4), GpuView(index=1, vram_free_bytes=9))))
    v = h.view()
    free = v.gpu["vram_free_bytes"]
    assert free.shape == (2, 2)
    assert free[1].tolist() == [4, 9]
    assert free[0, 0] == 5 and np.isnan(free[0, 1])


def test_clear() -> None:
    h = History(capacity=10)
    h.append(snap(0.0))
    h.clear()
    assert len(h) == 0 and len(h.view()) == 0


def test_a_reload_is_an_event_of_the_plots_and_the_first_regime_is_not() -> None:
    """A new regime after the first (a reload, another n_ctx, a spill) is marked where it began, in its own words."""
    import dataclasses

    from kvmon.core.snapshot import Forecast, Regime

    h = History(capacity=10)
    first = Forecast(regime=Regime(1, "start", "first measurements", 1.0, 1e9 + 1))
    reload = Forecast(regime=Regime(2, "reload", "reloaded; n_ctx 32,768 → 131,072", 5.0, 1e9 + 5))
    for t in range(1, 5):
        h.append(dataclasses.replace(snap(float(t)), forecast=first))
    assert h.events_added == 0
    for t in range(5, 8):
        h.append(dataclasses.replace(snap(float(t)), forecast=reload))
    assert h.events_added == 1
    ev = h.events[-1]
    assert (ev.kind, ev.t_wall, ev.message) == ("reloaded", 1e9 + 5, "Reloaded: n_ctx 32,768 → 131,072")
