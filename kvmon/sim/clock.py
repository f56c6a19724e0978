"""The simulator's clock: simulated seconds that may run faster than real time (``--speed X``).

Everything the simulated server reports (timings in ms, counters in seconds, the point a scripted chat
has reached) is read from this clock, so an accelerated run looks to a client exactly like a real one
that happens to be fast. The clock never jumps backwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class SimClock:
    """Simulated time = ``speed`` × real seconds elapsed since ``start()``, plus any manual ``advance``."""

    def __init__(self, speed: float = 1.0, *, real_clock: Callable[[], float] = time.monotonic,
                 wall_origin_s: float | None = None, running: bool = True) -> None:
        if not speed > 0:
            raise ValueError(f"clock speed must be > 0 (got {speed!r})")
        self.speed = float(speed)
        self._real = real_clock
        self._lock = threading.Lock()
        self._real_origin_s = real_clock()
        self._running = running
        self._offset_s = 0.0
        self._wall_origin_s = time.time() if wall_origin_s is None else wall_origin_s
        self._wake = threading.Condition(self._lock)

    def now(self) -> float:
        """Simulated seconds since the clock was made."""
        with self._lock:
            return self._now_locked()

    def _now_locked(self) -> float:
        if not self._running:
            return self._offset_s
        return (self._real() - self._real_origin_s) * self.speed + self._offset_s

    def set_speed(self, speed: float) -> None:
        """Change the speed from now on; simulated time so far is kept (no jump)."""
        if not speed > 0:
            raise ValueError(f"clock speed must be > 0 (got {speed!r})")
        with self._lock:
            self._offset_s = self._now_locked()
            self._real_origin_s = self._real()
            self.speed = float(speed)
            self._wake.notify_all()

    def start(self) -> None:
        """Let a clock made with ``running=False`` run from now on (simulated time so far is kept)."""
        with self._lock:
            if not self._running:
                self._real_origin_s = self._real()
                self._running = True
                self._wake.notify_all()

    def pause(self) -> None:
        """Stop simulated time where it is; only ``advance`` (or ``start``) moves it on (deterministic tests)."""
        with self._lock:
            if self._running:
                self._offset_s = self._now_locked()
                self._running = False

    def wall(self) -> float:
        """A Unix time that moves with simulated time (for ``created`` fields and Ollama timestamps)."""
        return self._wall_origin_s + self.now()

    def advance(self, seconds: float) -> None:
        """Jump simulated time forward (tests that want no real waiting at all)."""
        if seconds < 0:
            raise ValueError("the clock does not run backwards")
        with self._lock:
            self._offset_s += seconds
            self._wake.notify_all()

    def sleep_until(self, sim_t: float, stop: threading.Event | None = None) -> bool:
        """Block until simulated ``sim_t`` (or ``stop`` is set); returns False when stopped early."""
        with self._lock:
            while True:
                remaining = (sim_t - self._now_locked()) / self.speed
                if remaining <= 0:
                    return True
                if stop is not None and stop.is_set():
                    return False
                if not self._running:
                    remaining = 0.05
                # wake at least every 50 ms to notice stop / advance()
                self._wake.wait(min(remaining, 0.05))


class OffsetClock:
    """Another clock's time from ``t0`` on: a model server that a router or llama-swap starts later lives in the
    same simulated time, counted from its own start."""

    def __init__(self, base: SimClock, t0: float) -> None:
        self.base = base
        self.t0 = t0

    @property
    def speed(self) -> float:
        return self.base.speed

    def now(self) -> float:
        return self.base.now() - self.t0

    def wall(self) -> float:
        return self.base.wall()

    def start(self) -> None:
        """The base clock runs the time: nothing to start."""

    def advance(self, seconds: float) -> None:
        self.base.advance(seconds)

    def sleep_until(self, sim_t: float, stop: threading.Event | None = None) -> bool:
        return self.base.sleep_until(sim_t + self.t0, stop)
