"""``kvmon serve [URL] --listen 127.0.0.1:9464``: a headless Prometheus exporter of kvmon's Snapshot.

A poll thread runs ``Monitor.poll()`` every interval and keeps the latest Snapshot; a prometheus_client
collector turns that Snapshot into metric families when Prometheus scrapes ``/metrics``. A scrape never
touches the model server. Unknown values (None, NaN) are left out (an absent series), never exported as 0.
Metric list and a scrape config: ``docs/exporter.md``. No Qt is loaded on this path.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any, TextIO
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvmon import __version__, listen
from kvmon.core.connection import failure_of, failure_snapshot
from kvmon.core.readings import FailureKind, SourceError
from kvmon.core.snapshot import ConnectionStatus, GpuView, Snapshot

EXIT_OK = 0
EXIT_BAD = 2
DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_INTERVAL_S = 5.0
INTERVAL_ENV = "KVMON_SERVE_INTERVAL"
MIN_INTERVAL_S = 0.1

SERVER_LABELS = ("backend", "model")
GPU_LABELS = ("gpu", "gpu_name")


def parse_listen(text: str | None) -> tuple[str, int]:
    """``--listen`` of ``kvmon serve`` (``kvmon.listen.parse_listen``); 127.0.0.1:9464 when not given."""
    return listen.parse_listen(text, DEFAULT_LISTEN)


def interval_from_env(environ: dict[str, str] | None = None) -> float:
    """The poll interval in seconds: ``$KVMON_SERVE_INTERVAL`` or 5 s. Raises ValueError for a bad value."""
    env = os.environ if environ is None else environ
    text = (env.get(INTERVAL_ENV) or "").strip()
    if not text:
        return DEFAULT_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{INTERVAL_ENV}={text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < MIN_INTERVAL_S:
        raise ValueError(f"{INTERVAL_ENV}={text!r}: give a number of seconds, at least {MIN_INTERVAL_S}")
    return value


# --------------------------------------------------------------------------- Snapshot → metric families


def _num(value: Any) -> float | None:
    """A finite float, or None for unknown (None, NaN, inf, non-numbers)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class _Families:
    """Metric families by name, made on first use, so that a family with no known value is never emitted."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def gauge(self, name: str, doc: str, labels: Sequence[str], values: Sequence[str], value: Any) -> None:
        """Add one sample to gauge ``name``; an unknown value adds nothing."""
        v = _num(value)
        if v is None:
            return
        fam = self._by_name.get(name)
        if fam is None:
            fam = GaugeMetricFamily(name, doc, labels=list(labels))
            self._by_name[name] = fam
        fam.add_metric(list(values), v)  # type: ignore[attr-defined]

    def counter(self, name: str, doc: str, value: float) -> None:
        """A label-less counter (exported as ``name_total``)."""
        fam = CounterMetricFamily(name, doc, labels=[])
        fam.add_metric([], value)
        self._by_name[name] = fam

    def all(self) -> list[Metric]:
        return list(self._by_name.values())


def is_up(snapshot: Snapshot | None) -> bool:
    """True when this Snapshot holds a reading of the server (``Snapshot.server_read``): its numbers are exported."""
    return snapshot is not None and snapshot.server_read


def _server_metrics(f: _Families, s: Snapshot, lv: tuple[str, str]) -> None:
    """The server's readings and kvmon's numbers derived from them; only called when the server was read."""
    m = s.model
    g = f.gauge
    L = SERVER_LABELS
    g("kvmon_decode_tokens_per_second", "Measured decode (generation) speed; absent while idle.", L, lv,
      s.decode_tok_s)
    g("kvmon_prefill_tokens_per_second", "Measured prompt processing speed; absent when no prompt was processed.",
      L, lv, s.prefill_tok_s)
    g("kvmon_ceiling_tokens_per_second", "Decode speed the memory bandwidth allows at the current context depth.",
      L, lv, s.ceiling_tok_s)
    g("kvmon_efficiency_ratio", "Measured decode speed divided by the bandwidth ceiling.", L, lv, s.efficiency)
    g("kvmon_context_tokens", "Positions in context of the deepest active conversation.", L, lv, s.context_tokens)
    g("kvmon_context_limit_tokens", "Context size of one slot (what one conversation can hold).", L, lv, m.n_ctx)
    g("kvmon_context_total_tokens", "KV cache cells allocated over all slots.", L, lv, m.n_ctx_total)
    g("kvmon_slots", "Number of server slots (parallel conversations).", L, lv, m.n_slots)
    g("kvmon_model_weight_bytes", "Size of the model's weights.", L, lv, m.weight_bytes)
    g("kvmon_model_weight_read_bytes_per_token", "Weight bytes read per generated token (MoE: the active part).",
      L, lv, m.weight_bytes_read_per_token)
    g("kvmon_kv_cache_bytes_per_token", "KV cache bytes per position of context, all layers, K and V.", L, lv,
      m.kv_bytes_per_token)
    g("kvmon_kv_cache_allocated_bytes", "KV cache reserved at load (capacity).", L, lv, s.kv_allocated_bytes)
    g("kvmon_kv_cache_in_use_bytes", "KV cache holding positions now in context.", L, lv, s.kv_in_use_bytes)
    g("kvmon_read_bytes_per_token", "Bytes read from memory per generated token (weights plus KV in use).", L, lv,
      s.bytes_read_per_token)
    g("kvmon_achieved_bandwidth_bytes_per_second", "Memory bandwidth the measured decode speed implies.", L, lv,
      s.achieved_bandwidth_bytes_per_s)
    g("kvmon_peak_bandwidth_bytes_per_second", "Peak memory bandwidth of the devices holding the model.", L, lv,
      s.peak_bandwidth_bytes_per_s)
    if m.name is not None or m.arch is not None:
        f.gauge("kvmon_model_info", "The loaded model (value always 1).",
                (*L, "arch", "quantization", "kv_type_k", "kv_type_v", "server_version"),
                (*lv, m.arch or "", m.quantization or "", m.kv_type_k or "", m.kv_type_v or "", s.server_version or ""),
                1)
    for sl in s.slots:
        sv = (*lv, str(sl.id))
        SL = (*L, "slot")
        g("kvmon_slot_context_tokens", "Positions in context of one slot.", SL, sv, sl.context_tokens)
        g("kvmon_slot_context_limit_tokens", "Context size of one slot.", SL, sv, sl.n_ctx)
        g("kvmon_slot_processing", "1 while the slot is processing a request, else 0.", SL, sv, int(sl.processing))
        g("kvmon_slot_decode_tokens_per_second", "Measured decode speed of one slot.", SL, sv, sl.decode_tok_s)
    fc = s.forecast
    g("kvmon_forecast_context_full_tokens", "Tokens until the context is full.", L, lv, fc.tokens_until_ctx_full)
    g("kvmon_forecast_context_full_seconds", "Seconds until the context is full at the current pace.", L, lv,
      fc.seconds_until_ctx_full)
    g("kvmon_forecast_vram_full_tokens", "Tokens until VRAM runs out (when something else is eating it).", L, lv,
      fc.tokens_until_vram_full)
    g("kvmon_forecast_vram_full_seconds", "Seconds until VRAM runs out at the current pace.", L, lv,
      fc.seconds_until_vram_full)
    seen: set[int] = set()
    for ms in fc.milestones:
        if ms.context_tokens in seen:  # one sample per label set
            continue
        seen.add(ms.context_tokens)
        mv = (*lv, str(ms.context_tokens))
        ML = (*L, "context")
        g("kvmon_forecast_decode_tokens_per_second", "Forecast decode speed at a context depth (fit to measurements).",
          ML, mv, ms.tok_s)
        g("kvmon_forecast_decode_low_tokens_per_second", "Low end of the forecast decode speed at a context depth.",
          ML, mv, ms.low_tok_s)
        g("kvmon_forecast_decode_high_tokens_per_second", "High end of the forecast decode speed at a context depth.",
          ML, mv, ms.high_tok_s)
        g("kvmon_forecast_ceiling_tokens_per_second", "Bandwidth ceiling at a context depth.", ML, mv,
          ms.ceiling_tok_s)


def _gpu_metrics(f: _Families, gv: GpuView) -> None:
    """One GPU's readings (these stay valid while the model server is down)."""
    lv = (str(gv.index), gv.name or "")
    g = f.gauge
    L = GPU_LABELS
    busy = gv.memory_busy_percent
    g("kvmon_gpu_vram_total_bytes", "GPU memory in total.", L, lv, gv.vram_total_bytes)
    g("kvmon_gpu_vram_used_bytes", "GPU memory in use (all processes).", L, lv, gv.vram_used_bytes)
    g("kvmon_gpu_vram_free_bytes", "GPU memory free.", L, lv, gv.vram_free_bytes)
    g("kvmon_gpu_weights_bytes", "Model weights held on this GPU.", L, lv, gv.weights_bytes)
    g("kvmon_gpu_kv_cache_allocated_bytes", "KV cache reserved on this GPU.", L, lv, gv.kv_allocated_bytes)
    g("kvmon_gpu_kv_cache_in_use_bytes", "KV cache in use on this GPU.", L, lv, gv.kv_in_use_bytes)
    g("kvmon_gpu_other_processes_bytes", "GPU memory used by processes other than the model server.", L, lv,
      gv.other_processes_bytes)
    g("kvmon_gpu_peak_bandwidth_bytes_per_second", "Peak memory bandwidth of this GPU.", L, lv,
      gv.peak_bandwidth_bytes_per_s)
    g("kvmon_gpu_achieved_bandwidth_bytes_per_second", "Memory bandwidth this GPU reaches in decode.", L, lv,
      gv.achieved_bandwidth_bytes_per_s)
    g("kvmon_gpu_memory_busy_ratio", "Fraction of time the GPU memory was busy.", L, lv,
      None if busy is None else busy / 100.0)
    g("kvmon_gpu_busy_ratio", "Fraction of time the GPU was busy.", L, lv,
      None if gv.gpu_busy_percent is None else gv.gpu_busy_percent / 100.0)
    g("kvmon_gpu_pcie_rx_bytes_per_second", "PCIe traffic into the GPU.", L, lv, gv.pcie_rx_bytes_per_s)
    g("kvmon_gpu_pcie_tx_bytes_per_second", "PCIe traffic out of the GPU.", L, lv, gv.pcie_tx_bytes_per_s)
    g("kvmon_gpu_pcie_bandwidth_bytes_per_second", "PCIe link bandwidth of the GPU.", L, lv,
      gv.pcie_bandwidth_bytes_per_s)
    g("kvmon_gpu_power_watts", "GPU power draw.", L, lv, gv.power_w)
    g("kvmon_gpu_temperature_celsius", "GPU temperature.", L, lv, gv.temperature_c)


