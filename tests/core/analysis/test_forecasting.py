"""The forecaster's efficiency: the median of the last ones kept, in order of arrival."""

from __future__ import annotations

import pytest


def test_the_median_efficiency_is_of_the_last_ones_kept_in_order_of_arrival() -> None:
    """The median the forecast and the advice read (twice a poll) is kept in order as values come and go: it is the
    median of the last ``EFFICIENCIES_KEPT``, whatever their order; an efficiency that is not a number is not one."""
    import random
    import statistics

    from kvmon.core.analysis.forecasting import EFFICIENCIES_KEPT, Forecaster
    from kvmon.core.analysis.memo import PhysicsMemo

    f, values, rng = Forecaster(PhysicsMemo(), (), 100), [], random.Random(7)
    assert f.median_efficiency() is None
    for i in range(EFFICIENCIES_KEPT * 3):
        v = rng.choice([rng.random(), 0.5, 0.25, 0.5])  # repeats: the oldest of equal values goes
        f.add_efficiency(v)
        values.append(v)
        assert f.median_efficiency() == pytest.approx(statistics.median(values[-EFFICIENCIES_KEPT:])), i
    f.add_efficiency(float("nan"))
    assert f.median_efficiency() == pytest.approx(statistics.median(values[-EFFICIENCIES_KEPT:]))
