"""The simulator's clock: it accelerates, pauses and never jumps."""

from __future__ import annotations

import pytest

from kvmon.sim.clock import SimClock


def test_clock_accelerates_pauses_and_never_jumps() -> None:
    t = [100.0]
    clock = SimClock(10.0, real_clock=lambda: t[0], running=False)
    t[0] += 5
    assert clock.now() == 0.0  # not started
    clock.start()
    t[0] += 2
    assert clock.now() == pytest.approx(20.0)
    clock.set_speed(1.0)
    assert clock.now() == pytest.approx(20.0)
    t[0] += 3
    assert clock.now() == pytest.approx(23.0)
    clock.advance(7)
    assert clock.now() == pytest.approx(30.0)
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        SimClock(0)
