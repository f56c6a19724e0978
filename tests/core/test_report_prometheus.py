"""kvmon serve: the Prometheus exporter over real HTTP, scraped with httpx and read with prometheus_client's parser."""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from helpers_http import FixtureServer, serve_llama_state, wait_until
from prometheus_client.parser import text_string_to_metric_families
from repo_paths import ROOT

from kvmon import __version__
from kvmon.app.monitor import Monitor
from kvmon.cli import main as cli_main
from kvmon.cli.serve import (
    INTERVAL_ENV,
    Exporter,
    interval_from_env,
    parse_listen,
    run,
)
from kvmon.core.analysis import Analyzer
from kvmon.core.locality import ListenAddressError
from kvmon.core.report_prometheus import snapshot_families
from kvmon.core.snapshot import (
    Alert,
    AlertLevel,
    CeilingSuspect,
    Connection,
    ConnectionStatus,
    Forecast,
    GpuView,
    HostView,
    Milestone,
    ModelView,
    Regime,
    SlotView,
    Snapshot,
)
from kvmon.sources.llamacpp.source import LlamaServerSource
from kvmon.sources.nvml import NvmlSource

GIB = 1024**3
Samples = dict[str, dict[frozenset[tuple[str, str]], float]]


def parse(text: str) -> Samples:
    """name → {frozenset(labels): value} for every sample in an exposition text."""
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def scrape(exporter: Exporter) -> Samples:
    url = exporter.metrics_url
    assert url is not None
    r = httpx.get(url, timeout=5.0)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return parse(r.text)


def one(samples: Samples, name: str, **labels: str) -> float:
    """The value of the one sample of ``name`` whose labels include ``labels``."""
    hits = [v for k, v in samples.get(name, {}).items() if set(labels.items()) <= set(k)]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} samples in {samples.get(name)}"
    return hits[0]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest.fixture
def exporter_on() -> Iterator[list[Exporter]]:
    """Exporters made by a test are stopped afterwards (their monitors too)."""
    made: list[Exporter] = []
    yield made
    for e in made:
        e.stop()
        if e.monitor is not None:
            e.monitor.close()


def serve_monitor(made: list[Exporter], monitor: object) -> Exporter:
    e = Exporter(monitor, interval_s=3600.0)  # the tests poll by hand: a scrape must match a known Snapshot
    e.listen("127.0.0.1", 0)
    made.append(e)
    return e


# --------------------------------------------------------------------------- --listen and the interval


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)),
    ("0.0.0.0:9000", ("0.0.0.0", 9000)),
    ("localhost:0", ("localhost", 0)),
    ("[::1]:9464", ("::1", 9464)),
    ("9465", ("127.0.0.1", 9465)),
    (None, ("127.0.0.1", 9464)),
])
def test_listen_addresses(text: str | None, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["", "127.0.0.1:", ":9464", "127.0.0.1:http", "127.0.0.1:70000", "::1:9464",
                                  "[::1]9464", "[nothost]:9464", "a b:9464", "http://x/:80", "-1"])
def test_bad_listen_addresses_are_refused(text: str) -> None:
    with pytest.raises(ListenAddressError):
        parse_listen(text)


def test_interval_from_env() -> None:
    assert interval_from_env({}) == 5.0
    assert interval_from_env({INTERVAL_ENV: " 2.5 "}) == 2.5
    for bad in ("fast", "0", "-1", "nan", "inf"):
        with pytest.raises(ValueError, match=INTERVAL_ENV):
            interval_from_env({INTERVAL_ENV: bad})


# --------------------------------------------------------------------------- Snapshot → families (pure)


