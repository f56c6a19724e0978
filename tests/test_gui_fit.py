"""Nothing is cut off: the dashboard on the simulated spill and router at 1024×640, 1280×800 and 1920×1080, light and
dark.

Every label either shows its whole text, or ends in "…" with the whole text in its tooltip, or wraps to a height
it is given; every line of a bar's note fits or is shortened with the whole note on hover; plot legends lie inside
their plots.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("kvmon.sim.server", reason="the simulator is not available")

from PySide6 import QtWidgets

from kvmon.app.demo import demo_session
from kvmon.gui.app import build_window
from kvmon.gui.labels import ElidingCombo, ValueLabel, plain_text
from kvmon.gui.main_window import MainWindow
from kvmon.gui.panels.bars import BarsWidget
from kvmon.gui.panels.models import Chip
from kvmon.gui.settings import Settings

SIZES = ((1024, 640), (1280, 800), (1920, 1080))


def cut_off(win: MainWindow) -> list[str]:
    """What the window shows cut off now, one line each (empty when everything fits)."""
    found: list[str] = []
    for lbl in win.findChildren(QtWidgets.QLabel):
        if not lbl.isVisibleTo(win) or not lbl.text():
            continue
        if lbl.text().endswith("…") and plain_text(lbl.text())[:-1] and lbl.toolTip():
            continue  # shortened, the whole text on hover (checked where such labels are made)
        if lbl.wordWrap():
            if lbl.heightForWidth(lbl.width()) > lbl.height() + 1:
                found.append(f"wrapped label {lbl.height()} px high needs {lbl.heightForWidth(lbl.width())}: "
                             f"{plain_text(lbl.text())[:80]!r}")
            continue
        need = lbl.sizeHint().width()
        if need <= lbl.width() + 1:
            continue
        found.append(f"label {lbl.width()} px wide needs {need}: {plain_text(lbl.text())[:80]!r}")
    for val in win.findChildren(ValueLabel):  # the labels that draw their own text
        if not val.isVisibleTo(win) or not val.text():
            continue
        room = val.contentsRect().width()
        if val.elided:
            if val.shown_width() > room + 1:
                found.append(f"elided label {room} px wide draws {val.shown_width()}: {val.plain()[:80]!r}")
            elif val.plain() not in val.toolTip():
                found.append(f"elided label without its text in the tooltip: {val.plain()[:80]!r}")
            continue
        if val.text_width() > room + 1:
            found.append(f"label {room} px wide needs {val.text_width()}: {val.plain()[:80]!r}")
    for button in win.findChildren(QtWidgets.QPushButton):
        if not button.isVisibleTo(win) or not button.text():
            continue
        if isinstance(button, Chip) and button.text() != button.whole_text():
            if not (button.text().endswith("…") and button.toolTip()):
                found.append(f"chip shortened without … and a tooltip: {button.whole_text()!r}")
            continue
        if button.sizeHint().width() > button.width() + 1:
            found.append(f"button {button.width()} px wide needs {button.sizeHint().width()}: {button.text()!r}")
    for combo in win.findChildren(QtWidgets.QComboBox):
        if not combo.isVisibleTo(win) or not combo.currentText():
            continue
        if isinstance(combo, ElidingCombo):
            if combo.shown_text() != combo.currentText() and combo.currentText() not in combo.toolTip():
                found.append(f"combo shortened without a tooltip: {combo.currentText()!r}")
            continue
        opt = QtWidgets.QStyleOptionComboBox()
        combo.initStyleOption(opt)
        room = combo.style().subControlRect(QtWidgets.QStyle.ComplexControl.CC_ComboBox, opt,
                                            QtWidgets.QStyle.SubControl.SC_ComboBoxEditField, combo).width()
        if combo.fontMetrics().horizontalAdvance(combo.currentText()) > room:
            found.append(f"combo {room} px wide for {combo.currentText()!r}")
    for bars in win.findChildren(BarsWidget):
        if not bars.isVisibleTo(win):
            continue
        for bar in bars.bars:
            for shown, whole in bars.note_lines(bar):
                if shown != whole and whole not in bars.row_tip(bar):
                    found.append(f"{bar.label}: note line cut without a tooltip: {whole!r}")
    for panel in (win.speed_context, win.speed_time):
        plot = panel.plot
        legend = plot.getPlotItem().legend
        if legend is None or not legend.isVisible():
            continue
        rect = plot.mapFromScene(legend.sceneBoundingRect()).boundingRect()
        if not plot.viewport().rect().adjusted(-1, -1, 1, 1).contains(rect):
            found.append(f"legend of {type(panel).__name__} at {rect.getRect()} outside its plot "
                         f"{plot.width()}×{plot.height()}")
    return found


def _spilled(win: MainWindow) -> bool:  # host RAM in use and the alerts up: the longest notes and messages
    return win.last is not None and win.last.host.weights_in_host_bytes is not None and len(win.alerts.lines) >= 2


def _routed(win: MainWindow) -> bool:  # the router's model row, a model shown
    return win.last is not None and win.last.serving is not None and win.last.serving.followed is not None


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "start_at_s", "ready"), [("spill-4090", 200, _spilled), ("router", 60, _routed)])
def test_nothing_is_cut_off_at_three_sizes_light_and_dark(qtbot, tmp_path: Path, scenario: str, start_at_s: float,
                                                          ready: Callable[[MainWindow], bool]) -> None:
    session = demo_session(scenario, None, speed=10, start_at_s=start_at_s)
    win, poller = build_window(session, Settings(str(tmp_path / "s.ini")), 0.25, tray=False)
    qtbot.addWidget(win)
    win.set_window_range("session")
    win.resize(1280, 800)
    win.show()
    poller.start()
    try:
        qtbot.waitUntil(lambda: ready(win), timeout=30000)
        poller.set_paused(True)
        qtbot.wait(300)
        problems: list[str] = []
        for scheme in ("light", "dark"):
            win.set_scheme(scheme)
            for w, h in SIZES:
                win.resize(w, h)
                qtbot.wait(150)
                QtWidgets.QApplication.processEvents()
                assert (win.width(), win.height()) == (w, h)
                problems += [f"{w}×{h} {scheme}: {p}" for p in cut_off(win)]
                win.show_whatif()  # the calculator's tab too
                qtbot.wait(50)
                problems += [f"{w}×{h} {scheme}, what-if: {p}" for p in cut_off(win)]
                win.tabs.setCurrentIndex(0)
        assert not problems, "\n".join(problems)
    finally:
        poller.stop()
        session.close()


def test_the_check_finds_a_label_cut_off(qtbot, tmp_path: Path) -> None:
    """The check itself: a label narrower than its text, with no "…", is reported; one that elides is not."""
    win = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    qtbot.addWidget(win)
    win.resize(1024, 640)
    win.show()
    qtbot.waitExposed(win)
    long = "a model name far longer than the header has room for at this width " * 3
    win.header.model.set(long)
    QtWidgets.QApplication.processEvents()
    assert not [p for p in cut_off(win) if "far longer" in p]  # it elides, with the text on hover
    policy = QtWidgets.QSizePolicy.Policy
    win.header.model.setSizePolicy(policy.Ignored, policy.Preferred)  # a fixed share of the row, as it once was
    QtWidgets.QLabel.setText(win.header.model, long)  # drawn whole, not shortened
    QtWidgets.QApplication.processEvents()
    assert any("far longer" in p for p in cut_off(win))
