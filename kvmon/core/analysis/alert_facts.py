"""Alert facts: what the alert rules (``kvmon.core.alerts``) need from one poll, gathered from the analysis's
parts; the engine turns them into alerts with hysteresis.
"""

from __future__ import annotations

from kvmon.core.alerts import AlertFacts, CacheAdvice, GpuVramFacts
from kvmon.core.analysis.model_view import cache_bytes
from kvmon.core.analysis.placement import Placement
from kvmon.core.readings import ServerReading, SourceFailure
from kvmon.core.snapshot import Forecast, ModelView, Snapshot


def reading_facts(r: ServerReading, t: float, model: ModelView, context: int | None, slot_id: int | None,
                  decode: float | None, fc: Forecast, vfacts: tuple[GpuVramFacts, ...], p: Placement,
                  ceiling_now: float | None, advice: tuple[CacheAdvice, ...]) -> AlertFacts:
    """The facts of a poll that read the server: context left, VRAM trend, what lives in host RAM, the advice."""
    # KV of layers that run on the CPU is part of the partial-offload alert; this one is for KV placed
    # in host RAM on its own (-nkvo, the log's CPU KV buffer) or spilled over PCIe
    kv_host_frac = (0.0 if p.kv_follows_layers else p.kv_host) + sum(p.kv_pcie.values())
    # a CPU-only server (nothing on any GPU) has nothing to spill: host RAM is simply where it runs
    on_gpu = any(v > 0 for v in p.weights_gpu.values()) or any(v > 0 for v in p.kv_gpu.values())
    kv_known = on_gpu and (bool(p.kv_gpu) or kv_host_frac > 0)
    via = "PCIe" if p.kv_pcie else "host RAM"
    cap = ceiling_now if kv_host_frac > 0 else None
    weights_host = int(p.weights_host_read) if p.source in ("ollama", "log") and on_gpu else None
    return AlertFacts(
        t_monotonic=t, backend=r.backend, connected=True, n_ctx=model.n_ctx, context_tokens=context,
        slot_id=slot_id, tokens_until_ctx_full=fc.tokens_until_ctx_full,
        seconds_until_ctx_full=fc.seconds_until_ctx_full, decode_tok_s=decode, gpus=vfacts,
        kv_host_fraction=kv_host_frac if kv_known else None,
        kv_host_bytes=int(kv_host_frac * (cache_bytes(model) or 0)) if model.kv_allocated_bytes else None,
        kv_host_via=via, kv_host_cap_tok_s=cap, weights_host_bytes=weights_host,
        weight_bytes=model.weight_bytes, weights_host_cap_tok_s=ceiling_now if weights_host else None,
        kv_with_host_layers=p.kv_follows_layers and p.kv_host > 0,
        metrics_enabled=r.metrics_enabled, advice=advice,
    )


def failure_facts(failure: SourceFailure, t: float, last: Snapshot | None,
                  vfacts: tuple[GpuVramFacts, ...]) -> AlertFacts:
    """The facts of a poll that read no server: the failure, and the GPUs that were still read."""
    return AlertFacts(t_monotonic=t, backend=last.backend if last else None, connected=False,
                      connection_failure=failure.kind.value, connection_reason=failure.reason, gpus=vfacts)
