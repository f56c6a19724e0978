"""The session's measured (context tokens, decode tok/s) points: one store, fed by Snapshots, with one rule for what
a point is and one for when "the model changed".

The forecast fit (``kvmon.core.analysis``) reads the newest points, the speed-vs-context plot the mean per context
bin (``ContextBins``: a day of polls draws a few hundred dots, not 86,400), and the report card a sample of the
whole session. All of them are fed by the same ``add(snapshot)``, and all of them start again when the model
changes, so the dots and the fit never disagree.
Within one model, the snapshots' regimes (``Forecast.regime``: a reload, another n_ctx, a spill) split the bins:
``bins`` holds the current regime's points (the ones the fit reads), ``earlier_bins`` those of the regimes before.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvmon.core.lazy import lazy_import
from kvmon.core.rates import ENDED_REPLIES
from kvmon.core.snapshot import ModelView, SlotView, Snapshot

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")  # loaded with the first point, not with the window's first frame

DEFAULT_CAPACITY = 24 * 3600  # the newest points kept: a day at 1 Hz
BIN_TOKENS = 256
SAMPLE_MAX = 20000  # the whole-session sample is thinned (every other point) when it reaches this many

ModelKey = tuple[Any, ...]


def model_key(url: str | None, model: ModelView) -> ModelKey | None:
    """What "the model" is to the session's measurements: the server, the model's name, architecture and size. None
    when nothing names a model (an idle Ollama, a failed poll): that changes nothing. Another context size or cache
    type is the same model in another regime (``kvmon.core.analysis.regimes``)."""
    if model.name is None:
        return None
    return (url, model.name, model.arch, model.weight_bytes)


def measured_point(slots: Sequence[SlotView], context_tokens: int | None,
                   decode_tok_s: float | None, rate_source: str | None = None) -> tuple[float, float] | None:
    """This poll's (context tokens, decode tok/s) point, or None.

    A point is a measured decode speed at a known depth while at most one conversation generates (two at once share
    the memory bus: neither speed belongs to its depth alone); the speed is the deepest conversation's own when the
    server reports one per slot. The speed of replies that ended between polls ran at their own depths, not this
    poll's: no point.
    """
    if decode_tok_s is None or context_tokens is None or rate_source == ENDED_REPLIES:
        return None
    active: SlotView | None = None  # the one generating conversation
    deepest: SlotView | None = None  # the first of the deepest ones, when none generates
    for s in slots:
        depth = s.context_tokens
        if depth is None:
            continue
        if s.processing:
            if active is not None:
                return None
            active = s
        if deepest is None or depth > (deepest.context_tokens or 0):
            deepest = s
    deepest = active or deepest
    rate = deepest.decode_tok_s if deepest is not None and deepest.decode_tok_s else decode_tok_s
    ctx, tok_s = float(context_tokens), float(rate)
    if not (math.isfinite(ctx) and math.isfinite(tok_s)) or ctx < 0:
        return None
    return ctx, tok_s


def ring_tail(ring: np.ndarray, head: int, n: int) -> np.ndarray:
    """A copy of the ``n`` rows of ``ring`` written last (``head``: the next row to write), oldest first."""
    start = (head - n) % len(ring)
    if n == 0 or start < head:
        rows: np.ndarray = ring[start:start + n].copy()
        return rows
    return np.concatenate((ring[start:], ring[:head]))


class ContextBins:
    """Measured decode speed averaged per context-depth bin: the hero plot's points, cheap at any history length.
    A bin's point sits at the mean depth of its measurements (never past the deepest of them: a dot drawn at the
    bin's centre could stand ahead of the conversation)."""

    def __init__(self, bin_tokens: int = BIN_TOKENS) -> None:
        self.bin_tokens = bin_tokens
        # per bin: the sum of speeds, the count, the sum of depths; made when first used
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.version = 0

    def _bins(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0))
        return self._arrays

    def _grow(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        speeds, counts, depths = self._bins()
        if size > speeds.size:
            extra = size - speeds.size
            self._arrays = (np.concatenate([speeds, np.zeros(extra)]),
                            np.concatenate([counts, np.zeros(extra, dtype=np.int64)]),
                            np.concatenate([depths, np.zeros(extra)]))
        return self._bins()

    def add(self, context_tokens: float | None, decode_tok_s: float | None) -> None:
        """Record one measured point; unknown values are ignored."""
        if context_tokens is None or decode_tok_s is None:
            return
        if not (math.isfinite(context_tokens) and math.isfinite(decode_tok_s)) or context_tokens < 0:
            return
        b = int(context_tokens // self.bin_tokens)
        speeds, counts, depths = self._bins()
        if b >= speeds.size:
            speeds, counts, depths = self._grow(max(b + 1, 2 * speeds.size))
        speeds[b] += decode_tok_s
        counts[b] += 1
        depths[b] += context_tokens
        self.version += 1

    def merge(self, other: ContextBins) -> None:
        """Add every measurement of ``other`` (same bin width) to these bins."""
        theirs = other._bins()
        mine = self._grow(theirs[0].size)
        for a, b in zip(mine, theirs, strict=True):
            a[:b.size] += b
        self.version += 1

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean depth in tokens, mean tok/s) of the bins holding measurements, shallowest first."""
        speeds, counts, depths = self._bins()
        nz = np.nonzero(counts)[0]
        return depths[nz] / counts[nz], speeds[nz] / counts[nz]

    def clear(self) -> None:
        """Forget all points (a new model was loaded)."""
        self._arrays = None
        self.version += 1


@dataclass(frozen=True)
class RegimeStep:
    """How the speed changed when the current regime began: the last point measured before it, the n_ctx then, and
    the regime's own first point (what the speed-vs-context plot says at the change: "reloaded with 128K: 70 → 7
    tok/s"). None: not measured (nothing decoded before the change, or nothing since)."""

    before_tok_s: float | None = None
    before_n_ctx: int | None = None
    after_tok_s: float | None = None


class MeasuredPoints:
    """The session store: the newest ``capacity`` points, the per-bin means of all of them and a thinned sample of
    the whole session (at most ``sample_max``), for the current model."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, bin_tokens: int = BIN_TOKENS,
                 sample_max: int = SAMPLE_MAX) -> None:
        self.capacity = max(1, int(capacity))
        self.sample_max = sample_max
        self.bins = ContextBins(bin_tokens)  # the current regime's
        self.earlier_bins = ContextBins(bin_tokens)  # the regimes before it, of this model
        self.model: ModelKey | None = None
        self.regime = 0  # the snapshots' regime index the bins are of (0: none named yet)
        self.step: RegimeStep | None = None  # how the speed changed when the current regime began (None: the first)
        self._n_ctx: int | None = None  # the current regime's n_ctx, as last seen
        self._last_tok_s: float | None = None  # the newest point's speed
        self.version = 0  # moves on every change
        self._ring: np.ndarray | None = None  # a ring of (context, tok/s) rows, made with the first point
        self._head = 0
        self._count = 0
        self._sample_ctx = array("d")  # the whole-session sample, in two compact columns
        self._sample_tok_s = array("d")
        self._thin = 1  # every _thin-th point goes into the sample
        self._seen = 0

    def __len__(self) -> int:
        return self._count

    @property
    def _data(self) -> np.ndarray:
        if self._ring is None:
            self._ring = np.empty((self.capacity, 2))
        return self._ring

    # -- feeding

    def add(self, snap: Snapshot) -> bool:
        """Take one Snapshot: start again if it shows another model, keep its point if it has one.

        Returns True when the model changed (and what was measured before was dropped). A poll that read no server
        changes nothing.
        """
        return self.add_poll(snap.server_read, snap.url, snap.model, snap.slots,
                             snap.context_tokens, snap.decode_tok_s, snap.forecast.regime.index,
                             rate_source=snap.decode_rate_source)

    def add_poll(self, server_read: bool, url: str | None, model: ModelView,
                 slots: Sequence[SlotView], context_tokens: int | None, decode_tok_s: float | None,
                 regime: int = 0, *, rate_source: str | None = None) -> bool:
        """``add`` from the fields a Snapshot is made of (the analysis feeds its poll before the Snapshot exists)."""
        if not server_read:
            return False
        changed = self.observe_model(model_key(url, model))
        if regime and regime != self.regime:
            if self.regime and not changed:  # the same model in another regime: its points so far are earlier ones
                self.earlier_bins.merge(self.bins)
                self.bins.clear()
                self.step = RegimeStep(self._last_tok_s, self._n_ctx)
                self.version += 1
            self.regime = regime
        if model.n_ctx is not None:
            self._n_ctx = model.n_ctx
        point = measured_point(slots, context_tokens, decode_tok_s, rate_source)
        if point is not None:
            self._append(*point)
            if self.step is not None and self.step.after_tok_s is None:
                self.step = RegimeStep(self.step.before_tok_s, self.step.before_n_ctx, point[1])
        return changed

    def observe_model(self, key: ModelKey | None) -> bool:
        """Start again when ``key`` names another model than the one measured so far; True when it did."""
        if key is None or key == self.model:
            return False
        changed = self.model is not None
        self.model = key
        if changed:
            self._forget()
        return changed

    def _append(self, context_tokens: float, tok_s: float) -> None:
        head = self._head
        self._data[head] = (context_tokens, tok_s)
        self._head = (head + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)
        self._last_tok_s = tok_s
        self.bins.add(context_tokens, tok_s)
        if self.sample_max > 0:
            self._seen += 1
            if self._seen % self._thin == 0:
                self._sample_ctx.append(context_tokens)
                self._sample_tok_s.append(tok_s)
                while len(self._sample_ctx) >= max(2, self.sample_max):  # full: every other point, from now on too
                    self._sample_ctx, self._sample_tok_s = self._sample_ctx[::2], self._sample_tok_s[::2]
                    self._thin *= 2
        self.version += 1

    def clear(self) -> None:
        """Forget every point and the model (a new session)."""
        self.model = None
        self._forget()

    def _forget(self) -> None:
        self._head = self._count = 0
        self._sample_ctx, self._sample_tok_s = array("d"), array("d")
        self._thin, self._seen = 1, 0
        self.bins.clear()
        self.earlier_bins.clear()
        self.regime = 0
        self.step, self._n_ctx, self._last_tok_s = None, None, None
        self.version += 1

    # -- reading

    def latest(self, n: int | None = None) -> np.ndarray:
        """The newest ``n`` points (all kept when None) as rows of (context tokens, tok/s), oldest first: the fit's."""
        rows = ring_tail(self._data, self._head, self._count)
        return rows if n is None else rows[max(0, len(rows) - n):]

    def sample(self) -> tuple[tuple[int, float], ...]:
        """The whole session's points, thinned to at most ``sample_max``: the report card's."""
        return tuple(zip(map(int, self._sample_ctx), self._sample_tok_s, strict=True))
