"""A session summed up without Qt: figures from the snapshots, bounded points, unknowns as None."""

from __future__ import annotations

import dataclasses

import pytest
from synthetic import SyntheticMonitor

from kvmon.core.snapshot import AlertLevel, Connection, ConnectionStatus, Snapshot
from kvmon.core.summary import Tally, summarize


def _snaps(n: int = 80) -> list[Snapshot]:
    mon = SyntheticMonitor(t0_wall=1_764_000_000.0)
    return [mon.snapshot(i) for i in range(1, n + 1)]


def test_summary_figures() -> None:
    snaps = _snaps()
    down = Snapshot(seq=999, t_monotonic=0.0, t_wall=snaps[-1].t_wall + 1,
                    connection=Connection(ConnectionStatus.UNREACHABLE, "refused"))
    sm = summarize([*snaps, down])
    assert sm.n_snapshots == 81
    assert sm.peak_context_tokens == max(s.context_tokens for s in snaps)
    assert sm.final_context_tokens == snaps[-1].context_tokens  # the failed poll does not count
    assert sm.peak_decode_tok_s == max(s.decode_tok_s for s in snaps)
    assert sm.final_efficiency == snaps[-1].efficiency
    effs = sorted(s.efficiency for s in snaps)
    assert sm.median_efficiency == pytest.approx((effs[39] + effs[40]) / 2)
    assert len(sm.points) == 80 and sm.ceiling_curve == snaps[-1].ceiling_curve
    (a,) = sm.alerts
    assert a.code == "ctx_full_soon" and a.level is AlertLevel.WARNING
    assert a.count == sum(1 for s in snaps if s.alerts)
    assert sm.last is snaps[-1]


def test_summary_of_nothing_is_unknown_not_zero() -> None:
    sm = summarize([])
    assert sm.n_snapshots == 0 and sm.peak_context_tokens is None and sm.median_efficiency is None
    assert sm.last is None and sm.points == ()


def test_long_sessions_keep_bounded_points() -> None:
    from kvmon.core.points import MeasuredPoints

    store = MeasuredPoints(capacity=1, sample_max=100)  # the store's sample is thinned when it reaches its bound
    t = Tally(store)
    base = _snaps(1)[0]
    for i in range(1000):
        s = dataclasses.replace(base, seq=i, context_tokens=i)
        store.add(s)
        t.add(s)
    assert len(t.points) < 100 and t.peak_ctx == 999


def test_a_shared_store_is_read_not_fed_twice() -> None:
    from kvmon.core.points import MeasuredPoints

    store = MeasuredPoints()
    t = Tally(store)
    for s in _snaps(5):
        store.add(s)  # the window feeds its store
        t.add(s)
    assert len(t.points) == 5 and t.n == 5
