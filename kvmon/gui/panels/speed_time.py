"""Speed over time: decode and prefill tok/s with the ceiling (dashed); gaps where nothing was measured."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from kvmon.core.history import History
from kvmon.gui import theme
from kvmon.gui.series import peak_decimate
from kvmon.gui.widgets import cache_axis, cache_static, make_plot, nice_ceiling

LINE_WIDTH = 1.0
MAX_POINTS = 1200  # longer windows (an hour, a session: up to 86,400 samples) are peak-downsampled to this many


def isolated_segments(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Samples with no finite neighbour, as (start, end) pairs over the interval each one measured.

    A line joining finite samples cannot show a lone one (a reply that gave one decode sample, a short prompt
    that gave one prefill sample); a rate sample is the average over the interval since the previous poll, so
    it is drawn as a flat segment over that interval.
    """
    f = np.isfinite(y)
    if f.size == 0:
        return np.empty(0), np.empty(0)
    lone = f.copy()
    lone[1:] &= ~f[:-1]
    lone[:-1] &= ~f[1:]
    idx = np.nonzero(lone)[0]
    if idx.size == 0:
        return np.empty(0), np.empty(0)
    step = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    start = np.where(idx > 0, t[np.maximum(idx - 1, 0)], t[idx] - step)
    xs = np.column_stack([start, t[idx]]).ravel()
    return xs, np.repeat(y[idx], 2)


class LiveCurve(pg.PlotCurveItem):
    """A curve redrawn every poll in a view whose range kvmon sets: its bounds are that view.

    pyqtgraph's curves work out their bounds from the data (NaN-aware min/max, pixel padding) each time it
    changes, and the scene asks for them on every repaint; here the view's range stands in (the view clips
    the curve to it anyway), so a poll costs a path and a paint, not a scan of the data.
    """

    def __init__(self, quantity: str, name: str | None = None, connect: str = "finite") -> None:
        super().__init__(pen=theme.pen(quantity, LINE_WIDTH), connect=connect, name=name)
        self._connect = connect
        self._bounds = QtCore.QRectF()

    def set_series(self, x: np.ndarray, y: np.ndarray, bounds: QtCore.QRectF) -> None:
        """New data and the view range it is drawn in."""
        if bounds != self._bounds:
            self.prepareGeometryChange()
            self._bounds = QtCore.QRectF(bounds)
        self.setData(x, y, connect=self._connect)

    def boundingRect(self) -> QtCore.QRectF:
        return self._bounds


