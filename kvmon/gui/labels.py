"""Qt's own text widgets, as the dashboard uses them: a QLabel that shows its text as written (``text_label``: plain
text, never markup, so a model name or an error from a server is shown as it is), styled by the palette and the
theme's three type sizes; a line that ends in "…" where it has one line only (``ElidedLabel``); a coloured dot and its
words (``DotLabel``); a caption beside a wrapping line (``CaptionedLine``).

``ValueLabel`` and ``WrapLabel`` are the older labels that draw the dashboard's small rich text themselves
(``kvmon.gui.runs``); they stay until the last panel that uses them speaks plain text.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from kvmon.core.units import DASH
from kvmon.gui import runs, theme
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


class ElidedLabel(QtWidgets.QLabel):
    """A one-line plain-text label for a place that has room for one line only (the compact view's alert): a text
    wider than the label ends in "…", and its tooltip then says it whole."""

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.setAutoFillBackground(True)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self._whole = ""
        self._tip = ""
        self.set(text)

    @property
    def elided(self) -> bool:
        return self.text() != self._whole

    def whole(self) -> str:
        return self._whole

    def text_width(self) -> int:
        """The width the whole text needs, in pixels."""
        return self.fontMetrics().horizontalAdvance(self._whole)

    def set(self, text: str, tip: str = "") -> None:
        if (text, tip) != (self._whole, self._tip):
            self._whole, self._tip = text, tip
            self._fit()

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(self.text_width(), super().sizeHint().height())

    def minimumSizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(0, super().minimumSizeHint().height())

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        self._fit()

    def _fit(self) -> None:
        room = self.contentsRect().width()
        shown = self.fontMetrics().elidedText(self._whole, QtCore.Qt.TextElideMode.ElideRight, room) \
            if room > 0 else self._whole
        if shown != self.text():
            self.setText(shown)
        tip = "\n\n".join(t for t in ((self._whole if shown != self._whole else ""), self._tip) if t)
        if tip != self.toolTip():
            self.setToolTip(tip)


class DotLabel(QtWidgets.QWidget):
    """A coloured dot and its words ("● connected · http://…"), two labels: the dot in a level's colour, the words in
    the text's. ``set("● words")`` shows the dot, ``set("words")`` none."""

    DOT = "●"

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None, *, elide: bool = False) -> None:
        """``elide``: one line that ends in "…" when it has no room (an ``ElidedLabel``)."""
        super().__init__(parent)
        self.setAutoFillBackground(True)
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(theme.UNIT)
        self.dot = text_label(self.DOT)
        self.words: QtWidgets.QLabel = ElidedLabel() if elide else text_label()
        row.addWidget(self.dot)
        row.addWidget(self.words, 1 if elide else 0)
        if not elide:
            row.addStretch(1)  # the words beside the dot, whatever room the row gives
        self._colour: str | None = None
        self.set(text)

    def text(self) -> str:
        """What it reads as, the dot included."""
        return f"{self.DOT} {self.words.text()}" if not self.dot.isHidden() else self.words.text()

    def set(self, text: str, tip: str | None = None, colour: str | None = None) -> bool:
        """Show ``text`` (a leading "● " is the dot), the dot in ``colour`` (a theme name; None: the text's)."""
        dotted = text.startswith(self.DOT)
        words = text.removeprefix(self.DOT).lstrip() if dotted else text
        if isinstance(self.words, ElidedLabel):
            changed = (words, tip or "") != (self.words.whole(), self.words.toolTip())
            self.words.set(words, tip or "")
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
            changed = True
        return changed

    def toolTip(self) -> str:
        return self.words.toolTip()


