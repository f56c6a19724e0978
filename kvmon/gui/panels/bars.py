"""Rows of horizontal bars (memory, bandwidth): each row a device's name, its painted bar and its note in QLabels.

The columns depend on the panel's width alone, never on the text of the moment, so the Memory and Bandwidth panels
(one width, one above the other) put their bars' 100 % marks at the same x, and a new number moves nothing. A note
keeps its own lines: a line too long for its column ends in "…" (its whole parts first), the whole note on hover, so
a row's height never follows a figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.gui import theme
from kvmon.gui.text import cut_line, set_text, text_label

LABEL_ROOM = "Unified"  # the widest device name ("GPU 0", "Host", "Unified"): the name column's width
NOTE_SHARE = 0.46  # of the panel's width, for the notes; the bars take the rest
NOTE_MIN, NOTE_MAX = 190, 340  # px: a line of a note fits 190 px (tests/acceptance/test_layout.py)
BAR_H = 14  # px: the coloured bar; its row is as high as its note's two lines
MARK_OUT = 3  # px the 100 % mark stands out above and below its bar


@dataclass(frozen=True)
class Segment:
    """One coloured part of a bar: a theme quantity, its size in the bar's unit, and a hover text."""

    quantity: str
    value: float
    tip: str
    shade_fraction: float = 0.0  # part of this segment drawn in another colour (KV in use within KV allocated)


@dataclass(frozen=True)
class Bar:
    """A labelled bar from 0 to ``total`` with a note beside it; ``limit_line`` draws the 100 % mark, at the bar's
    end or (``limit_at``) where the limit is inside it: unified memory's GPU working-set limit."""

    label: str
    total: float
    segments: tuple[Segment, ...]
    note: str = ""
    limit_line: bool = True
    tip: str = ""
    limit_at: float | None = None


def columns(width: int, label_w: int) -> tuple[int, int]:
    """(bar width, note width) of a row ``width`` px wide whose name column is ``label_w``: the same in every bar
    panel of that width."""
    note = max(NOTE_MIN, min(NOTE_MAX, round(width * NOTE_SHARE)))
    return max(40, width - label_w - note - 2 * theme.GAP), note


def visual_key(bar: Bar | None) -> tuple[object, ...] | None:
    """What the bar's paint shows, at 1/1000 of its width: smaller changes repaint nothing."""
    if bar is None:
        return None

    def q(v: float) -> int:
        return round(1000 * v / bar.total) if bar.total > 0 else 0

    return (bar.limit_line, None if bar.limit_at is None else q(bar.limit_at),
            tuple((s.quantity, q(s.value), round(1000 * s.shade_fraction)) for s in bar.segments))


class BarCanvas(QtWidgets.QWidget):
    """One painted bar: its segments left to right, KV in use inside KV allocated, the 100 % mark; a segment's
    tooltip on hover."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.bar: Bar | None = None
        self.paint_count = 0
        self.setAttribute(QtCore.Qt.WidgetAttribute.WA_OpaquePaintEvent, True)  # a repaint is of the bar alone
        self.setFixedHeight(BAR_H + 2 * MARK_OUT)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding, QtWidgets.QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)

    def set_bar(self, bar: Bar) -> bool:
        """Show ``bar`` (tooltips stay current); repaint only when the picture changes."""
        same = visual_key(bar) == visual_key(self.bar)
        self.bar = bar
        if not same:
            self.update()
        return not same

    def track(self) -> QtCore.QRectF:
        """Where the bar is drawn (its 100 % at the right edge, less room for the mark)."""
        return QtCore.QRectF(0, MARK_OUT, max(1, self.width() - 2), BAR_H)

    def mark_x(self) -> float | None:
        """The x of the 100 % mark (or the limit inside the bar), None when the bar has none."""
        bar = self.bar
        if bar is None or not bar.limit_line:
            return None
        t = self.track()
        at = bar.total if bar.limit_at is None or bar.total <= 0 else min(bar.total, bar.limit_at)
        return t.left() + t.width() * (at / bar.total if bar.total > 0 else 1.0)

    def segment_at(self, x: float) -> Segment | None:
        bar = self.bar
        if bar is None or bar.total <= 0:
            return None
        t, left = self.track(), 0.0
        for seg in bar.segments:
            w = t.width() * seg.value / bar.total
            if left <= x < left + w:
                return seg
            left += w
        return None

    def event(self, e: QtCore.QEvent) -> bool:
        if e.type() == QtCore.QEvent.Type.ToolTip and self.bar is not None:
            seg = self.segment_at(e.pos().x())  # type: ignore[attr-defined]
            text = seg.tip if seg is not None else self.bar.tip
            if text:
                QtWidgets.QToolTip.showText(e.globalPos(), text, self)  # type: ignore[attr-defined]
            else:
                QtWidgets.QToolTip.hideText()
            return True
        return super().event(e)

    def paintEvent(self, _e: QtGui.QPaintEvent) -> None:
        self.paint_count += 1
        with QtGui.QPainter(self) as p:  # ended whatever happens: a painter left active outlives its widget
            self._paint(p)

    def _paint(self, p: QtGui.QPainter) -> None:
        p.fillRect(self.rect(), self.palette().color(QtGui.QPalette.ColorRole.Window))
        bar = self.bar
        if bar is None:
            return
        t = self.track()
        p.fillRect(t, theme.color("free"))  # the empty track: what no segment covers
        p.setPen(QtCore.Qt.PenStyle.NoPen)
        x, end = t.left(), t.right()
        for seg in bar.segments:
            w = t.width() * seg.value / bar.total if bar.total > 0 else 0.0
            w = min(w, end - x)  # parts that add up to more than the total never run past the bar
            if w <= 0:
                continue
            p.fillRect(QtCore.QRectF(x, t.top(), w, t.height()), theme.color(seg.quantity))
            if seg.shade_fraction > 0:
                p.fillRect(QtCore.QRectF(x, t.top(), w * min(1.0, seg.shade_fraction), t.height()),
                           theme.color("kv_in_use"))
            x += w
        mx = self.mark_x()
        if mx is not None:
            p.setPen(QtGui.QPen(theme.color("limit"), 2))
            p.drawLine(QtCore.QPointF(mx, 0), QtCore.QPointF(mx, self.height()))


class _Row:
    """One bar's widgets: the device's name, its bar, its note (children of ``parent``, placed by it)."""

    def __init__(self, parent: QtWidgets.QWidget) -> None:
        self.name = text_label()
        self.canvas = BarCanvas()
        self.note = text_label()
        self.note.setAlignment(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignVCenter)
        self.whole_note = ""
        self._tip = ""
        for w in (self.name, self.canvas, self.note):
            w.setParent(parent)
            w.show()

    def set(self, bar: Bar, note_w: int) -> bool:
        painted = self.canvas.set_bar(bar)
        set_text(self.name, bar.label, bar.tip)
        self.whole_note, self._tip = bar.note, bar.tip
        self.fit_note(note_w)
        return painted

    def fit_note(self, width: int) -> None:
        """The note's lines as they fit ``width``, each ending in "…" where it does not; the whole note on hover."""
        fm = self.note.fontMetrics()
        lines = self.whole_note.split("\n")
        shown = "\n".join(line if fm.horizontalAdvance(line) <= width else cut_line(fm, line, width) for line in lines)
        cut = shown != self.whole_note
        set_text(self.note, shown, "\n".join(x for x in (self.whole_note if cut else "", self._tip) if x))


