"""What-if calculator: real presets and the GPU table → KV size, ceiling and the fit verdict, in the panel."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from synthetic import SyntheticMonitor

from kvmon.gui.whatif import GpuChoice, WhatIfPanel, compute_whatif, live_gpu, presets

GIB = 1024**3
RTX3090 = GpuChoice("RTX 3090", 936e9, 24 * GIB, "table")


def _pick(panel: WhatIfPanel, gpu: str, model: str, ctx: int, cache: str) -> None:
    panel.gpu.setCurrentIndex(panel.gpu.findText(gpu))
    panel.model.setCurrentIndex(panel.model.findData(model))
    panel.context.setCurrentIndex(panel.context.findData(ctx))
    panel.cache.setCurrentIndex(panel.cache.findData(cache))


def test_llama_8b_kv_size_matches_llama_cpp_and_q8_halves_it() -> None:
    p = presets()["llama-3.1-8b"]
    f16 = compute_whatif(RTX3090, p.metadata, p.weight_bytes, 32768, "f16")
    q8 = compute_whatif(RTX3090, p.metadata, p.weight_bytes, 32768, "q8_0")
    # 32 layers × 8 KV heads × 128 × (K + V) × 2 bytes = 128 KiB per token → 4 GiB at 32K.
    assert f16.kv_allocated_bytes == 4 * GIB
    assert q8.kv_allocated_bytes == 4 * GIB * 34 // 64
    assert f16.fits and q8.fits
    assert q8.ceiling_at_ctx_tok_s > f16.ceiling_at_ctx_tok_s
    assert f16.curve[0][0] == 0 and f16.curve[-1][0] == 32768
    assert f16.curve[0][1] > f16.curve[-1][1]
    assert f16.max_context_fitting == 131072  # capped by the training context: 16 GiB of KV + weights fit
    small = GpuChoice("RTX 4060 Ti", 288e9, 16 * GIB, "table")
    f16_small = compute_whatif(small, p.metadata, p.weight_bytes, 32768, "f16")
    q8_small = compute_whatif(small, p.metadata, p.weight_bytes, 32768, "q8_0")
    assert 65536 < f16_small.max_context_fitting < q8_small.max_context_fitting


def test_70b_spills_on_one_3090() -> None:
    p = presets()["llama-3.1-70b"]
    r = compute_whatif(RTX3090, p.metadata, p.weight_bytes, 8192, "f16")
    assert r.fits is False and r.over_bytes > 0 and r.max_context_fitting == 0


def test_bad_model_metadata_gives_a_reason_not_an_exception() -> None:
    r = compute_whatif(RTX3090, {"general.architecture": "llama"}, 1, 4096, "f16")
    assert r.reason and r.curve == () and r.kv_allocated_bytes is None


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
