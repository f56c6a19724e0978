"""``kvmon [URL]``, ``kvmon --demo [SCENARIO]`` and ``kvmon replay FILE``: the app, the pollers and the window.

Which servers (with no URL: every llama-server, router, llama-swap and Ollama found on this machine, each in its own
tab; none: the built-in simulator, and the window says so) and how they are read is the business of
``kvmon.app.servers`` and ``kvmon.app``; this module wires one poller per server to the window.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6 import QtCore, QtWidgets

from kvmon.app.endings import STOP_SIGNALS, catchable, stop_on_signals
from kvmon.gui import theme

if TYPE_CHECKING:
    from kvmon.app.servers import ServerSet
    from kvmon.app.session import Session
    from kvmon.gui.controller import Controller
    from kvmon.gui.poller import Poller

MAIN_KEY = "main"  # the one server of a window built on a single session


def ensure_app(argv: list[str] | None = None) -> QtWidgets.QApplication:
    """The QApplication (created once), themed to the system's dark or light scheme."""
    app = QtWidgets.QApplication.instance()
    if app is None:
        app = QtWidgets.QApplication(argv or ["kvmon"])
        app.setApplicationName("kvmon")
        app.setOrganizationName("kvmon")
        app.setDesktopFileName("kvmon")  # the window's app id on Wayland: its icon comes from kvmon.desktop
        _set_window_icon(app)
        theme.apply(app)
    return app  # type: ignore[return-value]


def _set_window_icon(app: QtWidgets.QApplication) -> None:
    """Every window's icon is kvmon's packaged SVG (loaded when first drawn); none when the installation lacks it."""
    from PySide6.QtGui import QIcon

    from kvmon.resources import icon_path

    icon = icon_path()
    if icon is not None:
        app.setWindowIcon(QIcon(str(icon)))


QUIT_SIGNALS = (*STOP_SIGNALS, "SIGHUP")  # and the window's terminal closed


def quit_on_signals(app: QtWidgets.QApplication) -> Callable[[], None]:
    """End the app on ``QUIT_SIGNALS`` as closing its windows does (settings kept, the event loop ends, then the
    caller stops the pollers and closes the recording); returns what puts the previous handlers back.

    Python runs a signal handler only between its own bytecodes, and Qt's loop may wait in C for a long time: the
    signal module writes a byte to a socket that a QSocketNotifier watches, so the loop wakes and the handler runs.
    """
    import signal
    import socket

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    try:
        old_fd = signal.set_wakeup_fd(writer.fileno())
    except (ValueError, OSError):
        reader.close()
        writer.close()
        return lambda: None
    notifier = QtCore.QSocketNotifier(reader.fileno(), QtCore.QSocketNotifier.Type.Read, app)
    notifier.activated.connect(lambda *_: _drain(reader))  # running Python here lets the handler run

    def on_signal(*_: object) -> None:
        QtCore.QTimer.singleShot(0, lambda: (app.closeAllWindows(), app.quit()))

    old = {sig: signal.signal(sig, on_signal) for sig in catchable(QUIT_SIGNALS)}

    def restore() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_fd)
        notifier.setEnabled(False)
        reader.close()
        writer.close()

    return restore


def _drain(sock: Any) -> None:
    try:
        while sock.recv(64):
            pass
    except OSError:
        pass


def watch_servers(win: Any, servers: ServerSet, settings: Any, interval_s: float, *, timeout_s: float = 3.0,
                  api_key: str | None = None, cli_bandwidths: list[str] | None = None) -> Controller:
    """Put ``servers`` in ``win`` (its first view becomes the first server's, a tab for each other one) and return
    the controller whose pollers feed it (not yet started)."""
    from kvmon.gui.controller import Controller

    first = servers.first
    win.name_first_server(first.key, first.label, first.session.banner)
    for w in list(servers)[1:]:
        win.add_server(w.key, w.label, banner=w.session.banner)
    return Controller(servers, win, settings, interval_s, timeout_s=timeout_s, api_key=api_key,
                      cli_bandwidths=cli_bandwidths)


