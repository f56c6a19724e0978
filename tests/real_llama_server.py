"""A real llama.cpp server (b11549, from the pinned ``xllamacpp`` wheel) in a subprocess, for tests.

``RealLlamaServer(model, ["-c", "4096", ...], log_path).start()`` runs ``llama_server_child.py`` on a free
loopback port, waits for ``READY`` and a 200 from ``/health``, and keeps the server's whole stderr in
``log_path``. ``stop()`` sends SIGTERM and, if the server has not gone in a few seconds, SIGKILL. The
server runs with one thread (``-t 1``) and the KV/context log lines on (``-lv 4``) unless told otherwise.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

CHILD = Path(__file__).resolve().parent / "llama_server_child.py"
LLAMA_CPP_BUILD = "b11549"  # what xllamacpp 2026.10.11549 embeds (its /props says b0-unknown: no build number set)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0
LOG_SETTLE_S = 10.0  # how long a server that failed to start may take to write its reason to the log

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
