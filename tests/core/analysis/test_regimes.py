"""Regimes and the forecast in the analysis: a new fit segment when what the speed depends on changes, the fit's form
and fallback, and a measured speed above the ceiling as a finding."""

from __future__ import annotations

import pytest
from analysis_readings import GIB, L8B, SHAPE_8B, FixedRates, ceiling_8b, gpu, gpus, reading

from kvmon.core.analysis import Analyzer
from kvmon.core.analysis.regimes import PLACEMENT_TOLERANCE, RegimeKey, RegimeTracker, changes, regime_key
from kvmon.core.readings import FailureKind, ModelInfo, PcieLink, ServerConfig, SourceFailure
from kvmon.physics.ceiling import DeviceShare

MODEL = ("http://127.0.0.1:8080", "m.gguf", "llama", 1)


def _run(a: Analyzer, rates: FixedRates, t0: float, depths: range, speed, **kw: object):  # type: ignore[no-untyped-def]
    s = None
    for i, ctx in enumerate(depths):
        rates.decode = speed(ctx)
        s = a.update(reading(t0 + i, ctx=ctx, **kw), gpus(t0 + i, *kw.pop("gpu_list", ())))  # type: ignore[arg-type]
    return s


def test_a_share_that_moves_less_than_the_tolerance_is_the_same_regime() -> None:
    one = [DeviceShare("GPU 0", 1e12, 4e9, 0.5), DeviceShare("GPU 1", 1e12, 4e9, 0.5)]
    nudged = [DeviceShare("GPU 0", 1e12, 4.1e9, 0.5 + PLACEMENT_TOLERANCE / 2),
              DeviceShare("GPU 1", 1e12, 3.9e9, 0.5 - PLACEMENT_TOLERANCE / 2)]
    moved = [DeviceShare("GPU 0", 1e12, 4e9, 0.7), DeviceShare("GPU 1", 1e12, 4e9, 0.3)]
    base = regime_key(MODEL, 32768, "f16", "f16", 1, one)
    assert changes(base, regime_key(MODEL, 32768, "f16", "f16", 1, nudged)) == []
    assert [c for c, _ in changes(base, regime_key(MODEL, 32768, "f16", "f16", 1, moved))] == ["placement"]
    spilled = [*one, DeviceShare("PCIe 0", 25e9, 0.0, 0.2, "pcie")]
    assert [c for c, _ in changes(base, regime_key(MODEL, 32768, "f16", "f16", 1, spilled))] == ["devices"]
    both = changes(base, regime_key(MODEL, 131072, "q8_0", "q8_0", 2, one))
    assert [c for c, _ in both] == ["n_ctx", "cache_types", "slots"]
    assert "131,072" in both[0][1]
    # what a poll does not know changes nothing; another model is only that
    assert changes(base, RegimeKey(MODEL)) == []
    assert changes(base, regime_key(("u", "other", "llama", 1), 131072, "f16", "f16", 1, one)) == [
        ("model", "another model")]


def test_the_tracker_compares_with_the_regime_start_not_the_last_poll() -> None:
    tr = RegimeTracker()
    assert tr.observe(RegimeKey(None), reloaded=False, t_monotonic=0, t_wall=0) is False  # no model named yet
    shares = [0.50, 0.53, 0.56]  # drifts by 3 points a poll: the third is 6 points from the start
    began = []
    for i, share in enumerate(shares):
        devs = [DeviceShare("GPU 0", 1e12, 1e9, share), DeviceShare("GPU 1", 1e12, 1e9, 1 - share)]
        began.append(tr.observe(regime_key(MODEL, 8192, "f16", "f16", 1, devs), reloaded=False, t_monotonic=i,
                                t_wall=i))
    assert began == [True, False, True] and tr.regime.index == 2 and tr.regime.cause == "placement"
    assert tr.observe(regime_key(MODEL, 8192, "f16", "f16", 1, None), reloaded=True, t_monotonic=5, t_wall=5)
    assert tr.regime.cause == "reload" and tr.regime.index == 3
    tr.mark_context(3000)
    tr.mark_context(4000)
    assert tr.regime.since_context_tokens == 3000


