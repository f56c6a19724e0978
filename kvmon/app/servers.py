"""The servers one window (or one exporter) watches, without Qt: each its own session — monitor factory, recording —
so each has its own history and alerts; which of them is the busiest (the tray shows it).

``choose_servers`` makes the set from the command line: the demo when asked, the URLs given, else every server
found on this machine (``kvmon.sources.discover``), else the demo with a banner that says nothing was found.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kvmon.app.build import open_monitor
from kvmon.app.demo import DEMO_SCENARIO, NO_SERVER_BANNER, demo_session
from kvmon.app.detection import find_servers
from kvmon.app.record import RecordSwitch
from kvmon.app.session import MonitorLike, Session, settings_from_args
from kvmon.core.analysis import AnalyzerSettings
from kvmon.core.locality import is_loopback_host
from kvmon.core.severity import worst_alert
from kvmon.core.snapshot import AlertLevel, Snapshot


@dataclass
class WatchedServer:
    """One server of the set: a stable key, a short label for a tab, its session and how it was found."""

    key: str
    label: str
    session: Session
    how: str | None = None  # "process 1234 (llama-server ...)", "port 9931", "given", "demo"


def server_session(url: str, *, api_key: str | None, timeout_s: float, log_path: str | None,
                   recorder: RecordSwitch | None = None, devices_url: str | None = None,
                   backend: str | None = None, settings: AnalyzerSettings | None = None) -> Session:
    """Monitor a real server at ``url``. ``backend``: what it answered as when it was found (the first monitor needs
    no question; a reconnect asks again)."""
    switch = recorder if recorder is not None else RecordSwitch(url)
    known = [backend]

    def factory() -> MonitorLike:
        first = known.pop() if known else None
        return open_monitor(url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, recorder=switch,
                            devices_url=devices_url, backend=first, settings=session.settings,
                            settings_source=session.current_settings)

    session = Session(factory, None, url, recorder=switch, settings=settings)
    return session


def short_label(url: str, backend_label: str) -> str:
    """ "llama-server :9931", "Ollama box:11434": the host only when it is not this machine's loopback."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return backend_label
    where = f":{port}" if is_loopback_host(host) else f"{host}:{port}"
    return f"{backend_label} {where}"


class ServerSet:
    """Servers by key, in the order they were added; closing the set closes every session."""

    def __init__(self, servers: list[WatchedServer] | None = None) -> None:
        self._servers: dict[str, WatchedServer] = {s.key: s for s in servers or ()}

    def __iter__(self) -> Iterator[WatchedServer]:
        return iter(list(self._servers.values()))

    def __len__(self) -> int:
        return len(self._servers)

    def __getitem__(self, key: str) -> WatchedServer:
        return self._servers[key]

    def __contains__(self, key: object) -> bool:
        return key in self._servers

    @property
    def first(self) -> WatchedServer:
        return next(iter(self._servers.values()))

    def add(self, server: WatchedServer) -> WatchedServer:
        """Add a server (one already there under that key is kept and returned)."""
        return self._servers.setdefault(server.key, server)

    def add_url(self, url: str, *, api_key: str | None = None, timeout_s: float = 3.0, log_path: str | None = None,
                devices_url: str | None = None, settings: AnalyzerSettings | None = None) -> WatchedServer:
        """Watch the server at ``url`` too (its kind is asked when its first monitor opens)."""
        from kvmon.sources.http import normalize_base_url

        norm = normalize_base_url(url)
        session = server_session(norm, api_key=api_key, timeout_s=timeout_s, log_path=log_path,
                                 recorder=RecordSwitch(norm), devices_url=devices_url, settings=settings)
        return self.add(WatchedServer(norm, short_label(norm, "server"), session, "given"))

    def remove(self, key: str) -> None:
        """Stop watching a server: its session (and recording) ends."""
        server = self._servers.pop(key, None)
        if server is not None:
            server.session.close()

    def close(self) -> None:
        for key in list(self._servers):
            self.remove(key)


def busiest(snapshots: Mapping[str, Snapshot | None]) -> str | None:
    """The server to show in the tray: the one decoding fastest now, else the one with the most severe alert,
    else None (then the one on screen)."""
    ranks: dict[str, tuple[float, int]] = {}  # (tok/s, worst alert's rank) of the servers with either
    for key, s in snapshots.items():
        alert = worst_alert(s.alerts, at_least=AlertLevel.WARNING) if s is not None else None
        if s is not None and (s.decode_tok_s is not None or alert is not None):
            ranks[key] = (s.decode_tok_s or 0.0, alert.level.rank if alert is not None else -1)
    return max(ranks, key=ranks.__getitem__, default=None)  # the first of equals


def choose_servers(args: argparse.Namespace, api_key: str | None) -> ServerSet:
    """The servers of a dashboard started with these arguments (see the module docstring).

    ``--record FILE`` records the first server; a file that cannot be recorded to is that server's recording
    problem (``RecordSwitch.try_start``): the dashboard runs all the same.
    """
    timeout_s = float(getattr(args, "timeout", 3.0) or 3.0)
    log_path = getattr(args, "log", None)
    devices_url = getattr(args, "devices", None)
    settings = settings_from_args(args)  # --bandwidth DEVICE=GB/s
    servers = ServerSet()
    if getattr(args, "demo", None):
        session = demo_session(args.demo, None, timeout_s=timeout_s, recorder=RecordSwitch(),
                               start_at_s=float(getattr(args, "start_at", 0.0) or 0.0),
                               speed=float(getattr(args, "speed", 1.0) or 1.0), analyzer_settings=settings)
        servers.add(WatchedServer(f"demo:{args.demo}", f"demo {args.demo}", session, "demo"))
    elif getattr(args, "url", None):
        servers.add_url(args.url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, devices_url=devices_url,
                        settings=settings)
    else:
        found = find_servers(api_key=api_key, timeout_s=min(timeout_s, 1.0))
        for f in sorted(found.found, key=lambda f: not f.answering):  # the ones that answer first
            session = server_session(f.url, api_key=api_key, timeout_s=timeout_s, log_path=log_path,
                                     recorder=RecordSwitch(f.url), devices_url=devices_url,
                                     backend=f.backend if f.answering else None, settings=settings)
            servers.add(WatchedServer(f.url, short_label(f.url, f.label), session, f.how))
        if not len(servers):
            session = demo_session(DEMO_SCENARIO, NO_SERVER_BANNER, timeout_s=timeout_s, recorder=RecordSwitch(),
                                   analyzer_settings=settings)
            servers.add(WatchedServer(f"demo:{DEMO_SCENARIO}", "demo", session, "demo"))
    for w in servers:
        w.session.recorder.url = w.session.url
    path = getattr(args, "record", None)
    if path:  # a recording that cannot start is an alert on the first server, never the end of the dashboard
        servers.first.session.recorder.try_start(path)
    return servers

