"""Readings + physics → one Snapshot per poll: speeds, ceiling, KV and VRAM split, forecasts, alerts.

``Analyzer`` is the only stateful step between sources and the screen: it keeps the counter rates, the
session's (context, decode tok/s) points for the forecast fit, the free-VRAM trend and the alert state.
It does no I/O; every number it adds says where it came from (``provenance``) or why it is unknown
(``reasons``).
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kvmon.core.alerts import AlertEngine, AlertFacts, AlertThresholds, CacheAdvice, GpuVramFacts
from kvmon.core.readings import (
    FailureKind,
    GpuReading,
    GpuSetReading,
    HostReading,
    ServerConfig,
    ServerReading,
    SourceFailure,
)
from kvmon.core.snapshot import (
    Connection,
    ConnectionStatus,
    Forecast,
    GpuView,
    HostView,
    Milestone,
    ModelView,
    SlotView,
    Snapshot,
)
from kvmon.physics import advice as advice_mod
from kvmon.physics import ceiling as ceiling_mod
from kvmon.physics import forecast as forecast_mod
from kvmon.physics import kv as kv_mod
from kvmon.physics import weights as weights_mod
from kvmon.physics.shape import ModelShape

MILESTONES = (8192, 16384, 32768, 65536, 131072, 262144)
NO_GPU_BANDWIDTH = "no GPU bandwidth known (set one in settings)"
NO_HOST_BANDWIDTH = "host memory bandwidth unknown (set one in settings)"

_FAILURE_STATUS: dict[FailureKind, ConnectionStatus] = {
    FailureKind.BAD_URL: ConnectionStatus.BAD_URL,
    FailureKind.UNREACHABLE: ConnectionStatus.UNREACHABLE,
    FailureKind.TIMEOUT: ConnectionStatus.TIMEOUT,
    FailureKind.AUTH_REJECTED: ConnectionStatus.AUTH_REJECTED,
    FailureKind.MODEL_LOADING: ConnectionStatus.LOADING,
    FailureKind.ENDPOINT_DISABLED: ConnectionStatus.BAD_RESPONSE,
    FailureKind.UNEXPECTED_BODY: ConnectionStatus.BAD_RESPONSE,
    FailureKind.NOT_FOUND: ConnectionStatus.BAD_RESPONSE,
    FailureKind.SERVER_ERROR: ConnectionStatus.BAD_RESPONSE,
}
_GPU_DEVICE = re.compile(r"^(?:CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN|Metal|OpenCL)(\d*)$", re.IGNORECASE)


def connection_status_for(failure: SourceFailure) -> ConnectionStatus:
    """The dashboard's connection state for a typed source failure."""
    return _FAILURE_STATUS.get(failure.kind, ConnectionStatus.BAD_RESPONSE)


def device_gpu_index(device: str) -> int | None:
    """llama.cpp buffer device name → GPU index ("CUDA1" → 1, "Metal" → 0); host buffers → None."""
    m = _GPU_DEVICE.match(device.strip())
    if not m:
        return None
    return int(m.group(1)) if m.group(1) else 0


@dataclass
class _VramTrack:
    """One GPU's free VRAM (and other processes' use) over the trend window, as parallel columns."""

    t: deque[float] = field(default_factory=deque)
    free: deque[float] = field(default_factory=deque)
    others: deque[float | None] = field(default_factory=deque)
    changed_at: float | None = None  # when free VRAM last differed from the sample before (all later ones equal)


@dataclass(frozen=True)
class AnalyzerSettings:
    """What the user can set: thresholds, bandwidths the hardware cannot report, forecast milestones."""

    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    gpu_bandwidth_bytes_per_s: Mapping[int, float] = field(default_factory=dict)  # by GPU index, user-set
    host_bandwidth_bytes_per_s: float | None = None  # user-set host RAM bandwidth
    milestones: tuple[int, ...] = MILESTONES
    curve_points: int = 48
    max_fit_points: int = 4096
    advice_types: tuple[str, ...] = ("q8_0",)  # q4_0 costs quality: not suggested unasked


@dataclass
class _Placement:
    """Where the model lives: resident weights and KV per GPU and in host RAM, and how it is known."""

    weights_gpu: dict[int, float] = field(default_factory=dict)
    weights_host: float = 0.0
    kv_gpu: dict[int, float] = field(default_factory=dict)  # fractions of the KV cache
    kv_host: float = 0.0
    kv_pcie: dict[int, float] = field(default_factory=dict)  # spilled over PCIe (driver fallback), estimate
    host_weights_read: bool = True  # False when the host buffer only holds the token embeddings
    kv_follows_layers: bool = False  # KV split inferred from the weights (no KV buffer lines)

    @property
    def weights_host_read(self) -> float:
        """Host-resident weights that each token reads (not an embedding table looked up one row at a time)."""
        return self.weights_host if self.host_weights_read else 0.0
    source: str = "unknown"  # "log" | "ollama" | "process" | "single_gpu" | "even" | "host_only"
    note: str | None = None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _cache_bytes(model: ModelView) -> int | None:
    """What the model's caches hold in memory (VRAM split, spill, host share): the KV cache plus a hybrid's
    recurrent state, which llama.cpp keeps beside it on the same devices."""
    if model.kv_allocated_bytes is None:
        return None
    return model.kv_allocated_bytes + (model.recurrent_state_bytes or 0)


