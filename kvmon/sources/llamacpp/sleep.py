"""Let a llama-server started with ``--sleep-idle-seconds N`` fall asleep while kvmon watches it.

``/slots`` is a task on the server's queue and every such task restarts the idle timer (llama.cpp b11549
``tools/server/server-queue.cpp``: only ``SERVER_TASK_TYPE_METRICS`` does not), so a monitor asking ``/slots`` every
second keeps the model loaded forever. Once every slot has been idle for a few seconds kvmon stops asking
``/slots``: it watches ``/metrics`` instead (served without a task and without waking a sleeping server), whose
counters move as soon as a request is processed, or, without ``/metrics``, looks again once the server should have
fallen asleep (still awake then means a client keeps it busy).
"""

from __future__ import annotations

from collections.abc import Mapping

QUIET_AFTER_S = 5.0  # every slot idle this long: stop asking /slots
ACTIVITY_COUNTERS = ("n_decode_total", "prompt_tokens_total", "tokens_predicted_total")


class SleepCourtesy:
    """Whether the next poll should skip ``/slots`` (see the module docstring); fed with every poll's facts."""

    def __init__(self) -> None:
        self.sleep_s: int | None = None  # --sleep-idle-seconds as the command line, log or user say
        self._idle_since: float | None = None  # every slot idle since
        self._quiet_since: float | None = None  # /slots not asked since
        self._mark: tuple[float, ...] | None = None  # the activity counters when /slots was last asked

    def may_skip(self, now: float) -> bool:
        """Whether this poll is a candidate for skipping /slots (the server sleeps when idle, and has been idle)."""
        return bool(self.sleep_s and self.sleep_s > 0 and self._idle_since is not None
                    and now - self._idle_since >= QUIET_AFTER_S)

    def skip_slots(self, now: float, counters: Mapping[str, float] | None, sleeping: bool) -> bool:
        """Skip /slots now? ``counters``: this poll's /metrics counters (None: no /metrics)."""
        if not self.may_skip(now):
            return False
        mark = tuple(counters.get(k, -1.0) for k in ACTIVITY_COUNTERS) if counters else None
        if self._quiet_since is None:
            self._quiet_since, self._mark = now, mark
            return True
        if mark is not None and self._mark is not None and mark != self._mark:
            self.activity()  # a request was processed meanwhile: look at the slots again
            return False
        assert self.sleep_s is not None
        if mark is None and not sleeping and now - self._quiet_since > self.sleep_s + QUIET_AFTER_S:
            self.activity()  # it should be asleep by now: something keeps it awake, so look
            return False
        return True

    def slots_read(self, now: float, processing: bool) -> None:
        """``/slots`` was read: busy or idle since when."""
        self._quiet_since = self._mark = None
        if processing:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now

    def activity(self) -> None:
        self._idle_since = self._quiet_since = self._mark = None

    @property
    def watched_by_metrics(self) -> bool:
        """Whether /metrics stands in while /slots is not asked (its counters would show any request)."""
        return self._mark is not None

    def reason(self) -> str:
        assert self.sleep_s is not None  # said only while /slots is skipped, which needs it
        how = ("/metrics shows when a request comes" if self.watched_by_metrics else
               "without /metrics a new request is seen only once the server has fallen asleep or "
               f"{self.sleep_s + QUIET_AFTER_S:.0f} s have passed (start it with --metrics)")
        return (f"idle: /slots is not asked so that the server can fall asleep after {self.sleep_s} s "
                f"(each /slots request restarts its idle timer); {how}")
