"""Qt's own text widgets as the dashboard uses them: a QLabel that shows its text as written (``text_label``: plain
text, never markup, so a model name or an error from a server is shown as it is), styled by the palette and the
theme's three type sizes; a label with room for a set number of lines that ends in "…" past them, whole on hover
(``FitLabel``); a coloured dot and its words (``DotLabel``); a caption beside a wrapping line (``CaptionedLine``).

Every label here is opaque: a new text repaints the label alone, not the panel and the window beneath it.
"""

from __future__ import annotations

import math
import re

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.units import DASH
from kvmon.gui import theme
from kvmon.gui.theme import Size


def text_label(text: str = "", *, size: Size = "body", colour: str | None = None, bold: bool = False,
               wrap: bool = False, name: str | None = None) -> QtWidgets.QLabel:
    """A QLabel in plain text (its text is never read as markup) at one of the theme's sizes, in a quantity's or a
    severity's colour; ``wrap``: long lines break at word boundaries instead of being cut."""
    label = QtWidgets.QLabel()
    label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
    label.setAutoFillBackground(True)  # opaque: a new text repaints the label alone, not the panels beneath it
    label.setText(text)
    if size != "body" or bold:
        label.setFont(theme.font(size, bold))
    if colour is not None:
        theme.tint(label, colour)
    if wrap:
        label.setWordWrap(True)
    if name:
        label.setObjectName(name)
    return label


def set_text(label: QtWidgets.QLabel, text: str, tip: str | None = None) -> bool:
    """Set a label's text (and tooltip) only where it changed: an unchanged text asks nothing of the layout.
    Returns True when something changed."""
    changed = False
    if label.text() != text:
        label.setText(text)
        changed = True
    if tip is not None and label.toolTip() != tip:
        label.setToolTip(tip)
        changed = True
    return changed


# the spaces a line may break at: not the one between a figure and its unit ("~10 tok/s", "2.83 GiB")
_UNIT_BREAKS = re.compile(r" (?!(?:tok/s|tokens|GiB|MiB|KiB|GB|TB/s|GB/s|MB/s|kB/s|ms|s|W|Wh|J/token)(?:\W|$))")


def _flat(text: str) -> str:
    """``text`` with its line breaks, and the " · " a break may stand for, as single spaces."""
    return " ".join(text.replace("\n", " ").replace(" · ", " ").split())


def cut_line(fm: QtGui.QFontMetrics, text: str, width: int) -> str:
    """One line of ``text`` ending in "…": its first whole parts between " · " where they fit ("last prompt
    5,908 tok/s · …", not "… · first toke…"), else as much as fits."""
    parts = text.split(" · ")
    for n in range(len(parts) - 1, 0, -1):
        head = " · ".join(parts[:n]) + " · …"
        if fm.horizontalAdvance(head) <= width:
            return head
    return fm.elidedText(text, QtCore.Qt.TextElideMode.ElideRight, width)


