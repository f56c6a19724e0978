"""A label that repaints only when its text changes, and elides (with the whole text on hover) when it is narrower
than its text. Qt widgets only: the panels the first frame shows use it without loading the plotting library.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.units import DASH

ELLIPSIS = "…"
_TOKENS = re.compile(r"<[^>]*>|&#?\w+;|[^<&]|&")  # tags, entities, single characters
_scratch: list[QtWidgets.QLabel] = []  # one hidden label that measures candidate texts the way a QLabel draws them


def _measurer() -> QtWidgets.QLabel:
    if not _scratch:
        _scratch.append(QtWidgets.QLabel())
    return _scratch[0]


def plain_text(text: str) -> str:
    """What a rich-text label reads as ('<b>30</b> tok/s' → '30 tok/s')."""
    if "<" not in text and "&" not in text:
        return text
    no_tags = re.sub(r"<br\s*/?>", "\n", text)
    return html.unescape(re.sub(r"<[^>]*>", "", no_tags))


def elide_rich(text: str, fits: Callable[[str, int], bool], width: int) -> str:
    """The longest prefix of ``text`` (rich or plain) that, with an ellipsis, ``fits(candidate, width)``; tags are
    kept whole, so colours and weights survive."""
    tokens = _TOKENS.findall(text)
    visible = [i for i, t in enumerate(tokens) if not t.startswith("<")]
    lo, hi = 0, len(visible)
    while lo < hi:  # the largest k whose first k visible characters fit
        mid = (lo + hi + 1) // 2
        cand = "".join(tokens[: visible[mid - 1] + 1]).rstrip() + ELLIPSIS
        if fits(cand, width):
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return ELLIPSIS
    return "".join(tokens[: visible[lo - 1] + 1]).rstrip() + ELLIPSIS


class ValueLabel(QtWidgets.QWidget):
    """A label whose ``set()`` repaints only itself: the layout is asked again only when the text needs more room.

    A QLabel asks its parent's layout to recompute on every ``setText``: a re-layout of the whole panel (rich-text
    height-for-width included) each poll. Here the label lives in a box without a layout; the box reports a
    size hint that only grows (or shrinks when the text is much shorter), so a changing number repaints one
    label and the neighbours do not jitter by a digit's width. With ``set_elide(True)`` a text wider than the
    label is cut with an ellipsis and said whole in the tooltip (``text()`` is always the whole text).
    """

    SHRINK_BELOW = 0.6  # a hint this much narrower than the reserved width gives the room back
    MIN_ELIDED_WIDTH = 48  # an eliding label may be squeezed to this many pixels

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._label = QtWidgets.QLabel(text, self)
        self._label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        # opaque: a new text repaints the label alone, not the panel and the window beneath it as well
        self._label.setAutoFillBackground(True)
        self._text = text
        self._tip = ""
        self._elide = False
        self._elided = False
        self._hint = self._label.sizeHint()
        self._min_hint = self._label.minimumSizeHint()
        self._fit_len = len(text)
        self._full_width = -1  # the whole text's width, measured when it was set (eliding labels)
        self._width_stale = False  # _full_width is an earlier, no shorter text's

    # --- the QLabel parts callers use ---------------------------------------------------------
    def text(self) -> str:
        """The whole text (also when it is shown elided)."""
        return self._text

    def shown_text(self) -> str:
        """The text as drawn now (elided or whole)."""
        return self._label.text()

    @property
    def elided(self) -> bool:
        return self._elided

    def inner(self) -> QtWidgets.QLabel:
        """The QLabel that draws the text."""
        return self._label

    def toolTip(self) -> str:
        return self._label.toolTip()

    def setToolTip(self, tip: str) -> None:
        self._tip = tip
        self._apply_tip()

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

    def set_elide(self, on: bool) -> None:
        """Cut a text wider than the label with '…' (the tooltip then says it whole); the label may be squeezed."""
        self._elide = on
        if not on and self._elided:  # the whole text again
            self._label.setText(self._text)
            self._elided = False
            self._apply_tip()
        self._refit(force=True)
        self._fit_shown()

    # --- layout ---------------------------------------------------------------------------------
    def sizeHint(self) -> QtCore.QSize:
        return self._hint

    def minimumSizeHint(self) -> QtCore.QSize:
        if self._elide:
            return QtCore.QSize(min(self.MIN_ELIDED_WIDTH, self._hint.width()), self._min_hint.height())
        return self._min_hint

    def hasHeightForWidth(self) -> bool:
        return self._label.wordWrap()

    def heightForWidth(self, width: int) -> int:
        return self._label.heightForWidth(width)

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        self._label.setGeometry(self.rect())
        super().resizeEvent(e)
        if self._elide:
            self._fit_shown()

    def changeEvent(self, e: QtCore.QEvent) -> None:
        super().changeEvent(e)
        if e.type() in (QtCore.QEvent.Type.FontChange, QtCore.QEvent.Type.StyleChange):
            self._full_width = -1
            self._refit(force=True)  # a style sheet's font size changes the room the text needs
            if self._elide:
                self._fit_shown()

    def _measure(self, text: str) -> int:
        """The width ``text`` takes in this label (its font and text format), as a QLabel lays it out."""
        m = _measurer()
        m.setFont(self._label.font())
        m.setTextFormat(self._label.textFormat())
        m.setMargin(self._label.margin())
        m.setText(text)
        return m.sizeHint().width()

    def _fit_shown(self) -> None:
        """Show the whole text when it fits, else the longest prefix that does (eliding labels only)."""
        if not self._elide or self._label.wordWrap():
            return
        width = self.width()
        if self._full_width < 0 or self._width_stale:
            self._full_width = self._measure(self._text)
            self._width_stale = False
        if width <= 0 or self._full_width <= width:
            shown, elided = self._text, False
        else:
            shown = elide_rich(self._text, lambda t, w: self._measure(t) <= w, width)
            elided = True
        if shown != self._label.text():
            self._label.setText(shown)
        if elided != self._elided:
            self._elided = elided
            self._apply_tip()

    def _fits_unmeasured(self, text: str) -> bool:
        """A new text surely fits without laying it out: shown whole now, no longer than the one last measured,
        and that one had a character's room to spare (numbers change every poll, their length rarely)."""
        if self._elided or self._full_width < 0 or len(text) > self._fit_len:
            return False
        return self._full_width + self._label.fontMetrics().averageCharWidth() <= self.width()

    def _apply_tip(self) -> None:
        tip = self._tip
        if self._elided:
            whole = plain_text(self._text)
            tip = f"{whole}\n\n{tip}" if tip and whole not in tip else (tip or whole)
        if tip != self._label.toolTip():
            self._label.setToolTip(tip)

    def _refit(self, force: bool = False) -> None:
        """Ask the parent layout again only when the text no longer fits (or frees much of its room)."""
        lbl = self._label
        if lbl.wordWrap():  # only the height for the current width matters (a rich-text layout)
            need = lbl.heightForWidth(self.width()) if self.width() > 0 else -1
            if force or need != self.height():
                self._hint, self._min_hint = lbl.sizeHint(), lbl.minimumSizeHint()
                self.updateGeometry()
            return
        # Measuring rich text means laying it out: skip it while the text is no longer than the last one measured
        # (numbers change, their length rarely does; the reserved room has a character's slack for wider glyphs).
        n = len(self._text)
        if not force and self.SHRINK_BELOW * self._fit_len <= n <= self._fit_len:
            return
        if self._elide:
            if self._full_width < 0:
                self._full_width = self._measure(self._text)
            base = lbl.sizeHint()
            hint = QtCore.QSize(self._full_width, base.height())
        else:
            hint = lbl.sizeHint()
        self._fit_len = n
        grow = hint.width() > self._hint.width() or hint.height() != self._hint.height()
        shrink = hint.width() < self._hint.width() * self.SHRINK_BELOW
        if force or grow or shrink:
            slack = lbl.fontMetrics().averageCharWidth()
            self._hint = QtCore.QSize(hint.width() + slack, hint.height())
            self._min_hint = lbl.minimumSizeHint()
            self.updateGeometry()

    def set(self, text: str, tooltip: str | None = None) -> bool:
        """Update text/tooltip; returns True when something changed."""
        changed = False
        if text != self._text:
            self._text = text
            if self._elide and self._fits_unmeasured(text):
                self._label.setText(text)  # no longer than the text last measured, with room to spare
                self._width_stale = True  # measured again only if the label is resized
            elif self._elide:
                self._full_width = -1
                self._refit()
                self._fit_shown()
            else:
                self._label.setText(text)
                self._refit()
            changed = True
        if tooltip is not None and tooltip != self._tip:
            self._tip = tooltip
            self._apply_tip()
            changed = True
        return changed