class SpeedTimePanel(QtWidgets.QWidget):
    """Decode, prefill and ceiling curves fed from the history ring buffer; the window is 5 min, 1 h or the session.

    Made once; every poll hands each curve the window's samples (peak-downsampled past ``MAX_POINTS``). x is
    minutes before the newest sample, so the axes keep their labels (and their cached pixmaps) while data scrolls.
    """

    def __init__(self, history: History, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.window_s: float | None = 300.0
        self._drawn: tuple[int, float | None] = (-1, None)
        self._y_max = -1.0
        self._x_range: tuple[float, float] | None = None
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.plot = make_plot("Speed over time", "time before now", "min", "speed", "tok/s")
        pi = self.plot.getPlotItem()
        pi.addLegend(offset=(-5, 5), labelTextSize="8pt")
        # 1-px cosmetic pens: Qt's raster engine draws them on its fast path; wider ones go through the path
        # stroker, which costs more than the rest of this plot's repaint every poll
        self.decode = LiveCurve("decode", "decode")
        pi.addItem(self.decode)
        # Prefill runs 10-100× faster than decode: its own right-hand axis keeps decode readable.
        self.prefill_vb = pg.ViewBox()
        pi.showAxis("right")
        pi.scene().addItem(self.prefill_vb)
        pi.getAxis("right").linkToView(self.prefill_vb)
        pi.getAxis("right").setLabel("prefill", units="tok/s", color=theme.hex_color("prefill"))
        pi.getAxis("right").enableAutoSIPrefix(False)
        cache_axis(pi.getAxis("right"))
        self.prefill_vb.setXLink(pi)
        # a fixed, round y range (changed only when the peak crosses it) instead of auto-range: an auto-ranged
        # axis re-lays out its labels whenever the window's peak scrolls out, a full axis repaint each time
        self.prefill_vb.disableAutoRange()
        self.prefill_vb.setYRange(0, 1, padding=0)
        self._prefill_y_max = -1.0
        self.prefill = LiveCurve("prefill", "prefill")
        self.prefill_vb.addItem(self.prefill)
        pi.legend.addItem(self.prefill, "prefill (right axis)")
        pi.vb.sigResized.connect(self._sync_views)
        self.ceiling = LiveCurve("ceiling", "ceiling")
        pi.addItem(self.ceiling)
        # lone samples between gaps, drawn over the interval they measured (a line cannot show them)
        self.decode_lone = LiveCurve("decode", connect="pairs")
        pi.vb.addItem(self.decode_lone)
        self.prefill_lone = LiveCurve("prefill", connect="pairs")
        self.prefill_vb.addItem(self.prefill_lone)
        self.plot.setToolTip("Decode and prefill tokens per second (measured from server counters) and the "
                             "memory-bandwidth ceiling at the context depth of the moment (computed).\n"
                             "Gaps: idle, or the server was unreachable.")
        pi.vb.disableAutoRange()
        pi.setYRange(0, 1)
        cache_static(pi.legend)
        cache_static(pi.titleLabel)
        lay.addWidget(self.plot)

    def curves(self) -> tuple[LiveCurve, ...]:
        """The decode, prefill and ceiling curves."""
        return self.decode, self.prefill, self.ceiling

    def _sync_views(self) -> None:
        self.prefill_vb.setGeometry(self.plot.getPlotItem().vb.sceneBoundingRect())

    def set_window(self, seconds: float | None) -> None:
        """Visible range in seconds (None = session)."""
        self.window_s = seconds
        self._drawn = (-1, None)
        self._x_range = None
        self.refresh()

    def refresh(self) -> None:
        """Push the visible window to the curves if history grew since the last draw."""
        key = (self.history.appended, self.window_s)
        if key == self._drawn or len(self.history) == 0:
            return
        self._drawn = key
        v = self.history.view(self.window_s)
        t = (v.t_wall - v.t_wall[-1]) / 60.0
        dec, pf, ceil = (v.series[n] for n in ("decode_tok_s", "prefill_tok_s", "ceiling_tok_s"))
        self._set_ranges(t, dec, pf, ceil)
        main_rect, pf_rect = self.plot.getPlotItem().vb.viewRect(), self.prefill_vb.viewRect()
        for curve, y, rect in ((self.decode, dec, main_rect), (self.prefill, pf, pf_rect),
                               (self.ceiling, ceil, main_rect)):
            curve.set_series(*peak_decimate(t, y, MAX_POINTS), rect)
        for lone, y, rect in ((self.decode_lone, dec, main_rect), (self.prefill_lone, pf, pf_rect)):
            xs, ys = isolated_segments(t, y)
            if xs.size or lone.xData is None or lone.xData.size:  # an empty item stays untouched
                lone.set_series(xs, ys, rect)

    def _set_ranges(self, t: np.ndarray, dec: np.ndarray, pf: np.ndarray, ceil: np.ndarray) -> None:
        """Round y ranges that change only when a peak crosses them; the x range of the window."""
        finite = [float(np.nanmax(a)) for a in (dec, ceil) if a.size and np.isfinite(a).any()]
        y_max = nice_ceiling(max(finite, default=1.0) * 1.05)
        if y_max != self._y_max:
            self._y_max = y_max
            self.plot.getPlotItem().setYRange(0, y_max, padding=0)
        pf_max = nice_ceiling(float(np.nanmax(pf)) * 1.05) if pf.size and np.isfinite(pf).any() else 1.0
        if pf_max != self._prefill_y_max:
            self._prefill_y_max = pf_max
            self.prefill_vb.setYRange(0, pf_max, padding=0)
        if self.window_s is None:  # session: widen in whole steps so the axis does not rescale every poll
            span = float(-t[0])
            step = 1.0 if span < 10 else 10.0 if span < 120 else 60.0
            start = -math.ceil(max(span, 1e-9) / step) * step
        else:
            start = -self.window_s / 60.0
        x_range = (min(start, -1.0), 0.0)
        if x_range != self._x_range:
            self._x_range = x_range
            self.plot.getPlotItem().setXRange(*x_range, padding=0.0)
