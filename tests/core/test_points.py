"""The session store of measured points: one rule for a point, one for "the model changed", every view from one feed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from synthetic import SyntheticMonitor

from kvmon.core.points import ContextBins, MeasuredPoints, RegimeStep, measured_point, model_key
from kvmon.core.rates import ENDED_REPLIES
from kvmon.core.snapshot import Connection, ConnectionStatus, ModelView, Regime, SlotView, Snapshot


def test_a_point_is_a_measured_speed_at_a_known_depth_with_one_conversation_generating() -> None:
    one = (SlotView(0, 8192, 4000, True, 41.0), SlotView(1, 8192, 900, False, None))
    assert measured_point(one, 4000, 40.0) == (4000.0, 41.0)  # the deepest conversation's own speed
    two = (SlotView(0, 8192, 4000, True, 30.0), SlotView(1, 8192, 900, True, 31.0))
    assert measured_point(two, 4000, 61.0) is None  # they share the bus: neither speed belongs to its depth
    assert measured_point((), 300, 50.0) == (300.0, 50.0)  # no slots (Ollama through the proxy): the total
    assert measured_point(one, None, 40.0) is None and measured_point(one, 4000, None) is None
    assert measured_point((), 300, float("nan")) is None
    # the replies that ended between polls ran at their own depths: their speed is no point at this one
    assert measured_point(one, 4000, 40.0, ENDED_REPLIES) is None


def test_the_model_changes_when_a_named_model_differs_and_never_for_an_unnamed_one() -> None:
    m = ModelView(name="a.gguf", arch="llama", weight_bytes=1, n_ctx=8192, kv_type_k="f16", kv_type_v="f16")
    assert model_key(None, ModelView()) is None
    # another n_ctx or cache type is the same model in another regime (kvmon.core.analysis.regimes)
    assert model_key("u", m) == model_key("u", dataclasses.replace(m, kv_type_v="q8_0", n_ctx=16384))
    assert model_key("u", m) != model_key("v", m)
    store = MeasuredPoints()
    assert store.observe_model(model_key("u", m)) is False  # the first model is no change
    assert store.observe_model(None) is False and store.model == model_key("u", m)
    assert store.observe_model(model_key("u", dataclasses.replace(m, name="b.gguf"))) is True
    assert store.observe_model(model_key("u", dataclasses.replace(m, weight_bytes=2, name="b.gguf"))) is True


def test_another_regime_of_the_same_model_keeps_its_points_as_earlier_ones() -> None:
    store = MeasuredPoints()
    snaps = _snaps(6)
    for i, s in enumerate(snaps):
        regime = 1 if i < 4 else 2
        store.add(dataclasses.replace(s, forecast=dataclasses.replace(s.forecast, regime=Regime(index=regime))))
    assert store.regime == 2
    assert store.bins.points()[0].size == 2 and store.earlier_bins.points()[0].size == 4
    assert len(store) == 6 and len(store.sample()) == 6  # the ring and the card keep the whole session
    other = dataclasses.replace(snaps[-1], model=dataclasses.replace(snaps[-1].model, name="other"),
                                forecast=dataclasses.replace(snaps[-1].forecast, regime=Regime(index=3)))
    assert store.add(other) is True  # another model: everything starts again, earlier regimes too
    assert store.bins.points()[0].size == 1 and store.earlier_bins.points()[0].size == 0


def _snaps(n: int) -> list[Snapshot]:
    mon = SyntheticMonitor()
    return [mon.snapshot(i) for i in range(1, n + 1)]


def test_every_view_comes_from_one_feed_and_starts_again_with_the_model() -> None:
    store = MeasuredPoints(capacity=4, sample_max=100)
    snaps = _snaps(6)
    down = Snapshot(seq=99, t_monotonic=6.5, t_wall=0.0, connection=Connection(ConnectionStatus.UNREACHABLE, "x"))
    for s in snaps[:3]:
        assert store.add(s) is False
    assert store.add(down) is False and len(store) == 3  # a poll that read no server changes nothing
    for s in snaps[3:]:
        store.add(s)
    ctx = [s.context_tokens for s in snaps]
    assert len(store) == 4 and store.latest()[:, 0].tolist() == ctx[2:]  # the newest four, oldest first
    assert store.latest(2)[:, 1].tolist() == [s.decode_tok_s for s in snaps[4:]]
    assert [c for c, _ in store.sample()] == ctx  # the sample covers the whole session
    assert store.bins.points()[0].size == 6
    other = dataclasses.replace(snaps[-1], seq=7, model=dataclasses.replace(snaps[-1].model, name="other"))
    version = store.version
    assert store.add(other) is True
    assert len(store) == 1 and len(store.sample()) == 1 and store.bins.points()[0].size == 1
    assert store.version > version


def test_the_sample_is_thinned_evenly_and_the_ring_keeps_every_point_it_can_hold() -> None:
    store = MeasuredPoints(capacity=3000, sample_max=100)
    base = _snaps(1)[0]
    for i in range(2500):
        store.add(dataclasses.replace(base, seq=i, t_monotonic=float(i), context_tokens=i,
                                      slots=(SlotView(0, 8192, i, True, 40.0),)))
    assert len(store) == 2500 and store.latest()[0, 0] == 0.0 and store.latest()[-1, 0] == 2499.0
    assert 50 <= len(store.sample()) < 100
    assert np.all(np.diff([c for c, _ in store.sample()]) > 0)  # evenly thinned, in order


def test_clear_forgets_the_model_too() -> None:
    store = MeasuredPoints()
    for s in _snaps(3):
        store.add(s)
    store.clear()
    assert len(store) == 0 and store.model is None and store.bins.points()[0].size == 0
    assert store.add(_snaps(1)[0]) is False  # a first model again


@pytest.mark.parametrize("n", [0, 1])
def test_empty_views(n: int) -> None:
    store = MeasuredPoints()
    assert store.latest().shape == (0, 2) and store.sample() == ()
    assert store.latest(n).shape == (0, 2)


def test_the_fit_and_the_plot_start_again_on_the_same_poll() -> None:
    """The analysis's fit and a dashboard's store, fed the analysis's snapshots, agree on every model change."""
    from analysis_readings import L8B, SHAPE_8B, FixedRates, gpus, reading

    from kvmon.core.analysis import Analyzer
    from kvmon.core.readings import ModelInfo

    a = Analyzer(rate_tracker=FixedRates(decode=50.0))
    plot = MeasuredPoints()
    other = ModelInfo(name="other.gguf", weight_bytes=L8B.weight_bytes, shape=SHAPE_8B)
    unnamed = ModelInfo(weight_bytes=L8B.weight_bytes, shape=SHAPE_8B)
    models = [None] * 4 + [unnamed] * 2 + [None] * 2 + [other] * 3
    for i, m in enumerate(models):
        s = a.update(reading(float(i), ctx=1000 + 100 * i, **({"model": m} if m is not None else {})), gpus(float(i)))
        plot.add(s)
        assert s.forecast.fit_points == len(plot), i  # the same points, restarted on the same poll
    assert len(plot) == 3


