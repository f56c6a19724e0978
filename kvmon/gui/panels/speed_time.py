"""Speed over time: decode tok/s as a solid filled line with the ceiling dashed over it, the events (model loads,
sleeps, follows, reloads) in a lane above, prefill in a small chart of its own below; gaps where nothing was measured.

The time axis fits the data: at the start it spans what there is (a minute, two, five), and grows in round steps to
the chosen window (5 min, 1 h) or with the session. Within a step the axis stands still while each poll extends the
curves to the right, so a poll repaints only the few pixels its new segments cover; when the newest sample reaches
the right edge the axis steps on and the window is drawn again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.history import REGIME_EVENTS, History
from kvmon.core.snapshot import Snapshot
from kvmon.gui import fmt, theme
from kvmon.gui.flow import stack
from kvmon.gui.panels.event_lane import LANE_PX, EventLane
from kvmon.gui.panels.strip_curve import StripCurve, ViewMap
from kvmon.gui.plot_labels import PlotText, empty_text, plain_legend, plot_font, style_axes
from kvmon.gui.series import peak_decimate
from kvmon.gui.widgets import TITLE_HEIGHT, ClockAxis, cache_static, legend_below, make_plot, nice_ceiling, plain_item

DECODE_WIDTH = 1.5
DECODE_FILL_ALPHA = 55
PREFILL_FILL_ALPHA = 120
MAX_POINTS = 1200  # longer windows (an hour, a session: up to 86,400 samples) are peak-downsampled to this many
STEPS_PER_WINDOW = 10  # the time axis moves on in steps of this fraction of the window
MAX_APPEND = 60  # more new samples than this at once (a replay jump, a long pause): draw the window again
MIN_SPAN_S = 20.0  # the shortest time axis: a few polls are not stretched over the whole width
FIT_ROOM = 1.15  # a fitted axis spans this much more than the data, so it grows in steps, not at every poll
LANE_HEIGHT = 62  # the prefill chart and the time axis under it (pixels)
LANE_MIN_HEIGHT = 48  # ... in a short view, where the speed chart keeps CHART_FLOOR pixels before the lane shrinks
CHART_FLOOR = 40  # the speed chart's height that a short view keeps from the lane (pixels)
LAYOUT_SLACK = 4  # the chart layout's margins and spacing around title, chart and lane (pixels)
EVENT_ROW = 1  # the event lane's row in the chart's layout (where the hidden top axis was)
LANE_ROW = 4  # the prefill chart's row (0 title, 1 events, 2 the chart, 3 its hidden bottom axis)
LANE_HEADROOM = 1.3  # the lane's scale reaches this far above its top tick: that label stays clear of the chart's
ZERO_LABEL_ROOM = 8  # the speed chart has no bottom axis: its "0" label needs this much above the lane (pixels)
SHORT_CHART_HEIGHT = 64  # a speed chart lower than this (pixels) is given two ticks, 0 and its top
NO_PREFILL_TEXT = "no prefill measured in this window"  # not "no prompt": one may have gone unmeasured
LEGEND_MIN_VIEW_HEIGHT = 180  # a shorter view has no room for the legend under the lane (pixels)
AXIS_WIDTH = 62  # the left axes of the chart and the lane (pixels)
SQUASHED = 3.0  # an earlier regime this many times faster than the current one would flatten it: the axis fits the
# current one, the earlier one runs off its top, said in words (the fall into the current regime stays in view)
MIN_HEIGHT = TITLE_HEIGHT + LANE_PX + CHART_FLOOR + LANE_MIN_HEIGHT + LAYOUT_SLACK  # the view's least height (pixels)
_NICE_STEPS_S = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def step_s(span_s: float) -> float:
    """The axis step for a visible span: the round number of seconds at or below a tenth of it."""
    want = max(span_s, 1.0) / STEPS_PER_WINDOW
    return float(max((s for s in _NICE_STEPS_S if s <= want), default=_NICE_STEPS_S[0]))


def fitted_span_s(data_span_s: float, window_s: float | None) -> float:
    """The time axis's span for data spanning ``data_span_s``: a round span a little longer (at least a minute),
    at most the window."""
    want = max(data_span_s * FIT_ROOM, MIN_SPAN_S)
    span = float(next((s for s in _NICE_STEPS_S if s >= want), math.ceil(want / 86400) * 86400))
    return span if window_s is None else min(span, window_s)


def time_range(t0: float, newest: float, window_s: float | None) -> tuple[float, float]:
    """The time axis for samples from ``t0`` to ``newest``: fitted to them (from a round time at or before the
    first) while they fit in the window, else the window ending a step after the newest."""
    span = fitted_span_s(newest - t0, window_s)
    while True:
        step = step_s(span)
        left = math.floor(t0 / step) * step
        if newest < left + span:
            return left, left + span
        if window_s is not None and span >= window_s:
            break
        span = fitted_span_s(newest - left, window_s)
    step = step_s(window_s)
    right = (math.floor(newest / step) + 1) * step
    return right - window_s, right


def compact(v: float) -> str:
    """A tick's number, short: 850, 1.5K, 12K."""
    if v >= 1000:
        return f"{v / 1000:.3g}K"
    return f"{v:g}"


