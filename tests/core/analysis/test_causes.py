"""Why decode runs below the ceiling: each cause injected (the fake NVML's clocks and reasons, a PCIe link at x4, a
competing process, host load, a slower run of the same configuration, speculative drafting, a slow client), its
share of the gap and what the headline says; and a healthy poll names none."""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml
import pytest

from kvmon.core.analysis import Analyzer
from kvmon.core.analysis.causes import ClientView, GapInputs, breakdown, typical_efficiency
from kvmon.core.curve_config import AtlasView, CurveConfig, CurvePoint
from kvmon.core.readings import (
    GpuSetReading,
    HostReading,
    ModelInfo,
    RequestStats,
    ServerConfig,
    ServerReading,
    SlotReading,
)
from kvmon.core.snapshot import GpuView, Snapshot, SpeculativeView, VerdictLevel
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape
from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
from kvmon.sources.backends import by_name
from kvmon.sources.nvml import NvmlSource

GIB = 1024**3
L8B = PRESETS["llama-3.1-8b"]
SHAPE_8B = ModelShape.from_gguf(L8B.metadata)
KV_8B = 32 * 8 * 128 * 2 * 2
SERVER_PID, OTHER_PID = 4242, 5151
DEPTH = 8192


def ceiling(ctx: int = DEPTH, bw: float = 1008e9) -> float:
    return bw / (L8B.weight_bytes + KV_8B * ctx)


@dataclass
class Rates:
    """The decode speed the test wants at each poll (a rate tracker double)."""

    decode: float | None = None
    per_slot: dict[int, float | None] = field(default_factory=dict)

    def update(self, reading: ServerReading) -> object:
        from types import SimpleNamespace

        return SimpleNamespace(decode_tok_s=self.decode, prefill_tok_s=None, per_slot_decode_tok_s={},
                               decode_rate_source="slots" if self.decode is not None else None)


def reading(t: float = 0.0, ctx: int = DEPTH, **kw: object) -> ServerReading:
    model = ModelInfo(name="Llama-3.1-8B-Q4_K_M.gguf", arch="llama", weight_bytes=L8B.weight_bytes, shape=SHAPE_8B)
    config = kw.pop("config", None) or ServerConfig(n_ctx_total=32768, n_parallel=1)
    n_ctx = config.n_ctx_total  # type: ignore[attr-defined]
    return ServerReading(t_monotonic=t, t_wall=1.8e9 + t, backend=by_name("llama-server"), url="http://127.0.0.1:8080",
                         model=model, slots=(SlotReading(id=0, n_ctx=n_ctx, context_tokens=ctx, processing=True),),
                         total_slots=1, metrics_enabled=True, config=config,  # type: ignore[arg-type]
                         server_pids=(SERVER_PID,), **kw)  # type: ignore[arg-type]


def nvml(**changes: object) -> NvmlSource:
    """A decoding RTX 4090 holding the model, as NVML reads it (the fake's fields changed by ``changes``)."""
    gpu = FakeGpu(memory_used_bytes=7 * GIB, processes=[(SERVER_PID, 7 * GIB)], gpu_util_percent=97,
                  mem_util_percent=88)
    for key, value in changes.items():
        setattr(gpu, key, value)
    return NvmlSource(FakeNvml([gpu]), include_child_processes=False)


def poll(decode: float, gpus: GpuSetReading | None, host: HostReading | None = None, *,
         analyzer: Analyzer | None = None, t: float = 0.0, **kw: object) -> Snapshot:
    a = analyzer or Analyzer(rate_tracker=Rates(decode))
    if analyzer is not None:
        a._rates.decode = decode  # type: ignore[attr-defined]
    return a.update(reading(t, **kw), gpus, host)


def named(s: Snapshot) -> dict[str, float | None]:
    return {c.code: c.share for c in s.slowdown_causes if c.code != "unexplained"}


def gap_share(extra_s: float, decode: float, ceil: float) -> float:
    return extra_s / (1 / decode - 1 / ceil)


def test_a_healthy_gpu_at_a_usual_share_of_the_ceiling_names_no_cause() -> None:
    s = poll(0.80 * ceiling(), nvml().poll((SERVER_PID,)))
    assert s.efficiency == pytest.approx(0.80, rel=1e-3)
    assert s.slowdown_causes == ()
    assert s.verdict is not None and s.verdict.cause == "decoding" and s.verdict.level is VerdictLevel.OK
    assert "—" not in s.verdict.sentence


