"""One milestone list: the forecast's depths are the ones the speed chart labels, and no module keeps another."""

from __future__ import annotations

import re

import pytest
from repo_paths import ROOT

from kvmon.core.analysis import AnalyzerSettings
from kvmon.core.points import ContextBins
from kvmon.core.snapshot import MILESTONES


def test_the_chart_marks_the_forecast_at_each_of_its_depths(qtbot: object) -> None:
    """The chart labels the depths the forecast gives (within its axis), from the Snapshot: no list of its own."""
    pytest.importorskip("pytestqt")
    from synthetic import SyntheticMonitor

    from kvmon.gui.panels.speed_context import SpeedContextPanel

    assert AnalyzerSettings().milestones == MILESTONES
    assert MILESTONES == tuple(sorted(MILESTONES)) and MILESTONES[0] == 8192 and MILESTONES[-1] == 1 << 20
    panel = SpeedContextPanel(ContextBins(256))
    qtbot.addWidget(panel)  # type: ignore[attr-defined]
    s = SyntheticMonitor().snapshot(20)
    panel.update_snapshot(s)
    assert sorted(panel._milestones) == sorted(m.context_tokens for m in s.forecast.milestones) != []


def test_no_module_keeps_a_milestone_list_of_its_own() -> None:
    defined = [str(f.relative_to(ROOT)) for f in sorted((ROOT / "kvmon").rglob("*.py"))
               if re.search(r"^\s*MILESTONES\s*=", f.read_text(encoding="utf-8"), re.M)]
    assert defined == ["kvmon/core/snapshot.py"]
