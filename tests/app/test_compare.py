"""Curves read for comparing: a recording is the curve of its last configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from kvmon_in_process import _run_kvmon as _run


def test_a_recording_is_a_curve_of_its_last_configuration(tmp_path: Path) -> None:
    from synthetic import SyntheticMonitor

    from kvmon.app.compare import load_curve
    from kvmon.core.recorder import Recorder

    path = tmp_path / "session.jsonl"
    mon = SyntheticMonitor(tokens_per_poll=800)
    with Recorder(path) as rec:
        for i in range(30):
            rec.record(mon.snapshot(i))
    curve = load_curve(str(path))
    last = mon.snapshot(29)
    assert curve.source == "session.jsonl" and curve.model == last.model.name
    assert len(curve.points) >= 20 and curve.points[-1][0] == pytest.approx(last.context_tokens, abs=256)
    assert curve.points[-1][1] == pytest.approx(last.decode_tok_s, rel=0.02)
    assert curve.ceiling == last.ceiling_curve
    rc, out, _err = _run("compare", str(path), str(path))
    assert rc == 0 and out.splitlines()[0].endswith("(session.jsonl)")
