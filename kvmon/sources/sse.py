"""Follow a server-sent-events stream on a thread, keeping the last event per key: the load progress that a
llama-server router publishes only on ``GET /models/sse``.

The stream is opened only while it is wanted (a model is loading) and closed otherwise, so an idle router sees no
extra connection. Read timeouts are short and simply reconnect: the router sends no keep-alive pings, and a stop
must not wait on a silent socket.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

READ_TIMEOUT_S = 1.0
RETRY_S = 2.0  # after the stream failed (refused, 404 on a build without it), try again no sooner
MAX_LINE_BYTES = 1 << 20


class SseFollower:
    """Reads ``data:`` lines of one SSE endpoint while ``want()`` says so; ``latest()`` is the last event per key."""

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None,
                 key: Callable[[Mapping[str, Any]], str | None] = lambda e: e.get("model"),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
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
        else:
            self._wanted.clear()

    def latest(self) -> dict[str, tuple[float, Mapping[str, Any]]]:
        """key → (when it arrived, the event's JSON object)."""
        with self._lock:
            return dict(self._latest)

    def feed(self, line: str) -> None:
        """One line of the stream (``data: {...}``); others (comments, ``event:``, blank) are ignored."""
        if not line.startswith("data:"):
            return
        try:
            obj = json.loads(line[5:].strip())
        except ValueError:
            return
        if not isinstance(obj, Mapping):
            return
        k = self._key(obj)
        if isinstance(k, str):
            with self._lock:
                self._latest[k] = (self._clock(), obj)

    def close(self) -> None:
        """Stop reading (the thread ends within a read timeout)."""
        self._stop.set()
        self._wanted.clear()
        t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout=READ_TIMEOUT_S + 0.5)

    def _run(self) -> None:
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=2.0)
        with httpx.Client(timeout=timeout, trust_env=False, headers=self._headers) as client:
            while self._wanted.is_set() and not self._stop.is_set():
                try:
                    with client.stream("GET", self.url, headers={"Accept": "text/event-stream"}) as resp:
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
                    continue  # no event for a while: open the stream again (and notice a stop)
                except httpx.HTTPError as e:
                    self.error = f"event stream failed ({type(e).__name__})"
                    self._stop.wait(RETRY_S)
                finally:
                    self.connected = False
