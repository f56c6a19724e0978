"""Small shared widgets: a label that repaints only when its text changes, and a plot made the cheap way."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.gui import theme


class ValueLabel(QtWidgets.QWidget):
    """A label whose ``set()`` repaints only itself: the layout is asked again only when the text needs more room.

    A QLabel asks its parent's layout to recompute on every ``setText``: a re-layout of the whole panel (rich-text
    height-for-width included) each poll. Here the label lives in a box without a layout; the box reports a
    size hint that only grows (or shrinks when the text is much shorter), so a changing number repaints one
    label and the neighbours do not jitter by a digit's width.
    """

    SHRINK_BELOW = 0.6  # a hint this much narrower than the reserved width gives the room back

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._label = QtWidgets.QLabel(text, self)
        self._label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self._tip = ""
        self._hint = self._label.sizeHint()
        self._min_hint = self._label.minimumSizeHint()
        self._fit_len = len(text)

    # --- the QLabel parts callers use ---------------------------------------------------------
    def text(self) -> str:
        return self._label.text()

    def toolTip(self) -> str:
        return self._label.toolTip()

    def setToolTip(self, tip: str) -> None:
        self._tip = tip
        self._label.setToolTip(tip)

    def setText(self, text: str) -> None:
        self.set(text)

    def setWordWrap(self, on: bool) -> None:
        self._label.setWordWrap(on)
        self._refit(force=True)

    def setTextFormat(self, fmt: QtCore.Qt.TextFormat) -> None:
        self._label.setTextFormat(fmt)
        self._refit(force=True)

    def setAlignment(self, align: QtCore.Qt.AlignmentFlag) -> None:
        self._label.setAlignment(align)

    # --- layout ---------------------------------------------------------------------------------
    def sizeHint(self) -> QtCore.QSize:
        return self._hint

    def minimumSizeHint(self) -> QtCore.QSize:
        return self._min_hint

    def hasHeightForWidth(self) -> bool:
        return self._label.wordWrap()

    def heightForWidth(self, width: int) -> int:
        return self._label.heightForWidth(width)

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        self._label.setGeometry(self.rect())
        super().resizeEvent(e)

    def changeEvent(self, e: QtCore.QEvent) -> None:
        super().changeEvent(e)
        if e.type() in (QtCore.QEvent.Type.FontChange, QtCore.QEvent.Type.StyleChange):
            self._refit(force=True)  # a style sheet's font size changes the room the text needs

    def _refit(self, force: bool = False) -> None:
        """Ask the parent layout again only when the text no longer fits (or frees much of its room)."""
        if self._label.wordWrap():  # only the height for the current width matters (a rich-text layout)
            need = self._label.heightForWidth(self.width()) if self.width() > 0 else -1
            if force or need != self.height():
                self._hint, self._min_hint = self._label.sizeHint(), self._label.minimumSizeHint()
                self.updateGeometry()
            return
        # Measuring rich text means laying it out: skip it while the text is no longer than the last one measured
        # (numbers change, their length rarely does; the reserved room has a character's slack for wider glyphs).
        n = len(self._label.text())
        if not force and self.SHRINK_BELOW * self._fit_len <= n <= self._fit_len:
            return
        hint = self._label.sizeHint()
        self._fit_len = n
        grow = hint.width() > self._hint.width() or hint.height() != self._hint.height()
        shrink = hint.width() < self._hint.width() * self.SHRINK_BELOW
        if force or grow or shrink:
            slack = self._label.fontMetrics().averageCharWidth()
            self._hint = QtCore.QSize(hint.width() + slack, hint.height())
            self._min_hint = self._label.minimumSizeHint()
            self.updateGeometry()

    def set(self, text: str, tooltip: str | None = None) -> bool:
        """Update text/tooltip; returns True when something changed."""
        changed = False
        if text != self._label.text():
            self._label.setText(text)
            self._refit()
            changed = True
        if tooltip is not None and tooltip != self._tip:
            self._tip = tooltip
            self._label.setToolTip(tooltip)
            changed = True
        return changed


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


def make_plot(title: str, x_label: str, x_units: str | None, y_label: str, y_units: str | None,
              axis_items: dict[str, pg.AxisItem] | None = None) -> pg.PlotWidget:
    """A PlotWidget with units on both axes, no grid, no menu, fixed look: created once per panel."""
    w = pg.PlotWidget(axisItems=axis_items)
    w.setBackground(theme.background())
    item = w.getPlotItem()
    item.setTitle(title, size="9pt", color=theme.foreground())
    item.setLabel("bottom", x_label, units=x_units)
    item.setLabel("left", y_label, units=y_units)
    item.setMenuEnabled(False)
    item.hideButtons()
    item.showGrid(x=False, y=False)  # a grid roughly doubles paint time; the axes carry the numbers
    for name in ("left", "bottom"):
        ax = item.getAxis(name)
        ax.enableAutoSIPrefix(False)
        cache_axis(ax)
    w.setMinimumHeight(120)
    return w


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


def add_curve(plot: pg.PlotWidget, quantity: str, name: str | None = None, width: float = 1.5) -> pg.PlotDataItem:
    """A curve in the quantity's colour with clip-to-view and peak downsampling."""
    c = plot.getPlotItem().plot([], [], pen=theme.pen(quantity, width), name=name, connect="finite")
    c.setClipToView(True)
    c.setDownsampling(auto=True, method="peak")
    return c
