"""kvmon compare A B: two sweep files drawn on one plot and written as CSV, and a file that is not a curve said
clearly."""

from __future__ import annotations

import json
from pathlib import Path

from kvmon_in_process import _run_kvmon as _run
from sweep_curves import F16, Q8, _sweep

from kvmon.core.sweep_table import to_json


def test_kvmon_compare_of_two_sweep_files_writes_the_picture_and_the_csv(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(to_json(_sweep(Q8, [88.0, 66.0, 55.0], 1.0))))
    (tmp_path / "b.json").write_text(json.dumps(to_json(_sweep(F16, [90.0, 60.0], 2.0))))
    rc, out, err = _run("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", str(tmp_path / "c.png"),
                        "--csv", str(tmp_path / "c.csv"))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "KV q8_0 vs f16, -fa on vs auto"
    assert [ln.split()[0] for ln in lines[2:]] == ["1", "4,096"]  # the common depths: b stops at 4K
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((tmp_path / "c.csv").read_text().splitlines()) == 3


def test_a_file_that_is_not_a_curve_is_said_clearly(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"rows": []}')
    (tmp_path / "y.json").write_text("not json at all")
    rc, _out, err = _run("compare", str(tmp_path / "x.json"), str(tmp_path / "y.json"))
    assert rc == 2 and "x.json: not a kvmon sweep" in err
    rc, _out, err = _run("compare", "atlas:7", str(tmp_path / "y.json"))
    assert rc == 2 and "atlas:7: no such configuration" in err
    rc, _out, err = _run("compare", str(tmp_path / "missing.json"), "atlas:1")
    assert rc == 2 and "missing.json: no such file" in err
