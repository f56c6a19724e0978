"""A built-in scenario watched in the real dashboard, poll by poll, and what its widgets showed after each poll.

The demo session is the one ``kvmon --demo`` opens (the simulator in-process over real HTTP, kvmon's real sources,
monitor and analysis); the window and its poller are ``kvmon.gui.app.build_window``'s. Only the clock is the test's:
the simulator's time stands still and moves on by the watch's step before each poll (``sim.step``), and the poller's
worker is asked for that poll in its own thread, so a loaded machine cannot shift what the story shows when.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets
from stories import Watch

from kvmon.core.snapshot import Snapshot
from kvmon.gui import theme
from kvmon.gui.panels.alerts import STATE_TEXT

POLL_WAIT_S = 30.0  # the most one poll may take before the run is given up (a hung poll is a failure)
CONNECTION_TEXTS = tuple(text for _level, text in STATE_TEXT.values())


@dataclass(frozen=True)
class SeenBar:
    """One memory bar as painted: its label, the bytes of each coloured part, its note."""

    label: str
    parts: dict[str, float]
    note: str

    def gib(self, quantity: str) -> float:
        return self.parts.get(quantity, 0.0) / 1024**3


@dataclass(frozen=True)
class SeenAlert:
    """One line of the alerts panel: its level, its alert code (None for the connection's or the server's own line)
    and its words."""

    level: str
    code: str | None
    text: str


@dataclass(frozen=True)
class Seen:
    """What the window showed after one poll, read from its widgets (``snapshot``: what it was made from, for the
    depth a moment is found at and for the messages of a failed check)."""

    t_s: float
    snapshot: Snapshot
    speed: str  # the header's big number, always decode: "30.5 tok/s" (now, or the last one), "—"
    efficiency: str  # beside it: "of 44.7 ceiling · 68%", "last reply, 12 s ago · ceiling 44.3 tok/s here"
    context: str  # "context 12.3K of 32.8K tokens"
    devices: str  # "NVIDIA GeForce RTX 4090", "CPU · DDR5-6000 · 62.0 GB/s", "… + CPU"
    model: str
    status: str  # the status bar's connection words
    bars: tuple[SeenBar, ...]
    alerts: tuple[SeenAlert, ...]
    forecast: tuple[np.ndarray, np.ndarray]  # the forecast curve drawn on the speed-vs-context plot
    ceiling: tuple[np.ndarray, np.ndarray]  # the ceiling curve drawn there
    milestones: dict[int, str] = field(default_factory=dict)  # the forecast's label at each milestone depth shown
    chips: dict[str, str] = field(default_factory=dict)  # a router's or llama-swap's model chips
    headline: str = ""  # the verdict's sentence as the header draws it (whole)
    headline_colour: str = ""  # its colour, "#rrggbb"
    live: bool = False  # the big number was measured at this poll (drawn in the decode colour, not dimmed)
    prompt: str = ""  # the prompt's own slot

    def bar(self, label: str) -> SeenBar | None:
        return next((b for b in self.bars if b.label == label), None)

    def connection_line(self) -> str | None:
        """The alerts panel's connection line ("Model loading…"), when there is one."""
        return next((a.text for a in self.alerts if a.code is None and a.text.startswith(CONNECTION_TEXTS)), None)


def _curve(item: object) -> tuple[np.ndarray, np.ndarray]:
    x, y = getattr(item, "xData", None), getattr(item, "yData", None)
    if x is None or y is None:
        return np.empty(0), np.empty(0)
    return np.asarray(x, dtype=float), np.asarray(y, dtype=float)


def read_window(win: object, t_s: float, snap: Snapshot) -> Seen:
    """Everything the story checks, as the window's widgets show it now."""
    w: object = win
    h = w.header  # type: ignore[attr-defined]
    panel = w.speed_context  # type: ignore[attr-defined]
    bars = tuple(SeenBar(b.label, _sum_parts(b.segments), b.note) for b in w.memory.bars.bars)  # type: ignore[attr-defined]
    alerts = tuple(SeenAlert(level, code, text) for (level, text, _tip), code  # type: ignore[attr-defined]
                   in zip(w.alerts.lines, w.alerts.codes, strict=True))  # type: ignore[attr-defined]
    milestones = panel.milestone_labels()
    models = w.models  # type: ignore[attr-defined]
    chips = {name: chip.whole_text() for name, chip in models.chips.items()} if models.isVisible() else {}
    colour = h.headline.palette().color(QtGui.QPalette.ColorRole.WindowText).name()
    live = h.speed.palette().color(QtGui.QPalette.ColorRole.WindowText).name() == theme.hex_color("decode")
    return Seen(t_s, snap, h.speed.whole(), h.efficiency.whole(), h.context.whole(), h.gpus.whole(), h.model.whole(),
                _plain(w.status.connection.text()), bars, alerts,  # type: ignore[attr-defined]
                _curve(panel.forecast), _curve(panel.ceiling), milestones, chips, h.headline.whole(), colour, live,
                h.prompt.whole())


