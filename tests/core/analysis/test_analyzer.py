"""Analyzer: hand-made readings → Snapshot numbers checked against the physics by hand."""

from __future__ import annotations

import pytest
from analysis_readings import GIB, KV_PER_TOKEN_8B, L8B, SHAPE_8B, FixedRates, ceiling_8b, gpu, gpus, reading

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import (
    FailureKind,
    GpuReading,
    GpuSetReading,
    HostReading,
    ModelInfo,
    ServerConfig,
    ServerReading,
    SlotReading,
    SourceFailure,
)
from kvmon.core.snapshot import ConnectionStatus


def test_dense_8b_on_a_4090() -> None:
    a = Analyzer(rate_tracker=FixedRates(decode=60.0))
    s = a.update(reading(ctx=8192), gpus())
    assert s.connection.status is ConnectionStatus.CONNECTED
    assert s.model.kv_bytes_per_token == KV_PER_TOKEN_8B
    assert s.model.shape is not None and s.model.shape.n_layers == 32  # carried for the what-if calculator
    assert s.model.kv_allocated_bytes == 32768 * KV_PER_TOKEN_8B  # 4 GiB at f16
    assert s.context_tokens == 8192
    assert s.kv_in_use_bytes == 8192 * KV_PER_TOKEN_8B
    assert s.ceiling_tok_s == pytest.approx(ceiling_8b(8192))
    assert s.ceiling_tok_s == pytest.approx(1008e9 / (4.92e9 + 1.074e9), rel=1e-3)  # ≈ 168 tok/s
    assert s.efficiency == pytest.approx(60.0 / ceiling_8b(8192))
    bytes_per_token = L8B.weight_bytes + KV_PER_TOKEN_8B * 8192
    assert s.bytes_read_per_token == bytes_per_token
    assert s.achieved_bandwidth_bytes_per_s == pytest.approx(60.0 * bytes_per_token)
    assert s.peak_bandwidth_bytes_per_s == pytest.approx(1008e9)
    assert s.bandwidth_headroom_fraction == pytest.approx(1 - 60.0 * bytes_per_token / 1008e9)
    # the ceiling curve runs from an empty context to n_ctx
    assert s.ceiling_curve[0] == (0, pytest.approx(1008e9 / 4.92e9))
    assert s.ceiling_curve[-1] == (32768, pytest.approx(ceiling_8b(32768)))
    assert all(b[1] < a_[1] for a_, b in zip(s.ceiling_curve, s.ceiling_curve[1:], strict=False))
    # VRAM split: weights, KV allocated/in use, the server's other memory, other processes
    (g,) = s.gpus
    assert g.weights_bytes == L8B.weight_bytes
    assert g.kv_allocated_bytes == 4 * GIB
    assert g.kv_in_use_bytes == 8192 * KV_PER_TOKEN_8B
    assert g.server_other_bytes == 10 * GIB - L8B.weight_bytes - 4 * GIB
    assert g.other_processes_bytes == 1 * GIB
    assert g.achieved_bandwidth_bytes_per_s == pytest.approx(s.achieved_bandwidth_bytes_per_s)
    assert s.provenance["ceiling_tok_s"] == "computed"
    assert s.provenance["decode_tok_s"] == "measured"
    assert s.provenance["kv_type"] == "default" and "f16" in s.reasons["kv_type"]
    assert "analysis" not in s.reasons




def test_idle_has_no_speed_but_a_ceiling() -> None:
    s = Analyzer(rate_tracker=FixedRates(decode=None)).update(reading(processing=False), gpus())
    assert s.decode_tok_s is None and s.efficiency is None and s.achieved_bandwidth_bytes_per_s is None
    assert "idle" in s.reasons["decode_tok_s"]
    assert s.ceiling_tok_s == pytest.approx(ceiling_8b(8192))
























