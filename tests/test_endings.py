"""kvmon ends cleanly when told to: SIGTERM (a logout, ``systemctl stop``, a package upgrade) or SIGINT (Ctrl-C) to
the dashboard, ``serve``, ``proxy`` and ``sim``, each run as a user runs it (a process of its own), closes what it
holds — the recording with its last line whole, the open connections, the sockets, the pollers — and exits 0, even
with a poll or a stream under way. Each is checked by its exit status and by what it leaves.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers_http import FixtureServer, serve_llama_state, wait_until
from test_proxy_stream import Script, Upstream, chunk

from kvmon.core.recorder import read_recording

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]
SIGNALS = [signal.SIGTERM, signal.SIGINT]
IDS = ["SIGTERM", "SIGINT"]


class Lines:
    """A child's stdout and stderr, read on threads, so the test can wait for a line without blocking."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._lock = threading.Lock()
        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def find(self, pattern: str, timeout_s: float = 30.0) -> re.Match[str]:
        found: list[re.Match[str]] = []
        wait_until(lambda: found.append(m) or True if (m := re.search(pattern, self.text())) else False, timeout_s)
        assert found, f"no {pattern!r} in:\n{self.text()}\nexit status {self.proc.poll()}"
        return found[0]


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"), "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
            "KVMON_SERVE_INTERVAL": "0.3", "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator:
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Lines:
        proc = subprocess.Popen([sys.executable, "-m", "kvmon", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                env=env or _env(tmp_path))
        procs.append(proc)
        return Lines(proc)

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _end(lines: Lines, sig: signal.Signals, within_s: float = 20.0) -> float:
    """Send ``sig``; the exit status (asserted 0) and how long the ending took."""
    t0 = time.monotonic()
    lines.proc.send_signal(sig)
    try:
        rc = lines.proc.wait(within_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {within_s:g} s after {sig.name}:\n{lines.text()}")
    took = time.monotonic() - t0
    assert rc == 0, f"exit status {rc} after {sig.name}:\n{lines.text()}"
    assert "Traceback" not in lines.text(), lines.text()
    return took


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


@pytest.mark.parametrize("sig", SIGNALS, ids=IDS)
def test_the_dashboard_closes_its_recording_whole_and_exits_0(spawn, tmp_path: Path, sig: signal.Signals) -> None:
    # started on an older kvmon's settings, whose remembered key sits in a file others can read (no keychain here)
    conf = tmp_path / "home" / ".config" / "kvmon" / "kvmon.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("[connection]\nremember_key=true\napi_key=old-key-7781\n", encoding="utf-8")
    conf.chmod(0o644)
    rec = tmp_path / "session.jsonl"
    lines = spawn("--demo", "seed-3090x2", "--record", str(rec), "--interval", "0.2")
    assert wait_until(lambda: rec.exists() and rec.read_text(encoding="utf-8").count("\n") >= 4, 60), lines.text()
    assert conf.stat().st_mode & 0o777 == 0o600 and "readable by you alone (0600)" in lines.text()
    assert "old-key-7781" not in lines.text()
    _end(lines, sig)
    text = rec.read_text(encoding="utf-8")
    assert text.endswith("\n")
    for line in text.splitlines():
        json.loads(line)  # every line whole, the last one too
    back = read_recording(rec)
    assert len(back.snapshots) >= 3 and not back.skipped_lines


def test_the_dashboard_ends_with_a_poll_hung_on_its_server(spawn, tmp_path: Path) -> None:
    server = FixtureServer()
    serve_llama_state(server, "generating")
    rec = tmp_path / "hung.jsonl"
    try:
        lines = spawn(server.url, "--record", str(rec), "--interval", "0.2", "--timeout", "2")
        assert wait_until(lambda: rec.exists() and rec.read_text(encoding="utf-8").count("\n") >= 3, 60), \
            lines.text()
        for path in ("/health", "/props", "/slots", "/metrics"):  # now it hangs, a poll waiting on it
            server.hang(path, 60.0)
        time.sleep(0.5)
        took = _end(lines, signal.SIGTERM)
    finally:
        server.stop()
    assert took < 10.0  # the poll under way ends at its deadline
    for line in rec.read_text(encoding="utf-8").splitlines():
        json.loads(line)


@pytest.mark.parametrize("sig", SIGNALS, ids=IDS)
def test_serve_closes_its_socket_and_pollers_and_exits_0(spawn, sig: signal.Signals) -> None:
    server = FixtureServer()
    serve_llama_state(server, "idle")
    try:
        lines = spawn("serve", server.url, "--listen", "127.0.0.1:0", "--timeout", "1")
        port = int(lines.find(r"at http://127\.0\.0\.1:(\d+)/metrics").group(1))
        assert wait_until(lambda: "kvmon_up" in httpx.get(f"http://127.0.0.1:{port}/metrics").text, 20)
        for path in ("/health", "/props", "/slots"):  # a poll under way waits on a hung server
            server.hang(path, 60.0)
        time.sleep(0.5)
        took = _end(lines, sig)
    finally:
        server.stop()
    assert took < 10.0
    assert _refused(port)


@pytest.mark.parametrize("sig", SIGNALS, ids=IDS)
def test_proxy_ends_its_connections_and_exits_0(spawn, sig: signal.Signals) -> None:
    up = Upstream()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    first = chunk(b'{"message":{"content":"a"},"done":false}\n')
    up.routes["/api/chat"] = lambda body: Script([head, first, chunk(b"never sent\n")], gated=True)
    client = None
    try:
        lines = spawn("proxy", "--listen", "127.0.0.1:0", "--upstream", up.url)
        port = int(lines.find(r"kvmon proxy: http://127\.0\.0\.1:(\d+) ->").group(1))
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        client.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}")
        got = b""
        while len(got) < len(head + first):  # a stream under way
            got += client.recv(65536)
        took = _end(lines, sig)
        rest = b""
        while data := client.recv(65536):
            rest += data
    finally:
        if client is not None:
            client.close()
        for _ in range(3):
            up.gate.release()
        up.stop()
    assert got + rest == head + first  # the bytes relayed stay as they were; then the connection is closed
    assert took < 10.0 and "stopped" in lines.text()
    assert _refused(port)


@pytest.mark.parametrize("sig", SIGNALS, ids=IDS)
def test_sim_stops_serving_removes_its_files_and_exits_0(spawn, sig: signal.Signals) -> None:
    lines = spawn("sim", "--scenario", "seed-3090x2", "--port", "0")
    url = lines.find(r"at (http://127\.0\.0\.1:\d+)").group(1)
    log = Path(lines.find(r"server log \(kvmon --log\): (\S+)").group(1))
    assert httpx.get(url + "/health").status_code == 200 and log.exists()
    _end(lines, sig)
    assert "stopped" in lines.text()
    assert not log.exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=1.0)
