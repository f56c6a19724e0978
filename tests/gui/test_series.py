"""Peak downsampling for the long time windows: fewer points than pixels, every spike and gap kept."""

from __future__ import annotations

import numpy as np

from kvmon.gui.series import peak_decimate


def test_long_series_keep_every_peak_dip_and_gap() -> None:
    x = np.arange(86_400, dtype=float)
    y = np.full(x.size, 40.0)
    y[12_345] = 400.0  # a one-second spike
    y[50_000] = 1.0  # a one-second dip
    y[70_000:71_000] = np.nan  # a 1000-s gap, longer than a bucket
    xs, ys = peak_decimate(x, y, 1200)
    assert xs.size == ys.size <= 1200
    assert np.nanmax(ys) == 400.0 and np.nanmin(ys) == 1.0
    assert np.isnan(ys).any(), "a gap longer than a bucket stays a gap"
    assert xs[0] == 0.0 and xs[-1] == x[-1] and np.all(np.diff(xs) >= 0)


def test_short_series_come_back_unchanged() -> None:
    x, y = np.arange(300.0), np.linspace(10, 20, 300)
    xs, ys = peak_decimate(x, y, 1200)
    assert xs is x and ys is y
