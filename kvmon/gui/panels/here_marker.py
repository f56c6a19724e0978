""""You are here" on the speed-vs-context plot: a dotted line at the context depth across the plot and the decode
speed as a dot on it, as one plain graphics item drawn in pixels (its words are one of the plot's placed labels).

The marker is what moves on the hero plot while a conversation decodes. As a line and a one-dot scatter
(plotting-library items) each move ran their Python bookkeeping (the scatter's data and bounds, view-change
handlers) and their paints; here a move is one bounds change and a paint of two shapes.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

DOT_PX = 13.0  # the dot's diameter


class HereMarker(QtWidgets.QGraphicsItem):
    """Put in a plot's view box; ``set(x, y)`` moves it (``y`` None: the line without a dot), and
    ``view_changed`` follows the view's range and size (its bounds are in data units, its shapes in pixels)."""

    def __init__(self, line_pen: QtGui.QPen, dot_pen: QtGui.QPen, dot_brush: QtGui.QBrush) -> None:
        super().__init__()
        self._line_pen, self._dot_pen, self._dot_brush = line_pen, dot_pen, dot_brush
        self._x: float | None = None
        self._y: float | None = None
        self._view = QtCore.QRectF(0.0, 0.0, 1.0, 1.0)  # the view's data range
        self._px = (1.0, 1.0)  # data units per pixel, x and y
        self._bounds = QtCore.QRectF()
        self.setZValue(10)  # above the curves and dots
        self.hide()

    def position(self) -> tuple[float | None, float | None]:
        """The depth and the speed the marker shows now."""
        return self._x, self._y

    def set(self, x: float, y: float | None) -> None:
        """Move to depth ``x`` with the dot at speed ``y`` (None: no dot, the speed is not known)."""
        if (x, y) == (self._x, self._y):
            return
        self.prepareGeometryChange()
        self._x, self._y = x, y
        self._bounds = self._compute()

    def view_changed(self, view: QtCore.QRectF, px: tuple[float, float]) -> None:
        """The view's data range and its data units per pixel changed."""
        if view == self._view and px == self._px:
            return
        self.prepareGeometryChange()
        self._view, self._px = QtCore.QRectF(view), px
        self._bounds = self._compute()

    def _compute(self) -> QtCore.QRectF:
        if self._x is None:
            return QtCore.QRectF()
        half = DOT_PX / 2 + 2
        px_x = abs(self._px[0]) or 1.0
        top = min(self._view.top(), self._view.bottom())
        return QtCore.QRectF(self._x - half * px_x, top, 2 * half * px_x, abs(self._view.height()))

    def boundingRect(self) -> QtCore.QRectF:
        return self._bounds

    def paint(self, p: QtGui.QPainter, _opt: QtWidgets.QStyleOptionGraphicsItem,
              _w: QtWidgets.QWidget | None = None) -> None:
        if self._x is None:
            return
        t = p.transform()
        foot = t.map(QtCore.QPointF(self._x, self._bounds.top()))
        head = t.map(QtCore.QPointF(self._x, self._bounds.bottom()))
        dot = t.map(QtCore.QPointF(self._x, self._y)) if self._y is not None else None
        p.resetTransform()  # from here on in pixels (the clip stays where the view put it)
        p.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, True)
        p.setPen(self._line_pen)
        p.drawLine(foot, head)
        if dot is not None:
            p.setPen(self._dot_pen)
            p.setBrush(self._dot_brush)
            r = DOT_PX / 2 - self._dot_pen.widthF() / 2
            p.drawEllipse(dot, r, r)
