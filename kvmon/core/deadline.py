"""One deadline per poll: every request made while a poll runs (whichever source, client or thread-local helper
makes it) must be answered by the poll's end, so a server that hangs costs a poll at most the user's timeout
however many requests the poll makes.

The poll opens the scope (``with poll_deadline(timeout_s):``); the HTTP layer asks ``current_deadline()`` before
each request. Scopes nest: inside one, a new one never ends later than the one around it. The deadline remembers
which request was waiting when it ran out, so the requests it leaves unasked can say why, and whether anything
answered at all (a poll in which nothing answered and something timed out read nothing). Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class PollDeadline:
    """The monotonic instant ``at`` by which a poll's requests must be answered; ``seconds`` is its length."""

    at: float
    seconds: float
    spent_on: str | None = None  # the request that was waiting when the time ran out ("http://host:port/path")
    answered: int = 0  # requests of the poll that got an answer
    timeouts: list[str] = field(default_factory=list)  # why each request that got no answer in time did not

    def note_answer(self) -> None:
        self.answered += 1

    def note_timeout(self, reason: str) -> None:
        if len(self.timeouts) < 64:
            self.timeouts.append(reason)

    def mark(self) -> tuple[int, int]:
        """Where the poll stands now (for ``read_nothing_since``)."""
        return self.answered, len(self.timeouts)

    def read_nothing_since(self, mark: tuple[int, int] = (0, 0)) -> str | None:
        """Why the requests made since ``mark`` (default: the poll's start) read nothing: they timed out and none
        was answered; None when something answered, or nothing timed out."""
        answered, timed_out = mark
        if self.answered > answered or len(self.timeouts) <= timed_out:
            return None
        return self.timeouts[timed_out]

_CURRENT: contextvars.ContextVar[PollDeadline | None] = contextvars.ContextVar("kvmon_poll_deadline", default=None)


def current_deadline() -> PollDeadline | None:
    """The deadline of the poll running in this thread (context), if any."""
    return _CURRENT.get()


@contextlib.contextmanager
def poll_deadline(seconds: float | None) -> Iterator[PollDeadline | None]:
    """Run a poll whose requests must all be answered ``seconds`` from now (None or infinite: no deadline of its
    own); inside another poll's deadline, the sooner of the two stands."""
    outer = _CURRENT.get()
    if seconds is None or not math.isfinite(seconds):
        yield outer
        return
    at = time.monotonic() + max(0.0, seconds)
    if outer is not None and outer.at <= at:
        yield outer
        return
    token = _CURRENT.set(PollDeadline(at, seconds))
    try:
        yield _CURRENT.get()
    finally:
        _CURRENT.reset(token)
