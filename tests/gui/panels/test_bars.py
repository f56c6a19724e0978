"""Bar rows: the Memory and Bandwidth panels' 100 % marks at one x, notes that wrap rather than being cut, and a new
figure that moves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6 import QtCore, QtWidgets
from synthetic import SyntheticMonitor

from kvmon.gui.main_window import MainWindow
from kvmon.gui.panels.bars import Bar, BarsWidget, Segment
from kvmon.gui.settings import Settings


@pytest.mark.parametrize("size", [(1280, 800), (1024, 640), (800, 600)])
def test_the_100_percent_marks_of_memory_and_bandwidth_line_up(qtbot, tmp_path: Path, size: tuple[int, int]) -> None:
    win = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    qtbot.addWidget(win)
    win.resize(*size)
    win.show()
    qtbot.waitExposed(win)
    win.on_snapshot(SyntheticMonitor().snapshot(5))
    QtWidgets.QApplication.processEvents()
    marks = set()
    for panel in (win.memory, win.bandwidth):
        for _name, canvas, _note in panel.bars.rows:
            x = canvas.mark_x()
            assert x is not None
            marks.add(round(canvas.mapTo(win, QtCore.QPointF(x, 0)).x()))
    assert len(marks) == 1, marks


def _bar(note: str, used: float = 500.0) -> Bar:
    return Bar("GPU 0", 1000.0, (Segment("weights", used, "w"), Segment("free", 1000.0 - used, "f")), note)


def test_a_long_note_wraps_and_a_new_figure_moves_nothing(qtbot) -> None:
    w = BarsWidget()
    qtbot.addWidget(w)
    w.resize(420, 60)
    w.show()
    w.set_bars((_bar("12.4 GiB of 24.0 GiB\nfree 11.6 GiB"),))
    QtWidgets.QApplication.processEvents()
    name, canvas, note = w.rows[0]
    before = (name.geometry(), canvas.geometry(), note.geometry())
    w.set_bars((_bar("13.1 GiB of 24.0 GiB\nfree 10.9 GiB", 540.0),))
    QtWidgets.QApplication.processEvents()
    assert (name.geometry(), canvas.geometry(), note.geometry()) == before
    long = "weights + KV cache + the draft model 12.3 GiB of 64.0 GiB\nfree 11.6 GiB · swap 2.00 GiB in use"
    w.set_bars((_bar(long),))
    QtWidgets.QApplication.processEvents()
    assert w.heightForWidth(w.width()) > before[2].height()  # more lines: the row asks for more room
    w.resize(420, w.heightForWidth(420))
    QtWidgets.QApplication.processEvents()
    assert note.text() == long and note.height() >= note.heightForWidth(note.width())  # whole, wrapped
