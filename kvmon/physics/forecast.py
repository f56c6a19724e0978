"""Forecast decode speed at deeper context from measured (context, tok/s) points, when the model's shape is unknown.

Time per token is fitted as a + b·context (a straight line in depth), robustly (Theil–Sen), with an 80% prediction
interval that widens with the distance from the measured contexts and with fewer points. With a shape and the
devices, ``kvmon.physics.decode_model`` fits what the physics says varies instead (the bytes read at each depth);
this line is its fallback, and the interval and point-cleaning helpers here serve both.

A line whose speed rises with depth (negative slope) or whose time at empty context is not positive would give a
zero or negative time per token somewhere: it is rejected, with the reason, never clamped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_FIT_POINTS = 300  # more points are reduced to this many context bins (medians) before fitting
TIMING_NOISE_FRACTION = 0.02  # floor on the spread of per-token times: decode timings jitter by ~2%
# (context tokens, decode tok/s) points: pairs, or an (n, 2) array of them
Points = Sequence[tuple[float, float]] | np.ndarray

# Student t quantiles for a two-sided 80% interval (one-sided 0.90) by degrees of freedom.
_T90 = {1: 3.078, 2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397, 9: 1.383, 10: 1.372}
_Z90 = 1.2816


def t_quantile(df: int) -> float:
    """The one-sided 0.90 quantile of Student's t with ``df`` degrees of freedom (two-sided 80% interval)."""
    if df in _T90:
        return _T90[df]
    # Cornish–Fisher expansion of the t quantile around the normal one (error < 0.001 for df > 10)
    z = _Z90
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Prediction:
    """Forecast decode speed at one context depth, with an 80% interval (low ≤ tok_s ≤ high)."""

    tok_s: float
    low_tok_s: float
    high_tok_s: float


@dataclass(frozen=True)
class DecodeFit:
    """time per token = a_s + b_s_per_token × context, fitted on ``n_points`` points."""

    a_s: float
    b_s_per_token: float
    n_points: int
    residual_sd_s: float
    context_mean: float = 0.0
    context_sxx: float = 0.0
    context_max: float = 0.0
    mean_time_s: float = 0.0

    def time_s(self, context: float) -> float:
        """Fitted seconds per token at this depth."""
        return self.a_s + self.b_s_per_token * context

    def predict(self, context: float) -> Prediction:
        """Forecast tok/s at ``context`` with an interval that grows with extrapolation and few points."""
        t = max(self.time_s(context), 1e-12)
        sd = math.hypot(self.residual_sd_s, TIMING_NOISE_FRACTION * self.mean_time_s)
        leverage = 1.0 + 1.0 / self.n_points
        if self.context_sxx > 0:
            leverage += (context - self.context_mean) ** 2 / self.context_sxx
        half = t_quantile(max(self.n_points - 2, 1)) * sd * math.sqrt(leverage)
        t_low = max(t - half, t / 2)  # the fastest end is capped at twice the prediction
        t_high = t + half
        return Prediction(tok_s=1.0 / t, low_tok_s=1.0 / t_high, high_tok_s=1.0 / t_low)


def clean_points(points: Points) -> tuple[np.ndarray, np.ndarray]:
    """(context tokens, seconds per token) of the valid points: finite, context ≥ 0, speed > 0."""
    try:  # fast path: a well-formed sequence of pairs
        arr = np.asarray(points, dtype=float)
        if arr.ndim == 2 and arr.shape[1] == 2:
            x_col, tok_s_col = arr[:, 0], arr[:, 1]
            ok = np.isfinite(x_col) & np.isfinite(tok_s_col) & (x_col >= 0) & (tok_s_col > 0)
            return x_col[ok], 1.0 / tok_s_col[ok]
    except (TypeError, ValueError):
        pass
    xs: list[float] = []
    ys: list[float] = []
    for p in points:
        try:
            x, tok_s = float(p[0]), float(p[1])
        except (TypeError, ValueError, IndexError):
            continue
        if not (math.isfinite(x) and math.isfinite(tok_s)) or x < 0 or tok_s <= 0:
            continue
        xs.append(x)
        ys.append(1.0 / tok_s)
    return np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)


def reduce_points(x: np.ndarray, y: np.ndarray, max_points: int = MAX_FIT_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points: equal-count bins over the depth-sorted points, medians of each."""
    if x.size <= max_points:
        return x, y
    order = np.argsort(x, kind="stable")
    n_bins = max_points
    usable = x.size // n_bins * n_bins  # equal bins over the sorted points; the few left over join the last
    xs, ys = x[order], y[order]
    xb = np.median(xs[:usable].reshape(n_bins, -1), axis=1)
    yb = np.median(ys[:usable].reshape(n_bins, -1), axis=1)
    if usable < x.size:
        xb[-1] = np.median(xs[usable - usable // n_bins:])
        yb[-1] = np.median(ys[usable - usable // n_bins:])
    return xb, yb


def fit_decode_checked(points: Points) -> tuple[DecodeFit | None, str | None]:
    """(the line fitted to (context tokens, decode tok/s) points, None) or (None, why there is none).

    No fit with fewer than two distinct valid contexts; a line that would give a zero or negative time per token at
    some depth (speed rising with depth, or no time at empty context) is rejected.
    """
    x, y = reduce_points(*clean_points(points))
    if x.size < 2 or np.unique(x).size < 2:
        return None, "fewer than two measured context depths"
    i, j = np.triu_indices(x.size, k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    slopes = (y[j] - y[i])[keep] / dx[keep]
    b = float(np.median(slopes))
    if b < 0:
        return None, "measured speed rises with depth: a line through it would reach zero time per token"
    a = float(np.median(y - b * x))
    if not (a > 0 and math.isfinite(a) and math.isfinite(b)):
        return None, "the fitted time per token at empty context is not positive"
    resid = y - (a + b * x)
    n = int(x.size)
    dof = max(n - 2, 1)
    residual_sd = float(math.sqrt(float(np.sum(resid**2)) / dof)) if n > 2 else 0.0
    x_mean = float(np.mean(x))
    return DecodeFit(
        a_s=a,
        b_s_per_token=b,
        n_points=n,
        residual_sd_s=residual_sd,
        context_mean=x_mean,
        context_sxx=float(np.sum((x - x_mean) ** 2)),
        context_max=float(np.max(x)),
        mean_time_s=float(np.mean(y)),
    ), None


def fit_decode(points: Points) -> DecodeFit | None:
    """The line fitted to (context tokens, decode tok/s) points; None when there is none (``fit_decode_checked``)."""
    return fit_decode_checked(points)[0]