def _full_snapshot(status: ConnectionStatus = ConnectionStatus.CONNECTED) -> Snapshot:
    return Snapshot(
        seq=3, t_monotonic=10.0, t_wall=1_700_000_000.5, connection=Connection(status),
        backend="llama-server", server_version="b11549", url="http://127.0.0.1:8080",
        model=ModelView(name="qwen", arch="qwen2", quantization="Q4_K_M", n_ctx=32768, kv_bytes_per_token=57344.0,
                        kv_type_k="q8_0", kv_type_v="q8_0", weight_bytes=4 * GIB),
        slots=(SlotView(0, 32768, 1200, True, 41.5), SlotView(1, 32768, None, False)),
        context_tokens=1200, decode_tok_s=41.5, prefill_tok_s=None, ceiling_tok_s=80.0, efficiency=41.5 / 80.0,
        kv_in_use_bytes=1200 * 57344, kv_allocated_bytes=32768 * 57344, achieved_bandwidth_bytes_per_s=float("nan"),
        peak_bandwidth_bytes_per_s=936e9,
        gpus=(GpuView(0, "NVIDIA GeForce RTX 3090", vram_total_bytes=24 * GIB, vram_used_bytes=10 * GIB,
                      vram_free_bytes=14 * GIB, memory_busy_percent=62.0, pcie_rx_bytes_per_s=None),),
        host=HostView(ram_total_bytes=64 * GIB),
        forecast=Forecast(milestones=(Milestone(65536, 30.25, ceiling_tok_s=50.0), Milestone(65536, 1.0))),
        alerts=(Alert(AlertLevel.WARNING, "ctx_full_soon", "x"), Alert(AlertLevel.WARNING, "ctx_full_soon", "y"),
                Alert(AlertLevel.CRITICAL, "kv_in_host", "z")),
    )


def _render(snapshot: Snapshot | None) -> Samples:
    from prometheus_client import CollectorRegistry, generate_latest

    class Fixed:
        def collect(self) -> object:
            return snapshot_families(snapshot)

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Fixed())  # type: ignore[arg-type]
    return parse(generate_latest(reg).decode())


def test_families_carry_the_snapshot_values_and_leave_unknowns_out() -> None:
    s = _full_snapshot()
    m = _render(s)
    srv = {"backend": "llama-server", "model": "qwen"}
    assert one(m, "kvmon_up", status="connected", backend="llama-server") == 1
    assert one(m, "kvmon_build_info", version=__version__) == 1
    assert one(m, "kvmon_decode_tokens_per_second", **srv) == 41.5
    assert one(m, "kvmon_ceiling_tokens_per_second", **srv) == 80.0
    assert one(m, "kvmon_efficiency_ratio", **srv) == pytest.approx(41.5 / 80.0)
    assert one(m, "kvmon_context_tokens", **srv) == 1200
    assert one(m, "kvmon_context_limit_tokens", **srv) == 32768
    assert one(m, "kvmon_kv_cache_bytes_per_token", **srv) == 57344
    assert one(m, "kvmon_kv_cache_allocated_bytes", **srv) == 32768 * 57344
    assert one(m, "kvmon_kv_cache_in_use_bytes", **srv) == 1200 * 57344
    assert one(m, "kvmon_peak_bandwidth_bytes_per_second", **srv) == 936e9
    assert one(m, "kvmon_model_info", arch="qwen2", kv_type_k="q8_0", quantization="Q4_K_M") == 1
    assert one(m, "kvmon_last_poll_timestamp_seconds") == 1_700_000_000.5
    gpu = {"gpu": "0", "gpu_name": "NVIDIA GeForce RTX 3090"}
    assert one(m, "kvmon_gpu_vram_total_bytes", **gpu) == 24 * GIB
    assert one(m, "kvmon_gpu_vram_free_bytes", **gpu) == 14 * GIB
    assert one(m, "kvmon_gpu_memory_busy_ratio", **gpu) == pytest.approx(0.62)
    assert one(m, "kvmon_host_ram_total_bytes") == 64 * GIB
    # the first milestone per depth wins; duplicates would make an invalid exposition
    assert one(m, "kvmon_forecast_decode_tokens_per_second", context="65536") == 30.25
    assert one(m, "kvmon_forecast_ceiling_tokens_per_second", context="65536") == 50.0
    assert one(m, "kvmon_alerts_active", level="warning", code="ctx_full_soon") == 2
    assert one(m, "kvmon_alerts_active", level="critical", code="kv_in_host") == 1
    assert one(m, "kvmon_slot_context_tokens", slot="0") == 1200
    assert one(m, "kvmon_slot_processing", slot="1") == 0
    # unknown (None) and NaN: absent, never 0
    for absent in ("kvmon_prefill_tokens_per_second", "kvmon_achieved_bandwidth_bytes_per_second",
                   "kvmon_gpu_pcie_rx_bytes_per_second", "kvmon_gpu_power_watts", "kvmon_host_kv_cache_bytes",
                   "kvmon_forecast_decode_low_tokens_per_second", "kvmon_forecast_context_full_seconds"):
        assert absent not in m, absent
    assert ("slot", "1") not in {kv for k in m["kvmon_slot_context_tokens"] for kv in k}
    assert all(math.isfinite(v) for series in m.values() for v in series.values())