def _peak(a: np.ndarray) -> float | None:
    return float(np.nanmax(a)) if a.size and np.isfinite(a).any() else None


@dataclass(frozen=True)
class SpeedScale:
    """The top of the speed chart's data, and what of an earlier regime runs off it (None: nothing does)."""

    top: float
    earlier_decode: float | None = None  # the earlier regime's highest decode and ceiling, above ``top``
    earlier_ceiling: float | None = None

    @property
    def cut(self) -> bool:
        return self.earlier_decode is not None or self.earlier_ceiling is not None


def speed_scale(t: np.ndarray, decode: np.ndarray, ceiling: np.ndarray, since: float | None) -> SpeedScale:
    """The window's highest decode or ceiling; or, where a regime began at ``since`` and the one before it ran
    ``SQUASHED`` times higher (a reload into host RAM: 72 → 7 tok/s), the current regime's, so its line reads rather
    than lying flat on the bottom, with the earlier one's peaks to say above the scale."""
    peaks = [p for p in (_peak(decode), _peak(ceiling)) if p is not None]
    top = max(peaks, default=1.0)
    if since is None or not (t < since).any():
        return SpeedScale(top)
    now = [p for p in (_peak(decode[t >= since]), _peak(ceiling[t >= since])) if p is not None]
    if not now or top < SQUASHED * max(now):
        return SpeedScale(top)
    before = t < since
    return SpeedScale(max(now), _peak(decode[before]), _peak(ceiling[before]))


def lane_ticks(top: float | None, unit: str = "") -> list[tuple[float, str]]:
    """A low chart's few ticks: zero and the top of its scale (with ``unit``); zero alone while the window holds
    nothing (a scale then would be made up)."""
    return [(0.0, "0"), (top, f"{compact(top)}{unit}")] if top is not None else [(0.0, "0")]


