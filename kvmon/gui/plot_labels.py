"""Text on a plot's data, placed where it collides with nothing: each label tries its candidate positions in order
and takes the first that stays inside the view and overlaps no label placed before it and no marker dot; among
those, the one over the fewest curve points. A label with no such position is not shown (one printed over another
is worse than none).

``place`` is plain geometry in the view's pixels (y down); ``PlotText`` is the text item it positions (a child of
the plot's view box, so its position is in those pixels and a range change never moves it by itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.snapshot import Activity, ConnectionStatus, Snapshot
from kvmon.gui import theme

Rect = tuple[float, float, float, float]  # left, top, width, height (pixels, y down)
GAP_PX = 5.0  # between a label and the point it names
CLEARANCE_PX = 2.0  # kept between two labels, and between a label and a dot
SOFT_COST = 4.0  # what covering one curve point costs, against one step down the candidate list
KEEP_BONUS = 1.5  # a label stays at the candidate it took last time unless another is this much better
NO_POINTS = np.empty((0, 2))
WAITING_TEXT = "waiting for the server"
AXIS_WIDTH = 56  # a plot's left axis, fixed: its numbers changing width never moves the plot (pixels)


@dataclass(frozen=True)
class Label:
    """A label to place: its size and its candidate top-left corners, best first (pixels). An ``optional`` one is
    shown only where it covers no curve point at all (a crowded plot leaves it out)."""

    key: str
    width: float
    height: float
    candidates: tuple[tuple[float, float], ...]
    optional: bool = False


def around(x: float, y: float, w: float, h: float, gap: float = GAP_PX, *, first: str = "right"
           ) -> tuple[tuple[float, float], ...]:
    """Top-left corners for a ``w`` × ``h`` label beside the point (x, y): right, left, above, below and the four
    corners, then the same further out; ``first`` ("right", "left", "above", "below") goes first."""
    near = {"right": (x + gap, y - h / 2), "left": (x - gap - w, y - h / 2),
            "above": (x - w / 2, y - gap - h), "below": (x - w / 2, y + gap)}
    corners = [(x + gap, y - gap - h), (x + gap, y + gap), (x - gap - w, y - gap - h), (x - gap - w, y + gap)]
    order = [first, *(k for k in ("right", "left", "above", "below") if k != first)]
    out = [near[k] for k in order] + corners
    far = 3 * gap + h
    out += [(x + gap, y - far - h / 2), (x + gap, y + far - h / 2), (x - gap - w, y - far - h / 2),
            (x - gap - w, y + far - h / 2), (x - w / 2, y - far - h), (x - w / 2, y + far)]
    return tuple(out)


def along_top(x: float, top: float, w: float, h: float, rows: int = 4, gap: float = GAP_PX
              ) -> tuple[tuple[float, float], ...]:
    """Top-left corners for a label naming a vertical line at ``x``: right of it, then left, in rows from ``top``."""
    out: list[tuple[float, float]] = []
    for r in range(rows):
        y = top + gap + r * (h + gap)
        out += [(x + gap, y), (x - gap - w, y)]
    return tuple(out)


def overlaps(a: Rect, b: Rect, clearance: float = 0.0) -> bool:
    """Whether two rectangles overlap (closer than ``clearance``)."""
    return (a[0] < b[0] + b[2] + clearance and b[0] < a[0] + a[2] + clearance
            and a[1] < b[1] + b[3] + clearance and b[1] < a[1] + a[3] + clearance)


def inside(r: Rect, view: Rect) -> bool:
    """Whether ``r`` lies wholly in ``view``."""
    return r[0] >= view[0] and r[1] >= view[1] and r[0] + r[2] <= view[0] + view[2] and r[1] + r[3] <= view[1] + view[3]


def _hits(r: Rect, points: np.ndarray) -> int:
    if not points.size:
        return 0
    x, y = points[:, 0], points[:, 1]
    return int(np.count_nonzero((x >= r[0]) & (x <= r[0] + r[2]) & (y >= r[1]) & (y <= r[1] + r[3])))


def place(labels: Sequence[Label], view: Rect, blocked: Iterable[Rect] = (), soft: np.ndarray = NO_POINTS,
          last: Mapping[str, int] | None = None) -> dict[str, tuple[Rect, int] | None]:
    """Each label's rectangle and the index of the candidate it took, in the order given (earlier labels first); None
    where no candidate stays in ``view`` clear of ``blocked`` (dots) and of the labels placed before it. ``soft``:
    (x, y) points a label should rather not cover (curves, measured dots); ``last``: the candidate each label took
    the time before, kept unless another is clearly better (labels do not jump while what they name moves a pixel)."""
    taken = list(blocked)
    last = last or {}
    out: dict[str, tuple[Rect, int] | None] = {}
    for lab in labels:
        best: tuple[float, Rect, int] | None = None
        for i, (x, y) in enumerate(lab.candidates):
            if best is not None and i - KEEP_BONUS >= best[0]:
                break  # no later candidate can cost less (covering points only adds)
            r = (x, y, lab.width, lab.height)
            if not inside(r, view) or any(overlaps(r, t, CLEARANCE_PX) for t in taken):
                continue
            hits = _hits(r, soft)
            if hits and lab.optional:
                continue
            cost = i + SOFT_COST * hits - (KEEP_BONUS if last.get(lab.key) == i else 0.0)
            if best is None or cost < best[0]:
                best = (cost, r, i)
        out[lab.key] = None if best is None else (best[1], best[2])
        if best is not None:
            taken.append(best[1])
    return out


def polyline_points(x: np.ndarray, y: np.ndarray, step_px: float = 4.0) -> np.ndarray:
    """Points every ``step_px`` or so along a polyline given in pixels (NaN breaks it): what a label must not cover."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    ends = np.column_stack([x[ok], y[ok]])
    if x.size < 2:
        return ends
    dx, dy = np.diff(x), np.diff(y)
    seg_ok = ok[:-1] & ok[1:]
    n = np.where(seg_ok, np.hypot(dx, dy) // step_px, 0).astype(int)  # points inside each segment
    total = int(n.sum())
    if not total:
        return ends
    seg = np.repeat(np.arange(n.size), n)
    k = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
    t = (k + 1) / (n[seg] + 1)
    inner = np.column_stack([x[seg] + dx[seg] * t, y[seg] + dy[seg] * t])
    return np.concatenate([ends, inner])


class PlotText(QtWidgets.QGraphicsSimpleTextItem):
    """A label on a plot, in its view box's pixels, on a faint patch of the background so that a line passing
    close stays behind the words."""

    PAD = 1.0

    def __init__(self, parent: QtWidgets.QGraphicsItem, font: QtGui.QFont, color: QtGui.QColor,
                 background: QtGui.QColor) -> None:
        super().__init__(parent)
        self.setFont(font)
        self.setBrush(color)
        bg = QtGui.QColor(background)
        bg.setAlpha(210)
        self._bg = bg
        self.setZValue(20)
        self.hide()

    def set_color(self, color: QtGui.QColor) -> None:
        if self.brush().color() != color:
            self.setBrush(color)

    def size(self) -> tuple[float, float]:
        """The text's width and height in pixels."""
        r = self.boundingRect()
        return r.width(), r.height()

    def put(self, rect: Rect | None) -> None:
        """Show at the rectangle's top-left corner, or hide (None)."""
        if rect is None:
            self.setVisible(False)
            return
        pos = QtCore.QPointF(round(rect[0]), round(rect[1]))
        if pos != self.pos():
            self.setPos(pos)
        self.setVisible(True)

    def paint(self, p: QtGui.QPainter, opt: QtWidgets.QStyleOptionGraphicsItem,
              w: QtWidgets.QWidget | None = None) -> None:
        p.fillRect(self.boundingRect().adjusted(-self.PAD, 0, self.PAD, 0), self._bg)
        super().paint(p, opt, w)  # type: ignore[arg-type]  # Qt takes a null widget; the stub wants one


class DataLabels:
    """The texts on a plot's data, each set with where it goes (an anchor in data coordinates) and placed together:
    ``("point", x, y, gap, first)`` beside a dot of radius ``gap`` (``first``: the side tried first), ``("line", x)``
    beside a vertical line from the top, ``("line_mid", x)`` beside it near mid-height, ``("center",)``."""

    def __init__(self, vb: pg.ViewBox, color: QtGui.QColor, background: QtGui.QColor) -> None:
        self.vb = vb
        self._color, self._background = color, background
        self.texts: dict[str, PlotText] = {}
        self.anchors: dict[str, tuple[object, ...]] = {}
        self._choice: dict[str, int] = {}  # the candidate each text took last time
        self._optional: set[str] = set()

    def set(self, key: str, text: str, anchor: tuple[object, ...], *, bold: bool = False,
            color: QtGui.QColor | None = None, optional: bool = False) -> None:
        """Show ``text`` for ``key`` near ``anchor`` (from the next ``place``); ``optional``: only where it covers
        no curve."""
        item = self.texts.get(key)
        if item is None:
            item = self.texts[key] = PlotText(self.vb, plot_font(bold), color or self._color, self._background)
        if item.text() != text:
            item.setText(text)
        self.anchors[key] = anchor
        if optional:
            self._optional.add(key)
        else:
            self._optional.discard(key)

    def drop(self, key: str) -> None:
        """No text for ``key`` any more."""
        self.anchors.pop(key, None)
        self._choice.pop(key, None)
        item = self.texts.get(key)
        if item is not None:
            item.hide()

    def shown(self) -> dict[str, str]:
        """Every text shown now, by key."""
        return {k: item.text() for k, item in self.texts.items() if item.isVisible()}

    def key(self) -> tuple[object, ...]:
        """What the texts say and where they are anchored (placing again is due when it changes)."""
        return tuple((k, self.texts[k].text(), a, k in self._optional) for k, a in self.anchors.items())

    def _candidates(self, anchor: tuple[object, ...], w: float, h: float) -> tuple[tuple[float, float], ...]:
        vb = self.vb
        kind = anchor[0]
        if kind == "center":
            return ((vb.width() - w) / 2, (vb.height() - h) / 2),
        px, py = to_pixels(vb, np.array([anchor[1]]), np.array([anchor[2] if kind == "point" else 0.0]))
        x, y = float(px[0]), float(py[0])
        if kind == "point":
            return around(x, y, w, h, GAP_PX + float(anchor[3]), first=str(anchor[4]))  # type: ignore[arg-type]
        if kind == "line_mid":
            mid = vb.height() * 0.45
            return tuple(c for k in range(6) for c in ((x + GAP_PX, mid + (-1) ** k * (k // 2) * (h + GAP_PX)),
                                                       (x - GAP_PX - w, mid + (-1) ** k * (k // 2) * (h + GAP_PX))))
        return along_top(x, 0.0, w, h, rows=6)

    def place(self, blocked: Iterable[Rect], soft: np.ndarray) -> None:
        """Put each text (in the order set) where it covers no text placed before it and nothing ``blocked``,
        inside the view, covering as few ``soft`` points as it can; a text with no such place is hidden."""
        labels = [Label(k, *self.texts[k].size(), self._candidates(a, *self.texts[k].size()), k in self._optional)
                  for k, a in self.anchors.items()]
        for key, got in place(labels, view_rect(self.vb), blocked, soft, self._choice).items():
            self.texts[key].put(None if got is None else got[0])
            if got is None:
                self._choice.pop(key, None)
            else:
                self._choice[key] = got[1]


def view_rect(vb: QtWidgets.QGraphicsWidget, margin: float = 2.0) -> Rect:
    """The view box's own pixels, less a margin: where labels may go."""
    g = vb.geometry()
    return (margin, margin, max(g.width() - 2 * margin, 0.0), max(g.height() - 2 * margin, 0.0))


def to_pixels(vb: object, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Data coordinates to the view box's pixels (y down), for arrays."""
    (x0, x1), (y0, y1) = vb.viewRange()  # type: ignore[attr-defined]
    w, h = vb.width(), vb.height()  # type: ignore[attr-defined]
    sx = w / (x1 - x0) if x1 != x0 else 0.0
    sy = h / (y1 - y0) if y1 != y0 else 0.0
    return (np.asarray(x, dtype=float) - x0) * sx, h - (np.asarray(y, dtype=float) - y0) * sy


def dot_rect(px: float, py: float, diameter: float) -> Rect:
    """The square a dot of ``diameter`` pixels centred at (px, py) covers."""
    r = diameter / 2
    return (px - r, py - r, diameter, diameter)


def empty_text(s: Snapshot | None, anything: bool) -> str | None:
    """What the plot says while it has nothing to draw (``anything``: a point or a curve); None when it has."""
    if anything:
        return None
    if s is not None and (s.activity == Activity.LOADING or s.connection.status == ConnectionStatus.LOADING):
        return "the model is loading"
    if s is None or not s.server_read:
        return WAITING_TEXT
    if s.model.name is None:
        return "no model loaded"
    return "no decode measured yet"


def plot_font(bold: bool = False) -> QtGui.QFont:
    """The small type of the plots (ticks, legends, labels on the data)."""
    f = QtGui.QFont()
    f.setPointSizeF(theme.PLOT_TEXT_PT)
    f.setBold(bold)
    return f


def style_axes(plot: pg.PlotWidget, left_width: int | None = AXIS_WIDTH) -> None:
    """Ticks and axis names in the plots' small type; the left axis of a fixed width."""
    pi = plot.getPlotItem()
    for name in ("left", "bottom"):
        ax = pi.getAxis(name)
        ax.setStyle(tickFont=plot_font(), tickLength=-4)
        ax.label.setFont(plot_font())
    if left_width is not None:
        pi.getAxis("left").setWidth(left_width)


def plain_legend(legend: pg.LegendItem) -> None:
    """A legend without a box: its samples and names alone, in the plots' small type."""
    legend.setPen(pg.mkPen(None))
    legend.setBrush(pg.mkBrush(None))
