"""The devices of one poll: what the device sources read, matched to the names the server's log gives them, plus
every device the log names that no source reads here — a GPU named in the log gets its table bandwidth.

A log name ("CUDA1", "ROCm0", "MTL0", "Vulkan0", "SYCL0") is matched to a read device by PCI bus id when both give
one, else by vendor and ordinal (CUDA1 is NVIDIA's second device) with the names agreeing, else by name alone, else
(one device read, one named) the only pair. What is left becomes a device of its own, known from the log: its
size and free memory at load, its bandwidth from the tables by the name the log gives it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from kvmon.core.analysis.settings import AnalyzerSettings
from kvmon.core.device_names import backend_vendor, canonical_device, is_device_buffer
from kvmon.core.readings import DeviceKind, GpuReading, GpuSetReading, LogDevice, ServerConfig
from kvmon.core.snapshot import GpuView
from kvmon.physics.apple_chips import apple_bandwidth, apple_chip_name
from kvmon.physics.gpus import lookup_gpu

NOT_READ = "not read: the server's log names this device but no device source reads it on this machine"
_NOISE = re.compile(r"\((?:r|tm)\)|\b(?:nvidia|geforce|amd|radeon|intel|arc|graphics|apple)\b|[^a-z0-9]+")


@dataclass(frozen=True)
class Devices:
    """The poll's devices (read ones first, in their order; then the log's own) and the server's names for them."""

    views: tuple[GpuView, ...]
    by_name: Mapping[str, int]  # llama.cpp device name → view index


def _norm(name: str | None) -> str:
    return " ".join(_NOISE.sub(" ", (name or "").lower()).split())


def names_conflict(a: str | None, b: str | None) -> bool:
    """Whether two names say different parts (both in the tables, as different rows); unknown names never conflict."""
    sa, sb = lookup_gpu(a), lookup_gpu(b)
    return sa is not None and sb is not None and sa.name != sb.name


def names_match(a: str | None, b: str | None) -> bool:
    """Whether two device names say the same part ("NVIDIA GeForce RTX 3090" and "RTX 3090")."""
    if not a or not b:
        return False
    sa, sb = lookup_gpu(a), lookup_gpu(b)
    if sa is not None and sb is not None:
        return sa.name == sb.name
    na, nb = _norm(a), _norm(b)
    return bool(na and nb) and (na == nb or na in nb or nb in na)


def log_names(cfg: ServerConfig) -> list[str]:
    """Every device the log names, in order: its device lists first, then the devices its buffers are on."""
    out: list[str] = []
    buffers: Iterable[str] = [*cfg.model_buffer_bytes_by_device, *cfg.kv_buffer_bytes_by_device,
                              *cfg.compute_buffer_bytes_by_device, *cfg.draft_model_buffer_bytes_by_device,
                              *cfg.draft_kv_buffer_bytes_by_device]
    for name in [d.name for d in cfg.devices] + [b for b in buffers if is_device_buffer(b)]:
        c = canonical_device(name)
        if c not in out:
            out.append(c)
    return out


def _match(name: str, log: LogDevice | None, readings: list[GpuReading], used: set[int], n_generic: int
           ) -> GpuReading | None:
    free = [g for g in readings if g.index not in used]
    if log is not None and log.pci_bus_id:
        by_pci = [g for g in free if g.pci_bus_id and g.pci_bus_id.lower() == log.pci_bus_id.lower()]
        if by_pci:
            return by_pci[0]
    desc = log.description if log else None
    vendor, ordinal = backend_vendor(name)
    if vendor is not None:
        # the vendor's devices in its own order (a reading that does not say its vendor may be any vendor's)
        mine = sorted((g for g in readings if g.vendor in (vendor, None)),
                      key=lambda g: g.vendor_index if g.vendor_index is not None else g.index)
        if ordinal is not None and ordinal < len(mine):
            g = mine[ordinal]
            if g.index not in used and not names_conflict(g.name, desc):
                return g
        named = [g for g in free if g.vendor in (vendor, None) and names_match(g.name, desc)]
        return named[0] if len(named) == 1 else None
    named = [g for g in free if names_match(g.name, desc)]
    if len(named) == 1:
        return named[0]
    if desc is None and len(free) == 1 and n_generic == 1:  # one device read, one named: they are the same
        return free[0]
    return None


def _table_bandwidth(name: str, desc: str | None) -> tuple[float | None, str | None]:
    """(bytes/s, why not) for a device known by the log's name for it."""
    if name.startswith("RPC["):
        return None, (f"{name} is a remote machine's device (llama.cpp RPC): its bandwidth is not known here "
                      f"(set it with --bandwidth '{name}=GB/s')")
    if apple_chip_name(desc) is not None:
        bw, note = apple_bandwidth(desc)
        return bw, note
    spec = lookup_gpu(desc)
    if spec is not None:
        return spec.bandwidth_bytes_per_s, None
    return None, (f"{desc or name} is not in kvmon's GPU tables: set its bandwidth in settings or with "
                  f"--bandwidth {name}=GB/s")


