"""Recording files as a user meets them: ``--record`` appends only to a kvmon recording (never to another file,
never through a symbolic link), a recording cut off by a kill -9 loses no snapshot to the next ``--record``, and a
replay opens only regular files and reads blank or damaged lines at a bounded cost."""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from kvmon.app.record import RecordSwitch
from kvmon.core.recorder import Recorder, RecordingError, read_recording
from kvmon.core.snapshot import Connection, ConnectionStatus, ModelView, Snapshot

MAX_REPORTED = 1000  # unreadable lines a recording keeps by number and reason


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


def test_a_recording_cut_off_mid_line_loses_no_snapshot_to_the_next_record(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _recording(path, 2)
    with path.open("ab") as fh:  # kill -9 in the middle of the third line
        fh.write(b'{"seq":2,"t_monotonic":10')
    with Recorder(path) as rec:
        rec.record(snap(seq=3, t=2000.0))
    got = read_recording(path)
    assert [s.seq for s in got.snapshots] == [0, 1, 3]  # the new one whole, on a line of its own
    assert got.skipped_count == 1 and got.reasons[0].startswith("line 4:")  # the cut line, alone


def test_appending_to_a_recording_adds_lines_and_no_second_header(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _recording(path, 1)
    _recording(path, 1)
    assert len(read_recording(path).snapshots) == 2
    assert path.read_text(encoding="utf-8").count("kvmon_recording") == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_replay_of_a_fifo_ends_at_once_with_a_reason(tmp_path: Path) -> None:
    fifo = tmp_path / "rec.jsonl"
    os.mkfifo(fifo)
    said: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(said, fifo), daemon=True)
    reader.start()
    reader.join(3.0)  # it used to wait in open() for a writer that never comes
    assert not reader.is_alive(), "replay of a FIFO is still waiting"
    assert said and isinstance(said[0], RecordingError) and "not a recording file" in str(said[0])


def _catch(said: list[BaseException], path: Path) -> None:
    try:
        read_recording(path)
    except BaseException as e:  # what the replay would say
        said.append(e)


def test_a_file_of_blank_lines_costs_little_time_and_memory(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _recording(path, 1)
    with path.open("ab") as fh:
        fh.write(b"\n" * 2_000_000 + b"   \n" * 1000)
    tracemalloc.start()
    cpu = time.process_time()
    try:
        got = read_recording(path, lazy=True)
        spent = time.process_time() - cpu
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(got.snapshots) == 1 and got.skipped_count == 0
    assert peak < 20 * 1024 * 1024, f"{peak / 2**20:.0f} MiB"  # it took 440 MiB
    assert spent < 4.0, f"{spent:.1f} CPU-s"  # it took 12 CPU-s (and less than this with tracemalloc off)


def test_many_damaged_lines_are_all_counted_and_the_first_kept_with_their_reason(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    _recording(path, 1)
    with path.open("ab") as fh:
        fh.write(b"x\n" * 50_000)
    got = read_recording(path)
    assert got.skipped_count == 50_000 and len(got.reasons) == len(got.skipped_lines) == MAX_REPORTED
    assert len(got.snapshots) == 1
