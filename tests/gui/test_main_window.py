"""Every panel of ``kvmon/gui/panels/`` is wired into the window: one module each, built by ``MainWindow``, and either
switched by View ▸ Panels (``kvmon.gui.settings.PANELS``) or named here as always shown. A panel added with a step
left out fails here, naming the step."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtWidgets
from synthetic import SyntheticMonitor

import kvmon.gui.panels
from kvmon.gui.main_window import MainWindow
from kvmon.gui.settings import PANELS, Settings

# the panels no menu switches off, and why
ALWAYS_SHOWN = {
    "header": "the headline: how the session stands",
    "models": "a router's or llama-swap's models (empty and hidden for one model)",
    "speed_context": "the hero plot, the window's reason to be",
    "status": "the status bar: the connection and the poll's age",
}


def _panel_classes() -> dict[str, type]:
    """Each ``…Panel`` class defined in a module of kvmon.gui.panels, by its module's name."""
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(kvmon.gui.panels.__path__):
        module = importlib.import_module(f"kvmon.gui.panels.{info.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if name.endswith("Panel") and cls.__module__ == module.__name__:
                assert info.name not in found, f"kvmon/gui/panels/{info.name}.py holds two panels: one module each"
                found[info.name] = cls
    return found


@pytest.fixture
def win(qtbot, tmp_path: Path) -> MainWindow:
    w = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    w.on_snapshot(SyntheticMonitor().snapshot(3))
    w.speed_context  # noqa: B018  # the plots are made after the first frame: now
    return w


def _panels_of(win: MainWindow) -> dict[str, QtWidgets.QWidget]:
    """The window's panels by attribute name: every attribute holding an instance of a kvmon.gui.panels class."""
    classes = tuple(_panel_classes().values())
    # the two plots are made after the first frame, kept as ``_speed_context`` and shown as ``speed_context``
    return {name.removeprefix("_"): value for name, value in vars(win).items() if isinstance(value, classes)}


def test_the_window_builds_every_panel_module(win: MainWindow) -> None:
    built = {type(p) for p in _panels_of(win).values()}
    unused = [f"kvmon/gui/panels/{m}.py ({c.__name__})" for m, c in _panel_classes().items() if c not in built]
    assert not unused, f"panels MainWindow._build_panels does not make: {', '.join(unused)}"


def test_every_panel_is_in_view_panels_or_always_shown(win: MainWindow) -> None:
    missing = sorted(set(_panels_of(win)) - set(PANELS) - set(ALWAYS_SHOWN))
    assert not missing, (f"panels View ▸ Panels does not list: {', '.join(missing)} (add each to PANELS in "
                         "kvmon/gui/settings.py and to _apply_panels in kvmon/gui/window_actions.py)")


def test_view_panels_hides_and_shows_each_panel(win: MainWindow) -> None:
    panels = _panels_of(win)
    for name in PANELS:
        if name == "toolbar":
            continue
        assert name in panels, f"View ▸ Panels lists {name!r}, which is no panel of the window"
        widget = panels[name]
        assert widget.isVisibleTo(win), name
        win.menus.actions[f"panel:{name}"].trigger()
        assert not widget.isVisibleTo(win), f"View ▸ Panels ▸ {PANELS[name]} did not hide it (see _apply_panels)"
        win.menus.actions[f"panel:{name}"].trigger()
        assert widget.isVisibleTo(win), f"View ▸ Panels ▸ {PANELS[name]} did not show it again"
