"""The forecaster's efficiency: the median of the last ones kept, in order of arrival."""

from __future__ import annotations

import pytest


def test_the_median_efficiency_is_of_the_last_ones_kept_in_order_of_arrival() -> None:
    """The median the forecast and the advice read (twice a poll) is kept in order as values come and go: it is the
    median of the last ``EFFICIENCIES_KEPT``, whatever their order; an efficiency that is not a number is not one."""
    import random
    import statistics

    from kvmon.core.analysis.forecasting import EFFICIENCIES_KEPT, Forecaster

    f, values, rng = Forecaster((), 100), [], random.Random(7)
    assert f.median_efficiency() is None
    for i in range(EFFICIENCIES_KEPT * 3):
        v = rng.choice([rng.random(), 0.5, 0.25, 0.5])  # repeats: the oldest of equal values goes
        f.add_efficiency(v)
        values.append(v)
        assert f.median_efficiency() == pytest.approx(statistics.median(values[-EFFICIENCIES_KEPT:])), i
    f.add_efficiency(float("nan"))
    assert f.median_efficiency() == pytest.approx(statistics.median(values[-EFFICIENCIES_KEPT:]))


def test_the_milestones_hold_while_idle_and_follow_the_devices() -> None:
    """An idle poll (no new point) shows the milestones it showed; slower devices move them at once."""
    from analysis_readings import FixedRates, ceiling_8b, gpu, gpus, reading

    from kvmon.core.analysis import Analyzer

    rates = FixedRates(decode=50.0)
    a = Analyzer(rate_tracker=rates)
    for i in range(20):  # a fit from the first points; a refit when the points grew by a quarter
        rates.decode = 1 / (0.010 + 1e-6 * (1000 + 500 * i))
        s = a.update(reading(float(i), ctx=1000 + 500 * i), gpus(float(i)))
    assert s.forecast.milestones
    idle = a.update(reading(20.0, ctx=10500, processing=False), gpus(20.0))
    assert idle.forecast.milestones == s.forecast.milestones and idle.forecast.curve == s.forecast.curve
    slower = a.update(reading(21.0, ctx=10500, processing=False), gpus(21.0, gpu(bw=504e9)))
    assert slower.forecast.milestones[-1].ceiling_tok_s == pytest.approx(ceiling_8b(32768, bw=504e9))
    assert slower.forecast.milestones[-1].tok_s < s.forecast.milestones[-1].tok_s