class CaptionedLine(QtWidgets.QWidget):
    """A caption and its value line ("Energy:  602 W now · …"), which wraps rather than being cut; set again only
    when ``key(s)`` changed. Subclasses say the key and the (text, tooltip) of a snapshot.

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
        self._key: object = object()  # nothing shown yet: any key differs

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

    def key(self, s: object) -> object:
        raise NotImplementedError

    def text(self, s: object) -> tuple[str, str]:
        raise NotImplementedError

    def update_snapshot(self, s: object) -> None:
        key = self.key(s)
        if key != self._key:
            self._key = key
            lines = self.heightForWidth(self.width())
            set_text(self.label, *self.text(s))
            if self.heightForWidth(self.width()) != lines:  # another number of lines: the layout's business
                self.updateGeometry()


def plain_text(text: str) -> str:
    """What a rich-text label reads as ('<b>30</b> tok/s' → '30 tok/s')."""
    return runs.plain_text(runs.parse(text))


class ValueLabel(QtWidgets.QWidget):
    """A label whose ``set()`` repaints only itself: the layout is asked again only when the text needs more room.

    It draws its text from styled runs (``kvmon.gui.runs``): a new number costs a few font measurements and one
    small paint, where a rich-text QLabel parses and lays out a text document and asks its parent's layout again.
    The size hint only grows (or shrinks when the text is much shorter), so a changing number repaints one label
    and the neighbours do not jitter by a digit's width. With ``set_elide(True)`` a text wider than the label is cut
    with an ellipsis and said whole in the tooltip (``text()`` is always the whole text). Right-click copies it.
    """

    SHRINK_BELOW = 0.6  # a hint this much narrower than the reserved width gives the room back
    MIN_ELIDED_WIDTH = 48  # an eliding label may be squeezed to this many pixels

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        # opaque: a new text repaints the label alone, not the panel and the window beneath it as well
        self.setAutoFillBackground(True)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Preferred)
        self.setContextMenuPolicy(QtCore.Qt.ContextMenuPolicy.ActionsContextMenu)
        copy = QtGui.QAction("Copy", self)
        copy.triggered.connect(self._copy)
        self.addAction(copy)
        self._align = QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.AlignmentFlag.AlignVCenter
        self._fonts = runs.Fonts(self.font())
        self._text = ""
        self._lines: tuple[tuple[runs.Run, ...], ...] = ()
        self._laid = runs.lay_out((), self._fonts)
        self._shown: runs.Laid | None = None  # the elided runs, when the text is cut
        self._tip = ""
        self._elide = False
        self._hint = QtCore.QSize(0, 0)
        self._take(text)
        self._refit(force=True)

    # --- the QLabel parts callers use ---------------------------------------------------------
    def text(self) -> str:
        """The whole text (also when it is shown elided)."""
        return self._text

    def plain(self) -> str:
        """The whole text as it reads, without its markup."""
        return runs.plain_text(self._lines)

    def shown_text(self) -> str:
        """The text as drawn now: the whole text, or its plain prefix ending in '…' when elided."""
        if self._shown is None:
            return self._text
        return "\n".join("".join(r.text for r, _w in line) for line in self._shown.lines)

    @property
    def elided(self) -> bool:
        return self._shown is not None

    def text_width(self) -> int:
        """The width the whole text needs, in pixels."""
        return int(self._laid.width + 0.999)

    def shown_width(self) -> int:
        """The width of the text as drawn now (the elided prefix when cut), in pixels."""
        return int((self._shown or self._laid).width + 0.999)

    def setToolTip(self, tip: str) -> None:
        self._tip = tip
        self._apply_tip()

    def setText(self, text: str) -> None:
        self.set(text)

    def setAlignment(self, align: QtCore.Qt.AlignmentFlag) -> None:
        self._align = align
        self.update()

    def set_elide(self, on: bool) -> None:
        """Cut a text wider than the label with '…' (the tooltip then says it whole); the label may be squeezed."""
        self._elide = on
        self._refit(force=True)
        self._fit_shown()

    # --- layout ---------------------------------------------------------------------------------
    def sizeHint(self) -> QtCore.QSize:
        return self._hint

    def minimumSizeHint(self) -> QtCore.QSize:
        if self._elide:
            return QtCore.QSize(min(self.MIN_ELIDED_WIDTH, self._hint.width()), self._hint.height())
        return self._hint

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        super().resizeEvent(e)
        if self._elide:
            self._fit_shown()

    def changeEvent(self, e: QtCore.QEvent) -> None:
        super().changeEvent(e)
        if e.type() in (QtCore.QEvent.Type.FontChange, QtCore.QEvent.Type.StyleChange):
            self._fonts = runs.Fonts(self.font())  # a style sheet's font size changes the room the text needs
            self._laid = runs.lay_out(self._lines, self._fonts)
            self._refit(force=True)
            self._fit_shown()
            self.update()

    def paintEvent(self, _e: QtGui.QPaintEvent) -> None:
        p = QtGui.QPainter(self)
        runs.paint(p, self._shown or self._laid, self._fonts, self.contentsRect(), self._align,
                   self.palette().color(QtGui.QPalette.ColorRole.WindowText))
        p.end()

    def _copy(self) -> None:
        cb = QtWidgets.QApplication.clipboard()
        if cb is not None:
            cb.setText(self.plain())

    def _take(self, text: str) -> None:
        self._text = text
        self._lines = runs.parse(text)
        self._laid = runs.lay_out(self._lines, self._fonts)
        if QtGui.QAccessible.isActive():
            self.setAccessibleName(runs.plain_text(self._lines))

    def _fit_shown(self) -> None:
        """Show the whole text when it fits, else the longest prefix that does (eliding labels only)."""
        width = self.contentsRect().width()
        shown = runs.elide(self._laid, self._fonts, width) if self._elide and width > 0 else None
        was_elided, self._shown = self._shown is not None, shown
        if was_elided or shown is not None:  # the tooltip says the whole (new) text while it is cut
            self._apply_tip()

    def _apply_tip(self) -> None:
        tip = self._tip
        if self._shown is not None:
            whole = runs.plain_text(self._lines)
            tip = f"{whole}\n\n{tip}" if tip and whole not in tip else (tip or whole)
        if tip != super().toolTip():
            super().setToolTip(tip)

    def _refit(self, force: bool = False) -> None:
        """Ask the parent layout again only when the text no longer fits (or frees much of its room)."""
        m = self.contentsMargins()
        need_w = int(self._laid.width + 0.999) + m.left() + m.right()
        need_h = int(max(self._laid.height, self._fonts.get(runs.PLAIN)[1].height()) + 0.999) + m.top() + m.bottom()
        grow = need_w > self._hint.width() or need_h != self._hint.height()
        shrink = need_w < self._hint.width() * self.SHRINK_BELOW
        if force or grow or shrink:
            slack = self._fonts.get(runs.PLAIN)[1].averageCharWidth()  # a wider digit does not ask for room
            self._hint = QtCore.QSize(need_w + int(slack), need_h)
            self.updateGeometry()

    def set(self, text: str, tooltip: str | None = None) -> bool:
        """Update text/tooltip; returns True when something changed."""
        changed = False
        if text != self._text:
            self._take(text)
            self._refit()
            self._fit_shown()
            self.update()
            changed = True
        if tooltip is not None and tooltip != self._tip:
            self._tip = tooltip
            self._apply_tip()
            changed = True
        return changed


class WrapLabel(QtWidgets.QWidget):
    """A rich-text label that word-wraps to its width (alerts, verdicts: texts that change seldom): a QLabel in a
    box without a layout, so a new text asks the parent layout again only when it needs another height."""

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._label = QtWidgets.QLabel(text, self)
        self._label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self._label.setWordWrap(True)
        self._label.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self._label.setAutoFillBackground(True)
        self._text = text
        self._hint, self._min_hint = self._label.sizeHint(), self._label.minimumSizeHint()
        sp = self.sizePolicy()
        sp.setHeightForWidth(True)
        self.setSizePolicy(sp)

    def text(self) -> str:
        return self._text

    def inner(self) -> QtWidgets.QLabel:
        """The QLabel that draws the text."""
        return self._label

    def toolTip(self) -> str:
        return self._label.toolTip()

    def setToolTip(self, tip: str) -> None:
        self._label.setToolTip(tip)

    def setAlignment(self, align: QtCore.Qt.AlignmentFlag) -> None:
        self._label.setAlignment(align)

    def sizeHint(self) -> QtCore.QSize:
        return self._hint

    def minimumSizeHint(self) -> QtCore.QSize:
        return self._min_hint

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._label.heightForWidth(width)

    def resizeEvent(self, e: QtGui.QResizeEvent) -> None:
        self._label.setGeometry(self.rect())
        super().resizeEvent(e)

    def _refit(self) -> None:
        need = self._label.heightForWidth(self.width()) if self.width() > 0 else -1
        if need != self.height():
            self._hint, self._min_hint = self._label.sizeHint(), self._label.minimumSizeHint()
            self.updateGeometry()

    def set(self, text: str, tooltip: str | None = None) -> bool:
        """Update text/tooltip; returns True when something changed."""
        changed = False
        if text != self._text:
            self._text = text
            self._label.setText(text)
            self._refit()
            changed = True
        if tooltip is not None and tooltip != self._label.toolTip():
            self._label.setToolTip(tooltip)
            changed = True
        return changed


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