def test_families_carry_the_regime_the_fit_form_and_an_uncertain_ceiling() -> None:
    s = _full_snapshot()
    srv = {"backend": "llama-server", "model": "qwen"}
    m = _render(s)
    assert one(m, "kvmon_ceiling_uncertain", suspect="", **srv) == 0
    fc = dataclasses.replace(s.forecast, fit_form="bandwidth", fit_points=9, fit_efficiency=0.7, fit_overhead_s=0.001,
                             regime=Regime(2, "devices", "devices GPU 0 → GPU 0 + PCIe 0", 5.0, 1_700_000_005.0, 8600))
    m = _render(dataclasses.replace(s, forecast=fc, efficiency=None,
                                    ceiling_suspect=CeilingSuspect("bandwidth", "measured … exceeds …")))
    assert one(m, "kvmon_ceiling_uncertain", suspect="bandwidth", **srv) == 1
    assert "kvmon_efficiency_ratio" not in m
    assert one(m, "kvmon_forecast_regime_info", regime="2", cause="devices", form="bandwidth", **srv) == 1
    assert one(m, "kvmon_forecast_regime_start_timestamp_seconds", **srv) == 1_700_000_005.0
    assert one(m, "kvmon_forecast_regime_start_context_tokens", **srv) == 8600
    assert one(m, "kvmon_forecast_fit_points", **srv) == 9
    assert one(m, "kvmon_forecast_fit_efficiency_ratio", **srv) == 0.7
    assert one(m, "kvmon_forecast_fit_overhead_seconds", **srv) == 0.001


def test_families_when_the_server_is_down_keep_gpus_and_drop_every_server_number() -> None:
    s = _full_snapshot(ConnectionStatus.UNREACHABLE)  # the analyser keeps the last model; none of it is exported
    m = _render(s)
    assert one(m, "kvmon_up", status="unreachable") == 0
    assert not [n for n in m if n.startswith(("kvmon_decode", "kvmon_ceiling", "kvmon_context", "kvmon_kv_cache",
                                              "kvmon_forecast", "kvmon_model", "kvmon_slot", "kvmon_efficiency"))]
    assert one(m, "kvmon_gpu_vram_used_bytes", gpu="0") == 10 * GIB
    assert one(m, "kvmon_alerts_active", code="kv_in_host") == 1


def test_label_values_from_the_server_are_escaped() -> None:
    odd = 'we"ird\\name\nline two'
    s = _full_snapshot()
    s = Snapshot(seq=s.seq, t_monotonic=s.t_monotonic, t_wall=s.t_wall, connection=s.connection, backend=s.backend,
                 model=ModelView(name=odd, n_ctx=4096), gpus=(GpuView(0, odd, vram_total_bytes=GIB),))
    m = _render(s)
    shown = odd.replace("\n", "^J")  # a newline in a label is shown, never a line of its own
    assert one(m, "kvmon_context_limit_tokens", model=shown) == 4096
    assert one(m, "kvmon_gpu_vram_total_bytes", gpu_name=shown) == GIB


