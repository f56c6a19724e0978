"""The forecast on the built-in demo, as a new user first sees it: regression tests for what it used to show.

Half a minute into ``seed-3090x2`` the forecast was a flat line above the ceiling; after the spill in ``spill-4090``
a milestone read "8K ~1000000000000 tok/s" and the headline "103% of ceiling". The simulator is driven poll by poll
on its own clock (paused: only the test moves it), read by kvmon's real sources over HTTP.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import pytest

from kvmon.app.demo import demo_session
from kvmon.core.snapshot import Snapshot


def _polls(scenario: str, t_end: float, step_s: float = 1.0) -> Iterator[tuple[float, Snapshot]]:
    session = demo_session(scenario, None, speed=1.0)
    sim = session.sim
    sim.clock.pause()
    monitor = session.factory()
    try:
        while sim.clock.now() < t_end:
            sim.clock.advance(step_s)
            sim.refresh_gpus()
            yield sim.clock.now(), monitor.poll()
    finally:
        monitor.close()
        session.close()


def _ceiling_at(s: Snapshot, depth: int) -> float | None:
    return next((c for n, c in s.ceiling_curve if n == depth), None)


def test_seed_demo_forecast_stays_under_the_ceiling_in_its_first_minute() -> None:
    """Every milestone at or below the ceiling at its depth, at every poll of the first minute (30 s in, too)."""
    seen = 0
    for t, s in _polls("seed-3090x2", 60.0):
        for m in s.forecast.milestones:
            assert m.ceiling_tok_s is not None, (t, m)
            assert math.isfinite(m.tok_s) and 0 < m.tok_s <= m.ceiling_tok_s * (1 + 1e-9), (t, m)
            seen += 1
    assert seen > 100, "the demo should have forecast milestones within a minute"


def test_spill_demo_after_the_reload_forecasts_under_the_new_ceiling_and_never_above_100_percent() -> None:
    """After the reload with a 128K context (layers and KV in host RAM): finite milestones at or below the post-spill
    ceiling, and no efficiency above 100% (a speed above the ceiling is a finding, not a percentage)."""
    after = []
    for t, s in _polls("spill-4090", 420.0):
        if t >= 330.0 and s.server_read and s.model.n_ctx == 131072:
            after.append(s)
    measured = [s for s in after if s.decode_tok_s is not None]
    assert len(measured) > 20, "the chat should go on after the reload"
    for s in after:
        assert s.efficiency is None or s.efficiency <= 1.0, s.efficiency
        for m in s.forecast.milestones:
            assert m.ceiling_tok_s is not None and math.isfinite(m.tok_s), m
            assert m.tok_s <= m.ceiling_tok_s * (1 + 1e-9), m
            assert m.high_tok_s is None or m.high_tok_s <= m.ceiling_tok_s * (1 + 1e-9), m
    deep = [m for s in measured for m in s.forecast.milestones if m.context_tokens == 131072]
    assert deep and all(m.tok_s < 5.0 for m in deep)  # the 128K ceiling after the spill is ~4.6 tok/s


def test_spill_demo_header_shows_no_percentage_above_100(qtbot) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("pytestqt")
    from kvmon.gui.panels.header import HeaderPanel

    header = HeaderPanel()
    qtbot.addWidget(header)
    shown = 0
    for t, s in _polls("spill-4090", 400.0, step_s=2.0):
        if t < 330.0:
            continue
        header.update_snapshot(s)
        for pct in re.findall(r"(\d+)%", header.efficiency.whole()):
            assert int(pct) <= 100, header.efficiency.whole()
            shown += 1
    assert shown > 5