class BarsWidget(QtWidgets.QWidget):
    """``Bar`` rows whose columns follow the widget's width; ``set_bars`` repaints only what changed.

    The rows are placed by hand, not by a layout: a new figure in a note (every poll while decoding) asks nothing of
    the window's layout, as a note has as many lines as it says, however wide its figures."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.bars: tuple[Bar, ...] = ()  # the bars shown (set_bars)
        self._empty_text = ""
        self._rows: list[_Row] = []
        self.empty = text_label(wrap=True, colour="muted")
        self.empty.setParent(self)
        self._label_w = self.fontMetrics().horizontalAdvance(LABEL_ROOM) + theme.UNIT
        self._height = (-1, -1)  # (width, the height the rows need at it) when the bars were last set
        policy = QtWidgets.QSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding, QtWidgets.QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    @property
    def rows(self) -> list[tuple[QtWidgets.QLabel, BarCanvas, QtWidgets.QLabel]]:
        """Each shown bar's name, canvas and note."""
        return [(r.name, r.canvas, r.note) for r in self._rows[: len(self.bars)]]

    @property
    def paint_count(self) -> int:
        """Bars painted so far (all rows)."""
        return sum(r.canvas.paint_count for r in self._rows)

    def set_bars(self, bars: tuple[Bar, ...], empty_text: str = "") -> bool:
        """Show ``bars`` (or ``empty_text`` when there are none); True when a bar's picture changed."""
        width = self.width()
        height = self._height if self._height[0] == width else (width, self.heightForWidth(width))
        changed = len(bars) != len(self.bars)
        self.bars, self._empty_text = bars, empty_text
        while len(self._rows) < len(bars):
            self._rows.append(_Row(self))
        _bar_w, note_w = columns(width, self._label_w)
        for i, row in enumerate(self._rows):
            shown = i < len(bars)
            if shown:
                changed = row.set(bars[i], note_w) or changed
            for w in (row.name, row.canvas, row.note):
                if w.isHidden() == shown:
                    w.setVisible(shown)
        set_text(self.empty, "" if bars else empty_text)
        if self.empty.isHidden() == bool(bars):
            self.empty.setVisible(not bars)
        self._height = (width, self.heightForWidth(width))
        if self._height != height:  # a row needs another height: the layout's business
            self.updateGeometry()
            self._place()
        elif changed:
            self._place()
        return changed

    def _row_heights(self, width: int) -> list[int]:
        """Each row's height: its note's lines (two, mostly), whatever the width."""
        line = self.fontMetrics().lineSpacing()
        return [max(2 * line, r.canvas.height(), len(r.whole_note.split("\n")) * line)
                for r in self._rows[: len(self.bars)]]

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        if not self.bars:
            return self.empty.heightForWidth(max(1, width))
        heights = self._row_heights(width)
        return sum(heights) + theme.UNIT * (len(heights) - 1)

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(500, self.heightForWidth(500))

    def minimumSizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(self._label_w + 40 + NOTE_MIN + 2 * theme.GAP, self.heightForWidth(self.width() or 500))

    def _place(self) -> None:
        """Put each row's name, bar and note where the columns say."""
        width = self.width()
        bar_w, note_w = columns(width, self._label_w)
        if not self.bars:
            self.empty.setGeometry(0, 0, width, self.height())
            return
        y = 0
        for row, h in zip(self._rows, self._row_heights(width), strict=False):
            row.name.setGeometry(0, y, self._label_w, h)
            ch = row.canvas.height()
            row.canvas.setGeometry(self._label_w + theme.GAP, y + (h - ch) // 2, bar_w, ch)
            row.note.setGeometry(width - note_w, y, note_w, h)
            row.fit_note(note_w)
            y += h + theme.UNIT

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        self._place()

    def changeEvent(self, e: QtCore.QEvent) -> None:
        super().changeEvent(e)
        if e.type() == QtCore.QEvent.Type.FontChange:
            self._label_w = self.fontMetrics().horizontalAdvance(LABEL_ROOM) + theme.UNIT
            self.updateGeometry()
