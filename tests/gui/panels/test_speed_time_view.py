"""The speed-over-time panel as one view: a poll repaints one viewport, and a short view keeps its time axis."""

from __future__ import annotations

import itertools
import math
import time

import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtCore, QtGui, QtWidgets
from synthetic import SyntheticMonitor

from kvmon.core.history import History
from kvmon.gui.panels.speed_time import CHART_FLOOR, LEGEND_MIN_VIEW_HEIGHT, MIN_HEIGHT, SpeedTimePanel


class _ViewportPaints(QtCore.QObject):
    """Counts paint events of the graphics views' viewports under ``root``."""

    def __init__(self, root: QtWidgets.QWidget) -> None:
        super().__init__()
        self.viewports = {v.viewport() for v in root.findChildren(QtWidgets.QGraphicsView)}
        if isinstance(root, QtWidgets.QGraphicsView):
            self.viewports.add(root.viewport())
        self.count = 0

    def eventFilter(self, obj: QtCore.QObject, e: QtCore.QEvent) -> bool:
        if e.type() == QtCore.QEvent.Type.Paint and obj in self.viewports:
            self.count += 1
        return False


@pytest.fixture
def panel(qtbot) -> SpeedTimePanel:
    p = SpeedTimePanel(History())
    qtbot.addWidget(p)
    p.resize(520, 300)
    p.show()
    qtbot.waitExposed(p)
    return p


def _feed(panel: SpeedTimePanel, mon: SyntheticMonitor, seqs: range) -> None:
    for i in seqs:
        panel.history.append(mon.snapshot(i))
    panel.refresh()


def test_a_poll_with_decode_and_prefill_repaints_one_viewport(panel: SpeedTimePanel, qtbot) -> None:
    """Chart and lane are items of one scene: a poll that extends both curves paints one viewport, once."""
    assert panel.lane.scene() is panel.plot.scene()
    assert panel.findChildren(QtWidgets.QGraphicsView) == [panel.plot]  # one view for chart, lane and legend
    # the clock starts a second past a whole five minutes, so that the measured poll stays inside the axis's step
    # whatever the time of day (from the clock now, one run in thirty crossed it and redrew the window)
    mon = SyntheticMonitor(t0_wall=math.floor(time.time() / 300) * 300 + 1)
    _feed(panel, mon, range(20))
    qtbot.wait(50)
    i = 20
    while mon.snapshot(i).prefill_tok_s is None:  # a poll that measured prefill as well as decode
        _feed(panel, mon, range(i, i + 1))
        i += 1
    qtbot.wait(50)
    assert i < 28, i  # (the step's end is at poll 29)
    counter = _ViewportPaints(panel.plot)
    QtWidgets.QApplication.instance().installEventFilter(counter)
    try:
        x_range = panel.x_range()
        _feed(panel, mon, range(i, i + 1))
        assert panel.x_range() == x_range  # appended within the step (no redraw of the window)
        assert not panel.decode.last_dirty.isNull() and not panel.prefill.last_dirty.isNull()
        qtbot.waitUntil(lambda: counter.count >= 1, timeout=2000)
        qtbot.wait(50)
    finally:
        QtWidgets.QApplication.instance().removeEventFilter(counter)
    assert counter.count == 1


def _inside(panel: SpeedTimePanel, item: QtWidgets.QGraphicsItem) -> bool:
    rect = panel.plot.mapFromScene(item.sceneBoundingRect()).boundingRect()
    return panel.plot.viewport().rect().adjusted(-1, -1, 1, 1).contains(rect)


def _tick_texts(axis: QtWidgets.QGraphicsItem) -> list[tuple[QtCore.QRectF, str]]:
    img = QtGui.QImage(10, 10, QtGui.QImage.Format.Format_ARGB32)
    p = QtGui.QPainter(img)
    try:
        specs = axis.generateDrawSpecs(p)
    finally:
        p.end()
    return [(rect, text) for rect, _flags, text in specs[2]] if specs is not None else []


