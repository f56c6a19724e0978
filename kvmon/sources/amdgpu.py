"""AMD GPUs on Linux through the amdgpu driver's sysfs files: no ROCm, no root.

Per card (``/sys/class/drm/cardN/device``): ``mem_info_vram_total``/``_used`` (bytes, every process), ``mem_info_gtt_*``
(GTT: system RAM the GPU maps, where allocations go when VRAM is full — AMD's spill), ``current_link_*`` /
``max_link_*`` (PCIe), ``pp_dpm_mclk`` (memory clock levels, the current one starred), ``gpu_busy_percent`` and
``mem_busy_percent`` (Documentation/gpu/amdgpu/driver-misc.rst and thermal.rst in the kernel); why its clocks are
held down is read from its hwmon (power at ``power1_cap``, a temperature at its ``_crit`` mark). The model server's
own VRAM and GTT come from its DRM fdinfo (``kvmon.sources.drm_fdinfo``).

Peak bandwidth: kvmon's AMD table by PCI id (told apart by memory size), else by the marketing name libdrm's
``amdgpu.ids`` gives for the id and revision; sysfs has no bus width, so an unknown card's bandwidth stays unknown
and says so (``pp_dpm_mclk`` alone is not the data rate). Integrated GPUs (APUs) compute from system RAM: their
device is unified memory (VRAM carve-out plus GTT) at the host's bandwidth unless the table knows the platform.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from kvmon.core.readings import DeviceKind, GpuReading, GpuSetReading
from kvmon.physics.gpus import KNOWN_GPUS, GpuSpec, lookup_gpu, lookup_pci
from kvmon.physics.gpus_amd import AMD_APU_PCI_IDS
from kvmon.sources.sysfs import (
    DrmCard,
    SysfsGpuSource,
    drm_cards,
    hwmon_limit_reasons,
    hwmon_power,
    pci_link,
    read_int,
    read_text,
)

AMDGPU_IDS_PATHS = ("usr/share/libdrm/amdgpu.ids", "opt/amdgpu/share/libdrm/amdgpu.ids")
_MCLK = re.compile(r"^\s*(\d+):\s*(\d+)\s*Mhz\s*(\*)?", re.IGNORECASE)


def parse_dpm_levels(text: str | None) -> tuple[float | None, float | None]:
    """``pp_dpm_mclk`` ("0: 96Mhz \\n3: 1249Mhz *") → (current MHz, highest MHz); None where not given."""
    if not text:
        return None, None
    levels, current = [], None
    for line in text.splitlines():
        m = _MCLK.match(line)
        if not m:
            continue
        mhz = float(m.group(2))
        levels.append(mhz)
        if m.group(3):
            current = mhz
    return current, (max(levels) if levels else None)


def parse_amdgpu_ids(text: str) -> dict[tuple[str, str], str]:
    """libdrm's ``amdgpu.ids`` ("744C,\\tC8,\\tAMD Radeon RX 7900 XTX") → {(device, revision): name}, lower-case ids."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) == 3 and all(parts):
            out[(parts[0].lower(), parts[1].lower())] = parts[2]
    return out


@dataclass
class _Card:
    """What does not change while a card is there: identity, kind, the table's answer."""

    card: DrmCard
    vendor_index: int
    name: str
    kind: DeviceKind
    spec: GpuSpec | None
    bandwidth: float | None
    bandwidth_source: str | None
    bandwidth_reason: str | None


