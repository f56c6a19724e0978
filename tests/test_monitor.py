"""Monitor: sources → Snapshot over real HTTP; failures of any source never take the others down."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers_http import LLAMA_FIXTURES, FixtureServer, closed_port_url, serve_llama_state

from kvmon.app.monitor import Monitor
from kvmon.core.readings import GpuSetReading, HostReading, ServerReading
from kvmon.core.recorder import Recorder, read_recording, snapshot_to_dict
from kvmon.core.snapshot import ConnectionStatus
from kvmon.sim.fake_nvml import FakeGpu, FakeNvml
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.nvml import NvmlSource

GIB = 1024**3


def fake_gpu_source() -> NvmlSource:
    g = FakeGpu(memory_total_bytes=24 * GIB, memory_used_bytes=2 * GIB)
    return NvmlSource(FakeNvml([g]))


class Exploding:
    """A GPU/host/server source with a bug: every call raises something unexpected."""

    backend = "llama-server"
    display_url = "http://127.0.0.1:1"

    def poll(self, *_a: object) -> object:
        raise RuntimeError("driver went away")

    def close(self) -> None:
        raise RuntimeError("and cannot close either")


def first_run_log(tmp_path: Path) -> Path:
    """The main run's load-time log lines (the first block of the capture) as a log file."""
    text = (LLAMA_FIXTURES / "kv-log-lines.txt").read_text(encoding="utf-8")
    block = text.split("\n## ")[1].split("\n", 1)[1]
    path = tmp_path / "llama-server.log"
    path.write_text(block, encoding="utf-8")
    return path


def test_llama_server_over_http_with_a_gpu(fixture_server: FixtureServer, tmp_path: Path) -> None:
    serve_llama_state(fixture_server, "generating")
    log = str(first_run_log(tmp_path))
    with Monitor(LlamaServerSource(fixture_server.url, timeout_s=2.0, log_path=log), fake_gpu_source()) as m:
        s1 = m.poll()
        s2 = m.poll()
    assert s1.connection.status is ConnectionStatus.CONNECTED
    assert s2.seq == s1.seq + 1
    assert s2.backend == "llama-server"
    assert s2.model.name and s2.model.n_ctx == 16384
    assert s2.slots and s2.slots[0].processing
    assert s2.context_tokens is not None and s2.context_tokens > 0
    assert s2.kv_allocated_bytes == 32 * 2**20  # the capture's llama_kv_cache line: 32 MiB at 16384 f16
    assert s2.provenance["kv_allocated_bytes"] == "log"
    assert s2.model.weight_bytes is not None
    assert len(s2.gpus) == 1 and s2.gpus[0].vram_total_bytes == 24 * GIB
    assert s2.gpus[0].peak_bandwidth_bytes_per_s == pytest.approx(10501e6 * 2 * 384 / 8, rel=0.05)
    assert isinstance(m.last_reading, ServerReading)


def test_unreachable_server_is_a_state_and_gpus_still_read() -> None:
    m = Monitor(LlamaServerSource(closed_port_url(), timeout_s=1.0), fake_gpu_source())
    s = m.poll()
    m.close()
    assert s.connection.status is ConnectionStatus.UNREACHABLE
    assert s.decode_tok_s is None
    assert s.gpus and s.gpus[0].vram_total_bytes == 24 * GIB


