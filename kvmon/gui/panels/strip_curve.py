"""One quantity's curve on the speed-over-time chart, kept in the view's pixels: drawn again when the axes move,
extended by a poll's new segment in between (a poll repaints only the pixels it covers).

A curve may be filled down to its axis (decode, prefill): each run of samples is then a solid area with a gap on
either side, which no one takes for the dashed ceiling, and a lone sample is a bar over its interval, not a dash.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.gui import theme

ViewMap = tuple[float, float, float, float, float, float]  # x0, x1, y0, y1, width and height in pixels


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


def runs(y: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each run of finite values."""
    finite = np.isfinite(y)
    if not finite.any():
        return []
    idx = np.nonzero(finite)[0]
    breaks = np.nonzero(np.diff(idx) > 1)[0]
    starts = np.concatenate(([idx[0]], idx[breaks + 1]))
    ends = np.concatenate((idx[breaks], [idx[-1]]))
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def area_path(px: np.ndarray, py: np.ndarray, base: float) -> QtGui.QPainterPath:
    """The filled area under each run of a polyline in pixels (NaN: a gap), closed down to ``base``."""
    path = QtGui.QPainterPath()
    path.setFillRule(QtCore.Qt.FillRule.WindingFill)  # the runs' areas and the quads appended after never cancel
    for a, b in runs(py):
        xs, ys = px[a:b + 1], py[a:b + 1]
        poly = QtGui.QPolygonF([QtCore.QPointF(float(xs[0]), base)]
                               + [QtCore.QPointF(float(u), float(v)) for u, v in zip(xs, ys, strict=True)]
                               + [QtCore.QPointF(float(xs[-1]), base)])
        path.addPolygon(poly)
        path.closeSubpath()
    return path


class StripCurve(QtWidgets.QGraphicsItem):
    """One quantity's curve in a view's pixel coordinates: drawn again when the axes move, extended in between.

    ``getData`` gives the samples (clock seconds, tok/s) for exports; ``drawn`` the polyline with its lead-ins
    (data coordinates); ``last_dirty`` the region the last append asked to repaint (pixels). Appends are plain
    Python floats kept in lists (a poll adds one sample; numpy's per-call cost would outweigh the work).
    ``fill_alpha``: the area under the curve is filled in its colour at this opacity (None: a line alone).
    """

    def __init__(self, quantity: str, name: str, parent: QtWidgets.QGraphicsItem, *, width: float = 1.0,
                 fill_alpha: int | None = None) -> None:
        super().__init__(parent)
        self._pen = theme.pen(quantity, width)  # cosmetic: its width in pixels
        self._fill_brush = theme.brush(quantity, fill_alpha) if fill_alpha is not None else None
        self.opts = {"pen": self._pen, "name": name, "antialias": False}  # what pyqtgraph's legend reads
        self._path = QtGui.QPainterPath()
        self._fill = QtGui.QPainterPath()
        self._bounds = QtCore.QRectF()
        self._x = self._y = self._dx = self._dy = np.empty(0)  # as last drawn in full
        self._tail: tuple[list[float], list[float], list[float], list[float]] = ([], [], [], [])  # appended since
        self._last: tuple[float, bool] | None = None  # the newest sample's time and whether it was finite
        self._map: ViewMap = (0.0, 1.0, 0.0, 1.0, 1.0, 1.0)
        self.last_dirty = QtCore.QRectF()
        self.setZValue(10)

    def name(self) -> str:
        return str(self.opts["name"])

    def getData(self) -> tuple[np.ndarray, np.ndarray]:  # pyqtgraph's name: exports read it
        tx, ty, _dx, _dy = self._tail
        return np.concatenate((self._x, tx)), np.concatenate((self._y, ty))

    def drawn(self) -> tuple[np.ndarray, np.ndarray]:
        """The polyline as drawn (with the lead-in of every run), in data coordinates."""
        _tx, _ty, dx, dy = self._tail
        return np.concatenate((self._dx, dx)), np.concatenate((self._dy, dy))

    def path(self) -> QtGui.QPainterPath:
        """The line as drawn, in the view's pixels."""
        return self._path

    def fill_path(self) -> QtGui.QPainterPath:
        """The filled area as drawn, in the view's pixels (empty for a line alone)."""
        return self._fill

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
        self._fill = area_path(px, py, h) if self._fill_brush is not None else QtGui.QPainterPath()
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
                end = QtCore.QPointF(px, py)
                if self._fill_brush is not None:
                    self._fill.addPolygon(QtGui.QPolygonF([QtCore.QPointF(start.x(), h), start, end,
                                                           QtCore.QPointF(px, h)]))
                    self._fill.closeSubpath()
                    end = QtCore.QPointF(px, h)
                dirty = dirty.united(QtCore.QRectF(start, end).normalized())
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
        if self._fill_brush is not None:
            p.fillPath(self._fill, self._fill_brush)
        p.setPen(self._pen)
        p.drawPath(self._path)
