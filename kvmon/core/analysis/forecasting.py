"""Forecast scheduling: the current regime's measured points, the decode fit and when it is made again, and what it
says (tokens and seconds until the context or VRAM is full, tok/s at the context milestones, the curve the hero
plot draws).

The fit is ``kvmon.physics.decode_model`` (bytes read per token at each depth, bounded by the ceiling) when the
model's shape and the devices are known, else the context-linear line of ``kvmon.physics.forecast`` (said so in
``reasons``), which is drawn only up to twice the deepest measured depth: the milestones past it are unknown.
On devices whose attention kernels change with depth (``kvmon.physics.attention_prior``: Metal) the
forecast stops at the switch until the session has measured past it, and says so (``Forecast.valid_to_tokens``,
the reason). It reads only the current regime's points (``kvmon.core.analysis.regimes``): a reload, another
n_ctx or a spill starts it again. It is made on every new point while there are few, then when the points grew by a
quarter or a minute has passed (each refit redraws the forecast).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvmon.core.alert_types import GpuVramFacts
from kvmon.core.analysis.ceiling import curve_depths
from kvmon.core.analysis.notes import Notes
from kvmon.core.analysis.regimes import RegimeKey, RegimeTracker
from kvmon.core.connection import reading_status
from kvmon.core.curve_config import AtlasView, CurveConfig, CurveMemory
from kvmon.core.points import MeasuredPoints
from kvmon.core.readings import Provenance, ServerReading
from kvmon.core.snapshot import SERVER_READ_STATUSES, Forecast, Milestone, ModelView, SlotView
from kvmon.physics import ceiling as ceiling_mod
from kvmon.physics import decode_model
from kvmon.physics import forecast as forecast_mod
from kvmon.physics.attention_prior import KernelSwitch, kernel_switch

EFFICIENCIES_KEPT = 600
LINE_REACH = 2.0  # the context-linear fallback is drawn up to this many times the deepest measured depth
Curve = tuple[tuple[int, float, float, float], ...]
NO_SHAPE_FIT = ("model shape or device bandwidths unknown: fitted as a straight line in context depth, with no "
                "ceiling to bound it")


class Forecaster:
    """The regime, its points and efficiencies, the fit itself and its schedule; one per analysed server."""

    def __init__(self, milestones: Sequence[int], max_fit_points: int,
                 curve_points: int = 48, memory: CurveMemory | None = None) -> None:
        """``memory``: the atlas of measured curves, whose earlier points of the same configuration the fit uses too
        (a changed configuration starts clean, as a new regime does)."""
        self._memory = memory
        self._config: CurveConfig | None = None
        self._atlas: AtlasView | None = None
        self._atlas_version: int | None = None
        self._earlier = np.empty((0, 2))
        self._milestone_depths = tuple(milestones)
        self._curve_points = curve_points
        self._points = MeasuredPoints(max_fit_points, sample_max=0)
        self._efficiencies: deque[float] = deque(maxlen=EFFICIENCIES_KEPT)
        self.regimes = RegimeTracker()
        self._fit: Any = None
        self._fit_reason: str | None = None
        self._fit_dirty = False  # a point came since the last fit
        self._fit_t: float | None = None  # when the fit was made, and on how many points
        self._fit_n = 0
        self._switch: KernelSwitch | None = None  # the kernel switch the fit was made for
        self._predicted: tuple[tuple[Any, int, int], tuple[tuple[Milestone, ...], Curve]] | None = None

    def _restart(self) -> None:
        self._points.clear()
        self._efficiencies.clear()
        self._fit, self._fit_reason, self._fit_dirty, self._fit_t = None, None, False, None
        self._fit_n = 0

    def observe(self, key: RegimeKey, *, reloaded: bool, t_monotonic: float, t_wall: float) -> None:
        """This poll's regime key: when what the speed depends on changed, the measurements start again."""
        if self.regimes.observe(key, reloaded=reloaded, t_monotonic=t_monotonic, t_wall=t_wall):
            self._restart()

    def add_efficiency(self, efficiency: float) -> None:
        """One poll's decode ÷ ceiling (the prior's efficiency while no point is measured)."""
        if math.isfinite(efficiency):
            self._efficiencies.append(efficiency)

    def median_efficiency(self) -> float | None:
        """The median decode ÷ ceiling of this regime's polls so far."""
        return statistics.median(self._efficiencies) if self._efficiencies else None

    def add(self, r: ServerReading, model: ModelView, slots: Sequence[SlotView], context: int | None,
            decode: float | None, rate_source: str | None = None) -> None:
        """This poll, as its Snapshot will show it: its point, if it has one, goes into the store the fit reads."""
        version = self._points.version
        self._points.add_poll(reading_status(r.state) in SERVER_READ_STATUSES, r.url, model, slots,
                              context, decode, rate_source=rate_source)
        if self._points.version != version:
            self._fit_dirty = True
            self.regimes.mark_context(context)  # the regime's first measured depth: where the plot marks it

    def remembered(self, config: CurveConfig | None) -> AtlasView | None:
        """The atlas's points of this poll's configuration (asked again when it changes, or a sweep added some);
        they join the fit's data. None without an atlas."""
        if self._memory is None:
            return None
        config = config.merged(self._config) if config is not None else self._config
        if config is None:
            return AtlasView()
        version = self._memory.version
        if config != self._config or version != self._atlas_version or self._atlas is None:
            self._config, self._atlas_version = config, version
            self._atlas = self._memory.view(config)
            pts = [(p.context_tokens, p.decode_tok_s) for p in self._atlas.points]
            self._earlier = np.asarray(pts, dtype=float).reshape(-1, 2)
            self._fit_dirty, self._fit_t = True, None
        return self._atlas

    def _refit(self, profile: Any, switch: KernelSwitch | None) -> None:
        points = self._points.latest()
        if self._earlier.size:
            points = np.concatenate([self._earlier, points])
        self._switch = switch
        if profile is not None:
            self._fit = decode_model.fit_bytes(points, profile, self.median_efficiency(),
                                               kernel_switch_tokens=switch.tokens if switch else None)
            self._fit_reason = None if self._fit is not None else "no decode speed measured yet in this regime"
            if self._fit is not None and switch is not None:
                self._fit_reason = (switch.note if self._fit.valid_to_tokens is not None else
                                    f"fitted on this session's own points past {switch.tokens // 1024}K "
                                    f"({switch.backend}'s attention kernels change with depth: no prior slope)")
        else:
            self._fit, why = forecast_mod.fit_decode_checked(points)
            self._fit_reason = NO_SHAPE_FIT if self._fit is not None else f"{NO_SHAPE_FIT}; none yet: {why}"

    def forecast(self, now: float, model: ModelView, context: int | None, decode: float | None,
                 devices: list[Any] | None, shape: Any, type_k: str, type_v: str,
                 vfacts: Sequence[GpuVramFacts], vendors: Sequence[str | None] = ()) -> tuple[Forecast, Notes]:
        """Tokens/seconds until n_ctx and VRAM are full; tok/s at the context milestones and along the curve.

        ``vendors``: of the GPUs the model runs on (where attention kernels change with depth, the forecast stops
        at the switch until this session's points pass it)."""
        prov: dict[str, Provenance] = {}
        reasons: dict[str, str] = {}
        tokens_ctx = secs_ctx = None
        if model.n_ctx and context is not None:
            tokens_ctx = int(ceiling_mod.tokens_until_full(model.n_ctx, context))
            if decode:
                secs_ctx = tokens_ctx / decode
        tokens_vram = None
        secs_vram = min((f.seconds_until_full for f in vfacts if f.seconds_until_full is not None), default=None)
        if secs_vram is not None and decode:
            tokens_vram = int(secs_vram * decode)
        profile = (decode_model.ReadProfile.of(devices, shape, type_k, type_v)
                   if devices is not None and shape is not None else None)
        switch = kernel_switch(vendors)
        kind = "bytes" if profile is not None else "line"
        n_pts = len(self._points)
        stale_kind = self._fit is not None and (isinstance(self._fit, decode_model.BytesFit) != (kind == "bytes"))
        stale_profile = isinstance(self._fit, decode_model.BytesFit) and self._fit.profile != profile
        no_fit_yet = self._fit is None and profile is not None and self.median_efficiency() is not None
        stale_switch = switch != self._switch
        if (self._fit_dirty and (n_pts < 16 or self._fit_t is None or n_pts >= 1.25 * self._fit_n
                                 or now - self._fit_t >= 60.0)) or stale_kind or stale_profile or no_fit_yet \
                or stale_switch:
            self._refit(profile, switch)
            self._fit_dirty = False
            self._fit_t, self._fit_n = now, n_pts
        fit = self._fit
        milestones: tuple[Milestone, ...] = ()
        curve: Curve = ()
        if model.n_ctx and fit is not None:
            n_ctx = model.n_ctx
            reach = n_ctx
            if isinstance(fit, forecast_mod.DecodeFit):  # a line with no physics under it: only near its points
                reach = min(n_ctx, int(LINE_REACH * fit.context_max))
                beyond = [m for m in self._milestone_depths if reach < m <= n_ctx]
                if beyond:
                    reasons["forecast.milestones"] = (
                        f"{', '.join(_k(m) for m in beyond)} unknown: a straight line fitted on depths up to "
                        f"{int(fit.context_max):,} is not drawn past twice the deepest measured depth ({reach:,}); "
                        "the model's shape and the devices' bandwidths would give a forecast to n_ctx")
            # the same fit and n_ctx give the same milestones and curve: made once a fit (saves 1.2 ms a poll,
            # 0.07 CPU-s/min at 1 Hz: bench/analysis_cost.py's replay)
            if self._predicted is None or self._predicted[0] != (fit, n_ctx, reach):
                self._predicted = ((fit, n_ctx, reach), self._predict(fit, n_ctx, reach))
            milestones, curve = self._predicted[1]
        past_switch = isinstance(fit, decode_model.BytesFit) and fit.past_kernel_switch
        if self._fit_reason and not past_switch:  # a note on the fit, not something unknown
            reasons["forecast"] = self._fit_reason
        if milestones:
            prov["forecast.milestones"] = (Provenance.COMPUTED if isinstance(fit, decode_model.BytesFit)
                                           and fit.form != decode_model.FORM_CEILING_SCALED else Provenance.ESTIMATED)
        bytes_fit = fit if isinstance(fit, decode_model.BytesFit) else None
        line = fit if isinstance(fit, forecast_mod.DecodeFit) else None
        valid_to = bytes_fit.valid_to_tokens if bytes_fit else None
        valid_to = int(valid_to) if valid_to is not None and model.n_ctx and valid_to < model.n_ctx else None
        if valid_to is not None:
            prov["forecast.valid_to_tokens"] = Provenance.TABLE  # the kernel switch, from kvmon.physics.attention_prior
        return Forecast(
            tokens_until_ctx_full=tokens_ctx, seconds_until_ctx_full=secs_ctx, tokens_until_vram_full=tokens_vram,
            seconds_until_vram_full=secs_vram,
            fit_a_s=bytes_fit.a_s if bytes_fit else line.a_s if line else None,
            fit_b_s_per_token=bytes_fit.slope_s_per_token if bytes_fit else line.b_s_per_token if line else None,
            fit_points=n_pts + len(self._earlier), milestones=milestones, regime=self.regimes.regime,
            fit_form=bytes_fit.form if bytes_fit else "context_linear" if line else None,
            fit_efficiency=bytes_fit.efficiency if bytes_fit else None,
            fit_overhead_s=bytes_fit.overhead_s if bytes_fit else None,
            fit_attention_factor=bytes_fit.attention_factor if bytes_fit else None,
            fit_reason=self._fit_reason, curve=curve,
            valid_to_tokens=valid_to,
        ), Notes(prov, reasons)

    def _predict(self, fit: Any, n_ctx: int, reach: int) -> tuple[tuple[Milestone, ...], Curve]:
        """tok/s at each context milestone up to ``reach`` (n_ctx, or less for a line), and along the curve's depths
        (with the ceiling, if known)."""
        limit = fit.valid_to_tokens if isinstance(fit, decode_model.BytesFit) else None
        if limit is not None:  # kernels change past it: no numbers beyond, the curve ends there
            reach = min(reach, int(limit))
        depths = [m for m in self._milestone_depths if m <= reach]
        along = [d for d in curve_depths(n_ctx, self._curve_points) if d < reach or (d == reach == n_ctx)]
        if reach < n_ctx or not along or along[-1] != reach:
            along.append(reach)
        if isinstance(fit, decode_model.BytesFit):
            xs = np.asarray(depths + along, dtype=float)
            tok_s, low, high = fit.predict_many(xs)
            ceil = 1.0 / fit.profile.roofline_s(xs)
        else:
            preds = [fit.predict(float(d)) for d in depths + along]
            tok_s = np.asarray([p.tok_s for p in preds])
            low = np.asarray([p.low_tok_s for p in preds])
            high = np.asarray([p.high_tok_s for p in preds])
            ceil = None
        k = len(depths)
        milestones = tuple(Milestone(m, float(tok_s[i]), float(low[i]), float(high[i]),
                                     None if ceil is None else float(ceil[i])) for i, m in enumerate(depths))
        # the curve is for drawing: 4 significant digits (rounded down, so it stays under the ceiling) keep a
        # recorded line ~2 KB shorter than full floats would
        curve = tuple((d, _down4(tok_s[k + i]), _down4(low[k + i]), _down4(high[k + i])) for i, d in enumerate(along))
        return milestones, curve


def _k(tokens: int) -> str:
    """A milestone as people name it: 8192 → "8K"."""
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else f"{tokens:,}"


def _down4(v: float) -> float:
    """``v`` (> 0) rounded down to 4 significant digits."""
    q = 10.0 ** (math.floor(math.log10(v)) - 3)
    return float(f"{math.floor(v / q) * q:.4g}")
