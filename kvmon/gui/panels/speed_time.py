"""Speed over time: decode tok/s with the ceiling (dashed) as a strip chart, prefill in a lane of its own below it;
gaps where none measured.

The clock-time axis stands still for a step (a tenth of the window) while each poll extends the curves to the
right, so a poll repaints only the few pixels its new segments cover; when the newest sample reaches the right
edge the axis steps on and the window is drawn again. Curves are kept in the view's pixel coordinates (mapped
with numpy when drawn again), so a repaint strokes a path without a data-to-pixel transform.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.history import Event, History
from kvmon.gui import theme
from kvmon.gui.series import peak_decimate
from kvmon.gui.widgets import TITLE_HEIGHT, ClockAxis, cache_static, legend_below, make_plot, nice_ceiling, plain_item

LINE_WIDTH = 1.0
MAX_POINTS = 1200  # longer windows (an hour, a session: up to 86,400 samples) are peak-downsampled to this many
STEPS_PER_WINDOW = 10  # the time axis moves on in steps of this fraction of the window
MAX_APPEND = 60  # more new samples than this at once (a replay jump, a long pause): draw the window again
ViewMap = tuple[float, float, float, float, float, float]  # x0, x1, y0, y1, width and height in pixels
# a model event's marker colour (theme quantities)
EVENT_COLOURS = {"loaded": "ok", "woke": "ok", "loading": "info", "sleeping": "muted", "unloaded": "muted",
                 "failed": "critical", "followed": "decode"}
LANE_HEIGHT = 76  # the prefill lane and the time axis under it (pixels)
LANE_MIN_HEIGHT = 52  # ... in a short view, where the speed chart keeps CHART_FLOOR pixels before the lane shrinks
CHART_FLOOR = 40  # the speed chart's height that a short view keeps from the lane (pixels)
LAYOUT_SLACK = 4  # the chart layout's margins and spacing around title, chart and lane (pixels)
LANE_ROW = 4  # the lane's row in the chart's layout (0 title, 1 top axis, 2 the chart, 3 its hidden bottom axis)
LANE_HEADROOM = 1.3  # the lane's scale reaches this far above its top tick: that label stays clear of the chart's
ZERO_LABEL_ROOM = 8  # the speed chart has no bottom axis: its "0" label needs this much above the lane (pixels)
SHORT_CHART_HEIGHT = 64  # a speed chart lower than this (pixels) is given two ticks, 0 and its top
NO_PREFILL_TEXT = "no prefill measured in this window"  # not "no prompt": one may have gone unmeasured
LEGEND_MIN_VIEW_HEIGHT = 180  # a shorter view has no room for the legend under the lane (pixels)
AXIS_WIDTH = 62  # the left axes of the chart and the lane (pixels)
MAX_MARKERS = 200  # event markers kept on the plot (older ones are far left of any window)
_NICE_STEPS_S = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def step_s(span_s: float) -> float:
    """The axis step for a visible span: the round number of seconds at or below a tenth of it."""
    want = max(span_s, 1.0) / STEPS_PER_WINDOW
    return float(max((s for s in _NICE_STEPS_S if s <= want), default=_NICE_STEPS_S[0]))


def lane_ticks(top: float | None) -> list[tuple[float, str]]:
    """The prefill lane's few ticks: zero and the top of its scale (a lane is too low for more); zero alone while
    the window holds no prefill (a scale then would be made up)."""
    return [(0.0, "0"), (top, f"{top:g}")] if top is not None else [(0.0, "0")]


def with_lead_ins(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The polyline drawn for rate samples: each run of finite samples starts at the previous poll's time.

    A rate sample is the average over the interval since the previous poll, so a run's first sample is drawn
    flat over that interval; a lone sample between gaps (a reply that gave one decode sample) becomes a short
    segment instead of a point a line cannot show. NaN stays NaN (a gap).
    """
    finite = np.isfinite(y)
    if not finite.any():
        return x, y
    starts = np.nonzero(finite & ~np.concatenate(([False], finite[:-1])))[0]
    step = float(np.median(np.diff(x))) if x.size > 1 else 0.0
    lead_x = np.where(starts > 0, x[np.maximum(starts - 1, 0)], x[starts] - step)
    return np.insert(x, starts, lead_x), np.insert(y, starts, y[starts])


