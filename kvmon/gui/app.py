"""``kvmon [URL]``, ``kvmon --demo [SCENARIO]`` and ``kvmon replay FILE``: build the app, the poller and the window.

With no URL: llama-server on :8080, then Ollama on :11434; when neither answers, the built-in simulator,
and the window says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6 import QtWidgets

from kvmon.gui import theme
from kvmon.gui.poller import MonitorLike, Poller

HIDDEN_INTERVAL_S = 10.0  # poll interval while hidden or minimised: alerts and the tray still follow
NO_SERVER_BANNER = "Demo: no server found on :8080 or :11434 — showing the simulator (start kvmon with a URL)"


@dataclass
class Session:
    """What ``run`` built: the monitor factory, a banner to show, and things to stop on exit."""

    factory: Callable[[], MonitorLike]
    banner: str | None = None
    url: str | None = None
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    sim: Any = None  # the in-process SimServer in demo mode
    recorder: RecordSwitch | None = None  # every monitor of the session records through it

    def close(self) -> None:
        """Stop the simulator and anything else started for this session."""
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as exc:  # shutting down: report, do not raise
                print(f"kvmon: cleanup failed: {exc}", file=sys.stderr)
        self.cleanups.clear()


def ensure_app(argv: list[str] | None = None) -> QtWidgets.QApplication:
    """The QApplication (created once), themed to the system's dark or light scheme."""
    app = QtWidgets.QApplication.instance()
    if app is None:
        app = QtWidgets.QApplication(argv or ["kvmon"])
        app.setApplicationName("kvmon")
        app.setOrganizationName("kvmon")
        theme.apply(app)
    return app  # type: ignore[return-value]


class RecordSwitch:
    """The session's recorder, switched on and off from the menu while the poller thread writes through it.

    Monitors call ``record`` and, on reconnect, ``close``: that does not end the recording (the next monitor
    keeps writing to the same file); ``stop`` does.
    """

    def __init__(self, url: str | None = None) -> None:
        self._lock = threading.Lock()
        self._rec: Any = None
        self.url = url
        self.path: str | None = None

    def start(self, path: str, url: str | None = None) -> None:
        """Record from the next snapshot on to ``path`` (appending); raises OSError when it cannot be opened."""
        from kvmon.core.recorder import Recorder
        from kvmon.gui.caption import scrub

        rec = Recorder(path, source_url=scrub(url or self.url or "") or None)
        with self._lock:
            old, self._rec, self.path = self._rec, rec, path
        if old is not None:
            old.close()

    def stop(self) -> None:
        """Stop recording; every line written is on disk."""
        with self._lock:
            old, self._rec, self.path = self._rec, None, None
        if old is not None:
            old.close()

    def record(self, snap: Any) -> None:
        """Write one snapshot when recording (called from the poller thread)."""
        with self._lock:
            if self._rec is not None:
                self._rec.record(snap)

    def close(self) -> None:
        """A monitor closing (reconnect): the recording goes on with the next monitor."""


def _recorder(args: argparse.Namespace, url: str | None) -> RecordSwitch:
    switch = RecordSwitch(url)
    path = getattr(args, "record", None)
    if path:
        switch.start(path, url)
    return switch


def demo_session(scenario: Any, banner: str | None, *, timeout_s: float = 3.0, speed: float = 1.0,
                 recorder: Any = None, faults: tuple[str, ...] = (), analyzer_settings: Any = None,
                 start_at_s: float = 0.0) -> Session:
    """Start the simulator in-process (real HTTP on 127.0.0.1) and monitor it with its simulated GPUs.

    ``scenario`` is a name from ``kvmon.sim.scenarios.SCENARIOS`` or a Scenario; ``session.sim`` is the server.
    ``analyzer_settings``: ``kvmon.core.analysis.AnalyzerSettings`` (thresholds, user bandwidths).
    ``start_at_s``: join the simulated story that many seconds in (documentation screenshots).
    """
    from kvmon.sim.server import SimServer

    sim = SimServer(scenario, speed=speed, faults=faults, start_at_s=start_at_s)
    url = sim.start()

    def factory() -> MonitorLike:
        from kvmon.core.analysis import Analyzer
        from kvmon.monitor import Monitor
        from kvmon.sources.host import HostSource
        from kvmon.sources.nvml import NvmlSource

        # every reading is stamped with the simulator's clock, so rates, trends and alert hold times are in
        # simulated seconds at any --speed
        clock = sim.clock.now
        if sim.scenario.backend == "ollama":
            from kvmon.sources.ollama import OllamaSource

            server: Any = OllamaSource(url, timeout_s=timeout_s, clock=clock)
        else:
            from kvmon.sources.llamacpp import LlamaServerSource

            server = LlamaServerSource(url, timeout_s=timeout_s, log_path=sim.log_path, clock=clock)
        # the simulated machine's RAM bandwidth stands in for the value a user sets in settings
        host = HostSource(sim.scenario.host_bandwidth_bytes_per_s, clock=clock)
        m = Monitor(server, NvmlSource(nvml=sim.nvml, clock=clock), host,
                    Analyzer(analyzer_settings, clock=clock), server_pids=sim.server_pids, clock=clock)
        m.recorder = recorder
        return m

    name = getattr(sim.scenario, "name", str(scenario))
    return Session(factory, banner or f"Demo: simulated {name}", url, [sim.stop], sim)