def build_servers_window(servers: ServerSet, settings: Any, interval_s: float, *, tray: bool = True,
                         timeout_s: float = 3.0, api_key: str | None = None,
                         cli_bandwidths: list[str] | None = None) -> tuple[Any, Controller]:
    """The window with a tab per server (when several) and a controller whose pollers feed it (not yet started)."""
    from kvmon.gui.main_window import MainWindow

    win = MainWindow(settings, tray=tray)  # its first view is named by watch_servers, as at start-up
    return win, watch_servers(win, servers, settings, interval_s, timeout_s=timeout_s, api_key=api_key,
                              cli_bandwidths=cli_bandwidths)


def build_window(session: Session, settings: Any, interval_s: float, *, tray: bool = True,
                 timeout_s: float = 3.0, cli_bandwidths: list[str] | None = None) -> tuple[Any, Poller]:
    """The window on one session and its poller (not yet started; ``poller.start()``)."""
    from kvmon.app.servers import ServerSet, WatchedServer

    servers = ServerSet([WatchedServer(MAIN_KEY, "", session)])
    win, ctl = build_servers_window(servers, settings, interval_s, tray=tray, timeout_s=timeout_s,
                                    cli_bandwidths=cli_bandwidths)
    win.controller = ctl  # kept with the window
    return win, ctl.pollers[MAIN_KEY]


# the first frame on screen opens the servers (or the window minimised before it: none will come); a window that no
# screen ever shows (an unmapped one) has them opened after this long all the same
START_FALLBACK_MS = 5000


class Dashboard:
    """The dashboard's window, shown at once ("starting"), and its servers, opened once it is painted: looked for
    (or the demo started), put in the window and polled. Finding them, the demo's simulator and the analysis's
    modules take longer than the window itself. ``failed(status)`` when they cannot be opened."""

    def __init__(self, args: argparse.Namespace, failed: Callable[[int], None]) -> None:
        from kvmon.gui.main_window import MainWindow
        from kvmon.gui.settings import Settings

        self.args, self._failed = args, failed
        self.settings = settings = Settings()
        self.api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or settings.api_key
        self.interval_s = float(getattr(args, "interval", None) or settings.interval_s)
        if getattr(args, "devices", None) is None and settings.devices_url:
            args.devices = settings.devices_url
        self.win = MainWindow(settings, key=MAIN_KEY)
        self.win.show_starting()
        self.servers: ServerSet | None = None
        self.controller: Controller | None = None
        self._started = False
        self.win.first_painted.connect(self.start)
        QtCore.QTimer.singleShot(START_FALLBACK_MS, self.start)
        if getattr(args, "compact", False):  # kvmon --compact: the small window alone (Ctrl+M: the full one)
            self.win.show_compact()
        else:
            self.win.show()

    def start(self) -> None:
        """Open the servers and start polling them (once)."""
        if self._started:
            return
        self._started = True
        from kvmon.app.servers import choose_servers

        args, settings, win = self.args, self.settings, self.win
        try:
            servers = self.servers = choose_servers(args, self.api_key)
        except Exception as exc:  # e.g. a --devices URL that is no URL
            print(f"kvmon: {exc}", file=sys.stderr)
            self._failed(2)
            return
        ctl = self.controller = watch_servers(
            win, servers, settings, self.interval_s, api_key=self.api_key,
            timeout_s=float(getattr(args, "timeout", None) or 3.0), cli_bandwidths=getattr(args, "bandwidth", None))
        notes = list(settings.notices)  # e.g. a key file others could read, made the user's alone
        if getattr(args, "record", None):
            problem = servers.first.session.recorder.problem  # the file could not be recorded to: the alert says so
            if problem:
                notes.append(f"Not recording: {problem}; the monitoring goes on")
            else:
                win.set_recording(args.record)
        for note in notes:
            print(f"kvmon: {note}", file=sys.stderr)
            win.statusBar().showMessage(note, 20000)
        ctl.start()

    def close(self) -> None:
        """Stop the pollers (each ends its poll within the timeout and closes its monitor) and close the servers
        (and the recording: every line written is whole)."""
        if self.controller is not None:
            self.controller.stop()
        if self.servers is not None:
            self.servers.close()


def run(args: argparse.Namespace) -> int:
    """The dashboard; returns the exit status."""
    app = ensure_app(sys.argv[:1])
    restore = quit_on_signals(app)
    dash = Dashboard(args, app.exit)
    try:
        return app.exec()
    finally:
        dash.close()
        restore()


