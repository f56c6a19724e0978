"""The analysis checks its inputs against each other before anything is drawn: a value another contradicts is shown
as unknown, with the reason, never as a fact (``kvmon.core.analysis.consistency``)."""

from __future__ import annotations

import pytest
from analysis_readings import GIB, L8B, SHAPE_8B, FixedRates, gpu, gpus, reading

from kvmon.core.analysis import Analyzer
from kvmon.core.readings import HostReading, ModelInfo, ServerConfig, SlotReading
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape

G27 = PRESETS["gemma-3-27b"]
SHAPE_27B = ModelShape.from_gguf(G27.metadata)
N_27B = 27_009_346_304


def _model(weight_bytes: int | None, n_params: int | None = None, quantization: str | None = None,
           shape: object = SHAPE_8B) -> ModelInfo:
    return ModelInfo(name="m", arch="llama", weight_bytes=weight_bytes, n_params=n_params, quantization=quantization,
                     shape=shape)


# -- weights against the parameter count ----------------------------------------------------------------------


def test_zero_weights_are_unknown_not_a_model_of_nothing() -> None:
    s = Analyzer(rate_tracker=FixedRates(decode=8.0)).update(reading(model=_model(0, N_27B, shape=SHAPE_27B)),
                                                             gpus())
    assert s.model.weight_bytes is None and s.model.weight_bytes_read_per_token is None
    assert "0 bytes" in s.reasons["weight_bytes"]
    assert s.ceiling_tok_s is None and s.efficiency is None  # no ceiling on a weight kvmon does not know
    assert s.gpus[0].weights_bytes is None


@pytest.mark.parametrize("weight_bytes", [int(0.5e9), int(200e9)])  # 0.06 and 25 bytes per parameter
def test_weights_outside_what_any_file_type_holds_per_parameter_are_unknown(weight_bytes: int) -> None:
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(reading(model=_model(weight_bytes, 8_030_261_248)),
                                                              gpus())
    assert s.model.weight_bytes is None
    assert "bytes per parameter" in s.reasons["weight_bytes"] and "8.0B parameters" in s.reasons["weight_bytes"]


def test_contradicted_weights_give_way_to_the_estimate_when_params_and_type_are_known() -> None:
    s = Analyzer(rate_tracker=FixedRates(decode=8.0)).update(
        reading(model=_model(0, N_27B, "Q4_K_M", SHAPE_27B)), gpus())
    assert s.model.weight_bytes == pytest.approx(16.54e9, rel=0.01)
    assert s.provenance["weight_bytes"] == "estimated"
    assert "Q4_K_M" in s.reasons["weight_bytes"] and "0 bytes" in s.reasons["weight_bytes"]


def test_weights_estimated_from_params_and_quantization_when_no_file_says() -> None:
    """A remote Ollama: shape and parameter count from /api/show, no tensor list, its file not readable here."""
    host = HostReading(t_monotonic=0.0, host_bandwidth_bytes_per_s=60e9)
    r = reading(ctx=2000, n_ctx=32768, backend="ollama", model=_model(None, N_27B, "Q4_K_M", SHAPE_27B),
                weight_bytes_vram=int(15.5 * GIB), weight_bytes_host=int(3.0 * GIB))
    a = Analyzer(rate_tracker=FixedRates(decode=8.5))
    card = gpu(name="NVIDIA GeForce RTX 4060 Ti", bw=288e9, total=16 * GIB, server=None, others=0)
    s = a.update(r, gpus(0.0, card), host)
    assert s.model.weight_bytes == pytest.approx(N_27B * 4.899 / 8, rel=1e-3)
    assert s.provenance["weight_bytes"] == "estimated"
    assert "27.0B parameters" in s.reasons["weight_bytes"] and "Q4_K_M" in s.reasons["weight_bytes"]
    assert s.ceiling_tok_s is not None and s.host.weights_in_host_bytes


# -- a KV cache larger than the device it lives on ------------------------------------------------------------


def test_kv_cache_larger_than_its_gpu_is_unknown() -> None:
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, kv_bytes_allocated=40 * GIB,
                       model_buffer_bytes_by_device={"CUDA0": L8B.weight_bytes},
                       kv_buffer_bytes_by_device={"CUDA0": 40 * GIB})
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(reading(config=cfg), gpus())
    assert s.model.kv_allocated_bytes is None and s.kv_allocated_bytes is None
    assert "larger than" in s.reasons["kv_allocated_bytes"] and "GPU 0" in s.reasons["kv_allocated_bytes"]
    assert s.gpus[0].kv_allocated_bytes is None


