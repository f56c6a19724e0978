"""Alert facts: what the alert rules (``kvmon.core.alerts``) need from one poll, gathered from the analysis's
parts; the engine turns them into alerts with hysteresis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvmon.core.alert_types import AlertFacts, CacheAdvice, GpuVramFacts, UnifiedFacts
from kvmon.core.analysis.placement import Placement
from kvmon.core.backend import backend_of
from kvmon.core.readings import ServerReading, SourceFailure
from kvmon.core.snapshot import Forecast, GpuView, HostView, LatencyView, ModelView, PromptCacheView, Snapshot
from kvmon.physics.cache_types import smaller_cache_type


@dataclass(frozen=True)
class DeviceFacts:
    """What the device alerts read beside the placement: the devices, the host, swap, the log's hint."""

    gviews: Sequence[GpuView] = ()
    host: HostView | None = None
    cache_bytes: int | None = None
    draft_bytes: int | None = None  # a draft context's weights and KV (placed by ``Placement.draft_gpu``)
    compute_by_index: dict[int, int] | None = None
    swap_growth_bytes: int | None = None
    log_hint: str | None = None


def _unified(p: Placement, d: DeviceFacts) -> tuple[UnifiedFacts, ...]:
    out = []
    for g in d.gviews:
        if g.kind != "unified_memory" or not g.working_set_limit_bytes or g.index not in p.weights_gpu:
            continue
        need = (p.weights_gpu.get(g.index, 0.0) + (d.cache_bytes or 0) * p.kv_gpu.get(g.index, 0.0)
                + (d.compute_by_index or {}).get(g.index, 0) + (d.draft_bytes or 0) * p.draft_gpu.get(g.index, 0.0))
        out.append(UnifiedFacts(g.name or f"GPU {g.index}", int(need), int(g.working_set_limit_bytes),
                                g.working_set_source or "estimated"))
    return tuple(out)


def _idle_gpu(p: Placement, d: DeviceFacts) -> str | None:
    """A GPU the server could use but holds no weights on (the log named it, or a source read it)."""
    for g in d.gviews:
        if g.index not in p.weights_gpu and g.source != "none":
            return g.name or g.log_name or f"GPU {g.index}"
    return None


def reading_facts(r: ServerReading, t: float, model: ModelView, context: int | None, slot_id: int | None,
                  decode: float | None, fc: Forecast, vfacts: tuple[GpuVramFacts, ...], p: Placement,
                  ceiling_now: float | None, advice: tuple[CacheAdvice, ...],
                  dev: DeviceFacts | None = None, *, advice_types: Sequence[str] = (),
                  latency: LatencyView | None = None, prompt_cache: PromptCacheView | None = None) -> AlertFacts:
    """The facts of a poll that read the server: context left, VRAM trend, what lives in host RAM, the advice,
    (``dev``) the devices': CPU-only decoding, unified memory's working set, swap, the log's hint; and the last
    reply's times."""
    # KV of layers that run on the CPU is part of the partial-offload alert; this one is for KV placed
    # in host RAM on its own (-nkvo, the log's CPU KV buffer) or spilled over PCIe
    kv_host_frac = (0.0 if p.kv_follows_layers else p.kv_host) + sum(p.kv_pcie.values())
    # a CPU-only server (nothing on any GPU) has nothing to spill: host RAM is simply where it runs
    on_gpu = p.on_device
    d = dev or DeviceFacts()
    cpu_only = not on_gpu and p.weights_host_read > 0 and p.source in ("host_only", "no_gpu", "server_split")
    in_ram = cpu_only or p.weights_host_read > 0 or any(g.kind == "unified_memory" for g in d.gviews
                                                        if g.index in p.weights_gpu)
    host, lat = d.host or HostView(), latency or LatencyView()
    kv_known = on_gpu and (bool(p.kv_gpu) or kv_host_frac > 0)
    via = "PCIe" if p.kv_pcie else "host RAM"
    cap = ceiling_now if kv_host_frac > 0 else None
    weights_host = int(p.weights_host_read) if p.source in ("server_split", "log") and on_gpu else None
    return AlertFacts(
        t_monotonic=t, backend=r.backend, connected=True, n_ctx=model.n_ctx, context_tokens=context,
        slot_id=slot_id, tokens_until_ctx_full=fc.tokens_until_ctx_full,
        seconds_until_ctx_full=fc.seconds_until_ctx_full, decode_tok_s=decode, gpus=vfacts,
        kv_host_fraction=kv_host_frac if kv_known else None,
        kv_host_bytes=int(kv_host_frac * (d.cache_bytes or 0)) if model.kv_allocated_bytes else None,
        kv_host_via=via, kv_host_cap_tok_s=cap, weights_host_bytes=weights_host,
        weight_bytes=model.weight_bytes, weights_host_cap_tok_s=ceiling_now if weights_host else None,
        kv_with_host_layers=p.kv_follows_layers and p.kv_host > 0,
        metrics_enabled=r.metrics_enabled, advice=advice, kv_type=model.kv_type_k,
        kv_type_assumed=r.config.type_k is None,
        smaller_kv_type=smaller_cache_type(model.kv_type_k, [t for t in advice_types
                                                             if backend_of(r.backend).offers_cache_type(t)]),
        cpu_only=cpu_only, cpu_only_idle_gpu=_idle_gpu(p, d) if cpu_only else None,
        cpu_only_cap_tok_s=ceiling_now if cpu_only else None,
        host_bandwidth_bytes_per_s=host.host_bandwidth_bytes_per_s, host_bandwidth_source=host.host_bandwidth_source,
        unified=_unified(p, d), swap_growth_bytes=d.swap_growth_bytes if in_ram else None,
        swap_used_bytes=host.swap_used_bytes, log_hint=d.log_hint if p.source not in ("log", "host_only") else None,
        prompt_cache_limit_bytes=host.prompt_cache_limit_bytes, ram_available_bytes=host.ram_available_bytes,
        last_ttft_s=lat.ttft_last_s, last_generate_s=lat.last_generate_s, last_prompt_tokens=lat.last_prompt_tokens,
        last_prefill_tok_s=lat.last_prefill_tok_s, prompt_cache=prompt_cache,
    )


def failure_facts(failure: SourceFailure, t: float, last: Snapshot | None,
                  vfacts: tuple[GpuVramFacts, ...]) -> AlertFacts:
    """The facts of a poll that read no server: the failure, and the GPUs that were still read."""
    return AlertFacts(t_monotonic=t, backend=last.backend if last else None, connected=False,
                      connection_failure=failure.kind.value, connection_reason=failure.reason, gpus=vfacts)
