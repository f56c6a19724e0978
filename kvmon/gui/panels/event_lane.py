"""The event lane of the speed-over-time chart: a router's or llama-swap's model loads, sleeps, failures and follows,
a reload, as marks in one row above the chart with a few words each, and a faint line down through the chart.

Marks whose words would touch are merged into one ("→ gemma-3-12b +2": the most telling event's words and how many
more), so no two texts ever print over each other; a text near an edge is moved inside the lane, never cut; the
whole story of a mark is its tooltip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.history import Event
from kvmon.gui import theme
from kvmon.gui.plot_labels import PlotText, plot_font

LANE_PX = 16  # the lane's height (pixels)
MERGE_PX = 6.0  # events closer than this share a mark whatever their words
TEXT_GAP_PX = 6.0  # kept between two marks' words
NAME_CHARS = 16  # a longer model name is cut with "…" (the tooltip says it whole)
TICK_PX = 4.0  # the mark's small triangle
# a kind's few words, and how telling it is when marks merge (the highest names the mark)
WORDS = {"loading": "loading", "loaded": "loaded", "unloaded": "unloaded", "sleeping": "asleep", "woke": "woke",
         "failed": "failed", "followed": "", "reloaded": "reloaded", "changed": "setup changed"}
RANK = {"failed": 6, "reloaded": 5, "followed": 4, "changed": 3, "loaded": 2, "unloaded": 2, "sleeping": 1, "woke": 1,
        "loading": 0}
SERVER_KINDS = frozenset({"reloaded", "changed"})  # the server's own events: no model name needed


def short_name(model: str) -> str:
    """A model's name cut to ``NAME_CHARS``."""
    return model if len(model) <= NAME_CHARS else model[: NAME_CHARS - 1] + "…"


def event_label(ev: Event) -> str:
    """A mark's few words: "qwen3-8b loaded", "→ gemma-3-12b" (now shown), "reloaded"."""
    if ev.kind == "followed":
        return f"→ {short_name(ev.model)}"
    if ev.kind in SERVER_KINDS:
        return WORDS[ev.kind]
    return f"{short_name(ev.model)} {WORDS.get(ev.kind, ev.kind)}"


@dataclass(frozen=True)
class Mark:
    """One mark of the lane: the events it stands for, its words and where they go (pixels)."""

    x: float  # the mark's place: its most telling event's time
    events: tuple[Event, ...]
    text: str
    left: float
    width: float

    @property
    def failed(self) -> bool:
        return any(e.kind == "failed" for e in self.events)

    def tick(self) -> tuple[float, float, float, float]:
        """The mark's triangle (left, top, width, height in the lane's pixels)."""
        return (self.x - TICK_PX, LANE_PX - TICK_PX - 3, 2 * TICK_PX, TICK_PX + 2)


def _mark(xs: Sequence[float], events: Sequence[Event], group: list[int], width_of: Callable[[str], float],
          lane_w: float) -> Mark:
    top = max(group, key=lambda i: (RANK.get(events[i].kind, 0), i))
    more = len(group) - 1
    text = event_label(events[top]) + (f" +{more}" if more else "")
    w = width_of(text)
    if w > lane_w:
        text = f"{len(group)} events"
        w = width_of(text)
    x = xs[top]
    left = x + TICK_PX + 2  # right of its triangle; where that would leave the lane, left of it; else inside
    if left + w > lane_w:
        left = x - TICK_PX - 2 - w if x - TICK_PX - 2 - w >= 0 else max(lane_w - w, 0.0)
    return Mark(x, tuple(events[i] for i in group), text, max(left, 0.0), w)


def arrange(xs: Sequence[float], events: Sequence[Event], width_of: Callable[[str], float], lane_w: float
            ) -> list[Mark]:
    """Marks for events at pixels ``xs`` (ascending) in a lane ``lane_w`` wide: close events share a mark, and
    marks whose words would touch are merged until none do."""
    groups: list[list[int]] = []
    for i, x in enumerate(xs):
        if groups and x - xs[groups[-1][-1]] < MERGE_PX:
            groups[-1].append(i)
        else:
            groups.append([i])
    while True:
        marks = [_mark(xs, events, g, width_of, lane_w) for g in groups]
        clash = next((i for i in range(len(marks) - 1)
                      if marks[i].left + marks[i].width + TEXT_GAP_PX > marks[i + 1].left), None)
        if clash is None:
            return marks
        groups[clash: clash + 2] = [groups[clash] + groups[clash + 1]]


