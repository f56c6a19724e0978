"""A real llama.cpp server (b11549, from the pinned ``xllamacpp`` wheel) in a subprocess, for tests.

``RealLlamaServer(model, ["-c", "4096", ...], log_path).start()`` runs ``llama_server_child.py`` on a free
loopback port, waits for ``READY`` and a 200 from ``/health``, and keeps the server's whole stderr in
``log_path``. ``stop()`` sends SIGTERM and, if the server has not gone in a few seconds, SIGKILL. The
server runs with one thread (``-t 1``) and the KV/context log lines on (``-lv 4``) unless told otherwise.

``TimedReply(url, body)`` streams a completion whose every chunk carries the server's own timing of the reply so far:
the truth about its speed over any span of tokens, by the server's clock, which a loaded machine cannot starve the
way it starves a test's own sampling.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

CHILD = Path(__file__).resolve().parent / "llama_server_child.py"
LLAMA_CPP_BUILD = "b11549"  # what xllamacpp 2026.10.11549 embeds (its /props says b0-unknown: no build number set)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
LOG_SETTLE_S = 10.0  # how long a server that failed to start may take to write its reason to the log
# kvmon's timeout against a real server in tests: its default, 3 s, is a promise to a user about a server that does
# not answer; these tests are about what it says, on a machine that may be slow to let it say it
KVMON_TIMEOUT_S = 30.0

MIB = 1024 * 1024
LISTENING = "init: listening on "  # the server's last start-up line
# llama_kv_cache: size =    4.00 MiB (  4096 cells,   4 layers,  1/1 seqs), K (f16):    2.00 MiB, V (f16):    2.00 MiB
KV_LINE = re.compile(r"llama_kv_cache: size = +([0-9.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
                     r"K \((\w+)\): +([0-9.]+) MiB, V \((\w+)\): +([0-9.]+) MiB")
# llama_memory_recurrent: size =    0.06 MiB (     1 cells,   4 layers,  1 seqs  0 rs_seq), R (f32): ...
RS_LINE = re.compile(r"llama_memory_recurrent: size = +([0-9.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs")


class ServerFailed(RuntimeError):
    """The server did not come up; the message ends with the last lines of its log."""


class RealLlamaServer:
    """One llama.cpp server process with its log file."""

    def __init__(self, model: Path, args: Sequence[str], log_path: Path, *, threads: int = 1,
                 verbosity: int = 4) -> None:
        self.model = Path(model)
        self.args = list(args)
        self.log_path = Path(log_path)
        self.argv = [sys.executable, str(CHILD), "-m", str(self.model), *self.args]
        if "-t" not in self.args:
            self.argv += ["-t", str(threads)]
        if "-lv" not in self.args:
            self.argv += ["-lv", str(verbosity)]
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> RealLlamaServer:
        """Start the server and wait until it answers ``/health`` with 200."""
        log = open(self.log_path, "w", encoding="utf-8")  # the child writes it until it stops
        try:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                         text=True, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        line = self._read_line(deadline)
        if not line.startswith("READY "):
            self._wait_log_settled()
            self.stop()
            raise ServerFailed(f"{line.strip() or 'no answer'}; log: {self.log_tail()}")
        self.url = line.split(None, 1)[1].strip()
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        else:
            self.stop()
            raise ServerFailed(f"/health never answered 200; log: {self.log_tail()}")
        # llama.cpp logs from a worker thread: on a busy machine the file can lag behind /health. Its lines come
        # in order, so once the "listening on" line is there every load line (KV sizes included) is too.
        while time.monotonic() < deadline:
            if any(LISTENING in line for line in self.log_lines()):
                return self
            time.sleep(0.05)
        self.stop()
        raise ServerFailed(f"the log never said the server was listening; log: {self.log_tail()}")

    def _wait_log_settled(self) -> None:
        """A server that failed: its last log lines (the reason) may still be on the way from the log thread, which
        a stop would cut short: let it exit on its own, and the file stop growing (at most LOG_SETTLE_S)."""
        end = time.monotonic() + LOG_SETTLE_S
        if self.proc is not None:
            try:
                self.proc.wait(LOG_SETTLE_S)
            except subprocess.TimeoutExpired:
                pass
        size, steady = -1, 0
        while time.monotonic() < end and steady < 3:
            try:
                now = self.log_path.stat().st_size
            except OSError:
                return
            steady = steady + 1 if now == size else 0
            size = now
            time.sleep(0.1)

    def _read_line(self, deadline: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(timeout=0.2):
                    return self.proc.stdout.readline()
                if self.proc.poll() is not None:
                    return self.proc.stdout.readline()
        return ""

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a few seconds; always leaves no process behind."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> RealLlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()

    def log_tail(self, n: int = 12) -> str:
        try:
            return " | ".join(self.log_lines()[-n:])
        except OSError:
            return "(no log)"

    def kv_lines(self) -> list[re.Match[str]]:
        """Every ``llama_kv_cache: size = …`` line of this run (two for a sliding-window model)."""
        return [m for m in map(KV_LINE.search, self.log_lines()) if m]

    def recurrent_lines(self) -> list[re.Match[str]]:
        """Every ``llama_memory_recurrent: size = …`` line of this run."""
        return [m for m in map(RS_LINE.search, self.log_lines()) if m]


def mib_matches(n_bytes: int, printed_mib: str) -> bool:
    """Whether ``n_bytes`` prints as ``printed_mib`` with llama.cpp's ``%.2f`` of MiB (±half a hundredth)."""
    return abs(n_bytes / MIB - float(printed_mib)) <= 0.005 + 1e-6


