"""A rate's curve on the speed-over-time chart: gaps stay gaps, and each run of samples starts at the previous poll's
time (a rate is the average since then), so a lone sample between gaps is a short segment a line can show."""

from __future__ import annotations

import numpy as np

from kvmon.gui.panels.strip_curve import runs, with_lead_ins

NAN = np.nan


def test_the_runs_of_samples_between_gaps() -> None:
    y = np.array([NAN, 5.0, 6.0, NAN, NAN, 7.0, NAN, 8.0, 9.0])
    assert runs(y) == [(1, 2), (5, 5), (7, 8)]
    assert runs(np.array([NAN, NAN])) == []


def test_each_run_starts_at_the_previous_polls_time_and_gaps_stay() -> None:
    x = np.arange(9.0) * 2
    y = np.array([NAN, 5.0, 6.0, NAN, NAN, 7.0, NAN, 8.0, 9.0])
    lx, ly = with_lead_ins(x, y)
    np.testing.assert_array_equal(lx, [0, 0, 2, 4, 6, 8, 8, 10, 12, 12, 14, 16])
    np.testing.assert_array_equal(ly, [NAN, 5, 5, 6, NAN, NAN, 7, 7, NAN, 8, 8, 9])
    assert runs(ly) == [(1, 3), (6, 7), (9, 11)]  # the lone 7 is now a segment from t=8 to t=10


def test_a_first_sample_leads_in_by_one_poll_interval() -> None:
    lx, ly = with_lead_ins(np.array([10.0, 11.0]), np.array([3.0, 4.0]))
    np.testing.assert_array_equal(lx, [9.0, 10.0, 11.0])
    np.testing.assert_array_equal(ly, [3.0, 3.0, 4.0])