def test_memory_clock_held_down_by_the_power_cap() -> None:
    src = nvml(mem_clock_mhz=6300, mem_clock_max_mhz=10501, clocks_event_reasons=pynvml.nvmlClocksEventReasonSwPowerCap)
    decode = 0.55 * ceiling()
    s = poll(decode, src.poll((SERVER_PID,)))
    (cause,) = [c for c in s.slowdown_causes if c.code == "memory_clock"]
    # the memory bus reads at 60% of its peak: at the full clock the measured step would take 60% of its time
    expected = gap_share((1 / decode) * (1 - 6300 / 10501), decode, ceiling())
    assert cause.share == pytest.approx(expected, rel=1e-3) and expected == pytest.approx(0.889, abs=0.01)
    assert "6,300 of 10,501 MHz (60%)" in cause.message and "power limit" in cause.message
    assert s.verdict is not None and s.verdict.cause == "memory_clock" and s.verdict.level is VerdictLevel.INFO
    assert s.verdict.sentence == ("55% of the memory-bus ceiling at 8.19K tokens — memory clock at 60% of its "
                                  "maximum (power cap)")


def test_a_clock_down_at_idle_is_no_cause() -> None:
    src = nvml(mem_clock_mhz=405, clocks_event_reasons=pynvml.nvmlClocksEventReasonGpuIdle)
    assert named(poll(0.5 * ceiling(), src.poll((SERVER_PID,)))) == {}


