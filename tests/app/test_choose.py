"""Choosing what a session watches: a recording that cannot be opened is the recorder's problem, and the demo still
runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kvmon.app.choose import choose_session


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
