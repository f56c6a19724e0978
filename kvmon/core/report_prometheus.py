"""The Snapshot as Prometheus metric families: what ``kvmon serve`` exposes at ``/metrics`` (docs/exporter.md).

The Prometheus counterpart of ``kvmon.core.report_json`` (``once --json``): pure, no I/O, no clock. Unknown values
(None, NaN) are left out (an absent series), never exported as 0; a poll that did not read the server exports no
server number at all, only ``kvmon_up`` 0, the GPUs, the host and the alerts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from kvmon import __version__
from kvmon.core.analysis.latency import ITL_BUCKETS_S, TTFT_BUCKETS_S
from kvmon.core.fields import PROMETHEUS_FIELDS
from kvmon.core.sanitize import plain_text
from kvmon.core.snapshot import ConnectionStatus, GpuView, HostView, Snapshot

SERVER_LABELS = ("server", "backend", "model")
GPU_LABELS = ("gpu", "gpu_name")
SERVER_GPU_LABELS = ("server", "gpu", "gpu_name")  # one server's share of one GPU
# Per-slot series for at most this many slots (the lowest ids): a server reporting 10,000 slots made every scrape
# 40,001 series and 5.5 MB. Every aggregate (kvmon_slots, the context, the speeds) counts all of them.
MAX_SLOT_SERIES = 64
CAUSE_HELP = ("Estimated share of the gap between measured decode speed and the memory-bus ceiling that one cause "
              "explains (cause: memory_clock, pcie_link, other_processes, cpu_contended, slower_than_before, "
              "drafting, unexplained).")
DEVICE_INFO_LABELS = ("kind", "vendor", "source", "log_name", "bandwidth_source", "working_set_source", "vendor_index",
                      "pci_bus_id", "memory_type")


def _num(value: Any) -> float | None:
    """A finite float, or None for unknown (None, NaN, inf, non-numbers)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class Families:
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
        fam.add_metric([plain_text(x) if isinstance(x, str) else x for x in values], v)  # type: ignore[attr-defined]  # a gauge

    def labelled(self, labels: Sequence[str], values: Sequence[str]) -> Callable[[str, str, Any], None]:
        """``gauge`` with these labels and their values given: it takes the name, the help and the value."""
        return lambda name, doc, value: self.gauge(name, doc, labels, values, value)

    def counter(self, name: str, doc: str, value: float) -> None:
        """A label-less counter (exported as ``name_total``)."""
        fam = CounterMetricFamily(name, doc, labels=[])
        fam.add_metric([], value)
        self._by_name[name] = fam

    def histogram(self, name: str, doc: str, labels: Sequence[str], values: Sequence[str], bounds: Sequence[float],
                  cumulative: Sequence[int], sum_value: float) -> None:
        """One labelled histogram: cumulative counts at ``bounds`` then +Inf (the count), and the sum."""
        if len(cumulative) != len(bounds) + 1:
            return
        fam = self._by_name.get(name)
        if fam is None:
            fam = HistogramMetricFamily(name, doc, labels=list(labels))
            self._by_name[name] = fam
        buckets = [(f"{b:g}", c) for b, c in zip(bounds, cumulative[:-1], strict=True)] + [("+Inf", cumulative[-1])]
        fam.add_metric([plain_text(x) for x in values], buckets, sum_value)  # type: ignore[attr-defined]  # a histogram

    def all(self) -> list[Metric]:
        return list(self._by_name.values())