def _plain(text: str) -> str:
    """A label's text as it reads (a rich-text label's markup left out)."""
    if not QtGui.Qt.mightBeRichText(text):
        return text
    return QtGui.QTextDocumentFragment.fromHtml(text).toPlainText()


def _sum_parts(segments: tuple[object, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for seg in segments:
        q = seg.quantity  # type: ignore[attr-defined]
        out[q] = out.get(q, 0.0) + float(seg.value)  # type: ignore[attr-defined]
    return out


def _pump_until(app: QtWidgets.QApplication, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + POLL_WAIT_S
    while not done():
        app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 20)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no snapshot within {POLL_WAIT_S:.0f} s ({what})")
        time.sleep(0.001)


def watch_in_window(scenario: str, watch: Watch, *, size: tuple[int, int] = (1280, 800), scheme: str = "system",
                    on_poll: Callable[[object, Seen], None] | None = None) -> list[Seen]:
    """Open the dashboard on ``scenario`` joined ``watch.start_at_s`` in, poll every ``watch.step_s`` simulated
    seconds up to ``watch.until_s``, and return what the window showed after each poll (window and simulator are
    closed at the end). ``scheme``: the theme (View ▸ Theme); ``on_poll(window, seen)`` may look at the window
    itself (a screenshot)."""
    from kvmon.app.demo import demo_session
    from kvmon.gui.app import build_window, ensure_app
    from kvmon.gui.settings import Settings

    app = ensure_app(["kvmon"])
    session = demo_session(scenario, None, start_at_s=watch.start_at_s, stepped=True)
    scratch = tempfile.TemporaryDirectory(prefix="kvmon-story-")
    win = poller = None
    try:
        sim = session.sim
        # simulated time stands still (stepped): only the steps below move it
        # the worker polls once when it starts, then only when asked (its own timer would wait an hour)
        settings = Settings(os.path.join(scratch.name, "s.ini"))
        settings.scheme = scheme
        win, poller = build_window(session, settings, 3600.0, tray=False)
        win.resize(*size)
        win.set_window_range("session")
        win.show()
        got: list[Snapshot] = []
        poller.snapshot.connect(got.append)  # after the window's own slot: the panels are drawn when it runs
        seen: list[Seen] = []
        session.settle()
        poller.start()
        while True:
            n = len(seen)
            _pump_until(app, lambda: len(got) > n, f"{scenario} at {sim.clock.now():.0f} s")  # noqa: B023
            shown = read_window(win, sim.clock.now(), got[-1])
            seen.append(shown)
            if on_poll is not None:
                on_poll(win, shown)
            if sim.clock.now() >= watch.until_s - 1e-9:
                return seen
            sim.step(watch.step_s)
            session.settle()
            QtCore.QMetaObject.invokeMethod(poller.worker, "poll_once", QtCore.Qt.ConnectionType.QueuedConnection)
    finally:
        if poller is not None:
            poller.stop()
        if win is not None:
            win.close()
            win.deleteLater()
        session.close()
        app.processEvents()
        scratch.cleanup()


def demo_snapshots(scenario: str, start_at_s: float, seconds: float, step_s: float) -> list[Snapshot]:
    """The snapshots of ``kvmon once --demo SCENARIO --start-at S`` polled every ``step_s`` simulated seconds for
    ``seconds`` (the once command's own demo session and steps); the session is closed after."""
    from kvmon.app.demo import demo_session, step_demo

    session = demo_session(scenario, None, start_at_s=start_at_s, stepped=True)
    try:
        return list(step_demo(session, seconds, step_s))
    finally:
        session.close()


def watch_in_once_json(scenario: str, watch: Watch) -> list[tuple[float, dict[str, object]]]:
    """The documents ``kvmon once --demo SCENARIO --start-at S --after N --interval STEP --json`` prints for every N
    the watch reaches: the once command's own demo session and steps (``kvmon.app.demo.step_demo``), each snapshot made
    the JSON it prints, and read back."""
    import json

    from kvmon.app.demo import demo_session, step_demo
    from kvmon.core.report_json import snapshot_to_json

    session = demo_session(scenario, None, start_at_s=watch.start_at_s, stepped=True)
    try:
        return [(session.sim.clock.now(), json.loads(json.dumps(snapshot_to_json(snap), allow_nan=False)))
                for snap in step_demo(session, watch.until_s - watch.start_at_s, watch.step_s)]
    finally:
        session.close()