class FitLabel(QtWidgets.QLabel):
    """A plain-text label with room for ``lines`` lines and a height that never changes: a longer text is broken
    between words only (never inside "tok/s"), and what does not fit ends in "…", said whole on hover. ``set``
    changes nothing when the text and tooltip are the same; ``whole()`` is the text, ``text()`` what is drawn."""

    def __init__(self, text: str = "", lines: int = 1, parent: QtWidgets.QWidget | None = None, *,
                 size: Size = "body", bold: bool = False, colour: str | None = None) -> None:
        super().__init__(parent)
        self._lines = lines
        self._whole = ""
        self._tip = ""
        self.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.setAutoFillBackground(True)
        if lines > 1:  # one line or several, it starts at the same place
            self.setAlignment(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignTop)
        if size != "body" or bold:
            self.setFont(theme.font(size, bold))
        if colour is not None:
            theme.tint(self, colour)
        pol = QtWidgets.QSizePolicy.Policy
        self.setSizePolicy(pol.Ignored if lines > 1 else pol.Preferred, pol.Fixed)
        self.setFixedHeight(self.line_height())
        self.set(text)

    @property
    def elided(self) -> bool:
        """The text is shortened with "…" now."""
        return _flat(self.text()) != _flat(self._whole)

    def whole(self) -> str:
        """The whole text (``text()`` is what is drawn, shortened when it does not fit)."""
        return self._whole

    def text_width(self, text: str | None = None) -> int:
        """The width the whole text (or ``text``) needs on one line, in pixels."""
        return math.ceil(QtGui.QFontMetricsF(self.font()).horizontalAdvance(self._whole if text is None else text))

    def room_for(self, text: str) -> int:
        """The width this label needs to show ``text`` whole on one line."""
        return self.text_width(text) + 4 if text else 0

    def line_height(self) -> int:
        """The label's fixed height: its lines' room."""
        return self.fontMetrics().lineSpacing() * self._lines + 2

    def set(self, text: str, tip: str | None = None) -> bool:
        """Show ``text`` (and ``tip`` on hover; None keeps the tooltip); True when something changed."""
        tip = tip if tip is not None else self._tip
        if text == self._whole and tip == self._tip:
            return False
        self._whole, self._tip = text, tip
        self._fit()
        return True

    def sizeHint(self) -> QtCore.QSize:
        if self._lines > 1:
            return QtCore.QSize(0, self.height())
        return QtCore.QSize(self.room_for(self._whole), self.height())

    def minimumSizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(min(48, self.sizeHint().width()), self.height())

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        if e.size().width() != e.oldSize().width():
            self._fit()

    def showEvent(self, e: QtGui.QShowEvent) -> None:
        super().showEvent(e)
        self._fit()

    def changeEvent(self, e: QtCore.QEvent) -> None:
        super().changeEvent(e)
        if e.type() == QtCore.QEvent.Type.FontChange:
            self.setFixedHeight(self.line_height())
            self._fit()

    def _wrapped(self, text: str, width: int) -> str:
        """``text`` in at most ``lines`` lines of ``width`` pixels, broken between words only; the last line ends
        in "…" when the rest does not fit."""
        fm = self.fontMetrics()
        # the pieces a line is made of, each with what joins it to the one before: a part between " · " that fits
        # a line stays whole ("ceiling 113 tok/s here" on a line of its own), a longer one breaks between words
        words: list[tuple[str, str]] = []
        for i, part in enumerate(text.split(" · ")):
            sep = " · " if i else ""
            if fm.horizontalAdvance(part) <= width:
                words.append((part, sep))
            else:
                words += [(w, sep if j == 0 else " ") for j, w in enumerate(_UNIT_BREAKS.split(part))]
        lines: list[str] = []
        while words and len(lines) < self._lines:
            line = words.pop(0)[0]
            while words and fm.horizontalAdvance(f"{line}{words[0][1]}{words[0][0]}") <= width:
                word, sep = words.pop(0)
                line = f"{line}{sep}{word}"
            lines.append(line)
        if words or (lines and fm.horizontalAdvance(lines[-1]) > width):
            last = "".join([lines.pop() if lines else "", *(f"{sep}{w}" for w, sep in words)]).removeprefix(" · ")
            lines.append(fm.elidedText(last, QtCore.Qt.TextElideMode.ElideRight, width))
        return "\n".join(lines)

    def _cut(self, text: str, width: int) -> str:
        return cut_line(self.fontMetrics(), text, width)

    def _fit(self) -> None:
        """Draw the whole text when it fits, else as much of it as does, ending in "…"."""
        width = max(1, self.contentsRect().width() - 4)  # the room the size hint adds to the text's width
        text = self._whole
        if not self.isVisible() or width < 8:  # not laid out yet: whole, fitted when it gets its size
            shown = text
        elif self._lines == 1:
            shown = text if self.text_width() <= width else self._cut(text, width)
        else:
            shown = self._wrapped(text, width)
        cut = _flat(shown) != _flat(text)
        tip = "\n".join(x for x in (text if cut else "", self._tip) if x)
        if shown != super().text():
            self.setText(shown)
        if tip != self.toolTip():
            self.setToolTip(tip)