@pytest.mark.parametrize("height", [320, LEGEND_MIN_VIEW_HEIGHT, LEGEND_MIN_VIEW_HEIGHT - 1, 130, MIN_HEIGHT])
def test_a_short_view_keeps_the_time_axis_and_no_tick_labels_overlap(panel: SpeedTimePanel, qtbot,
                                                                     height: int) -> None:
    """Height goes to the chart last: the legend is shown whole or not at all, the time axis is never cut off,
    the chart keeps its floor, and no two tick labels of either scale print over each other."""
    _feed(panel, SyntheticMonitor(), range(40))
    panel.resize(520, height)
    qtbot.waitUntil(lambda: panel.plot.height() == height, timeout=2000)
    QtWidgets.QApplication.processEvents()
    pi = panel.plot.getPlotItem()
    assert _inside(panel, panel.lane.getAxis("bottom"))
    assert pi.legend.isVisible() == (height >= LEGEND_MIN_VIEW_HEIGHT)
    if pi.legend.isVisible():
        assert _inside(panel, pi.legend)
        assert pi.legend.sceneBoundingRect().top() >= panel.lane.getAxis("bottom").sceneBoundingRect().bottom() - 1
    assert pi.vb.height() >= CHART_FLOOR - 1
    assert "decode" in panel.plot.toolTip().lower() and "prefill" in panel.plot.toolTip().lower()
    for axis in (pi.getAxis("left"), panel.lane.getAxis("left")):
        texts = _tick_texts(axis)
        assert "0" in [t for _r, t in texts] and len(texts) >= 2
        for (a, ta), (b, tb) in itertools.combinations(texts, 2):
            assert not a.intersects(b), f"{ta!r} and {tb!r} overlap at height {height}"
    panel.resize(520, 320)  # and back: the legend and the lane's full height return
    qtbot.waitUntil(lambda: panel.plot.height() == 320, timeout=2000)
    QtWidgets.QApplication.processEvents()
    assert pi.legend.isVisible() and _inside(panel, pi.legend) and _inside(panel, panel.lane.getAxis("bottom"))


def test_an_empty_prefill_lane_says_so_instead_of_a_made_up_scale(panel: SpeedTimePanel, qtbot) -> None:
    """With no prefill in the window the lane has a zero tick only and says why it is empty; the first prefill
    sample gives it its scale (0 and a top above the sample) and the note goes; a window past it says so again."""
    import dataclasses

    mon = SyntheticMonitor()
    quiet = [dataclasses.replace(mon.snapshot(i), prefill_tok_s=None) for i in range(30)]
    for s in quiet:
        panel.history.append(s)
    panel.refresh()
    qtbot.wait(20)
    lane_axis = panel.lane.getAxis("left")
    assert [text for _r, text in _tick_texts(lane_axis)] == ["0"]
    assert panel.no_prefill.isVisible() and _inside(panel, panel.no_prefill)
    assert panel.no_prefill.text() == "no prefill measured in this window"

    x_range = panel.x_range()
    panel.history.append(dataclasses.replace(mon.snapshot(30), prefill_tok_s=850.0))
    panel.refresh()
    qtbot.wait(20)
    assert panel.x_range() == x_range  # the same window, drawn again for the lane's new scale
    assert not panel.no_prefill.isVisible()
    labels = [text for _r, text in _tick_texts(lane_axis)]
    top = labels[1].removesuffix(" tok/s")
    assert labels[0] == "0" and len(labels) == 2 and labels[1].endswith(" tok/s")
    assert (float(top[:-1]) * 1000 if top.endswith("K") else float(top)) >= 850.0

    for i in range(31, 41):
        panel.history.append(dataclasses.replace(mon.snapshot(i), prefill_tok_s=None))
    panel.set_window(5.0)  # a window of the last few seconds: the prefill sample is out of it
    panel.refresh()
    qtbot.wait(20)
    assert panel.no_prefill.isVisible() and [text for _r, text in _tick_texts(lane_axis)] == ["0"]