def test_kv_cache_larger_than_host_ram_is_unknown() -> None:
    host = HostReading(t_monotonic=0.0, ram_total_bytes=16 * GIB, ram_available_bytes=8 * GIB,
                       host_bandwidth_bytes_per_s=60e9)
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, kv_bytes_allocated=40 * GIB,
                       model_buffer_bytes_by_device={"CPU": L8B.weight_bytes},
                       kv_buffer_bytes_by_device={"CPU": 40 * GIB})
    s = Analyzer(rate_tracker=FixedRates(decode=5.0)).update(reading(config=cfg), None, host)
    assert s.model.kv_allocated_bytes is None and "host RAM" in s.reasons["kv_allocated_bytes"]


def test_a_kv_cache_of_nothing_is_unknown() -> None:
    cfg = ServerConfig(n_ctx_total=32768, n_parallel=1, kv_bytes_allocated=0)
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(reading(config=cfg), gpus())
    assert s.model.kv_allocated_bytes is None and "0 bytes" in s.reasons["kv_allocated_bytes"]


def test_a_recurrent_model_holds_no_kv_and_that_is_no_contradiction() -> None:
    md = {"general.architecture": "mamba2", "mamba2.block_count": 4, "mamba2.embedding_length": 256,
          "mamba2.ssm.conv_kernel": 4, "mamba2.ssm.state_size": 16, "mamba2.ssm.group_count": 1,
          "mamba2.ssm.time_step_rank": 8, "mamba2.ssm.inner_size": 512}
    m = ModelInfo(name="m", arch="mamba2", weight_bytes=10**7, shape=ModelShape.from_gguf(md))
    cfg = ServerConfig(n_ctx_total=4096, n_parallel=1, kv_bytes_allocated=0)
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(reading(model=m, config=cfg), gpus())
    assert s.model.kv_bytes_per_token == 0 and s.model.kv_allocated_bytes == 0
    assert "kv_allocated_bytes" not in s.reasons


# -- VRAM the parts do not explain ----------------------------------------------------------------------------


def test_vram_nothing_explains_is_not_shown_as_compute_buffers() -> None:
    """The server holds 15 GiB but weights (1 GB, no parameter count to doubt them) and KV explain 5: the 10 GiB
    left are not "compute buffers"."""
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(reading(model=_model(int(1e9))),
                                                              gpus(0.0, gpu(server=15 * GIB, free=8 * GIB)))
    g = s.gpus[0]
    assert g.server_other_bytes is None
    assert "explain" in g.reasons["vram_split"] and "GPU 0" in s.reasons["gpu0.vram"]


def test_weights_and_kv_beyond_what_the_server_holds_leave_the_split_unknown() -> None:
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(reading(), gpus(0.0, gpu(server=5 * GIB)))
    g = s.gpus[0]
    assert g.weights_bytes is None and g.kv_allocated_bytes is None and g.server_other_bytes is None
    assert "holds" in g.reasons["vram_split"]
    assert s.model.weight_bytes == L8B.weight_bytes  # the model's own size is not in doubt, its split here is


def test_a_plain_reading_raises_no_contradiction() -> None:
    s = Analyzer(rate_tracker=FixedRates(decode=60.0)).update(reading(), gpus())
    assert s.gpus[0].server_other_bytes == 10 * GIB - L8B.weight_bytes - 4 * GIB
    assert not any(k.endswith(".vram") for k in s.reasons) and "vram_split" not in s.gpus[0].reasons


# -- the efficiency: above 100% the ceiling's inputs are wrong ------------------------------------------------


def test_efficiency_above_one_is_decided_in_the_consistency_checks() -> None:
    from kvmon.core.analysis.consistency import ceiling_suspect

    s = Analyzer(rate_tracker=FixedRates(decode=400.0)).update(reading(), gpus())
    assert s.efficiency is None and s.ceiling_suspect is not None and s.ceiling_suspect.input == "bandwidth"
    again = ceiling_suspect(400.0, s.ceiling_tok_s or 0.0, None, None, s.gpus, s.model, s.provenance)
    assert again.message == s.ceiling_suspect.message


# -- the forecast: a straight line only near what was measured ------------------------------------------------


def test_straight_line_is_not_drawn_past_twice_the_deepest_measured_depth() -> None:
    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    s = None
    for i, ctx in enumerate(range(400, 1000, 50)):
        rates.decode = 1.0 / (0.10 + 2e-6 * ctx)
        m = ModelInfo(name="m", weight_bytes=None)  # no shape, no size: the context-linear fallback
        s = a.update(reading(float(i), ctx, model=m, slots=(SlotReading(0, 32768, ctx, True),)), None)
    assert s is not None and s.forecast.fit_form == "context_linear"
    deepest = 950
    assert s.forecast.curve and max(d for d, *_ in s.forecast.curve) <= 2 * deepest
    assert all(m.context_tokens <= 2 * deepest for m in s.forecast.milestones)
    assert "twice the deepest" in s.reasons["forecast.milestones"] and "1,900" in s.reasons["forecast.milestones"]
    assert not any(m.context_tokens == 32768 for m in s.forecast.milestones)