class StripCurve(QtWidgets.QGraphicsItem):
    """One quantity's curve in a view's pixel coordinates: drawn again when the axes move, extended in between.

    ``getData`` gives the samples (clock seconds, tok/s) for exports; ``drawn`` the polyline with its lead-ins
    (data coordinates); ``last_dirty`` the region the last append asked to repaint (pixels). Appends are plain
    Python floats kept in lists (a poll adds one sample; numpy's per-call cost would outweigh the work).
    """

    def __init__(self, quantity: str, name: str, parent: QtWidgets.QGraphicsItem) -> None:
        super().__init__(parent)
        self._pen = theme.pen(quantity, LINE_WIDTH)
        self._pen.setCosmetic(True)
        self.opts = {"pen": self._pen, "name": name, "antialias": False}  # what pyqtgraph's legend reads
        self._name = name
        self._path = QtGui.QPainterPath()
        self._bounds = QtCore.QRectF()
        self._x = self._y = self._dx = self._dy = np.empty(0)  # as last drawn in full
        self._tail: tuple[list[float], list[float], list[float], list[float]] = ([], [], [], [])  # appended since
        self._last: tuple[float, bool] | None = None  # the newest sample's time and whether it was finite
        self._map: ViewMap = (0.0, 1.0, 0.0, 1.0, 1.0, 1.0)
        self.last_dirty = QtCore.QRectF()
        self.setZValue(10)

    def name(self) -> str:
        return self._name

    def getData(self) -> tuple[np.ndarray, np.ndarray]:  # pyqtgraph's name: exports read it
        tx, ty, _dx, _dy = self._tail
        return np.concatenate((self._x, tx)), np.concatenate((self._y, ty))

    def drawn(self) -> tuple[np.ndarray, np.ndarray]:
        """The polyline as drawn (with the lead-in of every run), in data coordinates."""
        _tx, _ty, dx, dy = self._tail
        return np.concatenate((self._dx, dx)), np.concatenate((self._dy, dy))

    def set_data(self, x: np.ndarray, y: np.ndarray, mapping: ViewMap) -> None:
        """Samples and the mapping (x range, y range, view size in pixels); the whole path is built again."""
        self._x, self._y = x, y
        self._dx, self._dy = with_lead_ins(x, y)
        self._tail = ([], [], [], [])
        self._last = (float(x[-1]), math.isfinite(float(y[-1]))) if x.size else None
        self.remap(mapping)

    def remap(self, mapping: ViewMap) -> None:
        """The view was resized or its ranges changed: the same data, new pixels."""
        self._dx, self._dy = self.drawn()
        self._x, self._y = self.getData()
        self._tail = ([], [], [], [])
        self._map = mapping
        bounds = QtCore.QRectF(0.0, 0.0, mapping[4], mapping[5])
        if bounds != self._bounds:
            self.prepareGeometryChange()
            self._bounds = bounds
        x0, x1, y0, y1, w, h = mapping
        px = (self._dx - x0) * (w / (x1 - x0))
        py = h - (self._dy - y0) * (h / (y1 - y0))
        self._path = pg.arrayToQPath(px, py, connect="finite") if px.size else QtGui.QPainterPath()
        self.update()

    def append(self, xs: list[float], ys: list[float]) -> None:
        """New samples after the last one, within the current ranges: extend the path, repaint only them."""
        x0, x1, y0, y1, w, h = self._map
        sx, sy = w / (x1 - x0), h / (y1 - y0)
        tx, ty, dx, dy = self._tail
        prev_x, prev_finite = self._last if self._last is not None else (xs[0], False)
        dirty = QtCore.QRectF()
        for x, y in zip(xs, ys, strict=True):
            finite = math.isfinite(y)
            if finite:
                px, py = (x - x0) * sx, h - (y - y0) * sy
                if prev_finite:
                    start = self._path.currentPosition()
                else:  # a run starts: flat from the previous poll
                    start = QtCore.QPointF((prev_x - x0) * sx, py)
                    self._path.moveTo(start)
                    dx.append(prev_x)
                    dy.append(y)
                self._path.lineTo(px, py)
                dirty = dirty.united(QtCore.QRectF(start, QtCore.QPointF(px, py)).normalized())
            tx.append(x)
            ty.append(y)
            dx.append(x)
            dy.append(y)
            prev_x, prev_finite = x, finite
        self._last = (prev_x, prev_finite)
        if not dirty.isNull():
            self.last_dirty = dirty.adjusted(-2.0, -2.0, 2.0, 2.0)
            self.update(self.last_dirty)

    def last_time(self) -> float | None:
        """The newest sample's time (None before any)."""
        return None if self._last is None else self._last[0]

    def boundingRect(self) -> QtCore.QRectF:
        return self._bounds

    def paint(self, p: QtGui.QPainter, *_args: object) -> None:
        p.setPen(self._pen)
        p.drawPath(self._path)


