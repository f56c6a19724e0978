"""Forecast decode speed from the bytes each step reads: a fit bounded by the ceiling it is drawn against.

The model. At depth n a decode step reads the weights a token uses (``kvmon.physics.weights``: all of a dense
model, the shared part plus the routed experts of a MoE), W_d bytes on device d, and the KV cache in use, kv(n)
bytes (``kvmon.physics.kv.kv_bytes_in_use``: SWA and chunked layers capped at their window, MLA the latent only,
recurrent layers a fixed state that does not grow), a fraction f_d of it on device d, each at that device's
bandwidth B_d. The roofline time is R(n) = R_w + x(n), with R_w = Σ W_d / B_d and x(n) = kv(n) · Σ f_d / B_d;
the ceiling is 1 / R(n). Measured seconds per token are fitted as

    t(n) = a + b · x(n),        a ≥ R_w,        b ≥ 1

a is the step at empty context (the weights at the bandwidth reached, plus fixed overhead), b the seconds one
second of peak-bandwidth KV read really costs (the read at the bandwidth reached, plus attention compute that
grows with depth). Both bounds hold for every value the fit considers, so t(n) ≥ R(n) at every depth: the forecast
and its band are never above the ceiling, and never a zero or negative time.

The fit is Bayesian in b. Its prior is the attention prior of the model's class (``kvmon.physics.attention_prior``,
estimated from published sweeps): log b ~ Normal. Points are grouped into depth bins of ``BIN_TOKENS`` (median time
per bin, at most ``MAX_BINS``); residuals are relative (timings jitter in proportion) and Huber-weighted, so a
stalled sample barely moves the fit; their spread and the weights come from the free line through the points (what
they say of themselves), at least ``attention_prior.FIT_SPREAD_FLOOR`` (what published sweeps' points show about
their own lines). For each b on a grid in log b, a has a Gaussian conditional posterior (a weak prior centred on the
ceiling times the measured efficiency, sd ``PRIOR_SD_LEVEL`` of it, cut at a = R_w), which gives that b's marginal
likelihood in closed form; with the prior on log b that is the posterior over the grid, refined once around its
mass. Two depths of a hybrid, where the KV is a small share of the step, then fix b through the prior; many depths
spread over a large KV share fix it through the data.

The forecast at each depth is the median, and the 80% band the 10% and 90% points, of t(n) over: b on its grid
(the prior's spread and the fit's uncertainty), a's conditional posterior and a relative scatter of bins about the
line at the residual spread (at least ``attention_prior.FIT_SPREAD_FLOOR``; ``TIMING_NOISE_FRACTION`` while nothing is
measured), and a drift of the slope past the deepest fitted depth (slopes change with depth: log b moves by
``attention_prior.DRIFT_PER_DOUBLING`` standard deviations per doubling of the KV read beyond it, estimated from the
published sweeps). Each point of that mixture is held at the roofline and rises with depth, so every quantile does
too: the forecast and both edges of the band fall monotonically with depth (no bulge), and the fast edge never
crosses the ceiling.

Forms (what the Snapshot calls the fit): ``ceiling_scaled`` with fewer than two depth bins (the level from the
measured efficiency, the slope from the prior: a wide band); otherwise ``bandwidth`` when the fitted attention work
beyond the bytes is under ``ATTENTION_SHARE`` of the KV read at the bandwidth reached, else ``bandwidth+attention``.

Where attention kernels change with depth (``attention_prior.KERNEL_SWITCHES``: Metal), a slope measured at
shallow depths says little past the switch: ``fit_bytes`` marks the fit valid only up to it (``valid_to_tokens``)
until the session's own points reach beyond it; then they replace the class prior (a flat one in its place).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np

from kvmon.physics.attention_prior import (
    DRIFT_PER_DOUBLING,
    FIT_SPREAD_FLOOR,
    AttentionPrior,
    attention_class,
    prior_for,
)
from kvmon.physics.ceiling import DeviceShare, step_time_parts
from kvmon.physics.forecast import TIMING_NOISE_FRACTION, Points, Prediction, clean_points, reduce_points
from kvmon.physics.kv import kv_read_profile
from kvmon.physics.shape import ModelShape

FORM_CEILING_SCALED = "ceiling_scaled"
FORM_BANDWIDTH = "bandwidth"
FORM_ATTENTION = "bandwidth+attention"

BIN_TOKENS = 256
MAX_BINS = 300
PRIOR_SD_LEVEL = 0.5
ATTENTION_SHARE = 0.05
HUBER_K = 1.345
ROBUST_MIN_BINS = 6
IRLS_ITERATIONS = 4
GRID_COARSE = 64
GRID_FINE = 24
GRID_SIGMAS = 4.0
FLAT_LOG_SD = 3.0  # the prior once a session's own points replace it (kernels that change with depth)
BAND = (0.10, 0.90)  # the 80% interval


def _stratified_z(k: int) -> np.ndarray:
    return np.array([NormalDist().inv_cdf(p) for p in (np.arange(k) + 0.5) / k])


_SPREAD_Z = _stratified_z(5)  # stratified points of each node's normal (a's spread and the timing jitter)
_DRIFT_Z = _stratified_z(5)
# a slope's drift must keep every sample rising with depth: b·x·(x/x₀)^(τz/ln 2) rises while τ|z| < ln 2
_DRIFT_MAX = 0.6 * math.log(2.0) / float(np.max(np.abs(_DRIFT_Z)))
_TAIL_WEIGHT = 2e-3  # the lightest grid nodes, together under this share, are left out of the predictive


@dataclass(frozen=True)
class ReadProfile:
    """Seconds one step spends reading memory at depth n at peak bandwidth: ``weights_s + kv_s_per_byte × kv(n)``,
    kv(n) = unbounded·n + Σ bytes·min(n, window) (the shape's KV read profile at the cache types in use), and the
    class of its attention (which prior the slope starts from)."""

    weights_s: float
    kv_s_per_byte: float
    kv_unbounded_bytes_per_token: float
    kv_windows: tuple[tuple[int, int], ...] = ()
    attention_class: str = "gqa"

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
        on_host = any(d.location == "host" and d.kv_fraction > 0 for d in devices)
        return ReadProfile(weights_s, kv_s_per_byte, float(unbounded), windows, attention_class(shape, on_host))

    def kv_s(self, context_tokens: np.ndarray | float) -> np.ndarray:
        """Seconds reading the KV cache at each depth (at peak bandwidth)."""
        n = np.nan_to_num(np.asarray(context_tokens, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
        n = np.maximum(n, 0.0)
        kv: np.ndarray = self.kv_unbounded_bytes_per_token * n
        for window, n_bytes in self.kv_windows:
            kv = kv + n_bytes * np.minimum(n, float(window))
        return kv * self.kv_s_per_byte

    def roofline_s(self, context_tokens: np.ndarray | float) -> np.ndarray:
        """Seconds per token at the ceiling (1 / ceiling tok/s) at each depth."""
        return self.weights_s + self.kv_s(context_tokens)


@dataclass(frozen=True)
class BytesFit:
    """t(n) = a + b × kv_s(n) on ``profile``: the posterior over b on a grid (with a's conditional posterior at each
    node) and the residual spread; ``a_s`` and ``b`` are its point estimates (the median b, a's mean there)."""

    form: str
    a_s: float
    b: float  # seconds per second of KV read at peak bandwidth (≥ 1)
    log_b_nodes: tuple[float, ...]
    node_weights: tuple[float, ...]
    a_means: tuple[float, ...]
    a_sds: tuple[float, ...]
    residual_sd_fraction: float
    n_bins: int
    profile: ReadProfile
    prior_efficiency: float
    prior: AttentionPrior
    context_max: float = 0.0
    valid_to_tokens: float | None = None  # beyond this depth the kernels change and the slope is not trusted
    past_kernel_switch: bool = False  # points past a kernel switch: the session's own slope, no class prior
    drift_per_doubling: float = DRIFT_PER_DOUBLING

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
        """γ: extra seconds per second of KV read that grow with depth (attention compute beyond the bytes)."""
        return max(0.0, self.b - 1.0 / self.efficiency)

    @property
    def slope_s_per_token(self) -> float:
        """Seconds per token added by one more token of depth beyond every window (the line's slope there)."""
        return self.b * self.profile.kv_unbounded_bytes_per_token * self.profile.kv_s_per_byte

    def time_s(self, context_tokens: np.ndarray | float) -> np.ndarray:
        """Point-estimate seconds per token at each depth, never below the roofline."""
        kv = self.profile.kv_s(context_tokens)
        return np.maximum(self.a_s + self.b * kv, self.profile.weights_s + kv)

    def predict(self, context: float) -> Prediction:
        """Forecast tok/s at ``context`` with an 80% interval; every value positive and at most the ceiling."""
        tok_s, low, high = self.predict_many(np.asarray([context], dtype=float))
        return Prediction(tok_s=float(tok_s[0]), low_tok_s=float(low[0]), high_tok_s=float(high[0]))

    def predict_many(self, contexts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tok/s, low, high) at each depth: 1 / the median, 90% and 10% points of the predictive time."""
        q = predictive_times(self, np.asarray(contexts, dtype=float), (0.5, BAND[1], BAND[0]))
        return 1.0 / q[0], 1.0 / q[1], 1.0 / q[2]


def predictive_times(fit: BytesFit, contexts: np.ndarray, probs: Sequence[float]) -> np.ndarray:
    """Quantiles (rows, one per prob) of the predictive seconds per token at each depth (columns).

    Per grid node of b and per drift point d(n) of the slope past the deepest fitted depth, the time is Normal with
    mean m_a + b·d(n)·x(n) (a's conditional mean) and variance a's plus the jitter's (σ·mean)², taken at stratified
    points; each point is held at the roofline (which is also where a's cut at R_w ends it). Every such point rises
    with depth (σ·|z| < 1), so each weighted quantile does too; a running maximum over the sorted depths keeps that
    exact against interpolation and rounding.
    """
    n = np.asarray(contexts, dtype=float).ravel()
    w = np.asarray(fit.node_weights)
    keep = _heavy_nodes(w)
    b = np.exp(np.asarray(fit.log_b_nodes)[keep])
    w = w[keep] / w[keep].sum()
    lo = fit.profile.weights_s
    a_mean, a_sd = np.asarray(fit.a_means)[keep], np.asarray(fit.a_sds)[keep]  # a < R_w ends at the roofline
    x = fit.profile.kv_s(n)  # (m,)
    roof = lo + x
    x_ref = float(fit.profile.kv_s(fit.context_max)) if fit.n_bins else 0.0
    doublings = np.log2(np.maximum(x / x_ref, 1.0)) if x_ref > 0 else np.zeros_like(x)
    tau = min(max(fit.drift_per_doubling, 0.0), _DRIFT_MAX)
    drift = np.exp(tau * _DRIFT_Z[:, None] * doublings[None, :])  # (D, m)
    mean = a_mean[:, None, None] + b[:, None, None] * drift[None, :, :] * x[None, None, :]  # (J, D, m)
    sd = np.sqrt(a_sd[:, None, None] ** 2 + (fit.residual_sd_fraction * mean) ** 2)
    t = mean[:, :, None, :] + sd[:, :, None, :] * _SPREAD_Z[None, None, :, None]  # (J, D, Z, m)
    t = np.maximum(t, roof).reshape(-1, n.size)
    per = _DRIFT_Z.size * _SPREAD_Z.size
    weights = np.repeat(w, per) / per
    out = np.empty((len(probs), n.size))
    order = np.argsort(t, axis=0)
    ts = np.take_along_axis(t, order, axis=0)
    w_sorted = weights[order]
    mid = np.cumsum(w_sorted, axis=0) - w_sorted / 2.0  # each point's cumulative weight at its middle
    cols = np.arange(n.size)
    last = ts.shape[0] - 1
    for i, p in enumerate(probs):  # interpolated between points: a lone node's strata give its normal's quantiles
        hi = np.minimum((mid < p).sum(axis=0), last)
        lo_i = np.maximum(hi - 1, 0)
        m_lo, m_hi = mid[lo_i, cols], mid[hi, cols]
        frac = np.clip((p - m_lo) / np.where(m_hi > m_lo, m_hi - m_lo, 1.0), 0.0, 1.0)
        out[i] = ts[lo_i, cols] + frac * (ts[hi, cols] - ts[lo_i, cols])
    by_depth = np.argsort(n, kind="stable")
    out[:, by_depth] = np.maximum.accumulate(out[:, by_depth], axis=1)
    return np.maximum(out, roof)


def _heavy_nodes(w: np.ndarray) -> np.ndarray:
    """The grid nodes that matter: all but the lightest ones whose weights add up to under ``_TAIL_WEIGHT``."""
    order = np.argsort(w)
    light = order[np.cumsum(w[order]) < _TAIL_WEIGHT * w.sum()]
    keep = np.ones(w.size, dtype=bool)
    keep[light] = False
    return keep


_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _ndtr(z: np.ndarray) -> np.ndarray:
    """The standard normal CDF (Abramowitz & Stegun 7.1.26 for erf, absolute error < 1.5e-7)."""
    v = np.asarray(z, dtype=float) / math.sqrt(2.0)
    t = 1.0 / (1.0 + _ERF_P * np.abs(v))
    poly = t * (_ERF_A[0] + t * (_ERF_A[1] + t * (_ERF_A[2] + t * (_ERF_A[3] + t * _ERF_A[4]))))
    erf = 1.0 - poly * np.exp(-v * v)
    return 0.5 * (1.0 + np.sign(v) * erf)


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
    medians: np.ndarray = (vs[lo] + vs[hi]) / 2.0
    return medians


@dataclass(frozen=True)
class _Posterior:
    log_b: np.ndarray
    weights: np.ndarray
    a_mean: np.ndarray
    a_sd: np.ndarray


def _posterior(x: np.ndarray, y: np.ndarray, hub: np.ndarray, sd: float, weights_s: float, a0: float,
               prior: AttentionPrior, log_b: np.ndarray) -> _Posterior:
    """The posterior over the ``log_b`` grid (relative residuals 1 − (a + b·x)/y, spread ``sd``, Huber weights)
    with a's Gaussian conditional posterior at each node, cut at a ≥ R_w (units of the median step)."""
    u = 1.0 / y
    sa = PRIOR_SD_LEVEL * a0
    b = np.exp(log_b)
    s = 1.0 - b[:, None] * (x * u)[None, :]  # (J, n): what a·u must explain
    prec = float(np.sum(hub * u * u)) / sd**2 + 1.0 / sa**2
    mean = (s @ (hub * u) / sd**2 + a0 / sa**2) / prec
    quad = (s * s) @ hub / sd**2 + a0**2 / sa**2 - prec * mean**2
    a_sd = 1.0 / math.sqrt(prec)
    log_mass = np.log(np.maximum(_ndtr((mean - weights_s) / a_sd), 1e-300))  # the share of a above R_w
    log_prior = -0.5 * ((log_b - prior.log_b_mean) / prior.log_b_sd) ** 2
    logw = -0.5 * quad + log_mass + log_prior
    w = np.exp(logw - logw.max())
    return _Posterior(log_b, w / w.sum(), mean, np.full_like(mean, a_sd))


def _grid(prior: AttentionPrior, hint_log_b: float | None, n: int = GRID_COARSE) -> np.ndarray:
    top = prior.log_b_mean + GRID_SIGMAS * prior.log_b_sd
    if hint_log_b is not None and math.isfinite(hint_log_b):
        top = max(top, hint_log_b + 1.0)
    return np.linspace(0.0, max(top, 0.5), n)


def _refine(post: _Posterior) -> np.ndarray:
    m = float(np.sum(post.weights * post.log_b))
    s = math.sqrt(max(float(np.sum(post.weights * (post.log_b - m) ** 2)), 0.0))
    step = float(post.log_b[1] - post.log_b[0]) if post.log_b.size > 1 else 0.1
    half = max(GRID_SIGMAS * 1.5 * s, 2.0 * step)
    return np.linspace(max(0.0, m - half), m + half, GRID_FINE)


def _free_ab(x: np.ndarray, y: np.ndarray, hub: np.ndarray | None = None) -> tuple[float, float] | None:
    """Unconstrained relative least squares of y ≈ a + b·x (a and b free); None with fewer than two depths."""
    if x.size < 2 or float(np.ptp(x)) <= 0:
        return None
    u = 1.0 / y
    w = np.ones_like(y) if hub is None else hub
    design = np.column_stack((u, x * u)) * np.sqrt(w)[:, None]
    coef, *_ = np.linalg.lstsq(design, np.sqrt(w), rcond=None)
    return float(coef[0]), float(coef[1])


def free_slope(points: Sequence[tuple[float, float]], profile: ReadProfile) -> float | None:
    """b of the unconstrained relative least-squares line t = a + b·x(n) through (context tokens, tok/s) points:
    what a sweep says its slope is, with no prior (how ``kvmon.physics.attention_prior`` is estimated)."""
    n, y = clean_points(points)
    n, y = _bins(n, y)
    found = _free_ab(profile.kv_s(n), y)
    return None if found is None else found[1]


def _solve(x: np.ndarray, y: np.ndarray, weights_s: float, a0: float,
           prior: AttentionPrior) -> tuple[_Posterior, float]:
    """The grid posterior (coarse, then refined); the spread and Huber weights from the free line."""
    n = y.size
    sd = FIT_SPREAD_FLOOR
    hub = np.ones(n)
    free = _free_ab(x, y)
    # judged by the free line (what the points say of themselves), not the posterior: a prior far from the data
    # would otherwise widen the spread it is judged by, and win by that
    for _ in range(IRLS_ITERATIONS if n > 2 else 0):
        free = _free_ab(x, y, hub)
        if free is None:
            break
        resid = 1.0 - (free[0] + free[1] * x) / y
        # a robust scale (the median absolute deviation) once there are enough bins to tell an outlier from the
        # rest, so one stalled sample cannot widen the spread it is judged by; the Huber weights then take it out
        if n >= ROBUST_MIN_BINS:
            spread = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
        else:
            spread = math.sqrt(float(np.sum(hub * resid**2)) / max(1.0, float(hub.sum()) - 2))
        sd = max(FIT_SPREAD_FLOOR, spread)
        hub = np.minimum(1.0, HUBER_K * sd / np.maximum(np.abs(resid), 1e-300))
    hint = math.log(free[1]) if free is not None and free[1] > 1.0 else None
    post = _posterior(x, y, hub, sd, weights_s, a0, prior, _grid(prior, hint))
    post = _posterior(x, y, hub, sd, weights_s, a0, prior, _refine(post))
    return post, sd


def _fit(x: np.ndarray, y: np.ndarray, n_tokens: np.ndarray, profile: ReadProfile, eff0: float,
         prior: AttentionPrior, valid_to: float | None) -> BytesFit:
    scale = float(np.median(y)) if y.size else profile.weights_s / eff0
    w = profile.weights_s / scale
    a0 = w / eff0
    if y.size:
        post, sd = _solve(x / scale, y / scale, w, a0, prior)
    else:  # the prior alone: the level from the polls' efficiency, the slope from the class
        log_b = _grid(prior, None, GRID_FINE)
        lw = -0.5 * ((log_b - prior.log_b_mean) / prior.log_b_sd) ** 2
        wts = np.exp(lw - lw.max())
        post = _Posterior(log_b, wts / wts.sum(), np.full_like(log_b, a0), np.full_like(log_b, PRIOR_SD_LEVEL * a0))
        sd = TIMING_NOISE_FRACTION
    # the point estimates: the posterior median of log b (interpolated between nodes), a's mean there
    cdf = np.cumsum(post.weights) - post.weights / 2.0
    log_b_med = float(np.interp(0.5, cdf, post.log_b))
    b = max(1.0, math.exp(log_b_med))
    a = max(float(np.interp(log_b_med, post.log_b, post.a_mean)) * scale, profile.weights_s)
    fit = BytesFit(
        form=FORM_CEILING_SCALED, a_s=a, b=b, log_b_nodes=tuple(float(v) for v in post.log_b),
        node_weights=tuple(float(v) for v in post.weights), a_means=tuple(float(v) * scale for v in post.a_mean),
        a_sds=tuple(float(v) * scale for v in post.a_sd), residual_sd_fraction=max(sd, FIT_SPREAD_FLOOR),
        n_bins=int(y.size), profile=profile, prior_efficiency=eff0, prior=prior,
        context_max=float(n_tokens.max()) if n_tokens.size else 0.0, valid_to_tokens=valid_to)
    if y.size < 2:
        return fit
    form = FORM_ATTENTION if fit.attention_factor * fit.efficiency >= ATTENTION_SHARE else FORM_BANDWIDTH
    return replace(fit, form=form)


def fit_bytes(points: Points, profile: ReadProfile,
              prior_efficiency: float | None = None, *, kernel_switch_tokens: int | None = None,
              prior: AttentionPrior | None = None) -> BytesFit | None:
    """Fit (context tokens, decode tok/s) points on ``profile`` (see the module docstring).

    ``prior_efficiency``: the measured ÷ ceiling to scale the ceiling by when no point is given (the polls'
    median); with points, their own median is used. None when there is neither. ``kernel_switch_tokens``: the depth
    past which these devices' attention kernels change; the fit is valid only up to it until a point lies beyond,
    and then the session's points replace the class prior. ``prior``: the attention prior (default: the class's).
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
    prior = prior or prior_for(profile.attention_class)
    valid_to: float | None = None
    if kernel_switch_tokens is not None:
        if n.size and float(n.max()) > kernel_switch_tokens:  # the session went deeper: its points decide
            prior = AttentionPrior(prior.attention_class, prior.log_b_mean, FLAT_LOG_SD)
        else:
            valid_to = float(kernel_switch_tokens)
    order = np.argsort(n, kind="stable")
    n, y = n[order], y[order]
    x = profile.kv_s(n)
    fit = _fit(x, y, n, profile, eff0, prior, valid_to)
    if kernel_switch_tokens is not None and valid_to is None:
        fit = replace(fit, past_kernel_switch=True)
    return fit


def heldout_error(points: Sequence[tuple[float, float]], profile: ReadProfile, prior_efficiency: float | None = None,
                  *, kernel_switch_tokens: int | None = None, prior: AttentionPrior | None = None) -> float | None:
    """Mean |forecast ÷ measured − 1| on the deepest third of the depth bins when fitted on the rest (the fit's
    held-out check; the other arguments as for ``fit_bytes``); None with fewer than three bins."""
    n, y = _bins(*clean_points(points))
    if n.size < 3:
        return None
    order = np.argsort(n, kind="stable")
    n, y = n[order], y[order]
    k = max(1, round(n.size / 3))
    trial = fit_bytes(list(zip(n[:-k], 1.0 / y[:-k], strict=True)), profile, prior_efficiency,
                      kernel_switch_tokens=kernel_switch_tokens, prior=prior)
    if trial is None:
        return None
    tok_s, _low, _high = trial.predict_many(n[-k:])
    return float(np.mean(np.abs(tok_s * y[-k:] - 1.0)))  # |forecast ÷ measured − 1| in tok/s, y being s/token
