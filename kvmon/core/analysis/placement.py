"""Placement: which bytes live where (weights and KV per device, in host RAM, spilled over PCIe) and the devices the
ceiling sums time over.

From the server's own words first (llama-server's buffer log lines, Ollama's size vs size_vram), then the
process memory the device sources attribute to the server, then an even split; so the ceiling and the spill
warning never depend on device telemetry alone. Devices are the poll's (``kvmon.core.analysis.devices``): read by
a device source or only named in the log; a buffer's device is found by the server's name for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kvmon.core.analysis.devices import Devices
from kvmon.core.analysis.settings import NO_GPU_BANDWIDTH, NO_HOST_BANDWIDTH
from kvmon.core.device_names import canonical_device, is_device_buffer
from kvmon.core.readings import ServerReading
from kvmon.core.snapshot import GpuView
from kvmon.physics import ceiling as ceiling_mod

# how the placement is known: "server_split" (the server said its VRAM/host split: Ollama's size_vram), "host_only"
# (the log: nothing on a device), "no_gpu" (no device on this machine: the server runs on its CPU), "unseen" (its
# speed says it runs on a device kvmon cannot see)
PlacementSource = Literal["log", "server_split", "process", "single_gpu", "even", "host_only", "no_gpu", "unseen",
                          "unknown"]
OVER_TOLERANCE = 0.02  # measured totals and parts agree within this much (rounding, MiB lines)


@dataclass(frozen=True)
class Placement:
    """Where the model lives: resident weights and KV per device and in host RAM, and how it is known."""

    weights_gpu: Mapping[int, float] = field(default_factory=dict)
    weights_host: float = 0.0
    kv_gpu: Mapping[int, float] = field(default_factory=dict)  # fractions of the KV cache
    kv_host: float = 0.0
    kv_pcie: Mapping[int, float] = field(default_factory=dict)  # spilled over PCIe (driver fallback), estimate
    draft_gpu: Mapping[int, float] = field(default_factory=dict)  # fractions of the draft context's memory
    draft_host: float = 0.0
    host_weights_read: bool = True  # False when the host buffer only holds the token embeddings
    kv_follows_layers: bool = False  # KV split inferred from the weights (no KV buffer lines)
    source: PlacementSource = "unknown"
    note: str | None = None

    @property
    def weights_host_read(self) -> float:
        """Host-resident weights that each token reads (not an embedding table looked up one row at a time)."""
        return self.weights_host if self.host_weights_read else 0.0

    @property
    def on_device(self) -> bool:
        """Whether any weights or KV live on a device (a GPU or unified memory) rather than all in host RAM."""
        return any(v > 0 for v in self.weights_gpu.values()) or any(v > 0 for v in self.kv_gpu.values())


def _split(buffers: Mapping[str, int], devs: Devices, total: float = 1.0) -> tuple[dict[int, float], float]:
    """The server's buffer bytes by its device names: (by device index, in host RAM), each divided by ``total``."""
    on_device: dict[int, float] = {}
    host = 0.0
    for dev, nbytes in buffers.items():
        if is_device_buffer(dev):
            idx = devs.by_name[canonical_device(dev)]
            on_device[idx] = on_device.get(idx, 0.0) + nbytes / total
        else:
            host += nbytes / total
    return on_device, host


def _from_log(r: ServerReading, devs: Devices) -> Placement:
    cfg = r.config
    weights_gpu, weights_host = _split(cfg.model_buffer_bytes_by_device, devs)
    p = Placement(weights_gpu, weights_host, source="log" if weights_gpu else "host_only")
    if weights_gpu and weights_host > 0:
        off, tot = cfg.offloaded_layers, cfg.total_layers
        every_layer = off is not None and tot is not None and off >= tot
        small = weights_host <= 0.05 * (weights_host + sum(weights_gpu.values()))
        if every_layer or (off is None and small):
            # with every layer on the GPU the host buffer is the token-embedding table: one row per token
            p = replace(p, host_weights_read=False,
                        note="host model buffer holds the token embeddings (one row read per token)")
    if not cfg.kv_buffer_bytes_by_device:
        return _kv_like_weights(p)
    kv_gpu, kv_host = _split(cfg.kv_buffer_bytes_by_device, devs, sum(cfg.kv_buffer_bytes_by_device.values()) or 1)
    return replace(p, kv_gpu=kv_gpu, kv_host=kv_host)