class Analyzer:
    """Turns each poll's readings into a Snapshot; keep one per monitored server."""

    def __init__(self, settings: AnalyzerSettings | None = None, *, rate_tracker: Any = None,
                 alert_engine: AlertEngine | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or AnalyzerSettings()
        self._clock = clock  # for failures that come with no reading to take a time from
        self._rates = rate_tracker
        self._rates_reason: str | None = None
        if self._rates is None:
            try:
                from kvmon.core.rates import SlotRateTracker

                self._rates = SlotRateTracker()
            except ImportError:
                self._rates_reason = "rate tracker not available in this build"
        self.alerts = alert_engine or AlertEngine(self.settings.thresholds)
        self._seq = 0
        self._model_key: tuple[Any, ...] | None = None
        self._fit_points: deque[tuple[float, float]] = deque(maxlen=self.settings.max_fit_points)
        self._efficiencies: deque[float] = deque(maxlen=600)
        self._fit: Any = None
        self._fit_dirty = False
        self._vram: dict[int, _VramTrack] = {}
        self._curve_cache: tuple[Any, tuple[tuple[int, float], ...]] | None = None
        self._last_ok: Snapshot | None = None
        self._failure_since: float | None = None
        self._connected_since: float | None = None
        self._server_used: dict[int, int | None] = {}
        self._memo: dict[tuple[Any, ...], Any] = {}
        self._memo_shape: Any = None
        self._fit_t: float | None = None
        self._fit_n = 0
        self._last_vram_secs: float | None = None

    # ------------------------------------------------------------------ public

    def update(self, server: ServerReading | SourceFailure, gpus: GpuSetReading | None = None,
               host: HostReading | None = None) -> Snapshot:
        """Analyse one poll. A SourceFailure gives a Snapshot with that connection state and no speeds."""
        self._seq += 1
        if isinstance(server, SourceFailure):
            return self._failure_snapshot(server, gpus, host)
        self._failure_since = None
        if self._connected_since is None:
            self._connected_since = server.t_monotonic
        try:
            snap = self._analyse(server, gpus, host)
        except Exception as exc:  # a physics bug must not kill the dashboard
            snap = self._degraded(server, gpus, host, f"analysis failed: {type(exc).__name__}: {exc}")
        self._last_ok = snap
        return snap

    def reset(self) -> None:
        """Forget the session (new server): rates, fit points, trends, alerts."""
        rates = self._rates
        if rates is not None and hasattr(rates, "reset"):
            rates.reset()
        self.__init__(self.settings, rate_tracker=rates)  # type: ignore[misc]

    # ------------------------------------------------------------------ memoised physics

    def _memo_get(self, shape: Any, key: tuple[Any, ...], fn: Any) -> Any:
        """Physics results per model shape, computed once: polls repeat the same questions."""
        if shape is not self._memo_shape and shape != self._memo_shape:
            self._memo.clear()
        self._memo_shape = shape
        try:
            return self._memo[key]
        except KeyError:
            pass
        if len(self._memo) > 4096:
            self._memo.clear()
        value = self._memo[key] = fn()
        return value

    def _kv_in_use(self, shape: Any, ctx: float, type_k: str, type_v: str) -> float:
        return float(self._memo_get(shape, ("use", ctx, type_k, type_v),
                                    lambda: kv_mod.kv_bytes_in_use(shape, ctx, type_k, type_v)))

    def _kv_alloc(self, shape: Any, n_ctx: int, n_seq: int, unified: bool, type_k: str, type_v: str,
                  cfg: ServerConfig) -> int:
        """The K+V bytes llama.cpp reserves (its KV size line; the recurrent state is apart), with the batch,
        --swa-full and flash-attention settings it uses."""
        n_ubatch, n_batch = cfg.n_ubatch or kv_mod.DEFAULT_N_UBATCH, cfg.n_batch or kv_mod.DEFAULT_N_BATCH
        swa_full = bool(cfg.swa_full)
        flash_attn = cfg.flash_attn != "off"  # "auto" lays the cache out for flash attention, as "on" does
        key = ("alloc", n_ctx, n_seq, unified, type_k, type_v, n_ubatch, n_batch, swa_full, flash_attn)
        return int(self._memo_get(shape, key, lambda: kv_mod.kv_allocation(
            shape, n_ctx, n_seq=n_seq, unified=unified, type_k=type_k, type_v=type_v, n_ubatch=n_ubatch,
            n_batch=n_batch, swa_full=swa_full, flash_attn=flash_attn).kv_bytes))

    # ------------------------------------------------------------------ failure paths

    def _times(self, gpus: GpuSetReading | None, host: HostReading | None) -> float:
        if gpus is not None:
            return gpus.t_monotonic
        if host is not None:
            return host.t_monotonic
        return self._clock()

    def _failure_snapshot(self, failure: SourceFailure, gpus: GpuSetReading | None,
                          host: HostReading | None) -> Snapshot:
        t = self._times(gpus, host)
        if self._failure_since is None:
            self._failure_since = t
        self._connected_since = None
        status = connection_status_for(failure)
        gviews, greason = self._basic_gpu_views(gpus)
        self._track_vram(t, gpus)
        prev = self._last_ok
        facts = AlertFacts(t_monotonic=t, backend=prev.backend if prev else None, connected=False,
                           connection_failure=failure.kind.value, connection_reason=failure.reason,
                           gpus=self._vram_facts(gviews))
        alerts = self.alerts.update(facts)
        return Snapshot(
            seq=self._seq, t_monotonic=t, t_wall=time.time(),
            connection=Connection(status=status, reason=failure.reason, since_t_monotonic=self._failure_since),
            backend=prev.backend if prev else None, server_version=prev.server_version if prev else None,
            url=prev.url if prev else None, model=prev.model if prev else ModelView(),
            gpus=gviews, gpus_unavailable_reason=greason, host=self._host_view(host, _Placement(), None),
            alerts=alerts, reasons={"decode_tok_s": f"server not read: {failure.reason}"},
        )

    def _degraded(self, server: ServerReading, gpus: GpuSetReading | None, host: HostReading | None,
                  why: str) -> Snapshot:
        gviews, greason = self._basic_gpu_views(gpus)
        return Snapshot(
            seq=self._seq, t_monotonic=server.t_monotonic, t_wall=server.t_wall,
            connection=Connection(ConnectionStatus.CONNECTED, reason=why), backend=server.backend,
            server_version=server.server_version, url=server.url, gpus=gviews, gpus_unavailable_reason=greason,
            reasons={"analysis": why},
        )

    # ------------------------------------------------------------------ model

    def _model_view(self, r: ServerReading, prov: dict[str, str], reasons: dict[str, str]) -> tuple[ModelView, Any]:
        m, cfg = r.model, r.config
        shape = m.shape if m is not None else None
        cprov = {k: (v.value if hasattr(v, "value") else str(v)) for k, v in cfg.provenance.items()}

        type_k, type_v = cfg.type_k, cfg.type_v
        if type_k is None or type_v is None:
            type_k, type_v = type_k or "f16", type_v or "f16"
            prov["kv_type"] = "default"
            reasons["kv_type"] = "KV cache type not reported by the server: the default, f16, assumed"
        else:
            prov["kv_type"] = cprov.get("type_k", "log")

        n_slots = r.total_slots or (len(r.slots) or None) or cfg.n_parallel
        unified = r.kv_unified if r.kv_unified is not None else cfg.kv_unified
        slot_ctx = [s.n_ctx for s in r.slots if s.n_ctx]
        n_ctx = max(slot_ctx) if slot_ctx else None
        if n_ctx is not None:
            prov["n_ctx"] = "measured"
        elif cfg.n_ctx_total and n_slots:
            n_ctx = cfg.n_ctx_total if unified else cfg.n_ctx_total // max(1, n_slots)
            prov["n_ctx"] = cprov.get("n_ctx_total", "log")
        else:
            reasons["n_ctx"] = "the server did not report its context size"
        n_ctx_total = cfg.n_ctx_total
        if n_ctx_total is not None:
            prov["n_ctx_total"] = cprov.get("n_ctx_total", "log")
        elif slot_ctx:
            n_ctx_total = max(slot_ctx) if unified else sum(slot_ctx)
            prov["n_ctx_total"] = "computed"

        alloc: int | None = None
        if cfg.kv_bytes_allocated is not None:
            alloc = int(cfg.kv_bytes_allocated)
            prov["kv_allocated_bytes"] = cprov.get("kv_bytes_allocated", "log")
        elif shape is not None and n_ctx_total:
            alloc = self._kv_alloc(shape, n_ctx_total, n_slots or 1, bool(unified), type_k, type_v, cfg)
            prov["kv_allocated_bytes"] = "computed"
        else:
            reasons["kv_allocated_bytes"] = "needs the model shape and the server's total context"

        weight_bytes = m.weight_bytes if m is not None else None
        if weight_bytes is not None:
            prov["weight_bytes"] = "measured"
        elif cfg.model_buffer_bytes_by_device:
            weight_bytes = sum(cfg.model_buffer_bytes_by_device.values())
            prov["weight_bytes"] = "log"
        elif r.weight_bytes_vram is not None and r.weight_bytes_host is not None and alloc is not None \
                and r.weight_bytes_vram + r.weight_bytes_host - alloc > 0:
            # Ollama's loaded size holds weights + KV cache (+ compute graph): take the computed KV out
            weight_bytes = int(r.weight_bytes_vram + r.weight_bytes_host - alloc)
            prov["weight_bytes"] = "estimated"
            reasons["weight_bytes"] = "the server's loaded size minus the computed KV cache (includes compute buffers)"
        else:
            reasons["weight_bytes"] = (r.reasons.get("weight_bytes") if r.reasons.get("weight_bytes")
                                       else "model size not reported")

        kv_per_token = rec = None
        read_per_token: float | None = None
        if shape is not None:
            kv_per_token = float(self._memo_get(shape, ("per_token", type_k, type_v),
                                                lambda: kv_mod.kv_bytes_per_token(shape, type_k, type_v).total))
            prov["kv_bytes_per_token"] = "computed"
            rec = self._memo_get(shape, ("rec", n_slots),
                                 lambda: kv_mod.recurrent_state_bytes(shape, n_slots or 1)) or None
            if rec is not None:
                prov["recurrent_state_bytes"] = "computed"
            if weight_bytes is not None:
                wr = self._memo_get(shape, ("weights", weight_bytes),
                                    lambda: weights_mod.weight_bytes_read_per_token(shape, weight_bytes))
                read_per_token = float(wr.bytes)
                prov["weight_bytes_read_per_token"] = "estimated" if wr.estimated else "computed"
                if wr.estimated and wr.note:
                    reasons["weight_bytes_read_per_token"] = wr.note
        else:
            reasons["kv_bytes_per_token"] = "model shape unknown (no GGUF metadata)"
            if weight_bytes is not None:
                read_per_token = float(weight_bytes)
                prov["weight_bytes_read_per_token"] = "estimated"
                reasons["weight_bytes_read_per_token"] = "model shape unknown: all weights assumed read (dense)"
        if cfg.recurrent_bytes_allocated is not None:  # the server's own size line
            rec = int(cfg.recurrent_bytes_allocated)
            prov["recurrent_state_bytes"] = cprov.get("recurrent_bytes_allocated", "log")


        view = ModelView(
            name=m.name if m else None, arch=(m.arch if m and m.arch else getattr(shape, "arch", None)),
            n_params=m.n_params if m else None, quantization=m.quantization if m else None,
            weight_bytes=weight_bytes, weight_bytes_read_per_token=read_per_token,
            n_layers=getattr(shape, "n_layers", None) or cfg.total_layers, n_ctx=n_ctx, n_ctx_total=n_ctx_total,
            n_ctx_train=(m.n_ctx_train if m and m.n_ctx_train else getattr(shape, "n_ctx_train", None)),
            n_slots=n_slots, kv_unified=unified, kv_type_k=type_k, kv_type_v=type_v, flash_attn=cfg.flash_attn,
            kv_bytes_per_token=kv_per_token, kv_allocated_bytes=alloc, recurrent_state_bytes=rec,
            shape_note="; ".join(shape.notes) if shape is not None and getattr(shape, "notes", ()) else None,
            shape=shape if isinstance(shape, ModelShape) else None,
        )
        return view, shape

    # ------------------------------------------------------------------ GPUs and placement

    def _gpu_bandwidth(self, g: GpuReading) -> tuple[float | None, str | None]:
        user = self.settings.gpu_bandwidth_bytes_per_s.get(g.index)
        if user:
            return float(user), "user"
        if g.peak_bandwidth_bytes_per_s:
            return g.peak_bandwidth_bytes_per_s, g.bandwidth_source or "measured"
        from kvmon.physics.gpus import lookup_gpu

        spec = lookup_gpu(g.name)
        if spec is not None and not spec.unified_memory:
            return spec.bandwidth_bytes_per_s, "table"
        return None, None

    def _basic_gpu_views(self, gpus: GpuSetReading | None) -> tuple[tuple[GpuView, ...], str | None]:
        if gpus is None:
            return (), "GPU not read"
        if gpus.unavailable_reason:
            return (), gpus.unavailable_reason
        from kvmon.physics.gpus import pcie_bandwidth_bytes_per_s

        out = []
        self._server_used = {g.index: g.server_used_bytes for g in gpus.gpus}
        for g in gpus.gpus:
            bw, bw_src = self._gpu_bandwidth(g)
            pcie_bw = g.pcie.bandwidth_bytes_per_s or pcie_bandwidth_bytes_per_s(
                g.pcie.max_generation or g.pcie.generation, g.pcie.max_width or g.pcie.width)
            reasons = dict(g.reasons)
            if bw is None:
                reasons["peak_bandwidth_bytes_per_s"] = NO_GPU_BANDWIDTH
            out.append(GpuView(
                index=g.index, name=g.name, vram_total_bytes=g.vram_total_bytes, vram_used_bytes=g.vram_used_bytes,
                vram_free_bytes=g.vram_free_bytes, other_processes_bytes=g.other_processes_used_bytes,
                peak_bandwidth_bytes_per_s=bw, bandwidth_source=bw_src, memory_busy_percent=g.memory_busy_percent,
                gpu_busy_percent=g.gpu_busy_percent, pcie_rx_bytes_per_s=g.pcie_rx_bytes_per_s,
                pcie_tx_bytes_per_s=g.pcie_tx_bytes_per_s, pcie_bandwidth_bytes_per_s=pcie_bw,
                power_w=g.power_w, temperature_c=g.temperature_c, reasons=reasons,
            ))
        return tuple(out), None

    def _placement(self, r: ServerReading, weight_bytes: int | None, gpus: GpuSetReading | None) -> _Placement:
        """Split resident weights and KV over GPUs and host: log buffers, then Ollama, then process memory."""
        cfg = r.config
        p = _Placement()
        glist = list(gpus.gpus) if gpus is not None and not gpus.unavailable_reason else []
        known = {g.index for g in glist}
        if cfg.model_buffer_bytes_by_device:
            for dev, nbytes in cfg.model_buffer_bytes_by_device.items():
                idx = device_gpu_index(dev)
                if idx is None:
                    p.weights_host += nbytes
                else:
                    p.weights_gpu[idx] = p.weights_gpu.get(idx, 0.0) + nbytes
            p.source = "log" if p.weights_gpu else "host_only"
            if p.weights_gpu and p.weights_host > 0:
                off, tot = cfg.offloaded_layers, cfg.total_layers
                every_layer = off is not None and tot is not None and off >= tot
                small = p.weights_host <= 0.05 * (p.weights_host + sum(p.weights_gpu.values()))
                if every_layer or (off is None and small):
                    # with every layer on the GPU the host buffer is the token-embedding table: one row per token
                    p.host_weights_read = False
                    p.note = "host model buffer holds the token embeddings (one row read per token)"
            if cfg.kv_buffer_bytes_by_device:
                total_kv = sum(cfg.kv_buffer_bytes_by_device.values()) or 1
                for dev, nbytes in cfg.kv_buffer_bytes_by_device.items():
                    idx = device_gpu_index(dev)
                    if idx is None:
                        p.kv_host += nbytes / total_kv
                    else:
                        p.kv_gpu[idx] = p.kv_gpu.get(idx, 0.0) + nbytes / total_kv
            else:
                self._kv_like_weights(p)
            return p
        if weight_bytes is None:
            p.note = "model size unknown"
            return p
        on_gpu = float(weight_bytes)
        if r.weight_bytes_vram is not None and r.weight_bytes_host is not None:
            total = r.weight_bytes_vram + r.weight_bytes_host
            frac_host = r.weight_bytes_host / total if total else 0.0
            p.weights_host = weight_bytes * frac_host
            on_gpu = weight_bytes - p.weights_host
            p.source = "ollama"
        if not glist:
            if on_gpu > 0:
                p.note = "no GPU readings: where the model lives is unknown"
                p.weights_host = 0.0
                return p
        else:
            used = {g.index: g.server_used_bytes for g in glist}
            if len(glist) == 1:
                p.weights_gpu[glist[0].index] = on_gpu
                p.source = p.source if p.source == "ollama" else "single_gpu"
            elif all(v for v in used.values()):
                tot = float(sum(v for v in used.values() if v))
                for i, v in used.items():
                    p.weights_gpu[i] = on_gpu * (v or 0) / tot
                p.source = p.source if p.source == "ollama" else "process"
                p.note = "weights split over GPUs by the server's memory on each"
            else:
                for i in known:
                    p.weights_gpu[i] = on_gpu / len(known)
                p.note = "weight split over GPUs unknown: assumed even"
                p.source = p.source if p.source == "ollama" else "even"
        self._kv_like_weights(p)
        return p

    @staticmethod
    def _kv_like_weights(p: _Placement) -> None:
        """Without KV buffer lines, the KV cache follows the layers: split like the weights."""
        total = sum(p.weights_gpu.values()) + p.weights_host_read
        if total <= 0:
            return
        p.kv_follows_layers = True
        for i, w in p.weights_gpu.items():
            p.kv_gpu[i] = w / total
        p.kv_host = p.weights_host_read / total

    def _estimate_pcie_spill(self, p: _Placement, gviews: Sequence[GpuView], kv_alloc: int | None,
                             cfg_compute: Mapping[str, int]) -> None:
        """Driver system-memory fallback: what the server needs beyond the VRAM others leave is in host RAM."""
        if not kv_alloc:
            return
        compute = {device_gpu_index(d): b for d, b in cfg_compute.items()}
        for g in gviews:
            if g.vram_total_bytes is None or g.other_processes_bytes is None or g.index not in p.weights_gpu:
                continue
            need = p.weights_gpu[g.index] + kv_alloc * p.kv_gpu.get(g.index, 0.0) + compute.get(g.index, 0)
            room = g.vram_total_bytes - g.other_processes_bytes
            over = need - room
            if over > 0 and p.kv_gpu.get(g.index):
                frac = min(p.kv_gpu[g.index], over / kv_alloc)
                p.kv_gpu[g.index] -= frac
                p.kv_pcie[g.index] = frac

    def _devices(self, p: _Placement, read_per_token: float | None, gviews: Sequence[GpuView],
                 host_bw: float | None) -> tuple[list[Any] | None, str | None]:
        if read_per_token is None:
            return None, "model size unknown"
        resident = sum(p.weights_gpu.values()) + p.weights_host_read
        if resident <= 0 and not p.kv_gpu and not p.kv_host:
            if not gviews:
                return None, NO_GPU_BANDWIDTH
            return None, p.note or "where the model lives is unknown"
        # the share of the resident weights one token reads (1 for dense, the active experts' share for MoE);
        # a host buffer that only holds the token embeddings is resident but not read
        stored = sum(p.weights_gpu.values()) + p.weights_host
        scale = min(1.0, read_per_token / stored) if stored > 0 else 0.0
        by_index = {g.index: g for g in gviews}
        devices: list[Any] = []
        for idx in sorted(set(p.weights_gpu) | set(p.kv_gpu)):
            g = by_index.get(idx)
            if g is None or g.peak_bandwidth_bytes_per_s is None:
                return None, NO_GPU_BANDWIDTH
            devices.append(ceiling_mod.DeviceShare(
                name=f"GPU {idx}", bandwidth_bytes_per_s=g.peak_bandwidth_bytes_per_s,
                weight_bytes=p.weights_gpu.get(idx, 0.0) * scale, kv_fraction=p.kv_gpu.get(idx, 0.0), location="gpu"))
        for idx, frac in sorted(p.kv_pcie.items()):
            g = by_index.get(idx)
            if g is None or not g.pcie_bandwidth_bytes_per_s:
                return None, f"GPU {idx} PCIe link bandwidth unknown"
            devices.append(ceiling_mod.DeviceShare(
                name=f"PCIe {idx}", bandwidth_bytes_per_s=g.pcie_bandwidth_bytes_per_s, weight_bytes=0.0,
                kv_fraction=frac, location="pcie"))
        if p.weights_host_read > 0 or p.kv_host > 0:
            if not host_bw:
                return None, NO_HOST_BANDWIDTH
            devices.append(ceiling_mod.DeviceShare(name="host", bandwidth_bytes_per_s=host_bw,
                                                   weight_bytes=p.weights_host_read * scale, kv_fraction=p.kv_host,
                                                   location="host"))
        if not devices:
            return None, NO_GPU_BANDWIDTH
        return devices, None

    # ------------------------------------------------------------------ trends

    def _track_vram(self, t: float, gpus: GpuSetReading | None) -> None:
        if gpus is None or gpus.unavailable_reason:
            return
        window = self.settings.thresholds.vram_trend_window_s
        for g in gpus.gpus:
            if g.vram_free_bytes is None:
                continue
            tr = self._vram.setdefault(g.index, _VramTrack())
            others = float(g.other_processes_used_bytes) if g.other_processes_used_bytes is not None else None
            free = float(g.vram_free_bytes)
            if not tr.free or tr.free[-1] != free:
                tr.changed_at = t
            tr.t.append(t)
            tr.free.append(free)
            tr.others.append(others)
            while tr.t and tr.t[0] < t - window:
                tr.t.popleft()
                tr.free.popleft()
                tr.others.popleft()

    def _vram_facts(self, gviews: Sequence[GpuView]) -> tuple[GpuVramFacts, ...]:
        th = self.settings.thresholds
        out = []
        for g in gviews:
            tr = self._vram.get(g.index)
            secs = drop = growth = span = None
            if tr is not None and len(tr.t) >= 3:
                span = tr.t[-1] - tr.t[0]
                if span >= th.vram_trend_min_span_s:
                    n = len(tr.t)  # least-squares slope of free VRAM over time (none while it stood still)
                    slope = 0.0
                    if tr.changed_at is None or tr.changed_at > tr.t[0]:
                        ts, frees = np.fromiter(tr.t, float, n), np.fromiter(tr.free, float, n)
                        dt, df = ts - ts.mean(), frees - frees.mean()
                        var = float(dt @ dt)
                        slope = float(dt @ df) / var if var else 0.0
                    fs = (tr.free[0], tr.free[-1])
                    drop = int(max(0.0, fs[0] - fs[-1]))
                    if tr.others[0] is not None and tr.others[-1] is not None:
                        growth = int(tr.others[-1] - tr.others[0])
                    if slope < 0 and -slope * span >= th.vram_trend_min_drop_bytes:
                        secs = max(0.0, fs[-1] / -slope)
            out.append(GpuVramFacts(index=g.index, name=g.name, vram_free_bytes=g.vram_free_bytes,
                                    vram_total_bytes=g.vram_total_bytes, seconds_until_full=secs,
                                    free_drop_bytes=drop, other_processes_growth_bytes=growth, window_s=span))
        return tuple(out)

    # ------------------------------------------------------------------ main

    def _analyse(self, r: ServerReading, gpus: GpuSetReading | None, host: HostReading | None) -> Snapshot:
        st = self.settings
        prov: dict[str, str] = {}
        reasons: dict[str, str] = dict(r.reasons)
        t = r.t_monotonic
        model, shape = self._model_view(r, prov, reasons)
        key = (model.name, model.arch, model.weight_bytes, model.n_ctx, model.kv_type_k, model.kv_type_v, r.url)
        if key != self._model_key:
            self._model_key = key
            self._fit_points.clear()
            self._efficiencies.clear()
            self._fit, self._fit_dirty, self._curve_cache, self._fit_t = None, False, None, None
        type_k, type_v = model.kv_type_k or "f16", model.kv_type_v or "f16"

        # speeds
        sample = None
        if self._rates is not None:
            sample = self._rates.update(r)
        decode = getattr(sample, "decode_tok_s", None)
        prefill = getattr(sample, "prefill_tok_s", None)
        per_slot: Mapping[int, float | None] = getattr(sample, "per_slot_decode_tok_s", None) or {}
        rate_src = getattr(sample, "source", None)
        if decode is not None:
            prov["decode_tok_s"] = "measured"
        else:
            reasons["decode_tok_s"] = (self._rates_reason or r.live_rate_unavailable_reason
                                       or "idle: no tokens generated since the last poll")
        if prefill is not None:
            prov["prefill_tok_s"] = "measured"

        # slots and context
        slots = tuple(SlotView(id=s.id, n_ctx=s.n_ctx, context_tokens=s.context_tokens, processing=s.processing,
                               decode_tok_s=per_slot.get(s.id)) for s in r.slots)
        active = [s for s in r.slots if s.processing and s.context_tokens is not None]
        pool = active or [s for s in r.slots if s.context_tokens is not None]
        deepest = max(pool, key=lambda s: s.context_tokens or 0) if pool else None
        context = deepest.context_tokens if deepest else None
        if context is None and r.last_request is not None and r.last_request.context_tokens is not None:
            context = r.last_request.context_tokens
            prov["context_tokens"] = "measured"
        elif context is not None:
            prov["context_tokens"] = "measured"
        else:
            reasons["context_tokens"] = ("the server does not report per-conversation context"
                                         + (" (run `kvmon proxy` to see it)" if r.backend == "ollama"
                                            else " (enable /slots)"))

        kv_in_use = kv_read_now = None
        if shape is not None:
            depths = [s.context_tokens for s in r.slots if s.context_tokens]
            if not depths and context:
                depths = [context]
            if depths:
                kv_in_use = int(sum(self._kv_in_use(shape, d, type_k, type_v) for d in depths))
            elif context is not None or r.slots:
                kv_in_use = 0  # the slots are there and hold nothing
            if kv_in_use is not None:
                prov["kv_in_use_bytes"] = "computed"
            if context is not None:
                kv_read_now = self._kv_in_use(shape, context, type_k, type_v)

        # GPUs and where the model lives
        gviews, greason = self._basic_gpu_views(gpus)
        self._track_vram(t, gpus)
        placement = self._placement(r, model.weight_bytes, gpus)
        if placement.note:
            reasons["placement"] = placement.note
        self._estimate_pcie_spill(placement, gviews, _cache_bytes(model), r.config.compute_buffer_bytes_by_device)
        host_bw = st.host_bandwidth_bytes_per_s or (host.host_bandwidth_bytes_per_s if host else None)
        devices, dev_reason = self._devices(placement, model.weight_bytes_read_per_token, gviews, host_bw)

        # ceiling now and over context
        ceiling_now = None
        curve: tuple[tuple[int, float], ...] = ()
        if devices is not None and shape is not None:
            if kv_read_now is not None:
                ceiling_now = ceiling_mod.ceiling_tok_s(devices, kv_read_now)
                prov["ceiling_tok_s"] = "computed"
            else:
                reasons["ceiling_tok_s"] = "context depth unknown: the ceiling curve shows every depth"
            if model.n_ctx:
                # memoised per shape (by equality: a source may rebuild an equal shape every poll) and per
                # devices, types and n_ctx: the curve changes only when one of those does
                n = max(2, st.curve_points)
                n_ctx_curve = model.n_ctx
                curve = self._memo_get(shape, ("curve", tuple(devices), type_k, type_v, n_ctx_curve, n), lambda: tuple(
                    ceiling_mod.ceiling_curve(devices, shape, type_k, type_v,
                                              sorted({round(n_ctx_curve * i / (n - 1)) for i in range(n)}))))
        else:
            reasons["ceiling_tok_s"] = dev_reason or reasons.get("kv_bytes_per_token", "model shape unknown")

        efficiency = decode / ceiling_now if decode is not None and ceiling_now else None
        if efficiency is not None:
            prov["efficiency"] = "computed"
            self._efficiencies.append(efficiency)
        bytes_per_token = None
        if model.weight_bytes_read_per_token is not None and kv_read_now is not None:
            bytes_per_token = model.weight_bytes_read_per_token + kv_read_now
        achieved = decode * bytes_per_token if decode is not None and bytes_per_token is not None else None
        peak = bytes_per_token * ceiling_now if bytes_per_token is not None and ceiling_now else None
        headroom = 1.0 - achieved / peak if achieved is not None and peak else None
        if peak is not None:
            prov["peak_bandwidth_bytes_per_s"] = "computed"
        if achieved is not None:
            prov["achieved_bandwidth_bytes_per_s"] = "computed"

        # VRAM split per GPU
        gviews = self._split_vram(gviews, placement, model, kv_in_use, decode, kv_read_now, r)

        # forecasts
        if decode is not None and context is not None and len(active) <= 1:
            point_rate = per_slot.get(deepest.id) if deepest is not None and per_slot.get(deepest.id) else decode
            self._fit_points.append((float(context), float(point_rate)))
            self._fit_dirty = True
        vfacts = self._vram_facts(gviews)
        fc = self._forecast(t, model, context, decode, devices, shape, type_k, type_v, vfacts, prov)

        # host
        hview = self._host_view(host, placement, _cache_bytes(model))

        # alerts
        facts = self._alert_facts(r, t, model, context, deepest.id if deepest and len(r.slots) > 1 else None, decode,
                                  fc, vfacts, placement, devices, kv_read_now, ceiling_now, shape)
        alerts = self.alerts.update(facts)

        status = {"loading": ConnectionStatus.LOADING, "sleeping": ConnectionStatus.SLEEPING}.get(
            r.state, ConnectionStatus.CONNECTED)
        return Snapshot(
            seq=self._seq, t_monotonic=t, t_wall=r.t_wall,
            connection=Connection(status=status, since_t_monotonic=self._connected_since), backend=r.backend,
            server_version=r.server_version, url=r.url, model=model, slots=slots, context_tokens=context,
            decode_tok_s=decode, prefill_tok_s=prefill, decode_rate_source=rate_src, ceiling_tok_s=ceiling_now,
            ceiling_curve=curve, efficiency=efficiency, kv_in_use_bytes=kv_in_use,
            kv_allocated_bytes=model.kv_allocated_bytes, bytes_read_per_token=bytes_per_token,
            achieved_bandwidth_bytes_per_s=achieved, peak_bandwidth_bytes_per_s=peak,
            bandwidth_headroom_fraction=headroom, gpus=gviews, gpus_unavailable_reason=greason, host=hview,
            forecast=fc, alerts=alerts, provenance=prov, reasons=reasons,
            extra={"placement": placement.source},
        )

    def _split_vram(self, gviews: tuple[GpuView, ...], p: _Placement, model: ModelView, kv_in_use: int | None,
                    decode: float | None, kv_read_now: float | None, r: ServerReading) -> tuple[GpuView, ...]:
        """Stacked VRAM per GPU: weights / KV allocated (in use) / server compute and other / others / free."""
        compute = {device_gpu_index(d): b for d, b in r.config.compute_buffer_bytes_by_device.items()}
        resident = sum(p.weights_gpu.values()) + p.weights_host_read
        out = []
        for g in gviews:
            w = p.weights_gpu.get(g.index)
            frac = p.kv_gpu.get(g.index)
            cache = _cache_bytes(model)
            kv_alloc = int(cache * frac) if cache is not None and frac else None
            kv_use = int(kv_in_use * frac) if kv_in_use is not None and frac else None
            other = None
            sv = self._server_used.get(g.index)
            if sv is not None and w is not None:
                other = max(0, int(sv - w - (kv_alloc or 0)))
            elif compute.get(g.index) is not None:
                other = int(compute[g.index])
            achieved = None
            if decode is not None and model.weight_bytes_read_per_token is not None and w is not None and resident:
                share = model.weight_bytes_read_per_token * w / resident
                achieved = decode * (share + (kv_read_now or 0.0) * (frac or 0.0))
            out.append(replace(g, weights_bytes=int(w) if w is not None else None, kv_allocated_bytes=kv_alloc,
                               kv_in_use_bytes=kv_use, server_other_bytes=other,
                               achieved_bandwidth_bytes_per_s=achieved))
        return tuple(out)

    def _forecast(self, now: float, model: ModelView, context: int | None, decode: float | None,
                  devices: list[Any] | None, shape: Any, type_k: str, type_v: str,
                  vfacts: Sequence[GpuVramFacts], prov: dict[str, str]) -> Forecast:
        """Tokens/seconds until n_ctx and VRAM are full; tok/s at the context milestones."""
        tokens_ctx = secs_ctx = None
        if model.n_ctx and context is not None:
            tokens_ctx = int(ceiling_mod.tokens_until_full(model.n_ctx, context))
            if decode:
                secs_ctx = tokens_ctx / decode
        secs_vram = tokens_vram = None
        for f in vfacts:
            if f.seconds_until_full is not None and (secs_vram is None or f.seconds_until_full < secs_vram):
                secs_vram = f.seconds_until_full
        if secs_vram is not None and decode:
            tokens_vram = int(secs_vram * decode)
        self._last_vram_secs = secs_vram
        # The robust fit costs tens of ms with hundreds of points, and each refit redraws the forecast: refit on
        # every new point while there are few, then when the points grew by a quarter or a minute has passed.
        n_pts = len(self._fit_points)
        if self._fit_dirty and (n_pts < 16 or self._fit_t is None or n_pts >= 1.25 * self._fit_n
                                or now - self._fit_t >= 60.0):
            self._fit = forecast_mod.fit_decode(list(self._fit_points)) if n_pts >= 2 else None
            self._fit_dirty = False
            self._fit_t, self._fit_n = now, n_pts
        fit = self._fit
        milestones: tuple[Milestone, ...] = ()
        if model.n_ctx:
            n_ctx = model.n_ctx
            median_eff = _median(list(self._efficiencies)) if fit is None else None
            # the same fit, devices and cache types give the same milestones: computed once, not every poll
            key = ("milestones", fit, None if devices is None else tuple(devices), type_k, type_v, n_ctx, median_eff)
            milestones = self._memo_get(shape, key, lambda: self._milestones(n_ctx, fit, devices, shape, type_k,
                                                                             type_v, median_eff))
        if milestones:
            prov["forecast.milestones"] = "computed" if fit is not None else "estimated"
        return Forecast(
            tokens_until_ctx_full=tokens_ctx, seconds_until_ctx_full=secs_ctx, tokens_until_vram_full=tokens_vram,
            seconds_until_vram_full=secs_vram, fit_a_s=getattr(fit, "a_s", None),
            fit_b_s_per_token=getattr(fit, "b_s_per_token", None), fit_points=len(self._fit_points),
            milestones=milestones,
        )

    def _milestones(self, n_ctx: int, fit: Any, devices: list[Any] | None, shape: Any, type_k: str, type_v: str,
                    median_eff: float | None) -> tuple[Milestone, ...]:
        """tok/s at each context milestone up to n_ctx: the fit's prediction, or the ceiling × median efficiency."""
        out: list[Milestone] = []
        for m in self.settings.milestones:
            if m > n_ctx:
                break
            ceil_m = None
            if devices is not None and shape is not None:
                ceil_m = ceiling_mod.ceiling_tok_s(devices, self._kv_in_use(shape, m, type_k, type_v))
            if fit is not None:
                pred = fit.predict(m)
                if pred is None or pred.tok_s is None or not math.isfinite(pred.tok_s):
                    continue
                out.append(Milestone(m, float(pred.tok_s), pred.low_tok_s, pred.high_tok_s, ceil_m))
            elif median_eff is not None and ceil_m:
                out.append(Milestone(m, ceil_m * median_eff, None, None, ceil_m))
        return tuple(out)

    @staticmethod
    def _host_view(host: HostReading | None, p: _Placement, kv_alloc: int | None) -> HostView:
        kv_host = int(kv_alloc * (p.kv_host + sum(p.kv_pcie.values()))) if kv_alloc is not None else None
        return HostView(
            ram_total_bytes=host.ram_total_bytes if host else None,
            ram_available_bytes=host.ram_available_bytes if host else None,
            weights_in_host_bytes=int(p.weights_host) if p.weights_host else None,
            kv_in_host_bytes=kv_host if kv_host else None,
            host_bandwidth_bytes_per_s=host.host_bandwidth_bytes_per_s if host else None,
            server_rss_bytes=host.server_rss_bytes if host else None,
        )

    def _advice(self, r: ServerReading, model: ModelView, shape: Any, devices: list[Any] | None,
                ceiling_now: float | None, decode: float | None, context: int | None) -> tuple[CacheAdvice, ...]:
        """Cheaper KV cache types (physics.advice): the VRAM they free and the speed they would give here."""
        if shape is None or not model.n_ctx_total or model.kv_type_k is None or model.kv_type_v is None:
            return ()
        ollama = r.backend == "ollama"
        types = [t for t in self.settings.advice_types if not ollama or t in ("q8_0", "q4_0")]
        if not types:
            return ()
        depth = context or 0
        bucket = depth // 256  # the speed "here" need not be recomputed for every token
        key = ("advice", model.n_ctx_total, bucket, model.kv_type_k, model.kv_type_v, model.n_slots,
               bool(model.kv_unified), r.config.n_ubatch, tuple(devices or ()), tuple(types))
        options = self._memo_get(shape, key, lambda: advice_mod.cache_type_counterfactuals(
            shape, n_ctx=model.n_ctx_total, context_tokens=bucket * 256, current_type_k=model.kv_type_k,
            current_type_v=model.kv_type_v, n_seq=model.n_slots or 1, unified=bool(model.kv_unified),
            n_ubatch=r.config.n_ubatch or 512, devices=tuple(devices or ()), candidates=[(t, t) for t in types]))
        median_eff = _median(list(self._efficiencies))
        out = []
        for opt in options:
            if opt.is_current or opt.vram_freed_bytes <= 0:
                continue
            tok_s = None
            if context is not None and opt.ceiling_change is not None:
                if decode is not None:
                    tok_s = decode * (1.0 + opt.ceiling_change)
                elif median_eff is not None and ceiling_now:
                    tok_s = ceiling_now * (1.0 + opt.ceiling_change) * median_eff
            if ollama:
                flags = f"OLLAMA_KV_CACHE_TYPE={opt.type_k} OLLAMA_FLASH_ATTENTION=1"
            else:
                fa = " -fa on" if opt.needs_flash_attention and model.flash_attn in ("off", "disabled") else ""
                flags = f"-ctk {opt.type_k} -ctv {opt.type_v}{fa}"
            out.append(CacheAdvice(type_k=opt.type_k, type_v=opt.type_v, flags=flags,
                                   freed_bytes=int(opt.vram_freed_bytes), tok_s=tok_s, tok_s_now=decode))
        return tuple(out)

    def _alert_facts(self, r: ServerReading, t: float, model: ModelView, context: int | None, slot_id: int | None,
                     decode: float | None, fc: Forecast, vfacts: tuple[GpuVramFacts, ...], p: _Placement,
                     devices: list[Any] | None, kv_read_now: float | None, ceiling_now: float | None,
                     shape: Any) -> AlertFacts:
        # KV of layers that run on the CPU is part of the partial-offload alert; this one is for KV placed
        # in host RAM on its own (-nkvo, the log's CPU KV buffer) or spilled over PCIe
        kv_host_frac = (0.0 if p.kv_follows_layers else p.kv_host) + sum(p.kv_pcie.values())
        # a CPU-only server (nothing on any GPU) has nothing to spill: host RAM is simply where it runs
        on_gpu = any(v > 0 for v in p.weights_gpu.values()) or any(v > 0 for v in p.kv_gpu.values())
        kv_known = on_gpu and (bool(p.kv_gpu) or kv_host_frac > 0)
        via = "PCIe" if p.kv_pcie else "host RAM"
        cap = ceiling_now if kv_host_frac > 0 else None
        weights_host = int(p.weights_host_read) if p.source in ("ollama", "log") and on_gpu else None
        try:
            advice = self._advice(r, model, shape, devices, ceiling_now, decode, context)
        except (ValueError, KeyError):
            advice = ()
        return AlertFacts(
            t_monotonic=t, backend=r.backend, connected=True, n_ctx=model.n_ctx, context_tokens=context,
            slot_id=slot_id, tokens_until_ctx_full=fc.tokens_until_ctx_full,
            seconds_until_ctx_full=fc.seconds_until_ctx_full, decode_tok_s=decode, gpus=vfacts,
            kv_host_fraction=kv_host_frac if kv_known else None,
            kv_host_bytes=int(kv_host_frac * (_cache_bytes(model) or 0)) if model.kv_allocated_bytes else None,
            kv_host_via=via, kv_host_cap_tok_s=cap, weights_host_bytes=weights_host,
            weight_bytes=model.weight_bytes, weights_host_cap_tok_s=ceiling_now if weights_host else None,
            kv_with_host_layers=p.kv_follows_layers and p.kv_host > 0,
            metrics_enabled=r.metrics_enabled, advice=advice,
        )
