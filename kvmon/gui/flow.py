"""A layout that flows its items onto more rows when a row is full (Qt's flow layout example), and a widget whose
height follows from its width through it: model chips, the memory legend and the status bar show every item whole
on more rows in a narrow window, rather than cut."""

from __future__ import annotations

from typing import TypeVar

from PySide6 import QtCore, QtWidgets

from kvmon.gui import theme

W = TypeVar("W", bound=QtWidgets.QWidget)


def stack(box: W, *widgets: QtWidgets.QWidget, grow: QtWidgets.QWidget | None = None, sides: int = 0,
          ends: int = 0, across: bool = False) -> W:
    """Lay ``widgets`` out in ``box`` one above the other (``across``: side by side), a unit apart (``grow`` takes
    the room left), ``sides`` and ``ends`` pixels from its edges; returns ``box``."""
    lay = QtWidgets.QHBoxLayout(box) if across else QtWidgets.QVBoxLayout(box)
    lay.setContentsMargins(sides, ends, sides, ends)
    lay.setSpacing(theme.UNIT)
    for w in widgets:
        lay.addWidget(w, 1 if w is grow else 0)
    return box


class FlowLayout(QtWidgets.QLayout):
    """Items left to right, onto the next row when a row is full (Qt's flow layout example): a narrow window shows
    every chip or legend entry whole on more rows rather than cut."""

    def __init__(self, parent: QtWidgets.QWidget | None = None, h_gap: int = theme.GAP, v_gap: int = 0) -> None:
        super().__init__(parent)
        self._items: list[QtWidgets.QLayoutItem] = []
        self._h_gap, self._v_gap = h_gap, v_gap
        # widgets that keep their room in the height while hidden: an item that comes and goes moves nothing below
        self.keep_room: set[QtWidgets.QWidget] = set()
        self.setContentsMargins(0, 0, 0, 0)

    def addItem(self, item: QtWidgets.QLayoutItem) -> None:
        self._items.append(item)

    def insertWidget(self, index: int, widget: QtWidgets.QWidget) -> None:
        self.addChildWidget(widget)
        self._items.insert(index, QtWidgets.QWidgetItem(widget))
        self.invalidate()

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QtWidgets.QLayoutItem | None:
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QtWidgets.QLayoutItem | None:
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> QtCore.Qt.Orientation:
        return QtCore.Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._place(QtCore.QRect(0, 0, width, 0), move=False, keep=True)

    def setGeometry(self, rect: QtCore.QRect) -> None:
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QtCore.QSize:
        """All items in one row."""
        m = self.contentsMargins()
        shown = [i.sizeHint() for i in self._items if not i.isEmpty()]
        w = sum(s.width() for s in shown) + self._h_gap * max(0, len(shown) - 1)
        h = max((s.height() for s in shown), default=0)
        return QtCore.QSize(w + m.left() + m.right(), h + m.top() + m.bottom())

    def minimumSize(self) -> QtCore.QSize:
        """The widest item (each on a row of its own)."""
        m = self.contentsMargins()
        size = QtCore.QSize()
        for item in self._items:
            if not item.isEmpty():
                size = size.expandedTo(item.minimumSize())
        return size + QtCore.QSize(m.left() + m.right(), m.top() + m.bottom())

    def _place(self, rect: QtCore.QRect, move: bool, keep: bool = False) -> int:
        """Lay the items out in ``rect`` (or only measure; ``keep``: with the hidden ones of ``keep_room``); the
        height they take."""
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        x, y, row_h = area.x(), area.y(), 0
        for item in self._items:
            hidden = item.widget() if item.isEmpty() else None
            if item.isEmpty() and not (keep and hidden in self.keep_room):
                continue
            hint = hidden.sizeHint() if hidden is not None else item.sizeHint()  # a hidden widget's item says 0×0
            w = min(hint.width(), area.width())
            if x > area.x() and x + w > area.right() + 1:
                x, y, row_h = area.x(), y + row_h + self._v_gap, 0
            if move:
                item.setGeometry(QtCore.QRect(QtCore.QPoint(x, y), QtCore.QSize(w, hint.height())))
            x += w + self._h_gap
            row_h = max(row_h, hint.height())
        return y + row_h - rect.y() + m.bottom()


class FlowBox(QtWidgets.QWidget):
    """A widget whose ``FlowLayout`` decides its height from its width (rows grow when the window narrows)."""

    def __init__(self, parent: QtWidgets.QWidget | None = None, h_gap: int = theme.GAP, v_gap: int = 0) -> None:
        super().__init__(parent)
        self.setAutoFillBackground(True)  # opaque: a new text in it repaints it, not the window beneath
        self.flow = FlowLayout(self, h_gap, v_gap)
        policy = QtWidgets.QSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred,
                                       QtWidgets.QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self.flow.heightForWidth(width)

    def minimumSizeHint(self) -> QtCore.QSize:
        return self.flow.minimumSize()
