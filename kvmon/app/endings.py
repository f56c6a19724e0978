"""How kvmon's long-running commands end when told to: SIGTERM (a logout, ``systemctl stop``, a package upgrade) and
SIGINT (Ctrl-C) only ask the command to stop; it then closes what it holds (the recording, its sockets, its
pollers) and exits 0, never dying by the signal half-way through a write.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = ("SIGTERM", "SIGINT")


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """While inside, each of these signals calls ``stop`` (which must only ask: set an event, schedule a quit);
    the previous handlers come back on the way out. A signal this process was started with ignored (SIGINT under
    ``nohup`` or in a shell's background job) stays ignored. Off the main thread (a test running a command)
    nothing changes: Python takes signals there only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}
    try:
        for sig in catchable():
            old[sig] = signal.signal(sig, lambda *_: stop())
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def catchable(names: tuple[str, ...] = STOP_SIGNALS) -> list[signal.Signals]:
    """The signals of ``names`` this platform has and this process does not ignore."""
    found = [getattr(signal, name, None) for name in names]
    return [sig for sig in found if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN]
