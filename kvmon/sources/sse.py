"""Follow a server-sent-events stream on a thread, keeping the last event per key: the load progress that a
llama-server router publishes only on ``GET /models/sse``.

The stream is opened only while it is wanted (a model is loading) and closed otherwise, so an idle router sees no
extra connection. Its head must come within the timeout (one that drips it byte by byte is cut off there); a
quiet stream is opened again after a short wait (the router sends no keep-alive pings); a stop (or no longer
wanting it) ends the read at once, whatever the server sends or does not send.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from kvmon.core.jsonvals import InputError, parse_json
from kvmon.sources.keepalive import DEADLINE, STREAM_IDLE, KeepAliveTransport

READ_TIMEOUT_S = 1.0
RETRY_S = 2.0  # after the stream failed (refused, 404 on a build without it), try again no sooner
MAX_LINE_BYTES = 1 << 20


class SseFollower:
    """Reads ``data:`` lines of one SSE endpoint while ``want()`` says so; ``latest()`` is the last event per key."""

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None,
                 key: Callable[[Mapping[str, Any]], str | None] = lambda e: e.get("model"),
                 clock: Callable[[], float] = time.monotonic, timeout_s: float = 3.0) -> None:
        """``timeout_s``: the longest the stream's head may take."""
        self.url = url
        self._timeout_s = timeout_s
        self._transport = KeepAliveTransport()
        self._headers = dict(headers or {})
        self._key = key
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[float, Mapping[str, Any]]] = {}
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # why the stream is not being read (None while it is, or never tried)
        self.connected = False

    def want(self, on: bool) -> None:
        """Open the stream (on a thread) when ``on``, close it otherwise."""
        if on:
            self._wanted.set()
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="kvmon-sse", daemon=True)
                self._thread.start()
        elif self._wanted.is_set():
            self._wanted.clear()
            self._transport.abort()

    def latest(self) -> dict[str, tuple[float, Mapping[str, Any]]]:
        """key → (when it arrived, the event's JSON object)."""
        with self._lock:
            return dict(self._latest)

    def feed(self, line: str) -> None:
        """One line of the stream (``data: {...}``); others (comments, ``event:``, blank) are ignored."""
        if not line.startswith("data:"):
            return
        try:
            obj = parse_json(line[5:].strip())  # the shared rules: bounded depth, valid text, huge numbers infinite
        except InputError:
            return
        if not isinstance(obj, Mapping):
            return
        k = self._key(obj)
        if isinstance(k, str):
            with self._lock:
                self._latest[k] = (self._clock(), obj)

    def close(self) -> None:
        """Stop reading: the read under way is ended, and the thread with it."""
        self._stop.set()
        self._wanted.clear()
        self._transport.abort()
        t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout=READ_TIMEOUT_S + 0.5)

    def _run(self) -> None:
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=min(2.0, self._timeout_s))
        with httpx.Client(timeout=timeout, trust_env=False, headers=self._headers, transport=self._transport) as client:
            while self._wanted.is_set() and not self._stop.is_set():
                try:
                    ext = {DEADLINE: time.monotonic() + self._timeout_s, STREAM_IDLE: READ_TIMEOUT_S}
                    with client.stream("GET", self.url, headers={"Accept": "text/event-stream"},
                                       extensions=ext) as resp:
                        if resp.status_code != 200:
                            self.error = f"{resp.status_code} from the event stream"
                            self._stop.wait(RETRY_S)
                            continue
                        self.error, self.connected = None, True
                        for line in resp.iter_lines():
                            if len(line) <= MAX_LINE_BYTES:
                                self.feed(line)
                            if not self._wanted.is_set() or self._stop.is_set():
                                break
                except httpx.ReadTimeout:
                    if not self.connected:  # the head did not come in time
                        self.error = f"sent no answer in {self._timeout_s:g} s"
                        self._stop.wait(RETRY_S)
                    continue  # no event for a while: open the stream again (and notice a stop)
                except httpx.HTTPError as e:
                    self.error = f"event stream failed ({type(e).__name__})"
                    self._stop.wait(RETRY_S)
                finally:
                    self.connected = False
