"""``kvmon serve [URL] [--url URL ...] --listen 127.0.0.1:9464``: a headless Prometheus exporter of kvmon's Snapshots.

Each watched server has its own poll thread running ``Monitor.poll()`` every interval and keeping the latest
Snapshot; every series of a server carries its ``server`` label (its URL, no credentials). With several servers this
machine's GPUs and host are read once, on a thread of their own. A prometheus_client collector turns the Snapshots
into metric families (``kvmon.core.report_prometheus``) when Prometheus scrapes ``/metrics``
(``kvmon.cli.scrape_server``: prometheus_client's server, guarded against slow and idle clients, one render per
poll). A scrape never touches
the model server. A server that cannot be read (or detected) yet is retried every interval; only a bad URL
or address ends the command. Unknown values (None, NaN) are left out (an absent series), never exported as 0.
Metric list and a scrape config: ``docs/exporter.md``. No Qt is loaded on this path.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from kvmon.app.endings import stop_on_signals
from kvmon.app.store import EXPORTER_CAPACITY, PollState, SessionStore
from kvmon.cli.scrape_server import BACKLOG, RenderedOnce, ScrapeServer
from kvmon.core import locality
from kvmon.core.analysis.settings import AnalyzerSettings
from kvmon.core.connection import failure_of, failure_snapshot
from kvmon.core.readings import FailureKind, SourceError
from kvmon.core.report_prometheus import Devices, Families, Watched, fleet_families
from kvmon.core.snapshot import Snapshot

EXIT_OK = 0
EXIT_BAD = 2
DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_INTERVAL_S = 5.0
INTERVAL_ENV = "KVMON_SERVE_INTERVAL"
MIN_INTERVAL_S = 0.1


def parse_listen(text: str | None) -> tuple[str, int]:
    """``--listen`` of ``kvmon serve`` (``kvmon.core.locality.parse_listen``); 127.0.0.1:9464 when not given."""
    return locality.parse_listen(text, DEFAULT_LISTEN)


def interval_from_env(environ: dict[str, str] | None = None) -> float:
    """The poll interval in seconds: ``$KVMON_SERVE_INTERVAL`` or 5 s. Raises ValueError for a bad value."""
    env = os.environ if environ is None else environ
    text = (env.get(INTERVAL_ENV) or "").strip()
    if not text:
        return DEFAULT_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{INTERVAL_ENV}={text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < MIN_INTERVAL_S:
        raise ValueError(f"{INTERVAL_ENV}={text!r}: give a number of seconds, at least {MIN_INTERVAL_S}")
    return value


# --------------------------------------------------------------------------- the exporter


@dataclass
class Target:
    """One watched server: its monitor (or how to make one), the name its series carry (None: the Snapshot's URL)
    and its session store (a scrape reads the last poll's state from it)."""

    monitor: Any = None
    opener: Callable[[], Any] | None = None
    name: str | None = None
    store: SessionStore = field(default_factory=lambda: SessionStore(capacity=EXPORTER_CAPACITY))


@dataclass(frozen=True)
class View:
    """What a scrape renders: each target's (name, state, backend) and this machine's devices; made once per poll."""

    targets: tuple[tuple[str | None, PollState, str | None], ...] = ()
    devices: Devices | None = None


class SnapshotCollector(Collector):
    """A prometheus_client collector that renders the latest View; it never polls a server itself."""

    def __init__(self, view: Callable[[], View]) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        v = self._view()  # one reference: a poll finishing mid-scrape cannot mix two Snapshots
        watched = [Watched(name if name is not None else (st.snapshot.url if st.snapshot else "") or "",
                           st.snapshot, backend) for name, st, backend in v.targets]
        yield from fleet_families(watched, v.devices)
        states = [st for _, st, _ in v.targets]
        durations = [st.last_poll_duration_s for st in states if st.last_poll_duration_s is not None]
        f = Families()
        f.counter("kvmon_exporter_polls", "Polls of the model servers since the exporter started.",
                  sum(st.polls for st in states))
        f.counter("kvmon_exporter_poll_errors", "Polls that read no server: it failed (kvmon_up's status says how) "
                  "or kvmon did.",
                  sum(st.errors for st in states))
        f.gauge("kvmon_exporter_poll_duration_seconds", "How long the slowest last poll took.", (), (),
                max(durations) if durations else None)
        yield from f.all()


class Exporter:
    """Polls one Monitor per watched server (each on its own thread, so a hung one delays no other) and, for a
    fleet, this machine's devices, and serves the latest Snapshots at ``/metrics`` (prometheus_client)."""

    def __init__(self, monitor: Any = None, *, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, opener: Callable[[], Any] | None = None,
                 name: str | None = None, devices: Any = None, settings: AnalyzerSettings | None = None) -> None:
        """``monitor``: anything with ``poll() -> Snapshot`` and ``close()`` (kvmon.app.monitor.Monitor). ``opener``:
        makes the monitor when there is none yet; a SourceError from it is this poll's failure, retried next poll.
        ``devices``: a ``kvmon.app.monitor.DevicePoller`` for this machine's GPUs and host, read on their own (then the
        GPU and host series come from it, not from the servers' Snapshots); ``settings``: the user's bandwidths and
        thresholds, applied to those devices as to a server's. ``add_target`` watches more servers."""
        self.targets: list[Target] = [Target(monitor, opener, name)]
        self.devices = devices
        self.settings = settings if settings is not None else AnalyzerSettings()
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._devices_view: Devices | None = None
        self._view = View()
        self._refresh_view()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._httpd: Any = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(lambda: self._view))

    def add_target(self, monitor: Any = None, opener: Callable[[], Any] | None = None,
                   name: str | None = None) -> None:
        """Watch one more server (before ``start_polling``)."""
        self.targets.append(Target(monitor, opener, name))
        self._refresh_view()

    @property
    def monitor(self) -> Any:
        """The first target's monitor."""
        return self.targets[0].monitor

    @property
    def state(self) -> PollState:
        """The first target's last poll: the Snapshot the next scrape shows, and the counts."""
        return self.targets[0].store.state

    def _refresh_view(self) -> None:
        with self._lock:
            self._view = View(tuple((t.name, t.store.state, getattr(t.monitor, "backend", None)) for t in self.targets),
                              self._devices_view)

    def listen(self, host: str = "127.0.0.1", port: int = 9464, *, backlog: int = BACKLOG) -> tuple[str, int]:
        """Bind and serve ``/metrics`` on a daemon thread (``kvmon.cli.scrape_server``); returns the bound (host, port).
        Raises OSError. ``backlog``: for ``bench/serve_load.py``, which compares the old one."""
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        httpd = ScrapeServer((host, port), RenderedOnce(self.registry, lambda: self._view), family=family,
                             backlog=backlog)
        threading.Thread(target=httpd.serve_forever, name="kvmon-serve-http", daemon=True).start()
        self._httpd = httpd
        addr = httpd.server_address
        return str(addr[0]), int(addr[1])

    @property
    def socket(self) -> socket.socket | None:
        """The listening socket, once listening."""
        return self._httpd.socket if self._httpd is not None else None

    @property
    def metrics_url(self) -> str | None:
        """``http://HOST:PORT/metrics`` once listening."""
        if self._httpd is None:
            return None
        host, port = self._httpd.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else str(host)
        return f"http://{shown}:{port}/metrics"

    def poll_once(self) -> Snapshot:
        """Poll every target (and the devices) once; the first target's Snapshot. A kvmon bug becomes a failed
        state."""
        for t in self.targets[1:]:
            self._poll_target(t)
        self._poll_devices()
        return self._poll_target(self.targets[0])

    def _poll_target(self, target: Target) -> Snapshot:
        t0 = self._clock()
        prev = target.store.state.snapshot
        try:
            if target.monitor is None and target.opener is not None:
                target.monitor = target.opener()  # a SourceError: nothing readable there yet, tried again next poll
            snap = target.monitor.poll()
            error = False
        except Exception as exc:  # Monitor.poll handles source trouble; anything else is a bug, reported, not fatal
            error = True
            snap = failure_snapshot(failure_of(exc, FailureKind.UNEXPECTED_BODY, "poll failed"),
                                    seq=(prev.seq + 1) if prev else 0, t_monotonic=self._clock(), t_wall=time.time(),
                                    last=prev)
        # a poll that read no server is an error too: the server's (kvmon_up says why) or kvmon's own
        target.store.eat(snap, duration_s=max(0.0, self._clock() - t0), error=error or not snap.server_read)
        self._refresh_view()
        return snap

    def _poll_devices(self) -> None:
        if self.devices is None:
            return
        from kvmon.core.analysis.gpu_views import machine_views

        gpus = self.devices.poll_gpus(())
        host = self.devices.poll_host(())
        gviews, _why, hview = machine_views(gpus, host, self.settings)  # as the window shows them, bandwidths too
        self._devices_view = Devices(gviews, hview if host else None)
        self._refresh_view()

    def _loop(self, poll: Callable[[], object]) -> None:
        while not self._stop.is_set():
            t0 = self._clock()
            poll()
            self._stop.wait(max(0.0, self.interval_s - (self._clock() - t0)))

    def start_polling(self) -> None:
        """Start one poll thread per target (and one for the devices); the first polls are at once."""
        if self._threads:
            return
        loops: list[Callable[[], object]] = [functools.partial(self._poll_target, t) for t in self.targets]
        if self.devices is not None:
            loops.append(self._poll_devices)
        for i, poll in enumerate(loops):
            th = threading.Thread(target=self._loop, args=(poll,), name=f"kvmon-serve-poll-{i}", daemon=True)
            th.start()
            self._threads.append(th)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until stop() is called (or the timeout passes); True when stopped."""
        return self._stop.wait(timeout_s)

    def request_stop(self) -> None:
        """Ask the poll threads and wait() to end (safe from a signal handler)."""
        self._stop.set()

    def stop(self) -> None:
        """Stop polling and serving; the Monitors are the caller's to close."""
        self._stop.set()
        for th in self._threads:
            th.join(timeout=max(5.0, self.interval_s))
        if self._httpd is not None:
            self._httpd.shutdown()  # returns once serve_forever has
            self._httpd.server_close()
            self._httpd = None

    def close_monitors(self) -> None:
        """Close every target's monitor and the devices (best effort)."""
        from kvmon.app.monitor import close_quietly

        close_quietly(*(t.monitor for t in self.targets if t.monitor is not None), self.devices)

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _fail(reason: str, err: TextIO) -> int:
    print(f"kvmon: {reason.splitlines()[0] if reason else 'cannot serve'}", file=err)
    return EXIT_BAD


def run(args: argparse.Namespace, err: TextIO | None = None, stop: threading.Event | None = None,
        on_ready: Callable[[Exporter], None] | None = None) -> int:
    """Serve until SIGINT/SIGTERM (or ``stop`` is set); exit 2 with a one-line reason for a bad address or URL.

    A server that cannot be read or detected yet is no reason to stop: its failure is exported (``kvmon_up`` 0)
    and detection is tried again every interval. ``stop`` and ``on_ready`` let a caller run this on a thread and
    learn the bound address.
    """
    err = err or sys.stderr
    try:
        host, port = parse_listen(getattr(args, "listen", None))
        interval_s = interval_from_env()
    except ValueError as e:
        return _fail(str(e), err)
    from kvmon.app.build import open_monitor
    from kvmon.app.session import settings_from_args
    from kvmon.sources.http import normalize_base_url, redact_url

    urls = [u for u in [getattr(args, "url", None), *(getattr(args, "urls", None) or [])] if u]
    try:  # a bad URL never gets better: refuse it now
        shown = [redact_url(normalize_base_url(u)) for u in urls]
    except SourceError as e:
        return _fail(e.failure.reason, err)
    if len(set(shown)) < len(shown):
        return _fail("the same server is given twice: " + ", ".join(sorted({u for u in shown if shown.count(u) > 1})),
                     err)
    api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or None
    timeout_s = float(getattr(args, "timeout", 3.0) or 3.0)
    fleet = len(urls) > 1

    settings = settings_from_args(args)

    def opener_for(url: str | None) -> Callable[[], Any]:
        return lambda: open_monitor(url, api_key=api_key, timeout_s=timeout_s, log_path=getattr(args, "log", None),
                                    settings=settings, devices_url=getattr(args, "devices", None))

    devices = None
    if fleet:  # this machine's GPUs and host, once, whichever servers are local
        from kvmon.app.build import default_gpu_source, default_host_source
        from kvmon.app.monitor import DevicePoller

        devices = DevicePoller(default_gpu_source(settings=settings), default_host_source(settings))
    exporter = Exporter(interval_s=interval_s, opener=opener_for(urls[0] if urls else None),
                        name=shown[0] if fleet else None, devices=devices, settings=settings)
    for url, name in zip(urls[1:], shown[1:], strict=True):
        exporter.add_target(opener=opener_for(url), name=name)
    try:
        exporter.listen(host, port)  # bind first: a taken port fails before the server is contacted
    except (OSError, OverflowError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        exporter.close_monitors()
        return _fail(f"cannot listen on {host}:{port}: {reason}", err)
    if not locality.is_loopback_host(host):
        print(f"kvmon: listening on {host}: other machines can scrape these metrics (model names, speeds, GPU "
              "memory); use --listen 127.0.0.1:PORT to keep them on this machine", file=err, flush=True)
    if stop is not None:
        def stop_when_set() -> None:
            stop.wait()
            exporter.request_stop()

        threading.Thread(target=stop_when_set, daemon=True).start()
    # from here on SIGTERM and SIGINT only ask to stop: the polls end (each within its timeout), the socket closes
    with stop_on_signals(exporter.request_stop):
        try:
            for t in exporter.targets:
                if exporter.wait(0):
                    break
                try:
                    t.monitor = t.opener() if t.opener is not None else t.monitor
                except SourceError as e:
                    if e.failure.kind is FailureKind.BAD_URL:
                        return _fail(e.failure.reason, err)
                    print(f"kvmon: {e.failure.reason.splitlines()[0]}; trying again every {interval_s:g} s",
                          file=err, flush=True)
            what = ", ".join(t.monitor.display_url if t.monitor is not None else t.name or (shown or [""])[0]
                             for t in exporter.targets)
            if not exporter.wait(0):
                exporter.start_polling()
                print(f"kvmon: exporting {what or 'the first server found on this machine'}"
                      f"{' and this machine' + chr(39) + 's devices' if fleet else ''} every {interval_s:g} s at "
                      f"{exporter.metrics_url}", file=err, flush=True)
            if on_ready is not None:
                on_ready(exporter)
            while not exporter.wait(1.0):
                pass
        finally:
            exporter.stop()
            exporter.close_monitors()
    return EXIT_OK
