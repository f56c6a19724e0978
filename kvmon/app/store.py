"""One watched server's session, kept once: every Snapshot is eaten here and nowhere else.

The store holds the plot history (its series, the measured points and the serving events), the report card's
tally and the last poll's state (the Snapshot, how many polls, errors, how long the last took). The window, the
report card and ``kvmon serve`` all read a store; none keeps a copy of its own. A store is fed from one thread (the
window's, or one exporter poll thread); ``state`` is replaced whole, so a reader on another thread sees one poll's
Snapshot with that poll's counts, never a mix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvmon.core.history import DEFAULT_CAPACITY, History
from kvmon.core.points import MeasuredPoints
from kvmon.core.snapshot import Snapshot
from kvmon.core.summary import Tally

# what an exporter keeps of each server: ten minutes at 1 Hz (a scrape reads only the last poll)
EXPORTER_CAPACITY = 600


@dataclass(frozen=True)
class PollState:
    """What the last poll produced: the Snapshot, how many polls so far, how many failed inside kvmon, how long the
    last one took."""

    snapshot: Snapshot | None = None
    polls: int = 0
    errors: int = 0
    last_poll_duration_s: float | None = None


class SessionStore:
    """A server's session: history, measured points, events, tally and the last poll, fed by ``eat``."""

    def __init__(self, history: History | None = None, *, capacity: int = DEFAULT_CAPACITY) -> None:
        self.history = history if history is not None else History(capacity)
        self.tally = Tally(self.history.points)  # the live report card reads it; its points are the history's
        self.state = PollState()

    @property
    def points(self) -> MeasuredPoints:
        """The measured (context, tok/s) points: the hero plot's bins, the forecast's dots, the report card's sample."""
        return self.history.points

    @property
    def last(self) -> Snapshot | None:
        """The newest Snapshot eaten (None before the first, and after ``clear``)."""
        return self.state.snapshot

    def eat(self, s: Snapshot, *, duration_s: float | None = None, error: bool = False) -> bool:
        """Take one poll's Snapshot into every part of the store; True when it showed another model (the measured
        points started again). ``error``: the poll failed inside kvmon (a bug, counted apart from server trouble)."""
        restarted = self.history.append(s)
        self.tally.add(s)
        st = self.state
        self.state = PollState(s, st.polls + 1, st.errors + (1 if error else 0),
                               duration_s if duration_s is not None else st.last_poll_duration_s)
        return restarted

    def load(self, snapshots: Iterable[Snapshot]) -> bool:
        """Take a whole recording at once; True when a model change on the way restarted the points."""
        restarted = False
        for s in snapshots:
            restarted = self.eat(s) or restarted
        return restarted

    def clear(self) -> None:
        """Forget the session (another URL, a replay): history, points, events, tally and the last poll."""
        self.history.clear()
        self.tally = Tally(self.history.points)
        self.state = PollState()
