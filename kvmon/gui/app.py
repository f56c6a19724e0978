"""``kvmon [URL]``, ``kvmon --demo [SCENARIO]`` and ``kvmon replay FILE``: the app, the poller and the window.

Which server (with no URL: llama-server on :8080, then Ollama on :11434, else the built-in simulator, and the
window says so) and how it is read is the session's business (``kvmon.session``); this module only wires a
session to a window.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from PySide6 import QtWidgets

from kvmon.gui import theme
from kvmon.gui.poller import Poller
from kvmon.session import Session, choose_session, server_session

HIDDEN_INTERVAL_S = 10.0  # poll interval while hidden or minimised: alerts and the tray still follow


def ensure_app(argv: list[str] | None = None) -> QtWidgets.QApplication:
    """The QApplication (created once), themed to the system's dark or light scheme."""
    app = QtWidgets.QApplication.instance()
    if app is None:
        app = QtWidgets.QApplication(argv or ["kvmon"])
        app.setApplicationName("kvmon")
        app.setOrganizationName("kvmon")
        theme.apply(app)
    return app  # type: ignore[return-value]


def session_settings(settings: Any, cli_specs: list[str] | None) -> Any:
    """The analysis settings of the dashboard: the bandwidths from Settings, then the command line's (they win)."""
    from kvmon.core.analysis import AnalyzerSettings
    from kvmon.core.analysis.settings import with_bandwidths

    specs = [*settings.bandwidth_specs, *(cli_specs or [])]
    return with_bandwidths(AnalyzerSettings(), specs) if specs else None


def build_window(session: Session, settings: Any, interval_s: float, *, tray: bool = True,
                 timeout_s: float = 3.0, cli_bandwidths: list[str] | None = None) -> tuple[Any, Poller]:
    """The window and a started poller feeding it."""
    from kvmon.gui.main_window import MainWindow

    if session.sim is None:  # a demo's machine is the simulator's: its bandwidths come from the scenario
        session.settings = session_settings(settings, cli_bandwidths) or session.settings

    poller = Poller(session.factory, interval_s)
    win = MainWindow(settings, banner=session.banner, tray=tray)
    poller.snapshot.connect(win.on_snapshot)
    win.pause_toggled.connect(poller.set_paused)
    win.reconnect_requested.connect(poller.reconnect)
    current: dict[str, Any] = {"interval_s": interval_s, "shown": True,
                               "server": (settings.url or None, settings.api_key), "session": session}

    def apply_interval() -> None:
        # Hidden or minimised: poll less often (alerts and the tray still follow, at most HIDDEN_INTERVAL_S late).
        i = current["interval_s"]
        poller.set_interval(i if current["shown"] else max(i, HIDDEN_INTERVAL_S))

    def on_settings() -> None:
        current["interval_s"] = settings.interval_s
        apply_interval()
        active: Session = current["session"]
        if active.sim is None:
            active.settings = session_settings(settings, cli_bandwidths)  # read by the next poll
        key = (settings.url or None, settings.api_key)
        if key != current.get("server"):
            current["server"] = key
            if settings.url and (settings.url != session.url or settings.api_key):
                fresh = server_session(settings.url, api_key=settings.api_key, timeout_s=timeout_s, log_path=None,
                                       recorder=session.recorder, settings=session_settings(settings, cli_bandwidths))
                current["session"] = fresh
                win.reset()
                win.set_banner(None)
                poller.set_factory(fresh.factory)

    def on_shown(shown: bool) -> None:
        current["shown"] = shown
        apply_interval()

    def on_record(path: str | None) -> None:
        rec = session.recorder
        if path is None:
            rec.stop()
            win.set_recording(None)
            return
        try:
            rec.start(path, session.url)
        except OSError as exc:
            win.set_recording(None)
            win.statusBar().showMessage(f"Cannot record to {path}: {exc.strerror or exc}", 8000)
            return
        win.set_recording(path)

    win.settings_changed.connect(on_settings)
    win.shown_changed.connect(on_shown)
    win.record_requested.connect(on_record)
    poller.snapshot.connect(win.tally.add)
    return win, poller


def run(args: argparse.Namespace) -> int:
    """The dashboard; returns the exit status."""
    from kvmon.gui.settings import Settings

    app = ensure_app(sys.argv[:1])
    settings = Settings()
    api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or settings.api_key
    interval_s = float(getattr(args, "interval", None) or settings.interval_s)
    try:
        session = choose_session(args, api_key)
    except Exception as exc:  # e.g. an unknown demo scenario
        print(f"kvmon: {exc}", file=sys.stderr)
        return 2
    win, poller = build_window(session, settings, interval_s, cli_bandwidths=getattr(args, "bandwidth", None))
    if getattr(args, "record", None):
        win.set_recording(args.record)
    win.show()
    poller.start()
    try:
        return app.exec()
    finally:
        poller.stop()
        session.close()


def run_replay(args: argparse.Namespace) -> int:
    """``kvmon replay FILE.jsonl [--csv OUT.csv]``: a recorded session in the same dashboard, with a time slider
    and 1× / 10× / 60× playback; with ``--csv`` write the recording as CSV and exit instead."""
    from kvmon.core.recorder import RecordingError, read_recording

    try:
        rec = read_recording(args.file)
    except (OSError, RecordingError) as exc:
        print(f"kvmon: cannot replay {args.file}: {exc}", file=sys.stderr)
        return 2
    if not rec.snapshots:
        print(f"kvmon: {args.file} holds no snapshots", file=sys.stderr)
        return 2
    skipped = f" ({len(rec.skipped_lines)} unreadable lines skipped)" if rec.skipped_lines else ""
    csv_out = getattr(args, "csv", None)
    if csv_out:
        from kvmon.core.recording_csv import write_csv

        try:
            n = write_csv(rec.snapshots, csv_out)
        except OSError as exc:
            print(f"kvmon: cannot write {csv_out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"kvmon: wrote {n} rows to {csv_out}{skipped}")
        return 0
    app = ensure_app(sys.argv[:1])
    win, _ctl = replay_window(rec.snapshots, f"Replay of {os.path.basename(args.file)}{skipped}")
    win.show()
    return app.exec()


def replay_window(snapshots: Any, banner: str | None, settings: Any = None) -> tuple[Any, Any]:
    """A dashboard window (no polling, no tray) showing ``snapshots`` with the replay bar; (window, controller)."""
    from kvmon.gui import replay
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings

    win = MainWindow(settings if settings is not None else Settings(), banner=banner, tray=False)
    win.record_action.setEnabled(False)  # nothing new to record in a replay
    ctl = replay.attach(win, snapshots)
    win.report_snapshots = lambda: ctl.snapshots[: ctl.index + 1]
    win.csv_action.setEnabled(True)
    return win, ctl
