"""The session: one probe per candidate server, one recorder for every monitor, the demo and the command line's
choice, all without Qt."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kvmon.app.record import RecordSwitch
from kvmon.app.servers import choose_servers
from kvmon.app.session import Session
from kvmon.core.recorder import read_recording
from kvmon.core.snapshot import ConnectionStatus


def test_every_monitor_of_a_session_records_through_its_one_switch(tmp_path: Path) -> None:
    pytest.importorskip("kvmon.sim.server")
    out = tmp_path / "demo.jsonl"
    args = argparse.Namespace(url=None, demo="seed-3090x2", timeout=2.0, log=None, record=str(out), speed=20.0)
    session = choose_servers(args, None).first.session
    try:
        assert session.recorder.path == str(out) and session.recorder.url == session.url
        for _ in range(2):  # a reconnect makes a new monitor: it records through the same switch
            m = session.factory()
            assert m.poll().connection.status is ConnectionStatus.CONNECTED
            m.close()
    finally:
        session.close()
    assert len(read_recording(out).snapshots) == 2
    assert session.recorder.path is None  # closing the session ends the recording


def test_a_session_always_has_a_recorder_and_closes_it_last() -> None:
    order: list[str] = []
    s = Session(lambda: None, cleanups=[lambda: order.append("sim")])  # type: ignore[arg-type, return-value]
    assert isinstance(s.recorder, RecordSwitch)
    stop = s.recorder.stop
    s.recorder.stop = lambda: (order.append("recorder"), stop())  # type: ignore[method-assign]
    s.close()
    assert order == ["sim", "recorder"]