def place(r: ServerReading, weight_bytes: int | None, devs: Devices, server_used: Mapping[int, int | None],
          *, no_gpu_here: bool = False) -> Placement:
    """``_place``, then a server that says its KV cache stays in host RAM (``config.kv_offload`` False, LM Studio's
    setting) has all of it there."""
    p = _place(r, weight_bytes, devs, server_used, no_gpu_here=no_gpu_here)
    if r.config.kv_offload is False and not r.config.kv_buffer_bytes_by_device:
        why = "the server keeps the KV cache in host RAM (not offloaded to the GPU)"
        return replace(p, kv_gpu={}, kv_host=1.0, kv_follows_layers=False, note=f"{p.note}; {why}" if p.note else why)
    return p


def place_draft(p: Placement, r: ServerReading, devs: Devices) -> Placement:
    """Where the draft context lives: the log's draft buffers (weights and KV by device) when it printed them, else
    beside the model's weights, split as they are (llama-server offloads the draft like the model by default)."""
    cfg = r.config
    logged = Counter(cfg.draft_model_buffer_bytes_by_device) + Counter(cfg.draft_kv_buffer_bytes_by_device)
    total = float(sum(logged.values()))
    if total > 0:
        draft_gpu, draft_host = _split(logged, devs, total)
        return replace(p, draft_gpu=draft_gpu, draft_host=draft_host)
    resident = sum(p.weights_gpu.values()) + p.weights_host
    if resident <= 0:
        return p
    return replace(p, draft_gpu={i: w / resident for i, w in p.weights_gpu.items()},
                   draft_host=p.weights_host / resident)


def _place(r: ServerReading, weight_bytes: int | None, devs: Devices, server_used: Mapping[int, int | None],
           *, no_gpu_here: bool = False) -> Placement:
    """Split resident weights and KV over devices and host: log buffers, then Ollama, then process memory.

    ``server_used``: what the device sources say the server holds on each read device (by index).
    ``no_gpu_here``: the device sources found no device on this machine and the server runs on it, so whatever
    the server does not say otherwise about runs on the CPU.
    """
    if r.config.model_buffer_bytes_by_device:
        return _from_log(r, devs)
    if weight_bytes is None:
        return Placement(note="model size unknown")
    on_gpu, weights_host = float(weight_bytes), 0.0
    weights_gpu: dict[int, float] = {}
    source: PlacementSource = "unknown"
    note: str | None = None
    if r.weight_bytes_vram is not None and r.weight_bytes_host is not None:
        total = r.weight_bytes_vram + r.weight_bytes_host
        frac_host = r.weight_bytes_host / total if total else 0.0
        weights_host = weight_bytes * frac_host
        on_gpu = weight_bytes - weights_host
        source = "server_split"
    views = list(devs.views)
    if not views:
        if on_gpu > 0 and no_gpu_here:
            weights_host, on_gpu = float(weight_bytes), 0.0
            source, note = "no_gpu", "no GPU on this machine: the model runs on the CPU, from host RAM"
        elif on_gpu > 0:
            return Placement(source=source, note="no GPU readings: where the model lives is unknown")
    elif on_gpu > 0:
        used = {g.index: server_used.get(g.index) for g in views}
        if len(views) == 1:
            weights_gpu = {views[0].index: on_gpu}
            source = source if source == "server_split" else "single_gpu"
        elif all(v is not None for v in used.values()) and sum(v or 0 for v in used.values()) > 0:
            tot = float(sum(v or 0 for v in used.values()))
            weights_gpu = {i: on_gpu * v / tot for i, v in used.items() if v}
            source = source if source == "server_split" else "process"
            note = "weights split over GPUs by the server's memory on each"
        else:
            weights_gpu = {g.index: on_gpu / len(views) for g in views}
            note = "weight split over GPUs unknown: assumed even"
            source = source if source == "server_split" else "even"
    return _kv_like_weights(Placement(weights_gpu, weights_host, source=source, note=note))


def _kv_like_weights(p: Placement) -> Placement:
    """Without KV buffer lines, the KV cache follows the layers: split like the weights."""
    total = sum(p.weights_gpu.values()) + p.weights_host_read
    if total <= 0:
        return p
    return replace(p, kv_follows_layers=True, kv_gpu={i: w / total for i, w in p.weights_gpu.items()},
                   kv_host=p.weights_host_read / total)


