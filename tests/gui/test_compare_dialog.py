"""File ▸ Compare… and ``kvmon compare``: two curves named by what differs ("KV q8_0 vs f16"), their table at the
common depths, the picture and CSV; a file that is not a curve said clearly; Settings ▸ Forget measured curves."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from kvmon_in_process import _run_kvmon as _run
from sweep_curves import F16, Q8, _sweep

from kvmon.app.atlas import default_atlas
from kvmon.gui.compare_dialog import CompareDialog
from kvmon.gui.settings import forget_measured_curves


def test_two_atlas_configurations_are_named_by_what_differs(qtbot: Any, tmp_path: Path) -> None:
    atlas = default_atlas()
    atlas.add_sweep(_sweep(F16, [90.0, 60.0, 45.0], 1000.0))
    atlas.add_sweep(_sweep(Q8, [88.0, 66.0, 55.0], 2000.0))
    dlg = CompareDialog(None)
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


def test_forget_measured_curves_empties_the_atlas(qtbot: Any) -> None:
    atlas = default_atlas()
    atlas.add_sweep(_sweep(F16, [90.0, 60.0, 45.0], 1000.0))
    assert atlas.configs()
    assert forget_measured_curves(None, ask=False)  # type: ignore[arg-type]
    assert atlas.configs() == []


