"""What-if panel: the calculator's picks and answer on screen, the live GPU and model offered first."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from synthetic import SyntheticMonitor

from kvmon.core.whatif import compute_whatif, live_gpu, presets
from kvmon.gui.whatif import WhatIfPanel


def _pick(panel: WhatIfPanel, gpu: str, model: str, ctx: int, cache: str) -> None:
    panel.gpu.setCurrentIndex(panel.gpu.findText(gpu))
    panel.model.setCurrentIndex(panel.model.findData(model))
    panel.context.setCurrentIndex(panel.context.findData(ctx))
    panel.cache.setCurrentIndex(panel.cache.findData(cache))


def test_panel_updates_on_picks_and_offers_the_live_gpu(qtbot) -> None:
    panel = WhatIfPanel()
    qtbot.addWidget(panel)
    _pick(panel, "RTX 3090", "llama-3.1-8b", 32768, "f16")
    assert panel.kv.text() == "4.00 GiB"
    assert "fits" in panel.verdict.text()
    _x, y = panel.curve.getData()
    assert y is not None and len(y) == 65
    _pick(panel, "RTX 3090", "llama-3.1-70b", 8192, "f16")
    assert "spills" in panel.verdict.text()
    s = SyntheticMonitor().snapshot(1)
    panel.set_live(s)
    assert panel.gpu.currentIndex() == 0 and panel.gpu.currentText().startswith("live: NVIDIA GeForce RTX 3090")
    assert live_gpu(s).bandwidth_bytes_per_s == 936e9


def test_panel_offers_the_live_model_with_its_cache_type(qtbot) -> None:
    """The loaded model's shape and weights (from the Snapshot) are the first model choice."""
    import dataclasses

    from kvmon.physics.shape import ModelShape

    p = presets()["llama-3.1-8b"]
    s = SyntheticMonitor().snapshot(1)
    shape = ModelShape.from_gguf(p.metadata)
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, name="Meta-Llama-3.1-8B", shape=shape,
                                                         weight_bytes=p.weight_bytes, kv_type_k="q8_0"))
    panel = WhatIfPanel()
    qtbot.addWidget(panel)
    panel.set_live(s)
    assert panel.model.currentIndex() == 0 and panel.model.currentText().startswith("live: Meta-Llama-3.1-8B")
    assert panel.cache.currentData() == "q8_0"  # the server's own cache type
    panel.context.setCurrentIndex(panel.context.findData(32768))
    expected = compute_whatif(panel.gpu.currentData(), p.metadata, p.weight_bytes, 32768, "q8_0")
    assert panel.result == expected and panel.kv.text() == "2.12 GiB"
    panel.set_live(s)  # the same model again: nothing to redo
    assert panel.model.count() == len(presets()) + 1
    # no shape (e.g. the model file is not on this machine): no live choice, the presets stay
    bare = WhatIfPanel()
    qtbot.addWidget(bare)
    bare.set_live(SyntheticMonitor().snapshot(1))
    assert bare.model.findData("__live__") == -1


def test_the_verdict_reads_as_words_with_its_word_in_its_level_colour(qtbot) -> None:
    """The answer is plain words ("● fits up to 32K tokens…"), never markup, its word in the level's colour."""
    from PySide6 import QtGui

    from kvmon.gui import theme

    panel = WhatIfPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 600)
    panel.show()
    qtbot.waitExposed(panel)
    word_colour = QtGui.QPalette.ColorRole.WindowText
    _pick(panel, "RTX 3090", "llama-3.1-8b", 32768, "f16")
    assert "<" not in panel.verdict.text() and "style" not in panel.verdict.text()
    assert panel.verdict.word.text() == "● fits"
    rest = panel.verdict.rest
    assert rest.text().startswith("up to ") and rest.text().endswith(" before spilling")
    assert rest.height() >= rest.heightForWidth(rest.width())  # whole, on as many lines as its column needs
    assert "\u00a0tokens" in rest.text()  # a figure and its unit stay on one line
    assert panel.verdict.word.palette().color(word_colour) == theme.color("ok")
    _pick(panel, "RTX 3090", "llama-3.1-70b", 8192, "f16")
    assert panel.verdict.word.text() == "■ spills"
    assert rest.text().startswith("by ") and "<" not in panel.verdict.text()
    assert panel.verdict.word.palette().color(word_colour) == theme.color("critical")
    assert "VRAM" in panel.verdict.rest.toolTip()
