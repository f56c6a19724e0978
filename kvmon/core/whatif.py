"""What-if calculator, without Qt: a device (live, a GPU from the NVIDIA, AMD or Intel tables, an Apple chip, a CPU's
memory system) × a model (live or a preset) × context × cache type → the ceiling curve, the KV cache size and whether
weights + cache fit in its memory, from the physics package.

The dashboard's what-if panel (``kvmon.gui.whatif``) shows it; anything else that has a Snapshot may ask it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvmon.core.snapshot import Snapshot
from kvmon.core.units import fmt_bytes
from kvmon.physics.apple_chips import apple_bin_specs
from kvmon.physics.ceiling import DeviceShare, ceiling_curve, ceiling_tok_s, max_context_fitting
from kvmon.physics.gpus import KNOWN_GPUS
from kvmon.physics.host_memory import HOST_MEMORY_PRESETS
from kvmon.physics.kv import kv_allocation, kv_bytes_in_use
from kvmon.physics.presets import PRESETS
from kvmon.physics.shape import ModelShape
from kvmon.physics.weights import weight_bytes_read_per_token


@dataclass(frozen=True)
class LiveModel:
    """The model the server has loaded, as the calculator needs it."""

    label: str
    shape: ModelShape
    weight_bytes: int
    kv_type: str | None


@dataclass(frozen=True)
class GpuChoice:
    """A device for the calculator: name, peak bandwidth and memory; ``source`` is 'live' or 'table'; ``group``
    what kind of device ("live", "NVIDIA", "AMD", "Intel", "Apple", "CPU")."""

    name: str
    bandwidth_bytes_per_s: float
    vram_bytes: int
    source: str
    group: str = "NVIDIA"


@dataclass(frozen=True)
class WhatIfResult:
    """The calculator's answer; ``reason`` is set (and the numbers None) when it cannot compute."""

    curve: tuple[tuple[int, float], ...] = ()
    kv_allocated_bytes: int | None = None
    weight_bytes: int | None = None
    ceiling_at_ctx_tok_s: float | None = None
    fits: bool | None = None
    over_bytes: int | None = None
    max_context_fitting: int | None = None
    reason: str | None = None


def compute_whatif(gpu: GpuChoice, model: Mapping[str, Any] | ModelShape, weight_bytes: int, n_ctx: int,
                   cache_type: str) -> WhatIfResult:
    """Ceiling curve to ``n_ctx``, KV allocation and the fit verdict for one GPU (weights + KV vs VRAM).

    ``model``: GGUF-keyed metadata (a preset) or the live model's shape.
    """
    try:
        shape = model if isinstance(model, ModelShape) else ModelShape.from_gguf(model)
    except (KeyError, ValueError) as exc:  # a ShapeError is a ValueError
        return WhatIfResult(reason=f"model shape unknown: {exc}")
    read = weight_bytes_read_per_token(shape, weight_bytes)
    dev = DeviceShare(gpu.name, gpu.bandwidth_bytes_per_s, read.bytes, 1.0, "gpu")
    contexts = [int(x) for x in np.linspace(0, n_ctx, 65)]
    curve = ceiling_curve([dev], shape, cache_type, cache_type, contexts)
    alloc = kv_allocation(shape, n_ctx, type_k=cache_type, type_v=cache_type).total_bytes
    over = weight_bytes + alloc - gpu.vram_bytes
    free_for_kv = gpu.vram_bytes - weight_bytes
    max_ctx = max_context_fitting(shape, free_for_kv, type_k=cache_type, type_v=cache_type) if free_for_kv > 0 else 0
    at_ctx = ceiling_tok_s([dev], kv_bytes_in_use(shape, n_ctx, cache_type, cache_type))
    return WhatIfResult(curve=curve, kv_allocated_bytes=alloc, weight_bytes=weight_bytes, ceiling_at_ctx_tok_s=at_ctx,
                        fits=over <= 0, over_bytes=max(0, over), max_context_fitting=max_ctx)


_GROUPS = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}


def table_gpus() -> list[GpuChoice]:
    """The calculator's presets: every GPU of the NVIDIA, AMD and Intel tables, every Apple chip and bin, and the
    common CPU memory systems (DDR4 / DDR5 × channels)."""
    out = [GpuChoice(g.name, g.bandwidth_bytes_per_s, g.vram_bytes, "table", _GROUPS[g.vendor])
           for g in KNOWN_GPUS if g.vendor in _GROUPS]
    out += [GpuChoice(g.name, g.bandwidth_bytes_per_s, g.vram_bytes, "table", "Apple") for g in apple_bin_specs()]
    out += [GpuChoice(f"{p.name} ({p.bandwidth_bytes_per_s / 1e9:.0f} GB/s peak, {p.ram_bytes // 1024**3} GB RAM)",
                      p.bandwidth_bytes_per_s, p.ram_bytes, "table", "CPU") for p in HOST_MEMORY_PRESETS]
    return out


def live_gpu(s: Snapshot | None) -> GpuChoice | None:
    """The live device: the first GPU or unified memory when its bandwidth and size are known, else the host's RAM
    when the model runs on the CPU and its bandwidth is known."""
    if s is None:
        return None
    if s.gpus:
        g = s.gpus[0]
        if g.peak_bandwidth_bytes_per_s is None or g.vram_total_bytes is None:
            return None
        size = g.working_set_limit_bytes if g.kind == "unified_memory" and g.working_set_limit_bytes else \
            g.vram_total_bytes
        return GpuChoice(f"live: {g.name or 'GPU 0'}", g.peak_bandwidth_bytes_per_s, size, "live", "live")
    h = s.host
    if h.host_bandwidth_bytes_per_s and h.ram_total_bytes:
        what = " · ".join(x for x in (h.memory_type, f"{h.host_bandwidth_bytes_per_s / 1e9:.0f} GB/s") if x)
        return GpuChoice(f"live: CPU ({what})", h.host_bandwidth_bytes_per_s, h.ram_total_bytes, "live", "live")
    return None


def live_model(s: Snapshot | None) -> LiveModel | None:
    """The live model, when its shape and weight size are known."""
    if s is None:
        return None
    m = s.model
    if m.shape is None or not m.weight_bytes:
        return None
    bits = " · ".join(b for b in (m.quantization, fmt_bytes(m.weight_bytes)) if b)
    return LiveModel(f"live: {m.name or m.arch or 'model'} ({bits})", m.shape, int(m.weight_bytes), m.kv_type_k)


def presets() -> dict[str, Any]:
    """The physics package's model presets."""
    return dict(PRESETS)
