"""Every text of a window's plots as painted, and the problems a user would see in them: a text over another text or
over a marker dot, or cut by the view it sits in.

A plot's texts are its scene's text items (titles, axis names, legend names, the labels on the data, the event
lane's words) and its axes' tick labels (painted by the axes: their rectangles come from the axes' own draw specs).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

TOLERANCE_PX = 0.5  # rectangles that only touch do not overlap


@dataclass(frozen=True)
class Text:
    """One text as painted: its words, its rectangle and the rectangle it must stay inside (scene coordinates)."""

    words: str
    rect: QtCore.QRectF
    clip: QtCore.QRectF
    where: str  # which plot


def _view_box(item: QtWidgets.QGraphicsItem) -> pg.ViewBox | None:
    parent = item.parentItem()
    while parent is not None:
        if isinstance(parent, pg.ViewBox):
            return parent
        parent = parent.parentItem()
    return None


def _tight(item: QtWidgets.QGraphicsItem) -> QtCore.QRectF:
    """The item's text rectangle in scene coordinates (a rich-text item's document margin taken off)."""
    r = item.boundingRect()
    if isinstance(item, QtWidgets.QGraphicsTextItem):
        m = item.document().documentMargin()
        r = r.adjusted(m, m, -m, -m)
    return item.mapRectToScene(r)


def _tick_texts(axis: pg.AxisItem) -> list[tuple[str, QtCore.QRectF]]:
    if not axis.isVisible() or not axis.style.get("showValues", True):
        return []
    img = QtGui.QImage(10, 10, QtGui.QImage.Format.Format_ARGB32)
    p = QtGui.QPainter(img)
    try:
        specs = axis.generateDrawSpecs(p)
    finally:
        p.end()
    if specs is None:
        return []
    return [(text, axis.mapRectToScene(QtCore.QRectF(rect))) for rect, _flags, text in specs[2]]


def plot_texts(plot: pg.PlotWidget, where: str) -> list[Text]:
    """Every visible text of a plot widget's scene, with the rectangle it must stay inside."""
    seen = plot.mapToScene(plot.viewport().rect()).boundingRect()
    out: list[Text] = []
    for item in plot.scene().items():
        if not item.isVisible() or item.opacity() == 0:
            continue
        if isinstance(item, QtWidgets.QGraphicsSimpleTextItem | QtWidgets.QGraphicsTextItem):
            words = item.text() if isinstance(item, QtWidgets.QGraphicsSimpleTextItem) else item.toPlainText()
            if not words.strip():
                continue
            vb = _view_box(item)
            clip = vb.sceneBoundingRect() if vb is not None else seen
            out.append(Text(words, _tight(item), clip, where))
        elif isinstance(item, pg.AxisItem):
            out += [Text(t, r, seen, where) for t, r in _tick_texts(item)]
    return out


def problems(texts: list[Text], dots: list[tuple[str, QtCore.QRectF]]) -> list[str]:
    """Texts that overlap another text or a dot, or leave the rectangle they must stay inside."""
    out = []
    for t in texts:
        if not t.clip.adjusted(-TOLERANCE_PX, -TOLERANCE_PX, TOLERANCE_PX, TOLERANCE_PX).contains(t.rect):
            out.append(f"{t.where}: {t.words!r} is cut by its view ({_r(t.rect)} outside {_r(t.clip)})")
    for a, b in itertools.combinations(texts, 2):
        if _hit(a.rect, b.rect):
            out.append(f"{a.where}: {a.words!r} {_r(a.rect)} overlaps {b.words!r} {_r(b.rect)}")
    for t in texts:
        for name, d in dots:
            if _hit(t.rect, d):
                out.append(f"{t.where}: {t.words!r} {_r(t.rect)} covers {name} {_r(d)}")
    return out


def _hit(a: QtCore.QRectF, b: QtCore.QRectF) -> bool:
    i = a.intersected(b)
    return i.width() > TOLERANCE_PX and i.height() > TOLERANCE_PX


def _r(r: QtCore.QRectF) -> str:
    return f"({r.x():.0f},{r.y():.0f} {r.width():.0f}×{r.height():.0f})"


def window_plot_problems(win: object, what: str = "") -> list[str]:
    """The problems of the hero plot, the speed-over-time plot and the what-if plot of a MainWindow (the what-if
    tab is shown for its check, then the hero's again)."""
    from kvmon.gui.plot_labels import to_pixels

    app = QtWidgets.QApplication.instance()
    w: object = win
    hero, strip = w.speed_context, w.speed_time  # type: ignore[attr-defined]
    app.processEvents()
    out: list[str] = []
    dots: list[tuple[str, QtCore.QRectF]] = []
    vb = hero.plot.getPlotItem().getViewBox()
    x, y = hero.here.position()
    if hero.here.isVisible() and x is not None and y is not None:
        px, py = to_pixels(vb, [x], [y])
        dots.append(("the you-are-here dot", vb.mapRectToScene(QtCore.QRectF(px[0] - 6.5, py[0] - 6.5, 13, 13))))
    mx, my = hero.milestone_dots.getData()
    if mx is not None and hero.milestone_dots.isVisible():
        px, py = to_pixels(vb, mx, my)
        dots += [("a milestone dot", vb.mapRectToScene(QtCore.QRectF(a - 3.5, b - 3.5, 7, 7)))
                 for a, b in zip(px, py, strict=True)]
    out += problems(plot_texts(hero.plot, f"{what} speed vs context"), dots)
    lane = strip.events
    ticks = [("an event mark", lane.mapRectToScene(QtCore.QRectF(*m.tick()))) for m in lane.marks]
    out += problems(plot_texts(strip.plot, f"{what} speed over time"), ticks)
    whatif = w.show_whatif()  # type: ignore[attr-defined]
    app.processEvents()
    out += problems(plot_texts(whatif.plot, f"{what} what-if"), [])
    w.tabs.setCurrentIndex(0)  # type: ignore[attr-defined]
    app.processEvents()
    return out
