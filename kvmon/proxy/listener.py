"""The proxy's listening socket and its accept loop, bounded so that idle or slow clients cannot lock others out.

- Open client connections are bounded per client address (``PER_ADDRESS``) and in all: ``MAX_CONNECTIONS``, and
  never more than the process's descriptor limit allows (each relayed connection holds two descriptors, the
  client's and the upstream's). Past a bound, the connection that has waited longest for a request head is
  closed for the new one (``kvmon.core.admission``), else the new one is.
- When accepting fails all the same (the system is out of descriptors or memory), the failures are counted, said
  on stderr at most once a second, and accepting is tried again a moment later, never in a tight loop.

asyncio's own ``start_server`` writes a traceback for every failed accept and, past the descriptor limit, tries
again at once for every connection waiting: tens of thousands a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import resource
import socket
import sys
import time
from collections.abc import Awaitable, Callable

from kvmon.core.admission import Admission

BACKLOG = socket.SOMAXCONN
PER_ADDRESS = 256  # one machine's clients (a chat UI streams several replies at once, each on a connection)
MAX_CONNECTIONS = 1024
RESERVED_FDS = 64  # descriptors left for the listening socket, the version probe, logs and libraries
RETRY_S = 0.1  # after an accept failed for want of descriptors or memory
LOG_EVERY_S = 1.0
_OUT_OF = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

OnConnection = Callable[[socket.socket, str, float], Awaitable[None]]


def connection_limit(fds_per_connection: int = 2) -> int:
    """The most client connections this process can hold open: ``MAX_CONNECTIONS``, or fewer under a lower
    descriptor limit (``ulimit -n``)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, (soft - RESERVED_FDS) // fds_per_connection))


class Listener:
    """Accepts connections on (host, port) and runs ``on_connection(sock, address, accepted_at)`` for each one
    admitted; ``admission`` says which are open and waiting for a head (the caller marks ``started``/``waiting``
    and ``release``)."""

    def __init__(self, host: str, port: int, on_connection: OnConnection, *, backlog: int = BACKLOG) -> None:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        self.socket = sock
        self.port = int(sock.getsockname()[1])
        self.admission = Admission(PER_ADDRESS, connection_limit())
        self.accept_failures = 0
        self._unsaid = 0  # failures since the last line on stderr
        self._said_at = -LOG_EVERY_S
        self._on_connection = on_connection
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Accept until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(self.socket)
            except OSError as e:
                if e.errno in _OUT_OF:
                    self._failed(e)
                    await asyncio.sleep(RETRY_S)
                continue  # a connection reset while it waited in the queue: the next one
            conn.setblocking(False)
            address = str(addr[0]) if isinstance(addr, tuple) else ""
            if not self.admission.admit(conn, address, lambda c=conn: _shut(c)):
                conn.close()
                continue
            task = loop.create_task(self._run(conn, address, loop.time()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, conn: socket.socket, address: str, accepted_at: float) -> None:
        try:
            await self._on_connection(conn, address, accepted_at)
        finally:
            self.admission.release(conn)
            conn.close()

    def _failed(self, e: OSError) -> None:
        self.accept_failures += 1
        self._unsaid += 1
        now = time.monotonic()
        if now - self._said_at >= LOG_EVERY_S:
            print(f"kvmon proxy: cannot accept connections ({e.strerror or e}): {self._unsaid} failed since the "
                  f"last message, {len(self.admission)} connections open; trying again", file=sys.stderr, flush=True)
            self._said_at, self._unsaid = now, 0

    async def close(self) -> None:
        """Stop accepting and end every connection."""
        self.socket.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _shut(sock: socket.socket) -> None:
    """End a connection its task serves: its reads see the end at once, and the task closes it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
