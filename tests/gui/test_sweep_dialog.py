"""Tools ▸ Measure speed at every depth… on the simulated llama-server: the cost said before Start, the sweep's
points in its table, a cancel that leaves the server idle, and the points on the dashboard's speed-vs-context plot
with a marker of their own (earlier sessions' faded), the forecast fitted on them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvmon.app.atlas import Atlas, SessionCurves
from kvmon.app.monitor import Monitor
from kvmon.core.analysis import Analyzer
from kvmon.core.points import ContextBins
from kvmon.gui.panels.atlas_dots import EARLIER_NAME, SWEEP_NAME
from kvmon.gui.panels.speed_context import SpeedContextPanel
from kvmon.gui.sweep_dialog import SweepDialog
from kvmon.sim.server import SimServer
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.nvml import NvmlSource


@pytest.fixture
def sim() -> Iterator[SimServer]:
    server = SimServer("seed-3090x2", speed=50.0, autoplay=False)
    server.start()
    yield server
    server.stop()


def _monitor(sim: SimServer, atlas: Atlas) -> Monitor:
    clock = sim.clock.now
    curves = SessionCurves(atlas)
    return Monitor(LlamaServerSource(sim.url, log_path=sim.log_path, clock=clock, timeout_s=5.0),
                   NvmlSource(nvml=sim.nvml, clock=clock), sim.host_source(),
                   Analyzer(clock=clock, curve_memory=curves), server_pids=sim.server_pids, clock=clock, curves=curves)


def _dialog(qtbot: Any, sim: SimServer, monitor: Monitor, to: int, steps: int = 4) -> SweepDialog:
    monitor.poll()
    snap = monitor.poll()
    dlg = SweepDialog(None, snap, monitor, None)
    qtbot.addWidget(dlg)
    dlg.to.setValue(to)
    dlg.steps.setValue(steps)
    qtbot.waitUntil(lambda: dlg.start_button.isEnabled(), timeout=20000)
    return dlg


def test_the_dialog_says_the_cost_then_sweeps_and_the_plot_shows_the_sweep(qtbot: Any, sim: SimServer,
                                                                            tmp_path: Path) -> None:
    atlas = Atlas(tmp_path / "atlas.sqlite")
    earlier = _monitor(sim, atlas)  # a sweep of an earlier session, to 32K
    dlg = _dialog(qtbot, sim, earlier, 32768, 2)
    dlg.start()
    qtbot.waitUntil(lambda: dlg.sweep_result is not None, timeout=60000)
    earlier.close()

    monitor = _monitor(sim, atlas)
    dlg = _dialog(qtbot, sim, monitor, 131072)
    text = dlg.plan_text.text()
    assert "131,072 prompt tokens to read" in text and "at the prefill rate measured first" in text
    assert "it fits" in text and dlg.status.text().startswith("Ready: it will take")
    dlg.start()
    qtbot.waitUntil(lambda: dlg.sweep_result is not None, timeout=60000)
    result = dlg.sweep_result
    assert result is not None and result.outcome == "done" and result.depth_reached == 131072
    assert dlg.plot.table.text().splitlines()[0].split()[:3] == ["depth", "decode", "tok/s"]
    dlg.save("csv", str(tmp_path / "sweep.csv"))
    dlg.save("png", str(tmp_path / "sweep.png"))
    assert (tmp_path / "sweep.csv").read_text().count("\n") == len(result.rows) + 1
    assert (tmp_path / "sweep.png").stat().st_size > 10_000

    snap = monitor.poll()  # the dashboard's next poll: the sweep's points and the earlier session's
    kinds = {p.kind for p in snap.atlas.points} if snap.atlas else set()
    assert kinds == {"sweep", "earlier"}
    assert snap.forecast.fit_points >= len(result.rows), "the forecast is fitted on the sweep's points"
    panel = SpeedContextPanel(ContextBins())
    qtbot.addWidget(panel)
    panel.update_snapshot(snap)
    sx, _sy = panel.atlas_dots.sweep.getData()
    ex, _ey = panel.atlas_dots.earlier.getData()
    assert sorted(map(int, sx)) == [r.depth_tokens for r in result.rows]
    assert len(ex) == 3 and max(ex) <= 32768
    legend = [label.text for _item, label in panel.plot.getPlotItem().legend.items]
    assert SWEEP_NAME in legend and EARLIER_NAME in legend
    assert panel.forecast.getData()[0] is not None and len(panel.forecast.getData()[0])
    monitor.close()


def test_cancel_in_the_dialog_stops_the_sweep_and_leaves_the_server_idle(qtbot: Any, tmp_path: Path) -> None:
    sim = SimServer("seed-3090x2", speed=2.0, autoplay=False)  # slow enough to cancel in the middle
    sim.start()
    try:
        monitor = _monitor(sim, Atlas(tmp_path / "atlas.sqlite"))
        dlg = _dialog(qtbot, sim, monitor, 65536)
        dlg.start()
        qtbot.waitUntil(lambda: "depth" in dlg.status.text() and dlg.bar.value() > 0, timeout=30000)
        dlg.cancel()
        qtbot.waitUntil(lambda: dlg.sweep_result is not None, timeout=10000)
        assert dlg.sweep_result is not None and dlg.sweep_result.outcome == "cancelled"
        assert dlg.status.text().startswith("Cancelled")
        t = time.monotonic()
        while any(s["is_processing"] for s in httpx.get(f"{sim.url}/slots", timeout=5).json()):
            assert time.monotonic() - t < 1.0
            time.sleep(0.05)
        monitor.close()
    finally:
        sim.stop()


def test_a_sweep_past_n_ctx_is_refused_in_the_dialog(qtbot: Any, sim: SimServer, tmp_path: Path) -> None:
    monitor = _monitor(sim, Atlas(tmp_path / "atlas.sqlite"))
    monitor.poll()
    dlg = SweepDialog(None, monitor.poll(), monitor, None)
    qtbot.addWidget(dlg)
    dlg.to.setValue(dlg.to.maximum())  # n_ctx: no room for the tokens generated there
    assert dlg.plan_text.text().startswith("Refused: a sweep to 262,144 tokens needs 262,208 tokens of context")
    assert not dlg.start_button.isEnabled()
    monitor.close()
