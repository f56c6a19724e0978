"""The window's layout at every story point of every scenario, at 1280×800, 1024×640 and 800×600, light and dark.

At each point the real dashboard (the demo session, kvmon's real sources and analysis, a real Qt window offscreen) is
polled, and every text widget of every panel is walked: none overlaps another, none is cut by its own size or by a
panel it lies in, and none is shortened with "…" while space sits free beside it; the menus and the toolbar beside
them are whole. Two polls later in the same state (a steady story: the same connection, activity and alerts), no
panel has moved or changed size. The compact view is checked the same way at its first size, its smallest and a
larger one.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("kvmon.sim.server", reason="the simulator is not available")

from PySide6 import QtCore, QtWidgets
from stories import STORIES

from kvmon.core.snapshot import Snapshot
from kvmon.gui.text import FitLabel, text_label

SIZES = ((1280, 800), (1024, 640), (800, 600))
COMPACT_SIZES = ((380, 150), (340, 140), (560, 200))  # its first size, its smallest, one made larger
SCHEMES = ("light", "dark")
STEP_S = 2.0  # simulated seconds between two polls of a story point
POLL_WAIT_S = 30.0


def story_points(scenario: str) -> list[float]:
    """The simulated seconds at which the scenario's story says what a user must see."""
    return sorted({m.at_s for w in STORIES[scenario].watches for m in w.moments})


# --- what the checks look at -------------------------------------------------------------------------------------
def _text(w: QtWidgets.QWidget) -> str:
    if isinstance(w, QtWidgets.QLabel | QtWidgets.QAbstractButton):
        return w.text()
    return ""


def text_widgets(root: QtWidgets.QWidget) -> list[QtWidgets.QWidget]:
    """Every widget under ``root`` that shows text now."""
    return [w for w in root.findChildren(QtWidgets.QWidget)
            if isinstance(w, QtWidgets.QLabel | QtWidgets.QAbstractButton) and w.isVisibleTo(root) and _text(w).strip()]


def _name(w: QtWidgets.QWidget) -> str:
    text = " ".join(_text(w).split())
    return f"{type(w).__name__} {text[:70]!r}"


def _in(root: QtWidgets.QWidget, w: QtWidgets.QWidget) -> QtCore.QRect:
    """``w``'s rectangle in ``root``'s coordinates."""
    return QtCore.QRect(w.mapTo(root, QtCore.QPoint(0, 0)), w.size())


def _visible(root: QtWidgets.QWidget, w: QtWidgets.QWidget) -> QtCore.QRect:
    """The part of ``w`` its ancestors (up to ``root``) leave in view."""
    rect = _in(root, w)
    p = w.parentWidget()
    while p is not None:
        rect = rect.intersected(_in(root, p))
        if p is root:
            break
        p = p.parentWidget()
    return rect


def _needs(w: QtWidgets.QWidget) -> QtCore.QSize:
    """The size the widget's whole text needs at its present width."""
    if isinstance(w, QtWidgets.QLabel):
        if w.wordWrap():
            return QtCore.QSize(w.width(), w.heightForWidth(w.width()))
    return w.sizeHint()


def _free_beside(w: QtWidgets.QWidget) -> int:
    """Pixels left empty in ``w``'s row: the stretches of the horizontal layout it lies in."""
    parent = w.parentWidget()
    lay = parent.layout() if parent is not None else None
    stack = [lay] if lay is not None else []
    while stack:
        layout = stack.pop()
        items = [layout.itemAt(i) for i in range(layout.count())]
        if any(i.widget() is w for i in items):
            if isinstance(layout, QtWidgets.QBoxLayout) and layout.direction() in (
                    QtWidgets.QBoxLayout.Direction.LeftToRight, QtWidgets.QBoxLayout.Direction.RightToLeft):
                return sum(i.geometry().width() for i in items if i.spacerItem() is not None)
            return 0
        stack += [i.layout() for i in items if i.layout() is not None]
    return 0


