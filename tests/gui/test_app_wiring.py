"""App wiring: demo fallback with its on-screen notice, the screenshot command, slower polling while hidden."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6 import QtGui
from repo_paths import ROOT
from synthetic import SyntheticMonitor

from kvmon.app.demo import NO_SERVER_BANNER
from kvmon.app.servers import choose_servers
from kvmon.app.session import Session
from kvmon.gui.app import build_window
from kvmon.gui.controller import HIDDEN_INTERVAL_S
from kvmon.gui.panels.bars import Bar, BarsWidget, Segment
from kvmon.gui.settings import Settings


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_server_found_starts_the_demo_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("kvmon.sim.server")
    import kvmon.app.servers

    real = kvmon.app.servers.find_servers
    nobody = tuple(f"http://127.0.0.1:{_free_port()}" for _ in range(2))
    monkeypatch.setattr(kvmon.app.servers, "find_servers", lambda **kw: real(candidates=nobody, **kw))
    args = argparse.Namespace(url=None, demo=None, timeout=1.0, log=None, record=None)
    session = choose_servers(args, None).first.session
    try:
        assert session.banner == NO_SERVER_BANNER and session.sim is not None
        assert ("Demo: no llama-server, router, llama-swap, Ollama, vLLM or LM Studio found on this machine"
                in session.banner)
        assert session.url and session.url.startswith("http://127.0.0.1:")
    finally:
        session.close()


def test_explicit_url_is_used_without_probing() -> None:
    args = argparse.Namespace(url="http://127.0.0.1:9", demo=None, timeout=1.0, log=None, record=None)
    session = choose_servers(args, "k").first.session
    assert session.url == "http://127.0.0.1:9" and session.sim is None and session.banner is None


def test_poller_slows_down_while_minimised(qtbot, tmp_path: Path) -> None:
    win, poller = build_window(Session(SyntheticMonitor), Settings(str(tmp_path / "s.ini")), 0.2, tray=False)
    qtbot.addWidget(win)
    win.show()
    poller.start()
    try:
        qtbot.waitUntil(lambda: win.last is not None, timeout=5000)
        win.showMinimized()
        qtbot.waitUntil(lambda: poller.worker.interval_s == HIDDEN_INTERVAL_S, timeout=3000)
        win.showNormal()
        qtbot.waitUntil(lambda: poller.worker.interval_s == 0.2, timeout=3000)
    finally:
        poller.stop()


def test_bars_repaint_only_for_visible_changes(qtbot) -> None:
    w = BarsWidget()
    qtbot.addWidget(w)
    w.resize(400, 60)
    bar = Bar("GPU 0", 1000.0, (Segment("weights", 500.0, "w"), Segment("free", 500.0, "f")), "note")
    assert w.set_bars((bar,)) is True
    tiny = Bar("GPU 0", 1000.0, (Segment("weights", 500.2, "w2"), Segment("free", 499.8, "f")), "note")
    assert w.set_bars((tiny,)) is False
    assert w.bars[0].segments[0].tip == "w2"  # tooltips stay current even without a repaint
    moved = Bar("GPU 0", 1000.0, (Segment("weights", 520.0, "w"), Segment("free", 480.0, "f")), "note")
    assert w.set_bars((moved,)) is True


@pytest.mark.slow
def test_screenshot_command_writes_a_non_blank_png(tmp_path: Path) -> None:
    pytest.importorskip("kvmon.sim.server")
    out = tmp_path / "shot.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-m", "kvmon", "screenshot", "--demo", "seed-3090x2", "--after", "3",
                        "-o", str(out)], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-1500:]
    img = QtGui.QImage(str(out))
    assert (img.width(), img.height()) == (1280, 800)
    gray = img.convertToFormat(QtGui.QImage.Format.Format_Grayscale8)
    arr = np.frombuffer(gray.constBits(), dtype=np.uint8, count=gray.bytesPerLine() * gray.height())
    assert arr.reshape(gray.height(), gray.bytesPerLine())[:, : gray.width()].std() > 10


def test_screenshot_unknown_panel_is_a_clean_error(tmp_path: Path) -> None:
    from kvmon.cli.screenshot import run

    args = argparse.Namespace(panel="nope", output=str(tmp_path / "x.png"))
    assert run(args) == 2


def test_changing_the_url_in_settings_switches_the_poller(qtbot, tmp_path: Path) -> None:
    from kvmon.core.snapshot import ConnectionStatus

    settings = Settings(str(tmp_path / "s.ini"))
    win, poller = build_window(Session(SyntheticMonitor, url="http://127.0.0.1:1"), settings, 0.2, tray=False)
    qtbot.addWidget(win)
    win.show()
    poller.start()
    try:
        qtbot.waitUntil(lambda: win.last is not None and win.last.backend == "llama-server", timeout=5000)
        settings.url = f"http://127.0.0.1:{_free_port()}"
        win.settings_changed.emit()
        qtbot.waitUntil(lambda: win.last is not None and win.last.connection.status is ConnectionStatus.UNREACHABLE,
                        timeout=10000)
        assert win.last.backend is None and len(win.history) >= 1
    finally:
        poller.stop()


def test_replay_of_a_missing_or_empty_file_is_a_clean_error(tmp_path: Path, capsys) -> None:
    from kvmon.gui.app import run_replay

    assert run_replay(argparse.Namespace(file=str(tmp_path / "missing.jsonl"))) == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert run_replay(argparse.Namespace(file=str(empty))) == 2
    assert "kvmon:" in capsys.readouterr().err


FIRST_FRAME = r"""
import importlib.util, sys
from PySide6 import QtCore, QtWidgets
app = QtWidgets.QApplication(["kvmon"])
from kvmon.gui import theme
theme.apply(app)
from kvmon.gui.main_window import MainWindow
from kvmon.gui.settings import Settings
win = MainWindow(Settings(sys.argv[1]), tray=False)
win.resize(1280, 800)
win.show()
np = sys.modules.get("numpy")
print("pyqtgraph before paint:", "pyqtgraph" in sys.modules)
print("numpy loaded before paint:", np is not None and type(np) is not importlib.util._LazyModule)
deadline = QtCore.QDeadlineTimer(20000)
while win._speed_context is None and not deadline.hasExpired():
    app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 50)
