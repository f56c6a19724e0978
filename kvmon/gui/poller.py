"""The poller: a QObject worker living in its own QThread that owns the Monitor and emits one Snapshot per poll.

The GUI thread never waits on a server: a hung server blocks only this thread (up to the sources' timeouts).
Failures come back as Snapshots with a connection status; repeated failures back off up to ``backoff_max_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6 import QtCore

from kvmon.app.session import MonitorLike
from kvmon.core.connection import failure_of, failure_snapshot
from kvmon.core.readings import FailureKind
from kvmon.core.snapshot import ConnectionStatus, Snapshot

FAILED = frozenset({
    ConnectionStatus.UNREACHABLE, ConnectionStatus.TIMEOUT, ConnectionStatus.AUTH_REJECTED,
    ConnectionStatus.BAD_RESPONSE, ConnectionStatus.BAD_URL,
})


MonitorFactory = Callable[[], MonitorLike]


def backoff_delay_s(interval_s: float, failures: int, backoff_max_s: float) -> float:
    """Delay before the next poll after ``failures`` consecutive failures (0 = normal interval)."""
    if failures <= 0:
        return interval_s
    return min(backoff_max_s, max(interval_s, 1.0) * 2 ** (failures - 1))


class PollWorker(QtCore.QObject):
    """Lives in the poll thread; all slots run there. Emits ``snapshot(Snapshot)`` after each poll."""

    snapshot = QtCore.Signal(object)

    def __init__(self, factory: MonitorFactory, interval_s: float = 1.0, backoff_max_s: float = 8.0) -> None:
        super().__init__()
        self._factory = factory
        self.interval_s = interval_s
        self.backoff_max_s = backoff_max_s
        self._monitor: MonitorLike | None = None
        self._timer: QtCore.QTimer | None = None
        self._paused = False
        self._failures = 0
        self._seq = 0
        self._follow: str | None = None  # the model of a router / llama-swap to show (None: the one chatted with)

    @property
    def monitor(self) -> MonitorLike | None:
        """The monitor polling now (a depth sweep asks it where the server is; it never polls from another thread)."""
        return self._monitor

    @QtCore.Slot()
    def start(self) -> None:
        """Create the timer in this thread and poll at once."""
        self._timer = QtCore.QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setTimerType(QtCore.Qt.TimerType.CoarseTimer)
        self._timer.timeout.connect(self.poll_once)
        self.poll_once()

    def _failure_snapshot(self, exc: BaseException, retry_in_s: float) -> Snapshot:
        """An open or poll that raised: the monitor is dropped and opened again, so the server is not reached."""
        self._seq += 1
        now = time.monotonic()
        return failure_snapshot(failure_of(exc, FailureKind.UNREACHABLE, "monitor failed"), seq=self._seq,
                                t_monotonic=now, t_wall=time.time(), since_t_monotonic=now, retry_in_s=retry_in_s)

    @QtCore.Slot()
    def poll_once(self) -> None:
        """One poll; schedules the next one unless paused."""
        if self._paused:
            return
        snap: Snapshot
        try:
            if self._monitor is None:
                self._monitor = self._factory()
                self._apply_follow()
            snap = self._monitor.poll()
            failed = snap.connection.status in FAILED
        except Exception as exc:  # a source bug or an open failure must not kill the thread
            self._close_monitor()
            self._failures += 1
            snap = self._failure_snapshot(exc, backoff_delay_s(self.interval_s, self._failures, self.backoff_max_s))
            failed = True
        else:
            self._failures = self._failures + 1 if failed else 0
        self.snapshot.emit(snap)
        if self._timer is not None and not self._paused:
            delay = backoff_delay_s(self.interval_s, self._failures if failed else 0, self.backoff_max_s)
            self._timer.start(max(1, int(delay * 1000)))

    def _close_monitor(self) -> None:
        if self._monitor is not None:
            try:
                self._monitor.close()
            except Exception:  # closing a broken client must not raise into Qt
                pass
            self._monitor = None

    def _apply_follow(self) -> None:
        follow = getattr(self._monitor, "follow", None)
        if callable(follow):
            follow(self._follow)

    @QtCore.Slot(object)
    def set_follow(self, name: str | None) -> None:
        """Show this model of a router or llama-swap (None: the one being chatted with); polls at once."""
        self._follow = name
        self._apply_follow()
        if self._timer is not None and not self._paused:
            self._timer.stop()
            self.poll_once()

    @QtCore.Slot(bool)
    def set_paused(self, paused: bool) -> None:
        """Stop or restart polling."""
        self._paused = paused
        if self._timer is None:
            return
        if paused:
            self._timer.stop()
        else:
            self.poll_once()

    @QtCore.Slot(float)
    def set_interval(self, interval_s: float) -> None:
        """Change the poll interval (seconds)."""
        self.interval_s = max(0.05, interval_s)

    @QtCore.Slot()
    def reconnect(self) -> None:
        """Drop the monitor, reset backoff and poll now."""
        self._close_monitor()
        self._failures = 0
        if self._timer is not None:
            self._timer.stop()
        if not self._paused:
            self.poll_once()

    @QtCore.Slot(object)
    def set_factory(self, factory: MonitorFactory) -> None:
        """Monitor another server from now on (new URL or key): close the old monitor and poll the new one."""
        self._factory = factory
        self.reconnect()

    @QtCore.Slot()
    def stop(self) -> None:
        """Stop polling and close the monitor's clients."""
        self._paused = True
        if self._timer is not None:
            self._timer.stop()
        self._close_monitor()
        thread = QtCore.QThread.currentThread()
        if thread is not QtCore.QCoreApplication.instance().thread():  # type: ignore[union-attr]
            thread.quit()


