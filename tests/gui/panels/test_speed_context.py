"""The hero plot tells the regime story: after a reload the current regime fills the axes, the earlier one stays as
faint points off its top, and the change is said in words where it happened; with no server it says so."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from stories import Watch
from story_window import watch_in_window

from kvmon.core.snapshot import Connection, ConnectionStatus, Snapshot


def test_after_spill_4090_reloads_the_current_regime_sets_the_scale(qapp: Any) -> None:
    """spill-4090 decodes at ~70 tok/s with a 32K context, then reloads with 128K and spills: ~7 tok/s. The y axis
    is the new regime's (its ceiling tops out near 20 tok/s), the ~70 tok/s points of before are above it, and
    the regime's line says "reloaded with 128K: 70 → 7.0 tok/s" (before its first point: "reloaded with 128K (was
    70 tok/s)", and no dot at the old speed)."""
    seen: dict[str, Any] = {}

    def look(win: Any, shown: Any) -> None:
        panel = win.speed_context
        r = shown.snapshot.forecast.regime
        if r.cause == "reload" and r.since_context_tokens is None and shown.snapshot.context_tokens is not None:
            seen["reloading"] = (panel.label_texts(), panel.here.position())  # the prompt read again, no point yet
        if shown.t_s < 428:
            return
        (_x0, _x1), (y0, y1) = panel.plot.getPlotItem().getViewBox().viewRange()
        seen.update(y=(y0, y1), labels=panel.label_texts(), earlier=panel.earlier.getData()[1],
                    measured=panel.measured.getData()[1], ceiling=panel.ceiling.yData,
                    line=panel.regime_line.value() if panel.regime_line.isVisible() else None,
                    context=shown.snapshot.context_tokens)

    watch_in_window("spill-4090", Watch(200.0, 430.0, 2.0), on_poll=look)
    y0, y1 = seen["y"]
    ceiling_top = float(np.max(seen["ceiling"]))
    assert y0 == 0 and ceiling_top < y1 <= 1.5 * ceiling_top, (y1, ceiling_top)  # the new regime fills the axes
    assert float(np.max(seen["earlier"])) > 2 * y1  # the points of before are drawn, off the top of this scale
    assert float(np.max(seen["measured"])) < y1
    words = re.fullmatch(r"reloaded with 128K: (\d+) → (\d+\.\d) tok/s", seen["labels"]["regime"])
    assert words is not None, seen["labels"]
    before, after = float(words[1]), float(words[2])
    assert 60 <= before <= 85 and 5 <= after <= 9
    assert seen["line"] is not None and abs(seen["line"] - 33_000) < 1500 <= seen["context"] - 30_000
    assert seen["labels"]["here"] == "you are here" and "empty" not in seen["labels"]
    # before the new regime's first point: the words at the top, and no dot at a speed of the regime before
    first, marker = seen["reloading"]
    assert re.fullmatch(r"reloaded with 128K \(was \d+ tok/s\)", first["regime"]), first
    assert first["here"] == "you are here" and marker[1] is None


def test_with_no_server_the_plots_say_they_wait_for_it(qapp: Any, tmp_path: Any) -> None:
    """Before a snapshot and while no server answers: "waiting for the server" in the middle, no 0…1 axes; while
    the model loads, that."""
    from kvmon.gui.main_window import MainWindow
    from kvmon.gui.settings import Settings

    win = MainWindow(Settings(str(tmp_path / "s.ini")), tray=False)
    try:
        win.resize(1024, 640)
        win.show()
        hero, strip = win.speed_context, win.speed_time
        qapp.processEvents()
        assert hero.label_texts() == {"empty": "waiting for the server"}
        assert strip.empty.isVisible() and strip.empty.text() == "waiting for the server"
        gone = Snapshot(seq=1, t_monotonic=1.0, t_wall=1.7e9,
                        connection=Connection(ConnectionStatus.UNREACHABLE, "connection refused"))
        win.on_snapshot(gone)
        qapp.processEvents()
        assert hero.label_texts() == {"empty": "waiting for the server"}
        assert strip.empty.isVisible() and not strip.no_prefill.isVisible()
        for axis in (hero.plot.getPlotItem().getAxis("left"), strip.plot.getPlotItem().getAxis("left")):
            assert axis.style["showValues"] is False  # no made-up scale beside the words
        loading = Snapshot(seq=2, t_monotonic=2.0, t_wall=1.7e9 + 1,
                           connection=Connection(ConnectionStatus.LOADING, "loading the model"))
        win.on_snapshot(loading)
        qapp.processEvents()
        assert hero.label_texts() == {"empty": "the model is loading"} and strip.empty.text() == "the model is loading"
        vb = hero.plot.getPlotItem().getViewBox()
        text = hero.labels.texts["empty"]
        centre = text.mapRectToItem(vb, text.boundingRect()).center()
        assert abs(centre.x() - vb.width() / 2) < 2 and abs(centre.y() - vb.height() / 2) < 2
    finally:
        win.close()
        win.deleteLater()