def test_hung_server_times_out(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    for path in ("/health", "/props", "/slots", "/metrics", "/v1/models"):  # the whole server hangs
        fixture_server.hang(path, 5.0)
    m = Monitor(LlamaServerSource(fixture_server.url, timeout_s=0.3))
    t0 = time.monotonic()
    s = m.poll()
    took = time.monotonic() - t0
    m.close()
    assert s.connection.status is ConnectionStatus.TIMEOUT
    assert took < 3.0


def test_model_loading(fixture_server: FixtureServer) -> None:
    fixture_server.set_capture("/health", "health.loading.json")
    fixture_server.set_capture("/props", "health.loading.json")
    s = Monitor(LlamaServerSource(fixture_server.url, timeout_s=1.0)).poll()
    assert s.connection.status is ConnectionStatus.LOADING


def test_gpu_and_host_failures_do_not_kill_the_server_reading(fixture_server: FixtureServer) -> None:
    serve_llama_state(fixture_server, "idle")
    m = Monitor(LlamaServerSource(fixture_server.url, timeout_s=2.0), Exploding(), Exploding())
    s = m.poll()
    m.close()  # a source that fails to close is ignored
    assert s.connection.status is ConnectionStatus.CONNECTED
    assert s.model.name
    assert s.gpus == () and "GPU reading failed: RuntimeError: driver went away" in (s.gpus_unavailable_reason or "")


def test_a_buggy_server_source_becomes_a_bad_response() -> None:
    s = Monitor(Exploding()).poll()
    assert s.connection.status is ConnectionStatus.BAD_RESPONSE
    assert "driver went away" in (s.connection.reason or "")


def test_no_nvidia_gpu() -> None:
    class NoGpu:
        def poll(self, pids: object = ()) -> GpuSetReading:
            return GpuSetReading(t_monotonic=time.monotonic(), unavailable_reason="no NVIDIA GPU: driver not loaded")

        def close(self) -> None:
            pass

    s = Monitor(Exploding(), NoGpu()).poll()
    assert s.gpus_unavailable_reason == "no NVIDIA GPU: driver not loaded"


def test_recording_every_poll(fixture_server: FixtureServer, tmp_path: Path) -> None:
    serve_llama_state(fixture_server, "idle")
    path = tmp_path / "session.jsonl"
    m = Monitor(LlamaServerSource(fixture_server.url, timeout_s=2.0), recorder=Recorder(path))
    polled = [m.poll() for _ in range(3)]
    m.close()
    back = read_recording(path)
    assert [s.seq for s in back.snapshots] == [s.seq for s in polled]
    assert [snapshot_to_dict(x) for x in back.snapshots] == [snapshot_to_dict(x) for x in polled]


def test_simulated_two_gpu_server_end_to_end() -> None:
    from kvmon.sim.server import SimServer
    from kvmon.sources.llamacpp.source import LlamaServerSource as Src

    sim = SimServer("seed-3090x2", speed=20.0)
    url = sim.start()
    m = Monitor(Src(url, log_path=sim.log_path, timeout_s=2.0), NvmlSource(sim.nvml))
    try:
        deadline = time.monotonic() + 20
        s = m.poll()
        while time.monotonic() < deadline and s.decode_tok_s is None:
            time.sleep(0.2)
            s = m.poll()
    finally:
        m.close()
        sim.stop()
    assert s.decode_tok_s is not None and s.decode_tok_s > 0
    assert len(s.gpus) == 2 and all(g.peak_bandwidth_bytes_per_s for g in s.gpus)
    assert all(g.weights_bytes and g.kv_allocated_bytes for g in s.gpus)
    # two 3090s holding the layers in turn: the ceiling is 936 GB/s over the GPU-resident weights (+ KV); the
    # host buffer (token embeddings, one row per token) is not part of the stream
    gpu_weights = sum(g.weights_bytes or 0 for g in s.gpus)
    assert s.model.weight_bytes_read_per_token is not None and gpu_weights < s.model.weight_bytes_read_per_token
    assert s.ceiling_tok_s is not None
    assert 936e9 / (gpu_weights + 4 * s.kv_in_use_bytes) < s.ceiling_tok_s < 936e9 / gpu_weights
    assert s.extra["placement"] == "log"
    assert not any(a.code == "weights_in_host" for a in s.alerts)  # the host buffer is the embedding table


def test_spill_scenario_vram_alert_rises_30_simulated_seconds_early() -> None:
    """spill-4090: another app eats VRAM from t=120 s to 300 s; the alert must come ≥ 30 s before it runs out."""
    from kvmon.sim.server import SimServer
    from kvmon.sources.llamacpp.source import LlamaServerSource as Src

    sim = SimServer("spill-4090", speed=25.0, start_at_s=110.0)
    url = sim.start()
    clock = sim.clock.now  # readings on the simulated clock, as the demo stamps them: the trend's times are its own
    m = Monitor(Src(url, log_path=sim.log_path, timeout_s=2.0, clock=clock), NvmlSource(sim.nvml, clock=clock),
                server_pids=sim.server_pids, clock=clock)
    alert_at = ran_out_at = None
    message = ""
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and ran_out_at is None:
            s = m.poll()
            now = sim.clock.now()
            vram_alert = next((a for a in s.alerts if a.code == "vram_full_soon"), None)
            if alert_at is None and vram_alert is not None:
                alert_at, message = now, vram_alert.message
            if s.gpus and s.gpus[0].vram_free_bytes is not None and s.gpus[0].vram_free_bytes < 768 * 2**20:
                ran_out_at = now
            time.sleep(0.1)
    finally:
        m.close()
        sim.stop()
    assert ran_out_at is not None, "the scenario should run VRAM out"
    assert alert_at is not None and alert_at <= ran_out_at - 30
    assert "another program took" in message  # the simulated other application, not kvmon's server


def test_cpu_only_server_raises_no_spill_alert(fixture_server: FixtureServer, tmp_path: Path) -> None:
    """The captures come from a CPU build: its KV cache lives in host RAM by design, nothing has spilled."""
    serve_llama_state(fixture_server, "generating")
    log = str(first_run_log(tmp_path))

    class NoGpu:
        def poll(self, pids: object = ()) -> GpuSetReading:
            return GpuSetReading(t_monotonic=time.monotonic(), unavailable_reason="no NVIDIA GPU: no driver")

        def close(self) -> None:
            pass

    with Monitor(LlamaServerSource(fixture_server.url, timeout_s=2.0, log_path=log), NoGpu()) as m:
        m.poll()
        s = m.poll()
    codes = {a.code for a in s.alerts}
    assert "kv_in_host" not in codes and "weights_in_host" not in codes, s.alerts
    assert s.kv_allocated_bytes == 32 * 2**20


class CountingHost:
    """A host source that counts its reads, fails when told to, and reports more RSS on each read."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.pids: list[tuple[int, ...]] = []
        self.fail = False

    def poll(self, pids: tuple[int, ...] = ()) -> HostReading:
        self.pids.append(tuple(pids))
        if self.fail:
            raise OSError("psutil lost /proc")
        return HostReading(t_monotonic=self.clock[0], ram_total_bytes=64 * GIB, ram_available_bytes=32 * GIB,
                           server_rss_bytes=len(self.pids) * GIB)

    def close(self) -> None:
        pass


def test_host_read_every_interval_and_kept_between() -> None:
    now = [100.0]
    host = CountingHost(now)
    m = Monitor(Exploding(), None, host, server_pids=(42,), clock=lambda: now[0], host_interval_s=5.0)
    rss = []
    for _ in range(12):  # 12 polls one second apart: reads at 100, 105, 110
        s = m.poll()
        rss.append(s.host.server_rss_bytes)
        assert s.t_monotonic == now[0]  # a kept reading is stamped with the time of the poll
        now[0] += 1.0
    assert host.pids == [(42,)] * 3
    assert rss == [GIB] * 5 + [2 * GIB] * 5 + [3 * GIB] * 2


def test_host_read_again_after_a_failure_or_new_server_pids() -> None:
    now = [0.0]
    host = CountingHost(now)
    m = Monitor(Exploding(), None, host, server_pids=(1,), clock=lambda: now[0])
    host.fail = True
    m.poll()
    host.fail = False
    now[0] = 1.0
    assert m.poll().host.server_rss_bytes == 2 * GIB  # a failure is not kept: read again at once
    m._server_pids = (7,)  # the server restarted with another process
    now[0] = 2.0
    assert m.poll().host.server_rss_bytes == 3 * GIB
    assert host.pids == [(1,), (1,), (7,)]


def test_the_host_bandwidth_probe_runs_once_and_never_while_a_slot_decodes(fixture_server: FixtureServer,
                                                                          tmp_path: Path) -> None:
    from kvmon.sources.host import HostSource

    host = HostSource(cache_dir=tmp_path, chip_name=None, system_root=tmp_path / "none", auto_probe=True)
    serve_llama_state(fixture_server, "generating")  # a slot is decoding: the probe would steal its bandwidth
    with Monitor(LlamaServerSource(fixture_server.url, timeout_s=2.0), None, host, host_interval_s=0.0) as m:
        for _ in range(3):
            s = m.poll()
        assert m.probes_run == 0 and s.host.host_bandwidth_bytes_per_s is None
        serve_llama_state(fixture_server, "idle")
        s = m.poll()
        assert m.probes_run == 1 and s.host.host_bandwidth_bytes_per_s is not None
        for _ in range(3):
            m.poll()
        assert m.probes_run == 1  # once per machine: it is remembered
    again = HostSource(cache_dir=tmp_path, chip_name=None, system_root=tmp_path / "none", auto_probe=True)
    with Monitor(LlamaServerSource(fixture_server.url, timeout_s=2.0), None, again) as m2:
        assert m2.poll().host.host_bandwidth_bytes_per_s == s.host.host_bandwidth_bytes_per_s and m2.probes_run == 0


def test_no_probe_while_another_watched_server_on_this_machine_decodes(
        fixture_server_factory: Callable[[], FixtureServer], tmp_path: Path) -> None:
    """Several servers in one window: the idle one's monitor waits until the one that decodes is idle too (both
    share this machine's memory bus), then probes once."""
    from kvmon.sources.host import HostSource

    busy, idle = fixture_server_factory(), fixture_server_factory()
    serve_llama_state(busy, "generating")
    serve_llama_state(idle, "idle")
    host = HostSource(cache_dir=tmp_path, chip_name=None, system_root=tmp_path / "none", auto_probe=True)
    with Monitor(LlamaServerSource(busy.url, timeout_s=2.0), None, None) as decoding, \
            Monitor(LlamaServerSource(idle.url, timeout_s=2.0), None, host, host_interval_s=0.0) as waiting:
        for _ in range(3):
            decoding.poll()
            waiting.poll()
        assert waiting.probes_run == 0
        serve_llama_state(busy, "idle")
        decoding.poll()
        s = waiting.poll()
        assert waiting.probes_run == 1 and s.host.host_bandwidth_source == "measured"