def test_a_pcie_link_at_x4_while_bytes_cross_it() -> None:
    # 6 GB/s cross a gen-4 link trained at x4 (7.9 GB/s) instead of x16 (31.5 GB/s)
    src = nvml(pcie_gen=4, pcie_width=4, pcie_max_gen=4, pcie_max_width=16, pcie_rx_kb_s=6_000_000_000 // 1024)
    decode = 50.0
    s = poll(decode, src.poll((SERVER_PID,)))
    (cause,) = [c for c in s.slowdown_causes if c.code == "pcie_link"]
    per_token = 6e9 / decode
    extra = per_token * (1 / 7.877e9 - 1 / 31.508e9)
    assert cause.share == pytest.approx(min(1.0, gap_share(extra, decode, ceiling())), rel=0.02)
    assert "PCIe 4.0 x4 instead of 4.0 x16" in cause.message
    assert s.verdict is not None and s.verdict.sentence.endswith("— PCIe link at PCIe 4.0 x4 of 4.0 x16")
    assert s.verdict.cause == "pcie_link"


def test_a_link_trained_down_without_traffic_is_no_cause() -> None:
    src = nvml(pcie_gen=4, pcie_width=4, pcie_max_gen=4, pcie_max_width=16, pcie_rx_kb_s=20)
    assert named(poll(0.6 * ceiling(), src.poll((SERVER_PID,)))) == {}


def test_a_competing_process_takes_its_share_of_the_gpu() -> None:
    src = nvml(processes=[(SERVER_PID, 7 * GIB), (OTHER_PID, 3 * GIB)], memory_used_bytes=10 * GIB,
               process_busy_percent={SERVER_PID: 60.0, OTHER_PID: 30.0})
    decode = 0.6 * ceiling()
    s = poll(decode, src.poll((SERVER_PID,)))
    (cause,) = [c for c in s.slowdown_causes if c.code == "other_processes"]
    assert cause.share == pytest.approx(gap_share(0.30 / decode, decode, ceiling()), rel=1e-3)
    assert "30% of the time" in cause.message and "3.0 GiB" in cause.message
    assert s.verdict is not None and s.verdict.sentence.endswith("— other programs use GPU 0 30% of the time")


def test_host_load_against_the_servers_threads_on_a_cpu_decoder() -> None:
    none = GpuSetReading(t_monotonic=0.0, unavailable_reason="no NVIDIA GPU: driver not loaded")
    host = HostReading(t_monotonic=0.0, ram_total_bytes=64 * GIB, ram_available_bytes=40 * GIB,
                       host_bandwidth_bytes_per_s=60e9, host_bandwidth_source="measured", cpu_count=16,
                       cpu_busy_cores=15.0, server_cpu_cores=4.0)
    ceil = ceiling(bw=60e9)
    decode = 0.5 * ceil
    s = poll(decode, none, host, config=ServerConfig(n_ctx_total=32768, n_parallel=1, n_threads=8))
    (cause,) = [c for c in s.slowdown_causes if c.code == "cpu_contended"]
    # 11 threads' worth of others leave 5 of 16 for the server's 8: its part of the step takes 8/5 as long
    assert cause.share == pytest.approx(gap_share((1 / decode) * (1 - 5 / 8), decode, ceil), rel=1e-3)
    assert cause.share == pytest.approx(0.75, rel=1e-3)
    assert "11.0 of the 16 CPU threads busy" in cause.message and "8 threads" in cause.message
    # the headline stays "On the CPU" (where the model runs), its sentence naming the top cause
    assert s.verdict is not None and s.verdict.state == "On the CPU"
    assert s.verdict.sentence.endswith("— other programs keep 11 of 16 CPU threads busy")
    quiet = HostReading(**{**host.__dict__, "cpu_busy_cores": 8.5, "server_cpu_cores": 7.9})
    assert "cpu_contended" not in named(poll(decode, none, quiet,
                                             config=ServerConfig(n_ctx_total=32768, n_parallel=1, n_threads=8)))


def test_slower_than_the_same_configuration_earlier_in_the_session() -> None:
    a = Analyzer(rate_tracker=Rates(100.0))
    src = nvml()
    for i in range(5):
        s = poll(100.0, src.poll((SERVER_PID,)), analyzer=a, t=float(i), ctx=DEPTH + 50 * i)
        assert "slower_than_before" not in named(s)
    s = poll(70.0, src.poll((SERVER_PID,)), analyzer=a, t=400.0, ctx=DEPTH + 100)  # the same setup, later
    (cause,) = [c for c in s.slowdown_causes if c.code == "slower_than_before"]
    ceil = ceiling(DEPTH + 100)
    assert cause.share == pytest.approx(gap_share(1 / 70 - 1 / 100, 70.0, ceil), rel=1e-3)
    assert "100 tok/s earlier" in cause.message and "70.0 tok/s now" in cause.message
    assert "restarting it restores the speed" in cause.message
    assert s.verdict is not None and s.verdict.cause == "slower_than_before"
    assert s.verdict.sentence.endswith("— slower than earlier at this depth (100 tok/s then)")
    # another context size is another configuration: nothing to compare with
    other = poll(70.0, src.poll((SERVER_PID,)), analyzer=a, t=800.0, ctx=DEPTH,
                 config=ServerConfig(n_ctx_total=65536, n_parallel=1))
    assert "slower_than_before" not in named(other)


class Curves:
    """The atlas's measured curves of the configuration (``CurveMemory``): three points a day old at this depth."""

    version = 0

    def __init__(self, tok_s: float) -> None:
        self.tok_s = tok_s
        self.asked: list[CurveConfig] = []

    def view(self, config: CurveConfig) -> AtlasView:
        self.asked.append(config)
        return AtlasView(config=config, points=tuple(CurvePoint(DEPTH + d, self.tok_s, "earlier", 1.8e9 - 86_400.0)
                                                     for d in (-300, 0, 300)))


def test_slower_than_the_measured_curves_the_atlas_keeps() -> None:
    curves = Curves(120.0)
    a = Analyzer(rate_tracker=Rates(80.0), curve_memory=curves)
    s = poll(80.0, nvml().poll((SERVER_PID,)), analyzer=a)
    (cause,) = [c for c in s.slowdown_causes if c.code == "slower_than_before"]
    assert "the newest ≈ 1.0 d ago" in cause.message and "decoded 120 tok/s earlier (median of 3" in cause.message
    assert cause.share == pytest.approx((1 / 80 - 1 / 120) / (1 / 80 - 1 / s.ceiling_tok_s))
    assert curves.asked and curves.asked[-1].model == "Llama-3.1-8B-Q4_K_M.gguf"
    assert s.verdict is not None and s.verdict.cause == "slower_than_before"


def test_as_fast_as_the_measured_curves_is_no_cause() -> None:
    s = poll(80.0, nvml().poll((SERVER_PID,)), analyzer=Analyzer(rate_tracker=Rates(80.0), curve_memory=Curves(82.0)))
    assert "slower_than_before" not in named(s)


def test_drafting_reads_its_share_of_each_step() -> None:
    spec = SpeculativeView(drafts=100, draft_tokens=300, accepted_tokens=150, generated_tokens=250,
                           tokens_per_step=2.5, acceptance_rate=0.5, drafted_per_step=3.0,
                           draft_bytes_per_token=0.5e9)
    causes = breakdown(GapInputs(decode_tok_s=60.0, ceiling_tok_s=120.0, context_tokens=DEPTH, speculative=spec,
                                 target_bytes_per_token=6e9))
    (cause,) = [c for c in causes if c.code == "drafting"]
    assert cause.share == pytest.approx(1.5e9 / 7.5e9) and "50% of them accepted" in cause.message


def test_a_delayed_client_sees_less_than_the_server_made() -> None:
    req = RequestStats(t_end=0.0, prompt_tokens=100, predicted_tokens=400, predicted_seconds=4.0, client_tok_s=45.0)
    s = poll(0.9 * ceiling(), nvml().poll((SERVER_PID,)), last_request=req)
    (cause,) = s.slowdown_causes
    assert cause.code == "client_slower" and cause.share is None
    assert cause.summary == "your client receives 45.0 tok/s of the server's 100 tok/s"
    assert s.verdict is not None and s.verdict.cause == "client_slower"


def test_shares_never_add_past_the_whole_gap_and_the_rest_is_said() -> None:
    g = GpuView(index=0, mem_clock_mhz=5000, mem_clock_max_mhz=10000, clock_reasons=("thermal",),
                other_processes_busy_percent=40.0)
    causes = breakdown(GapInputs(decode_tok_s=30.0, ceiling_tok_s=100.0, context_tokens=DEPTH, gpus=(g,),
                                 step_shares={"GPU 0": 1.0}, kv_share=0.2, attention_class="gqa"))
    assert sum(c.share or 0 for c in causes) == pytest.approx(1.0) and causes[0].code == "memory_clock"
    causes = breakdown(GapInputs(decode_tok_s=40.0, ceiling_tok_s=100.0, context_tokens=DEPTH,
                                 gpus=(GpuView(index=0, mem_clock_mhz=9000, mem_clock_max_mhz=10000,
                                               clock_reasons=("power_cap",)),),
                                 step_shares={"GPU 0": 1.0}, kv_share=0.2, attention_class="gqa"))
    rest = causes[-1]
    assert causes[0].code == "memory_clock" and rest.code == "unexplained"
    assert rest.share == pytest.approx(1 - causes[0].share)  # type: ignore[operator]
    low, high = typical_efficiency("gqa", 0.2)  # type: ignore[misc]
    # 40% of the ceiling measured; at the full clock the step would take 90% of its 2.5 s per ceiling-second: 44%
    assert (f"typical for this model kind is {low:.0%}–{high:.0%} of the ceiling (44% without the causes above, "
            "below it)") in rest.message


def test_below_the_typical_share_with_no_named_cause_says_so() -> None:
    causes = breakdown(GapInputs(decode_tok_s=30.0, ceiling_tok_s=100.0, context_tokens=DEPTH, gpus=(GpuView(index=0),),
                                 step_shares={"GPU 0": 1.0}, kv_share=0.2, attention_class="gqa"))
    (rest,) = causes
    assert rest.code == "unexplained" and rest.share == 1.0 and rest.summary == "below what is typical"


def test_near_the_ceiling_there_is_nothing_to_break_down() -> None:
    g = GpuView(index=0, mem_clock_mhz=5000, mem_clock_max_mhz=10000)
    assert breakdown(GapInputs(decode_tok_s=97.0, ceiling_tok_s=100.0, context_tokens=DEPTH, gpus=(g,),
                               step_shares={"GPU 0": 1.0})) == ()
    assert breakdown(GapInputs(decode_tok_s=None, ceiling_tok_s=100.0, context_tokens=DEPTH)) == ()
    assert breakdown(GapInputs(decode_tok_s=50.0, ceiling_tok_s=100.0, context_tokens=DEPTH,
                               client=ClientView(50.0, 52.0))) == ()


def test_a_kv_cache_spilled_over_pcie_is_not_compared_with_the_measured_curves() -> None:
    # another program holds 18 GiB of the 24: the driver keeps part of the KV cache in host RAM, off the curve the
    # atlas keeps for this configuration (whose file does not say where the cache lay)
    src = nvml(processes=[(SERVER_PID, 6 * GIB), (OTHER_PID, 18 * GIB)], memory_used_bytes=24 * GIB)
    s = poll(20.0, src.poll((SERVER_PID,)), analyzer=Analyzer(rate_tracker=Rates(20.0), curve_memory=Curves(120.0)))
    assert s.host.kv_in_host_bytes, "the spill the test is about was not seen"
    assert s.efficiency is not None and s.efficiency < 0.9 and s.slowdown_causes  # a gap, broken down
    assert "slower_than_before" not in named(s)
