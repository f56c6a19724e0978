"""The session the command line asks for: the demo, a URL, or the first server found on this machine (else the demo
with a banner that says nothing was found)."""

from __future__ import annotations

import argparse

from kvmon.app.build import open_monitor
from kvmon.app.demo import DEMO_SCENARIO, NO_SERVER_BANNER, demo_session
from kvmon.app.record import RecordSwitch
from kvmon.app.session import MonitorLike, Session, settings_from_args
from kvmon.core.analysis import AnalyzerSettings
from kvmon.core.readings import SourceError


def server_session(url: str | None, *, api_key: str | None, timeout_s: float, log_path: str | None,
                   recorder: RecordSwitch | None = None, devices_url: str | None = None,
                   backend: str | None = None, settings: AnalyzerSettings | None = None) -> Session:
    """Monitor a real server at ``url`` (auto-detected when None, on every reconnect). ``backend``: what it answered
    as when it was found (the first monitor needs no question; a reconnect asks again)."""
    switch = recorder if recorder is not None else RecordSwitch(url)
    known = [backend]

    def factory() -> MonitorLike:
        first = known.pop() if known else None
        return open_monitor(url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, recorder=switch,
                            devices_url=devices_url, backend=first, settings=session.settings,
                            settings_source=session.current_settings)

    session = Session(factory, None, url, recorder=switch, settings=settings)
    return session



def choose_session(args: argparse.Namespace, api_key: str | None) -> Session:
    """Demo when asked; the URL when given; else auto-detect, falling back to the demo with a banner.

    The session's ``recorder`` records to ``--record FILE`` when given (and can be switched from the menu); a file
    that cannot be recorded to is the recorder's ``problem``, an alert on every snapshot.
    """
    timeout_s = float(getattr(args, "timeout", 3.0) or 3.0)
    log_path = getattr(args, "log", None)
    switch = RecordSwitch()
    settings = settings_from_args(args)
    if getattr(args, "demo", None):
        session = demo_session(args.demo, None, timeout_s=timeout_s, recorder=switch,
                               start_at_s=float(getattr(args, "start_at", 0.0) or 0.0),
                               speed=float(getattr(args, "speed", 1.0) or 1.0), analyzer_settings=settings)
    elif args.url:
        session = server_session(args.url, api_key=api_key, timeout_s=timeout_s, log_path=log_path, recorder=switch,
                                 settings=settings)
    else:
        session = _detected_session(api_key, timeout_s, log_path, switch, settings)
    switch.url = session.url
    path = getattr(args, "record", None)
    if path:  # a recording that cannot start is an alert, never the end of the monitoring
        switch.try_start(path)
    return session



def _detected_session(api_key: str | None, timeout_s: float, log_path: str | None, switch: RecordSwitch,
                      settings: AnalyzerSettings | None = None) -> Session:
    """The first server that answers on this machine (its monitor is the session's first), else the demo."""
    session = Session(lambda: None, None, None, recorder=switch, settings=settings)  # its factory follows
    try:
        first = open_monitor(None, api_key=api_key, timeout_s=min(timeout_s, 1.0), log_path=log_path,
                             recorder=switch, settings=settings, settings_source=session.current_settings)
    except SourceError:
        return demo_session(DEMO_SCENARIO, NO_SERVER_BANNER, timeout_s=timeout_s, recorder=switch,
                            analyzer_settings=settings)
    pending: list[MonitorLike] = [first]
    later = server_session(first.display_url, api_key=api_key, timeout_s=timeout_s, log_path=log_path,
                           recorder=switch, settings=settings)

    def factory() -> MonitorLike:
        later.settings = session.settings  # what the user set since (the dialog changes the session's settings)
        return pending.pop() if pending else later.factory()

    session.factory, session.url = factory, first.display_url
    return session