def _log_view(index: int, name: str, log: LogDevice | None, why_unread: str | None) -> GpuView:
    log = log or LogDevice(name)  # named only among the buffers: nothing more is known of it
    desc = log.description
    vendor, _n = backend_vendor(name)
    spec = lookup_gpu(desc)
    unified = (log.unified_memory if log.unified_memory is not None else
               (spec is not None and spec.unified_memory) or (name == "MTL0" and apple_chip_name(desc) is not None))
    bw, why = _table_bandwidth(name, desc)
    reasons = {"vram_used_bytes": NOT_READ + (f" ({why_unread})" if why_unread else ""),
               "other_processes_bytes": NOT_READ}
    if log.total_bytes is None:
        reasons["vram_total_bytes"] = "the server's log does not give this device's memory size"
    if log.free_bytes is not None:
        reasons["vram_free_bytes"] = "free when the model loaded, as the server's log says (not live)"
    if why:
        reasons["peak_bandwidth_bytes_per_s"] = why
    return GpuView(
        index=index, name=desc or name, vram_total_bytes=log.total_bytes, vram_free_bytes=log.free_bytes,
        peak_bandwidth_bytes_per_s=bw, bandwidth_source="table" if bw is not None else None, reasons=reasons,
        kind=(DeviceKind.UNIFIED_MEMORY if unified else DeviceKind.DISCRETE_GPU).value,
        vendor=vendor or (spec.vendor if spec else None), source="log", log_name=name, memory_source="log",
        working_set_limit_bytes=log.working_set_limit_bytes,
        working_set_source="log" if log.working_set_limit_bytes else None,
    )


def _fill_from_log(v: GpuView, name: str, log: LogDevice | None) -> GpuView:
    """A read device the log also names: the log's name for it, and what the log knows that the reading lacks."""
    changes: dict[str, object] = {"log_name": name}
    reasons = dict(v.reasons)
    if log is not None:
        if v.vram_total_bytes is None and log.total_bytes is not None:
            changes["vram_total_bytes"], changes["memory_source"] = log.total_bytes, "log"
            reasons["vram_total_bytes"] = "from the server's log (the device source cannot read it)"
        if log.working_set_limit_bytes and v.working_set_source in (None, "estimated"):
            changes["working_set_limit_bytes"], changes["working_set_source"] = log.working_set_limit_bytes, "log"
            reasons.pop("working_set_limit_bytes", None)
    if v.peak_bandwidth_bytes_per_s is None and log is not None and log.description:
        bw, _why = _table_bandwidth(name, log.description)
        if bw is not None:
            changes["peak_bandwidth_bytes_per_s"], changes["bandwidth_source"] = bw, "table"
            reasons["peak_bandwidth_bytes_per_s"] = f"the table's figure for {log.description}, as the log names it"
    changes["reasons"] = reasons
    return replace(v, **changes)  # type: ignore[arg-type]


def _user(views: list[GpuView], st: AnalyzerSettings) -> list[GpuView]:
    """The user's bandwidths by the server's device name ("CUDA0", "RPC[…]") or by index."""
    out = []
    for v in views:
        user = st.device_bandwidth_bytes_per_s.get(v.log_name or "") or st.gpu_bandwidth_bytes_per_s.get(v.index)
        if user:
            reasons = {k: r for k, r in v.reasons.items() if k != "peak_bandwidth_bytes_per_s"}
            v = replace(v, peak_bandwidth_bytes_per_s=float(user), bandwidth_source="user", reasons=reasons)
        out.append(v)
    return out


def assemble(gviews: tuple[GpuView, ...], gpus: GpuSetReading | None, cfg: ServerConfig, st: AnalyzerSettings,
             why_unread: str | None, gpu_placeholder: bool = False) -> Devices:
    """The read devices with the log's names and gaps filled, then the log's own devices (see the module doc).

    ``gpu_placeholder``: the server says part of the model is on a GPU (Ollama's size_vram) but no device is known:
    one unread GPU stands in, so that the placement and the alerts have somewhere to put it.
    """
    readings = list(gpus.gpus) if gpus is not None and not gpus.unavailable_reason else []
    logs = {canonical_device(d.name): d for d in cfg.devices}
    names = log_names(cfg)
    n_generic = sum(1 for n in names if backend_vendor(n)[0] is None)
    views = list(gviews)
    by_name: dict[str, int] = {}
    used: set[int] = set()
    for name in names:
        log = logs.get(name)
        g = _match(name, log, readings, used, n_generic)
        if g is not None and g.index < len(views):
            used.add(g.index)
            by_name[name] = g.index
            views[g.index] = _fill_from_log(views[g.index], name, log)
        else:
            by_name[name] = len(views)
            views.append(_log_view(len(views), name, log, why_unread))
    if gpu_placeholder and not views:
        views.append(GpuView(index=0, name="GPU (not read)", reasons={
            "vram_total_bytes": f"no device source reads this GPU ({why_unread or 'no GPU source'})",
            "peak_bandwidth_bytes_per_s": "no GPU reading and no log naming the GPU: set it with --bandwidth 0=GB/s"},
            source="none", memory_source=None))
    return Devices(tuple(_user(views, st)), by_name)