def estimate_pcie_spill(p: Placement, gviews: Sequence[GpuView], kv_alloc: int | None,
                        cfg_compute: Mapping[str, int], devs: Devices, draft: int | None = None,
                        host_ram_bytes: int | None = None) -> Placement:
    """Driver system-memory fallback: what the server needs beyond the VRAM others leave is in host RAM (the model's
    weights, its KV cache, the compute buffers and a draft context's ``draft`` bytes on the device). No spill is
    built on weights the GPU cannot hold or that the server's measured memory there denies, nor one larger than
    host RAM: those figures contradict each other, and the consistency checks say so."""
    if not kv_alloc:
        return p
    kv_gpu, kv_pcie = dict(p.kv_gpu), dict(p.kv_pcie)
    compute = {devs.by_name.get(canonical_device(d)): b for d, b in cfg_compute.items() if is_device_buffer(d)}
    for g in gviews:
        if (g.kind != "discrete_gpu" or g.vram_total_bytes is None or g.other_processes_bytes is None
                or g.index not in p.weights_gpu):
            continue
        need = (p.weights_gpu[g.index] + kv_alloc * kv_gpu.get(g.index, 0.0) + compute.get(g.index, 0)
                + (draft or 0) * p.draft_gpu.get(g.index, 0.0))
        room = g.vram_total_bytes - g.other_processes_bytes
        weights = p.weights_gpu[g.index]
        if weights > room or (g.server_used_bytes is not None and weights > g.server_used_bytes * (1 + OVER_TOLERANCE)):
            continue
        over = need - room
        if over > 0 and kv_gpu.get(g.index):
            frac = min(kv_gpu[g.index], over / kv_alloc)
            if host_ram_bytes is not None and frac * kv_alloc > host_ram_bytes:
                continue
            kv_gpu[g.index] -= frac
            kv_pcie[g.index] = frac
    return replace(p, kv_gpu=kv_gpu, kv_pcie=kv_pcie)


def read_scale(p: Placement, read_per_token: float) -> float:
    """The share of the stored weights one token reads (1 for dense, the active experts' share for MoE): a host
    buffer that only holds the token embeddings is stored but not read."""
    stored = sum(p.weights_gpu.values()) + p.weights_host
    return min(1.0, read_per_token / stored) if stored > 0 else 0.0


def weights_read(p: Placement, read_per_token: float | None) -> float | None:
    """The weight bytes one token reads where the model lives: what the ceiling's devices read together, so that
    the bytes per token, the achieved bandwidth and the ceiling are one account (None: unknown)."""
    if read_per_token is None:
        return None
    resident = sum(p.weights_gpu.values()) + p.weights_host_read
    return resident * read_scale(p, read_per_token) if resident > 0 else read_per_token


def devices(p: Placement, read_per_token: float | None, gviews: Sequence[GpuView],
            host_bw: float | None) -> tuple[list[Any] | None, str | None]:
    """The ceiling's devices: the bytes each reads per token and its bandwidth; None with why when one is unknown."""
    if read_per_token is None:
        return None, "model size unknown"
    resident = sum(p.weights_gpu.values()) + p.weights_host_read
    if resident <= 0 and not p.kv_gpu and not p.kv_host:
        if not gviews:
            return None, NO_GPU_BANDWIDTH
        return None, p.note or "where the model lives is unknown"
    scale = read_scale(p, read_per_token)
    by_index = {g.index: g for g in gviews}
    out: list[Any] = []
    for idx in sorted(set(p.weights_gpu) | set(p.kv_gpu)):
        g = by_index.get(idx)
        if g is None or g.peak_bandwidth_bytes_per_s is None:
            why = (g.reasons.get("peak_bandwidth_bytes_per_s") if g is not None else None) or NO_GPU_BANDWIDTH
            return None, why
        out.append(ceiling_mod.DeviceShare(
            name=f"GPU {idx}", bandwidth_bytes_per_s=g.peak_bandwidth_bytes_per_s,
            weight_bytes=p.weights_gpu.get(idx, 0.0) * scale, kv_fraction=p.kv_gpu.get(idx, 0.0), location="gpu"))
    for idx, frac in sorted(p.kv_pcie.items()):
        g = by_index.get(idx)
        if g is None or not g.pcie_bandwidth_bytes_per_s:
            return None, f"GPU {idx} PCIe link bandwidth unknown"
        out.append(ceiling_mod.DeviceShare(
            name=f"PCIe {idx}", bandwidth_bytes_per_s=g.pcie_bandwidth_bytes_per_s, weight_bytes=0.0,
            kv_fraction=frac, location="pcie"))
    if p.weights_host_read > 0 or p.kv_host > 0:
        if not host_bw:
            return None, NO_HOST_BANDWIDTH
        out.append(ceiling_mod.DeviceShare(name="host", bandwidth_bytes_per_s=host_bw,
                                           weight_bytes=p.weights_host_read * scale, kv_fraction=p.kv_host,
                                           location="host"))
    if not out:
        return None, NO_GPU_BANDWIDTH
    return out, None