def _server_metrics(f: Families, s: Snapshot, lv: tuple[str, str, str]) -> None:
    """The server's readings and kvmon's numbers derived from them; only called when the server was read."""
    m = s.model
    L = SERVER_LABELS
    g = f.labelled(L, lv)
    for fd in PROMETHEUS_FIELDS:  # the readings, as described once (kvmon.core.fields)
        g(str(fd.prometheus), fd.help, fd.get(s))
    if s.ceiling_tok_s is not None:
        suspect = s.ceiling_suspect
        f.gauge("kvmon_ceiling_uncertain", "1 when the measured speed exceeds the ceiling, so one of its inputs "
                "(suspect) is wrong; else 0.", (*L, "suspect"), (*lv, suspect.input if suspect else ""),
                1 if suspect else 0)
    if m.name is not None or m.arch is not None:
        f.gauge("kvmon_model_info", "The loaded model (value always 1).",
                (*L, "arch", "quantization", "kv_type_k", "kv_type_v", "server_version"),
                (*lv, m.arch or "", m.quantization or "", m.kv_type_k or "", m.kv_type_v or "", s.server_version or ""),
                1)
    for sl in sorted(s.slots, key=lambda sl: sl.id)[:MAX_SLOT_SERIES]:  # the aggregates above cover every slot
        gs = f.labelled((*L, "slot"), (*lv, str(sl.id)))
        gs("kvmon_slot_context_tokens", "Positions in context of one slot.", sl.context_tokens)
        gs("kvmon_slot_context_limit_tokens", "Context size of one slot.", sl.n_ctx)
        gs("kvmon_slot_processing", "1 while the slot is processing a request, else 0.", int(sl.processing))
        gs("kvmon_slot_decode_tokens_per_second", "Measured decode speed of one slot.", sl.decode_tok_s)
    if s.speculative is not None:
        for pos, rate in enumerate(s.speculative.acceptance_by_position):
            f.gauge("kvmon_speculative_acceptance_by_position_ratio", "Speculative decoding: drafts whose token at "
                    "this position (0: the first drafted) the target accepted, as a share of all drafts, since the "
                    "server started.", (*L, "position"), (*lv, str(pos)), rate)
    for c in s.slowdown_causes:
        f.gauge("kvmon_slowdown_cause_share_ratio", CAUSE_HELP, (*L, "cause"), (*lv, c.code), c.share)
    if (v := s.prompt_cache) is not None:
        g("kvmon_prompt_reread_tokens", "Prompt tokens the server read (computed) this session, cached ones left out.",
          v.reread_tokens)
        g("kvmon_prompt_reused_tokens", "Prompt tokens the server reused from its prompt cache this session.",
          v.reused_tokens)
        g("kvmon_prompt_reread_seconds", "Seconds the server spent reading prompts this session.", v.reread_s)
        g("kvmon_prompt_cache_misses", "Replies whose long prompt the server read again whole this session.", v.misses)
        g("kvmon_next_reply_first_token_seconds", "Predicted time to first token of the next turn at this depth.",
          v.next_ttft_s)
    lat = s.latency
    if lat is not None:
        f.histogram("kvmon_time_to_first_token_seconds", "Time to first token of the session's replies, as the "
                    "server timed their prefill.", L, lv, TTFT_BUCKETS_S, lat.ttft_buckets, lat.ttft_sum_s)
        f.histogram("kvmon_inter_token_latency_seconds", "Inter-token latency of the session's replies (each "
                    "reply's seconds per token).", L, lv, ITL_BUCKETS_S, lat.itl_buckets, lat.itl_sum_s)
    fc = s.forecast
    g("kvmon_forecast_context_full_tokens", "Tokens until the context is full.", fc.tokens_until_ctx_full)
    g("kvmon_forecast_context_full_seconds", "Seconds until the context is full at the current pace.",
      fc.seconds_until_ctx_full)
    g("kvmon_forecast_vram_full_tokens", "Tokens until VRAM runs out (when something else is eating it).",
      fc.tokens_until_vram_full)
    g("kvmon_forecast_vram_full_seconds", "Seconds until VRAM runs out at the current pace.",
      fc.seconds_until_vram_full)
    r = fc.regime
    if r.index:
        f.gauge("kvmon_forecast_regime_info", "The current regime (what the speed depends on stayed the same since it "
                "began) and the form of the forecast fitted on it (value always 1).", (*L, "regime", "cause", "form"),
                (*lv, str(r.index), r.cause or "", fc.fit_form or ""), 1)
        g("kvmon_forecast_regime_start_timestamp_seconds", "When the current regime began (Unix seconds).",
          r.since_t_wall)
        g("kvmon_forecast_regime_start_context_tokens", "Context depth of the current regime's first measured point.",
          r.since_context_tokens)
    g("kvmon_forecast_fit_points", "Measured points of the current regime the forecast is fitted on.", fc.fit_points)
    g("kvmon_forecast_fit_efficiency_ratio", "Fraction of the peak bandwidth the forecast's fit reads the bytes at.",
      fc.fit_efficiency)
    g("kvmon_forecast_fit_overhead_seconds", "The fit's fixed seconds per token beyond the bytes it reads.",
      fc.fit_overhead_s)
    seen: set[int] = set()
    for ms in fc.milestones:
        if ms.context_tokens in seen:  # one sample per label set
            continue
        seen.add(ms.context_tokens)
        gm = f.labelled((*L, "context"), (*lv, str(ms.context_tokens)))
        gm("kvmon_forecast_decode_tokens_per_second", "Forecast decode speed at a context depth (fit to measurements).",
           ms.tok_s)
        gm("kvmon_forecast_decode_low_tokens_per_second", "Low end of the forecast decode speed at a context depth.",
           ms.low_tok_s)
        gm("kvmon_forecast_decode_high_tokens_per_second", "High end of the forecast decode speed at a context depth.",
           ms.high_tok_s)
        gm("kvmon_forecast_ceiling_tokens_per_second", "Bandwidth ceiling at a context depth.", ms.ceiling_tok_s)