def test_a_reload_with_another_n_ctx_starts_the_fit_again() -> None:
    """Points from before never bend the forecast after: the old regime's steep fall is forgotten."""
    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    s = _run(a, rates, 0.0, range(1000, 12000, 500), lambda c: 1 / (0.010 + 2e-6 * c))
    assert s is not None and s.forecast.regime.index == 1 and s.forecast.regime.cause == "start"
    steep = {m.context_tokens: m.tok_s for m in s.forecast.milestones}
    a.update(SourceFailure(FailureKind.MODEL_LOADING, "Loading model"), gpus(30.0))
    s = _run(a, rates, 40.0, range(2000, 9000, 500), lambda c: 1 / (0.010 + 2e-7 * c), n_ctx=65536)
    assert s is not None
    r = s.forecast.regime
    assert r.index == 2 and r.cause == "reload" and "context 32,768 → 65,536" in (r.description or "")
    assert r.since_context_tokens == 2000 and r.since_t_monotonic == 40.0
    assert s.forecast.fit_points == 14
    after = {m.context_tokens: m.tok_s for m in s.forecast.milestones}
    assert after[32768] > 2 * steep[32768]  # the new regime's gentle slope alone
    assert after[32768] == pytest.approx(1 / (0.010 + 2e-7 * 32768), rel=0.05)


def test_a_kv_spill_over_pcie_begins_a_regime() -> None:
    rates = FixedRates(decode=60.0)
    a = Analyzer(rate_tracker=rates)
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, model_buffer_bytes_by_device={"CUDA0": 4_920_000_000},
                       kv_buffer_bytes_by_device={"CUDA0": 4 * GIB}, compute_buffer_bytes_by_device={"CUDA0": GIB // 2})
    pcie = PcieLink(generation=4, width=16, max_generation=4, max_width=16)
    for i in range(5):
        s = a.update(reading(float(i), ctx=8000 + 100 * i, config=cfg), gpus(float(i), gpu(pcie=pcie)))
    assert s.forecast.regime.index == 1 and s.forecast.fit_points == 5
    rates.decode = 6.0  # another application takes the VRAM: part of the KV cache now lives across PCIe
    s = a.update(reading(5.0, ctx=8600, config=cfg), gpus(5.0, gpu(free=0, others=16 * GIB, server=8 * GIB,
                                                                   pcie=pcie)))
    assert s.forecast.regime.index == 2 and s.forecast.regime.cause == "devices"
    assert s.forecast.fit_points == 1
    assert all(m.tok_s <= (m.ceiling_tok_s or 0) for m in s.forecast.milestones)


def test_the_fit_form_and_its_curve_are_in_the_snapshot() -> None:
    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    s = _run(a, rates, 0.0, range(1000, 12000, 500), lambda c: 1 / (0.010 + 1e-6 * c))
    assert s is not None
    fc = s.forecast
    assert fc.fit_form == "bandwidth+attention" and fc.fit_efficiency is not None and 0 < fc.fit_efficiency <= 1
    assert fc.fit_overhead_s is not None and fc.fit_attention_factor is not None and fc.fit_attention_factor > 0
    assert [n for n, *_ in fc.curve] == [n for n, _ in s.ceiling_curve]
    for (n, tok, low, high), (_n, ceil) in zip(fc.curve, s.ceiling_curve, strict=True):
        assert 0 < low <= tok <= high <= ceil * (1 + 1e-9), n
    assert s.provenance["forecast.milestones"] == "computed" and "forecast" not in s.reasons


def test_without_a_shape_the_fit_is_a_line_and_says_so() -> None:
    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    unknown = ModelInfo(name="mystery.gguf", weight_bytes=L8B.weight_bytes)  # no shape: no KV bytes, no ceiling
    s = _run(a, rates, 0.0, range(1000, 12000, 500), lambda c: 1 / (0.010 + 1e-6 * c), model=unknown)
    assert s is not None and s.ceiling_tok_s is None
    assert s.forecast.fit_form == "context_linear"
    assert "straight line in context depth" in s.reasons["forecast"]
    assert s.forecast.fit_reason == s.reasons["forecast"]
    ms = {m.context_tokens: m for m in s.forecast.milestones}
    assert ms[8192].tok_s == pytest.approx(1 / (0.010 + 1e-6 * 8192), rel=1e-3)
    # measured to 11,500 tokens: the line reaches 23,000, and 32K is unknown, with why
    assert 32768 not in ms and "32K unknown" in s.reasons["forecast.milestones"]
    # a speed rising with depth: no line (it would reach zero time per token), and why
    b = Analyzer(rate_tracker=rates)
    s = _run(b, rates, 0.0, range(1000, 5000, 500), lambda c: 40 + c / 1000, model=unknown)
    assert s is not None and s.forecast.milestones == () and "rises with depth" in s.reasons["forecast"]


def test_a_speed_above_the_ceiling_is_a_finding_not_a_percentage() -> None:
    a = Analyzer(rate_tracker=FixedRates(decode=1.1 * ceiling_8b(8192)))
    s = a.update(reading(ctx=8192), gpus())
    assert s.efficiency is None and s.ceiling_suspect is not None
    assert s.ceiling_suspect.input == "bandwidth"  # the GPU's bandwidth came from the table
    assert "exceeds the computed ceiling" in s.ceiling_suspect.message and "GPU table" in s.ceiling_suspect.message
    assert s.reasons["efficiency"] == s.ceiling_suspect.message
    assert "%" not in s.ceiling_suspect.message
    assert all(m.tok_s <= (m.ceiling_tok_s or 0) * (1 + 1e-9) for m in s.forecast.milestones)
    # weights in host RAM taking most of the step time: the placement is the suspect
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, offloaded_layers=16, total_layers=32,
                       model_buffer_bytes_by_device={"CUDA0": 2_460_000_000, "CPU": 2_460_000_000},
                       kv_buffer_bytes_by_device={"CUDA0": 2 * GIB, "CPU": 2 * GIB})
    host = Analyzer(rate_tracker=FixedRates(decode=40.0),
                    settings=Analyzer().settings.__class__(host_bandwidth_bytes_per_s=64e9))
    s = host.update(reading(ctx=8192, config=cfg), gpus())
    assert s.ceiling_tok_s is not None and 40.0 > s.ceiling_tok_s
    assert s.ceiling_suspect is not None and s.ceiling_suspect.input == "placement"
    assert "host" in s.ceiling_suspect.message


