"""Device readings of a server on another machine: read back from the ``kvmon serve`` running beside it (a real
exporter over HTTP), said unknown without one (never this machine's GPUs), and clear when that exporter is gone,
silent or not kvmon's."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_http import FixtureServer, closed_port_url
from repo_paths import FIXTURES

from kvmon.app.build import device_sources
from kvmon.app.monitor import Monitor
from kvmon.cli.serve import Exporter
from kvmon.core.readings import GpuSetReading, HostReading
from kvmon.physics.gpus import GB
from kvmon.sim.server import SimServer
from kvmon.sources.amdgpu import AmdGpuSource
from kvmon.sources.host import HostSource
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.nvml import NvmlSource
from kvmon.sources.remote_devices import NO_REMOTE_DEVICES, NoDevices, NoHost, RemoteDevices

SYSFS = FIXTURES / "sysfs"


@contextlib.contextmanager
def _served(scenario: str, devices: Callable[[SimServer], Any], host: Callable[[SimServer], Any] | None = None
            ) -> Iterator[tuple[SimServer, Exporter]]:
    """Another machine: a simulated server, its device source and host (the simulated machine's unless given),
    and the `kvmon serve` beside them."""
    sim = SimServer(scenario, speed=20.0)
    url = sim.start()
    monitor = Monitor(LlamaServerSource(url, log_path=sim.log_path, timeout_s=2.0), devices(sim),
                      host(sim) if host is not None else sim.host_source(), server_pids=sim.server_pids)
    exporter = Exporter(monitor, interval_s=3600.0)
    exporter.listen("127.0.0.1", 0)
    try:
        yield sim, exporter
    finally:
        exporter.stop()
        monitor.close()
        sim.stop()


def _read_back(exporter: Exporter) -> tuple[GpuSetReading, HostReading]:
    assert exporter.metrics_url is not None
    devices = RemoteDevices(exporter.metrics_url)
    try:
        return devices.poll(), devices.host_source().poll()
    finally:
        devices.close()


@pytest.fixture
def remote() -> Iterator[tuple[SimServer, Exporter]]:
    """The "other machine": a simulated server and the `kvmon serve` beside it, with the simulated GPUs."""
    with _served("seed-3090x2", lambda sim: NvmlSource(sim.nvml), lambda _sim: HostSource(64e9)) as there:
        yield there


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
        # where the bandwidth came from there (NVML's clock × bus width, the table), and what read it
        assert mine.bandwidth_source == theirs.bandwidth_source and mine.bandwidth_source in ("nvml", "table")
        assert (mine.kind, mine.vendor, mine.source) == ("discrete_gpu", "nvidia", "nvml")
        assert "read from" in mine.reasons["source"]
    assert host.ram_total_bytes == there.host.ram_total_bytes and host.ram_total_bytes
    assert host.host_bandwidth_bytes_per_s == 64e9 and host.host_bandwidth_source == "user"  # set there


def test_a_monitor_of_a_remote_server_uses_the_remote_devices(remote: tuple[SimServer, Exporter]) -> None:
    sim, exporter = remote
    there = exporter.poll_once()
    assert exporter.metrics_url is not None
    gpu, host = device_sources("http://192.0.2.10:9931", exporter.metrics_url)
    assert isinstance(gpu, RemoteDevices)
    mon = Monitor(LlamaServerSource(sim.url, log_path=sim.log_path, timeout_s=2.0), gpu, host)
    try:
        snap = mon.poll()
    finally:
        mon.close()
    assert snap.gpus_unavailable_reason is None and len(snap.gpus) == 2
    assert snap.gpus[0].weights_bytes and snap.gpus[0].bandwidth_source == there.gpus[0].bandwidth_source
    assert snap.ceiling_curve  # the remote GPUs' bandwidth makes the ceiling


def test_a_remote_macs_unified_memory_arrives_as_unified_memory() -> None:
    """A Mac serving a model: its one device is unified memory with the chip table's bandwidth and Metal's working-set
    limit; its RAM is the same memory, with the CPU's name."""
    with _served("apple-m2max", lambda sim: sim.unified_memory_source()) as (sim, exporter):
        there = exporter.poll_once()
        gpus, host = _read_back(exporter)
        assert exporter.metrics_url is not None
        gpu_src, host_src = device_sources("http://192.0.2.10:9931", exporter.metrics_url)
        with Monitor(LlamaServerSource(sim.url, log_path=sim.log_path, timeout_s=2.0), gpu_src, host_src) as here:
            snap = here.poll()
    (theirs,) = there.gpus
    (mine,) = gpus.gpus
    assert (mine.kind, mine.vendor, mine.source) == ("unified_memory", "apple", theirs.source) and theirs.source
    # this side's analysis: one unified-memory device, its cliff the working set, a ceiling from its bandwidth
    assert [g.kind for g in snap.gpus] == ["unified_memory"] and snap.ceiling_curve
    assert snap.gpus[0].working_set_limit_bytes == theirs.working_set_limit_bytes
    assert mine.peak_bandwidth_bytes_per_s == pytest.approx(400e9) and mine.bandwidth_source == "table"
    assert mine.working_set_limit_bytes == theirs.working_set_limit_bytes and mine.working_set_limit_bytes
    assert mine.working_set_source == theirs.working_set_source and mine.working_set_source
    assert host.cpu_name == there.host.cpu_name and host.cpu_name and "M2 Max" in host.cpu_name
    assert host.swap_total_bytes == there.host.swap_total_bytes


def test_a_remote_amd_card_arrives_with_its_gtt_and_its_table_bandwidth(tmp_path: Path) -> None:
    """A Linux box with an RX 6900 XT (a real sysfs snapshot): the card's vendor, source, PCI bus id, GTT spill and
    the table's bandwidth reach this side (the vendor index and bus id are what a log's ROCm0 is matched by)."""
    root = tmp_path / "rx6900xt"
    shutil.copytree(SYSFS / "rx6900xt", root, symlinks=True)
    with _served("cpu-ddr5", lambda _sim: AmdGpuSource(root)) as (_sim, exporter):
        there = exporter.poll_once()
        gpus, host = _read_back(exporter)
    (theirs,) = there.gpus
    (mine,) = gpus.gpus
    assert (mine.kind, mine.vendor, mine.source, mine.vendor_index) == ("discrete_gpu", "amd", "amdgpu", 0)
    assert mine.pci_bus_id == "0000:0c:00.0" and mine.pci_bus_id == theirs.pci_bus_id
    assert mine.peak_bandwidth_bytes_per_s == 512 * GB and mine.bandwidth_source == "table"
    assert (mine.spill_total_bytes, mine.spill_used_bytes) == (16786171904, 62369792)  # GTT
    assert (mine.vram_total_bytes, mine.vram_used_bytes) == (17163091968, 668274688)
    assert host.host_bandwidth_source == there.host.host_bandwidth_source and host.host_bandwidth_source != "remote"


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


@pytest.mark.parametrize("bad", ["+Inf", "NaN", "-5", "1e400"])
def test_one_impossible_value_is_dropped_and_the_rest_of_the_machine_kept(fixture_server: FixtureServer,
                                                                         bad: str) -> None:
    """A remote exporter's infinite, NaN, negative or overflowing value drops that series with a reason; the GPU's
    other readings and the host stay. Index labels that are not plain digits (``²``) name no device."""
    text = (f'kvmon_gpu_vram_total_bytes{{gpu="0",gpu_name="A"}} {bad}\n'
            'kvmon_gpu_vram_used_bytes{gpu="0",gpu_name="A"} 5e9\n'
            'kvmon_gpu_vram_total_bytes{gpu="\u00b2",gpu_name="B"} 8e9\n'
            'kvmon_device_info{gpu="0",vendor_index="\u00b2",kind="discrete"} 1\n'
            f'kvmon_host_ram_total_bytes {bad}\n'
            'kvmon_host_ram_available_bytes 3e10\n')
    fixture_server.set("/metrics", 200, text, {"Content-Type": "text/plain"})
    devices = RemoteDevices(fixture_server.url)
    gpus = devices.poll()
    assert gpus.unavailable_reason is None
    assert [g.index for g in gpus.gpus] == [0]
    gpu = gpus.gpus[0]
    assert gpu.vram_total_bytes is None and "not a size" in gpu.reasons["vram_total_bytes"]
    assert gpu.vram_used_bytes == 5_000_000_000 and gpu.vendor_index is None and gpu.kind == "discrete"
    host = devices.host_source().poll()
    assert host.ram_total_bytes is None and "not a size" in host.reasons["kvmon_host_ram_total_bytes"]
    assert host.ram_available_bytes == 30_000_000_000
    devices.close()