def snapshot_families(snapshot: Snapshot | None, backend: str | None = None) -> list[Metric]:
    """The metric families for one Snapshot (None: not polled yet). Pure: no I/O, no clock.

    When the server was not read, only ``kvmon_up`` 0, GPU, host and alert series are given: no stale speed.
    """
    f = _Families()
    f.gauge("kvmon_build_info", "kvmon's version (value always 1).", ("version",), (__version__,), 1)
    s = snapshot
    status = s.connection.status.value if s is not None else ConnectionStatus.CONNECTING.value
    up = is_up(s)
    be = (s.backend if s is not None else None) or backend or ""
    f.gauge("kvmon_up", "1 when the model server was read at the last poll, else 0; status says why.",
            ("backend", "status"), (be, status), 1 if up else 0)
    if s is None:
        return f.all()
    f.gauge("kvmon_last_poll_timestamp_seconds", "Wall-clock time of the last poll (Unix seconds).", (), (),
            s.t_wall)
    if up:
        _server_metrics(f, s, (be, s.model.name or ""))
    for gv in s.gpus:
        _gpu_metrics(f, gv)
    h = s.host
    f.gauge("kvmon_host_ram_total_bytes", "Host RAM in total.", (), (), h.ram_total_bytes)
    f.gauge("kvmon_host_ram_available_bytes", "Host RAM available.", (), (), h.ram_available_bytes)
    f.gauge("kvmon_host_weights_bytes", "Model weights in host RAM (partial offload).", (), (),
            h.weights_in_host_bytes)
    f.gauge("kvmon_host_kv_cache_bytes", "KV cache in host RAM (spilled).", (), (), h.kv_in_host_bytes)
    f.gauge("kvmon_host_bandwidth_bytes_per_second", "Host memory bandwidth used for layers in RAM.", (), (),
            h.host_bandwidth_bytes_per_s)
    f.gauge("kvmon_server_rss_bytes", "Resident memory of the model server's processes.", (), (),
            h.server_rss_bytes)
    counts: dict[tuple[str, str], int] = {}
    for a in s.alerts:
        key = (a.level.value, a.code)
        counts[key] = counts.get(key, 0) + 1
    for (level, code), n in sorted(counts.items()):
        f.gauge("kvmon_alerts_active", "Active alerts by level and code (how many).", ("level", "code"),
                (level, code), n)
    return f.all()


