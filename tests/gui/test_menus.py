"""Every control can be found: View, Tools and Help menus, each shortcut an action in a menu, the tray's menu."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtCore, QtGui, QtWidgets
from synthetic import SyntheticMonitor

from kvmon import __version__
from kvmon.gui import theme
from kvmon.gui.main_window import MainWindow
from kvmon.gui.settings import Settings


@pytest.fixture
def win(qtbot, tmp_path: Path):
    w = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    w.on_snapshot(SyntheticMonitor().snapshot(3))
    was = theme.is_dark()
    yield w
    app = QtWidgets.QApplication.instance()
    theme.apply(app, was)  # type: ignore[arg-type]


def _menu_actions(menu: QtWidgets.QMenu) -> list[QtGui.QAction]:
    out: list[QtGui.QAction] = []
    for act in menu.actions():
        if act.menu() is not None:
            out.extend(_menu_actions(act.menu()))
        elif not act.isSeparator():
            out.append(act)
    return out


def _menus(win: MainWindow) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for act in win.menuBar().actions():
        out[act.text().replace("&", "")] = [a.text().replace("&", "") for a in _menu_actions(act.menu())]
    return out


def test_the_menus_hold_every_control(win: MainWindow) -> None:
    menus = _menus(win)
    assert list(menus) == ["File", "View", "Tools", "Help"]
    assert {"Follow the system", "Light", "Dark", "Last 5 min", "Last 1 h", "Whole session", "Speed over time",
            "Memory", "Bandwidth", "Alerts and advice", "Toolbar", "Pause polling", "Reconnect"} <= set(menus["View"])
    assert menus["Tools"] == ["What-if calculator…", "Measure speed at every depth…", "Settings…"]
    assert menus["Help"] == ["Keyboard shortcuts", "What the numbers mean", "About kvmon"]
    assert menus["File"][-1] == "Quit" and "Record session…" in menus["File"]
    assert "Compare measured curves…" in menus["File"]


def test_every_shortcut_is_one_menu_entry(win: MainWindow) -> None:
    in_menus = {id(a) for act in win.menuBar().actions() for a in _menu_actions(act.menu())}
    keys: dict[str, str] = {}
    for act in win.findChildren(QtGui.QAction):
        k = act.shortcut().toString()
        if not k:
            continue
        assert id(act) in in_menus, f"{act.text()} ({k}) has no menu entry"
        assert k not in keys, f"{k} is both {keys[k]} and {act.text()}"
        keys[k] = act.text()
    assert {"Space", "F5", "Ctrl+Q", "Ctrl+,", "1", "2", "3", "F1"} <= set(keys)
    assert not win.findChildren(QtGui.QShortcut)  # a bare shortcut would be one nobody can find


def test_theme_switch_light_dark_and_back_to_the_system(win: MainWindow) -> None:
    acts = win.menus.actions
    acts["scheme:dark"].trigger()
    assert theme.is_dark() and win.settings.scheme == "dark" and acts["scheme:dark"].isChecked()
    assert win.header.speed.whole()  # the panels were built again in the new colours, with the last numbers
    acts["scheme:light"].trigger()
    assert not theme.is_dark() and win.settings.scheme == "light"
    acts["scheme:system"].trigger()
    assert theme.is_dark() == theme.system_dark() and win.settings.scheme == "system"


def test_a_chosen_scheme_is_used_from_the_start(qtbot, tmp_path: Path) -> None:
    s = Settings(str(tmp_path / "s.ini"))
    s.scheme = "light" if theme.system_dark() else "dark"
    was = theme.is_dark()
    try:
        w = MainWindow(s, tray=False)
        qtbot.addWidget(w)
        assert theme.is_dark() == (s.scheme == "dark")
        assert w.menus.actions[f"scheme:{s.scheme}"].isChecked()
        # the desktop switching its scheme does not override a chosen one
        w._scheme_changed(QtCore.Qt.ColorScheme.Dark if s.scheme == "light" else QtCore.Qt.ColorScheme.Light)
        assert theme.is_dark() == (s.scheme == "dark")
    finally:
        theme.apply(QtWidgets.QApplication.instance(), was)  # type: ignore[arg-type]


def test_time_range_and_keys(win: MainWindow, qtbot) -> None:
    win.menus.actions["range:1 h"].trigger()
    assert win.window_range == "1 h" and win.speed_time.window_s == 3600.0
    qtbot.keyClick(win, QtCore.Qt.Key.Key_3)
    assert win.window_range == "session" and win.menus.actions["range:session"].isChecked()
    assert "session" in win.speed_time.plot.getPlotItem().titleLabel.text


def test_panels_can_be_switched_off_and_stay_off(win: MainWindow) -> None:
    def shown(w: QtWidgets.QWidget) -> bool:
        return w.isVisibleTo(win)

    win.menus.actions["panel:memory"].trigger()
    assert not shown(win.memory) and shown(win.bandwidth) and "memory" in win.settings.hidden_panels
    win.menus.actions["panel:toolbar"].trigger()
    assert not shown(win.toolbar)
    win.apply_scheme(not theme.is_dark())  # the panels are built again: the choice holds
    QtWidgets.QApplication.processEvents()  # a new central widget is shown by a queued call
    assert not shown(win.memory) and shown(win.bandwidth) and not win.menus.actions["panel:memory"].isChecked()
    for name in ("speed_time", "bandwidth"):
        win.menus.actions[f"panel:{name}"].trigger()
    assert not shown(win._right)  # nothing left on the right: the hero takes the width (the replies are under it)
    assert shown(win._replies_box)
    for name in ("latency", "energy"):
        win.menus.actions[f"panel:{name}"].trigger()
    assert not shown(win._replies_box) and not shown(win._right)
    win.menus.actions["panel:memory"].trigger()
    assert shown(win.memory) and shown(win._right) and not shown(win.bandwidth)


def test_pause_from_the_menu_and_space(win: MainWindow, qtbot) -> None:
    seen: list[bool] = []
    win.pause_toggled.connect(seen.append)
    win.menus.actions["pause"].trigger()
    assert win.paused and win.menus.actions["pause"].isChecked()
    qtbot.keyClick(win, QtCore.Qt.Key.Key_Space)
    assert seen == [True, False] and not win.menus.actions["pause"].isChecked()


def test_tools_open_what_if_and_settings(win: MainWindow, qtbot) -> None:
    win.menus.actions["whatif"].trigger()
    assert win.whatif is not None and win.tabs.currentWidget() is win.whatif
    win.menus.actions["settings"].trigger()
    dlg = win.findChild(QtWidgets.QDialog)
    assert dlg is not None and dlg.windowTitle() == "kvmon settings"
    dlg.reject()


def test_help_says_the_shortcuts_the_numbers_and_the_version(win: MainWindow) -> None:
    text = win.show_shortcuts().browser.toPlainText()
    for keys, what in (("Space", "Pause polling"), ("F5", "Reconnect"), ("Ctrl+Q", "Quit"), ("1", "Last 5 min"),
                       ("Ctrl+S", "Save window as PNG")):
        assert f"{keys}\t{what}" in text or f"{keys} {what}" in text or (keys in text and what in text), keys
    numbers = win.show_numbers_help().browser.toPlainText()
    for word in ("Ceiling", "Efficiency", "KV cache in use / allocated", "Spill line", "Other programs"):
        assert word in numbers
    assert f"kvmon {__version__}" in win.show_about().browser.toPlainText()


def test_help_dialogs_are_sized_to_their_text(win: MainWindow, qtbot) -> None:
    """About is a small dialog for its few lines; What the numbers mean is taller: each shows its whole text."""
    about, numbers = win.show_about(), win.show_numbers_help()
    for dlg in (about, numbers):
        qtbot.addWidget(dlg)
        QtWidgets.QApplication.processEvents()
        assert not dlg.browser.horizontalScrollBar().isVisible()
    assert not about.browser.verticalScrollBar().isVisible()
    assert about.height() < 300 and about.height() < numbers.height()


def test_the_tray_menu_shows_pauses_records_and_quits(qtbot, tmp_path: Path) -> None:
    w = MainWindow(Settings(str(tmp_path / "s.ini")), tray=True)
    qtbot.addWidget(w)
    assert w.tray is not None and w.tray.menu is w.menus.tray_menu  # set also where the desktop has no tray
    texts = [a.text().replace("&", "") for a in w.tray.menu.actions() if not a.isSeparator()]
    assert texts == ["Show kvmon", "Pause polling", "Record session…", "Compact view", "Quit"]
    w.showMinimized()
    w.tray.menu.actions()[0].trigger()
    qtbot.waitUntil(lambda: not w.isMinimized(), timeout=3000)
    w.tray.menu.actions()[1].trigger()
    assert w.paused
