"""A painted stack of horizontal bars (memory, bandwidth): repaints only when its rows change."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.gui import theme


@dataclass(frozen=True)
class Segment:
    """One coloured part of a bar: a theme quantity, its size in the bar's unit, and a hover text."""

    quantity: str
    value: float
    tip: str
    shade_fraction: float = 0.0  # part of this segment drawn darker (KV in use within KV allocated)


@dataclass(frozen=True)
class Bar:
    """A labelled bar from 0 to ``total`` with a right-hand note; ``limit_line`` draws the spill/peak line, at the
    bar's end or (``limit_at``) where the cliff is inside it: unified memory's GPU working-set limit."""

    label: str
    total: float
    segments: tuple[Segment, ...]
    note: str = ""
    limit_line: bool = True
    tip: str = ""
    limit_at: float | None = None


class BarsWidget(QtWidgets.QWidget):
    """Paints ``Bar`` rows; ``set_bars`` is a no-op when nothing changed, so idle polls cost no paint."""

    ROW_H = 34
    BAR_H = 16

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._bars: tuple[Bar, ...] = ()
        self._empty_text = ""
        self.setMouseTracking(True)
        # Opaque: a repaint of the bars does not drag the group box, splitter and window along with it.
        self.setAttribute(QtCore.Qt.WidgetAttribute.WA_OpaquePaintEvent, True)
        self.setMinimumHeight(self.ROW_H + 6)
        self.paint_count = 0
        self._note_need: tuple[tuple[str, ...], int] = ((), 0)  # (the notes, the width their longest line needs)

    @staticmethod
    def visual_key(bars: tuple[Bar, ...]) -> tuple[object, ...]:
        """What the paint shows, at 1/1000 of a bar's width: smaller changes repaint nothing."""
        def q(v: float, total: float) -> int:
            return round(1000 * v / total) if total > 0 else 0

        return tuple((b.label, b.note, b.limit_line, None if b.limit_at is None else q(b.limit_at, b.total),
                      tuple((s.quantity, q(s.value, b.total), round(1000 * s.shade_fraction)) for s in b.segments))
                     for b in bars)

    def set_bars(self, bars: tuple[Bar, ...], empty_text: str = "") -> bool:
        """Replace the rows (tooltips stay current); returns True and repaints only when the picture changes."""
        same = self.visual_key(bars) == self.visual_key(self._bars) and empty_text == self._empty_text
        resized = len(bars) != len(self._bars)
        self._bars, self._empty_text = bars, empty_text
        if same:
            return False
        if resized:
            self.setMinimumHeight(max(1, len(bars)) * self.ROW_H + 6)
            self.updateGeometry()
        self.update()
        return True

    @property
    def bars(self) -> tuple[Bar, ...]:
        return self._bars

    def _geometry(self) -> tuple[int, int, int]:
        """Label, bar and note widths: the notes get the room their longest line needs, up to 60 % of the row."""
        label_w = 56
        notes = tuple(b.note for b in self._bars)
        if self._note_need[0] != notes:  # measured once per set of notes, not per paint or hover
            fm = self.fontMetrics()
            need = max((fm.horizontalAdvance(line) for n in notes for line in n.splitlines()), default=0) + 12
            self._note_need = (notes, need)
        note_w = max(150, min(self._note_need[1], int(self.width() * 0.6)))
        bar_w = max(40, self.width() - label_w - note_w - 12)
        return label_w, bar_w, note_w

    def note_lines(self, bar: Bar, note_w: int | None = None) -> list[tuple[str, str]]:
        """(shown, whole) for each line of a bar's note at the present width: a line too long ends in "…" (the
        whole note is in the row's tooltip)."""
        if note_w is None:
            note_w = self._geometry()[2]
        fm = self.fontMetrics()
        return [(fm.elidedText(line, QtCore.Qt.TextElideMode.ElideRight, note_w), line)
                for line in bar.note.splitlines()]

    def row_tip(self, bar: Bar) -> str:
        """The tooltip of a row outside its segments: the whole note when it is shown shortened, and the bar's."""
        cut = any(shown != whole for shown, whole in self.note_lines(bar))
        return "\n\n".join(t for t in ((bar.note if cut else ""), bar.tip or ("" if cut else bar.note)) if t)

    def _segment_at(self, pos: QtCore.QPoint) -> tuple[Bar, Segment | None] | None:
        label_w, bar_w, _ = self._geometry()
        row = (pos.y() - 3) // self.ROW_H
        if not 0 <= row < len(self._bars):
            return None
        bar = self._bars[row]
        x: float = label_w
        for seg in bar.segments:
            w = bar_w * seg.value / bar.total if bar.total > 0 else 0
            if x <= pos.x() < x + w:
                return bar, seg
            x += w
        return bar, None

    def event(self, e: QtCore.QEvent) -> bool:
        if e.type() == QtCore.QEvent.Type.ToolTip:
            hit = self._segment_at(e.pos())  # type: ignore[attr-defined]
            if hit is None:
                QtWidgets.QToolTip.hideText()
            else:
                bar, seg = hit
                text = seg.tip if seg else self.row_tip(bar)
                QtWidgets.QToolTip.showText(e.globalPos(), text, self)  # type: ignore[attr-defined]
            return True
        return super().event(e)

    def paintEvent(self, _e: QtGui.QPaintEvent) -> None:
        self.paint_count += 1
        p = QtGui.QPainter(self)
        p.fillRect(self.rect(), self.palette().color(QtGui.QPalette.ColorRole.Window))
        fg = QtGui.QColor(theme.foreground())
        p.setPen(fg)
        if not self._bars:
            p.drawText(self.rect().adjusted(6, 0, 0, 0), QtCore.Qt.AlignmentFlag.AlignVCenter, self._empty_text)
            p.end()
            return
        label_w, bar_w, note_w = self._geometry()
        for i, bar in enumerate(self._bars):
            row_y = 3 + i * self.ROW_H
            y = row_y + (self.ROW_H - self.BAR_H) // 2
            h = self.BAR_H
            p.setPen(fg)
            p.drawText(QtCore.QRect(4, row_y, label_w - 8, self.ROW_H), QtCore.Qt.AlignmentFlag.AlignVCenter,
                       bar.label)
            p.setPen(QtCore.Qt.PenStyle.NoPen)
            x = float(label_w)
            end = float(label_w + bar_w)
            for seg in bar.segments:
                w = bar_w * seg.value / bar.total if bar.total > 0 else 0.0
                w = min(w, end - x)  # parts that add up to more than the total never run under the note
                if w <= 0:
                    continue
                p.setBrush(theme.brush(seg.quantity))
                p.drawRect(QtCore.QRectF(x, y, w, h))
                if seg.shade_fraction > 0:
                    p.setBrush(theme.brush("kv_in_use"))
                    p.drawRect(QtCore.QRectF(x, y, w * min(1.0, seg.shade_fraction), h))
                x += w
            if bar.limit_line:
                at = bar.total if bar.limit_at is None or bar.total <= 0 else min(bar.total, bar.limit_at)
                lx = label_w + round(bar_w * at / bar.total) if bar.total > 0 else label_w + bar_w
                p.setPen(QtGui.QPen(theme.color("spill"), 2))
                p.drawLine(lx, y - 2, lx, y + h + 2)
            p.setPen(fg)
            p.drawText(QtCore.QRect(label_w + bar_w + 8, row_y, note_w, self.ROW_H),
                       QtCore.Qt.AlignmentFlag.AlignVCenter,
                       "\n".join(shown for shown, _ in self.note_lines(bar, note_w)))
        p.end()

    def changeEvent(self, e: QtCore.QEvent) -> None:
        super().changeEvent(e)
        if e.type() == QtCore.QEvent.Type.FontChange:
            self._note_need = ((), 0)  # measured again in the new font

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(500, max(1, len(self._bars)) * self.ROW_H + 6)