class CaptionedLine(QtWidgets.QWidget):
    """A caption and one eliding value line ("Energy: 602 W now · …"), set again only when ``key(s)`` changed;
    subclasses say the key and the (text, tooltip) of a snapshot."""

    CAPTION = ""
    CAPTION_ROOM = "Replies: "  # captions of stacked lines take this much room, so their values start alike

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QtWidgets.QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        caption = QtWidgets.QLabel(self.CAPTION)
        caption.setMinimumWidth(caption.fontMetrics().horizontalAdvance(self.CAPTION_ROOM))
        lay.addWidget(caption)
        self.label = ValueLabel(DASH)
        self.label.set_elide(True)
        lay.addWidget(self.label, 1)
        self._key: object = object()  # nothing shown yet: any key differs

    def key(self, s: object) -> object:
        raise NotImplementedError

    def text(self, s: object) -> tuple[str, str]:
        raise NotImplementedError

    def update_snapshot(self, s: object) -> None:
        key = self.key(s)
        if key != self._key:
            self._key = key
            self.label.set(*self.text(s))


class ElidingCombo(QtWidgets.QComboBox):
    """A combo box that shows its choice shortened with "…" when it is narrower than it (Qt's styles cut it off
    mid-word), with the whole choice in its tooltip."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.currentTextChanged.connect(self.setToolTip)

    def paintEvent(self, _e: QtGui.QPaintEvent) -> None:
        p = QtWidgets.QStylePainter(self)
        opt = QtWidgets.QStyleOptionComboBox()
        self.initStyleOption(opt)
        p.drawComplexControl(QtWidgets.QStyle.ComplexControl.CC_ComboBox, opt)
        opt.currentText = self._shorten(opt)
        p.drawControl(QtWidgets.QStyle.ControlElement.CE_ComboBoxLabel, opt)

    def shown_text(self) -> str:
        """The choice as drawn now (shortened or whole)."""
        opt = QtWidgets.QStyleOptionComboBox()
        self.initStyleOption(opt)
        return self._shorten(opt)

    def _shorten(self, opt: QtWidgets.QStyleOptionComboBox) -> str:
        room = self.style().subControlRect(QtWidgets.QStyle.ComplexControl.CC_ComboBox, opt,
                                           QtWidgets.QStyle.SubControl.SC_ComboBoxEditField, self).width()
        return self.fontMetrics().elidedText(opt.currentText, QtCore.Qt.TextElideMode.ElideRight, room - 2)
