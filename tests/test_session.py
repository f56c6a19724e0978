"""The session: one probe per candidate server, one recorder for every monitor, the demo and the command line's
choice, all without Qt."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from helpers_http import FixtureServer, closed_port_url, serve_llama_state

from kvmon.app.build import open_monitor
from kvmon.app.choose import choose_session
from kvmon.app.record import RecordSwitch
from kvmon.app.session import Session
from kvmon.core.readings import FailureKind, SourceError
from kvmon.core.recorder import read_recording
from kvmon.core.snapshot import ConnectionStatus


def test_open_monitor_detects_llama_server(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    m = open_monitor(fixture_server.url, timeout_s=2.0, gpu=False, host=False)
    try:
        assert m.backend == "llama-server"
        assert m.poll().connection.status is ConnectionStatus.CONNECTED
    finally:
        m.close()


def test_open_monitor_auto_picks_the_first_answering_candidate(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    m = open_monitor(None, timeout_s=1.0, gpu=False, host=False, candidates=(closed_port_url(), fixture_server.url))
    try:
        assert m.display_url == fixture_server.url
    finally:
        m.close()


def test_open_monitor_with_nothing_there_raises_unreachable() -> None:
    with pytest.raises(SourceError) as info:
        open_monitor(None, timeout_s=0.5, candidates=(closed_port_url(), closed_port_url()))
    assert info.value.failure.kind is FailureKind.UNREACHABLE
    assert "--demo" in info.value.failure.reason


def test_open_monitor_bad_url() -> None:
    with pytest.raises(SourceError) as info:
        open_monitor("ht!tp://", timeout_s=0.5)
    assert info.value.failure.kind is FailureKind.BAD_URL


def test_auto_detect_asks_the_server_once(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    m = open_monitor(None, timeout_s=1.0, gpu=False, host=False, candidates=(fixture_server.url,))
    try:
        assert m.backend == "llama-server"
        assert fixture_server.paths_requested() == ["/props"]  # detection only; the source has not polled yet
    finally:
        m.close()


def test_every_monitor_of_a_session_records_through_its_one_switch(tmp_path: Path) -> None:
    pytest.importorskip("kvmon.sim.server")
    out = tmp_path / "demo.jsonl"
    args = argparse.Namespace(url=None, demo="seed-3090x2", timeout=2.0, log=None, record=str(out), speed=20.0)
    session = choose_session(args, None)
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


def test_an_unopenable_recording_is_the_recorders_problem_and_the_demo_runs(tmp_path: Path) -> None:
    pytest.importorskip("kvmon.sim.server")
    args = argparse.Namespace(url=None, demo="seed-3090x2", timeout=2.0, log=None,
                              record=str(tmp_path / "no" / "such" / "dir.jsonl"))
    s = choose_session(args, None)
    try:
        assert s.recorder.problem is not None and "dir.jsonl" in s.recorder.problem
        assert s.recorder.path is None
    finally:
        s.close()


def test_nothing_there_is_unreachable_with_a_hint() -> None:
    with pytest.raises(SourceError) as info:
        open_monitor(None, timeout_s=0.5, candidates=(closed_port_url(),))
    assert info.value.failure.kind is FailureKind.UNREACHABLE