def event_label(ev: Event) -> str:
    """A marker's few words: "qwen3-8b loaded", "→ gemma-3-12b" (now shown)."""
    return f"→ {ev.model}" if ev.kind == "followed" else f"{ev.model} {ev.kind}"


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
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        # Prefill runs 10-100x faster than decode: a lane of its own under the speed chart (its own scale, the same
        # time), so that no prefill number ever reads against the decode axis or the ceiling. Both are items of one
        # view (the lane a row of the chart's layout): a poll repaints one viewport, and a short window shares its
        # height between them instead of cutting the time axis off
        self.plot = make_plot("Speed over time", "", None, "", "tok/s")  # "(tok/s)": a short chart has room for no more
        pi = self.plot.getPlotItem()
        pi.hideAxis("bottom")  # the lane under it carries the time axis
        self.plot.setMinimumHeight(TITLE_HEIGHT + CHART_FLOOR + LANE_MIN_HEIGHT + LAYOUT_SLACK)  # a short view keeps it
        pi.vb.disableAutoRange()
        vb = pi.vb
        self.decode = StripCurve("decode", "decode", vb)
        self.ceiling = StripCurve("ceiling", "ceiling", vb)
        self.lane = pg.PlotItem(axisItems={"bottom": ClockAxis(orientation="bottom")})  # the time axis of both
        plain_item(self.lane)
        self.lane.setTitle(None)  # no axis name either: the legend and the colour name it (a name would not fit)
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
        self.prefill = StripCurve("prefill", "prefill", self.lane.vb)
        # in the lane's own pixels (a child of its view box, not of the data): says why the lane is empty
        self.no_prefill = QtWidgets.QGraphicsSimpleTextItem(NO_PREFILL_TEXT, self.lane.vb)
        self.no_prefill.setBrush(theme.brush("muted"))
        font = self.no_prefill.font()
        font.setPointSizeF(8.0)
        self.no_prefill.setFont(font)
        self.no_prefill.setPos(6.0, 2.0)
        self._prefill_seen = False  # whether the drawn window holds a prefill sample
        for ax in (pi.getAxis("left"), self.lane.getAxis("left")):
            ax.setWidth(AXIS_WIDTH)  # the same width: both charts' times line up
        legend = legend_below(self.plot, 3, row=LANE_ROW + 1)
        for curve, label in ((self.decode, "decode"), (self.ceiling, "ceiling"),
                             (self.prefill, "prefill tok/s (own scale)")):
            legend.addItem(curve, label)
        vb.sigResized.connect(self._remap)
        self.lane.vb.sigResized.connect(self._remap)
        self.plot.setToolTip("Decode tokens per second (measured from server counters) and the "
                             "memory-bandwidth ceiling at the context depth of the moment (computed); prefill "
                             "in the lane below, on its own scale.\n"
                             "Gaps: idle, or the server was unreachable. Each run of samples starts at the "
                             "poll before its first one (a rate is an average over the interval since then).")
        self.lane.setToolTip("Prefill (prompt processing) tokens per second, measured from server counters: "
                             "10 to 100 times decode, so on its own scale.")
        cache_static(legend)
        cache_static(pi.titleLabel)
        lay.setSpacing(0)
        lay.addWidget(self.plot, 1)
        self._markers: list[pg.InfiniteLine] = []  # model loads, unloads, sleeps, follows (a router, llama-swap)
        self._events_seen = 0

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

    def _fit_ticks(self) -> None:
        """A chart too low for the axis's own ticks gets two, zero and its top (more would print over each other)."""
        ax = self.plot.getPlotItem().getAxis("left")
        y_max = self._ranges[1] if self._ranges is not None else 1.0
        want = [lane_ticks(y_max)] if self.plot.getPlotItem().vb.height() < SHORT_CHART_HEIGHT else None
        if want != self._chart_ticks:
            self._chart_ticks = want
            ax.setTicks(want)

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
        room = height - TITLE_HEIGHT - legend - LAYOUT_SLACK
        lane = min(float(LANE_HEIGHT), max(float(LANE_MIN_HEIGHT), room - CHART_FLOOR))
        if self.lane.maximumHeight() != lane:
            self.lane.setMinimumHeight(lane)
            self.lane.setMaximumHeight(lane)
            changed = True
        if changed:  # the view sized the plot before these rows gave up their room: size it again, to the view
            pi.setGeometry(QtCore.QRectF(0.0, 0.0, self.plot.width(), self.plot.height()))

    def markers(self) -> list[pg.InfiniteLine]:
        """The event markers on the plot, oldest first."""
        return list(self._markers)

    def _sync_events(self) -> None:
        """One dashed vertical line per model event since the last look, labelled with what happened."""
        h = self.history
        if h.events_added < self._events_seen:  # the history was cleared (another server, a replay)
            for line in self._markers:
                self.plot.removeItem(line)
            self._markers, self._events_seen = [], 0
        new = min(h.events_added - self._events_seen, len(h.events))
        if new <= 0:
            return
        for ev in list(h.events)[-new:]:
            colour = EVENT_COLOURS.get(ev.kind, "muted")
            pen = pg.mkPen(theme.hex_color(colour), width=1, style=QtCore.Qt.PenStyle.DashLine)
            # short labels low in the plot (clear of the legend and, mostly, of the curves), one above another:
            # events often come close together (a load, then the follow); the tooltip says it whole
            position = 0.06 + 0.07 * (len(self._markers) % 4)
            line = pg.InfiniteLine(pos=ev.t_wall, angle=90, movable=False, pen=pen, label=event_label(ev),
                                   labelOpts={"position": position, "color": theme.hex_color(colour),
                                              "anchors": [(0, 0.5), (0, 0.5)]})
            if line.label is not None:
                font = line.label.textItem.font()
                font.setPointSizeF(7.5)
                line.label.setFont(font)
            line.setToolTip(ev.message)
            line.setZValue(5)
            self.plot.addItem(line, ignoreBounds=True)
            self._markers.append(line)
        while len(self._markers) > MAX_MARKERS:
            self.plot.removeItem(self._markers.pop(0))
        self._events_seen = h.events_added

    def refresh(self) -> None:
        """Bring the curves up to the history: append the new samples, or draw the window again."""
        self._sync_events()
        appended = self.history.appended
        if (appended, self.window_s) == self._drawn or len(self.history) == 0:
            return
        new = appended - self._drawn[0]
        if self._drawn[1] == self.window_s and 0 < new <= MAX_APPEND and self._append(new):
            self._drawn = (appended, self.window_s)
            return
        self._drawn = (appended, self.window_s)
        self._redraw()

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
        self.decode.append(t, dec)
        self.ceiling.append(t, ceil)
        self.prefill.append(t, pf)
        return True

    def _redraw(self) -> None:
        """The window's samples, peak-downsampled, with axes that stay for a step."""
        v = self.history.view(self.window_s)
        t = v.t_wall
        dec, pf, ceil = (v.series[n] for n in ("decode_tok_s", "prefill_tok_s", "ceiling_tok_s"))
        newest = float(t[-1])
        if self.window_s is None:
            step = step_s(newest - float(t[0]))
            left = math.floor(float(t[0]) / step) * step
            right = (math.floor(newest / step) + 1) * step
        else:
            step = step_s(self.window_s)
            right = (math.floor(newest / step) + 1) * step
            left = right - self.window_s
        finite = [float(np.nanmax(a)) for a in (dec, ceil) if a.size and np.isfinite(a).any()]
        y_max = nice_ceiling(max(finite, default=1.0) * 1.05)
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
            self.lane.getAxis("left").setTicks([lane_ticks(pf_max if seen else None)])
            self.no_prefill.setVisible(not seen)
            self._prefill_seen = seen
        self._ranges = ((left, right), y_max, pf_max)
        if old[1] != y_max:
            self._fit_ticks()  # a low chart's two ticks name the new top
        main, pf_map = self._mappings()
        for curve, y, mapping in ((self.decode, dec, main), (self.ceiling, ceil, main), (self.prefill, pf, pf_map)):
            curve.set_data(*peak_decimate(t, y, MAX_POINTS), mapping)