class AmdGpuSource(SysfsGpuSource):
    """Every amdgpu card under ``root`` (``/``; tests give a fixture tree); ``poll`` never raises."""

    def __init__(self, root: str | Path = "/", *, include_child_processes: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(root, include_child_processes=include_child_processes, clock=clock)
        self._cards: list[_Card] = []
        self._ids: dict[tuple[str, str], str] | None = None

    def _marketing_names(self) -> dict[tuple[str, str], str]:
        if self._ids is None:
            self._ids = {}
            for rel in AMDGPU_IDS_PATHS:
                text = read_text(self.root / rel)
                if text:
                    self._ids = parse_amdgpu_ids(text)
                    break
        return self._ids

    def _identify(self, card: DrmCard, vendor_index: int) -> _Card:
        dev = card.device_dir
        total = read_int(dev / "mem_info_vram_total")
        device_id = (card.pci_id or ":").split(":")[1]
        marketing = self._marketing_names().get((device_id, card.revision or ""))
        product = (read_text(dev / "product_name") or "").strip() or None
        spec = lookup_pci(card.pci_id, total) or lookup_gpu(marketing) or lookup_gpu(product)
        apu = card.pci_id in AMD_APU_PCI_IDS or (spec is not None and spec.unified_memory)
        kind = DeviceKind.UNIFIED_MEMORY if apu else DeviceKind.DISCRETE_GPU
        name = marketing or product or (f"AMD {spec.name}" if spec else f"AMD GPU {card.pci_id or '(unknown id)'}")
        if spec is not None:
            return _Card(card, vendor_index, name, kind, spec, spec.bandwidth_bytes_per_s, "table", None)
        _, mclk_max = parse_dpm_levels(read_text(dev / "pp_dpm_mclk"))
        several = [g.name for g in KNOWN_GPUS if card.pci_id in g.pci_ids]
        if apu:
            why = "an integrated GPU computes from system RAM: its bandwidth is the host's"
        elif several:
            why = (f"PCI id {card.pci_id} is the {' / '.join(several)}, whose bandwidths differ, and the card's "
                   "memory size is not readable (set the bandwidth in settings or with --bandwidth)")
        else:
            clock = f" (memory clock up to {mclk_max:.0f} MHz)" if mclk_max else ""
            why = (f"{name} is not in kvmon's AMD table{clock}; sysfs has no memory bus width, so its bandwidth "
                   "is unknown (set it in settings or with --bandwidth)")
        return _Card(card, vendor_index, name, kind, None, None, None, why)

    def _scan(self) -> list[_Card]:
        if self._rescan_due():
            found = [c for c in drm_cards(self.root, ("amdgpu",)) if (c.pci_id or "").startswith("1002:")]
            self._cards = [self._identify(c, i) for i, c in enumerate(found)]
        return self._cards

    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        """Every AMD card now; a machine without one says so in ``unavailable_reason``."""
        with self._lock:
            t = self._clock()
            cards = self._scan()
            if not cards:
                return GpuSetReading(t_monotonic=t, unavailable_reason="no AMD GPU (no amdgpu card in sysfs)")
            per_slot, why_unknown = self._server_memory(server_pids)
            return GpuSetReading(t_monotonic=t, gpus=tuple(self._read(c, per_slot, why_unknown) for c in cards))

    def _read(self, c: _Card, per_slot: dict[str, dict[str, int]] | None, why_unknown: str | None) -> GpuReading:
        dev = c.card.device_dir
        reasons: dict[str, str] = {}
        vram_total, vram_used = read_int(dev / "mem_info_vram_total"), read_int(dev / "mem_info_vram_used")
        gtt_total, gtt_used = read_int(dev / "mem_info_gtt_total"), read_int(dev / "mem_info_gtt_used")
        if vram_total is None or vram_used is None:
            reasons["vram_total_bytes"] = reasons["vram_used_bytes"] = reasons["vram_free_bytes"] = (
                "amdgpu's mem_info_vram files are not readable for this card")
        held = per_slot.get(c.card.slot or "", {}) if per_slot is not None else None  # {}: nothing on this card
        if why_unknown:
            reasons["server_used_bytes"] = why_unknown
        server_vram, server_gtt = (held.get("vram", 0), held.get("gtt", 0)) if held is not None else (None, None)
        if c.kind is DeviceKind.UNIFIED_MEMORY:
            # the carve-out and the GTT are both system RAM: together they are what the GPU computes from
            total = None if vram_total is None else vram_total + (gtt_total or 0)
            used = None if vram_used is None else vram_used + (gtt_used or 0)
            spill_total = spill_used = server_spill = None
            server = None if server_vram is None else server_vram + (server_gtt or 0)
        else:
            total, used = vram_total, vram_used
            spill_total, spill_used, server_spill = gtt_total, gtt_used, server_gtt
            server = server_vram
        free = total - used if total is not None and used is not None else None
        other = max(0, used - server) if used is not None and server is not None else None
        if other is None and "server_used_bytes" in reasons:
            reasons["other_processes_used_bytes"] = reasons["server_used_bytes"]
        if c.bandwidth is None and c.bandwidth_reason:
            reasons["peak_bandwidth_bytes_per_s"] = c.bandwidth_reason
        mclk, mclk_max = parse_dpm_levels(read_text(dev / "pp_dpm_mclk"))
        busy = read_int(dev / "gpu_busy_percent")
        mem_busy = read_int(dev / "mem_busy_percent")
        if mem_busy is None:
            reasons["memory_busy_percent"] = "mem_busy_percent is not offered for this card"
        power_w, energy_j, power_why = hwmon_power(dev)
        reasons.update(power_why)
        return GpuReading(
            index=c.vendor_index, name=c.name, vram_total_bytes=total, vram_used_bytes=used, vram_free_bytes=free,
            gpu_busy_percent=None if busy is None else float(busy),
            memory_busy_percent=None if mem_busy is None else float(mem_busy), mem_clock_mhz=mclk,
            mem_clock_max_mhz=mclk_max, clock_reasons=hwmon_limit_reasons(dev),
            peak_bandwidth_bytes_per_s=c.bandwidth, bandwidth_source=c.bandwidth_source,
            pcie=pci_link(dev), server_used_bytes=server, other_processes_used_bytes=other, kind=c.kind.value,
            vendor="amd", source="amdgpu", vendor_index=c.vendor_index, pci_bus_id=c.card.slot,
            pci_device_id=c.card.pci_id, spill_total_bytes=spill_total, spill_used_bytes=spill_used,
            server_spill_bytes=server_spill, power_w=power_w, energy_j=energy_j, reasons=reasons,
        )

