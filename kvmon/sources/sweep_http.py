"""The HTTP of a depth sweep: one server, one request at a time, each read as it streams and cancellable from another
thread.

A cancel shuts the socket of the request under way: the read ends at once, and the server sees its client gone and
cancels the request (llama-server frees the slot as soon as it next writes, which a sweep's short requests make soon).
Every failure is a ``SweepFailed`` with one line for people (the server's own message, scrubbed of the key); a
cancelled request is a ``SweepCancelled``. ``ServerSweep`` is what each backend's sweep class shares.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import httpx

from kvmon.core.jsonvals import InputError, parse_json
from kvmon.core.redact import scrub
from kvmon.core.sweep import StepTiming, SweepCancelled, SweepFailed, Timing
from kvmon.sources.http import normalize_base_url, redact_url

READ_SILENCE_S = 120.0  # the longest a request may send nothing (a deep prompt read on a slow machine)
CONNECT_S = 5.0
MAX_LINE_BYTES = 4 << 20
# what the conversation is made of: ordinary prose, tokenized once by the server and repeated to any depth
FILLER = ("The cache grows with every token, and decode reads all of it again for the next one. Memory bandwidth "
          "sets the pace: the weights and the whole context cross the bus once per generated token. ")


class SweepHttp:
    """Requests to one server for a sweep; ``cancel()`` (any thread) ends the one under way and every later one."""

    def __init__(self, base_url: str, *, api_key: str | None = None) -> None:
        self.base_url = normalize_base_url(base_url)
        self.display_url = redact_url(self.base_url)
        self._secrets = (api_key,) if api_key else ()
        # one connection per request: a server may close a streamed answer's connection after it (llama-server does),
        # and a request must never go out on a connection the server has just dropped
        headers = {"User-Agent": "kvmon sweep", "Accept": "application/json, text/event-stream, */*;q=0.1",
                   "Connection": "close"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(base_url=self.base_url, headers=headers, trust_env=False,
                                    timeout=httpx.Timeout(READ_SILENCE_S, connect=CONNECT_S))
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    def cancel(self) -> None:
        """End the request under way now (its server sees the connection closed) and refuse any later one."""
        self._cancelled.set()
        with self._lock:
            sock = self._sock
        if sock is not None:
            with suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._client.close()

    def _words(self, text: str) -> str:
        return scrub(" ".join(text.split())[:300], self._secrets)

    def _fail(self, path: str, exc: Exception) -> SweepFailed:
        if self._cancelled.is_set():
            return SweepCancelled("cancelled")
        if isinstance(exc, httpx.TimeoutException):
            return SweepFailed(f"{self.display_url}{path} sent nothing for {READ_SILENCE_S:g} s")
        if isinstance(exc, httpx.ConnectError):
            return SweepFailed(f"cannot connect to {self.display_url}")
        return SweepFailed(f"{self.display_url}{path} failed: {self._words(str(exc)) or type(exc).__name__}")

    def _refused(self, path: str, resp: httpx.Response) -> SweepFailed:
        body = resp.read()
        msg = doc = None
        with suppress(InputError):
            doc = parse_json(body)
        if isinstance(doc, dict):
            err = doc.get("error")
            msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else doc.get("detail")
        if not isinstance(msg, str) or not msg:
            msg = body[:200].decode("utf-8", "replace")
        return SweepFailed(f"{self.display_url}{path} answered HTTP {resp.status_code}: {self._words(msg)}")

    def read_json(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """GET (or POST ``body``) and read one JSON document (cancellable while it is awaited)."""
        text = b"\n".join(line for _t, line in self.stream(path, body))
        try:
            return parse_json(text)
        except InputError:
            raise SweepFailed(f"{self.display_url}{path} did not answer JSON") from None

    def stream(self, path: str, body: dict[str, Any] | None) -> Iterator[tuple[float, bytes]]:
        """POST ``body`` (GET without one) and yield each line of the answer with the monotonic time it arrived."""
        if self._cancelled.is_set():
            raise SweepCancelled("cancelled")
        try:
            req = self._client.build_request("GET" if body is None else "POST", path, json=body)
            resp = self._client.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise self._fail(path, exc) from None
        try:
            stream = resp.extensions.get("network_stream")
            with self._lock:
                self._sock = stream.get_extra_info("socket") if stream is not None else None
            if self._cancelled.is_set():  # cancelled while the head was on its way
                self.cancel()
                raise SweepCancelled("cancelled")
            if resp.status_code >= 400:
                raise self._refused(path, resp)
            try:
                buf = b""
                for chunk in resp.iter_raw():
                    now = time.monotonic()
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        yield now, line.rstrip(b"\r")
                    if len(buf) > MAX_LINE_BYTES:
                        raise SweepFailed(f"{self.display_url}{path} sent a line over {MAX_LINE_BYTES >> 20} MiB")
                if buf.strip():
                    yield time.monotonic(), buf
            except httpx.HTTPError as exc:
                raise self._fail(path, exc) from None
        finally:
            with self._lock:
                self._sock = None
            resp.close()


def json_lines(lines: Iterator[tuple[float, bytes]], prefix: bytes = b"") -> Iterator[tuple[float, dict[str, Any]]]:
    """The JSON objects of a stream's lines (``prefix``: b"data: " for server-sent events), with their times; other
    lines (blank, comments, ``[DONE]``) are passed over."""
    for t, line in lines:
        if not line.startswith(prefix):
            continue
        line = line[len(prefix):].strip()
        if not line or line == b"[DONE]":
            continue
        try:
            obj = parse_json(line)
        except InputError:
            continue
        if isinstance(obj, dict):
            yield t, obj


def filler_text(tokens: int, chars_per_token: float) -> str:
    """About ``tokens`` tokens of filler as text, at the characters per token the server's counts have shown."""
    n = max(1, int(tokens * chars_per_token))
    return (FILLER * (n // len(FILLER) + 1))[:n]


class ServerSweep:
    """One server driven through a growing conversation (``kvmon.app.sweep.DepthSweep`` drives it): the requests to
    it, the model asked for, the depth reached; each backend's class (``Backend.sweep``) says how a step is asked and
    timed."""

    timing: Timing = "server"
    prefill_generate = 1  # the tokens a prefill asks for (a server that can generate none asks for 0)
    chars_per_token = 4.0  # of the filler, until a server that takes text has counted its tokens

    def __init__(self, base_url: str, *, api_key: str | None = None, model_id: str | None = None,
                 model_name: str | None = None) -> None:
        self.http = SweepHttp(base_url, api_key=api_key)
        self.display_url = self.http.display_url
        self.model_id = model_id  # the model every request names (a router's model)
        self.model_name = model_name  # the server's name for the model the dashboard shows
        self.model: str | None = None  # the model the requests name, once prepare() has found it loaded
        self.filler_ids: list[int] = []  # the filler as the server's token ids (a server that takes token ids)
        self._depth = 0

    def prepare(self, slot: int | None) -> None:
        """Check the model is there as loaded (nothing reloads) and make ready; raises SweepFailed."""
        raise NotImplementedError

    def step(self, upto: int, generate: int) -> StepTiming:
        """One request: the conversation at ``upto`` tokens, ``generate`` tokens asked for, timed."""
        raise NotImplementedError

    def tokenize_filler(self, path: str, body: dict[str, Any]) -> None:
        """The filler as the server's own token ids (its ``/tokenize`` answers ``{"tokens": [...]}``)."""
        tokens = self.http.read_json(path, body)
        tokens = tokens.get("tokens") if isinstance(tokens, dict) else None
        self.filler_ids = [t for t in tokens or () if isinstance(t, int) and not isinstance(t, bool) and t >= 0]
        if not self.filler_ids:
            raise SweepFailed(f"{self.display_url}/tokenize gave no tokens for the filler text")

    def filler_prompt(self, n: int) -> list[int]:
        """``n`` tokens (at least one) of the filler as the server tokenized it, repeated."""
        return (self.filler_ids * (n // len(self.filler_ids) + 1))[:max(1, n)]

    def counted(self, text: str, depth: int | None, server: str) -> int:
        """The prompt's tokens as the server counted them (the filler's characters per token are learnt from it)."""
        if not depth:
            raise SweepFailed(f"{server} did not count the prompt's tokens")
        self.chars_per_token = len(text) / depth
        return depth

    def new_tokens(self, depth: int) -> int:
        """The prompt tokens a step at ``depth`` added to the one before (all of them when the conversation did not
        grow: the server then read it from the start)."""
        new = depth - self._depth if depth > self._depth else depth
        self._depth = depth
        return new

    def cancel(self) -> None:
        """From any thread: end the request under way (the server cancels it) and every later one."""
        self.http.cancel()

    def close(self) -> None:
        self.http.close()