def test_unknown_shape_is_partial_not_an_error() -> None:
    m = ModelInfo(name="mystery", weight_bytes=4_000_000_000, shape=None)
    s = Analyzer(rate_tracker=FixedRates(decode=50.0)).update(reading(model=m, config=ServerConfig()), gpus())
    assert s.decode_tok_s == 50.0
    assert s.model.kv_bytes_per_token is None and s.kv_allocated_bytes is None and s.ceiling_tok_s is None
    assert "shape unknown" in s.reasons["kv_bytes_per_token"]
    assert s.reasons["ceiling_tok_s"]
    assert s.model.n_ctx == 32768  # from /slots


def test_a_broken_reading_gives_a_degraded_snapshot() -> None:
    m = ModelInfo(name="bad", weight_bytes=1, shape="not a shape")
    s = Analyzer(rate_tracker=FixedRates()).update(reading(model=m), gpus())
    assert s.connection.status is ConnectionStatus.CONNECTED
    assert s.reasons["analysis"].startswith("analysis failed")
    assert s.ceiling_tok_s is None


@pytest.mark.parametrize(
    ("kind", "status"),
    [(FailureKind.UNREACHABLE, ConnectionStatus.UNREACHABLE), (FailureKind.TIMEOUT, ConnectionStatus.TIMEOUT),
     (FailureKind.AUTH_REJECTED, ConnectionStatus.AUTH_REJECTED), (FailureKind.MODEL_LOADING, ConnectionStatus.LOADING),
     (FailureKind.BAD_URL, ConnectionStatus.BAD_URL), (FailureKind.UNEXPECTED_BODY, ConnectionStatus.BAD_RESPONSE),
     (FailureKind.ENDPOINT_DISABLED, ConnectionStatus.BAD_RESPONSE)],
)
def test_failures_map_to_connection_states(kind: FailureKind, status: ConnectionStatus) -> None:
    a = Analyzer(rate_tracker=FixedRates(decode=40.0))
    ok = a.update(reading(), gpus(0.0))
    s = a.update(SourceFailure(kind, "why"), gpus(1.0))
    assert s.connection.status is status and s.connection.reason == "why"
    assert s.decode_tok_s is None and s.ceiling_tok_s is None and s.context_tokens is None
    assert s.model == ok.model  # the header keeps showing what was loaded
    assert s.gpus[0].vram_free_bytes == 12 * GIB  # GPUs are still read
    assert s.seq == ok.seq + 1 and s.t_monotonic == 1.0
    assert s.connection.since_t_monotonic == 1.0


def test_server_state_loading_and_sleeping() -> None:
    a = Analyzer(rate_tracker=FixedRates())
    assert a.update(reading(state="loading"), gpus()).connection.status is ConnectionStatus.LOADING
    assert a.update(reading(state="sleeping"), gpus()).connection.status is ConnectionStatus.SLEEPING


def test_context_forecast_and_fitted_milestones() -> None:
    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    # decode time per token = 10 ms + 1 µs per token of context
    def speed(ctx: int) -> float:
        return 1 / (0.010 + 1e-6 * ctx)

    s = None
    for i, ctx in enumerate(range(1000, 12000, 500)):
        rates.decode = speed(ctx)
        s = a.update(reading(float(i), ctx=ctx), gpus(float(i)))
    assert s is not None
    assert s.forecast.tokens_until_ctx_full == 32768 - 11500
    assert s.forecast.seconds_until_ctx_full == pytest.approx((32768 - 11500) / speed(11500))
    assert s.forecast.fit_points == 22
    # the slope is far from the GQA prior's (b ≈ 1.4: here 7.7 seconds per second of KV read); 22 depths say so
    assert s.forecast.fit_a_s == pytest.approx(0.010, rel=0.01)
    assert s.forecast.fit_b_s_per_token == pytest.approx(1e-6, rel=0.01)
    ms = {m.context_tokens: m for m in s.forecast.milestones}
    assert sorted(ms) == [8192, 16384, 32768]
    assert ms[32768].tok_s == pytest.approx(speed(32768), rel=0.01)
    assert ms[32768].low_tok_s < speed(32768) < ms[32768].high_tok_s
    assert ms[32768].ceiling_tok_s == pytest.approx(ceiling_8b(32768))
    assert s.provenance["forecast.milestones"] == "computed"


