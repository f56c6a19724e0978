"""The window's menus beyond File's exports, and the tray's: every control has a menu entry, and every shortcut is
an action (so Help ▸ Keyboard shortcuts can list them all).

- File: … exports, recording, report card (``kvmon.gui.export``, the window) …, Compare…, Quit
- View: Theme (system / light / dark), Time range (5 min / 1 h / session), Panels, Compact view, Pause polling,
  Reconnect
- Tools: What-if calculator, Measure speed at every depth, Settings
- Help: Keyboard shortcuts, What the numbers mean, About kvmon
- the tray icon's menu: Show kvmon, Pause polling, Record session, Compact view, Quit
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6 import QtGui, QtWidgets

from kvmon.gui.settings import PANELS, SCHEMES, WINDOW_RANGES

SCHEME_WORDS = {"system": "Follow the system", "light": "Light", "dark": "Dark"}


@dataclass
class Menus:
    """The actions the menus hold, by name (tests and the tray use them)."""

    actions: dict[str, QtGui.QAction] = field(default_factory=dict)
    menus: dict[str, QtWidgets.QMenu] = field(default_factory=dict)
    tray_menu: QtWidgets.QMenu | None = None


def _action(win: QtWidgets.QMainWindow, m: Menus, key: str, text: str, fn: Callable[[], object],
            menu: QtWidgets.QMenu, shortcut: str | None = None, *, checkable: bool = False,
            tip: str | None = None) -> QtGui.QAction:
    act = QtGui.QAction(text, win)
    if shortcut:
        act.setShortcut(QtGui.QKeySequence(shortcut))
    act.setCheckable(checkable)
    if tip:
        act.setStatusTip(tip)
        act.setToolTip(tip)
    act.triggered.connect(lambda _checked=False: fn())
    menu.addAction(act)
    win.addAction(act)  # its shortcut works while the menu bar is hidden too
    m.actions[key] = act
    return act


def _radio(win: QtWidgets.QMainWindow, m: Menus, menu: QtWidgets.QMenu, prefix: str,
           items: list[tuple[str, str, str | None]], current: str, choose: Callable[[str], object]) -> None:
    group = QtGui.QActionGroup(win)
    group.setExclusive(True)
    for value, text, shortcut in items:
        act = _action(win, m, f"{prefix}:{value}", text, functools.partial(choose, value), menu, shortcut,
                      checkable=True)
        act.setChecked(value == current)
        group.addAction(act)


def install(win: Any, file_menu: QtWidgets.QMenu) -> Menus:
    """Add Quit to ``file_menu`` and the View, Tools and Help menus to ``win`` (a MainWindow); the tray's menu."""
    m = Menus()
    bar = win.menuBar()
    _action(win, m, "compare", "Co&mpare measured curves…", win.open_compare, file_menu,
            tip="Two sweeps, recordings or remembered curves on one speed-vs-context plot")
    file_menu.addSeparator()
    _action(win, m, "quit", "&Quit", win.close, file_menu, "Ctrl+Q")

    view = bar.addMenu("&View")
    m.menus["view"] = view
    theme_menu = view.addMenu("&Theme")
    _radio(win, m, theme_menu, "scheme", [(s, SCHEME_WORDS[s], None) for s in SCHEMES], win.settings.scheme,
           win.set_scheme)
    ranges = view.addMenu("Time &range")
    _radio(win, m, ranges, "range", [(name, f"Last {name}" if name != "session" else "Whole session", str(i))
                                     for i, name in enumerate(WINDOW_RANGES, start=1)],
           win.settings.window_range, win.set_window_range)
    panels = view.addMenu("&Panels")
    hidden = win.settings.hidden_panels
    for name, text in PANELS.items():
        act = _action(win, m, f"panel:{name}", text, functools.partial(win.toggle_panel, name), panels, checkable=True)
        act.setChecked(name not in hidden)
    view.addSeparator()
    _action(win, m, "compact", "&Compact view", win.toggle_compact, view, "Ctrl+M",
            tip="A small window to keep beside the chat: the verdict, speed, context, headroom, the top alert")
    pause = _action(win, m, "pause", "&Pause polling", win.toggle_pause, view, "Space", checkable=True,
                    tip="Stop asking the server (the screen keeps what it has)")
    pause.setChecked(win.paused)
    _action(win, m, "reconnect", "&Reconnect", win.reconnect_requested.emit, view, "F5",
            tip="Connect to the server again (after a restart, or to re-detect it)")

    tools = bar.addMenu("&Tools")
    m.menus["tools"] = tools
    _action(win, m, "whatif", "&What-if calculator…", win.show_whatif, tools, "Ctrl+I",
            tip="Another GPU, model, context or cache type: the ceiling and whether it fits")
    _action(win, m, "sweep", "&Measure speed at every depth…", win.open_sweep, tools,
            tip="Decode and prefill at every depth of the server shown, its cost said first")
    _action(win, m, "settings", "&Settings…", win.open_settings, tools, "Ctrl+,",
            tip="Server URL, API key, poll interval")

    helpm = bar.addMenu("&Help")
    m.menus["help"] = helpm
    _action(win, m, "shortcuts", "&Keyboard shortcuts", win.show_shortcuts, helpm, "Ctrl+/")
    _action(win, m, "numbers", "What the &numbers mean", win.show_numbers_help, helpm, "F1")
    _action(win, m, "about", "&About kvmon", win.show_about, helpm)

    tray = QtWidgets.QMenu(win)
    show = QtGui.QAction("Show kvmon", tray)
    show.triggered.connect(lambda _c=False: win.raise_window())
    tray.addAction(show)
    tray.addAction(m.actions["pause"])
    tray.addAction(win.record_action)
    tray.addAction(m.actions["compact"])
    tray.addSeparator()
    tray.addAction(m.actions["quit"])
    m.tray_menu = tray
    if win.tray is not None:
        win.tray.set_menu(tray)
    return m
