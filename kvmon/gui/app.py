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
from typing import Any

from PySide6 import QtCore, QtWidgets

from kvmon.app.choose import server_session
from kvmon.app.endings import STOP_SIGNALS, catchable
from kvmon.app.servers import ServerSet, WatchedServer, choose_servers
from kvmon.app.session import Session
from kvmon.gui import theme
from kvmon.gui.poller import Poller

MAIN_KEY = "main"  # the one server of a window built on a single session

HIDDEN_INTERVAL_S = 10.0  # poll interval while hidden or minimised: alerts and the tray still follow


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


def session_settings(settings: Any, cli_specs: list[str] | None) -> Any:
    """The analysis settings of the dashboard: the bandwidths from Settings, then the command line's (they win)."""
    from kvmon.core.analysis import AnalyzerSettings
    from kvmon.core.analysis.settings import with_bandwidths

    specs = [*settings.bandwidth_specs, *(cli_specs or [])]
    return with_bandwidths(AnalyzerSettings(), specs) if specs else None


class Controller(QtCore.QObject):
    """One poller per watched server, wired to the window: snapshots in, the window's requests out (another server
    shown, a model chosen, recording, settings, a server added or removed, hidden or shown)."""

    def __init__(self, servers: ServerSet, win: Any, settings: Any, interval_s: float, *,
                 timeout_s: float = 3.0, api_key: str | None = None, cli_bandwidths: list[str] | None = None
                 ) -> None:
        super().__init__(win)
        self.servers = servers
        self.win = win
        self.settings = settings
        self.timeout_s = timeout_s
        self.api_key = api_key
        self.pollers: dict[str, Poller] = {}
        self.cli_bandwidths = cli_bandwidths
        self._replaced: list[Session] = []  # sessions started since on a URL from Settings (they follow it too)
        self.interval_s = interval_s
        self.shown = True
        self.started = False
        self._server_key = (settings.url or None, settings.api_key)
        for w in servers:
            if w.session.sim is None:  # a demo's machine is the simulator's: its bandwidths come from the scenario
                w.session.settings = self._analysis_settings() or w.session.settings
            self._add_poller(w)
        win.pause_toggled.connect(lambda p: [pl.set_paused(p) for pl in self.pollers.values()])
        win.reconnect_requested.connect(lambda: self._current().reconnect())
        win.settings_changed.connect(self._on_settings)
        win.shown_changed.connect(self._on_shown)
        win.record_requested.connect(self._on_record)
        win.follow_requested.connect(lambda key, name: self.pollers[key].set_follow(name)
                                     if key in self.pollers else None)
        win.add_server_requested.connect(self.add_url)
        win.remove_server_requested.connect(self.remove)

    def _current(self) -> Poller:
        return self.pollers[self.win.current]

    def _add_poller(self, w: WatchedServer) -> Poller:
        poller = Poller(w.session.factory, self._interval())
        poller.snapshot.connect(lambda snap, k=w.key: self.win.on_server_snapshot(k, snap))
        self.pollers[w.key] = poller
        if self.started:
            poller.start()
        return poller

    def _interval(self) -> float:
        # Hidden or minimised: poll less often (alerts and the tray still follow, at most HIDDEN_INTERVAL_S late).
        return self.interval_s if self.shown else max(self.interval_s, HIDDEN_INTERVAL_S)

    def _analysis_settings(self) -> Any:
        return session_settings(self.settings, self.cli_bandwidths)

    def start(self) -> None:
        self.started = True
        for p in self.pollers.values():
            p.start()

    def stop(self) -> None:
        for p in self.pollers.values():
            p.stop()

    def add_url(self, url: str) -> str | None:
        """Watch another server: a tab, its own poller, history and recording; shown at once."""
        try:
            w = self.servers.add_url(url, api_key=self.api_key, timeout_s=self.timeout_s,
                                     settings=self._analysis_settings())
        except Exception as exc:  # a bad URL: said, nothing added
            self.win.statusBar().showMessage(f"Cannot watch {url}: {exc}", 8000)
            return None
        if w.key not in self.pollers:
            self.win.add_server(w.key, w.label)
            self._add_poller(w)
        self.win.select_server(w.key)
        return w.key

    def remove(self, key: str) -> None:
        """Stop watching a server (never the last one)."""
        if key not in self.pollers or len(self.pollers) == 1:
            return
        self.pollers.pop(key).stop()
        self.win.remove_server(key)
        self.servers.remove(key)

    def _on_settings(self) -> None:
        self.interval_s = self.settings.interval_s
        for p in self.pollers.values():
            p.set_interval(self._interval())
        for session in [*(w.session for w in self.servers), *self._replaced]:
            if session.sim is None:
                session.settings = self._analysis_settings()  # read by the next poll
        key = (self.settings.url or None, self.settings.api_key)
        if key == self._server_key:
            return
        self._server_key = key
        current = self.servers[self.win.current] if self.win.current in self.servers else None
        url = self.settings.url
        if url and current is not None and (url != current.session.url or self.settings.api_key):
            fresh = server_session(url, api_key=self.settings.api_key, timeout_s=self.timeout_s, log_path=None,
                                   recorder=current.session.recorder, settings=self._analysis_settings())
            self._replaced.append(fresh)
            self.win.reset()
            self.win.set_banner(None)
            self._current().set_factory(fresh.factory)

    def _on_shown(self, shown: bool) -> None:
        self.shown = shown
        for p in self.pollers.values():
            p.set_interval(self._interval())

    def _on_record(self, path: str | None) -> None:
        w = self.servers[self.win.current] if self.win.current in self.servers else None
        if w is None:
            return
        rec = w.session.recorder
        if path is None:
            rec.stop()
            self.win.set_recording(None)
            return
        try:
            rec.start(path, w.session.url)
        except OSError as exc:
            self.win.set_recording(None)
            self.win.statusBar().showMessage(f"Cannot record to {path}: {exc.strerror or exc}", 8000)
            return
        self.win.set_recording(path)


