"""The forecast band on screen: the speed-vs-context panel drawn (offscreen) from real analysis Snapshots.

Few, close depths and a long way to go (a hybrid model with 256K of context) are what made the old band's fast edge
rise to touch the ceiling just past the measured points and narrow again; here both edges, as drawn, fall with
depth and stay under the ceiling curve drawn beside them. On Apple's Metal the forecast stops at 8K and says so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from analysis_readings import GIB, FixedRates, gpu, gpus, reading

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import ModelInfo
from kvmon.core.snapshot import Snapshot
from kvmon.gui.main_window import MainWindow
from kvmon.gui.settings import Settings
from kvmon.physics.presets import PRESETS

Q27 = PRESETS["qwen3.5-27b"]
HYBRID = ModelInfo(name="Qwen3.5-27B-Q4_K_M.gguf", arch="qwen35", weight_bytes=Q27.weight_bytes, shape=Q27.shape())


@pytest.fixture
def window(qapp, qtbot, tmp_path: Path) -> MainWindow:
    w = MainWindow(Settings(str(tmp_path / "kvmon-test.ini")), tray=False)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()
    w.deleteLater()


def _session(depths: list[int], speed, *g: object, n_ctx: int = 262144) -> Snapshot:  # type: ignore[no-untyped-def]
    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    s = None
    for i, ctx in enumerate(depths):
        rates.decode = speed(ctx)
        s = a.update(reading(float(i), ctx=ctx, n_ctx=n_ctx, model=HYBRID), gpus(float(i), *g))  # type: ignore[arg-type]
    assert s is not None
    return s


def _drawn(window: MainWindow) -> tuple[np.ndarray, ...]:
    panel = window.speed_context
    x, mid = (np.asarray(v, dtype=float) for v in panel.forecast.getData())
    low = np.asarray(panel.forecast_low.getData()[1], dtype=float)
    high = np.asarray(panel.forecast_high.getData()[1], dtype=float)
    cx, cy = (np.asarray(v, dtype=float) for v in panel.ceiling.curve.getData())
    return x, mid, low, high, np.interp(x, cx, cy)


def test_the_band_as_drawn_falls_with_depth_and_stays_under_the_ceiling(window: MainWindow, qtbot) -> None:
    def speed(c: int) -> float:  # a hybrid on one 48 GB RTX A6000: 1.2 ms more per 10K tokens of depth
        return 1 / (0.0245 + 1.2e-7 * c)

    card = gpu(name="NVIDIA RTX A6000", bw=768e9, total=48 * GIB, free=20 * GIB, server=27 * GIB)
    s = _session([3000, 3300, 3600, 3900], speed, card)
    assert s.ceiling_tok_s is not None and s.forecast.fit_form != "context_linear"
    window.on_snapshot(s)
    qtbot.wait(50)
    x, mid, low, high, ceiling = _drawn(window)
    assert x.size == len(s.forecast.curve) > 10 and x[-1] == 262144
    assert np.all(np.diff(x) > 0)
    for edge in (low, mid, high):  # monotone: no bulge
        assert np.all(np.diff(edge) <= 1e-9 * edge[1:]), edge
    assert np.all(low <= mid) and np.all(mid <= high)
    assert np.all(high <= ceiling * (1 + 1e-3))  # under the ceiling curve (drawn rounded down to 4 digits)
    near = (x > 3900) & (x <= 2 * 3900 + 4096)
    assert near.any() and np.all(high[near] < 0.97 * ceiling[near])  # just past the points it keeps off the ceiling
    # a band, not a line; narrow at twice the deepest point, wide 60 times deeper
    at_2x = int(np.searchsorted(x, 2 * 3900))
    assert 0.0 < (high[at_2x] - low[at_2x]) / mid[at_2x] < 0.2 < (high[-1] - low[-1]) / mid[-1]
    assert low[-1] > 0
    img = window.speed_context.grab().toImage()
    assert not img.isNull() and not window.speed_context.band.boundingRect().isEmpty()
    assert not window.speed_context.limit_line.isVisible()


def test_a_model_with_no_forecast_yet_shows_no_band(window: MainWindow, qtbot) -> None:
    """A router that follows another model (no points of its own yet): the last model's band does not stay on
    screen above the new model's ceiling (a fill between two emptied curves kept its old path)."""
    import dataclasses

    from kvmon.core.snapshot import Forecast

    def speed(c: int) -> float:
        return 1 / (0.0245 + 1.2e-7 * c)

    card = gpu(name="NVIDIA RTX A6000", bw=768e9, total=48 * GIB, free=20 * GIB, server=27 * GIB)
    s = _session([3000, 3300, 3600, 3900], speed, card)
    window.on_snapshot(s)
    qtbot.wait(50)
    band = window.speed_context.band
    assert band.isVisible() and not band.path().isEmpty()
    other = dataclasses.replace(s, seq=s.seq + 1, forecast=Forecast())  # another model: nothing to forecast from
    window.on_snapshot(other)
    qtbot.wait(50)
    assert not band.isVisible() or band.path().isEmpty()
    window.on_snapshot(dataclasses.replace(s, seq=s.seq + 2))  # its own forecast again: the band comes back
    qtbot.wait(50)
    assert band.isVisible() and not band.path().isEmpty()


