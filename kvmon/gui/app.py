"""``kvmon [URL]``, ``kvmon --demo [SCENARIO]`` and ``kvmon replay FILE``: build the app, the poller and the window.

With no URL: llama-server on :8080, then Ollama on :11434; when neither answers, the built-in simulator,
and the window says so.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6 import QtWidgets

from kvmon.gui import theme
from kvmon.gui.poller import MonitorLike, Poller

HIDDEN_INTERVAL_S = 5.0  # poll interval while the window is hidden or minimised
NO_SERVER_BANNER = "Demo: no server found on :8080 or :11434 — showing the simulator (start kvmon with a URL)"


@dataclass
class Session:
    """What ``run`` built: the monitor factory, a banner to show, and things to stop on exit."""

    factory: Callable[[], MonitorLike]
    banner: str | None = None
    url: str | None = None
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    sim: Any = None  # the in-process SimServer in demo mode

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


def _recorder(args: argparse.Namespace, url: str | None) -> Any:
    path = getattr(args, "record", None)
    if not path:
        return None
    from kvmon.core.recorder import Recorder

    return Recorder(path, source_url=url)


def demo_session(scenario: Any, banner: str | None, *, timeout_s: float = 3.0, speed: float = 1.0,
                 recorder: Any = None, faults: tuple[str, ...] = (), analyzer_settings: Any = None) -> Session:
    """Start the simulator in-process (real HTTP on 127.0.0.1) and monitor it with its simulated GPUs.

    ``scenario`` is a name from ``kvmon.sim.scenarios.SCENARIOS`` or a Scenario; ``session.sim`` is the server.
    ``analyzer_settings``: ``kvmon.core.analysis.AnalyzerSettings`` (thresholds, user bandwidths).
    """
    from kvmon.sim.server import SimServer

    sim = SimServer(scenario, speed=speed, faults=faults)
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
        m = Monitor(server, NvmlSource(nvml=sim.nvml, clock=clock), HostSource(clock=clock),
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
    """Demo when asked; the URL when given; else auto-detect, falling back to the demo with a banner."""
    timeout_s = float(getattr(args, "timeout", 3.0) or 3.0)
    log_path = getattr(args, "log", None)
    if getattr(args, "demo", None):
        return demo_session(args.demo, None, timeout_s=timeout_s, recorder=_recorder(args, None))
    if args.url:
        return server_session(args.url, api_key=api_key, timeout_s=timeout_s, log_path=log_path,
                              recorder=_recorder(args, args.url))
    from kvmon.core.readings import SourceError
    from kvmon.monitor import open_monitor

    try:
        first = open_monitor(None, api_key=api_key, timeout_s=min(timeout_s, 1.0), log_path=log_path)
    except SourceError:
        return demo_session("seed-3090x2", NO_SERVER_BANNER, timeout_s=timeout_s, recorder=_recorder(args, None))
    first.recorder = _recorder(args, first.display_url)
    pending: list[MonitorLike] = [first]
    later = server_session(first.display_url, api_key=api_key, timeout_s=timeout_s, log_path=log_path,
                           recorder=first.recorder)

    def factory() -> MonitorLike:
        return pending.pop() if pending else later.factory()

    return Session(factory, None, first.display_url)


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

    win.settings_changed.connect(on_settings)
    win.shown_changed.connect(on_shown)
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
    """``kvmon replay FILE.jsonl``: a recorded session in the same dashboard (no polling)."""
    from kvmon.core.recorder import RecordingError, read_recording
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings

    try:
        rec = read_recording(args.file)
    except (OSError, RecordingError) as exc:
        print(f"kvmon: cannot replay {args.file}: {exc}", file=sys.stderr)
        return 2
    if not rec.snapshots:
        print(f"kvmon: {args.file} holds no snapshots", file=sys.stderr)
        return 2
    app = ensure_app(sys.argv[:1])
    skipped = f" ({len(rec.skipped_lines)} unreadable lines skipped)" if rec.skipped_lines else ""
    win = MainWindow(Settings(), banner=f"Replay of {os.path.basename(args.file)}{skipped}", tray=False)
    win.load(rec.snapshots)
    win.show()
    return app.exec()
