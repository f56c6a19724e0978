"""Small shared plot parts: a plot made the cheap way, axes for context and clock time, pixmap caches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from kvmon.gui import theme

__all__ = ["ClockAxis", "RowLegend", "TokenAxis", "add_curve", "cache_axis", "cache_static",
           "legend_below", "make_plot", "nice_ceiling", "plain_item", "set_title", "set_xy"]
TITLE_HEIGHT = 20  # a plot's 9 pt title row (pyqtgraph gives any title 30 px)
LEGEND_ROW = 4  # the PlotItem's layout: 0 title, 1 top axis, 2 the data, 3 bottom axis; the legend below them


class TokenAxis(pg.AxisItem):
    """A context axis labelled 8K, 64K, 1.5M rather than 8192, 65536, 1500000."""

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        out = []
        for v in values:
            a = abs(v)
            if a >= 1e6:
                out.append(f"{v / 1e6:g}M")
            elif a >= 1e3:
                out.append(f"{v / 1e3:g}K")
            else:
                out.append(f"{v:g}")
        return out


class ClockAxis(pg.DateAxisItem):
    """Local clock time, never finer than seconds: a short capture reads 12:04:44, not 44.500."""

    def __init__(self, orientation: str = "bottom", **kwargs: object) -> None:
        super().__init__(orientation, **kwargs)
        self.zoomLevels.popitem()  # the millisecond level is the finest: drop it


class RowLegend(pg.LegendItem):
    """A legend on a filled box in a row of its own under the axis: it never covers the data. Its size comes from
    its entries; the plot's layout places it (pyqtgraph's own legend sets its geometry itself, over the data)."""

    def __init__(self, columns: int) -> None:
        super().__init__(offset=None, horSpacing=14, verSpacing=-4, colCount=columns, labelTextSize="8pt",
                         brush=theme.color("legend"), pen=theme.color("muted"), labelTextColor=theme.foreground())
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Maximum, QtWidgets.QSizePolicy.Policy.Fixed)
        self.layout.setContentsMargins(4, 0, 4, 0)
        self.max_columns = columns
        self._room = 0.0

    def addItem(self, item: object, name: str) -> None:
        super().addItem(item, name)
        self.fit(self._room)

    def removeItem(self, item: object) -> None:
        super().removeItem(item)
        self.fit(self._room)

    def fit(self, width: float) -> None:
        """As many columns (up to ``max_columns``) as fit in ``width`` pixels: a narrow plot's legend wraps, and
        never makes the plot wider than its window."""
        self._room = width
        for n in range(self.max_columns, 0, -1):
            self._arrange(n)
            need = self.layout.effectiveSizeHint(QtCore.Qt.SizeHint.PreferredSize).width() + 8
            if n == 1 or width <= 0 or need <= width:
                break
        self.updateSize()

    def _arrange(self, columns: int) -> None:
        """Entries in reading order, ``columns`` to a row (sample, then its name)."""
        self.columnCount = columns
        for i in range(self.layout.count() - 1, -1, -1):
            self.layout.removeAt(i)
        for i, (sample, label) in enumerate(self.items):
            row, col = divmod(i, columns)
            self.layout.addItem(sample, row, 2 * col, alignment=QtCore.Qt.AlignmentFlag.AlignVCenter)
            self.layout.addItem(label, row, 2 * col + 1)
        self.rowCount = max(1, -(-len(self.items) // columns))

    def watch(self, plot: pg.PlotWidget) -> None:
        """Fit again whenever the plot's widget is resized (its width, not the plot item's: that one cannot
        shrink below the legend it holds)."""
        self._plot = plot
        plot.installEventFilter(self)

    def eventFilter(self, obj: QtCore.QObject, e: QtCore.QEvent) -> bool:
        if e.type() == QtCore.QEvent.Type.Resize and obj is getattr(self, "_plot", None):
            pi = self._plot.getPlotItem()  # the legend's column is the data's: the widget less the side axes
            sides = sum(pi.getAxis(n).width() for n in ("left", "right") if pi.getAxis(n).isVisible())
            self.fit(self._plot.width() - sides)
        return False

    def updateSize(self) -> None:
        self.layout.activate()
        self.updateGeometry()  # the plot's layout asks its size hint again

    def sizeHint(self, which: QtCore.Qt.SizeHint, constraint: QtCore.QSizeF | None = None) -> QtCore.QSizeF:
        hint = self.layout.effectiveSizeHint(which, constraint if constraint is not None else QtCore.QSizeF())
        return QtCore.QSizeF(hint.width() + 6, hint.height() + 2)


def legend_below(plot: pg.PlotWidget, columns: int, row: int = LEGEND_ROW) -> RowLegend:
    """Put a :class:`RowLegend` under the plot's bottom axis (or in a later ``row`` of the plot item's layout, below
    what a panel put there); it is also ``plot.getPlotItem().legend``."""
    pi = plot.getPlotItem()
    legend = RowLegend(columns)
    pi.layout.addItem(legend, row, 1, QtCore.Qt.AlignmentFlag.AlignHCenter)
    pi.layout.setRowSpacing(row - 1, 2)
    pi.legend = legend
    legend.watch(plot)
    return legend


def set_title(plot: pg.PlotWidget, title: str) -> None:
    """The plot's title in 9 pt, in a row only as high as the text."""
    item = plot.getPlotItem()
    item.setTitle(title, size="9pt", color=theme.foreground())
    item.layout.setRowFixedHeight(0, TITLE_HEIGHT)