def sse_lines(resp: httpx.Response) -> Iterator[str]:
    """A streamed body's lines, split at "\n" alone: httpx's ``iter_lines`` also splits at U+2028 and U+0085, which a
    model may generate inside a JSON string (a random-weight one did, and the reader lost the rest of its reply)."""
    rest = b""
    for chunk in resp.iter_bytes():
        *lines, rest = (rest + chunk).split(b"\n")
        for line in lines:
            yield line.rstrip(b"\r").decode("utf-8", errors="replace")
    if rest:
        yield rest.decode("utf-8", errors="replace")


class TimedReply:
    """A ``/completion`` streamed on a thread with ``timings_per_token``: each chunk says how many tokens the server
    has generated (``predicted_n``) and how long it took it (``predicted_ms``), so the server's decode speed over any
    span of tokens (``rate_between``) comes from the server's own clock. Leaving the ``with`` ends the reply (the
    connection closes and the server stops generating)."""

    def __init__(self, url: str, body: Mapping[str, Any]) -> None:
        self.url = url
        self.body = {**body, "stream": True, "timings_per_token": True}
        self.points: list[tuple[int, float]] = []  # (tokens generated, ms the server spent on them)
        self.final: dict[str, Any] | None = None  # the last chunk's timings, once the reply ended
        self.status: int | None = None
        self.done = threading.Event()
        self._leave = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> TimedReply:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._leave.set()
        self._thread.join(10)

    def _read(self) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0)) as client, \
                    client.stream("POST", f"{self.url}/completion", json=self.body) as resp:
                self.status = resp.status_code
                for line in sse_lines(resp):
                    if self._leave.is_set():
                        return
                    if not line.startswith("data: "):
                        continue
                    chunk = json.loads(line[6:])
                    timings = chunk.get("timings") or {}
                    with self._cond:
                        n = timings.get("predicted_n")
                        if n and (not self.points or n > self.points[-1][0]):
                            self.points.append((int(n), float(timings["predicted_ms"])))
                        if chunk.get("stop"):
                            self.final = timings
                        self._cond.notify_all()
        except httpx.HTTPError:
            pass
        finally:
            with self._cond:
                self.done.set()
                self._cond.notify_all()

    def wait_tokens(self, n: int, timeout_s: float = 120.0) -> None:
        """Wait until the server has said it generated ``n`` tokens (AssertionError if it never does)."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while not (self.points and self.points[-1][0] >= n) and not self.done.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if not (self.points and self.points[-1][0] >= n):
                raise AssertionError(f"the server said {self.points[-1][0] if self.points else 0} tokens, not {n}")

    def ms_at(self, n: float) -> float:
        """The server's generation time (ms) at ``n`` tokens, between the two chunks around it (a chunk may say
        several tokens at once); AssertionError outside what the server has said."""
        with self._cond:
            points = list(self.points)
        for (na, ma), (nb, mb) in itertools.pairwise(points):
            if na <= n <= nb:
                return ma + (mb - ma) * (n - na) / (nb - na)
        raise AssertionError(f"the server said nothing of token {n} (it said {points[:1]} to {points[-1:]})")

    def rate_between(self, n0: float, n1: float) -> float:
        """Tokens per second from ``n0`` to ``n1`` tokens, by the server's clock."""
        self.wait_tokens(math.ceil(n1))
        return (n1 - n0) / ((self.ms_at(n1) - self.ms_at(n0)) / 1000.0)

    def token_s(self) -> float:
        """The server's mean time per generated token so far (seconds)."""
        with self._cond:
            (n0, m0), (n1, m1) = self.points[0], self.points[-1]
        return (m1 - m0) / 1000.0 / max(1, n1 - n0)
