"""One milestone list: the forecast's depths and the speed chart's lines are the same, and no module keeps another."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvmon.core.analysis import AnalyzerSettings
from kvmon.core.points import ContextBins
from kvmon.core.snapshot import MILESTONES

ROOT = Path(__file__).resolve().parents[1]


def test_the_forecast_is_given_at_every_depth_the_chart_marks(qtbot: object) -> None:
    pytest.importorskip("pytestqt")
    from kvmon.gui.panels.speed_context import SpeedContextPanel

    assert AnalyzerSettings().milestones == MILESTONES
    assert MILESTONES == tuple(sorted(MILESTONES)) and MILESTONES[0] == 8192 and MILESTONES[-1] == 1 << 20
    panel = SpeedContextPanel(ContextBins(256))
    qtbot.addWidget(panel)  # type: ignore[attr-defined]
    assert tuple(panel._milestone_lines) == MILESTONES


def test_no_module_keeps_a_milestone_list_of_its_own() -> None:
    defined = [str(f.relative_to(ROOT)) for f in sorted((ROOT / "kvmon").rglob("*.py"))
               if re.search(r"^\s*MILESTONES\s*=", f.read_text(encoding="utf-8"), re.M)]
    assert defined == ["kvmon/core/snapshot.py"]