class DotLabel(QtWidgets.QWidget):
    """A coloured dot and its words ("● connected · http://…"), two labels: the dot in a level's colour and shape
    (``theme.mark``: ▲ warning, ■ critical), the words in the text's. ``set("● words")`` shows the dot, ``set("words")``
    none."""

    DOT = "●"

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None, *, elide: bool = False) -> None:
        """``elide``: one line that ends in "…" when it has no room (a ``FitLabel``)."""
        super().__init__(parent)
        self.setAutoFillBackground(True)
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(theme.UNIT)
        self.dot = text_label(self.DOT)
        self.words: QtWidgets.QLabel = FitLabel() if elide else text_label()
        if elide:  # the row's width comes from the window, never from the words of the moment
            self.words.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Fixed)
        row.addWidget(self.dot)
        row.addWidget(self.words, 1 if elide else 0)
        if not elide:
            row.addStretch(1)  # the words beside the dot, whatever room the row gives
        self._colour: str | None = None
        self.set(text)

    def text(self) -> str:
        """What it reads as, the dot (or its level's shape) included."""
        return f"{self.dot.text()} {self.words.text()}" if not self.dot.isHidden() else self.words.text()

    def set(self, text: str, tip: str | None = None, colour: str | None = None) -> bool:
        """Show ``text`` (a leading "● " is the dot), the dot in ``colour`` (a theme name; None: the text's)."""
        dotted = text.startswith(self.DOT)
        words = text.removeprefix(self.DOT).lstrip() if dotted else text
        if isinstance(self.words, FitLabel):
            changed = self.words.set(words, tip or "")
        else:
            changed = set_text(self.words, words, tip)
        if tip is not None and self.dot.toolTip() != tip:
            self.dot.setToolTip(tip)
        if self.dot.isHidden() == dotted:
            self.dot.setVisible(dotted)
            changed = True
        if colour != self._colour:
            self._colour = colour
            theme.tint(self.dot, colour)
            self.dot.setText(theme.mark(colour))
            changed = True
        return changed

    def toolTip(self) -> str:
        return self.words.toolTip()


class CaptionedLine(QtWidgets.QWidget):
    """A caption and its value line ("Energy:  602 W now · …"), which wraps rather than being cut; set again only
    when its text or tooltip changed. Subclasses say the (text, tooltip) of a snapshot.

    The two labels are placed by hand, not by a layout: a new value asks the window's layout again only when it
    needs another number of lines (a label in a layout would have every new reply relay the window out)."""

    CAPTION = ""
    CAPTION_ROOM = "Replies: "  # captions of stacked lines take this much room, so their values start alike

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.caption = text_label(self.CAPTION, colour="muted")
        self.caption.setParent(self)
        self._caption_w = self.caption.fontMetrics().horizontalAdvance(self.CAPTION_ROOM)
        self.label = text_label(DASH, wrap=True)
        self.label.setAlignment(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignTop)
        self.label.setParent(self)
        policy = QtWidgets.QSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding, QtWidgets.QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def _value_width(self, width: int) -> int:
        return max(1, width - self._caption_w - theme.UNIT)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return max(self.caption.sizeHint().height(), self.label.heightForWidth(self._value_width(width)))

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(self._caption_w + 400, self.caption.sizeHint().height())

    def minimumSizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(self._caption_w + 100, self.caption.sizeHint().height())

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        self.caption.setGeometry(0, 0, self._caption_w, self.caption.sizeHint().height())
        self.label.setGeometry(self._caption_w + theme.UNIT, 0, self._value_width(self.width()), self.height())

    def text(self, s: object) -> tuple[str, str]:
        raise NotImplementedError

    def update_snapshot(self, s: object) -> None:
        text, tip = self.text(s)
        if text == self.label.text():
            set_text(self.label, text, tip)  # the tooltip alone, if it changed
            return
        lines = self.heightForWidth(self.width())
        set_text(self.label, text, tip)
        if self.heightForWidth(self.width()) != lines:  # another number of lines: the layout's business
            self.updateGeometry()