# --------------------------------------------------------------------------- the exporter


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr for every scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _MetricsServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _MetricsServer6(_MetricsServer):
    address_family = socket.AF_INET6


@dataclass(frozen=True)
class PollState:
    """What the poll thread last produced: the Snapshot, how many polls so far, how long the last took."""

    snapshot: Snapshot | None = None
    polls: int = 0
    errors: int = 0
    last_poll_duration_s: float | None = None


class SnapshotCollector(Collector):
    """A prometheus_client collector that renders the latest Snapshot; it never polls the server itself."""

    def __init__(self, state: Callable[[], PollState], backend: Callable[[], str | None] = lambda: None) -> None:
        self._state = state
        self._backend = backend

    def collect(self) -> Iterator[Metric]:
        st = self._state()  # one reference: a poll finishing mid-scrape cannot mix two Snapshots
        yield from snapshot_families(st.snapshot, self._backend())
        f = _Families()
        f.counter("kvmon_exporter_polls", "Polls of the model server since the exporter started.", st.polls)
        f.counter("kvmon_exporter_poll_errors", "Polls that failed inside kvmon (a bug, not the server).",
                  st.errors)
        f.gauge("kvmon_exporter_poll_duration_seconds", "How long the last poll took.", (), (),
                st.last_poll_duration_s)
        yield from f.all()


