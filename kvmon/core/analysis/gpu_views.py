"""The devices and the host as the Snapshot shows them: each device's peak bandwidth (the user's value, else what
the device source chose by ``kvmon.physics.gpus.choose_peak_bandwidth``, else the table; an integrated GPU without
one reads the host's), its memory split into weights, KV cache, the server's other buffers and other processes,
and host RAM as a device of its own: what of the model lives there and what decode reads from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kvmon.core.analysis.draft import draft_bytes
from kvmon.core.analysis.placement import Placement, read_scale
from kvmon.core.analysis.settings import NO_GPU_BANDWIDTH, AnalyzerSettings
from kvmon.core.readings import GpuReading, GpuSetReading, HostReading
from kvmon.core.snapshot import GpuView, HostView, ModelView
from kvmon.physics.gpus import choose_peak_bandwidth, pcie_bandwidth_bytes_per_s

# what a device's reading and its view call the same, copied as read
GPU_COPIED = ("index name vram_total_bytes vram_used_bytes vram_free_bytes server_used_bytes memory_busy_percent "
              "gpu_busy_percent pcie_rx_bytes_per_s pcie_tx_bytes_per_s mem_clock_mhz mem_clock_max_mhz core_clock_mhz "
              "core_clock_max_mhz clock_reasons other_processes_busy_percent power_limit_w power_w temperature_c kind "
              "vendor source working_set_limit_bytes working_set_source spill_total_bytes spill_used_bytes "
              "server_spill_bytes vendor_index pci_bus_id memory_type").split()
HOST_COPIED = ("ram_total_bytes ram_available_bytes server_rss_bytes host_bandwidth_measured_at_unix_s "
               "host_bandwidth_note swap_total_bytes swap_used_bytes memory_type cpu_name cpu_count cpu_busy_cores "
               "server_cpu_cores").split()


def host_bandwidth(user: float | None, host: HostReading | None) -> tuple[float | None, str | None]:
    """The host RAM's bandwidth: the user's from settings, else what the host source found, with its source."""
    if user:
        return user, "user"
    if host is not None and host.host_bandwidth_bytes_per_s:
        return host.host_bandwidth_bytes_per_s, host.host_bandwidth_source
    return None, None


def machine_views(gpus: GpuSetReading | None, host: HostReading | None, settings: AnalyzerSettings
                  ) -> tuple[tuple[GpuView, ...], str | None, HostView]:
    """This machine's devices with no model placed on them (a server not read, a fleet's own devices): each GPU
    and the host with the user's bandwidths, as a poll of a server shows them; and why there is no GPU, if none."""
    gviews, why = gpu_views(gpus, settings.gpu_bandwidth_bytes_per_s)
    host_bw, host_src = host_bandwidth(settings.host_bandwidth_bytes_per_s, host)
    gviews = with_host_bandwidth(gviews, host_bw, host_src)
    return gviews, why, host_view(host, Placement(), None, host_bw=host_bw, host_bw_source=host_src, gviews=gviews)


def gpu_bandwidth(g: GpuReading, user: float | None) -> tuple[float | None, str | None]:
    """The user's value from settings, else what the GPU source chose (by the same rule), else the table."""
    if g.peak_bandwidth_bytes_per_s and not user:
        return g.peak_bandwidth_bytes_per_s, g.bandwidth_source or "measured"
    bw, source, _why = choose_peak_bandwidth(g.name, None, user)
    return bw, source


def gpu_views(gpus: GpuSetReading | None, user_bandwidth_bytes_per_s: Mapping[int, float]
              ) -> tuple[tuple[GpuView, ...], str | None]:
    """Each GPU as the Snapshot shows it (before the VRAM split), or () with why there is none."""
    if gpus is None:
        return (), "GPU not read"
    if gpus.unavailable_reason:
        return (), gpus.unavailable_reason
    out = []
    for g in gpus.gpus:
        bw, bw_src = gpu_bandwidth(g, user_bandwidth_bytes_per_s.get(g.index))
        pcie_bw = g.pcie.bandwidth_bytes_per_s or pcie_bandwidth_bytes_per_s(
            g.pcie.max_generation or g.pcie.generation, g.pcie.max_width or g.pcie.width)
        reasons = dict(g.reasons)
        if bw is None:
            reasons.setdefault("peak_bandwidth_bytes_per_s", NO_GPU_BANDWIDTH)
        table_size = "table" in reasons.get("vram_total_bytes", "") and g.vram_total_bytes is not None
        out.append(GpuView(
            **{k: getattr(g, k) for k in GPU_COPIED}, other_processes_bytes=g.other_processes_used_bytes,
            peak_bandwidth_bytes_per_s=bw, bandwidth_source=bw_src, pcie_bandwidth_bytes_per_s=pcie_bw,
            pcie_generation=g.pcie.generation, pcie_width=g.pcie.width, pcie_max_generation=g.pcie.max_generation,
            pcie_max_width=g.pcie.max_width, reasons=reasons, memory_source="table" if table_size else "measured",
        ))
    return tuple(out), None


