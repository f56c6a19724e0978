"""CSV export of a recording: one row per snapshot, exact numbers, unknown as empty cells, no credentials."""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import pytest
from synthetic import SyntheticMonitor

from kvmon.core import recording_csv
from kvmon.core.recorder import Recorder, RecordingError, read_recording
from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot


def _snaps(n: int = 12) -> list[Snapshot]:
    mon = SyntheticMonitor(t0_wall=1_764_000_000.0)
    return [mon.poll() for _ in range(n)]


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_rows_round_trip_to_the_snapshot_numbers() -> None:
    snaps = _snaps()
    rows = _rows(recording_csv.to_csv_text(snaps))
    assert len(rows) == len(snaps)
    assert tuple(rows[0]) == recording_csv.HEADER
    for s, r in zip(snaps, rows, strict=True):
        assert int(r["seq"]) == s.seq and float(r["t_wall"]) == s.t_wall
        assert float(r["decode_tok_s"]) == s.decode_tok_s  # exact: repr of the float
        assert float(r["ceiling_tok_s"]) == s.ceiling_tok_s
        assert int(r["context_tokens"]) == s.context_tokens
        assert int(r["vram_used_bytes"]) == sum(g.vram_used_bytes for g in s.gpus)
        assert r["model"] == s.model.name and r["status"] == "connected"
        assert r["time_utc"].endswith("Z")


def test_unknown_values_are_empty_not_zero() -> None:
    s = Snapshot(seq=1, t_monotonic=0.0, t_wall=1.0e9, connection=Connection(ConnectionStatus.UNREACHABLE, "down"))
    r = _rows(recording_csv.to_csv_text([s]))[0]
    for col in ("decode_tok_s", "ceiling_tok_s", "context_tokens", "vram_used_bytes", "model", "efficiency"):
        assert r[col] == "", col
    nan = dataclasses.replace(_snaps(1)[0], decode_tok_s=float("nan"))
    assert _rows(recording_csv.to_csv_text([nan]))[0]["decode_tok_s"] == ""


def test_url_credentials_never_reach_the_csv() -> None:
    s = dataclasses.replace(_snaps(1)[0], url="http://bob:pa55word-x@10.0.0.2:8080/?token=pa55word-x")
    text = recording_csv.to_csv_text([s])
    assert "pa55word-x" not in text and "http://10.0.0.2:8080/" in text


def test_alerts_are_listed_by_level_and_code() -> None:
    snaps = SyntheticMonitor(t0_wall=1e9)
    s = snaps.snapshot(80)  # near the end of the synthetic chat: context full soon
    assert _rows(recording_csv.to_csv_text([s]))[0]["alerts"] == "warning:ctx_full_soon"


def test_recording_file_to_csv(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    with Recorder(rec) as r:
        for s in _snaps(5):
            r.record(s)
    with rec.open("a") as fh:
        fh.write('{"seq": 99, "cut')  # a killed recorder: the last line is incomplete
    out = tmp_path / "r.csv"
    assert recording_csv.write_csv(read_recording(rec).snapshots, out) == 5
    assert len(out.read_text().splitlines()) == 6


def test_not_a_recording_and_unwritable_output(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    with pytest.raises(RecordingError):
        read_recording(bad)
    with pytest.raises(OSError):
        recording_csv.write_csv(_snaps(1), tmp_path / "missing" / "x.csv")


def test_core_module_imports_no_qt() -> None:
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(recording_csv))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any("PySide6" in str(m) or "httpx" in str(m) for m in names | mods)