def make_plot(title: str, x_label: str, x_units: str | None, y_label: str, y_units: str | None,
              axis_items: dict[str, pg.AxisItem] | None = None) -> pg.PlotWidget:
    """A PlotWidget with units on both axes, no grid, no menu, fixed look: created once per panel."""
    pg.setConfigOptions(**theme.plot_options())  # the scheme of the moment (a plot is made after a switch too)
    w = pg.PlotWidget(axisItems=axis_items)
    w.setBackground(theme.background())
    item = w.getPlotItem()
    if title:
        set_title(w, title)
    item.setLabel("bottom", x_label, units=x_units)
    item.setLabel("left", y_label, units=y_units)
    plain_item(item)
    w.setMinimumHeight(120)
    return w


def plain_item(item: pg.PlotItem) -> None:
    """A plot item's fixed look: no menu, buttons or grid; plain numbers on cached axes."""
    item.setMenuEnabled(False)
    item.hideButtons()
    item.showGrid(x=False, y=False)  # a grid roughly doubles paint time; the axes carry the numbers
    for name in ("left", "bottom"):
        ax = item.getAxis(name)
        ax.enableAutoSIPrefix(False)
        cache_axis(ax)


def nice_ceiling(v: float) -> float:
    """The next 'round' axis limit above ``v`` (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k): ranges change rarely."""
    if not math.isfinite(v) or v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if m * exp >= v:
            return m * exp
    return 10.0 * exp


def cache_axis(ax: pg.AxisItem) -> None:
    """Keep the axis as a pixmap: a repaint of the curves beside it then blits it instead of redrawing it."""
    ax.setCacheMode(QtWidgets.QGraphicsItem.CacheMode.DeviceCoordinateCache)


def cache_static(item: QtWidgets.QGraphicsItem) -> None:
    """Keep a plot's fixed parts (title, legend) as pixmaps, children included: a repaint blits them."""
    item.setCacheMode(QtWidgets.QGraphicsItem.CacheMode.DeviceCoordinateCache)
    for child in item.childItems():
        cache_static(child)


def set_xy(item: Any, pairs: Sequence[Sequence[float]]) -> None:
    """Give a curve or scatter its (x, y) pairs (none: it draws nothing)."""
    arr = np.asarray(pairs, dtype=float).reshape(-1, 2)
    item.setData(arr[:, 0], arr[:, 1])


def add_curve(plot: pg.PlotWidget, quantity: str, name: str | None = None, width: float = 1.5) -> pg.PlotDataItem:
    """A curve in the quantity's colour with clip-to-view and peak downsampling."""
    c = plot.getPlotItem().plot([], [], pen=theme.pen(quantity, width), name=name, connect="finite")
    c.setClipToView(True)
    c.setDownsampling(auto=True, method="peak")
    return c
