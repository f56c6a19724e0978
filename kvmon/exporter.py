"""``kvmon serve [URL] --listen 127.0.0.1:9464``: a headless Prometheus exporter of kvmon's Snapshot.

A poll thread runs ``Monitor.poll()`` every interval and keeps the latest Snapshot; a prometheus_client
collector turns that Snapshot into metric families (``kvmon.core.report_prometheus``) when Prometheus scrapes
``/metrics`` (``kvmon.scrape_server``: a few workers, the system's full backlog, one render per poll). A scrape never
touches the model server. A server that cannot be read (or detected) yet is retried every interval; only a bad URL
or address ends the command. Unknown values (None, NaN) are left out (an absent series), never exported as 0.
Metric list and a scrape config: ``docs/exporter.md``. No Qt is loaded on this path.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from kvmon import listen
from kvmon.core.connection import failure_of, failure_snapshot
from kvmon.core.readings import FailureKind, SourceError
from kvmon.core.report_prometheus import Families, snapshot_families
from kvmon.core.snapshot import Snapshot
from kvmon.scrape_server import BACKLOG, RenderedOnce, ScrapeServer

EXIT_OK = 0
EXIT_BAD = 2
DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_INTERVAL_S = 5.0
INTERVAL_ENV = "KVMON_SERVE_INTERVAL"
MIN_INTERVAL_S = 0.1


def parse_listen(text: str | None) -> tuple[str, int]:
    """``--listen`` of ``kvmon serve`` (``kvmon.listen.parse_listen``); 127.0.0.1:9464 when not given."""
    return listen.parse_listen(text, DEFAULT_LISTEN)


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


@dataclass(frozen=True)
class PollState:
    """What the poll thread last produced: the Snapshot, how many polls so far, how long the last took."""

    snapshot: Snapshot | None = None
    polls: int = 0
    errors: int = 0
    last_poll_duration_s: float | None = None


class SnapshotCollector(Collector):
    """A prometheus_client collector that renders the latest Snapshot; it never polls the server itself."""

    def __init__(self, state: Callable[[], PollState], backend: Callable[[], str | None] = lambda: None) -> None:
        self._state = state
        self._backend = backend

    def collect(self) -> Iterator[Metric]:
        st = self._state()  # one reference: a poll finishing mid-scrape cannot mix two Snapshots
        yield from snapshot_families(st.snapshot, self._backend())
        f = Families()
        f.counter("kvmon_exporter_polls", "Polls of the model server since the exporter started.", st.polls)
        f.counter("kvmon_exporter_poll_errors", "Polls that failed inside kvmon (a bug, not the server).",
                  st.errors)
        f.gauge("kvmon_exporter_poll_duration_seconds", "How long the last poll took.", (), (),
                st.last_poll_duration_s)
        yield from f.all()


class Exporter:
    """Polls a Monitor on a thread and serves the latest Snapshot at ``/metrics`` (prometheus_client)."""

    def __init__(self, monitor: Any = None, *, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, opener: Callable[[], Any] | None = None) -> None:
        """``monitor``: anything with ``poll() -> Snapshot`` and ``close()`` (kvmon.monitor.Monitor). ``opener``:
        makes the monitor when there is none yet; a SourceError from it is this poll's failure, retried next poll."""
        self.monitor = monitor
        self.opener = opener
        self.interval_s = interval_s
        self._clock = clock
        self._state = PollState()
        self._stop = threading.Event()
        self._poll_thread: threading.Thread | None = None
        self._httpd: Any = None
        self._http_thread: threading.Thread | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(lambda: self._state,
                                                 lambda: getattr(self.monitor, "backend", None)))

    @property
    def state(self) -> PollState:
        return self._state

    @property
    def latest(self) -> Snapshot | None:
        """The Snapshot the next scrape will show."""
        return self._state.snapshot

    def listen(self, host: str = "127.0.0.1", port: int = 9464, *, backlog: int = BACKLOG) -> tuple[str, int]:
        """Bind and serve ``/metrics`` on a daemon thread (``kvmon.scrape_server``); returns the bound (host, port).
        Raises OSError. ``backlog``: for ``bench/serve_load.py``, which compares the old one."""
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        httpd = ScrapeServer((host, port), RenderedOnce(self.registry, lambda: self._state), family=family,
                             backlog=backlog)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                  name="kvmon-serve-http", daemon=True)
        thread.start()
        self._httpd, self._http_thread = httpd, thread
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
        """Poll the Monitor once and make the result the one scrapes show. A kvmon bug becomes a failed state."""
        t0 = self._clock()
        errors = self._state.errors
        prev = self._state.snapshot
        if self.monitor is None and self.opener is not None:
            try:
                self.monitor = self.opener()
            except SourceError as e:  # nothing readable there yet: this poll's failure, tried again next poll
                snap = failure_snapshot(e.failure, seq=(prev.seq + 1) if prev else 0, t_monotonic=self._clock(),
                                        t_wall=time.time(), last=prev)
                self._state = PollState(snap, self._state.polls + 1, errors, max(0.0, self._clock() - t0))
                return snap
        try:
            snap: Snapshot = self.monitor.poll()
        except Exception as exc:  # Monitor.poll handles source trouble; this is a bug, reported, not fatal
            errors += 1
            snap = failure_snapshot(failure_of(exc, FailureKind.UNEXPECTED_BODY, "poll failed"),
                                    seq=(prev.seq + 1) if prev else 0, t_monotonic=self._clock(), t_wall=time.time(),
                                    last=prev)
        self._state = PollState(snap, self._state.polls + 1, errors, max(0.0, self._clock() - t0))
        return snap

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = self._clock()
            self.poll_once()
            self._stop.wait(max(0.0, self.interval_s - (self._clock() - t0)))

    def start_polling(self) -> None:
        """Start the poll thread (the first poll is at once)."""
        if self._poll_thread is not None:
            return
        self._poll_thread = threading.Thread(target=self._loop, name="kvmon-serve-poll", daemon=True)
        self._poll_thread.start()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until stop() is called (or the timeout passes); True when stopped."""
        return self._stop.wait(timeout_s)

    def request_stop(self) -> None:
        """Ask the poll thread and wait() to end (safe from a signal handler)."""
        self._stop.set()

    def stop(self) -> None:
        """Stop polling and serving; the Monitor is the caller's to close."""
        self._stop.set()
        if self._poll_thread is not None:
            self._poll_thread.join(timeout=max(5.0, self.interval_s))
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            if self._http_thread is not None:
                self._http_thread.join(timeout=2)
            self._httpd = None

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
    from kvmon.session import open_monitor, settings_from_args
    from kvmon.sources.http import normalize_base_url, redact_url

    url = getattr(args, "url", None)
    try:
        shown = redact_url(normalize_base_url(url)) if url else None  # a bad URL never gets better: refuse it now
    except SourceError as e:
        return _fail(e.failure.reason, err)
    api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or None

    def opener() -> Any:
        return open_monitor(url, api_key=api_key, timeout_s=float(getattr(args, "timeout", 3.0) or 3.0),
                            log_path=getattr(args, "log", None), settings=settings_from_args(args),
                            devices_url=getattr(args, "devices", None))

    exporter = Exporter(interval_s=interval_s, opener=opener)
    try:
        exporter.listen(host, port)  # bind first: a taken port fails before the server is contacted
    except (OSError, OverflowError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        return _fail(f"cannot listen on {host}:{port}: {reason}", err)
    if not listen.is_loopback_host(host):
        print(f"kvmon: listening on {host}: other machines can scrape these metrics (model names, speeds, GPU "
              "memory); use --listen 127.0.0.1:PORT to keep them on this machine", file=err, flush=True)
    try:
        exporter.monitor = opener()
    except SourceError as e:
        if e.failure.kind is FailureKind.BAD_URL:
            exporter.stop()
            return _fail(e.failure.reason, err)
        print(f"kvmon: {e.failure.reason.splitlines()[0]}; trying again every {interval_s:g} s", file=err,
              flush=True)
    what = exporter.monitor.display_url if exporter.monitor is not None else shown
    exporter.start_polling()
    print(f"kvmon: exporting {what or 'the first server found on this machine'} every {interval_s:g} s at "
          f"{exporter.metrics_url}", file=err, flush=True)
    if stop is not None:
        threading.Thread(target=lambda: (stop.wait(), exporter.request_stop()), daemon=True).start()
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, lambda *_: exporter.request_stop())
    try:
        if on_ready is not None:
            on_ready(exporter)
        while not exporter.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        exporter.stop()
        if exporter.monitor is not None:
            exporter.monitor.close()
    return EXIT_OK