def test_on_metal_the_panel_shows_where_the_forecast_stops(window: MainWindow, qtbot) -> None:
    apple = gpu(name="Apple M2 Max", vendor="apple", bw=400e9)

    def speed(c: int) -> float:
        return 1 / (0.045 + 3e-7 * c)

    s = _session(list(range(1000, 6000, 500)), speed, apple, n_ctx=32768)
    assert s.forecast.valid_to_tokens == 8192
    window.on_snapshot(s)
    qtbot.wait(50)
    panel = window.speed_context
    x, *_ = _drawn(window)
    assert x[-1] == 8192  # the curve ends at the switch
    assert panel.limit_line.isVisible() and panel.limit_line.value() == 8192
    assert panel.label_texts()["limit"] == "kernel-dependent beyond 8K"
    assert "Metal's attention kernels change with depth" in panel.limit_line.toolTip()
    assert panel.milestone_labels()[8192].startswith("8K ~")
    assert 32768 not in panel.milestone_labels()  # no number past the switch
    assert "kernel-dependent beyond 8k" in panel.plot.toolTip().lower()


def test_speculation_draws_the_one_token_ceiling_beneath_the_lifted_one(window: MainWindow, qtbot) -> None:
    import dataclasses

    from kvmon.core.snapshot import SpeculativeView

    def speed(c: int) -> float:
        return 1 / (0.0245 + 1.2e-7 * c)

    card = gpu(name="NVIDIA RTX A6000", bw=768e9, total=48 * GIB, free=20 * GIB, server=27 * GIB)
    s = _session([3000, 3300, 3600, 3900], speed, card)
    k = 1.8
    lifted = tuple((c, v * k) for c, v in s.ceiling_curve)
    spec = SpeculativeView(drafts=50, draft_tokens=150, accepted_tokens=40, generated_tokens=90, tokens_per_step=k,
                           acceptance_rate=40 / 150, one_token_ceiling_tok_s=s.ceiling_tok_s,
                           one_token_curve=s.ceiling_curve)
    speculating = dataclasses.replace(s, seq=s.seq + 1, ceiling_curve=lifted, speculative=spec,
                                      ceiling_tok_s=(s.ceiling_tok_s or 0) * k)
    window.on_snapshot(speculating)
    qtbot.wait(50)
    panel = window.speed_context
    x1, y1 = (np.asarray(v, dtype=float) for v in panel.one_token.getData())
    cx, cy = (np.asarray(v, dtype=float) for v in panel.ceiling.curve.getData())
    assert x1.size and np.allclose(y1 * k, np.interp(x1, cx, cy), rtol=1e-3)
    names = [label.text for _item, label in panel.plot.getPlotItem().legend.items]
    assert "ceiling without speculation" in names
    assert "(speculative, 1.80 tokens/step)" in window.header.efficiency.whole()
    window.on_snapshot(dataclasses.replace(s, seq=s.seq + 2))  # no longer speculating
    qtbot.wait(50)
    assert panel.one_token.getData()[0] is None or len(panel.one_token.getData()[0]) == 0
    assert "ceiling without speculation" not in [label.text for _i, label in panel.plot.getPlotItem().legend.items]