def _gpu_metrics(f: Families, gv: GpuView) -> None:
    """One GPU's own readings, once per device (these stay valid while a model server is down)."""
    L, lv = GPU_LABELS, (str(gv.index), gv.name or "")
    g = f.labelled(L, lv)
    busy = gv.memory_busy_percent
    g("kvmon_gpu_vram_total_bytes", "GPU memory in total.", gv.vram_total_bytes)
    g("kvmon_gpu_vram_used_bytes", "GPU memory in use (all processes).", gv.vram_used_bytes)
    g("kvmon_gpu_vram_free_bytes", "GPU memory free.", gv.vram_free_bytes)
    g("kvmon_gpu_peak_bandwidth_bytes_per_second", "Peak memory bandwidth of this GPU.", gv.peak_bandwidth_bytes_per_s)
    g("kvmon_gpu_memory_busy_ratio", "Fraction of time the GPU memory was busy.",
      None if busy is None else busy / 100.0)
    g("kvmon_gpu_busy_ratio", "Fraction of time the GPU was busy.",
      None if gv.gpu_busy_percent is None else gv.gpu_busy_percent / 100.0)
    g("kvmon_gpu_pcie_rx_bytes_per_second", "PCIe traffic into the GPU.", gv.pcie_rx_bytes_per_s)
    g("kvmon_gpu_pcie_tx_bytes_per_second", "PCIe traffic out of the GPU.", gv.pcie_tx_bytes_per_s)
    g("kvmon_gpu_pcie_bandwidth_bytes_per_second", "PCIe link bandwidth of the GPU.", gv.pcie_bandwidth_bytes_per_s)
    g("kvmon_gpu_power_watts", "GPU power draw.", gv.power_w)
    g("kvmon_gpu_temperature_celsius", "GPU temperature.", gv.temperature_c)
    g("kvmon_gpu_working_set_limit_bytes", "Unified memory: what the GPU may wire (Metal's working set).",
      gv.working_set_limit_bytes)
    g("kvmon_gpu_spill_used_bytes", "AMD GTT (system RAM the GPU maps) or Apple's compressed memory in use.",
      gv.spill_used_bytes)
    g("kvmon_gpu_spill_total_bytes", "AMD GTT: the system RAM the GPU may map.", gv.spill_total_bytes)
    f.gauge("kvmon_device_info", "A memory device: its kind, vendor, the source that read it, the server's name for "
            "it, where its bandwidth and working-set limit come from, its place among its vendor's, its PCI bus id, "
            "its memory type (value always 1).", (*L, *DEVICE_INFO_LABELS),
            (*lv, gv.kind, gv.vendor or "", gv.source or "", gv.log_name or "", gv.bandwidth_source or "",
             gv.working_set_source or "", "" if gv.vendor_index is None else str(gv.vendor_index),
             gv.pci_bus_id or "", gv.memory_type or ""), 1)


def _server_gpu_metrics(f: Families, server: str, gv: GpuView) -> None:
    """One server's share of one GPU: its weights, KV cache and processes there, the bandwidth its decode reaches."""
    g = f.labelled(SERVER_GPU_LABELS, (server, str(gv.index), gv.name or ""))
    g("kvmon_gpu_weights_bytes", "Model weights held on this GPU.", gv.weights_bytes)
    g("kvmon_gpu_kv_cache_allocated_bytes", "KV cache reserved on this GPU.", gv.kv_allocated_bytes)
    g("kvmon_gpu_kv_cache_in_use_bytes", "KV cache in use on this GPU.", gv.kv_in_use_bytes)
    g("kvmon_gpu_draft_bytes", "Speculative decoding's draft model on this GPU: its weights and its KV cache.",
      gv.draft_bytes)
    g("kvmon_gpu_other_processes_bytes", "GPU memory used by processes other than the model server.",
      gv.other_processes_bytes)
    g("kvmon_gpu_server_bytes", "GPU memory used by the model server's processes.", gv.server_used_bytes)
    g("kvmon_gpu_achieved_bandwidth_bytes_per_second", "Memory bandwidth this GPU reaches in decode.",
      gv.achieved_bandwidth_bytes_per_s)


@dataclass(frozen=True)
class Watched:
    """One watched server as the exporter shows it: its name (the URL, no credentials), its last Snapshot (None:
    not polled yet) and its backend when no Snapshot says."""

    server: str
    snapshot: Snapshot | None
    backend: str | None = None


@dataclass(frozen=True)
class Devices:
    """This machine's GPUs and host RAM, read apart from any server (``kvmon serve`` watching remote servers)."""

    gpus: tuple[GpuView, ...] = ()
    host: HostView | None = None