def test_families_before_the_first_poll() -> None:
    m = _render(None)
    assert one(m, "kvmon_up", status="connecting") == 0
    assert set(m) == {"kvmon_up", "kvmon_build_info"}


# --------------------------------------------------------------------------- over HTTP


def test_captured_llama_server_scraped_equals_the_snapshot(fixture_server: FixtureServer,
                                                           exporter_on: list[Exporter]) -> None:
    serve_llama_state(fixture_server, "generating")
    e = serve_monitor(exporter_on, Monitor(LlamaServerSource(fixture_server.url, timeout_s=2.0)))
    e.poll_once()
    snap = e.poll_once()
    asked = len(fixture_server.requests)
    m = scrape(e)
    scrape(e)
    assert len(fixture_server.requests) == asked, "a scrape must not poll the server"
    srv = {"backend": "llama-server", "model": snap.model.name or ""}
    assert snap.context_tokens and snap.model.n_ctx
    assert one(m, "kvmon_up", status="connected") == 1
    assert one(m, "kvmon_context_tokens", **srv) == snap.context_tokens
    assert one(m, "kvmon_context_limit_tokens", **srv) == snap.model.n_ctx
    assert one(m, "kvmon_exporter_polls_total") == 2
    assert one(m, "kvmon_exporter_poll_duration_seconds") >= 0
    # no GPU source, and the same captures twice (no counter moved): no GPU series and no measured speed
    assert not [n for n in m if n.startswith("kvmon_gpu_")]
    assert snap.decode_tok_s is None and "kvmon_decode_tokens_per_second" not in m
    # a Prometheus that asks for OpenMetrics gets a valid OpenMetrics document with the same values
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

    url = e.metrics_url
    assert url is not None
    r = httpx.get(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}, timeout=5.0)
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    om = {s.name: s.value for fam in parse_openmetrics(r.text) for s in fam.samples
          if s.name in ("kvmon_context_tokens", "kvmon_up")}
    assert om == {"kvmon_context_tokens": snap.context_tokens, "kvmon_up": 1}


def test_a_hung_server_never_holds_a_scrape(fixture_server: FixtureServer, exporter_on: list[Exporter]) -> None:
    serve_llama_state(fixture_server, "idle")
    e = serve_monitor(exporter_on, Monitor(LlamaServerSource(fixture_server.url, timeout_s=1.0)))
    e.poll_once()
    for path in ("/health", "/props", "/slots", "/metrics"):  # the whole server hangs
        fixture_server.hang(path, 5.0)
    asked = len(fixture_server.requests)
    poll = threading.Thread(target=e.poll_once)
    poll.start()
    try:
        assert wait_until(lambda: len(fixture_server.requests) > asked, 5.0), "the poll should be waiting"
        t0 = time.monotonic()
        m = scrape(e)
        took = time.monotonic() - t0
        assert poll.is_alive(), "the scrape should have happened during the hung poll"
    finally:
        poll.join(10)
    assert took < 0.5, f"a scrape waited {took:.2f} s on a hung server"
    assert one(m, "kvmon_up", status="connected") == 1  # the last reading, until the poll ends
    assert e.state.snapshot is not None and e.state.snapshot.connection.status is ConnectionStatus.TIMEOUT
    assert one(scrape(e), "kvmon_up", status="timeout") == 0


