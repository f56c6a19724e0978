"""File ▸ Compare… and ``kvmon compare``: two curves named by what differs ("KV q8_0 vs f16"), their table at the
common depths, the picture and CSV; a file that is not a curve said clearly; Settings ▸ Forget measured curves."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvmon.app.atlas import default_atlas
from kvmon.app.sweep import backend_words
from kvmon.cli import main as kvmon_main
from kvmon.core.curve_config import CurveConfig
from kvmon.core.sweep import SweepResult, SweepRow
from kvmon.core.sweep_table import to_json
from kvmon.gui.compare_dialog import CompareDialog
from kvmon.gui.settings import forget_measured_curves

F16 = CurveConfig(backend="llama-server", server_version="b11549", model="tiny-llama-long", model_bytes=2_510_848,
                  quantization="F32", arch="llama", devices=("host",), weight_shares=(1.0,), kv_type_k="f16",
                  kv_type_v="f16", flash_attn="auto", n_ctx=16384, n_slots=1)
Q8 = replace(F16, kv_type_k="q8_0", kv_type_v="q8_0", flash_attn="on")


def _sweep(cfg: CurveConfig, speeds: list[float], t: float) -> SweepResult:
    depths = [1, 4096, 8192][:len(speeds)]
    rows = tuple(SweepRow(d, v, None, 100.0, None, None, None, 64, "server") for d, v in zip(depths, speeds,
                                                                                             strict=True))
    return SweepResult("http://127.0.0.1:1", "llama-server", "b11549", "tiny-llama-long", cfg, 64, rows,
                       ((0, 100.0), (16384, 60.0)), started_unix_s=t)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = kvmon_main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_two_atlas_configurations_are_named_by_what_differs(qtbot: Any, tmp_path: Path) -> None:
    atlas = default_atlas()
    atlas.add_sweep(_sweep(F16, [90.0, 60.0, 45.0], 1000.0))
    atlas.add_sweep(_sweep(Q8, [88.0, 66.0, 55.0], 2000.0))
    dlg = CompareDialog(None, backend_words)
    qtbot.addWidget(dlg)
    a, b, title = dlg.shown  # type: ignore[misc]
    assert title == "KV q8_0 vs f16, -fa on vs auto" and (a.label, b.label) == ("KV q8_0, -fa on", "KV f16, -fa auto")
    table = dlg.plot.table.text().splitlines()
    assert table[0].split()[0] == "depth" and table[-1].split()[:3] == ["8,192", "55.0", "45.0"]
    dlg.save("png", str(tmp_path / "c.png"))
    dlg.save("csv", str(tmp_path / "c.csv"))
    assert (tmp_path / "c.png").stat().st_size > 10_000
    rows = list(csv.reader((tmp_path / "c.csv").open()))
    assert rows[0][:3] == ["depth_tokens", "KV q8_0, -fa on decode_tok_s", "KV f16, -fa auto decode_tok_s"]
    assert rows[-1][:3] == ["8192", "55.0", "45.0"]
    rc, out, _err = _run("compare", "--list")
    assert rc == 0 and out.count("atlas:") == 2 and "KV q8_0" in out


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


def test_forget_measured_curves_empties_the_atlas(qtbot: Any) -> None:
    atlas = default_atlas()
    atlas.add_sweep(_sweep(F16, [90.0, 60.0, 45.0], 1000.0))
    assert atlas.configs()
    assert forget_measured_curves(None, ask=False)  # type: ignore[arg-type]
    assert atlas.configs() == []


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
