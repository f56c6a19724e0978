"""Small shared widgets: a label that repaints only when its text changes, and a plot made the cheap way."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from kvmon.gui import theme


class ValueLabel(QtWidgets.QLabel):
    """A label whose ``set()`` touches Qt only when text or tooltip actually changed."""

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(text, parent)
        self._tip = ""
        self.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)

    def set(self, text: str, tooltip: str | None = None) -> bool:
        """Update text/tooltip; returns True when something changed."""
        changed = False
        if text != self.text():
            self.setText(text)
            changed = True
        if tooltip is not None and tooltip != self._tip:
            self._tip = tooltip
            self.setToolTip(tooltip)
            changed = True
        return changed


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
    item.showGrid(x=False, y=True, alpha=0.08)
    for name in ("left", "bottom"):
        ax = item.getAxis(name)
        ax.enableAutoSIPrefix(False)
    w.setMinimumHeight(120)
    return w


def add_curve(plot: pg.PlotWidget, quantity: str, name: str | None = None, width: float = 1.5) -> pg.PlotDataItem:
    """A curve in the quantity's colour with clip-to-view and peak downsampling."""
    c = plot.getPlotItem().plot([], [], pen=theme.pen(quantity, width), name=name, connect="finite")
    c.setClipToView(True)
    c.setDownsampling(auto=True, method="peak")
    return c