class SpeedTimePanel(QtWidgets.QWidget):
    """Decode, prefill and ceiling curves fed from the history ring buffer; the window is 5 min, 1 h or the session.

    Made once; a poll appends its sample to each curve; when the axes must move (the newest sample reached the
    right edge, a new peak, another window) the window's samples are drawn again, peak-downsampled past
    ``MAX_POINTS``. x is clock time (seconds since the epoch; the axis shows local time).
    """

    x_csv_label = "time (unix s)"
    svg_as_shown = True  # its SVG is the view as Qt draws it: pyqtgraph's exporter misplaces the lane and its own items

    def __init__(self, history: History, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.window_s: float | None = 300.0
        self._drawn: tuple[int, float | None] = (-1, None)
        # (x range, y max, prefill y max) as last set on the axes and used to map the curves; None before a draw
        self._ranges: tuple[tuple[float, float], float, float] | None = None
        self._chart_ticks: list[list[tuple[float, str]]] | None = None  # the speed chart's own ticks (a low chart)
        self._events_key: tuple[int, tuple[float, float]] | None = None
        self.scale = SpeedScale(1.0)  # the speed chart's top, and an earlier regime's peaks above it (speed_scale)
        self._empty: str | None = None
        # Prefill runs 10-100x faster than decode: a chart of its own under the speed chart (its own scale, the same
        # time), so that no prefill number ever reads against the decode axis or the ceiling. Both are items of one
        # view (the lane a row of the chart's layout): a poll repaints one viewport, and a short window shares its
        # height between them instead of cutting the time axis off
        self.plot = make_plot("Speed over time", "", None, "tok/s", None)
        style_axes(self.plot, AXIS_WIDTH)
        pi = self.plot.getPlotItem()
        pi.hideAxis("bottom")  # the lane under it carries the time axis
        vb = pi.vb
        vb.disableAutoRange()
        self.decode = StripCurve("decode", "decode", vb, width=DECODE_WIDTH, fill_alpha=DECODE_FILL_ALPHA)
        self.ceiling = StripCurve("ceiling", "ceiling", vb)
        self.ceiling.setZValue(11)  # the dashes over the decode fill
        # the events' row above the chart, where its (hidden) top axis was
        pi.layout.removeItem(pi.getAxis("top"))
        self.events = EventLane(vb)
        pi.layout.addItem(self.events, EVENT_ROW, 1)
        self.lane = pg.PlotItem(axisItems={"bottom": ClockAxis(orientation="bottom")})  # the time axis of both
        plain_item(self.lane)
        self.lane.setTitle(None)  # no axis name either: the legend and its tick's unit name it
        for name in ("left", "bottom"):
            self.lane.getAxis(name).setStyle(tickFont=plot_font(), tickLength=-4)
        # no side margins: its left axis starts where the chart's does; the top one is room for the chart's "0"
        self.lane.layout.setContentsMargins(0, ZERO_LABEL_ROOM, 0, 0)
        self.lane.setMinimumHeight(LANE_HEIGHT)  # less in a short view (resizeEvent)
        self.lane.setMaximumHeight(LANE_HEIGHT)
        pi.layout.addItem(self.lane, LANE_ROW, 0, 1, 3)
        pi.layout.setRowStretchFactor(LANE_ROW, 1)
        self.lane.vb.disableAutoRange()
        self.lane.setXLink(pi)
        self.lane.getAxis("left").setTicks([lane_ticks(None)])
        self.lane.setYRange(0.0, LANE_HEADROOM, padding=0.0)
        self.prefill = StripCurve("prefill", "prefill", self.lane.vb, fill_alpha=PREFILL_FILL_ALPHA)
        bg = QtGui.QColor(theme.background())
        # in the lane's own pixels (a child of its view box, not of the data): says why the lane is empty
        self.no_prefill = PlotText(self.lane.vb, plot_font(), theme.color("muted"), bg)
        self.no_prefill.setText(NO_PREFILL_TEXT)
        self.no_prefill.put((6.0, 2.0, 0.0, 0.0))
        # what the chart says while it has nothing to draw ("waiting for the server"), in its middle
        self.empty = PlotText(vb, plot_font(), theme.color("muted"), bg)
        # where an earlier regime runs off the top of the scale: how high it was, at the chart's top left
        self.above = PlotText(vb, plot_font(), theme.color("muted"), bg)
        self._prefill_seen = False  # whether the drawn window holds a prefill sample
        for ax in (pi.getAxis("left"), self.lane.getAxis("left")):
            ax.setWidth(AXIS_WIDTH)  # the same width: both charts' times line up
        legend = legend_below(self.plot, 3, row=LANE_ROW + 1)
        plain_legend(legend)
        for curve, label in ((self.decode, "decode"), (self.ceiling, "ceiling"),
                             (self.prefill, "prefill (own scale)")):
            legend.addItem(curve, label)
        self.plot.setMinimumHeight(MIN_HEIGHT)
        vb.sigResized.connect(self._remap)
        self.lane.vb.sigResized.connect(self._remap)
        self.plot.setToolTip("Decode tokens per second (measured from server counters) and the "
                             "memory-bandwidth ceiling at the context depth of the moment (computed); prefill "
                             "in the chart below, on its own scale; model loads, sleeps and reloads above.\n"
                             "Gaps: idle, or the server was unreachable. Each run of samples starts at the "
                             "poll before its first one (a rate is an average over the interval since then).")
        self.lane.setToolTip("Prefill (prompt processing) tokens per second, measured from server counters: "
                             "10 to 100 times decode, so on its own scale.")
        cache_static(legend)
        cache_static(pi.titleLabel)
        stack(self, self.plot, grow=self.plot)
        self._show_empty(empty_text(None, False))

    def curves(self) -> tuple[StripCurve, ...]:
        """The decode, prefill and ceiling curves."""
        return self.decode, self.prefill, self.ceiling

    def x_range(self) -> tuple[float, float]:
        """The time axis now (clock seconds)."""
        return self._ranges[0] if self._ranges is not None else (0.0, 1.0)

    def set_window(self, seconds: float | None) -> None:
        """Visible range in seconds (None = session)."""
        self.window_s = seconds
        self._drawn = (-1, None)
        self.refresh()

    def markers(self) -> list[object]:
        """The event marks shown, oldest first (each stands for one or more events)."""
        return list(self.events.marks)

    def _mappings(self) -> tuple[ViewMap, ViewMap]:
        vb, lane = self.plot.getPlotItem().vb, self.lane.vb
        w, h = max(vb.width(), 1.0), max(vb.height(), 1.0)
        (x0, x1), y_max, pf_max = self._ranges if self._ranges is not None else ((0.0, 1.0), 1.0, 1.0)
        lane_top = pf_max * LANE_HEADROOM
        return (x0, x1, 0.0, y_max, w, h), (x0, x1, 0.0, lane_top, max(lane.width(), 1.0), max(lane.height(), 1.0))

    def _remap(self) -> None:
        main, pf = self._mappings()
        for curve in (self.decode, self.ceiling):
            curve.remap(main)
        self.prefill.remap(pf)
        self._fit_ticks()
        self._place_empty()

    def _fit_ticks(self) -> None:
        """A chart too low for the axis's own ticks gets two, zero and its top (more would print over each other)."""
        ax = self.plot.getPlotItem().getAxis("left")
        y_max = self._ranges[1] if self._ranges is not None else 1.0
        want = [lane_ticks(y_max)] if self.plot.getPlotItem().vb.height() < SHORT_CHART_HEIGHT else None
        if want != self._chart_ticks:
            self._chart_ticks = want
            ax.setTicks(want)

    def _show_empty(self, text: str | None) -> None:
        """Say why the chart is empty ("waiting for the server"), with no numbers on its axes, or show them."""
        if text == self._empty:
            return
        self._empty = text
        for ax in (self.plot.getPlotItem().getAxis("left"), self.lane.getAxis("left"), self.lane.getAxis("bottom")):
            ax.setStyle(showValues=text is None)
        self.no_prefill.setVisible(text is None and not self._prefill_seen)
        if text is not None:
            self.empty.setText(text)
        self._place_empty()

    def _squashed(self) -> bool:
        """Whether the window now holds a regime far below the one before it (``speed_scale``)."""
        since = self._regime_since(self.x_range()[0])
        if since is None:  # (most polls: no regime began in the window)
            return False
        v = self.history.view(self.window_s)
        return bool(len(v.t_wall)) and speed_scale(v.t_wall, v.series["decode_tok_s"], v.series["ceiling_tok_s"],
                                                   since).cut

    def _regime_since(self, t0: float) -> float | None:
        """When the newest regime in the window began (a reload, another context size or placement), or None."""
        kinds = set(REGIME_EVENTS.values())
        return max((e.t_wall for e in self.history.events if e.kind in kinds and e.t_wall > t0), default=None)

    def _place_above(self) -> None:
        """Say that decode ran above the chart's top before, where the earlier regime leaves it ("↑ faster before,
        above this scale"; how fast on hover: the header's one figure for "before" stays the only one on screen)."""
        sc = self.scale
        if not sc.cut or self._empty is not None:
            self.above.put(None)
            return
        peak = sc.earlier_decode if sc.earlier_decode is not None and sc.earlier_decode > sc.top else None
        text = "↑ faster before, above this scale" if peak is not None else "↑ the ceiling ran higher before"
        if self.above.text() != text:
            self.above.setText(text)
            self.above.setToolTip("Before the newest reload or change in this window, far above this scale: decode up "
                                  f"to {fmt.tok_s(sc.earlier_decode)}, ceiling up to {fmt.tok_s(sc.earlier_ceiling)}."
                                  " The axis fits what runs now.")
        self.above.put((4.0, 2.0, 0.0, 0.0))

    def _place_empty(self) -> None:
        if self._empty is None:
            self.empty.hide()
            return
        vb = self.plot.getPlotItem().vb
        w, h = self.empty.size()
        self.empty.put(((vb.width() - w) / 2, (vb.height() - h) / 2, w, h))

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        """Share a short view's height: the legend goes first (the plot's tooltip names the lines), then the lane
        shrinks to its floor, then the chart; the time axis is never cut off."""
        super().resizeEvent(e)
        pi = self.plot.getPlotItem()
        height = e.size().height()
        show = height >= LEGEND_MIN_VIEW_HEIGHT
        changed = pi.legend is not None and pi.legend.isVisible() != show
        if changed:
            pi.legend.setVisible(show)
        legend = pi.legend.geometry().height() if show and pi.legend is not None else 0.0
        room = height - TITLE_HEIGHT - LANE_PX - legend - LAYOUT_SLACK
        lane = min(float(LANE_HEIGHT), max(float(LANE_MIN_HEIGHT), room - CHART_FLOOR))
        if self.lane.maximumHeight() != lane:
            self.lane.setMinimumHeight(lane)
            self.lane.setMaximumHeight(lane)
            changed = True
        if changed:  # the view sized the plot before these rows gave up their room: size it again, to the view
            pi.setGeometry(QtCore.QRectF(0.0, 0.0, self.plot.width(), self.plot.height()))

    def _sync_events(self) -> None:
        """The event lane follows the history's events and the time axis (laid out only when either changed)."""
        key = (self.history.events_added, self.x_range())
        if key != self._events_key:
            self._events_key = key
            self.events.set_events(list(self.history.events), self.x_range())

    def refresh(self, s: Snapshot | None = None) -> None:
        """Bring the curves up to the history: append the new samples, or draw the window again. ``s``: the
        snapshot shown (what the chart says while it has nothing to draw)."""
        appended = self.history.appended
        if not len(self.history) and self._drawn[0] > 0:  # the history was cleared (another server, a replay)
            main, pf = self._mappings()
            for curve, mapping in ((self.decode, main), (self.ceiling, main), (self.prefill, pf)):
                curve.set_data(np.empty(0), np.empty(0), mapping)
            self._drawn = (0, self.window_s)
        if (appended, self.window_s) != self._drawn and len(self.history):
            new = appended - self._drawn[0]
            if not (self._drawn[1] == self.window_s and 0 < new <= MAX_APPEND and self._append(new)):
                self._redraw()
            self._drawn = (appended, self.window_s)
        self._sync_events()
        anything = self._anything()
        if s is not None or anything or not len(self.history):  # else (no snapshot given) it says what it said
            self._show_empty(empty_text(s, anything))

    def _anything(self) -> bool:
        """Whether the window holds a sample of any curve."""
        return any(bool(np.isfinite(c.getData()[1]).any()) for c in self.curves())

    def _append(self, new: int) -> bool:
        """Extend the curves by the ``new`` newest samples if the axes can stay; False when they must move."""
        if self._ranges is None:
            return False
        (_x0, x1), y_max, pf_max = self._ranges
        t_arr, series = self.history.tail(new)
        t = t_arr.tolist()
        last = self.decode.last_time()
        if t[-1] >= x1 or (last is not None and t[0] <= last):  # right edge reached, clock went back
            return False
        dec, pf, ceil = (series[n].tolist() for n in ("decode_tok_s", "prefill_tok_s", "ceiling_tok_s"))
        pf_top = max((v for v in pf if math.isfinite(v)), default=None)
        if (max((v for v in dec + ceil if math.isfinite(v)), default=0.0) > y_max
                or (pf_top is not None and (pf_top > pf_max or not self._prefill_seen))):
            return False  # a new peak, or the window's first prefill: the lane gets its scale
        if not self.scale.cut and self._squashed():
            return False  # a new regime far below the one before: the axis fits it
        self.decode.append(t, dec)
        self.ceiling.append(t, ceil)
        self.prefill.append(t, pf)
        return True

    def _redraw(self) -> None:
        """The window's samples, peak-downsampled, with axes that stay for a step."""
        v = self.history.view(self.window_s)
        t = v.t_wall
        dec, pf, ceil = (v.series[n] for n in ("decode_tok_s", "prefill_tok_s", "ceiling_tok_s"))
        left, right = time_range(float(t[0]), float(t[-1]), self.window_s)
        self.scale = speed_scale(t, dec, ceil, self._regime_since(float(t[0])))
        y_max = nice_ceiling(self.scale.top * 1.05)
        seen = bool(np.isfinite(pf).any())
        pf_max = nice_ceiling(float(np.nanmax(pf)) * 1.05) if seen else 1.0
        pi = self.plot.getPlotItem()
        old = self._ranges or ((math.nan, math.nan), math.nan, math.nan)
        # each axis is told only when its own range moved: it lays out its ticks again
        if old[0] != (left, right):
            pi.setXRange(left, right, padding=0.0)
        if old[1] != y_max:
            pi.setYRange(0.0, y_max, padding=0.0)
        if old[2] != pf_max or seen != self._prefill_seen:
            self.lane.setYRange(0.0, pf_max * LANE_HEADROOM, padding=0.0)
            self.lane.getAxis("left").setTicks([lane_ticks(pf_max if seen else None, " tok/s")])
            self.no_prefill.setVisible(not seen and self._empty is None)
            self._prefill_seen = seen
        self._ranges = ((left, right), y_max, pf_max)
        if old[1] != y_max:
            self._fit_ticks()  # a low chart's two ticks name the new top
        self._place_above()
        main, pf_map = self._mappings()
        for curve, y, mapping in ((self.decode, dec, main), (self.ceiling, ceil, main), (self.prefill, pf, pf_map)):
            curve.set_data(*peak_decimate(t, y, MAX_POINTS), mapping)
