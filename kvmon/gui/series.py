"""Measured decode speed per context-depth bin: the hero plot's points at constant cost, however long the session.

Time series live in ``kvmon.core.history``; this aggregates (context, tok/s) points so a day of history
draws a few hundred dots, not 86,400.
"""

from __future__ import annotations

import math

import numpy as np


class ContextBins:
    """Measured decode speed averaged per context-depth bin: the hero plot's points, cheap at any history length."""

    def __init__(self, bin_tokens: int = 256) -> None:
        self.bin_tokens = bin_tokens
        self._sum = np.zeros(0)
        self._count = np.zeros(0, dtype=np.int64)
        self.version = 0

    def add(self, context_tokens: float | None, decode_tok_s: float | None) -> None:
        """Record one measured point; unknown values are ignored."""
        if context_tokens is None or decode_tok_s is None:
            return
        if not (math.isfinite(context_tokens) and math.isfinite(decode_tok_s)) or context_tokens < 0:
            return
        b = int(context_tokens // self.bin_tokens)
        if b >= self._sum.size:
            grow = max(b + 1, 2 * self._sum.size)
            self._sum = np.concatenate([self._sum, np.zeros(grow - self._sum.size)])
            self._count = np.concatenate([self._count, np.zeros(grow - self._count.size, dtype=np.int64)])
        self._sum[b] += decode_tok_s
        self._count[b] += 1
        self.version += 1

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(bin centre in tokens, mean tok/s) of the bins holding measurements."""
        nz = np.nonzero(self._count)[0]
        return (nz + 0.5) * self.bin_tokens, self._sum[nz] / self._count[nz]

    def clear(self) -> None:
        """Forget all points (a new model was loaded)."""
        self._sum = np.zeros(0)
        self._count = np.zeros(0, dtype=np.int64)
        self.version += 1


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