print("plots made after paint:", win._speed_context is not None and win._speed_time is not None)
"""


def test_the_first_frame_needs_neither_the_plotting_library_nor_numpy(tmp_path: Path) -> None:
    """The window paints before pyqtgraph and numpy load (start time); the plots are made right after."""
    r = subprocess.run([sys.executable, "-c", FIRST_FRAME, str(tmp_path / "s.ini")], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert r.returncode == 0, r.stderr
    assert "pyqtgraph before paint: False" in r.stdout, r.stdout
    assert "numpy loaded before paint: False" in r.stdout, r.stdout
    assert "plots made after paint: True" in r.stdout, r.stdout


def test_the_window_is_painted_before_its_servers_are_opened(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kvmon URL``: the window is on screen saying "starting" before the servers are looked for and opened (that
    and the analysis's modules take longer than the window); then it is the server's window, polling it."""
    from PySide6 import QtCore, QtWidgets

    import kvmon.app.servers
    import kvmon.gui.app
    from kvmon.core.snapshot import ConnectionStatus
    from kvmon.gui import theme
    from kvmon.gui.app import Dashboard
    from kvmon.gui.main_window import MainWindow

    painted: list[MainWindow] = []

    class PaintWatch(QtCore.QObject):
        def eventFilter(self, obj: QtCore.QObject, ev: QtCore.QEvent) -> bool:
            if isinstance(obj, MainWindow) and ev.type() == QtCore.QEvent.Type.Paint:
                painted.append(obj)
            return False

    watch = PaintWatch()
    app = QtWidgets.QApplication.instance()
    app.installEventFilter(watch)
    seen: dict[str, object] = {}
    real = kvmon.app.servers.choose_servers

    def choose(args: argparse.Namespace, api_key: str | None) -> object:
        win = painted[0] if painted else None
        seen["at choose"] = (win is not None and win.isVisible(), win.status.connection.text() if win else None,
                             win.alerts.text() if win else None)
        return real(args, api_key)

    monkeypatch.setattr(kvmon.app.servers, "choose_servers", choose)
    monkeypatch.setattr(kvmon.gui.app, "START_FALLBACK_MS", 3_600_000)  # only the first frame opens them here
    url = f"http://127.0.0.1:{_free_port()}"
    args = argparse.Namespace(url=url, demo=None, timeout=1.0, log=None, record=None, interval=0.2, api_key=None,
                              devices=None, bandwidth=None)
    failures: list[int] = []
    dash = Dashboard(args, failures.append)
    qtbot.addWidget(dash.win)
    try:
        assert dash.win.isVisible() and dash.controller is None  # shown, its servers not yet opened
        was_dark = theme.is_dark()
        dash.win.apply_scheme(not was_dark)  # a theme switch rebuilds the panels: they still say "starting"
        assert dash.win.alerts.text() == "Starting…" and dash.win.status.connection.text() == "● starting"
        dash.win.apply_scheme(was_dark)
        qtbot.waitUntil(lambda: dash.win.last is not None, timeout=10000)
    finally:
        dash.close()
        app.removeEventFilter(watch)
    assert not failures
    assert seen["at choose"] == (True, "● starting", "Starting…")
    w = dash.win
    assert len(w.views) == 1 and w.current == next(iter(w.views)) and url in w.current
    assert w.last.connection.status is ConnectionStatus.UNREACHABLE and "starting" not in w.status.connection.text()


