"""JSONL recording: exact Snapshot round trip, a header with the schema, survival of a kill -9."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from repo_paths import ROOT, TESTS
from snapshots import rich_snapshot

from kvmon.core.recorder import (
    SCHEMA_VERSION,
    Recorder,
    RecordingError,
    read_recording,
    snapshot_from_dict,
    snapshot_to_dict,
)
from kvmon.core.snapshot import (
    AlertLevel,
    Connection,
    ConnectionStatus,
    Snapshot,
)


def _same(a: Snapshot, b: Snapshot) -> bool:
    # NaN != NaN, so compare through the plain form (where NaN is a tagged string)
    return json.dumps(snapshot_to_dict(a), sort_keys=True) == json.dumps(snapshot_to_dict(b), sort_keys=True)


def test_dict_round_trip_is_exact() -> None:
    s = rich_snapshot()
    d = json.loads(json.dumps(snapshot_to_dict(s)))
    back = snapshot_from_dict(d)
    assert _same(back, s)
    assert back.gpus[0].power_w is not None and math.isnan(back.gpus[0].power_w)
    assert back.forecast.seconds_until_ctx_full == math.inf
    assert back.efficiency == 0.1 + 0.2  # every digit kept
    assert back.ceiling_curve == s.ceiling_curve and isinstance(back.ceiling_curve[0], tuple)
    assert back.connection.status is ConnectionStatus.CONNECTED
    assert back.alerts[0].level is AlertLevel.WARNING
    assert back.slots == s.slots and back.model == s.model and back.forecast.milestones == s.forecast.milestones


def test_plain_snapshot_equal_after_round_trip() -> None:
    s = Snapshot(seq=1, t_monotonic=1.0, t_wall=2.0, connection=Connection(ConnectionStatus.UNREACHABLE, "refused"))
    assert snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(s)))) == s


def test_unknown_keys_from_a_newer_kvmon_are_ignored() -> None:
    d = snapshot_to_dict(rich_snapshot())
    d["new_field"] = 1
    d["model"]["another"] = "x"
    assert _same(snapshot_from_dict(d), rich_snapshot())


def test_file_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "rec.jsonl"
    with Recorder(p, source_url="http://127.0.0.1:8080") as rec:
        for i in range(5):
            rec.record(rich_snapshot(i))
    lines = p.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6
    assert json.loads(lines[0])["kvmon_recording"] == SCHEMA_VERSION
    r = read_recording(p)
    assert [s.seq for s in r.snapshots] == [0, 1, 2, 3, 4]
    assert r.skipped_lines == ()
    assert r.header["url"] == "http://127.0.0.1:8080"
    assert all(_same(a, rich_snapshot(i)) for i, a in enumerate(r.snapshots))
    # appending to an existing recording does not write a second header
    with Recorder(p) as rec:
        rec.record(rich_snapshot(5))
    assert len(read_recording(p).snapshots) == 6


def test_cut_and_garbled_lines_are_skipped_with_reasons(tmp_path: Path) -> None:
    p = tmp_path / "rec.jsonl"
    with Recorder(p) as rec:
        rec.record(rich_snapshot(0))
    with p.open("a", encoding="utf-8") as fh:
        fh.write("not json\n")
        fh.write('{"seq": 1}\n')  # JSON, but not a snapshot
        fh.write('[1, 2]\n')
        fh.write(json.dumps(snapshot_to_dict(rich_snapshot(2)))[:40])  # cut off mid-line
    r = read_recording(p)
    assert [s.seq for s in r.snapshots] == [0]
    assert r.skipped_lines == (3, 4, 5, 6)
    assert "incomplete" in r.reasons[-1]


@pytest.mark.parametrize(
    ("content", "needle"),
    [("", "not a kvmon recording"), ('{"a": 1}\n', "not a kvmon recording"),
     ('{"kvmon_recording": 99}\n', "schema 99"), ("\x00\x01garbage", "not a kvmon recording")],
)
def test_not_a_recording(tmp_path: Path, content: str, needle: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(RecordingError, match=needle):
        read_recording(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="cannot open"):
        read_recording(tmp_path / "nope.jsonl")


def test_closed_recorder_refuses(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "r.jsonl")
    rec.close()
    with pytest.raises(ValueError):
        rec.record(rich_snapshot())


def test_kill_9_mid_write_leaves_every_complete_line(tmp_path: Path) -> None:
    p = tmp_path / "rec.jsonl"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        sys.path.insert(0, {str(TESTS)!r})
        from snapshots import rich_snapshot
        from kvmon.core.recorder import Recorder
        from dataclasses import replace
        rec = Recorder({str(p)!r})
        big = rich_snapshot(0)
        i = 0
        while True:
            rec.record(replace(big, seq=i, extra={{"pad": "x" * 20000}}))
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if p.exists() and p.stat().st_size > 60 * 20000:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    text = p.read_bytes()
    complete_lines = text.count(b"\n") - 1  # minus the header
    r = read_recording(p)
    assert len(r.snapshots) == complete_lines >= 50
    assert [s.seq for s in r.snapshots] == list(range(complete_lines))
    assert set(r.skipped_lines) <= {complete_lines + 2}  # at most the cut-off last line


def test_the_live_model_shape_is_not_recorded(tmp_path) -> None:
    """ModelView.shape feeds the what-if calculator live; repeating it on every line would bloat recordings."""
    import dataclasses
    import json

    from synthetic import SyntheticMonitor

    from kvmon.core.recorder import snapshot_from_dict, snapshot_to_dict
    from kvmon.physics.presets import PRESETS
    from kvmon.physics.shape import ModelShape

    s = SyntheticMonitor().snapshot(3)
    shape = ModelShape.from_gguf(PRESETS["llama-3.1-8b"].metadata)
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, shape=shape))
    d = snapshot_to_dict(s)
    assert "shape" not in d["model"]
    back = snapshot_from_dict(json.loads(json.dumps(d)))
    assert back.model.shape is None and back == s  # the shape takes no part in equality
