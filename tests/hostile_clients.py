"""Hostile clients on 127.0.0.1 for ``kvmon serve`` and ``kvmon proxy``: connections that trickle a request head
a byte at a time or send nothing at all, kept open (each one the server closes is opened again), and an honest
client that times its requests meanwhile. Used by the exporter's and the proxy's tests and by
``bench/hostile_matrix.py`` (its slow-client and idle-connection modes).

Test doubles only: ``Attack.stop`` closes every connection it opened; nothing outlives its test.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ATTACKERS = tuple(f"127.0.0.{n}" for n in range(2, 10))  # eight other machines, as far as a server can tell
TRICKLE = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100_000


def raise_fd_limit(want: int) -> int:
    """This process's soft descriptor limit raised towards ``want`` (never past the hard one); the new soft."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def open_from_one_address(port: int, n: int, address: str = "127.0.0.3") -> list[socket.socket]:
    """``n`` connections to ``port`` on loopback, each from ``address`` (one client holding many connections)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((address, 0))
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


def still_open_after(socks: list[socket.socket], bound: int, within_s: float = 20.0) -> int:
    """How many of ``socks`` the server has not closed, once at most ``bound`` are or ``within_s`` has passed (a
    loaded machine may take a while to accept them all; a closed one reads as end of stream)."""
    deadline = time.monotonic() + within_s
    while True:
        n = 0
        for s in socks:
            s.setblocking(False)
            try:
                n += s.recv(1) != b""
            except BlockingIOError:
                n += 1
            except OSError:
                pass
        if n <= bound or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


@dataclass
class _Conn:
    sock: socket.socket
    slow: bool
    sent: int = 0


@dataclass
class AttackCounts:
    opened: int = 0  # connections made
    closed_by_server: int = 0  # ... that the server closed (or reset)
    failed: int = 0  # connect attempts that failed (refused, no descriptor)
    open_now: int = 0


class Attack:
    """Keeps ``slow`` connections trickling a request head (one byte every ``drip_s``) and ``silent`` ones sending
    nothing open to (host, port), from the source addresses ``sources`` in turn (on Linux all of 127.0.0.0/8 is
    this machine's: several attackers on one machine); one the server closes is opened again after ``reopen_s``
    (None: never). One thread, one selector."""

    def __init__(self, host: str, port: int, *, slow: int = 0, silent: int = 0,
                 sources: tuple[str, ...] = ("127.0.0.1",), drip_s: float = 1.0,
                 reopen_s: float | None = 0.5) -> None:
        self.host, self.port, self.sources = host, port, sources
        self._turn = 0
        self.want = [True] * slow + [False] * silent
        self.drip_s, self.reopen_s = drip_s, reopen_s
        self.counts = AttackCounts()
        self._stop = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._thread = threading.Thread(target=self._run, name="attack", daemon=True)

    def start(self) -> Attack:
        self._thread.start()
        return self

    def _open(self, slow: bool) -> _Conn | None:
        s = socket.socket()
        self._turn += 1
        try:
            s.bind((self.sources[self._turn % len(self.sources)], 0))
            s.setblocking(False)
            rc = s.connect_ex((self.host, self.port))
            if rc not in (0, errno.EINPROGRESS):
                raise OSError(rc, os.strerror(rc))
        except OSError:
            s.close()
            self.counts.failed += 1
            return None
        c = _Conn(s, slow)
        self._sel.register(s, selectors.EVENT_READ, c)
        self.counts.opened += 1
        return c

    def _run(self) -> None:
        reopen: list[tuple[float, bool]] = [(0.0, slow) for slow in self.want]
        conns: list[_Conn] = []
        next_drip = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            due = [r for r in reopen if r[0] <= now]
            reopen = [r for r in reopen if r[0] > now]
            for _, slow in due:
                c = self._open(slow)
                if c is not None:
                    conns.append(c)
                elif self.reopen_s is not None:
                    reopen.append((now + self.reopen_s, slow))
            if now >= next_drip:
                next_drip = now + self.drip_s
                for c in conns:
                    if c.slow and c.sent < len(TRICKLE):
                        with contextlib.suppress(OSError):
                            c.sent += c.sock.send(TRICKLE[c.sent:c.sent + 1])
            for key, _ in self._sel.select(timeout=0.05):
                c = key.data
                try:
                    data = c.sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    continue  # an answer (an error page): the server closes next
                self._sel.unregister(c.sock)
                c.sock.close()
                conns.remove(c)
                self.counts.closed_by_server += 1
                if self.reopen_s is not None:
                    reopen.append((time.monotonic() + self.reopen_s, c.slow))
            self.counts.open_now = len(conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.sock.close()
        self._sel.close()

    def stop(self) -> AttackCounts:
        self._stop.set()
        self._thread.join(5)
        return self.counts

    def __enter__(self) -> Attack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------- the honest client


@dataclass
class Timings:
    """How long each honest request took (seconds) and the failures (no answer within the client's timeout)."""

    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def quantile(self, q: float) -> float | None:
        if not self.seconds:
            return None
        s = sorted(self.seconds)
        return s[min(len(s) - 1, int(q * len(s)))]

    @property
    def worst_s(self) -> float | None:
        return max(self.seconds) if self.seconds else None

    def summary(self) -> str:
        def ms(v: float | None) -> str:
            return "—" if v is None else f"{v * 1000:.0f} ms"
        return (f"{len(self.seconds)} answered, {len(self.failures)} failed; p50 {ms(self.quantile(0.5))}, "
                f"p99 {ms(self.quantile(0.99))}, worst {ms(self.worst_s)}")


def http_get(host: str, port: int, path: str, *, timeout_s: float = 10.0, host_header: str | None = None,
             source: str = "127.0.0.1") -> tuple[int, bytes]:
    """One ``GET path`` on a fresh connection (``Connection: close``); (status, body). Raises OSError/TimeoutError."""
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s, source_address=(source, 0)) as s:
        hh = host_header if host_header is not None else f"{host}:{port}"
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {hh}\r\nConnection: close\r\n\r\n".encode("latin-1"))
        data = b""
        while True:
            s.settimeout(max(0.001, deadline - time.monotonic()))
            piece = s.recv(65536)
            if not piece:
                break
            data += piece
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                               if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(body) >= length:
                    break
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/"):
        raise OSError("no HTTP answer")
    return int(head.split()[1]), body


def time_requests(host: str, port: int, path: str, *, seconds: float, every_s: float = 0.2,
                  timeout_s: float = 10.0, ok: tuple[int, ...] = (200,)) -> Timings:
    """An honest client: ``GET path`` every ``every_s`` for ``seconds``, each timed; a request not answered with a
    status in ``ok`` within ``timeout_s`` (Prometheus's default scrape timeout is 10 s) is a failure."""
    t = Timings()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            status, _ = http_get(host, port, path, timeout_s=timeout_s)
            if status in ok:
                t.seconds.append(time.monotonic() - t0)
            else:
                t.failures.append(f"HTTP {status}")
        except OSError as e:
            t.failures.append(f"{type(e).__name__}: {e}"[:80])
        time.sleep(max(0.0, every_s - (time.monotonic() - t0)))
    return t


# --------------------------------------------------------------------------------------------- kvmon as a child


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def kvmon_child(argv: list[str], *, checkout: Path | None = None, fd_limit: int | None = None,
                env: dict[str, str] | None = None,
                stderr_path: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m kvmon ARGV`` as a child (kvmon from ``checkout`` when given), its descriptor limit set to
    ``fd_limit`` with ``resource.setrlimit`` before kvmon starts; stderr to ``stderr_path``. Ended on exit."""
    code = "import resource, sys\n"
    if fd_limit is not None:
        code += (f"_s, _h = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
                 f"resource.setrlimit(resource.RLIMIT_NOFILE, ({fd_limit}, _h))\n")
    code += "from kvmon.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    root = str(checkout) if checkout is not None else str(Path(__file__).resolve().parents[1])
    child_env = {**os.environ, **(env or {}), "PYTHONPATH": root}
    err = open(stderr_path, "wb") if stderr_path is not None else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-c", code, *argv], env=child_env, stdout=subprocess.DEVNULL,
                            stderr=err, cwd=root)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if err is not subprocess.DEVNULL:
            err.close()


def wait_answering(host: str, port: int, path: str, *, within_s: float = 20.0) -> bool:
    """Whether (host, port) answers ``GET path`` with 200 within ``within_s``."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        with contextlib.suppress(OSError):
            if http_get(host, port, path, timeout_s=2.0)[0] == 200:
                return True
        time.sleep(0.1)
    return False


# --------------------------------------------------------------------------------------------- the probes


@dataclass
class ProbeResult:
    """What an honest client saw during an attack, and what the attacked kvmon wrote to stderr."""

    name: str
    timings: Timings
    attack: AttackCounts
    stderr_bytes: int = 0
    stderr_lines: int = 0
    alive: bool = True
    note: str = ""

    def line(self) -> str:
        return (f"{self.name}: {self.timings.summary()}; attack opened {self.attack.opened} connections "
                f"({self.attack.closed_by_server} closed by kvmon, {self.attack.failed} failed to connect); "
                f"kvmon stderr {self.stderr_lines} lines, {self.stderr_bytes:,} bytes; "
                f"{'alive' if self.alive else 'DEAD'}{'; ' + self.note if self.note else ''}")


def slow_client_probe(*, slow: int, silent: int, seconds: float = 15.0, checkout: Path | None = None,
                      tmp: Path, sources: tuple[str, ...] = ATTACKERS) -> ProbeResult:
    """``kvmon serve`` on a llama-server double while ``slow`` connections trickle a request head a byte a second
    and ``silent`` ones send nothing (each reopened when closed), from ``sources``; an honest scraper on 127.0.0.1
    times ``GET /metrics`` every 0.2 s with Prometheus's default 10 s timeout."""
    from hostile_matrix import HostileServer, llama_routes

    port = free_port()
    err = tmp / f"serve-{slow}-{silent}.err"
    with HostileServer(llama_routes()) as llama, kvmon_child(
            ["serve", llama.url, "--listen", f"127.0.0.1:{port}", "--timeout", "1"], checkout=checkout,
            env={"KVMON_SERVE_INTERVAL": "1"}, stderr_path=err) as proc:
        if not wait_answering("127.0.0.1", port, "/metrics"):
            raise RuntimeError(f"kvmon serve did not answer: {err.read_text(errors='replace')[-800:]}")
        with Attack("127.0.0.1", port, slow=slow, silent=silent, sources=sources) as attack:
            time.sleep(min(3.0, seconds / 4))  # let the attack take hold
            timings = time_requests("127.0.0.1", port, "/metrics", seconds=seconds)
        alive = proc.poll() is None
    data = err.read_bytes()
    return ProbeResult(f"serve, {slow} slow + {silent} silent connections", timings, attack.counts,
                       len(data), data.count(b"\n"), alive)


def idle_connection_probe(*, attempts: int = 2000, fd_limit: int = 1024, seconds: float = 15.0,
                          checkout: Path | None = None, tmp: Path,
                          sources: tuple[str, ...] = ATTACKERS) -> ProbeResult:
    """``kvmon proxy`` (its descriptor limit ``fd_limit``) in front of a llama-server double while ``attempts``
    connections that never send a byte are made (each once); an honest client times ``GET /health`` through the
    proxy every 0.2 s with a 10 s timeout. Also counts what the proxy wrote to stderr."""
    from hostile_matrix import HostileServer, llama_routes

    raise_fd_limit(attempts + 512)
    port = free_port()
    err = tmp / f"proxy-{attempts}.err"
    with HostileServer(llama_routes()) as llama, kvmon_child(
            ["proxy", "--listen", f"127.0.0.1:{port}", "--upstream", llama.url], checkout=checkout,
            fd_limit=fd_limit, stderr_path=err) as proc:
        if not wait_answering("127.0.0.1", port, "/health"):
            raise RuntimeError(f"kvmon proxy did not answer: {err.read_text(errors='replace')[-800:]}")
        with Attack("127.0.0.1", port, silent=attempts, sources=sources, reopen_s=None) as attack:
            time.sleep(min(3.0, seconds / 4))
            timings = time_requests("127.0.0.1", port, "/health", seconds=seconds)
        alive = proc.poll() is None
    data = err.read_bytes()
    return ProbeResult(f"proxy (descriptor limit {fd_limit}), {attempts} idle connections attempted", timings,
                       attack.counts, len(data), data.count(b"\n"), alive)
