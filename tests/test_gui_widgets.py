"""ValueLabel: a changing number repaints its label, not the panel's layout; more room only when the text needs it."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtCore, QtWidgets

from kvmon.gui.widgets import ValueLabel


class LayoutRequests(QtCore.QObject):
    """Counts LayoutRequest events (a re-layout of the panel) delivered to one widget."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, obj: QtCore.QObject, ev: QtCore.QEvent) -> bool:
        if ev.type() == QtCore.QEvent.Type.LayoutRequest:
            self.count += 1
        return False


def _panel(qtbot) -> tuple[QtWidgets.QWidget, ValueLabel, LayoutRequests]:
    panel = QtWidgets.QWidget()
    lay = QtWidgets.QHBoxLayout(panel)
    label = ValueLabel("context <b>1.20K</b> of 32.8K tokens")
    lay.addWidget(label)
    lay.addWidget(QtWidgets.QLabel("neighbour"))
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.wait(20)  # the first layout and paint
    counter = LayoutRequests()
    panel.installEventFilter(counter)
    return panel, label, counter


def test_a_new_number_of_the_same_length_relays_out_nothing(qtbot) -> None:
    _w, label, counter = _panel(qtbot)
    width = label.width()
    for n in ("1.23K", "1.24K", "1.25K", "9.99K"):
        assert label.set(f"context <b>{n}</b> of 32.8K tokens")
        QtWidgets.QApplication.processEvents()
    assert counter.count == 0 and label.width() == width
    assert label.text() == "context <b>9.99K</b> of 32.8K tokens"


def test_longer_text_gets_room_and_much_shorter_text_gives_it_back(qtbot) -> None:
    _w, label, counter = _panel(qtbot)
    before = label.sizeHint().width()
    label.set("context <b>1.20K</b> of 32.8K tokens · 4 slots, 2 of them busy")
    QtWidgets.QApplication.processEvents()
    assert label.sizeHint().width() > before and counter.count >= 1
    wide = label.sizeHint().width()
    label.set("idle")
    QtWidgets.QApplication.processEvents()
    assert label.sizeHint().width() < wide * ValueLabel.SHRINK_BELOW


def test_tooltip_and_unchanged_text(qtbot) -> None:
    _w, label, _counter = _panel(qtbot)
    assert label.set("context <b>1.20K</b> of 32.8K tokens", "measured") is True  # the tooltip is new
    assert label.toolTip() == "measured"
    assert label.set("context <b>1.20K</b> of 32.8K tokens", "measured") is False


def test_an_eliding_label_shortens_only_what_does_not_fit_and_says_it_whole_on_hover(qtbot) -> None:
    """Numbers of the same length are set without laying the text out; a narrower label then still elides
    exactly (measured again), and a wider one shows the whole text again."""
    label = ValueLabel("context <b>1.20K</b> of 32.8K tokens")  # on its own: its size is what the test sets
    qtbot.addWidget(label)
    label.show()
    label.set_elide(True)
    label.setToolTip("from /slots")
    label.resize(400, label.height())
    for n in ("1.23K", "1.24K", "9.99K"):
        label.set(f"context <b>{n}</b> of 32.8K tokens")
    assert not label.elided and label.shown_text() == "context <b>9.99K</b> of 32.8K tokens"
    label.resize(80, label.height())
    QtWidgets.QApplication.processEvents()
    assert label.elided and label.shown_text().endswith("…")
    assert label.shown_width() <= 80
    assert "context 9.99K of 32.8K tokens" in label.toolTip() and "from /slots" in label.toolTip()
    label.resize(400, label.height())
    QtWidgets.QApplication.processEvents()
    assert not label.elided and label.shown_text() == label.text() and label.toolTip() == "from /slots"
