"""A recording that cannot be written, and recordings with hostile lines: the monitor goes on and says what broke;
replay and CSV export skip what cannot be read and say how much.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
from helpers_http import FixtureServer, serve_llama_state

from kvmon.app.build import open_monitor
from kvmon.app.record import RecordSwitch
from kvmon.app.servers import server_session
from kvmon.core.recorder import Recorder, read_recording, snapshot_to_dict
from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot

FULL_DISK = "/dev/full"  # every write fails with ENOSPC: a real full disk, no mocking

needs_dev_full = pytest.mark.skipif(not os.path.exists(FULL_DISK), reason="needs /dev/full (Linux)")


def fill_disk_under(switch: RecordSwitch) -> None:
    """The disk fills up under a running recording: its file descriptor now writes to /dev/full (ENOSPC)."""
    fd = os.open(FULL_DISK, os.O_WRONLY)
    try:
        os.dup2(fd, switch._rec._fh.fileno())
    finally:
        os.close(fd)


def _good(seq: int) -> Snapshot:
    return Snapshot(seq=seq, t_monotonic=float(seq), t_wall=1.7e9 + seq, connection=Connection(
        ConnectionStatus.CONNECTED))


# ------------------------------------------------------------------------------------------------ 8


def _hostile_lines() -> list[str]:
    base = snapshot_to_dict(_good(2))

    def variant(**kw: object) -> str:
        d = json.loads(json.dumps(base))
        d.update(kw)
        return json.dumps(d)

    return [
        variant(t_wall={"__float__": "inf"}),  # a tagged float no clock can show
        variant(t_wall={"__float__": 5}),  # a tag of the wrong type
        variant(connection={"__float__": "nan"}),  # a tagged float where an object belongs
        variant(seq={"__float__": "nan"}),  # a tagged float where an int belongs
        variant(model={"name": 7}),  # a number where text belongs
        "[" * 100_000 + "]" * 100_000,  # nesting deeper than any parser's stack
        json.dumps(base).replace('"t_wall": 1700000002.0', '"t_wall": 1' + "0" * 400),  # 10^400 seconds
    ]


def test_replay_csv_skips_hostile_lines_with_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvmon.gui.app import run_replay

    path = tmp_path / "hostile.jsonl"
    with Recorder(path) as rec:
        rec.record(_good(1))
    bad = _hostile_lines()
    assert '"t_wall": 1' + "0" * 400 in bad[-1]
    with path.open("a", encoding="utf-8") as fh:
        for line in bad:
            fh.write(line + "\n")
        fh.write(json.dumps(snapshot_to_dict(_good(3))) + "\n")
    out = tmp_path / "out.csv"
    assert run_replay(argparse.Namespace(file=str(path), csv=str(out))) == 0
    said = capsys.readouterr().out
    rows = out.read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + 2  # header + the two good snapshots
    assert f"{len(bad)} unreadable lines skipped" in said
    back = read_recording(path)
    assert [s.seq for s in back.snapshots] == [1, 3] and len(back.skipped_lines) == len(bad)


# ------------------------------------------------------------------------------------------------ 9


@needs_dev_full
def test_a_full_disk_is_a_recording_problem_not_a_server_problem(tmp_path: Path) -> None:
    server = FixtureServer()
    serve_llama_state(server, "generating")
    switch = RecordSwitch()
    switch.start(str(tmp_path / "rec.jsonl"))
    fill_disk_under(switch)
    monitor = open_monitor(server.url, timeout_s=1.0, gpu=False, host=False, recorder=switch)
    try:
        first, second = monitor.poll(), monitor.poll()
    finally:
        monitor.close()
        switch.stop()
        server.stop()
    for snap in (first, second):
        assert snap.connection.status is ConnectionStatus.CONNECTED  # the monitor is fine
        assert snap.context_tokens == 1066 and snap.model.name
        alert = [a for a in snap.alerts if a.code == "recording_failed"]
        assert alert and "No space left" in alert[0].message


@needs_dev_full
def test_a_router_session_says_its_recording_stopped_too(tmp_path: Path) -> None:
    from kvmon.app.demo import demo_session, step_demo

    switch = RecordSwitch()
    session = demo_session("router", None, recorder=switch, stepped=True)
    try:
        switch.start(str(tmp_path / "rec.jsonl"))
        fill_disk_under(switch)
        *_, snap = step_demo(session, 2.0, 1.0)
    finally:
        session.close()
    assert snap.serving is not None and snap.serving.models  # a router's Snapshot, its models listed
    alert = [a for a in snap.alerts if a.code == "recording_failed"]
    assert alert and "No space left" in alert[0].message


@needs_dev_full
def test_the_status_bar_says_the_recording_failed(qtbot, tmp_path: Path) -> None:
    from kvmon.gui.app import build_window
    from kvmon.gui.settings import Settings

    server = FixtureServer()
    serve_llama_state(server, "generating")
    switch = RecordSwitch()
    session = server_session(server.url, api_key=None, timeout_s=1.0, log_path=None, recorder=switch)
    win, poller = build_window(session, Settings(str(tmp_path / "s.ini")), 0.2, tray=False)
    qtbot.addWidget(win)
    win.show()
    try:
        win.toggle_recording(str(tmp_path / "rec.jsonl"))
        fill_disk_under(switch)
        poller.start()
        qtbot.waitUntil(lambda: win.last is not None and any(a.code == "recording_failed" for a in win.last.alerts),
                        timeout=10000)
        assert win.last is not None and win.last.connection.status is ConnectionStatus.CONNECTED
        qtbot.waitUntil(lambda: "recording failed" in win.status.recording.text(), timeout=5000)
        assert "No space left" in win.status.recording.toolTip()
    finally:
        poller.stop()
        session.close()
        server.stop()
