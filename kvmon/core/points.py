"""The session's measured (context tokens, decode tok/s) points: one store, fed by Snapshots, with one rule for what
a point is and one for when "the model changed".

The forecast fit (``kvmon.core.analysis``) reads the newest points, the speed-vs-context plot the mean per context
bin (``ContextBins``: a day of polls draws a few hundred dots, not 86,400), the history's time windows the points
with their times, and the report card a sample of the whole session. All of them are fed by the same
``add(snapshot)``, and all of them start again when the model changes, so the dots and the fit never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvmon.core.snapshot import ModelView, SlotView, Snapshot

DEFAULT_CAPACITY = 24 * 3600  # points kept with their times: a day at 1 Hz
BIN_TOKENS = 256
SAMPLE_MAX = 20000  # the whole-session sample is thinned (every other point) when it reaches this many

ModelKey = tuple[Any, ...]


def model_key(url: str | None, model: ModelView) -> ModelKey | None:
    """What "the model" is to the session's measurements: the server, the model's name, architecture and size, its
    context and cache types (any of them changes the speed at a depth). None when nothing names a model (an idle
    Ollama, a failed poll): that changes nothing."""
    if model.name is None:
        return None
    return (url, model.name, model.arch, model.weight_bytes, model.n_ctx, model.kv_type_k, model.kv_type_v)


def measured_point(slots: Sequence[SlotView], context_tokens: int | None,
                   decode_tok_s: float | None) -> tuple[float, float] | None:
    """This poll's (context tokens, decode tok/s) point, or None.

    A point is a measured decode speed at a known depth while at most one conversation generates (two at once share
    the memory bus: neither speed belongs to its depth alone); the speed is the deepest conversation's own when the
    server reports one per slot.
    """
    if decode_tok_s is None or context_tokens is None:
        return None
    active = [s for s in slots if s.processing and s.context_tokens is not None]
    if len(active) > 1:
        return None
    pool = active or [s for s in slots if s.context_tokens is not None]
    deepest = max(pool, key=lambda s: s.context_tokens or 0) if pool else None
    rate = deepest.decode_tok_s if deepest is not None and deepest.decode_tok_s else decode_tok_s
    ctx, tok_s = float(context_tokens), float(rate)
    if not (math.isfinite(ctx) and math.isfinite(tok_s)) or ctx < 0:
        return None
    return ctx, tok_s


class ContextBins:
    """Measured decode speed averaged per context-depth bin: the hero plot's points, cheap at any history length."""

    def __init__(self, bin_tokens: int = BIN_TOKENS) -> None:
        self.bin_tokens = bin_tokens
        self._sum = np.zeros(0)
        self._count = np.zeros(0, dtype=np.int64)
        self.version = 0

    def add(self, context_tokens: float | None, decode_tok_s: float | None) -> None:
        """Record one measured point; unknown values are ignored."""
        if context_tokens is None or decode_tok_s is None:
            return
        if not (math.isfinite(context_tokens) and math.isfinite(decode_tok_s)) or context_tokens < 0:
            return
        b = int(context_tokens // self.bin_tokens)
        if b >= self._sum.size:
            grow = max(b + 1, 2 * self._sum.size)
            self._sum = np.concatenate([self._sum, np.zeros(grow - self._sum.size)])
            self._count = np.concatenate([self._count, np.zeros(grow - self._count.size, dtype=np.int64)])
        self._sum[b] += decode_tok_s
        self._count[b] += 1
        self.version += 1

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(bin centre in tokens, mean tok/s) of the bins holding measurements."""
        nz = np.nonzero(self._count)[0]
        return (nz + 0.5) * self.bin_tokens, self._sum[nz] / self._count[nz]

    def clear(self) -> None:
        """Forget all points (a new model was loaded)."""
        self._sum = np.zeros(0)
        self._count = np.zeros(0, dtype=np.int64)
        self.version += 1


class MeasuredPoints:
    """The session store: the newest ``capacity`` points with their times, the per-bin means of all of them and a
    thinned sample of the whole session (at most ``sample_max``), for the current model."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, bin_tokens: int = BIN_TOKENS,
                 sample_max: int = SAMPLE_MAX) -> None:
        self.capacity = max(1, int(capacity))
        self.sample_max = sample_max
        self.bins = ContextBins(bin_tokens)
        self.model: ModelKey | None = None
        self.version = 0  # moves on every change
        self._data = np.empty((min(self.capacity, 1024), 3))  # rows of (t, context, tok/s); grows to capacity
        self._head = 0
        self._count = 0
        self._sample: list[tuple[int, float]] = []
        self._thin = 1  # every _thin-th point goes into the sample
        self._seen = 0

    def __len__(self) -> int:
        return self._count

    # -- feeding

    def add(self, snap: Snapshot) -> bool:
        """Take one Snapshot: start again if it shows another model, keep its point if it has one.

        Returns True when the model changed (and what was measured before was dropped). A poll that read no server
        changes nothing.
        """
        if not snap.server_read:
            return False
        changed = self.observe_model(model_key(snap.url, snap.model))
        point = measured_point(snap.slots, snap.context_tokens, snap.decode_tok_s)
        if point is not None:
            self._append(snap.t_monotonic, *point)
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

    def _append(self, t: float, context_tokens: float, tok_s: float) -> None:
        if self._count == len(self._data) < self.capacity:
            self._grow()
        self._data[self._head] = (t, context_tokens, tok_s)
        self._head = (self._head + 1) % len(self._data)
        self._count = min(self._count + 1, len(self._data))
        self.bins.add(context_tokens, tok_s)
        if self.sample_max > 0:
            self._seen += 1
            if self._seen % self._thin == 0:
                self._sample.append((int(context_tokens), tok_s))
                if len(self._sample) >= self.sample_max:
                    self._sample = self._sample[::2]
                    self._thin *= 2
        self.version += 1

    def _grow(self) -> None:
        rows = self._rows()
        self._data = np.empty((min(self.capacity, 2 * len(self._data)), 3))
        self._data[: len(rows)] = rows
        self._head = len(rows) % len(self._data)

    def clear(self) -> None:
        """Forget every point and the model (a new session)."""
        self.model = None
        self._forget()

    def _forget(self) -> None:
        self._head = self._count = 0
        self._sample, self._thin, self._seen = [], 1, 0
        self.bins.clear()
        self.version += 1

    # -- reading

    def _rows(self, n: int | None = None) -> np.ndarray:
        """The newest ``n`` rows (all when None), oldest first, as a copy."""
        n = self._count if n is None else min(n, self._count)
        if n <= 0:
            return self._data[:0].copy()
        start = (self._head - n) % len(self._data)
        if start < self._head:
            return self._data[start:self._head].copy()
        return np.concatenate((self._data[start:], self._data[:self._head]))

    def latest(self, n: int | None = None) -> np.ndarray:
        """The newest ``n`` points (all kept when None) as rows of (context tokens, tok/s), oldest first: the fit's."""
        return self._rows(n)[:, 1:]

    def since(self, t0: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(context tokens, tok/s) of the points measured at ``t0`` or later (all kept when None), oldest first."""
        rows = self._rows()
        if t0 is not None:
            rows = rows[np.searchsorted(rows[:, 0], t0, side="left"):]
        return rows[:, 1], rows[:, 2]

    def sample(self) -> tuple[tuple[int, float], ...]:
        """The whole session's points, thinned to at most ``sample_max``: the report card's."""
        return tuple(self._sample)