def test_a_dashboard_started_compact_opens_its_servers_on_the_compact_views_first_frame(
        qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kvmon URL --compact``: the full window is never shown, and the compact view's first frame opens the
    servers (no timer stands in for it)."""
    import kvmon.gui.app
    from kvmon.gui.app import Dashboard

    monkeypatch.setattr(kvmon.gui.app, "START_FALLBACK_MS", 3_600_000)
    args = argparse.Namespace(url=f"http://127.0.0.1:{_free_port()}", demo=None, timeout=1.0, log=None, record=None,
                              interval=0.2, api_key=None, devices=None, bandwidth=None, compact=True)
    failures: list[int] = []
    dash = Dashboard(args, failures.append)
    qtbot.addWidget(dash.win)
    try:
        assert dash.win.compact is not None and dash.win.compact.isVisible() and not dash.win.isVisible()
        qtbot.waitUntil(lambda: dash.win.last is not None, timeout=10000)
    finally:
        dash.close()
    assert not failures and dash.controller is not None and not dash.win.isVisible()


@pytest.mark.parametrize("where", ["/dev/full", "no/such/folder/rec.jsonl", "notes.txt"],
                         ids=["full-disk", "no-folder", "not-a-recording"])
def test_a_recording_that_cannot_start_is_said_and_the_dashboard_runs(qtbot, tmp_path: Path, capsys,
                                                                       where: str) -> None:
    """``--record`` to a full disk, into a folder that does not exist or onto a file that is not a recording: one
    line on stderr and the status bar name the file, the alert says it on every poll, and the monitoring goes on
    (it used to end the dashboard with status 2)."""
    from kvmon.gui.app import Dashboard

    if where == "/dev/full" and not Path(where).exists():
        pytest.skip("needs /dev/full (Linux)")
    path = where if where.startswith("/") else str(tmp_path / where)
    if where == "notes.txt":
        Path(path).write_text("my notes\n", encoding="utf-8")
    args = argparse.Namespace(url=f"http://127.0.0.1:{_free_port()}", demo=None, timeout=1.0, log=None,
                              record=path, interval=0.2, api_key=None, devices=None, bandwidth=None)
    failures: list[int] = []
    dash = Dashboard(args, failures.append)
    qtbot.addWidget(dash.win)
    name = Path(path).name
    try:
        qtbot.waitUntil(lambda: dash.win.last is not None, timeout=10000)
        shown = dash.win.statusBar().currentMessage()
        codes = {a.code: a.message for a in dash.win.last.alerts}
    finally:
        dash.close()
    assert not failures and dash.controller is not None
    err = capsys.readouterr().err
    assert name in err and len([line for line in err.splitlines() if name in line]) == 1, err
    assert name in shown
    assert "recording_failed" in codes and name in codes["recording_failed"], codes
    if where == "notes.txt":
        assert Path(path).read_text(encoding="utf-8") == "my notes\n"  # not a byte added