def test_no_forecast_under_a_ceiling_the_measured_speed_exceeds() -> None:
    """A forecast bounded by a ceiling already exceeded would say the speed halves at the next milestone."""
    rates = FixedRates()
    a = Analyzer(rate_tracker=rates)
    s = None
    for i, ctx in enumerate(range(1000, 6000, 500)):
        rates.decode = 400.0 - ctx / 100  # above the 4090's ~190 tok/s ceiling for this 8B model
        s = a.update(reading(float(i), ctx), gpus(float(i)))
    assert s is not None and s.ceiling_suspect is not None and s.efficiency is None
    assert s.forecast.milestones == () and s.forecast.curve == ()
    assert "exceeds that ceiling" in s.reasons["forecast.milestones"]


# -- one account of the bytes a token reads ---------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["apple-m2max", "seed-3090x2", "cpu-ddr5", "ollama-partial"])
def test_the_bandwidth_share_is_the_efficiency(scenario: str) -> None:
    """Achieved ÷ peak bandwidth and decode ÷ ceiling are one ratio: both count the bytes a token reads where the
    model lives (a token-embedding table kept in host RAM is stored, not read). On the M2 Max demo they read 80% and
    79% on one screen while the bandwidth counted the embeddings and the ceiling did not."""
    from kvmon.app.demo import demo_session, step_demo
    from kvmon.gui import fmt
    from kvmon.gui.panels.bandwidth import bandwidth_bar

    session = demo_session(scenario, None, start_at_s=100, stepped=True)
    try:
        decoding = [s for s in step_demo(session, 20.0, 2.0) if s.efficiency is not None]
    finally:
        session.close()
    assert decoding
    for s in decoding:
        assert s.achieved_bandwidth_bytes_per_s is not None and s.peak_bandwidth_bytes_per_s is not None
        assert s.achieved_bandwidth_bytes_per_s / s.peak_bandwidth_bytes_per_s == pytest.approx(s.efficiency, rel=1e-9)
        reading = [g for g in s.gpus if g.achieved_bandwidth_bytes_per_s]
        read_on = reading + ([s.host] if s.host.achieved_bandwidth_bytes_per_s else [])
        if len(read_on) == 1 and reading:  # one device reads it all: its bar says the header's share
            g = reading[0]
            assert g.peak_bandwidth_bytes_per_s is not None
            assert g.achieved_bandwidth_bytes_per_s / g.peak_bandwidth_bytes_per_s == pytest.approx(s.efficiency,
                                                                                                    rel=1e-9)
            bar = bandwidth_bar(g)
            assert bar is not None and f"({fmt.percent(s.efficiency)})" in bar.note


def test_devices_that_read_in_turn_show_their_rate_while_their_layers_run() -> None:
    """Two RTX 3090s each read half a token's step: each bar shows its rate while its layers run, the header's share
    of the ceiling (not half of it beside the header's whole), and its tooltip says why; one device alone says
    nothing of it."""
    from kvmon.app.demo import demo_session, step_demo
    from kvmon.gui.panels.bandwidth import bandwidth_bar, readers

    session = demo_session("seed-3090x2", None, start_at_s=100, stepped=True)
    try:
        s = next(x for x in step_demo(session, 20.0, 2.0) if x.efficiency is not None)
    finally:
        session.close()
    assert readers(s) == 2 and s.efficiency is not None
    shares = []
    for g in s.gpus:
        bar = bandwidth_bar(g, readers(s))
        assert bar is not None and "split over 2 devices that read their layers in turn" in (bar.tip or "")
        assert g.achieved_bandwidth_bytes_per_s is not None and g.peak_bandwidth_bytes_per_s is not None
        assert g.step_share is not None
        (seg,) = bar.segments
        assert seg.value / g.peak_bandwidth_bytes_per_s == pytest.approx(s.efficiency, rel=0.03)
        shares.append(g.achieved_bandwidth_bytes_per_s / g.peak_bandwidth_bytes_per_s)
    # over the whole step each device's share is its bytes over its bandwidth: they add up to the efficiency
    assert sum(shares) == pytest.approx(s.efficiency, rel=0.02)
    lone = bandwidth_bar(s.gpus[0], 1)
    assert lone is not None and "split over" not in (lone.tip or "")
