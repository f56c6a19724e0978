"""The recording switch refuses what is not its to write: a file that is no recording, a symbolic link."""

from __future__ import annotations

from pathlib import Path

from kvmon.app.record import RecordSwitch
from kvmon.core.recorder import Recorder
from kvmon.core.snapshot import Connection, ConnectionStatus, ModelView, Snapshot


def snap(seq: int = 0, t: float = 1000.0) -> Snapshot:
    return Snapshot(seq=seq, t_monotonic=t, t_wall=1_790_000_000.0 + t, connection=Connection(
        ConnectionStatus.CONNECTED), backend="llama-server", url="http://127.0.0.1:8080", model=ModelView(name="m"))


def _recording(path: Path, n: int) -> None:
    with Recorder(path) as rec:
        for i in range(n):
            rec.record(snap(seq=i, t=1000.0 + i))


def test_a_file_that_is_no_recording_is_refused_with_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping: milk\n", encoding="utf-8")
    switch = RecordSwitch("http://127.0.0.1:8080")
    problem = switch.try_start(str(notes))
    switch.record(snap(seq=1))
    assert problem is not None and "notes.txt" in problem and "not a kvmon recording" in problem
    assert "\n" not in problem and switch.problem == problem
    assert notes.read_text(encoding="utf-8") == "shopping: milk\n"


def test_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    _recording(target, 1)
    before = target.read_bytes()
    link = tmp_path / "rec.jsonl"
    link.symlink_to(target)
    problem = RecordSwitch().try_start(str(link))
    assert problem is not None and "symbolic link" in problem
    assert target.read_bytes() == before