def tooltip(events: Sequence[Event]) -> str:
    """Each event of a mark at its clock time, in its own words."""
    return "\n".join(f"{time.strftime('%H:%M:%S', time.localtime(e.t_wall))}  {e.message}" for e in events)


class EventLane(QtWidgets.QGraphicsWidget):
    """The row of marks above a chart; ``set_events`` with the events in view and the chart's time range, and it
    draws each mark's words and a faint line at each event down through ``chart`` (the chart's view box)."""

    def __init__(self, chart: QtWidgets.QGraphicsWidget) -> None:
        super().__init__()
        self._chart = chart
        self._font = plot_font()
        self._metrics = QtGui.QFontMetricsF(self._font)
        self._fg = QtGui.QColor(theme.foreground())
        self._bg = QtGui.QColor(theme.background())
        self._texts: list[PlotText] = []
        self.marks: list[Mark] = []
        self._events: tuple[Event, ...] = ()
        self._range = (0.0, 1.0)
        self._drawn: object = None
        muted = theme.color("muted")
        muted.setAlpha(110)
        critical = theme.color("critical")
        critical.setAlpha(160)
        self._lines = [QtWidgets.QGraphicsPathItem(chart) for _ in range(2)]  # in the chart's own pixels
        for item, colour in zip(self._lines, (muted, critical), strict=True):
            pen = QtGui.QPen(colour, 1.0)
            pen.setCosmetic(True)
            item.setPen(pen)
            item.setZValue(4)  # under the curves
        self.setMinimumHeight(LANE_PX)
        self.setMaximumHeight(LANE_PX)
        self.setToolTip("Model loads, sleeps, failures and follows, and server reloads; hover a mark for its story.")

    def set_events(self, events: Sequence[Event], x_range: tuple[float, float]) -> None:
        """The events to mark and the chart's time range (clock seconds)."""
        self._events, self._range = tuple(events), x_range
        self.relayout()

    def texts(self) -> list[PlotText]:
        """The marks' words as shown."""
        return [t for t in self._texts if t.isVisible()]

    def resizeEvent(self, e: QtWidgets.QGraphicsSceneResizeEvent) -> None:
        super().resizeEvent(e)
        self.relayout()

    def relayout(self) -> None:
        """Place the marks for the current events, range and width (only when one of them changed)."""
        w, chart_w, chart_h = self.size().width(), self._chart.size().width(), self._chart.size().height()
        key = (self._events, self._range, w, chart_w, chart_h)
        if key == self._drawn:
            return
        self._drawn = key
        x0, x1 = self._range
        scale = w / (x1 - x0) if x1 > x0 else 0.0
        shown = [e for e in self._events if x0 <= e.t_wall <= x1]
        xs = [(e.t_wall - x0) * scale for e in shown]
        self.marks = arrange(xs, shown, self._metrics.horizontalAdvance, w) if w > 0 else []
        while len(self._texts) < len(self.marks):
            self._texts.append(PlotText(self, self._font, self._fg, self._bg))
        for i, item in enumerate(self._texts):
            if i >= len(self.marks):
                item.hide()
                continue
            m = self.marks[i]
            item.setText(m.text)
            item.set_color(theme.color("critical") if m.failed else self._fg)
            item.setToolTip(tooltip(m.events))
            item.put((m.left, (LANE_PX - item.size()[1]) / 2, m.width, item.size()[1]))
        sx = chart_w / w if w else 1.0  # the chart's pixels per lane pixel (the same column: 1)
        paths = [QtGui.QPainterPath(), QtGui.QPainterPath()]
        for e, x in zip(shown, xs, strict=True):
            path = paths[1 if e.kind == "failed" else 0]
            path.moveTo(x * sx, 0.0)
            path.lineTo(x * sx, chart_h)
        for line, path in zip(self._lines, paths, strict=True):
            line.setPath(path)
        self.update()

    def paint(self, p: QtGui.QPainter, *_args: object) -> None:
        p.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, True)
        p.setPen(QtCore.Qt.PenStyle.NoPen)
        for m in self.marks:
            p.setBrush(theme.color("critical") if m.failed else theme.color("muted"))
            left, top, w, h = m.tick()
            p.drawPolygon(QtGui.QPolygonF([QtCore.QPointF(left, top), QtCore.QPointF(left + w, top),
                                           QtCore.QPointF(m.x, top + h)]))
