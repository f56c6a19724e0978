"""``kvmon replay`` told to stop while it still reads its file (a logout, ``systemctl stop``, Ctrl-C): it ends
cleanly with status 0, as the dashboard does, instead of dying by the signal; a FIFO is refused at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_recorder import rich_snapshot

from kvmon.core.recorder import HEADER_KEY, SCHEMA_VERSION, snapshot_to_dict

ROOT = Path(__file__).resolve().parents[2]


def _big_recording(path: Path, lines: int) -> None:
    line = snapshot_to_dict(rich_snapshot())
    with path.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({HEADER_KEY: SCHEMA_VERSION, "kvmon_version": "0", "created_wall": 0, "url": None}) + "\n")
        for i in range(lines):
            line["seq"], line["t_monotonic"], line["t_wall"] = i, 1000.0 + i, 1_790_000_000.0 + i
            fh.write(json.dumps(line, separators=(",", ":")) + "\n")


def _replay(path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "kvmon", "replay", str(path)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_file_is_read_ends_the_replay_with_status_0(tmp_path: Path, sig: signal.Signals) -> None:
    path = tmp_path / "day.jsonl"
    _big_recording(path, 30_000)
    proc = _replay(path)
    try:
        time.sleep(2.5)  # Qt is up, the file half read
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    assert "Traceback" not in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "rec.jsonl"
    os.mkfifo(fifo)
    proc = _replay(fifo)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2 and "not a recording file" in err, err
