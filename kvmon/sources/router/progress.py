"""A router's model load progress, which llama-server publishes only as server-sent events on ``GET /models/sse``:
read through httpx's streaming on a thread, keeping the last event per model.

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
from kvmon.sources.http import ConnectionSocket, Cutoff, default_tls

READ_TIMEOUT_S = 1.0  # a stream quiet this long is opened again
RETRY_S = 2.0  # after the stream failed (refused, 404 on a build without it), try again no sooner
MAX_LINE_BYTES = 1 << 20  # a longer line ends the stream (it is not kept)


class ProgressStream:
    """Reads the ``data:`` lines of one event stream while ``want()`` says so; ``latest()`` is the last event per
    model."""

    def __init__(self, url: str, *, headers: Mapping[str, str | bytes] | None = None,
                 clock: Callable[[], float] = time.monotonic, timeout_s: float = 3.0) -> None:
        """``timeout_s``: the longest the stream's head may take."""
        self.url = url
        self._timeout_s = timeout_s
        self._headers = {**(headers or {}), "Accept": "text/event-stream"}
        self._clock = clock
        self._socket = ConnectionSocket()
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
                self._thread = threading.Thread(target=self._run, name="kvmon-progress", daemon=True)
                self._thread.start()
        elif self._wanted.is_set():
            self._wanted.clear()
            self._socket.cut()

    def latest(self) -> dict[str, tuple[float, Mapping[str, Any]]]:
        """model → (when its last event arrived, the event's JSON object)."""
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
        if isinstance(obj, Mapping) and isinstance(obj.get("model"), str):
            with self._lock:
                self._latest[obj["model"]] = (self._clock(), obj)

    def close(self) -> None:
        """Stop reading: the read under way is ended, and the thread with it."""
        self._stop.set()
        self._wanted.clear()
        self._socket.cut()
        t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout=READ_TIMEOUT_S + 0.5)

    def _reading(self) -> bool:
        return self._wanted.is_set() and not self._stop.is_set()

    def _run(self) -> None:
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=min(2.0, self._timeout_s))
        tls = default_tls(self.url)
        with httpx.Client(timeout=timeout, headers=self._headers, verify=tls, trust_env=False) as client:
            while self._reading():
                head_by = Cutoff(time.monotonic() + self._timeout_s, self._socket.cut)
                try:
                    with client.stream("GET", self.url, extensions={"trace": self._socket.trace}) as resp:
                        if head_by.end():
                            raise httpx.ReadTimeout("the head came too late")
                        if resp.status_code != 200:
                            self.error = f"{resp.status_code} from the event stream"
                            self._stop.wait(RETRY_S)
                            continue
                        self.error, self.connected = None, True
                        self._read(resp)
                    self._stop.wait(RETRY_S)  # the server ended the stream: not again at once
                except httpx.ReadTimeout:
                    if not self.connected:  # the head did not come in time
                        self.error = f"sent no answer in {self._timeout_s:g} s"
                        self._stop.wait(RETRY_S)
                    # else no event for a while: open the stream again (and notice a stop)
                except httpx.HTTPError as e:
                    if head_by.end() and not self.connected:  # a head that dripped, cut at its time
                        self.error = f"sent no answer in {self._timeout_s:g} s"
                    elif self._reading():
                        self.error = f"event stream failed ({type(e).__name__})"
                    self._stop.wait(RETRY_S)
                finally:
                    head_by.end()
                    self.connected = False

    def _read(self, resp: httpx.Response) -> None:
        """Feed the stream's lines until it ends or is no longer wanted; a line longer than MAX_LINE_BYTES ends it."""
        rest = b""
        for chunk in resp.iter_bytes():
            lines = (rest + chunk).splitlines(keepends=True)
            rest = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
            for line in lines:
                self.feed(line.rstrip(b"\r\n").decode("utf-8", errors="replace"))
            if len(rest) > MAX_LINE_BYTES:
                self.error = f"sent an event longer than {MAX_LINE_BYTES // 1024} KiB"
                return
            if not self._reading():
                return
