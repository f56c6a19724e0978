"""The free-VRAM trend: each GPU's free VRAM (and other processes' use) over the last minute, and when, at that
pace, it runs out; the VRAM alert and the "VRAM full in" forecast read it. A step in the server's own use (a load, a
reload, another model of a router shown) starts the trend again, and only a steady fall counts (another program's
load that stopped, or a moment's blip, is not VRAM running out).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kvmon.core.alert_types import AlertThresholds, GpuVramFacts
from kvmon.core.readings import GpuSetReading
from kvmon.core.snapshot import GpuView


@dataclass
class _VramTrack:
    """One GPU's free VRAM (and other processes' use) over the trend window, as parallel columns."""

    t: deque[float] = field(default_factory=deque)
    free: deque[float] = field(default_factory=deque)
    others: deque[float | None] = field(default_factory=deque)
    changed_at: float | None = None  # when free VRAM last differed from the sample before (all later ones equal)
    server: float | None = None  # what the server itself held when this trend began

    def restart(self) -> None:
        """Forget the samples: the trend starts again from the next one."""
        for col in (self.t, self.free, self.others):
            col.clear()
        self.changed_at = None


class VramTrend:
    """Free VRAM per GPU over ``thresholds.vram_trend_window_s``; a least-squares slope once it spans enough time."""

    def __init__(self, thresholds: AlertThresholds) -> None:
        self.thresholds = thresholds
        self._gpus: dict[int, _VramTrack] = {}

    def track(self, t: float, gpus: GpuSetReading | None) -> None:
        """Add this poll's free VRAM (and other processes' use) of each GPU; drop what left the window."""
        if gpus is None or gpus.unavailable_reason:
            return
        window = self.thresholds.vram_trend_window_s
        for g in gpus.gpus:
            if g.vram_free_bytes is None:
                continue
            tr = self._gpus.setdefault(g.index, _VramTrack())
            server = float(g.server_used_bytes) if g.server_used_bytes is not None else None
            if server is not None and (tr.server is None or
                                       abs(server - tr.server) >= self.thresholds.vram_trend_min_drop_bytes):
                # the server (re)loaded, unloaded, or another of its models is shown: a step of its own, not VRAM
                # running out; what others take is measured again from here
                if tr.server is not None:
                    tr.restart()
                tr.server = server
            others = float(g.other_processes_used_bytes) if g.other_processes_used_bytes is not None else None
            free = float(g.vram_free_bytes)
            if not tr.free or tr.free[-1] != free:
                tr.changed_at = t
            tr.t.append(t)
            tr.free.append(free)
            tr.others.append(others)
            while tr.t and tr.t[0] < t - window:
                tr.t.popleft()
                tr.free.popleft()
                tr.others.popleft()

    def facts(self, gviews: Sequence[GpuView]) -> tuple[GpuVramFacts, ...]:
        """Each GPU's free VRAM and, once the window holds enough, how fast it falls and when it runs out."""
        th = self.thresholds
        out = []
        for g in gviews:
            tr = self._gpus.get(g.index)
            secs = drop = growth = span = None
            if tr is not None and len(tr.t) >= 3:
                span = tr.t[-1] - tr.t[0]
                if span >= th.vram_trend_min_span_s:
                    n = len(tr.t)  # least-squares slope of free VRAM over time (none while it stood still)
                    slope = 0.0
                    if tr.changed_at is None or tr.changed_at > tr.t[0]:
                        ts, frees = np.fromiter(tr.t, float, n), np.fromiter(tr.free, float, n)
                        dt, df = ts - ts.mean(), frees - frees.mean()
                        var = float(dt @ dt)
                        slope = float(dt @ df) / var if var else 0.0
                    fs = (tr.free[0], tr.free[-1])
                    drop = int(max(0.0, fs[0] - fs[-1]))
                    if tr.others[0] is not None and tr.others[-1] is not None:
                        growth = int(tr.others[-1] - tr.others[0])
                    full = g.kind != "unified_memory" and fs[-1] < th.vram_full_free_bytes  # no "full in": full
                    if slope < 0 and -slope * span >= th.vram_trend_min_drop_bytes and _steady(tr, th) and not full:
                        secs = max(0.0, fs[-1] / -slope)
            out.append(GpuVramFacts(index=g.index, name=g.name, vram_free_bytes=g.vram_free_bytes,
                                    vram_total_bytes=g.vram_total_bytes, seconds_until_full=secs,
                                    free_drop_bytes=drop, other_processes_growth_bytes=growth, window_s=span,
                                    other_processes_bytes=g.other_processes_bytes,
                                    unified=g.kind == "unified_memory"))
        return tuple(out)


def _steady(tr: _VramTrack, th: AlertThresholds) -> bool:
    """Free VRAM fell in each quarter of the last ``vram_trend_steady_s``: it is running out, not a step that stopped
    (another program or model loading) nor a moment's blip."""
    span = th.vram_trend_steady_s
    if tr.t[-1] - tr.t[0] < span:
        return False
    ts, frees = np.fromiter(tr.t, float, len(tr.t)), np.fromiter(tr.free, float, len(tr.free))
    at = np.interp(tr.t[-1] - span * np.array([1.0, 0.75, 0.5, 0.25, 0.0]), ts, frees)
    return bool(np.all(np.diff(at) < 0))


class SwapTrend:
    """Host swap in use over the trend window: how much it grew (a model or cache in RAM being paged out)."""

    def __init__(self, thresholds: AlertThresholds) -> None:
        self.thresholds = thresholds
        self._t: deque[float] = deque()
        self._used: deque[int] = deque()

    def track(self, t: float, swap_used_bytes: int | None) -> int | None:
        """Add this poll's swap use; the growth over the window (from its lowest point), or None while too short."""
        if swap_used_bytes is None:
            return None
        self._t.append(t)
        self._used.append(int(swap_used_bytes))
        while self._t and self._t[0] < t - self.thresholds.vram_trend_window_s:
            self._t.popleft()
            self._used.popleft()
        if len(self._t) < 3 or self._t[-1] - self._t[0] < self.thresholds.vram_trend_min_span_s:
            return None
        return max(0, self._used[-1] - min(self._used))