def test_the_regime_is_kept_while_the_model_is_the_same_and_another_model_is_a_new_one() -> None:
    rates = FixedRates(decode=50.0)
    a = Analyzer(rate_tracker=rates)
    for i in range(3):
        s = a.update(reading(float(i), ctx=1000 + 100 * i), gpus(float(i)))
    assert s.forecast.regime.index == 1
    other = ModelInfo(name="other.gguf", weight_bytes=L8B.weight_bytes, shape=SHAPE_8B)
    s = a.update(reading(3.0, ctx=100, model=other), gpus(3.0))
    assert s.forecast.regime.index == 2 and s.forecast.regime.cause == "model" and s.forecast.fit_points == 1


def test_on_metal_the_forecast_stops_at_the_kernel_switch_until_the_session_goes_past_it() -> None:
    """Metal's attention kernels change with depth: fitted on points short of 8K, the forecast gives no numbers past
    8K and says why (reason, fit reason, ``valid_to_tokens``); once this session has measured past 8K its own points
    set the slope and the forecast goes on to n_ctx."""
    apple = gpu(name="Apple M2 Max", vendor="apple", bw=400e9)

    def speed(c: int) -> float:
        return 1 / (0.030 + 2e-6 * c)

    def run(a: Analyzer, rates: FixedRates, t0: float, depths: range, *g: object):  # type: ignore[no-untyped-def]
        s = None
        for i, ctx in enumerate(depths):
            rates.decode = speed(ctx)
            s = a.update(reading(t0 + i, ctx=ctx), gpus(t0 + i, *g))  # type: ignore[arg-type]
        assert s is not None
        return s

    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    s = run(a, rates, 0.0, range(1000, 7000, 500), apple)
    fc = s.forecast
    assert fc.valid_to_tokens == 8192 and s.provenance["forecast.valid_to_tokens"] == "table"
    assert "kernel-dependent beyond 8K" in s.reasons["forecast"] and fc.fit_reason == s.reasons["forecast"]
    assert [m.context_tokens for m in fc.milestones] == [8192]
    assert fc.curve and max(n for n, *_ in fc.curve) == 8192
    s = run(a, rates, 20.0, range(7000, 12000, 500), apple)
    fc = s.forecast
    assert fc.valid_to_tokens is None and "forecast" not in s.reasons
    assert fc.fit_reason is not None and "own points past 8K" in fc.fit_reason
    assert [m.context_tokens for m in fc.milestones] == [8192, 16384, 32768]
    assert fc.milestones[-1].tok_s == pytest.approx(speed(32768), rel=0.05)
    # an NVIDIA card gets no such stop
    other = FixedRates()
    s = run(Analyzer(rate_tracker=other), other, 0.0, range(1000, 7000, 500))
    assert s.forecast.valid_to_tokens is None and "forecast" not in s.reasons


