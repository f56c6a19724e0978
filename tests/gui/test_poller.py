"""The poller thread: one Snapshot per interval, failures as Snapshots with backoff, pause, reconnect, stop."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("pytestqt")

from synthetic import SyntheticMonitor

from kvmon.core.readings import FailureKind, SourceError, SourceFailure
from kvmon.core.snapshot import ConnectionStatus, Snapshot
from kvmon.gui.poller import Poller, backoff_delay_s


class Collector:
    def __init__(self) -> None:
        self.snaps: list[Snapshot] = []
        self.threads: set[int] = set()

    def __call__(self, s: Snapshot) -> None:
        self.snaps.append(s)
        self.threads.add(threading.get_ident())


@pytest.fixture
def make_poller(qtbot):
    made: list[Poller] = []

    def make(factory, interval_s: float = 0.05, backoff_max_s: float = 0.2) -> tuple[Poller, Collector]:
        p = Poller(factory, interval_s, backoff_max_s)
        c = Collector()
        p.snapshot.connect(c)
        made.append(p)
        p.start()
        return p, c

    yield make
    for p in made:
        p.stop()


def test_backoff_doubles_up_to_the_cap() -> None:
    assert backoff_delay_s(1.0, 0, 8.0) == 1.0
    assert [backoff_delay_s(1.0, n, 8.0) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff_delay_s(0.2, 0, 8.0) == 0.2


def test_snapshots_arrive_on_the_gui_thread_from_a_worker_that_owns_the_monitor(qtbot, make_poller) -> None:
    mon = SyntheticMonitor()
    created_in: list[int] = []

    def factory() -> SyntheticMonitor:
        created_in.append(threading.get_ident())
        return mon

    _p, c = make_poller(factory)
    qtbot.waitUntil(lambda: len(c.snaps) >= 3, timeout=3000)
    assert c.threads == {threading.get_ident()}
    assert created_in and created_in[0] != threading.get_ident()
    assert [s.seq for s in c.snaps[:3]] == [1, 2, 3]


def test_open_failure_becomes_a_snapshot_then_recovers(qtbot, make_poller) -> None:
    attempts = {"n": 0}

    def factory() -> SyntheticMonitor:
        attempts["n"] += 1
        if attempts["n"] <= 2:
            raise SourceError(SourceFailure(FailureKind.UNREACHABLE, "connection refused at 127.0.0.1:9"))
        return SyntheticMonitor()

    _p, c = make_poller(factory)
    qtbot.waitUntil(lambda: any(s.connection.status is ConnectionStatus.CONNECTED for s in c.snaps), timeout=5000)
    first = c.snaps[0]
    assert first.connection.status is ConnectionStatus.UNREACHABLE
    assert first.connection.reason == "connection refused at 127.0.0.1:9"
    assert first.connection.retry_in_s == pytest.approx(0.2)  # max(interval, 1 s) capped at backoff_max_s


def test_auth_failure_maps_to_auth_rejected(qtbot, make_poller) -> None:
    def factory() -> SyntheticMonitor:
        raise SourceError(SourceFailure(FailureKind.AUTH_REJECTED, "HTTP 401: invalid API key"))

    _p, c = make_poller(factory)
    qtbot.waitUntil(lambda: len(c.snaps) >= 2, timeout=3000)
    assert {s.connection.status for s in c.snaps} == {ConnectionStatus.AUTH_REJECTED}


def test_a_server_error_on_open_is_a_bad_response_not_unreachable(qtbot, make_poller) -> None:
    def factory() -> SyntheticMonitor:
        raise SourceError(SourceFailure(FailureKind.SERVER_ERROR, "HTTP 500 from /props"))

    _p, c = make_poller(factory)
    qtbot.waitUntil(lambda: len(c.snaps) >= 1, timeout=3000)
    assert c.snaps[0].connection.status is ConnectionStatus.BAD_RESPONSE
    assert c.snaps[0].connection.reason == "HTTP 500 from /props"


def test_a_buggy_monitor_does_not_kill_the_thread(qtbot, make_poller) -> None:
    calls = {"n": 0}

    class Buggy(SyntheticMonitor):
        def poll(self) -> Snapshot:
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("boom")
            return super().poll()

    made: list[Buggy] = []
    _p, c = make_poller(lambda: made.append(Buggy()) or made[-1])
    qtbot.waitUntil(lambda: len(c.snaps) >= 4, timeout=4000)
    statuses = [s.connection.status for s in c.snaps[:4]]
    assert ConnectionStatus.UNREACHABLE in statuses and statuses[-1] is ConnectionStatus.CONNECTED
    assert "boom" in next(s.connection.reason for s in c.snaps if s.connection.reason)
    assert len(made) == 2 and made[0].closed == 1  # the broken monitor is closed and a fresh one opened


def test_pause_stops_polling_and_resume_restarts(qtbot, make_poller) -> None:
    p, c = make_poller(SyntheticMonitor)
    qtbot.waitUntil(lambda: len(c.snaps) >= 2, timeout=3000)
    p.set_paused(True)
    qtbot.wait(150)
    n = len(c.snaps)
    qtbot.wait(300)
    assert len(c.snaps) == n
    p.set_paused(False)
    qtbot.waitUntil(lambda: len(c.snaps) >= n + 2, timeout=3000)


def test_reconnect_closes_the_old_monitor_and_opens_a_new_one(qtbot, make_poller) -> None:
    made: list[SyntheticMonitor] = []

    def factory() -> SyntheticMonitor:
        made.append(SyntheticMonitor())
        return made[-1]

    p, c = make_poller(factory, interval_s=5.0)
    qtbot.waitUntil(lambda: len(c.snaps) == 1, timeout=3000)
    p.reconnect.emit()
    qtbot.waitUntil(lambda: len(c.snaps) == 2, timeout=3000)
    assert len(made) == 2 and made[0].closed == 1


def test_stop_waits_for_a_hung_poll_and_closes(qtbot) -> None:
    mon = SyntheticMonitor()
    p = Poller(lambda: mon, 0.05)
    got: list[Snapshot] = []
    p.snapshot.connect(got.append)
    p.start()
    qtbot.waitUntil(lambda: len(got) >= 1, timeout=3000)
    mon.hang_s = 0.3
    qtbot.wait(100)
    p.stop()
    assert not p.poll_thread.isRunning() and mon.closed == 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["slow_headers", "accept_stall"])
def test_a_hanging_server_costs_each_poll_at_most_its_timeout_and_the_window_stays_responsive(
        qtbot, tmp_path, mode: str) -> None:
    """The real dashboard on a llama-server whose /metrics drips its head (the rest answers), or that stops
    answering altogether: polls keep coming, each within the timeout (the first after the server was asked which it
    is), the GUI thread never waits, and with one endpoint hanging the reading goes on without it."""
    import itertools
    import time

    from hostile_matrix import HostileServer, llama_routes
    from PySide6 import QtCore

    from kvmon.app.servers import server_session
    from kvmon.gui.app import build_window
    from kvmon.gui.settings import Settings

    timeout_s, interval_s = 1.0, 0.2
    server = HostileServer(llama_routes(), "/metrics", mode)
    session = server_session(server.url, api_key=None, timeout_s=timeout_s, log_path=None)
    win, poller = build_window(session, Settings(str(tmp_path / "s.ini")), interval_s, tray=False,
                               timeout_s=timeout_s)
    qtbot.addWidget(win)
    arrived: list[tuple[float, Snapshot]] = []
    poller.snapshot.connect(lambda s: arrived.append((time.monotonic(), s)))
    ticks: list[float] = []
    timer = QtCore.QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    t0 = time.monotonic()
    try:
        poller.start()
        qtbot.waitUntil(lambda: len(arrived) >= 4, timeout=20000)
    finally:
        timer.stop()
        poller.stop()
        server.stop()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.5, f"the GUI thread waited {max(gaps):.2f} s"
    times = [t0] + [t for t, _ in arrived]
    waits = [b - a for a, b in itertools.pairwise(times)]
    assert waits[0] < 2 * timeout_s + 1.0  # which server it is, then its first poll
    # later polls: the interval (or the failure backoff, up to its cap of 8 s) plus at most one timeout
    assert max(waits[1:]) < timeout_s + 1.0 + (8.0 if mode == "accept_stall" else interval_s), waits
    last = arrived[-1][1]
    if mode == "slow_headers":
        assert last.server_read and "/metrics" in last.reasons.get("metrics", ""), last.reasons
    else:
        assert last.connection.status is ConnectionStatus.TIMEOUT
