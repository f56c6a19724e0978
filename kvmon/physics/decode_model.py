"""Forecast decode speed from the bytes each step reads: a fit bounded by the ceiling it is drawn against.

The model. At depth n a decode step reads the weights a token uses (``kvmon.physics.weights``: all of a dense
model, the shared part plus the routed experts of a MoE), W_d bytes on device d, and the KV cache in use, kv(n)
bytes (``kvmon.physics.kv.kv_bytes_in_use``: SWA and chunked layers capped at their window, MLA the latent only,
recurrent layers a fixed state that does not grow), a fraction f_d of it on device d, each at that device's
bandwidth B_d. The roofline time is R(n) = R_w + x(n), with R_w = Σ W_d / B_d and x(n) = kv(n) · Σ f_d / B_d;
the ceiling is 1 / R(n). Measured seconds per token are fitted as

    t(n) = a + b · x(n),        a = c + R_w / η,        b = 1 / η + γ

η ≤ 1 is the fraction of the bandwidth reached (the efficiency, an effective bandwidth η·B_d), c ≥ 0 a fixed
per-token overhead (kernel launches, sampling, synchronisation), γ ≥ 0 attention compute that grows with depth
beyond the bytes it reads. The forms:

- ``ceiling_scaled``: the ceiling curve times the efficiency measured so far, t = R(n) / η₀: nothing measured
  yet (η₀ from the polls), or one depth bin (its level from the data, its slope from the ceiling).
- ``bandwidth``: γ = 0, t = c + R(n)/η; the constraints are b ≥ 1 and a ≥ b·R_w (c ≥ 0).
- ``bandwidth+attention``: the constraints are b ≥ 1 and a ≥ R_w (then η = max(1/b, R_w/a) and c, γ ≥ 0 follow).

Every form has a ≥ R_w and b ≥ 1, so t(n) ≥ R(n) at every depth: the forecast is never above the ceiling, and
never a zero or negative time.

The fit. Points are grouped into depth bins of ``BIN_TOKENS`` (median time per bin), at most ``MAX_BINS``. The
residuals are relative (timings jitter in proportion; their spread is taken as at least ``TIMING_NOISE_FRACTION``,
since the polls of one reply share its jitter), Huber-weighted (a stalled sample barely moves it), with a
Gaussian prior centred on the ``ceiling_scaled`` curve (a₀ = R_w/η₀, b₀ = 1/η₀; sd ``PRIOR_SD_LEVEL`` and
``PRIOR_SD_SLOPE`` of them), η₀ being the median measured efficiency: with few points the forecast is the ceiling
times the efficiency with a wide band, and data narrows it. The posterior mean is projected onto the form's
constraints (a two-parameter quadratic programme); the 80% interval combines the posterior covariance with the
residual spread (at least ``TIMING_NOISE_FRACTION``), and its fast end is held at the ceiling.

The selection rule (by held-out error, not by eye): with three or more depth bins, the deepest third of them (at
least one) is held out, both ``bandwidth`` and ``bandwidth+attention`` are fitted on the rest, and each is scored
by its mean absolute relative error in tok/s on the held-out bins. The attention term is kept only when it cuts
that error to at most ``ATTENTION_GAIN`` of the ``bandwidth`` form's and by at least ``ATTENTION_MIN_GAIN`` (half a
percentage point); otherwise ``bandwidth``. With two bins there is nothing to hold out: the attention term is kept
only when the ``bandwidth`` form misses them by more than ``IN_SAMPLE_MISS`` on average. The chosen form is then
fitted on all the bins (``heldout_error`` keeps the scores).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kvmon.physics.ceiling import DeviceShare, step_time_parts
from kvmon.physics.forecast import TIMING_NOISE_FRACTION, Prediction, clean_points, reduce_points, t_quantile
from kvmon.physics.kv import kv_read_profile
from kvmon.physics.shape import ModelShape

FORM_CEILING_SCALED = "ceiling_scaled"
FORM_BANDWIDTH = "bandwidth"
FORM_ATTENTION = "bandwidth+attention"
FORMS = (FORM_CEILING_SCALED, FORM_BANDWIDTH, FORM_ATTENTION)

BIN_TOKENS = 256
MAX_BINS = 300
PRIOR_SD_LEVEL = 0.5
PRIOR_SD_SLOPE = 4.0
ATTENTION_GAIN = 0.8
ATTENTION_MIN_GAIN = 0.005
IN_SAMPLE_MISS = 0.05
HUBER_K = 1.345
IRLS_ITERATIONS = 8


@dataclass(frozen=True)
class ReadProfile:
    """Seconds one step spends reading memory at depth n at peak bandwidth: ``weights_s + kv_s_per_byte × kv(n)``,
    kv(n) = unbounded·n + Σ bytes·min(n, window) (the shape's KV read profile at the cache types in use)."""

    weights_s: float
    kv_s_per_byte: float
    kv_unbounded_bytes_per_token: float
    kv_windows: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(devices: Sequence[DeviceShare], shape: ModelShape, type_k: str | None,
           type_v: str | None) -> ReadProfile | None:
        """The profile of this model on these devices; None when a bandwidth is unknown or nothing is read."""
        parts = step_time_parts(devices)
        if parts is None:
            return None
        weights_s, kv_s_per_byte = parts
        if not (weights_s > 0 and math.isfinite(weights_s) and math.isfinite(kv_s_per_byte) and kv_s_per_byte >= 0):
            return None
        unbounded, windows = kv_read_profile(shape, type_k, type_v)
        return ReadProfile(weights_s, kv_s_per_byte, float(unbounded), windows)

    def kv_s(self, context_tokens: np.ndarray | float) -> np.ndarray:
        """Seconds reading the KV cache at each depth (at peak bandwidth)."""
        n = np.nan_to_num(np.asarray(context_tokens, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
        n = np.maximum(n, 0.0)
        kv = self.kv_unbounded_bytes_per_token * n
        for window, n_bytes in self.kv_windows:
            kv = kv + n_bytes * np.minimum(n, float(window))
        return kv * self.kv_s_per_byte

    def roofline_s(self, context_tokens: np.ndarray | float) -> np.ndarray:
        """Seconds per token at the ceiling (1 / ceiling tok/s) at each depth."""
        return self.weights_s + self.kv_s(context_tokens)


@dataclass(frozen=True)
class BytesFit:
    """t(n) = a_s + b × kv_s(n) on ``profile``, of one form, with its posterior covariance and residual spread."""

    form: str
    a_s: float
    b: float  # seconds per second of KV read at peak bandwidth (≥ 1)
    var_a: float
    cov_ab: float
    var_b: float
    residual_sd_fraction: float
    n_bins: int
    profile: ReadProfile
    prior_efficiency: float
    context_min: float = 0.0
    context_max: float = 0.0
    heldout_error: tuple[tuple[str, float], ...] = ()  # (form, mean |relative error|) of the selection, if made

    @property
    def efficiency(self) -> float:
        """η: the largest fraction of peak bandwidth the fit allows (overhead and attention take the rest)."""
        return min(1.0, max(1.0 / self.b, self.profile.weights_s / self.a_s))

    @property
    def overhead_s(self) -> float:
        """c: fixed seconds per token beyond the weights read at the effective bandwidth."""
        return max(0.0, self.a_s - self.profile.weights_s / self.efficiency)

    @property
    def attention_factor(self) -> float:
        """γ: extra seconds per second of KV read that grow with depth (attention compute); 0 in ``bandwidth``."""
        return max(0.0, self.b - 1.0 / self.efficiency)

    @property
    def slope_s_per_token(self) -> float:
        """Seconds per token added by one more token of depth beyond every window (the line's slope there)."""
        return self.b * self.profile.kv_unbounded_bytes_per_token * self.profile.kv_s_per_byte

    def time_s(self, context_tokens: np.ndarray | float) -> np.ndarray:
        """Fitted seconds per token at each depth, never below the roofline."""
        kv = self.profile.kv_s(context_tokens)
        return np.maximum(self.a_s + self.b * kv, self.profile.weights_s + kv)

    def predict(self, context: float) -> Prediction:
        """Forecast tok/s at ``context`` with an 80% interval; every value positive and at most the ceiling."""
        tok_s, low, high = self.predict_many(np.asarray([context], dtype=float))
        return Prediction(tok_s=float(tok_s[0]), low_tok_s=float(low[0]), high_tok_s=float(high[0]))

    def predict_many(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tok/s, low, high) at each depth, as ``predict``."""
        kv = self.profile.kv_s(contexts)
        roof = self.profile.weights_s + kv
        t = np.maximum(self.a_s + self.b * kv, roof)
        var = self.var_a + 2.0 * kv * self.cov_ab + kv * kv * self.var_b + (self.residual_sd_fraction * t) ** 2
        half = t_quantile(max(self.n_bins - 2, 1)) * np.sqrt(np.maximum(var, 0.0))
        t_fast = np.maximum(np.maximum(t - half, roof), t / 2)  # the fast end: at the ceiling at most
        t_slow = t + half
        return 1.0 / t, 1.0 / t_slow, 1.0 / t_fast


def _bins(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(median depth, median seconds per token) per ``BIN_TOKENS`` depth bin, at most ``MAX_BINS`` of them."""
    if x.size == 0:
        return x, y
    key = np.floor(x / BIN_TOKENS).astype(np.int64)
    order = np.argsort(key, kind="stable")
    if np.unique(key).size == key.size:  # one point per bin (a benchmark's depths)
        return reduce_points(x[order], y[order], MAX_BINS)
    xb = _group_medians(key, x)
    yb = _group_medians(key, y)
    return reduce_points(xb, yb, MAX_BINS)


def _group_medians(key: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The median of ``v`` within each value of ``key``, in key order (sorted once, no loop over the groups)."""
    order = np.lexsort((v, key))
    k, vs = key[order], v[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    counts = np.diff(np.r_[starts, k.size])
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    return (vs[lo] + vs[hi]) / 2.0


def _constraints(form: str, weights: float) -> list[tuple[np.ndarray, float]]:
    """The form's constraints g·θ ≥ h on θ = (a, b), in units of the median step time."""
    b_min = (np.array([0.0, 1.0]), 1.0)
    if form == FORM_ATTENTION:
        return [b_min, (np.array([1.0, 0.0]), weights)]
    return [b_min, (np.array([1.0, -weights]), 0.0)]


def _project(theta: np.ndarray, h: np.ndarray, cons: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """argmin (θ'−θ)ᵀ H (θ'−θ) subject to the constraints (every active set of a two-parameter problem)."""
    def feasible(t: np.ndarray) -> bool:
        return all(float(g @ t) >= lim - 1e-12 * max(1.0, abs(lim)) for g, lim in cons)

    if feasible(theta):
        return theta
    h_inv = np.linalg.inv(h)
    best: np.ndarray | None = None
    best_cost = math.inf
    candidates: list[np.ndarray] = []
    for g, lim in cons:
        hg = h_inv @ g
        denom = float(g @ hg)
        if denom > 0:
            candidates.append(theta + hg * (lim - float(g @ theta)) / denom)
    g_mat = np.array([g for g, _ in cons])
    if abs(np.linalg.det(g_mat)) > 1e-15:
        candidates.append(np.linalg.solve(g_mat, np.array([lim for _, lim in cons])))
    for c in candidates:
        if not feasible(c):
            continue
        d = c - theta
        cost = float(d @ h @ d)
        if cost < best_cost:
            best, best_cost = c, cost
    if best is None:  # cannot happen with these constraints (their vertex is feasible); be safe
        best = np.array([max(theta[0], cons[1][1]), max(theta[1], 1.0)])
    return best


@dataclass(frozen=True)
class _Solved:
    theta: np.ndarray  # (a, b) in units of the median step time (b is dimensionless)
    cov: np.ndarray
    sd_fraction: float


def _solve(x: np.ndarray, y: np.ndarray, weights_s: float, prior: tuple[float, float], form: str,
           scale: float) -> _Solved:
    """The constrained, Huber-weighted, prior-regularised relative least squares of one form (units of ``scale``)."""
    u = 1.0 / y  # relative residual: 1 − (a + b·x)/y
    design = np.column_stack((u, x * u))
    a0, b0 = prior
    prior_prec = np.diag([1.0 / (PRIOR_SD_LEVEL * a0) ** 2, 1.0 / (PRIOR_SD_SLOPE * b0) ** 2])
    theta0 = np.array([a0, b0])
    cons = _constraints(form, weights_s / scale)
    n = y.size
    sd = TIMING_NOISE_FRACTION
    hub = np.ones(n)
    theta = theta0
    h = prior_prec
    for _ in range(IRLS_ITERATIONS):
        wd = design * hub[:, None]
        h = design.T @ wd / sd**2 + prior_prec
        rhs = wd.sum(axis=0) / sd**2 + prior_prec @ theta0
        previous = theta
        theta = _project(np.linalg.solve(h, rhs), h, cons)
        resid = 1.0 - design @ theta
        if n > 2:
            sd = max(TIMING_NOISE_FRACTION, float(math.sqrt(float(np.sum(hub * resid**2)) / (n - 2))))
        limit = HUBER_K * sd
        hub = np.minimum(1.0, limit / np.maximum(np.abs(resid), 1e-300))
        if np.all(np.abs(theta - previous) <= 1e-9 * np.maximum(np.abs(theta), 1e-12)):
            break  # converged: the weights no longer move it
    return _Solved(theta, np.linalg.inv(h), sd)


def _fit(form: str, x: np.ndarray, y: np.ndarray, profile: ReadProfile, eff0: float, scale: float,
         n_tokens: np.ndarray, heldout: tuple[tuple[str, float], ...] = ()) -> BytesFit:
    w = profile.weights_s / scale
    prior = (w / eff0, 1.0 / eff0)
    s = _solve(x / scale, y / scale, profile.weights_s, prior, form, scale)
    a, b = float(s.theta[0]) * scale, float(s.theta[1])
    a = max(a, profile.weights_s)
    b = max(b, 1.0)
    return BytesFit(form=form, a_s=a, b=b, var_a=float(s.cov[0, 0]) * scale**2, cov_ab=float(s.cov[0, 1]) * scale,
                    var_b=float(s.cov[1, 1]), residual_sd_fraction=max(s.sd_fraction, TIMING_NOISE_FRACTION),
                    n_bins=int(y.size), profile=profile, prior_efficiency=eff0,
                    context_min=float(n_tokens.min()) if n_tokens.size else 0.0,
                    context_max=float(n_tokens.max()) if n_tokens.size else 0.0, heldout_error=heldout)


def _mean_error(fit: BytesFit, n: np.ndarray, y: np.ndarray) -> float:
    """Mean |forecast ÷ measured − 1| in tok/s over the bins."""
    tok_s, _low, _high = fit.predict_many(n)
    return float(np.mean(np.abs(tok_s * y - 1.0)))


def measured_efficiency(points: Sequence[tuple[float, float]], profile: ReadProfile) -> float | None:
    """The median of measured ÷ ceiling over the points (may exceed 1: then a ceiling input is wrong)."""
    n, y = clean_points(points)
    if n.size == 0:
        return None
    return float(np.median(profile.roofline_s(n) / y))


def fit_bytes(points: Sequence[tuple[float, float]], profile: ReadProfile,
              prior_efficiency: float | None = None) -> BytesFit | None:
    """Fit (context tokens, decode tok/s) points on ``profile``; the form chosen by the module's rule.

    ``prior_efficiency``: the measured ÷ ceiling to scale the ceiling by when no point is given (the polls'
    median); with points, their own median is used. None when there is neither.
    """
    n_raw, y_raw = clean_points(points)
    n, y = _bins(n_raw, y_raw)
    if n.size:
        eff0 = float(np.median(profile.roofline_s(n) / y))
    elif prior_efficiency is not None and prior_efficiency > 0 and math.isfinite(prior_efficiency):
        eff0 = float(prior_efficiency)
    else:
        return None
    eff0 = min(1.0, max(eff0, 1e-3))
    if n.size == 0:  # the prior alone: the ceiling scaled by the polls' efficiency
        return BytesFit(FORM_CEILING_SCALED, profile.weights_s / eff0, 1.0 / eff0,
                        (PRIOR_SD_LEVEL * profile.weights_s / eff0) ** 2, 0.0, (PRIOR_SD_SLOPE / eff0) ** 2,
                        TIMING_NOISE_FRACTION, 0, profile, eff0)
    scale = float(np.median(y))
    x = profile.kv_s(n)
    order = np.argsort(n, kind="stable")
    n, y, x = n[order], y[order], x[order]
    if n.size < 2:  # one depth: the level from the data, the shape from the ceiling
        return replace(_fit(FORM_BANDWIDTH, x, y, profile, eff0, scale, n), form=FORM_CEILING_SCALED)
    if n.size == 2:  # no held-out set: the attention term only if the bandwidth form cannot meet both depths
        plain = _fit(FORM_BANDWIDTH, x, y, profile, eff0, scale, n)
        miss = _mean_error(plain, n, y)
        if miss <= IN_SAMPLE_MISS:
            return replace(plain, heldout_error=((FORM_BANDWIDTH, miss),))
        return _fit(FORM_ATTENTION, x, y, profile, eff0, scale, n, ((FORM_BANDWIDTH, miss),))
    k = max(1, round(n.size / 3))
    train = slice(0, n.size - k)
    test = slice(n.size - k, n.size)
    errors: list[tuple[str, float]] = []
    for form in (FORM_BANDWIDTH, FORM_ATTENTION):
        trial = _fit(form, x[train], y[train], profile, eff0, float(np.median(y[train])), n[train])
        errors.append((form, _mean_error(trial, n[test], y[test])))
    e_bw, e_att = errors[0][1], errors[1][1]
    form = FORM_ATTENTION if (e_att <= ATTENTION_GAIN * e_bw and e_bw - e_att >= ATTENTION_MIN_GAIN) else FORM_BANDWIDTH
    return _fit(form, x, y, profile, eff0, scale, n, tuple(errors))
