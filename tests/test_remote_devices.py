"""Device readings of a server on another machine: read back from the ``kvmon serve`` running beside it (a real
exporter over HTTP), said unknown without one (never this machine's GPUs), and clear when that exporter is gone,
silent or not kvmon's."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from helpers_http import FixtureServer, closed_port_url

from kvmon.exporter import Exporter
from kvmon.monitor import Monitor
from kvmon.session import device_sources
from kvmon.sim.server import SimServer
from kvmon.sources.host import HostSource
from kvmon.sources.llamacpp import LlamaServerSource
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.remote_devices import NO_REMOTE_DEVICES, NoDevices, NoHost, RemoteDevices


@pytest.fixture
def remote() -> Iterator[tuple[SimServer, Exporter]]:
    """The "other machine": a simulated server and the `kvmon serve` beside it, with the simulated GPUs."""
    sim = SimServer("seed-3090x2", speed=20.0)
    url = sim.start()
    monitor = Monitor(LlamaServerSource(url, log_path=sim.log_path, timeout_s=2.0), NvmlSource(sim.nvml),
                      HostSource(64e9), server_pids=sim.server_pids)
    exporter = Exporter(monitor, interval_s=3600.0)
    exporter.listen("127.0.0.1", 0)
    try:
        yield sim, exporter
    finally:
        exporter.stop()
        monitor.close()
        sim.stop()


def test_the_remote_exporters_gpus_and_host_are_read_back(remote: tuple[SimServer, Exporter]) -> None:
    _sim, exporter = remote
    there = exporter.poll_once()  # what the kvmon on that machine sees
    assert exporter.metrics_url is not None and len(there.gpus) == 2
    devices = RemoteDevices(exporter.metrics_url.removesuffix("/metrics"))
    try:
        gpus = devices.poll()
        host = devices.host_source().poll()
    finally:
        devices.close()
    assert gpus.unavailable_reason is None and [g.index for g in gpus.gpus] == [0, 1]
    for mine, theirs in zip(gpus.gpus, there.gpus, strict=True):
        assert (mine.name, mine.vram_total_bytes, mine.vram_used_bytes, mine.vram_free_bytes) == \
            (theirs.name, theirs.vram_total_bytes, theirs.vram_used_bytes, theirs.vram_free_bytes)
        assert mine.server_used_bytes == theirs.server_used_bytes and mine.server_used_bytes
        assert mine.other_processes_used_bytes == theirs.other_processes_bytes
        assert mine.peak_bandwidth_bytes_per_s == pytest.approx(theirs.peak_bandwidth_bytes_per_s)
        assert mine.bandwidth_source == "remote" and "read from" in mine.reasons["source"]
    assert host.ram_total_bytes == there.host.ram_total_bytes and host.ram_total_bytes
    assert host.host_bandwidth_bytes_per_s == 64e9 and host.host_bandwidth_source == "remote"


def test_a_monitor_of_a_remote_server_uses_the_remote_devices(remote: tuple[SimServer, Exporter]) -> None:
    sim, exporter = remote
    exporter.poll_once()
    assert exporter.metrics_url is not None
    gpu, host = device_sources("http://192.0.2.10:9931", exporter.metrics_url)
    assert isinstance(gpu, RemoteDevices)
    mon = Monitor(LlamaServerSource(sim.url, log_path=sim.log_path, timeout_s=2.0), gpu, host)
    try:
        snap = mon.poll()
    finally:
        mon.close()
    assert snap.gpus_unavailable_reason is None and len(snap.gpus) == 2
    assert snap.gpus[0].weights_bytes and snap.gpus[0].bandwidth_source == "remote"
    assert snap.ceiling_curve  # the remote GPUs' bandwidth makes the ceiling


def test_a_remote_server_without_an_exporter_has_no_device_readings_and_says_how_to_get_them() -> None:
    gpu, host = device_sources("http://192.0.2.10:9931", None)
    assert isinstance(gpu, NoDevices) and isinstance(host, NoHost)
    assert gpu.poll().unavailable_reason == NO_REMOTE_DEVICES and "kvmon serve" in NO_REMOTE_DEVICES
    assert host.poll().reasons["host"] == NO_REMOTE_DEVICES
    local_gpu, local_host = device_sources("http://127.0.0.1:9931", None, gpu=False)
    assert local_gpu is None and not isinstance(local_host, NoHost)  # this machine: its own host


def test_an_exporter_gone_silent_or_foreign_is_a_clear_reason(fixture_server: FixtureServer) -> None:
    gone = RemoteDevices(closed_port_url(), timeout_s=0.5)
    try:
        why = gone.poll().unavailable_reason
        assert why and why.startswith("device readings from ") and "cannot connect" in why
    finally:
        gone.close()
    fixture_server.set("/metrics", 200, "# HELP up x\n# TYPE up gauge\nup 1\n", {"Content-Type": "text/plain"})
    foreign = RemoteDevices(fixture_server.url)
    try:
        assert "exports no kvmon device readings" in (foreign.poll().unavailable_reason or "")
    finally:
        foreign.close()
    old = time.time() - 600
    fixture_server.set("/metrics", 200, f"kvmon_last_poll_timestamp_seconds {old}\n"
                       'kvmon_gpu_vram_total_bytes{gpu="0",gpu_name="X"} 1e9\n', {"Content-Type": "text/plain"})
    stale = RemoteDevices(fixture_server.url + "/metrics")
    try:
        why = stale.poll().unavailable_reason
        assert why and "s old" in why and "stopped polling" in why
    finally:
        stale.close()
    fixture_server.set("/metrics", 200, "<html>not metrics {", {"Content-Type": "text/html"})
    garbage = RemoteDevices(fixture_server.url)
    try:
        assert garbage.poll().unavailable_reason
    finally:
        garbage.close()
