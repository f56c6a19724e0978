"""A monitoring session, without Qt: a monitor factory (called again on every reconnect), its banner, its
recording switch and the analysis settings every poll reads; the command line's settings."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvmon.app.record import RecordSwitch
from kvmon.core.analysis import AnalyzerSettings
from kvmon.core.snapshot import Snapshot


class MonitorLike(Protocol):
    """What a session hands its user: ``kvmon.app.monitor.Monitor``, or a stand-in with the same two calls."""

    def poll(self) -> Snapshot: ...

    def close(self) -> None: ...



@dataclass
class Session:
    """A monitor factory (called again on every reconnect), a banner to show, and what to stop at the end.

    Every monitor the factory makes records through ``recorder``; ``sim`` is the in-process simulator of a demo.
    """

    factory: Callable[[], MonitorLike]
    banner: str | None = None
    url: str | None = None
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    sim: Any = None
    recorder: RecordSwitch = field(default_factory=RecordSwitch)
    # what the analysis reads each poll: the command line's, updated when the user changes settings (bandwidths)
    settings: AnalyzerSettings | None = None
    # a stepped demo's clients catching up with the simulated time now (the LM Studio demo's chat), before a poll
    settle: Callable[[], None] = lambda: None

    def current_settings(self) -> AnalyzerSettings | None:
        """The settings the next poll is analysed with (a monitor asks before every poll)."""
        return self.settings

    def close(self) -> None:
        """Stop the simulator and anything else started for this session, then the recording."""
        for fn in [*reversed(self.cleanups), self.recorder.stop]:
            try:
                fn()
            except Exception as exc:  # shutting down: report, do not raise
                print(f"kvmon: cleanup failed: {exc}", file=sys.stderr)
        self.cleanups.clear()



def settings_from_args(args: argparse.Namespace) -> AnalyzerSettings | None:
    """The analysis settings the command line asks for (``--bandwidth DEVICE=GB/s``, repeatable), or None."""
    from kvmon.core.analysis.settings import with_bandwidths

    specs = list(getattr(args, "bandwidth", None) or [])
    return with_bandwidths(AnalyzerSettings(), specs) if specs else None

