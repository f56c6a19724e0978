"""Driving a depth sweep: a first short request measures the prefill rate (so the cost can be said before the sweep
starts), then one conversation grows depth by depth, its prompt read in pieces short enough that a cancel frees the
server at once, and at each depth ``generate`` tokens are timed.

The plan and the table are ``kvmon.core.sweep``; how each server is asked is its backend's sweep class
(``Backend.sweep``: ``kvmon.sources.<backend>.sweep``). ``DepthSweep.run`` blocks: the dashboard runs it on a thread
of its own and ``cancel()`` may come from any thread.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from kvmon.app.monitor import Emitter
from kvmon.core.backend import Backend
from kvmon.core.curve_identity import snapshot_config
from kvmon.core.snapshot import Snapshot
from kvmon.core.sweep import (
    Outcome,
    StepTiming,
    SweepCancelled,
    SweepFailed,
    SweepPlan,
    SweepResult,
    SweepRow,
    rows_of,
)
from kvmon.sources.sweep_http import ServerSweep

CALIBRATION_TOKENS = 512  # the first request's prompt (one ubatch): the prefill rate the cost is said at
CALIBRATION_GENERATE = 8
# a prompt is read in pieces of about PIECE_S, so that a cancel is felt soon; never under one ubatch (llama.cpp's
# 512), which costs as much as a whole one where layers stream over PCIe
PIECE_S = 0.5
PIECE_MIN, PIECE_MAX, PIECE_ROUND = 512, 4096, 64
PREFILL_MIN_TOKENS = 64  # a step that read fewer prompt tokens has no prefill rate worth a number
Phase = Literal["calibrating", "reading", "generating", "done"]
N = TypeVar("N", int, float)


def backend_words(name: str | None) -> Backend:
    """A backend's words by its name (the dashboard asks through here: it imports no source)."""
    from kvmon.sources.backends import by_name

    return by_name(name)


@dataclass(frozen=True)
class Progress:
    """Where a sweep stands: what it does, the depths measured so far, the time left."""

    phase: Phase
    step: int  # depths measured
    steps: int
    depth_tokens: int  # the conversation's depth now
    deepest: int
    eta_s: float | None
    rows: tuple[SweepRow, ...] = ()


def piece_tokens(prefill_tok_s: float | None) -> int:
    """How many prompt tokens one request reads: about ``PIECE_S`` at the latest prefill rate."""
    if not prefill_tok_s:
        return PIECE_MIN
    n = int(prefill_tok_s * PIECE_S) // PIECE_ROUND * PIECE_ROUND
    return max(PIECE_MIN, min(PIECE_MAX, n))