class Poller(QtCore.QObject):
    """GUI-side handle: starts the worker thread and forwards commands to it through queued signals (each runs in
    the poll thread)."""

    snapshot = QtCore.Signal(object)
    _pause = QtCore.Signal(bool)
    interval = QtCore.Signal(float)  # change the poll interval (seconds)
    reconnect = QtCore.Signal()  # reconnect now, resetting the backoff
    factory = QtCore.Signal(object)  # monitor another server from now on (a new URL or key)
    follow = QtCore.Signal(object)  # show this model of a router or llama-swap (None: the one chatted with)
    _stop = QtCore.Signal()

    def __init__(self, factory: MonitorFactory, interval_s: float = 1.0, backoff_max_s: float = 8.0,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self.poll_thread = QtCore.QThread()
        self.poll_thread.setObjectName("kvmon-poller")
        self.worker = PollWorker(factory, interval_s, backoff_max_s)
        self.worker.moveToThread(self.poll_thread)
        self.poll_thread.started.connect(self.worker.start)
        self.worker.snapshot.connect(self.snapshot, QtCore.Qt.ConnectionType.QueuedConnection)
        w = self.worker
        for signal, slot in ((self._pause, w.set_paused), (self.interval, w.set_interval),
                             (self.reconnect, w.reconnect), (self.factory, w.set_factory),
                             (self.follow, w.set_follow), (self._stop, w.stop)):
            signal.connect(slot)
        self.paused = False

    def start(self) -> None:
        """Start the thread; the first poll happens at once."""
        self.poll_thread.start()

    def set_paused(self, paused: bool) -> None:
        """Pause or resume polling."""
        self.paused = paused
        self._pause.emit(paused)

    def stop(self, wait_ms: int = 15000) -> None:
        """Stop the worker and the thread (waits for an in-flight poll up to ``wait_ms``)."""
        if not self.poll_thread.isRunning():
            return
        self._stop.emit()  # the worker quits its own thread once the monitor is closed
        if not self.poll_thread.wait(wait_ms):
            self.poll_thread.quit()
            self.poll_thread.wait(1000)