def text_problems(root: QtWidgets.QWidget) -> list[str]:
    """What ``root`` shows cut, shortened while it has room, or overlapping, one line each (empty when all reads)."""
    found: list[str] = []
    shown = text_widgets(root)
    seen: list[tuple[QtWidgets.QWidget, QtCore.QRect]] = []
    for w in shown:
        need, full, vis = _needs(w), _in(root, w), _visible(root, w)
        if getattr(w, "elided", False):  # a label that ends in "…" by design when it has no room
            room = _free_beside(w)
            if w.text_width() <= w.contentsRect().width() + room:
                found.append(f"{_name(w)} ends in '…' with {room} px free beside it")
        elif need.width() > w.width() + 1 or need.height() > w.height() + 1:
            found.append(f"{_name(w)} is {w.width()}×{w.height()} px, its text needs {need.width()}×{need.height()}")
        if vis != full:
            found.append(f"{_name(w)} at {full.getRect()} is cut to {vis.getRect()} by a panel it lies in")
        for other, other_vis in seen:
            if vis.intersects(other_vis) and not w.isAncestorOf(other) and not other.isAncestorOf(w):
                found.append(f"{_name(w)} overlaps {_name(other)}")
        seen.append((w, vis))
    for box in root.findChildren(QtWidgets.QGroupBox):
        if box.isVisibleTo(root) and box.title():
            opt = QtWidgets.QStyleOptionGroupBox()
            box.initStyleOption(opt)
            title = box.style().subControlRect(QtWidgets.QStyle.ComplexControl.CC_GroupBox, opt,
                                               QtWidgets.QStyle.SubControl.SC_GroupBoxLabel, box)
            if not box.rect().contains(title) or _visible(root, box).height() < box.height():
                found.append(f"group box {box.title()!r} is cut")
    for bar in root.findChildren(QtWidgets.QTabBar):
        if bar.isVisibleTo(root):
            for i in range(bar.count()):
                if bar.tabSizeHint(i).width() > bar.tabRect(i).width() + 1:
                    found.append(f"tab {bar.tabText(i)!r} is {bar.tabRect(i).width()} px, needs "
                                 f"{bar.tabSizeHint(i).width()}")
    if isinstance(root, QtWidgets.QMainWindow) and root.menuBar().isVisible():
        menus = root.menuBar()
        corner = menus.cornerWidget(QtCore.Qt.Corner.TopRightCorner)
        for act in menus.actions():
            geo = menus.actionGeometry(act)
            if geo.isEmpty() or not menus.rect().contains(geo):
                found.append(f"menu {act.text()!r} is not shown whole")
            elif corner is not None and corner.isVisible() and geo.intersects(corner.geometry()):
                found.append(f"menu {act.text()!r} is under the toolbar")
    return found


def panel_geometry(win: QtWidgets.QWidget) -> dict[str, tuple[int, int, int, int]]:
    """Where each panel of the window is, in the window's coordinates."""
    names = ("server_tabs", "header", "models", "tabs", "_time_slot", "memory", "bandwidth", "_replies_box", "alerts",
             "status")
    out = {}
    for name in names:
        w = getattr(win, name, None)
        if isinstance(w, QtWidgets.QWidget) and w.isVisibleTo(win):
            out[name] = _in(win, w).getRect()
    return out


def steady(a: Snapshot, b: Snapshot) -> bool:
    """The same state of the story: connection, activity, alerts and (a router's) models alike."""
    def state(s: Snapshot) -> tuple[object, ...]:
        models = tuple((m.name, m.status) for m in s.serving.models) if s.serving else ()
        return (s.connection.status, s.activity, tuple(sorted(x.code for x in s.alerts)), models,
                s.serving.followed if s.serving else None, len(s.gpus), s.host.in_ceiling)

    return state(a) == state(b)


# --- a story point in the real window ------------------------------------------------------------------------------
@dataclass
class StoryWindow:
    """The dashboard on a scenario joined at a point of its story; ``poll()`` moves simulated time on and polls."""

    win: QtWidgets.QMainWindow
    poll: Callable[[], Snapshot]


def _pump(app: QtWidgets.QApplication, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + POLL_WAIT_S
    while not done():
        app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 20)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no snapshot within {POLL_WAIT_S:.0f} s ({what})")
        time.sleep(0.001)


def settle(app: QtWidgets.QApplication) -> None:
    """Let the posted layout requests and resizes run."""
    for _ in range(3):
        app.processEvents()


@contextmanager
def story_window(scenario: str, at_s: float) -> Iterator[StoryWindow]:
    from kvmon.app.demo import demo_session
    from kvmon.gui.app import build_window, ensure_app
    from kvmon.gui.settings import Settings

    app = ensure_app(["kvmon"])
    session = demo_session(scenario, f"Demo: simulated {scenario}", start_at_s=at_s, stepped=True)
    scratch = tempfile.TemporaryDirectory(prefix="kvmon-layout-")
    win = poller = None
    try:
        sim = session.sim
        settings = Settings(os.path.join(scratch.name, "s.ini"))
        settings.scheme = "light"
        win, poller = build_window(session, settings, 3600.0, tray=False)
        win.resize(*SIZES[0])
        win.set_window_range("session")
        win.show()
        got: list[Snapshot] = []
        poller.snapshot.connect(got.append)
        session.settle()
        poller.start()
        _pump(app, lambda: len(got) > 0, f"{scenario} at {at_s:.0f} s")

        def poll() -> Snapshot:
            n = len(got)
            sim.step(STEP_S)
            session.settle()
            QtCore.QMetaObject.invokeMethod(poller.worker, "poll_once", QtCore.Qt.ConnectionType.QueuedConnection)
            _pump(app, lambda: len(got) > n, f"{scenario} at {sim.clock.now():.0f} s")
            settle(app)
            return got[-1]

        poll()  # a second poll: rates and speeds are known from here on
        yield StoryWindow(win, poll)
    finally:
        if poller is not None:
            poller.stop()
        if win is not None:
            win.close()
            win.deleteLater()
        session.close()
        app.processEvents()
        scratch.cleanup()