def test_serving_loads_no_qt() -> None:
    code = ("import sys, kvmon.cli.serve, kvmon.app.monitor\n"
            "import kvmon.sources.llamacpp.source, kvmon.sources.ollama.source\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6')]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_simulated_server_scraped_equals_the_snapshot_then_goes_down(exporter_on: list[Exporter]) -> None:
    from kvmon.sim.server import SimServer

    sim = SimServer("seed-3090x2", speed=20.0)
    url = sim.start()
    try:
        # readings stamped with the simulator's clock (as the demo does): rates in simulated seconds, not 20× them
        clock = sim.clock.now
        monitor = Monitor(LlamaServerSource(url, log_path=sim.log_path, timeout_s=2.0, clock=clock),
                          NvmlSource(sim.nvml, clock=clock), analyzer=Analyzer(clock=clock),
                          server_pids=sim.server_pids, clock=clock)
        e = serve_monitor(exporter_on, monitor)
        snap = e.poll_once()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (snap.decode_tok_s is None or snap.ceiling_tok_s is None):
            time.sleep(0.1)
            snap = e.poll_once()
        assert snap.decode_tok_s is not None, "the simulator should be generating"
        m = scrape(e)
    finally:
        sim.stop()
    srv = {"backend": "llama-server", "model": snap.model.name or ""}
    assert one(m, "kvmon_up", status="connected", backend="llama-server") == 1
    for name, value in (("kvmon_decode_tokens_per_second", snap.decode_tok_s),
                        ("kvmon_ceiling_tokens_per_second", snap.ceiling_tok_s),
                        ("kvmon_efficiency_ratio", snap.efficiency),
                        ("kvmon_context_tokens", snap.context_tokens),
                        ("kvmon_kv_cache_bytes_per_token", snap.model.kv_bytes_per_token),
                        ("kvmon_kv_cache_allocated_bytes", snap.kv_allocated_bytes),
                        ("kvmon_kv_cache_in_use_bytes", snap.kv_in_use_bytes),
                        ("kvmon_peak_bandwidth_bytes_per_second", snap.peak_bandwidth_bytes_per_s)):
        assert value is not None, name
        assert one(m, name, **srv) == pytest.approx(value, rel=1e-12), name
    assert len(snap.gpus) == 2
    for g in snap.gpus:
        lab = {"gpu": str(g.index), "gpu_name": g.name or ""}
        assert one(m, "kvmon_gpu_vram_total_bytes", **lab) == g.vram_total_bytes
        assert one(m, "kvmon_gpu_vram_used_bytes", **lab) == g.vram_used_bytes
        assert one(m, "kvmon_gpu_peak_bandwidth_bytes_per_second", **lab) == pytest.approx(g.peak_bandwidth_bytes_per_s)
        assert g.pcie_rx_bytes_per_s is not None and g.memory_busy_percent is not None
        assert one(m, "kvmon_gpu_pcie_rx_bytes_per_second", **lab) == pytest.approx(g.pcie_rx_bytes_per_s)
        assert one(m, "kvmon_gpu_memory_busy_ratio", **lab) == pytest.approx(g.memory_busy_percent / 100)
    assert snap.forecast.milestones, "the simulator's decode should give a forecast"
    for ms in snap.forecast.milestones:
        assert one(m, "kvmon_forecast_decode_tokens_per_second", context=str(ms.context_tokens)) == \
            pytest.approx(ms.tok_s)
    # the server is gone: up 0 with the reason as status, no stale speed; the GPUs still read.
    # SimServer.stop() closes its port but keeps serving open keep-alive connections, so the source is
    # replaced by a fresh one on the same URL, as a client sees it after a real server exits.
    monitor.server_source.close()
    monitor.server_source = LlamaServerSource(url, log_path=sim.log_path, timeout_s=2.0)
    down = e.poll_once()
    assert down.connection.status is ConnectionStatus.UNREACHABLE
    m = scrape(e)
    assert one(m, "kvmon_up", status="unreachable") == 0
    for name in ("kvmon_decode_tokens_per_second", "kvmon_ceiling_tokens_per_second", "kvmon_efficiency_ratio",
                 "kvmon_context_tokens", "kvmon_kv_cache_in_use_bytes", "kvmon_forecast_decode_tokens_per_second"):
        assert name not in m, name
    assert len(m["kvmon_gpu_vram_total_bytes"]) == 2


def test_the_poll_thread_polls_and_a_kvmon_bug_is_a_failed_state(exporter_on: list[Exporter]) -> None:
    class Buggy:
        backend = "ollama"
        calls = 0

        def poll(self) -> Snapshot:
            Buggy.calls += 1
            raise RuntimeError("analysis bug")

        def close(self) -> None:
            pass

    e = Exporter(Buggy(), interval_s=0.1)
    e.listen("127.0.0.1", 0)
    exporter_on.append(e)
    e.start_polling()
    assert wait_until(lambda: e.state.polls >= 2, 5.0)
    m = scrape(e)
    assert one(m, "kvmon_up", status="bad_response", backend="ollama") == 0
    assert one(m, "kvmon_exporter_poll_errors_total") >= 2
    assert e.state.snapshot is not None and "analysis bug" in (e.state.snapshot.connection.reason or "")


# --------------------------------------------------------------------------- run() and the command line


def _args(url: str | None, listen: str) -> argparse.Namespace:
    return argparse.Namespace(url=url, api_key=None, log=None, timeout=1.0, listen=listen)


def test_bad_listen_address_exits_2_with_one_line() -> None:
    err = io.StringIO()
    assert run(_args("http://127.0.0.1:1", "127.0.0.1:notaport"), err=err) == 2
    assert err.getvalue().count("\n") == 1 and "notaport" in err.getvalue()
    assert cli_main(["serve", "http://127.0.0.1:1", "--listen", "bad address:1"]) == 2


def test_unusable_addresses_and_intervals_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        err = io.StringIO()
        assert run(_args("http://127.0.0.1:1", f"127.0.0.1:{taken.getsockname()[1]}"), err=err) == 2
        assert "cannot listen" in err.getvalue()
    finally:
        taken.close()
    err = io.StringIO()
    assert run(_args("http://127.0.0.1:1", "no-such-host.invalid:0"), err=err) == 2
    assert "cannot listen" in err.getvalue()
    err = io.StringIO()
    assert run(_args("ht!tp://", "127.0.0.1:0"), err=err) == 2  # a bad server URL
    monkeypatch.setenv(INTERVAL_ENV, "often")
    err = io.StringIO()
    assert run(_args("http://127.0.0.1:1", "127.0.0.1:0"), err=err) == 2
    assert INTERVAL_ENV in err.getvalue()


def test_run_serves_until_stopped(fixture_server: FixtureServer, monkeypatch: pytest.MonkeyPatch) -> None:
    serve_llama_state(fixture_server, "idle")
    monkeypatch.setenv(INTERVAL_ENV, "0.2")
    stop = threading.Event()
    ready: list[Exporter] = []
    err = io.StringIO()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(run(_args(fixture_server.url, "127.0.0.1:0"), err=err,
                                                          stop=stop, on_ready=ready.append)))
    t.start()
    try:
        assert wait_until(lambda: ready and ready[0].state.polls >= 2, 10.0)
        m = scrape(ready[0])
        assert one(m, "kvmon_up", status="connected", backend="llama-server") == 1
    finally:
        stop.set()
        t.join(10)
    assert result == [0]
    assert "/metrics" in err.getvalue() and fixture_server.url in err.getvalue()


def test_kvmon_serve_process_answers_and_ends_on_sigterm() -> None:
    port = closed_port()
    env = {**os.environ, INTERVAL_ENV: "0.2", "QT_QPA_PLATFORM": "offscreen"}
    root = ROOT
    proc = subprocess.Popen([sys.executable, "-m", "kvmon", "serve", f"http://127.0.0.1:{closed_port()}",
                             "--timeout", "0.5", "--listen", f"127.0.0.1:{port}"],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        text = ""

        def scraped() -> bool:
            nonlocal text
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2.0).text
            except httpx.HTTPError:
                return False
            return "kvmon_exporter_polls_total 1" in text or "kvmon_exporter_polls_total 2" in text
        assert wait_until(scraped, 20.0), proc.stderr.read() if proc.poll() is not None else "no answer"
        m = parse(text)
        assert one(m, "kvmon_up", status="unreachable") == 0
        assert "kvmon_decode_tokens_per_second" not in m
        proc.terminate()
        assert proc.wait(10) == 0
        assert "Traceback" not in (proc.stderr.read() or "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