class DepthSweep:
    """One sweep of one server along a plan; ``calibrate()`` then ``run()``, ``cancel()`` from anywhere."""

    def __init__(self, target: ServerSweep, plan: SweepPlan, snapshot: Snapshot, *,
                 on_progress: Callable[[Progress], None] | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        if plan.refusal:
            raise SweepFailed(plan.refusal)
        self.target = target
        self.plan = plan
        self.snapshot = snapshot
        self._on_progress = on_progress or (lambda _p: None)
        self._wall = wall
        self._cancel = threading.Event()
        self.prefill_tok_s: float | None = None  # the latest measured rates
        self.decode_tok_s: float | None = None
        self._requests: list[StepTiming] = []  # every request's timing, the calibration's included
        self._depth = 0
        self._measured: list[tuple[StepTiming, float | None, int | None]] = []
        self._prepared = False
        self._calibration_s = 0.0  # what the first request took (a dialog runs it before the user presses Start)

    def cancel(self) -> None:
        """Stop now: the request under way is cancelled on the server, and no other is sent."""
        self._cancel.set()
        self.target.cancel()

    def _check(self) -> None:
        if self._cancel.is_set():
            raise SweepCancelled("cancelled")

    def _note(self, t: StepTiming) -> None:
        self._requests.append(t)
        if t.prefill_tok_s:
            self.prefill_tok_s = t.prefill_tok_s
        if t.decode_tok_s:
            self.decode_tok_s = t.decode_tok_s
        self._depth = t.depth_tokens

    def eta_s(self) -> float | None:
        """Seconds left at the latest rates."""
        if not self.prefill_tok_s or not self.decode_tok_s:
            return None
        left = self.plan.depths[len(self._measured):]
        prompt = max(0, self.plan.deepest - self._depth) if left else 0
        return prompt / self.prefill_tok_s + len(left) * self.plan.generate / self.decode_tok_s

    def _progress(self, phase: Phase) -> None:
        rows = rows_of(self._measured, self.snapshot.ceiling_curve)
        done = self.plan.deepest if phase == "done" else self._depth
        self._on_progress(Progress(phase, len(self._measured), len(self.plan.depths), done, self.plan.deepest,
                                   0.0 if phase == "done" else self.eta_s(), rows))

    def calibrate(self) -> float | None:
        """Measure the prefill and decode rates on a short prompt (the start of the sweep's own conversation); the
        sweep's time at those rates. Raises SweepFailed (SweepCancelled) when the server cannot be swept."""
        t0 = time.monotonic()
        self._progress("calibrating")
        if not self._prepared:
            self.target.prepare(self.plan.slot)
            self._prepared = True
        self._check()
        n = max(2, min(CALIBRATION_TOKENS, self.plan.deepest))
        self._note(self.target.step(n, CALIBRATION_GENERATE))
        self._calibration_s = time.monotonic() - t0
        return self.plan.seconds(self.prefill_tok_s, self.decode_tok_s)

    def run(self) -> SweepResult:
        """Measure every depth of the plan (calibrating first if not done); a cancel or a failure ends it early with
        what was measured so far and the reason."""
        started_unix, t0 = self._wall(), time.monotonic()
        outcome: Outcome = "done"
        reason: str | None = None
        calibrated = self._prepared and self.prefill_tok_s is not None
        try:
            if not calibrated:
                self.calibrate()
            for depth in self.plan.depths:
                self._step(depth)
        except SweepCancelled:
            outcome, reason = "cancelled", "cancelled before the last depth"
        except SweepFailed as exc:
            outcome, reason = "failed", str(exc)
        finally:
            self.target.close()
        self._progress("done")
        wall = time.monotonic() - t0 + (self._calibration_s if calibrated else 0.0)  # the time the user waited aside
        return self.result(outcome, reason, started_unix, wall)

    def _step(self, depth: int) -> None:
        """Read the conversation up to ``depth`` in pieces, then time ``generate`` tokens there."""
        first = len(self._requests)
        # the first piece may find a shorter prefix cached (the calibration's tokens diverge after the first)
        pos = min(self._depth, depth) if self._measured else min(1, depth)
        while depth - pos > piece_tokens(self.prefill_tok_s):
            self._check()
            self._progress("reading")
            t = self.target.step(pos + piece_tokens(self.prefill_tok_s), self.target.prefill_generate)
            if t.depth_tokens <= pos:
                raise SweepFailed(f"the conversation did not grow past {pos:,} tokens")
            self._note(t)
            pos = t.depth_tokens
        self._check()
        self._progress("generating")
        t = self.target.step(depth, self.plan.generate)
        self._note(t)
        reqs = self._requests[first:]
        added, secs = sum(r.added or 0 for r in reqs), _total([r.prompt_s for r in reqs])
        prefill = added / secs if added >= PREFILL_MIN_TOKENS and secs else None
        self._measured.append((t, prefill, _total([r.prompt_tokens_read for r in reqs])))
        self._progress("generating")

    def result(self, outcome: Outcome, reason: str | None, started_unix: float, wall_s: float) -> SweepResult:
        """The sweep so far as its result."""
        s = self.snapshot
        return SweepResult(
            server=self.target.display_url, backend=str(s.backend) if s.backend else None,
            server_version=s.server_version, model=s.model.name, config=snapshot_config(s), generate=self.plan.generate,
            rows=rows_of(self._measured, s.ceiling_curve), ceiling_curve=s.ceiling_curve,
            started_unix_s=started_unix, wall_s=wall_s, outcome=outcome, reason=reason,
            prompt_tokens_read=_total([r.prompt_tokens_read for r in self._requests]), notes=self.plan.notes)


def _total(values: list[N | None]) -> N | None:
    """The sum of a step's (or a sweep's) requests, None once one of them did not say."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def target_for(monitor: Emitter, snapshot: Snapshot, api_key: str | None = None) -> ServerSweep:
    """How to sweep the server a monitor watches: its own source's server (a router's or llama-swap's model: the one
    followed, read where the monitor reads it), with the key that source sends."""
    followed = snapshot.serving.followed if snapshot.serving is not None else None
    source = monitor.source_of(followed)
    base_url = getattr(source, "base_url", None)  # a source of a server kvmon reads over HTTP
    if source is None or not base_url:
        raise SweepFailed("no model of this server can be swept from here" if followed is None else
                          f"{followed} cannot be read from here")
    backend = source.backend if isinstance(source.backend, Backend) else Backend(str(source.backend))
    if not backend.sweep:
        raise SweepFailed(f"kvmon cannot sweep {backend.label}")
    module, _, name = backend.sweep.partition(":")
    # a router's model: every request names it; the server's name for the model shown: a server holding several
    # loaded sweeps that one
    target: ServerSweep = getattr(importlib.import_module(module), name)(
        base_url, api_key=source.request_key() if hasattr(source, "request_key") else api_key,
        model_id=getattr(source, "model_id", None), model_name=snapshot.model.server_name)
    return target