class Exporter:
    """Polls a Monitor on a thread and serves the latest Snapshot at ``/metrics`` (prometheus_client)."""

    def __init__(self, monitor: Any = None, *, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``monitor``: anything with ``poll() -> Snapshot`` and ``close()`` (kvmon.monitor.Monitor)."""
        self.monitor = monitor
        self.interval_s = interval_s
        self._clock = clock
        self._state = PollState()
        self._stop = threading.Event()
        self._poll_thread: threading.Thread | None = None
        self._httpd: Any = None
        self._http_thread: threading.Thread | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(lambda: self._state,
                                                 lambda: getattr(self.monitor, "backend", None)))

    @property
    def state(self) -> PollState:
        return self._state

    @property
    def latest(self) -> Snapshot | None:
        """The Snapshot the next scrape will show."""
        return self._state.snapshot

    def listen(self, host: str = "127.0.0.1", port: int = 9464) -> tuple[str, int]:
        """Bind and serve ``/metrics`` on a daemon thread; returns the bound (host, port). Raises OSError."""
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = _MetricsServer6 if family == socket.AF_INET6 else _MetricsServer
        httpd = make_server(host, port, make_wsgi_app(self.registry), server_class, _QuietHandler)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                  name="kvmon-serve-http", daemon=True)
        thread.start()
        self._httpd, self._http_thread = httpd, thread
        addr = httpd.server_address
        return str(addr[0]), int(addr[1])

    @property
    def metrics_url(self) -> str | None:
        """``http://HOST:PORT/metrics`` once listening."""
        if self._httpd is None:
            return None
        host, port = self._httpd.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else str(host)
        return f"http://{shown}:{port}/metrics"

    def poll_once(self) -> Snapshot:
        """Poll the Monitor once and make the result the one scrapes show. A kvmon bug becomes a failed state."""
        t0 = self._clock()
        errors = self._state.errors
        try:
            snap: Snapshot = self.monitor.poll()
        except Exception as exc:  # Monitor.poll handles source trouble; this is a bug, reported, not fatal
            errors += 1
            prev = self._state.snapshot
            snap = failure_snapshot(failure_of(exc, FailureKind.UNEXPECTED_BODY, "poll failed"),
                                    seq=(prev.seq + 1) if prev else 0, t_monotonic=self._clock(), t_wall=time.time(),
                                    last=prev)
        self._state = PollState(snap, self._state.polls + 1, errors, max(0.0, self._clock() - t0))
        return snap

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = self._clock()
            self.poll_once()
            self._stop.wait(max(0.0, self.interval_s - (self._clock() - t0)))

    def start_polling(self) -> None:
        """Start the poll thread (the first poll is at once)."""
        if self._poll_thread is not None:
            return
        self._poll_thread = threading.Thread(target=self._loop, name="kvmon-serve-poll", daemon=True)
        self._poll_thread.start()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until stop() is called (or the timeout passes); True when stopped."""
        return self._stop.wait(timeout_s)

    def request_stop(self) -> None:
        """Ask the poll thread and wait() to end (safe from a signal handler)."""
        self._stop.set()

    def stop(self) -> None:
        """Stop polling and serving; the Monitor is the caller's to close."""
        self._stop.set()
        if self._poll_thread is not None:
            self._poll_thread.join(timeout=max(5.0, self.interval_s))
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            if self._http_thread is not None:
                self._http_thread.join(timeout=2)
            self._httpd = None

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _fail(reason: str, err: TextIO) -> int:
    print(f"kvmon: {reason.splitlines()[0] if reason else 'cannot serve'}", file=err)
    return EXIT_BAD


def run(args: argparse.Namespace, err: TextIO | None = None, stop: threading.Event | None = None,
        on_ready: Callable[[Exporter], None] | None = None) -> int:
    """Serve until SIGINT/SIGTERM (or ``stop`` is set); exit 2 with a one-line reason for a bad address or URL.

    ``stop`` and ``on_ready`` let a caller run this on a thread and learn the bound address.
    """
    err = err or sys.stderr
    try:
        host, port = parse_listen(getattr(args, "listen", None))
        interval_s = interval_from_env()
    except ValueError as e:
        return _fail(str(e), err)
    exporter = Exporter(interval_s=interval_s)
    try:
        exporter.listen(host, port)  # bind first: a taken port fails before the server is contacted
    except (OSError, OverflowError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        return _fail(f"cannot listen on {host}:{port}: {reason}", err)
    from kvmon.session import open_monitor

    api_key = getattr(args, "api_key", None) or os.environ.get("KVMON_API_KEY") or None
    try:
        monitor = open_monitor(getattr(args, "url", None), api_key=api_key,
                               timeout_s=float(getattr(args, "timeout", 3.0) or 3.0),
                               log_path=getattr(args, "log", None))
    except SourceError as e:
        exporter.stop()
        return _fail(e.failure.reason, err)
    exporter.monitor = monitor
    exporter.start_polling()
    print(f"kvmon: exporting {monitor.display_url or 'the server'} every {interval_s:g} s at "
          f"{exporter.metrics_url}", file=err, flush=True)
    if stop is not None:
        threading.Thread(target=lambda: (stop.wait(), exporter.request_stop()), daemon=True).start()
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, lambda *_: exporter.request_stop())
    try:
        if on_ready is not None:
            on_ready(exporter)
        while not exporter.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        exporter.stop()
        monitor.close()
    return EXIT_OK
