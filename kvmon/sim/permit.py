"""The device doubles (``fake_nvml``, ``devices``) run only where a demo or a test asked for them.

A fake GPU or host answering in a real session would show invented numbers as facts, so each double asks
``require`` when it is made, and only the simulator (``SimServer``: the demo, ``kvmon sim``, ``once --demo``, the
self-test), the test suite and the benchmarks ``allow`` them.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_granted: set[str] = set()


class DoublesRefused(RuntimeError):
    """A device double was made where no demo or test asked for one."""


def allow(why: str) -> None:
    """Let the device doubles run in this process (``why``: "the simulator", "tests", "benchmark")."""
    with _lock:
        _granted.add(why)


def require(what: str) -> None:
    """Raise DoublesRefused unless a demo or a test asked for the doubles."""
    with _lock:
        granted = bool(_granted)
    if not granted:
        raise DoublesRefused(f"{what} is a simulated device (a test double): it runs only in the demo "
                             "(kvmon --demo, kvmon sim) and the tests, never as a reading of this machine")