def server_used(gpus: GpuSetReading | None) -> dict[int, int | None]:
    """What the device sources say the server holds on each read device, by index."""
    if gpus is None or gpus.unavailable_reason:
        return {}
    return {g.index: g.server_used_bytes for g in gpus.gpus}


def with_host_bandwidth(gviews: tuple[GpuView, ...], host_bw: float | None, host_source: str | None
                        ) -> tuple[GpuView, ...]:
    """Unified-memory devices with no bandwidth of their own (an APU's integrated GPU) read the host's RAM."""
    if not host_bw:
        return gviews
    out = []
    for g in gviews:
        if g.kind == "unified_memory" and g.peak_bandwidth_bytes_per_s is None:
            reasons = dict(g.reasons)
            reasons["peak_bandwidth_bytes_per_s"] = (f"an integrated GPU reads system RAM: the host's bandwidth "
                                                     f"({host_source or 'unknown source'})")
            g = replace(g, peak_bandwidth_bytes_per_s=host_bw, bandwidth_source="host", reasons=reasons)
        out.append(g)
    return tuple(out)


def split_vram(gviews: tuple[GpuView, ...], p: Placement, model: ModelView, cache: int | None, kv_in_use: int | None,
               decode: float | None, kv_read_now: float | None, compute: Mapping[int, int],
               gpus: GpuSetReading | None) -> tuple[GpuView, ...]:
    """Stacked memory per device: weights / KV allocated (in use) / server compute and other / others / free;
    ``cache``: the model's caches in memory (``cache_bytes``), ``compute``: the log's compute buffers by GPU."""
    server_used_by_index = server_used(gpus)
    resident = sum(p.weights_gpu.values()) + p.weights_host_read
    out = []
    drafted = draft_bytes(model)
    read = model.weight_bytes_read_per_token
    scale = read_scale(p, read) if read is not None else None  # as the ceiling counts a device's reads
    for g in gviews:
        w = p.weights_gpu.get(g.index)
        frac = p.kv_gpu.get(g.index)
        kv_alloc = int(cache * frac) if cache is not None and frac else None
        kv_use = int(kv_in_use * frac) if kv_in_use is not None and frac else None
        draft = int(drafted * p.draft_gpu[g.index]) if drafted and p.draft_gpu.get(g.index) else None
        other = None
        sv = server_used_by_index.get(g.index)
        if sv is not None and w is not None:
            other = max(0, int(sv - w - (kv_alloc or 0) - (draft or 0)))
        elif compute.get(g.index) is not None:
            other = int(compute[g.index])
        achieved = None
        if decode is not None and scale is not None and w is not None and resident:
            achieved = decode * (w * scale + (kv_read_now or 0.0) * (frac or 0.0))
        out.append(replace(g, weights_bytes=int(w) if w is not None else None, kv_allocated_bytes=kv_alloc,
                           kv_in_use_bytes=kv_use, server_other_bytes=other, draft_bytes=draft,
                           achieved_bandwidth_bytes_per_s=achieved))
    return tuple(out)


def host_view(host: HostReading | None, p: Placement, kv_alloc: int | None, *, host_bw: float | None = None,
              host_bw_source: str | None = None, model: ModelView | None = None, decode: float | None = None,
              kv_read_now: float | None = None, gviews: tuple[GpuView, ...] = (),
              prompt_cache_limit_bytes: int | None = None) -> HostView:
    """Host RAM as a device: its size and use, its bandwidth, what of the model lives there and is read from it,
    and the limit of the prompt cache the server keeps there."""
    kv_host = int(kv_alloc * (p.kv_host + sum(p.kv_pcie.values()))) if kv_alloc is not None else None
    drafted = draft_bytes(model) if model is not None else None
    draft_host = int(drafted * p.draft_host) if drafted and p.draft_host > 0 else None
    in_ceiling = p.weights_host_read > 0 or p.kv_host > 0
    achieved = None
    if in_ceiling and decode is not None and model is not None and model.weight_bytes_read_per_token is not None:
        scale = read_scale(p, model.weight_bytes_read_per_token)
        achieved = decode * (p.weights_host_read * scale + (kv_read_now or 0.0) * p.kv_host)
    unified = next((g.index for g in gviews if g.kind == "unified_memory" and g.vendor == "apple"), None)
    reasons = dict(host.reasons) if host else {"host": "host not read"}
    return HostView(
        **({k: getattr(host, k) for k in HOST_COPIED} if host else {}),
        weights_in_host_bytes=int(p.weights_host) if p.weights_host else None,
        kv_in_host_bytes=kv_host if kv_host else None,
        draft_in_host_bytes=draft_host,
        host_bandwidth_bytes_per_s=host_bw if host_bw else (host.host_bandwidth_bytes_per_s if host else None),
        host_bandwidth_source=host_bw_source if host_bw else (host.host_bandwidth_source if host else None),
        achieved_bandwidth_bytes_per_s=achieved, in_ceiling=in_ceiling, unified_with=unified, reasons=reasons,
        prompt_cache_limit_bytes=prompt_cache_limit_bytes,
    )
