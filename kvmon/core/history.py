"""Ring-buffer history of Snapshot series for the plots: 24 h at 1 Hz, preallocated numpy arrays.

Appending is O(1) (one row written, no loop over the buffer); views for the last 5 min / 1 h / the
session copy only the rows they return. Unknown values and polls without a server are NaN, so a plot
draws a gap, never a zero. The measured (context, tok/s) points are the session store's
(``kvmon.core.points``), fed by the same ``append``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvmon.core.fields import HISTORY_FIELDS
from kvmon.core.lazy import lazy_import
from kvmon.core.points import MeasuredPoints, ring_tail
from kvmon.core.snapshot import Snapshot

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")  # loaded with the first poll, not with the window's first frame

DEFAULT_CAPACITY = 24 * 3600  # 24 h at 1 Hz

# Scalar series taken from each Snapshot: the readings described as history series (kvmon.core.fields)
SERIES = tuple(f.name for f in HISTORY_FIELDS)
_SERIES_GET = tuple(f.get for f in HISTORY_FIELDS)
# Per-GPU series (name -> GpuView attribute).
GPU_SERIES = ("vram_used_bytes", "vram_free_bytes", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s",
              "achieved_bandwidth_bytes_per_s")
MAX_EVENTS = 1000  # model loads, unloads, sleeps and follows kept for the plots (a router's day fits many times)
# a new regime (``Forecast.regime.cause``) marked as an event: the server reloaded, or what the speed depends on changed
REGIME_EVENTS = {"reload": "reloaded", "model": "reloaded", "n_ctx": "changed", "cache_types": "changed",
                 "slots": "changed", "devices": "changed", "placement": "changed"}


@dataclass(frozen=True)
class Event:
    """A moment the plots mark: a model loaded, unloaded, fell asleep or woke, or another one followed; the server
    reloaded, or what decode speed depends on changed (a new regime)."""

    t_wall: float
    kind: str
    model: str
    message: str


def _f(value: float | int | None) -> float:
    return np.nan if value is None else float(value)


@dataclass(frozen=True)
class HistoryView:
    """Chronological copies of a time window: ``t`` (monotonic s), scalar ``series`` and ``gpu`` [row, gpu]."""

    t: np.ndarray
    t_wall: np.ndarray
    series: dict[str, np.ndarray]
    gpu: dict[str, np.ndarray]  # name -> array of shape (rows, n_gpus)

    def __len__(self) -> int:
        return len(self.t)


class _Ring:
    """A 2-D ring of float64 rows, allocated whole when first used."""

    def __init__(self, capacity: int, width: int) -> None:
        self._data: np.ndarray | None = None
        self.width = width
        self.capacity = capacity
        self.head = 0  # next row to write
        self.count = 0

    @property
    def data(self) -> np.ndarray:
        """The rows (NaN where never written)."""
        if self._data is None:
            self._data = np.full((self.capacity, self.width), np.nan)
        return self._data

    def append(self, row: np.ndarray | list[float]) -> None:
        """Write one row over the oldest."""
        self.data[self.head] = row
        self.head = (self.head + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def last_rows(self, n: int) -> np.ndarray:
        """The newest ``n`` rows in chronological order (a copy)."""
        return ring_tail(self.data, self.head, max(0, min(n, self.count)))

    def column_tail_count_since(self, col: int, t0: float) -> int:
        """How many of the newest rows have column ``col`` ≥ t0 (column sorted in time; binary search)."""
        if self.count == 0:
            return 0
        oldest = (self.head - self.count) % self.capacity
        if oldest < self.head:
            segs = [self.data[oldest:self.head, col]]
        else:
            segs = [self.data[oldest:, col], self.data[:self.head, col]]
        n = 0
        for seg in reversed(segs):
            i = int(np.searchsorted(seg, t0, side="left"))
            n += len(seg) - i
            if i > 0:
                break
        return n


class History:
    """Series of Snapshots for plotting; ``append`` per poll, ``view(window_s)`` per repaint."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, max_gpus: int = 8) -> None:
        self.capacity = capacity
        self.max_gpus = max_gpus
        self.points = MeasuredPoints(capacity)  # the session store: the plot's bins, the report card's sample
        self.clear()

    def clear(self) -> None:
        """Forget everything (a new session), the measured points too."""
        self._main = _Ring(self.capacity, 2 + len(SERIES))  # t, t_wall, series...
        # per-GPU columns are added as GPUs appear (float32: plenty for bytes and bytes/s on a plot)
        self._gpu_data: np.ndarray | None = None  # made with the first poll
        self._gpu_index: dict[int, int] = {}  # GPU index -> column
        self.points.clear()
        self.events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self.events_added = 0  # how many were ever added (a panel keeps its own count to draw only new ones)
        self._regime = 0  # the regime index of the last poll
        self.appended = 0

    def __len__(self) -> int:
        return self._main.count

    @property
    def _gpu(self) -> np.ndarray:
        """[row, series, GPU column] (float32)."""
        if self._gpu_data is None:
            self._gpu_data = np.full((self.capacity, len(GPU_SERIES), 0), np.nan, dtype=np.float32)
        return self._gpu_data

    def append(self, snap: Snapshot) -> bool:
        """Add one poll: O(1). No server → a NaN row (a gap in the plots). True when it showed another model
        (the measured points started again)."""
        row = np.empty(2 + len(SERIES))
        row[0] = snap.t_monotonic
        row[1] = snap.t_wall
        up = snap.server_read
        for i, get in enumerate(_SERIES_GET):
            row[2 + i] = _f(get(snap)) if up else np.nan
        head = self._main.head
        self._main.append(row)
        gpu_row = self._gpu[head]
        gpu_row.fill(np.nan)
        for g in snap.gpus:
            col = self._gpu_index.get(g.index)
            if col is None:
                if len(self._gpu_index) >= self.max_gpus:
                    continue
                col = self._gpu_index[g.index] = len(self._gpu_index)
                if col >= self._gpu.shape[2]:  # a new GPU: one more column (rare, O(capacity) once)
                    extra = np.full((self.capacity, len(GPU_SERIES), 1), np.nan, dtype=np.float32)
                    self._gpu_data = np.concatenate((self._gpu, extra), axis=2)
                    gpu_row = self._gpu[head]
            for j, name in enumerate(GPU_SERIES):
                value = getattr(g, name)
                if name == "achieved_bandwidth_bytes_per_s" and not up:
                    value = None
                gpu_row[j, col] = _f(value)
        self.appended += 1
        if snap.serving is not None:
            for e in snap.serving.events:
                self._event(Event(e.t_wall, e.kind, e.model, e.message))
        r = snap.forecast.regime
        if r.index and r.index != self._regime:
            kind = REGIME_EVENTS.get(r.cause or "")
            # a router's or llama-swap's model changes are their own events ("followed")
            if self._regime and kind is not None and (r.cause != "model" or snap.serving is None):
                words = r.description or kind
                self._event(Event(r.since_t_wall or snap.t_wall, kind, snap.model.name or "",
                                  words[:1].upper() + words[1:].replace(";", ":", 1)))
            self._regime = r.index
        return self.points.add(snap)

    def _event(self, e: Event) -> None:
        self.events.append(e)
        self.events_added += 1

    def view(self, window_s: float | None = None) -> HistoryView:
        """Rows of the last ``window_s`` seconds (None = the whole session kept), oldest first."""
        if window_s is None or self._main.count == 0:
            n = self._main.count
        else:
            t_last = self._main.data[(self._main.head - 1) % self.capacity, 0]
            n = self._main.column_tail_count_since(0, t_last - window_s)
        rows = self._main.last_rows(n)
        gpu = ring_tail(self._gpu, self._main.head, n)
        ncols = len(self._gpu_index)
        return HistoryView(
            t=rows[:, 0],
            t_wall=rows[:, 1],
            series={name: rows[:, 2 + i] for i, name in enumerate(SERIES)},
            gpu={name: gpu[:, j, :ncols].astype(np.float64) for j, name in enumerate(GPU_SERIES)},
        )

    def tail(self, n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The newest ``n`` rows, oldest first: wall-clock times and the scalar series (for a plot that appends)."""
        rows = self._main.last_rows(n)
        return rows[:, 1], {name: rows[:, 2 + i] for i, name in enumerate(SERIES)}
