"""A session summed up, without Qt: peak and final context, speeds, efficiency, the alerts seen and the measured
points, from the live snapshots one at a time (``Tally``) or from a recording (``summarize``).

The report card (``kvmon.gui.reportcard``) draws it; anything with Snapshots may ask for it.
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvmon.core.points import MeasuredPoints
from kvmon.core.severity import worse
from kvmon.core.snapshot import AlertLevel, Snapshot


@dataclass(frozen=True)
class AlertSeen:
    """One alert code over the session: its worst level, how many snapshots showed it, the last message."""

    code: str
    level: AlertLevel
    count: int
    first_wall: float
    message: str


@dataclass(frozen=True)
class Summary:
    """What the card shows; unknown values are None."""

    n_snapshots: int
    start_wall: float | None
    end_wall: float | None
    last: Snapshot | None
    peak_context_tokens: int | None
    final_context_tokens: int | None
    peak_decode_tok_s: float | None
    median_efficiency: float | None
    final_efficiency: float | None
    points: tuple[tuple[int, float], ...]  # (context tokens, decode tok/s) measured
    ceiling_curve: tuple[tuple[int, float], ...]
    alerts: tuple[AlertSeen, ...] = field(default=())
    last_decoding: Snapshot | None = None  # final speed figures come from here: the end of a session is often idle


class Tally:
    """Running figures of a session, fed one Snapshot at a time (bounded memory for a long live session).

    Its points are a session store's sample (``kvmon.core.points``): the dashboard's own store when one is given
    (the window feeds it), else a store of its own that ``add`` feeds.
    """

    def __init__(self, points: MeasuredPoints | None = None) -> None:
        self._own_points = points is None
        # a store of its own only serves the sample: its ring of newest points need hold one
        self._points = points if points is not None else MeasuredPoints(capacity=1)
        self.n = 0
        self.start_wall: float | None = None
        self.end_wall: float | None = None
        self.last: Snapshot | None = None
        self.last_any: Snapshot | None = None
        self.last_decoding: Snapshot | None = None  # the last snapshot with a decode speed (not idle)
        self.peak_ctx: int | None = None
        self.peak_dec: float | None = None
        # packed doubles, not float objects: a day of them would pin the memory of every freed Snapshot near them
        self.effs = array("d")
        self.curve: tuple[tuple[int, float], ...] = ()
        self.seen: dict[str, AlertSeen] = {}

    @property
    def points(self) -> tuple[tuple[int, float], ...]:
        """The session's measured (context tokens, decode tok/s) points, thinned to the store's ``sample_max``."""
        return self._points.sample()

    def add(self, s: Snapshot) -> None:
        """Count one snapshot."""
        self.n += 1
        self.start_wall = s.t_wall if self.start_wall is None else self.start_wall
        self.end_wall = s.t_wall
        self.last_any = s
        for a in s.alerts:
            prev = self.seen.get(a.code)
            if prev is None:
                self.seen[a.code] = AlertSeen(a.code, a.level, 1, s.t_wall, a.message)
            else:
                level = worse(prev.level, a.level) or a.level
                self.seen[a.code] = AlertSeen(a.code, level, prev.count + 1, prev.first_wall, a.message)
        if self._own_points:
            self._points.add(s)
        if not s.server_read:
            return
        self.last = s
        if s.ceiling_curve:
            self.curve = s.ceiling_curve
        if s.context_tokens is not None:
            self.peak_ctx = max(self.peak_ctx or 0, s.context_tokens)
        if s.decode_tok_s is not None:
            self.last_decoding = s
            self.peak_dec = max(self.peak_dec or 0.0, s.decode_tok_s)
        if s.efficiency is not None:
            self.effs.append(s.efficiency)

    def summary(self) -> Summary:
        """The figures so far."""
        last = self.last or self.last_any
        return Summary(
            n_snapshots=self.n, start_wall=self.start_wall, end_wall=self.end_wall, last=last,
            peak_context_tokens=self.peak_ctx,
            final_context_tokens=self.last.context_tokens if self.last is not None else None,
            peak_decode_tok_s=self.peak_dec,
            median_efficiency=statistics.median(self.effs) if self.effs else None,
            final_efficiency=self.last_decoding.efficiency if self.last_decoding is not None else None,
            last_decoding=self.last_decoding,
            points=self.points, ceiling_curve=self.curve,
            alerts=tuple(sorted(self.seen.values(), key=lambda a: (-a.level.rank, a.first_wall))),
        )


def summarize(snapshots: Iterable[Snapshot]) -> Summary:
    """The session's figures from its Snapshots (connected ones only count for speed and context)."""
    t = Tally()
    for s in snapshots:
        t.add(s)
    return t.summary()
