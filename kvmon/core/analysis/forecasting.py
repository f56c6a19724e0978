"""Forecast scheduling: the session's measured points, the decode fit and when it is made again, and what it says
(tokens and seconds until the context or VRAM is full, tok/s at the context milestones).

The robust fit costs tens of ms with hundreds of points, and each refit redraws the forecast: it is made on every
new point while there are few, then when the points grew by a quarter or a minute has passed. Until there is a
fit, the milestones are the ceiling times the session's median efficiency.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from typing import Any

from kvmon.core.alerts import GpuVramFacts
from kvmon.core.analysis.memo import PhysicsMemo
from kvmon.core.connection import reading_status
from kvmon.core.points import MeasuredPoints, ModelKey
from kvmon.core.readings import ServerReading
from kvmon.core.snapshot import SERVER_READ_STATUSES, Forecast, Milestone, ModelView, SlotView
from kvmon.physics import ceiling as ceiling_mod
from kvmon.physics import forecast as forecast_mod

EFFICIENCIES_KEPT = 600


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


class Forecaster:
    """The fit's session store and efficiencies, the fit itself and its schedule; one per analysed server."""

    def __init__(self, memo: PhysicsMemo, milestones: Sequence[int], max_fit_points: int) -> None:
        self._memo = memo
        self._milestone_depths = tuple(milestones)
        self._points = MeasuredPoints(max_fit_points, sample_max=0)
        self._efficiencies: deque[float] = deque(maxlen=EFFICIENCIES_KEPT)
        self._fit: Any = None
        self._fit_dirty = False  # a point came since the last fit
        self._fit_t: float | None = None  # when the fit was made, and on how many points
        self._fit_n = 0

    def reset(self) -> None:
        """Forget the session: points, efficiencies, the fit."""
        self._points.clear()
        self._forget()
        self._fit_n = 0

    def _forget(self) -> None:
        self._efficiencies.clear()
        self._fit, self._fit_dirty, self._fit_t = None, False, None

    def observe_model(self, key: ModelKey | None) -> None:
        """This poll's model: another one than measured so far starts the measurements again."""
        if self._points.observe_model(key):
            self._forget()

    def add_efficiency(self, efficiency: float) -> None:
        """One poll's decode ÷ ceiling (the milestones use their median until there is a fit)."""
        self._efficiencies.append(efficiency)

    def median_efficiency(self) -> float | None:
        """The median decode ÷ ceiling of this model's polls so far."""
        return _median(list(self._efficiencies))

    def add(self, r: ServerReading, model: ModelView, slots: Sequence[SlotView], context: int | None,
            decode: float | None) -> None:
        """This poll, as its Snapshot will show it: its point, if it has one, goes into the store the fit reads."""
        version = self._points.version
        self._points.add_poll(reading_status(r.state) in SERVER_READ_STATUSES, r.t_monotonic, r.url, model, slots,
                              context, decode)
        self._fit_dirty = self._fit_dirty or self._points.version != version

    def forecast(self, now: float, model: ModelView, context: int | None, decode: float | None,
                 devices: list[Any] | None, shape: Any, type_k: str, type_v: str,
                 vfacts: Sequence[GpuVramFacts], prov: dict[str, str]) -> Forecast:
        """Tokens/seconds until n_ctx and VRAM are full; tok/s at the context milestones."""
        tokens_ctx = secs_ctx = None
        if model.n_ctx and context is not None:
            tokens_ctx = int(ceiling_mod.tokens_until_full(model.n_ctx, context))
            if decode:
                secs_ctx = tokens_ctx / decode
        secs_vram = tokens_vram = None
        for f in vfacts:
            if f.seconds_until_full is not None and (secs_vram is None or f.seconds_until_full < secs_vram):
                secs_vram = f.seconds_until_full
        if secs_vram is not None and decode:
            tokens_vram = int(secs_vram * decode)
        # The robust fit costs tens of ms with hundreds of points, and each refit redraws the forecast: refit on
        # every new point while there are few, then when the points grew by a quarter or a minute has passed.
        n_pts = len(self._points)
        if self._fit_dirty and (n_pts < 16 or self._fit_t is None or n_pts >= 1.25 * self._fit_n
                                or now - self._fit_t >= 60.0):
            self._fit = forecast_mod.fit_decode(self._points.latest()) if n_pts >= 2 else None
            self._fit_dirty = False
            self._fit_t, self._fit_n = now, n_pts
        fit = self._fit
        milestones: tuple[Milestone, ...] = ()
        if model.n_ctx:
            n_ctx = model.n_ctx
            median_eff = self.median_efficiency() if fit is None else None
            # the same fit, devices and cache types give the same milestones: computed once, not every poll
            key = ("milestones", fit, None if devices is None else tuple(devices), type_k, type_v, n_ctx, median_eff)
            milestones = self._memo.get(shape, key, lambda: self._milestones(n_ctx, fit, devices, shape, type_k,
                                                                             type_v, median_eff))
        if milestones:
            prov["forecast.milestones"] = "computed" if fit is not None else "estimated"
        return Forecast(
            tokens_until_ctx_full=tokens_ctx, seconds_until_ctx_full=secs_ctx, tokens_until_vram_full=tokens_vram,
            seconds_until_vram_full=secs_vram, fit_a_s=getattr(fit, "a_s", None),
            fit_b_s_per_token=getattr(fit, "b_s_per_token", None), fit_points=len(self._points),
            milestones=milestones,
        )

    def _milestones(self, n_ctx: int, fit: Any, devices: list[Any] | None, shape: Any, type_k: str, type_v: str,
                    median_eff: float | None) -> tuple[Milestone, ...]:
        """tok/s at each context milestone up to n_ctx: the fit's prediction, or the ceiling × median efficiency."""
        out: list[Milestone] = []
        for m in self._milestone_depths:
            if m > n_ctx:
                break
            ceil_m = None
            if devices is not None and shape is not None:
                ceil_m = ceiling_mod.ceiling_tok_s(devices, self._memo.kv_in_use(shape, m, type_k, type_v))
            if fit is not None:
                pred = fit.predict(m)
                if pred is None or pred.tok_s is None or not math.isfinite(pred.tok_s):
                    continue
                out.append(Milestone(m, float(pred.tok_s), pred.low_tok_s, pred.high_tok_s, ceil_m))
            elif median_eff is not None and ceil_m:
                out.append(Milestone(m, ceil_m * median_eff, None, None, ceil_m))
        return tuple(out)