def test_one_depth_gives_the_level_from_the_data_and_the_slope_from_the_prior() -> None:
    rates = FixedRates(decode=84.0)
    a = Analyzer(rate_tracker=rates)
    s = a.update(reading(ctx=8192), gpus())  # one point: its level, the slope from the GQA attention prior
    ms = {m.context_tokens: m for m in s.forecast.milestones}
    assert s.forecast.fit_form == "ceiling_scaled"
    assert ms[8192].tok_s == pytest.approx(84.0, rel=0.01)
    # slower with depth than the added KV bytes alone at peak bandwidth would make it (the prior's b is above 1)
    bytes_only = 1 / (1 / 84.0 + 1 / ceiling_8b(32768) - 1 / ceiling_8b(8192))
    assert ms[32768].tok_s < 0.95 * bytes_only
    # a wide band, monotone, its fast end at most the ceiling
    m = ms[32768]
    assert m.low_tok_s is not None and m.high_tok_s is not None
    assert m.high_tok_s - m.low_tok_s > 0.2 * m.tok_s and m.tok_s < m.high_tok_s <= ceiling_8b(32768)
    assert ms[16384].high_tok_s >= m.high_tok_s and ms[16384].low_tok_s >= m.low_tok_s
    assert s.provenance["forecast.milestones"] == "estimated"


def test_a_new_model_starts_a_new_fit() -> None:
    rates = FixedRates(decode=50.0)
    a = Analyzer(rate_tracker=rates)
    for i in range(5):
        a.update(reading(float(i), ctx=1000 + 100 * i), gpus(float(i)))
    other = ModelInfo(name="other.gguf", weight_bytes=L8B.weight_bytes, shape=SHAPE_8B)
    s = a.update(reading(5.0, ctx=100, model=other), gpus(5.0))
    assert s.forecast.fit_points == 1


def test_vram_alert_rises_before_free_vram_runs_out() -> None:
    """Another app grows 40 MiB/s from 6 GiB free: the alert must rise ≥ 30 s before the end."""
    rates = FixedRates(decode=38.0)
    a = Analyzer(rate_tracker=rates)
    free0, grow = 6 * GIB, 40 * 2**20
    raised_at = None
    for i in range(200):
        free = free0 - grow * i
        if free <= 0:
            break
        g = gpu(free=free, others=1 * GIB + grow * i)
        s = a.update(reading(float(i)), gpus(float(i), g))
        alert = next((x for x in s.alerts if x.code == "vram_full_soon"), None)
        if alert is not None and raised_at is None:
            raised_at = i
            assert "another program took" in alert.message and "in the last" in alert.message
            assert s.forecast.seconds_until_vram_full == pytest.approx(free / grow, rel=0.05)
            assert s.forecast.tokens_until_vram_full == pytest.approx(38.0 * free / grow, rel=0.05)
    assert raised_at is not None
    seconds_left = (free0 - grow * raised_at) / grow
    assert seconds_left >= 30


def test_steady_hour_has_no_alerts_from_the_analyzer() -> None:
    import random

    rng = random.Random(5)
    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    raised = []
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, type_k="q8_0", type_v="q8_0")
    for i in range(1800):  # an hour, polled every 2 s (the alert rules work on times, not poll counts)
        t = 2.0 * i
        rates.decode = 60.0 + rng.uniform(-3, 3)
        g = gpu(free=12 * GIB + rng.randint(-20, 20) * 2**20)
        s = a.update(reading(t, ctx=6000 + (i % 300) * 2, config=cfg), gpus(t, g))
        raised.extend(a.alerts.last_raised)
        assert s.alerts == ()
    assert raised == []






