"""The dashboard's pollers wired to its window: one poller per watched server, snapshots in, the window's requests
(another server shown, a model chosen, recording, settings, a server added or removed, hidden or shown) out."""

from __future__ import annotations

from typing import Any

from PySide6 import QtCore

from kvmon.app.servers import ServerSet, WatchedServer, server_session
from kvmon.app.session import Session
from kvmon.gui.poller import Poller

HIDDEN_INTERVAL_S = 10.0  # poll interval while hidden or minimised: alerts and the tray still follow


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
        def set_paused(paused: bool) -> None:
            for pl in self.pollers.values():
                pl.set_paused(paused)

        win.pause_toggled.connect(set_paused)
        win.reconnect_requested.connect(lambda: self._current().reconnect.emit())
        win.settings_changed.connect(self._on_settings)
        win.shown_changed.connect(self._on_shown)
        win.record_requested.connect(self._on_record)
        win.follow_requested.connect(lambda key, name: self.pollers[key].follow.emit(name)
                                     if key in self.pollers else None)
        win.add_server_requested.connect(self.add_url)
        win.remove_server_requested.connect(self.remove)
        # what a depth sweep drives: the shown server's monitor, and the key the user gave
        win.monitor_of = lambda: (self._current().worker.monitor, self.api_key or self.settings.api_key)

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
            p.interval.emit(self._interval())
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
            self._current().factory.emit(fresh.factory)

    def _on_shown(self, shown: bool) -> None:
        self.shown = shown
        for p in self.pollers.values():
            p.interval.emit(self._interval())

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
