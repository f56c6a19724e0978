"""Memoised physics in the Analyzer: the ceiling curve is reused while its inputs are equal, recomputed when not."""

from __future__ import annotations

import pytest

from kvmon.core.analysis import Analyzer
from kvmon.physics import ceiling as ceiling_mod
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape
from tests.test_analysis import L8B, ModelInfo, ceiling_8b, gpu, gpus, reading


def _model(shape: ModelShape) -> ModelInfo:
    return ModelInfo(name="Llama-3.1-8B-Q4_K_M.gguf", arch="llama", weight_bytes=L8B.weight_bytes, shape=shape)


@pytest.fixture
def curve_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = ceiling_mod.ceiling_curve

    def counting(*args: object, **kw: object) -> object:
        calls.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ceiling_mod, "ceiling_curve", counting)
    return calls


def test_equal_shape_rebuilt_every_poll_reuses_the_curve(curve_calls: list[int]) -> None:
    a = Analyzer()
    first = a.update(reading(0.0, model=_model(ModelShape.from_gguf(L8B.metadata))), gpus(0.0))
    # a source that parses the model again each poll hands over an equal, new shape object
    second = a.update(reading(1.0, ctx=8200, model=_model(ModelShape.from_gguf(L8B.metadata))), gpus(1.0))
    assert len(curve_calls) == 1
    assert second.ceiling_curve == first.ceiling_curve
    assert second.ceiling_curve[-1] == (32768, pytest.approx(ceiling_8b(32768)))


def test_curve_recomputed_when_bandwidth_or_n_ctx_changes(curve_calls: list[int]) -> None:
    a = Analyzer()
    a.update(reading(0.0), gpus(0.0))
    slower = a.update(reading(1.0), gpus(1.0, gpu(bw=504e9)))
    assert len(curve_calls) == 2
    assert slower.ceiling_curve[-1] == (32768, pytest.approx(ceiling_8b(32768, bw=504e9)))
    longer = a.update(reading(2.0, n_ctx=65536), gpus(2.0, gpu(bw=504e9)))
    assert len(curve_calls) == 3
    assert longer.ceiling_curve[-1] == (65536, pytest.approx(ceiling_8b(65536, bw=504e9)))


def test_another_shape_clears_the_memo(curve_calls: list[int]) -> None:
    a = Analyzer()
    shape = ModelShape.from_gguf(L8B.metadata)
    a.update(reading(0.0, model=_model(shape)), gpus(0.0))
    # Llama-2-7B: same weights here, but no GQA, so 4× the KV bytes per token and a lower ceiling at depth
    other = ModelShape.from_gguf(PRESETS["llama-2-7b"].metadata)
    s = a.update(reading(1.0, model=_model(other)), gpus(1.0))
    assert len(curve_calls) == 2
    assert s.ceiling_curve[-1][1] < ceiling_8b(32768)