def test_a_new_regime_keeps_how_the_speed_changed() -> None:
    """The last speed measured before a reload, the n_ctx then, and the first speed measured after it: what the
    speed-vs-context plot says at the change; none for the first regime, and none again with another model."""
    store = MeasuredPoints()
    snaps = _snaps(7)
    before = snaps[3]
    for i, s in enumerate(snaps):
        regime = Regime(index=1 if i < 4 else 2, cause="start" if i < 4 else "reload")
        n_ctx = 32768 if i < 4 else 131072
        s = dataclasses.replace(s, model=dataclasses.replace(s.model, n_ctx=n_ctx),
                                forecast=dataclasses.replace(s.forecast, regime=regime))
        if i == 4:  # the reload's first poll: no speed yet
            s = dataclasses.replace(s, decode_tok_s=None)
        store.add(s)
        if i == 3:
            assert store.step is None  # the first regime: nothing to compare
    assert store.step == RegimeStep(before.decode_tok_s, 32768, snaps[5].decode_tok_s)
    other = dataclasses.replace(snaps[-1], model=dataclasses.replace(snaps[-1].model, name="other"),
                                forecast=dataclasses.replace(snaps[-1].forecast, regime=Regime(index=3)))
    store.add(other)
    assert store.step is None


def test_a_bins_point_sits_at_the_mean_depth_of_its_measurements() -> None:
    """Never at the bin's centre: a dot there would stand ahead of the conversation that made it."""
    bins = ContextBins(256)
    for ctx, tok_s in ((3590.0, 50.0), (3600.0, 48.0), (5000.0, 40.0)):
        bins.add(ctx, tok_s)
    x, y = bins.points()
    assert list(x) == [3595.0, 5000.0] and list(y) == [49.0, 40.0]
    other = ContextBins(256)
    other.add(3610.0, 46.0)
    bins.merge(other)
    x, y = bins.points()
    assert x[0] == pytest.approx(3600.0) and y[0] == pytest.approx(48.0)