def server_session(url: str | None, *, api_key: str | None, timeout_s: float, log_path: str | None,
                   recorder: Any = None) -> Session:
    """Monitor a real server at ``url`` (auto-detected when None, on every reconnect)."""

    def factory() -> MonitorLike:
        from kvmon.monitor import open_monitor

        m = open_monitor(url, api_key=api_key, timeout_s=timeout_s, log_path=log_path)
        m.recorder = recorder
        return m

    return Session(factory, None, url)


def choose_session(args: argparse.Namespace, api_key: str | None) -> Session:
    """Demo when asked; the URL when given; else auto-detect, falling back to the demo with a banner.

    The session's ``recorder`` records to ``--record FILE`` when given, and can be switched from the menu.
    """
    session = _choose_session(args, api_key)
    if session.recorder is None:  # every branch below passes a RecordSwitch to its monitors
        session.recorder = RecordSwitch(session.url)
    session.recorder.url = session.recorder.url or session.url
    session.cleanups.insert(0, session.recorder.stop)
    return session


def _choose_session(args: argparse.Namespace, api_key: str | None) -> Session:
    timeout_s = float(getattr(args, "timeout", 3.0) or 3.0)
    log_path = getattr(args, "log", None)
    if getattr(args, "demo", None):
        rec = _recorder(args, None)
        s = demo_session(args.demo, None, timeout_s=timeout_s, recorder=rec,
                         start_at_s=float(getattr(args, "start_at", 0.0) or 0.0),
                         speed=float(getattr(args, "speed", 1.0) or 1.0))
        s.recorder = rec
        return s
    if args.url:
        rec = _recorder(args, args.url)
        s = server_session(args.url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, recorder=rec)
        s.recorder = rec
        return s
    from kvmon.core.readings import SourceError
    from kvmon.monitor import open_monitor

    try:
        first = open_monitor(None, api_key=api_key, timeout_s=min(timeout_s, 1.0), log_path=log_path)
    except SourceError:
        rec = _recorder(args, None)
        s = demo_session("seed-3090x2", NO_SERVER_BANNER, timeout_s=timeout_s, recorder=rec)
        s.recorder = rec
        return s
    first.recorder = _recorder(args, first.display_url)
    pending: list[MonitorLike] = [first]
    later = server_session(first.display_url, api_key=api_key, timeout_s=timeout_s, log_path=log_path,
                           recorder=first.recorder)

    def factory() -> MonitorLike:
        return pending.pop() if pending else later.factory()

    return Session(factory, None, first.display_url, recorder=first.recorder)


def build_window(session: Session, settings: Any, interval_s: float, *, tray: bool = True,
                 timeout_s: float = 3.0) -> tuple[Any, Poller]:
    """The window and a started poller feeding it."""
    from kvmon.gui.main_window import MainWindow

    poller = Poller(session.factory, interval_s)
    win = MainWindow(settings, banner=session.banner, tray=tray)
    poller.snapshot.connect(win.on_snapshot)
    win.pause_toggled.connect(poller.set_paused)
    win.reconnect_requested.connect(poller.reconnect)
    current: dict[str, Any] = {"interval_s": interval_s, "shown": True,
                               "server": (settings.url or None, settings.api_key)}

    def apply_interval() -> None:
        # Hidden or minimised: poll less often (alerts and the tray still follow, at most HIDDEN_INTERVAL_S late).
        i = current["interval_s"]
        poller.set_interval(i if current["shown"] else max(i, HIDDEN_INTERVAL_S))

    def on_settings() -> None:
        current["interval_s"] = settings.interval_s
        apply_interval()
        key = (settings.url or None, settings.api_key)
        if key != current.get("server"):
            current["server"] = key
            if settings.url and (settings.url != session.url or settings.api_key):
                fresh = server_session(settings.url, api_key=settings.api_key, timeout_s=timeout_s, log_path=None)
                win.reset()
                win.set_banner(None)
                poller.set_factory(fresh.factory)

    def on_shown(shown: bool) -> None:
        current["shown"] = shown
        apply_interval()

    def on_record(path: str | None) -> None:
        rec = session.recorder
        if rec is None:
            session.recorder = rec = RecordSwitch(session.url)
            session.cleanups.insert(0, rec.stop)
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
    win, poller = build_window(session, settings, interval_s)
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
