"""The simulator's machines without telemetry kvmon can read directly, monitored by kvmon's own sources: the log
alone names the GPUs, Ollama says what spilled, a CPU-only desktop, an Apple M2 Max's unified memory."""

from __future__ import annotations

import time

import pynvml
import pytest

from kvmon.app.demo import demo_session
from kvmon.app.monitor import Monitor
from kvmon.core.analysis import Analyzer
from kvmon.core.snapshot import AlertLevel, Snapshot
from kvmon.sim.fake_nvml import FakeNvml
from kvmon.sim.server import SimServer
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.ollama.source import OllamaSource


def no_nvidia() -> NvmlSource:
    """This machine as kvmon sees it without an NVIDIA driver: NVML's library is not there."""
    fake = FakeNvml([])
    fake.failing["nvmlInit"] = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    return NvmlSource(fake)


def _polls(m: Monitor, sim: SimServer, n: int = 8, step_s: float = 5.0) -> Snapshot:
    snap = m.poll()
    for _ in range(n):
        sim.clock.advance(step_s)
        snap = m.poll()
    return snap


def test_the_simulated_log_alone_gives_a_ceiling() -> None:
    # kvmon URL --log FILE on a machine without NVIDIA's driver: the log's "ggml_cuda_init" list and "using device
    # CUDA0 (NVIDIA GeForce RTX 3090) (0000:01:00.0)" lines name the GPUs; their table bandwidth gives the ceiling
    with SimServer("seed-3090x2", start_at_s=30.0) as sim:
        m = Monitor(LlamaServerSource(sim.url, timeout_s=5.0, log_path=sim.log_path), no_nvidia(), None,
                    Analyzer(clock=sim.clock.now), clock=sim.clock.now)
        with m:
            s = _polls(m, sim)
    assert s.gpus_unavailable_reason is not None and "NVML library was not found" in s.gpus_unavailable_reason
    assert [(g.log_name, g.name, g.source, g.peak_bandwidth_bytes_per_s) for g in s.gpus] == [
        ("CUDA0", "NVIDIA GeForce RTX 3090", "log", 936e9), ("CUDA1", "NVIDIA GeForce RTX 3090", "log", 936e9)]
    assert s.ceiling_tok_s is not None and s.ceiling_tok_s > 0 and s.provenance["ceiling_tok_s"] == "computed"
    assert all(g.weights_bytes and g.kv_allocated_bytes for g in s.gpus)
    assert s.gpus[0].vram_total_bytes == 24 * 1024**3  # "VRAM: 24576 MiB" in the device list


def test_ollama_partial_offload_without_nvml_raises_the_offload_alert() -> None:
    with SimServer("ollama-partial", start_at_s=30.0) as sim:
        m = Monitor(OllamaSource(sim.url, timeout_s=5.0, clock=sim.clock.now), no_nvidia(), None,
                    Analyzer(clock=sim.clock.now), clock=sim.clock.now)
        with m:
            s = _polls(m, sim)
    alert = next(a for a in s.alerts if a.code == "weights_in_host")
    assert alert.level is AlertLevel.WARNING and "on the CPU" in alert.message
    assert s.gpus and s.gpus[0].name == "GPU (not read)"


def _demo(name: str, seconds: float = 90.0) -> Snapshot:
    session = demo_session(name, None, speed=30.0)
    m = session.factory()
    try:
        deadline = time.monotonic() + 60.0
        snap = m.poll()
        while time.monotonic() < deadline and (snap.decode_tok_s is None or snap.efficiency is None):
            time.sleep(0.3)
            snap = m.poll()
        return snap
    finally:
        m.close()
        session.close()


def test_cpu_only_demo_shows_a_ceiling_an_efficiency_and_host_ram() -> None:
    s = _demo("cpu-ddr5")
    assert s.gpus == () and s.ceiling_tok_s is not None and s.efficiency is not None
    assert 0.3 < s.efficiency <= 1.0
    assert s.host.in_ceiling and s.host.host_bandwidth_source == "measured" and s.host.weights_in_host_bytes
    assert s.host.achieved_bandwidth_bytes_per_s is not None
    assert any(a.code == "cpu_only" and a.level is AlertLevel.INFO for a in s.alerts)


def test_apple_demo_holds_the_model_in_unified_memory_near_the_working_set_limit() -> None:
    s = _demo("apple-m2max")
    (g,) = s.gpus
    assert (g.kind, g.vendor, g.log_name, g.working_set_source) == ("unified_memory", "apple", "MTL0", "metal")
    assert g.weights_bytes and g.kv_allocated_bytes and s.ceiling_tok_s is not None and s.efficiency is not None
    assert g.peak_bandwidth_bytes_per_s == pytest.approx(400e9)
    alert = next(a for a in s.alerts if a.code == "unified_working_set")
    assert alert.level is AlertLevel.WARNING and "Apple M2 Max" in alert.message