def run_replay(args: argparse.Namespace) -> int:
    """``kvmon replay FILE.jsonl [--csv OUT.csv]``: a recorded session in the same dashboard, with a time slider
    and 1× / 10× / 60× playback; with ``--csv`` write the recording as CSV and exit instead."""
    from kvmon.core.recorder import RecordingError, read_recording

    csv_out = getattr(args, "csv", None)
    if csv_out:
        try:
            rec = read_recording(args.file)
        except (OSError, RecordingError) as exc:
            print(f"kvmon: cannot replay {args.file}: {exc}", file=sys.stderr)
            return 2
        if not rec.snapshots:
            print(f"kvmon: {args.file} holds no snapshots", file=sys.stderr)
            return 2
        skipped = f" ({rec.skipped_count} unreadable lines skipped)" if rec.skipped_count else ""
        from kvmon.core.recording_csv import write_csv

        try:
            n = write_csv(rec.snapshots, csv_out)
        except OSError as exc:
            print(f"kvmon: cannot write {csv_out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"kvmon: wrote {n} rows to {csv_out}{skipped}")
        return 0
    from kvmon.gui.qtplatform import window_problem

    status = window_problem()
    if status is not None:
        return status
    app = ensure_app(sys.argv[:1])
    asked: list[bool] = []

    def stop_reading() -> None:  # the reading is Python: raising here ends it where it is
        asked.append(True)
        raise _ReadingStopped

    try:
        with stop_on_signals(stop_reading):  # SIGTERM while the file is read ends the replay cleanly
            win, _ctl = open_replay(args.file)
        if asked:  # the signal came inside Qt, which swallowed the exception: stop now
            win.close()
            return 0
    except _ReadingStopped:
        return 0
    except (OSError, RecordingError) as exc:
        print(f"kvmon: cannot replay {args.file}: {exc}", file=sys.stderr)
        return 2
    restore = quit_on_signals(app)
    win.show()
    try:
        return app.exec()
    finally:
        restore()


class _ReadingStopped(Exception):
    """SIGTERM or SIGINT came while a recording was being read, before the window's loop runs."""


def open_replay(path: str, settings: Any = None) -> tuple[Any, Any]:
    """The replay window of the recording at ``path``, filled as the file is read once; its snapshots stay in the
    file (each read again when shown), so a day's recording is its history's columns in memory, not its Snapshots.
    Raises RecordingError (not a recording, or no snapshot in it) or OSError."""
    from kvmon.app.heap import release_freed_memory
    from kvmon.core.recorder import RecordingError, read_recording
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings

    name = os.path.basename(path)
    win = MainWindow(settings if settings is not None else Settings(), banner=f"Replay of {name}", tray=False)
    batch: list[Any] = []

    def take(s: Any) -> None:  # in batches: one render at the end, few Python objects alive at once
        batch.append(s)
        if len(batch) >= 1024:
            win.load(batch)
            batch.clear()

    rec = read_recording(path, lazy=True, each=take)
    if batch:
        win.load(batch)
        batch.clear()
    release_freed_memory()  # the Snapshots read and dropped: their memory back to the system
    if not rec.snapshots:
        win.close()
        raise RecordingError(f"{name} holds no snapshots")
    if rec.skipped_count:
        win.set_banner(f"Replay of {name} ({rec.skipped_count} unreadable lines skipped)")
    return win, _replay_controls(win, rec.snapshots, name, loaded=True)


def replay_window(snapshots: Any, banner: str | None, settings: Any = None, name: str = "recording"
                  ) -> tuple[Any, Any]:
    """A dashboard window (no polling, no tray) showing ``snapshots`` with the replay bar; (window, controller).
    ``name``: the recording's file name, for the status bar."""
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings

    win = MainWindow(settings if settings is not None else Settings(), banner=banner, tray=False)
    return win, _replay_controls(win, snapshots, name)


def _replay_controls(win: Any, snapshots: Any, name: str, *, loaded: bool = False) -> Any:
    """The replay bar on ``win`` and what a replay window exports (the report card and CSV up to the playhead)."""
    from kvmon.gui import replay

    win.record_action.setEnabled(False)  # nothing new to record in a replay
    ctl = replay.attach(win, snapshots, name, loaded=loaded)
    win.report_snapshots = lambda: ctl.snapshots[: ctl.index + 1]
    win.csv_action.setEnabled(True)
    return ctl