def _host_metrics(f: Families, h: HostView) -> None:
    """The host's own readings, once (RAM, swap, its CPU and memory, where its bandwidth comes from)."""
    f.gauge("kvmon_host_ram_total_bytes", "Host RAM in total.", (), (), h.ram_total_bytes)
    f.gauge("kvmon_host_ram_available_bytes", "Host RAM available.", (), (), h.ram_available_bytes)
    f.gauge("kvmon_host_swap_used_bytes", "Host swap in use.", (), (), h.swap_used_bytes)
    f.gauge("kvmon_host_swap_total_bytes", "Host swap in total.", (), (), h.swap_total_bytes)
    f.gauge("kvmon_host_bandwidth_measured_timestamp_seconds", "When the host bandwidth probe ran (Unix seconds).",
            (), (), h.host_bandwidth_measured_at_unix_s)
    if h.cpu_name or h.memory_type:
        f.gauge("kvmon_host_info", "The host's CPU and the memory it reports (value always 1).",
                ("cpu_name", "memory_type"), (h.cpu_name or "", h.memory_type or ""), 1)
    if h.host_bandwidth_source:
        f.gauge("kvmon_host_bandwidth_info", "Where the host bandwidth comes from (value always 1).", ("source",),
                (h.host_bandwidth_source,), 1)


def snapshot_families(snapshot: Snapshot | None, backend: str | None = None, server: str | None = None) -> list[Metric]:
    """The metric families for one Snapshot (None: not polled yet). Pure: no I/O, no clock.

    When the server was not read, only ``kvmon_up`` 0, GPU, host and alert series are given: no stale speed.
    """
    name = server if server is not None else (snapshot.url if snapshot is not None else "") or ""
    return fleet_families([Watched(name, snapshot, backend)])


def fleet_families(watched: Sequence[Watched], devices: Devices | None = None) -> list[Metric]:
    """The metric families of every watched server, each labelled ``server``, and of the devices once each.

    The GPUs and host RAM come from ``devices`` when given (this machine, read on its own), else from the servers'
    Snapshots (the first to show a GPU index gives its readings); each server's share of a GPU is its own series.
    """
    f = Families()
    f.gauge("kvmon_build_info", "kvmon's version (value always 1).", ("version",), (__version__,), 1)
    device_gpus: dict[int, GpuView] = {g.index: g for g in devices.gpus} if devices is not None else {}
    host = devices.host if devices is not None else None
    for w in watched:
        s = w.snapshot
        status = s.connection.status.value if s is not None else ConnectionStatus.CONNECTING.value
        up = s is not None and s.server_read
        be = (s.backend if s is not None else None) or w.backend or ""
        f.gauge("kvmon_up", "1 when the model server was read at the last poll, else 0; status says why.",
                ("server", "backend", "status"), (w.server, be, status), 1 if up else 0)
        if s is None:
            continue
        if s.verdict is not None:
            f.gauge("kvmon_verdict_level", "How the session stands, as the headline says it: 0 ok, 1 info, 2 warning, "
                    "3 critical (the worst active condition; cause: what it rests on).", ("server", "cause"),
                    (w.server, s.verdict.cause), s.verdict.level.rank)
        f.gauge("kvmon_last_poll_timestamp_seconds", "Wall-clock time of the last poll (Unix seconds).",
                ("server",), (w.server,), s.t_wall)
        if up:
            _server_metrics(f, s, (w.server, be, s.model.name or ""))
        for gv in s.gpus:
            if devices is None:
                device_gpus.setdefault(gv.index, gv)
            _server_gpu_metrics(f, w.server, gv)
        h = s.host
        if devices is None and host is None:
            host = h
        g = f.labelled(("server",), (w.server,))
        g("kvmon_host_weights_bytes", "Model weights in host RAM (partial offload).", h.weights_in_host_bytes)
        g("kvmon_host_kv_cache_bytes", "KV cache in host RAM (spilled).", h.kv_in_host_bytes)
        g("kvmon_host_draft_bytes", "Speculative decoding's draft model in host RAM: its weights and its KV cache.",
          h.draft_in_host_bytes)
        g("kvmon_host_bandwidth_bytes_per_second", "Host memory bandwidth used for layers in RAM.",
          h.host_bandwidth_bytes_per_s)
        g("kvmon_server_rss_bytes", "Resident memory of the model server's processes.", h.server_rss_bytes)
        g("kvmon_host_achieved_bandwidth_bytes_per_second", "What decode reads from host RAM per second (CPU layers, "
          "KV in RAM).", h.achieved_bandwidth_bytes_per_s)
        g("kvmon_host_in_ceiling", "1 when decode reads weights or KV from host RAM (a ceiling device).",
          int(h.in_ceiling) if up else None)
        for (level, code), n in sorted(Counter((a.level.value, a.code) for a in s.alerts).items()):
            f.gauge("kvmon_alerts_active", "Active alerts by level and code (how many).", ("server", "level", "code"),
                    (w.server, level, code), n)
    for gv in device_gpus.values():
        _gpu_metrics(f, gv)
    if host is not None:
        _host_metrics(f, host)
    return f.all()
