"""Which client connections an exporter or a proxy that others can reach keeps open: bounded per client address and
in all, so that slow or silent clients cannot take every thread, every descriptor or every slot.

A connection is *waiting* from its accept until its request head is complete (and, on a kept-alive connection,
again between requests). Past a bound, the connection that has waited longest for its head, if it has waited at
least ``evict_after_s`` (an honest client sends its head at once), is closed to make room for the new one; else the
new one is refused. No I/O here: the caller gives each connection a ``close`` to call, and uses the verdicts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

EVICT_AFTER_S = 1.0


@dataclass
class _Entry:
    address: str
    since: float  # accepted, or back to waiting for the next head
    waiting: bool
    close: Callable[[], None]


class Admission:
    """Open connections by client address: at most ``per_address`` from one and ``total`` in all (see the module)."""

    def __init__(self, per_address: int, total: int, *, evict_after_s: float = EVICT_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_address = per_address
        self.total = total
        self.evict_after_s = evict_after_s
        self._clock = clock
        self._open: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()
        self.refused = 0  # connections closed at once: their address (or the whole server) was full
        self.evicted = 0  # connections closed for a newer one after waiting too long for their head

    def admit(self, key: Hashable, address: str, close: Callable[[], None]) -> bool:
        """Whether the new connection ``key`` from ``address`` may stay open; a waiting one may be closed for it."""
        closing: list[Callable[[], None]] = []
        with self._lock:
            now = self._clock()
            ok = True
            mine = [e for e in self._open.items() if e[1].address == address]
            if len(mine) >= self.per_address:
                ok = self._evict(mine, now, closing)
            if ok and len(self._open) >= self.total:
                ok = self._evict(list(self._open.items()), now, closing)
            if ok:
                self._open[key] = _Entry(address, now, True, close)
            else:
                self.refused += 1
        for c in closing:
            c()
        return ok

    def _evict(self, entries: list[tuple[Hashable, _Entry]], now: float,
               closing: list[Callable[[], None]]) -> bool:
        waiting = [(e.since, k) for k, e in entries if e.waiting and now - e.since >= self.evict_after_s]
        if not waiting:
            return False
        _, victim = min(waiting, key=lambda w: w[0])
        closing.append(self._open.pop(victim).close)
        self.evicted += 1
        return True

    def since(self, key: Hashable) -> float | None:
        """When ``key`` was accepted (or began waiting again), on this object's clock."""
        with self._lock:
            e = self._open.get(key)
            return e.since if e is not None else None

    def started(self, key: Hashable) -> None:
        """``key``'s request head is complete: it is served, never closed for another."""
        with self._lock:
            e = self._open.get(key)
            if e is not None:
                e.waiting = False

    def waiting(self, key: Hashable) -> None:
        """``key`` waits for its next request head (a kept-alive connection between requests)."""
        with self._lock:
            e = self._open.get(key)
            if e is not None:
                e.waiting, e.since = True, self._clock()

    def release(self, key: Hashable) -> None:
        """``key`` is closed (or was never admitted)."""
        with self._lock:
            self._open.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)