def build_servers_window(servers: ServerSet, settings: Any, interval_s: float, *, tray: bool = True,
                         timeout_s: float = 3.0, api_key: str | None = None,
                         cli_bandwidths: list[str] | None = None) -> tuple[Any, Controller]:
    """The window with a tab per server (when several) and a controller whose pollers feed it (not yet started)."""
    from kvmon.gui.main_window import MainWindow

    first = servers.first
    win = MainWindow(settings, banner=first.session.banner, tray=tray, label=first.label, key=first.key)
    for w in list(servers)[1:]:
        win.add_server(w.key, w.label, banner=w.session.banner)
    ctl = Controller(servers, win, settings, interval_s, timeout_s=timeout_s, api_key=api_key,
                     cli_bandwidths=cli_bandwidths)
    return win, ctl


def build_window(session: Session, settings: Any, interval_s: float, *, tray: bool = True,
                 timeout_s: float = 3.0, cli_bandwidths: list[str] | None = None) -> tuple[Any, Poller]:
    """The window on one session and its poller (not yet started; ``poller.start()``)."""
    servers = ServerSet([WatchedServer(MAIN_KEY, "", session)])
    win, ctl = build_servers_window(servers, settings, interval_s, tray=tray, timeout_s=timeout_s,
                                    cli_bandwidths=cli_bandwidths)
    win.controller = ctl  # kept with the window
    return win, ctl.pollers[MAIN_KEY]


def run(args: argparse.Namespace) -> int:
    """The dashboard; returns the exit status."""
    from kvmon.gui.settings import Settings

    app = ensure_app(sys.argv[:1])
    settings = Settings()
    api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or settings.api_key
    interval_s = float(getattr(args, "interval", None) or settings.interval_s)
    if getattr(args, "devices", None) is None and settings.devices_url:
        args.devices = settings.devices_url
    try:
        servers = choose_servers(args, api_key)
    except Exception as exc:  # e.g. an unknown demo scenario
        print(f"kvmon: {exc}", file=sys.stderr)
        return 2
    win, ctl = build_servers_window(servers, settings, interval_s, api_key=api_key,
                                    timeout_s=float(getattr(args, "timeout", None) or 3.0),
                                    cli_bandwidths=getattr(args, "bandwidth", None))
    if getattr(args, "record", None):
        win.set_recording(args.record)
    for note in settings.notices:  # e.g. a key file others could read, made the user's alone
        print(f"kvmon: {note}", file=sys.stderr)
        win.statusBar().showMessage(note, 20000)
    restore = quit_on_signals(app)
    win.show()
    ctl.start()
    try:
        return app.exec()
    finally:
        ctl.stop()  # each poller ends its poll (within the timeout) and closes its monitor
        servers.close()  # and the recording: every line written is whole
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
        skipped = f" ({len(rec.skipped_lines)} unreadable lines skipped)" if rec.skipped_lines else ""
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
    try:
        win, _ctl = open_replay(args.file)
    except (OSError, RecordingError) as exc:
        print(f"kvmon: cannot replay {args.file}: {exc}", file=sys.stderr)
        return 2
    restore = quit_on_signals(app)
    win.show()
    try:
        return app.exec()
    finally:
        restore()


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
    if rec.skipped_lines:
        win.set_banner(f"Replay of {name} ({len(rec.skipped_lines)} unreadable lines skipped)")
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