def check_story_point(scenario: str, at_s: float) -> list[str]:
    """Every size and scheme at one story point: what reads badly, one line each."""
    problems: list[str] = []
    app = QtWidgets.QApplication.instance()
    with story_window(scenario, at_s) as story:
        win = story.win
        last = story.poll()
        for scheme in SCHEMES:
            win.set_scheme(scheme)
            for w, h in SIZES:
                where = f"{scenario} at {at_s:.0f} s, {w}×{h} {scheme}"
                win.resize(w, h)
                settle(app)
                if (win.width(), win.height()) != (w, h):
                    problems.append(f"{where}: the window is {win.width()}×{win.height()}")
                    continue
                before = panel_geometry(win)
                problems += [f"{where}: {p}" for p in text_problems(win)]
                now = story.poll()
                if steady(last, now):
                    after = panel_geometry(win)
                    problems += [f"{where}: {name} moved from {before[name]} to {after.get(name)} in a steady poll"
                                 for name in before if after.get(name) != before[name]]
                last = now
                win.show_whatif()  # the calculator's tab: whole too
                settle(app)
                problems += [f"{where}, what-if: {p}" for p in text_problems(win)]
                win.tabs.setCurrentIndex(0)
            problems += check_compact(story, f"{scenario} at {at_s:.0f} s, {scheme}")
    return problems


def compact_geometry(compact: QtWidgets.QWidget) -> dict[str, tuple[int, int, int, int]]:
    """Where the compact view's parts are: the verdict, the sparkline, the alert line."""
    return {name: _in(compact, getattr(compact, name)).getRect() for name in ("verdict", "spark", "alert")}


def check_compact(story: StoryWindow, where: str) -> list[str]:
    """The compact view at its sizes: its texts whole and apart, and nothing in it moving between steady polls."""
    problems: list[str] = []
    app = QtWidgets.QApplication.instance()
    win = story.win
    compact = win.show_compact()
    last = story.poll()
    for w, h in COMPACT_SIZES:
        at = f"{where}, compact {w}×{h}"
        compact.resize(w, h)
        settle(app)
        if (compact.width(), compact.height()) != (w, h):
            problems.append(f"{at}: the compact view is {compact.width()}×{compact.height()}")
            continue
        problems += [f"{at}: {p}" for p in text_problems(compact)]
        spark = _in(compact, compact.spark)
        if spark.width() < 80 or spark.height() < 40:
            problems.append(f"{at}: the sparkline is {spark.width()}×{spark.height()} px")
        before = compact_geometry(compact)
        now = story.poll()
        if steady(last, now):
            after = compact_geometry(compact)
            problems += [f"{at}: the {k} moved in a steady poll" for k, v in before.items() if after[k] != v]
        last = now
    win.show_full()
    settle(app)
    return problems


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(STORIES))
def test_every_story_point_reads_at_three_sizes_light_and_dark(qapp, scenario: str) -> None:
    problems = [p for at_s in story_points(scenario) for p in check_story_point(scenario, at_s)]
    assert not problems, "\n".join(problems)


# --- the checks themselves ----------------------------------------------------------------------------------------
def test_the_check_finds_a_label_cut_off_and_two_overlapping(qtbot) -> None:
    box = QtWidgets.QWidget()
    qtbot.addWidget(box)
    box.resize(300, 100)
    whole = text_label("a line that fits")
    whole.setParent(box)
    whole.setGeometry(0, 0, 200, 20)
    box.show()
    qtbot.waitExposed(box)
    assert text_problems(box) == []
    cut = text_label("a line far longer than the forty pixels it is given")
    cut.setParent(box)
    cut.setGeometry(0, 40, 40, 20)
    cut.show()
    assert any("needs" in p and "far longer" in p for p in text_problems(box))
    cut.setGeometry(0, 10, 290, 20)  # whole now, but over the first line
    assert any("overlaps" in p for p in text_problems(box))
    cut.setGeometry(250, 40, 290, 20)  # past the box's right edge
    assert any("cut to" in p for p in text_problems(box))


def test_the_check_finds_a_shortened_label_beside_free_room(qtbot) -> None:
    box = QtWidgets.QWidget()
    qtbot.addWidget(box)
    row = QtWidgets.QHBoxLayout(box)
    label = FitLabel("a name that would fit in the row it is in, were it given the room")
    label.setMaximumWidth(80)
    row.addWidget(label)
    row.addStretch(1)
    box.resize(700, 40)
    box.show()
    qtbot.waitExposed(box)
    assert any("free beside it" in p for p in text_problems(box))


def test_a_moved_panel_is_seen(qtbot, tmp_path) -> None:
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings

    win = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    qtbot.addWidget(win)
    win.resize(1024, 640)
    win.show()
    qtbot.waitExposed(win)
    before = panel_geometry(win)
    win.models.show()  # a row appears above the plots: they move down
    QtWidgets.QApplication.processEvents()
    after = panel_geometry(win)
    assert before["tabs"] != after["tabs"]
