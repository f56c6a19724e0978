"""Memoised physics in the Analyzer: the ceiling curve is reused while its inputs are equal, recomputed when not."""

from __future__ import annotations

import pytest
from analysis_readings import GIB, L8B, FixedRates, ceiling_8b, gpu, gpus, reading

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import ModelInfo
from kvmon.physics import ceiling as ceiling_mod
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape


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


def test_milestones_computed_once_per_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls that keep the fit (no refit), the devices and the cache types reuse the milestones."""
    from kvmon.core.analysis.forecasting import Forecaster

    calls: list[int] = []
    real = Forecaster._predict

    def counting(self: Forecaster, *args: object) -> object:
        calls.append(1)
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Forecaster, "_predict", counting)
    rates = FixedRates(decode=50.0)
    a = Analyzer(rate_tracker=rates)
    for i in range(20):  # a fit from the first points; a refit when the points grew by a quarter
        rates.decode = 1 / (0.010 + 1e-6 * (1000 + 500 * i))
        s = a.update(reading(float(i), ctx=1000 + 500 * i), gpus(float(i)))
    fits = len(calls)
    assert fits < 20 and s.forecast.milestones
    idle = a.update(reading(20.0, ctx=10500, processing=False), gpus(20.0))  # no new point: same fit
    assert len(calls) == fits and idle.forecast.milestones == s.forecast.milestones
    slower = a.update(reading(21.0, ctx=10500, processing=False), gpus(21.0, gpu(bw=504e9)))
    assert len(calls) == fits + 1  # other devices: computed again
    assert slower.forecast.milestones[-1].ceiling_tok_s == pytest.approx(ceiling_8b(32768, bw=504e9))


def test_vram_standing_still_has_no_trend_and_a_fall_after_it_is_seen() -> None:
    a = Analyzer(rate_tracker=FixedRates(decode=40.0))
    s = None
    for i in range(120):  # two minutes of unchanged free VRAM
        s = a.update(reading(float(i)), gpus(float(i), gpu(free=8 * GIB)))
    assert s is not None and s.forecast.seconds_until_vram_full is None
    grow = 50 * 2**20
    for i in range(120, 200):  # then something takes 50 MiB/s
        s = a.update(reading(float(i)), gpus(float(i), gpu(free=8 * GIB - grow * (i - 119))))
    assert s.forecast.seconds_until_vram_full is not None
    assert s.forecast.seconds_until_vram_full < (8 * GIB - grow * 80) / grow * 2


def test_the_model_view_is_made_again_only_when_what_it_reads_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll while a reply decodes hands over the same model and config: the view is the last poll's, with the same
    provenance and reasons; another config, reason or slot size makes it again, with what that changes."""
    from kvmon.core.analysis import model_view as mv
    from kvmon.core.readings import ServerConfig

    calls: list[int] = []
    real = mv.model_view

    def counting(*args: object) -> object:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(mv, "model_view", counting)
    model, config = _model(ModelShape.from_gguf(L8B.metadata)), ServerConfig(n_ctx_total=32768, n_parallel=1)
    a = Analyzer(rate_tracker=FixedRates(decode=40.0))
    first = a.update(reading(0.0, model=model, config=config), gpus(0.0))
    second = a.update(reading(1.0, ctx=8300, model=model, config=config), gpus(1.0))
    assert len(calls) == 1
    assert second.model is first.model and second.context_tokens == 8300
    assert second.provenance["kv_bytes_per_token"] == first.provenance["kv_bytes_per_token"] == "computed"
    noted = a.update(reading(2.0, model=model, config=config, reasons={"weight_bytes": "size hidden"}), gpus(2.0))
    assert len(calls) == 2 and noted.reasons["weight_bytes"] == "size hidden"  # the reading's own reason stays
    after = a.update(reading(3.0, model=model, config=config), gpus(3.0))
    assert len(calls) == 3 and "weight_bytes" not in after.reasons
    q8 = a.update(reading(4.0, model=model, config=ServerConfig(n_ctx_total=32768, n_parallel=1, type_k="q8_0",
                                                                 type_v="q8_0")), gpus(4.0))
    assert len(calls) == 4 and q8.model.kv_type_k == "q8_0"
    assert q8.model.kv_bytes_per_token == pytest.approx(first.model.kv_bytes_per_token * 34 / 64)
    wider = a.update(reading(5.0, n_ctx=65536, model=model, config=config), gpus(5.0))
    assert len(calls) == 5 and wider.model.n_ctx == 65536
