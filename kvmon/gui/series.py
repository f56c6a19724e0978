"""Peak downsampling for the long time windows: a plot never gets more points than it has pixels.

Time series live in ``kvmon.core.history``; the speed-vs-context dots are the session store's bins
(``kvmon.core.points.ContextBins``).
"""

from __future__ import annotations

import math

import numpy as np


def peak_decimate(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points keeping every peak and dip: each bucket of samples becomes its min and max.

    A plot cannot show more samples than it has pixels; min/max per bucket keeps the spikes a plain stride
    would drop. An all-NaN bucket stays NaN (a gap stays a gap). Shorter series come back as they are.
    """
    n = len(y)
    if n <= max_points or max_points < 2:
        return x, y
    size = math.ceil(n / (max_points // 2))
    m = math.ceil(n / size)
    pad = m * size - n
    yy = np.concatenate([y, np.full(pad, np.nan)]).reshape(m, size)
    lo, hi = np.fmin.reduce(yy, axis=1), np.fmax.reduce(yy, axis=1)  # NaN only where a whole bucket is NaN
    starts = x[::size]
    ends = x[np.minimum(np.arange(m) * size + size - 1, n - 1)]
    return np.column_stack([starts, ends]).ravel(), np.column_stack([lo, hi]).ravel()
