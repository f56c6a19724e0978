"""Placement: which bytes live where (weights and KV per GPU, in host RAM, spilled over PCIe) and the devices the
ceiling sums time over.

From the server's own words first (llama-server's buffer log lines, Ollama's size vs size_vram), then the
process memory NVML attributes to the server, then an even split; so the ceiling and the spill warning never
depend on NVML alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvmon.core.analysis.settings import NO_GPU_BANDWIDTH, NO_HOST_BANDWIDTH
from kvmon.core.readings import GpuSetReading, ServerReading
from kvmon.core.snapshot import GpuView
from kvmon.physics import ceiling as ceiling_mod

_GPU_DEVICE = re.compile(r"^(?:CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN|Metal|OpenCL)(\d*)$", re.IGNORECASE)


def device_gpu_index(device: str) -> int | None:
    """llama.cpp buffer device name → GPU index ("CUDA1" → 1, "Metal" → 0); host buffers → None."""
    m = _GPU_DEVICE.match(device.strip())
    if not m:
        return None
    return int(m.group(1)) if m.group(1) else 0


@dataclass
class Placement:
    """Where the model lives: resident weights and KV per GPU and in host RAM, and how it is known."""

    weights_gpu: dict[int, float] = field(default_factory=dict)
    weights_host: float = 0.0
    kv_gpu: dict[int, float] = field(default_factory=dict)  # fractions of the KV cache
    kv_host: float = 0.0
    kv_pcie: dict[int, float] = field(default_factory=dict)  # spilled over PCIe (driver fallback), estimate
    host_weights_read: bool = True  # False when the host buffer only holds the token embeddings
    kv_follows_layers: bool = False  # KV split inferred from the weights (no KV buffer lines)
    source: str = "unknown"  # "log" | "ollama" | "process" | "single_gpu" | "even" | "host_only"
    note: str | None = None

    @property
    def weights_host_read(self) -> float:
        """Host-resident weights that each token reads (not an embedding table looked up one row at a time)."""
        return self.weights_host if self.host_weights_read else 0.0


def place(r: ServerReading, weight_bytes: int | None, gpus: GpuSetReading | None) -> Placement:
    """Split resident weights and KV over GPUs and host: log buffers, then Ollama, then process memory; a server
    that says its KV cache stays in host RAM (``config.kv_offload`` False) has all of it there."""
    p = _place(r, weight_bytes, gpus)
    if r.config.kv_offload is False and not r.config.kv_buffer_bytes_by_device:
        p.kv_gpu = {}
        p.kv_host = 1.0
        p.kv_follows_layers = False
        p.note = "; ".join(x for x in (p.note, "the server keeps the KV cache in host RAM (not offloaded to the GPU)")
                           if x)
    return p


def _place(r: ServerReading, weight_bytes: int | None, gpus: GpuSetReading | None) -> Placement:
    cfg = r.config
    p = Placement()
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
            _kv_like_weights(p)
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
    _kv_like_weights(p)
    return p


def _kv_like_weights(p: Placement) -> None:
    """Without KV buffer lines, the KV cache follows the layers: split like the weights."""
    total = sum(p.weights_gpu.values()) + p.weights_host_read
    if total <= 0:
        return
    p.kv_follows_layers = True
    for i, w in p.weights_gpu.items():
        p.kv_gpu[i] = w / total
    p.kv_host = p.weights_host_read / total


def estimate_pcie_spill(p: Placement, gviews: Sequence[GpuView], kv_alloc: int | None,
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


def devices(p: Placement, read_per_token: float | None, gviews: Sequence[GpuView],
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
