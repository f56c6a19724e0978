"""Bar rows: the Memory and Bandwidth panels' 100 % marks at one x, notes that keep their lines (a line too long ends
in "…", whole on hover), and a new figure that moves nothing."""

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


def test_a_long_note_ends_in_an_ellipsis_and_a_new_figure_moves_nothing(qtbot) -> None:
    w = BarsWidget()
    qtbot.addWidget(w)
    w.resize(420, 60)
    w.show()
    w.set_bars((_bar("12.4 GiB of 24.0 GiB\nfree 11.6 GiB"),))
    QtWidgets.QApplication.processEvents()
    name, canvas, note = w.rows[0]
    before = (name.geometry(), canvas.geometry(), note.geometry())
    height = w.heightForWidth(w.width())
    w.set_bars((_bar("13.1 GiB of 24.0 GiB\nfree 10.9 GiB", 540.0),))
    QtWidgets.QApplication.processEvents()
    assert (name.geometry(), canvas.geometry(), note.geometry()) == before
    # a second line too long for the note's column (a forecast joins it): the row keeps its height, the line its
    # first whole part, and the whole note is said on hover
    long = "13.1 GiB of 24.0 GiB\nfree 10.9 GiB · full in ≈ 2 min · swap 2.00 GiB"
    w.set_bars((_bar(long, 540.0),))
    QtWidgets.QApplication.processEvents()
    assert w.heightForWidth(w.width()) == height
    assert (name.geometry(), canvas.geometry(), note.geometry()) == before
    first, second = note.text().split("\n")
    assert first == "13.1 GiB of 24.0 GiB" and second.startswith("free 10.9 GiB · ") and second.endswith(" · …")
    assert note.fontMetrics().horizontalAdvance(second) <= note.width()
    assert long in note.toolTip()
    w.resize(1400, height)  # room for it all: whole again
    QtWidgets.QApplication.processEvents()
    assert note.text() == long and long not in note.toolTip()