def test_real_rate_tracker_from_slot_counters() -> None:
    a = Analyzer()  # kvmon.core.rates.SlotRateTracker
    s = None
    for i in range(4):
        slot = SlotReading(id=0, n_ctx=32768, context_tokens=8000 + 50 * i, processing=True, n_decoded=50 * i,
                           id_task=7)
        s = a.update(reading(float(i), slots=(slot,)), gpus(float(i)))
    assert s is not None and s.decode_tok_s == pytest.approx(50.0)
    assert s.decode_rate_source == "slots"
    assert s.slots[0].decode_tok_s == pytest.approx(50.0)


def test_replies_that_ended_between_polls_give_the_speed_but_no_point_at_this_depth() -> None:
    """Short replies one after another: the speed is the server's timing of those that ended (shown, decoding,
    compared with the ceiling), but they ran at their own depths, so the speed-vs-context fit gets no point."""
    a = Analyzer()
    s = None
    for i in range(4):
        slot = SlotReading(id=0, n_ctx=32768, context_tokens=8000, processing=True, n_decoded=20, id_task=i)
        metrics = {"tokens_predicted_total": 500.0 * i, "tokens_predicted_seconds_total": 10.0 * i}
        s = a.update(reading(float(i), slots=(slot,), metrics=metrics), gpus(float(i), gpu(energy_j=1e6 + 300.0 * i)))
    assert s is not None and s.decode_tok_s == pytest.approx(50.0) and s.decode_rate_source == "replies"
    assert s.activity.value == "decoding" and s.efficiency is not None
    assert len(a._forecaster._points) == 0  # the fit's own store
    # nor an interval of decoding for the energy per token (it also held their prompts): the energy is counted
    assert s.energy is not None and s.energy.energy_j == pytest.approx(900.0)
    assert s.energy.joules_per_token is None and "no token was decoded" in s.reasons["energy.joules_per_token"]





def test_connection_since_and_reset() -> None:
    rates = FixedRates(decode=50.0)
    a = Analyzer(rate_tracker=rates)
    assert a.update(reading(0.0), gpus(0.0)).connection.since_t_monotonic == 0.0
    assert a.update(reading(1.0), gpus(1.0)).connection.since_t_monotonic == 0.0
    gone = a.update(SourceFailure(FailureKind.UNREACHABLE, "refused"), gpus(2.0))
    assert gone.connection.since_t_monotonic == 2.0
    assert a.update(SourceFailure(FailureKind.UNREACHABLE, "refused"), gpus(3.0)).connection.since_t_monotonic == 2.0
    back = a.update(reading(4.0), gpus(4.0))
    assert back.connection.status is ConnectionStatus.CONNECTED and back.connection.since_t_monotonic == 4.0
    a.reset()
    s = a.update(reading(5.0), gpus(5.0))
    assert s.seq == 1 and s.forecast.fit_points == 1 and s.decode_tok_s == 50.0  # the injected tracker is kept


def test_sparse_readings_give_partial_snapshots() -> None:
    """Everything unknown: no model, slots without numbers, a GPU with no fields. Nothing raises; reasons say why."""
    r = ServerReading(t_monotonic=0.0, t_wall=0.0, backend="llama-server", url="http://127.0.0.1:8080",
                      slots=(SlotReading(id=0, n_ctx=None, context_tokens=None, processing=True),))
    s = Analyzer(rate_tracker=FixedRates()).update(r, GpuSetReading(0.0, gpus=(GpuReading(index=0),)),
                                                   HostReading(t_monotonic=0.0))
    assert s.connection.status is ConnectionStatus.CONNECTED and "analysis" not in s.reasons
    assert s.model.n_ctx is None and s.model.kv_bytes_per_token is None and s.kv_allocated_bytes is None
    assert s.context_tokens is None and s.ceiling_tok_s is None and s.forecast.tokens_until_ctx_full is None
    assert s.gpus[0].vram_free_bytes is None and s.gpus[0].reasons["peak_bandwidth_bytes_per_s"]
    for key in ("n_ctx", "weight_bytes", "kv_bytes_per_token", "kv_allocated_bytes", "context_tokens", "ceiling_tok_s"):
        assert s.reasons[key], key
    assert s.alerts == ()


