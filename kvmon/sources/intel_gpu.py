"""Intel Arc GPUs on Linux (xe and i915 drivers): what sysfs offers, and the table for the rest.

Upstream xe and i915 publish neither VRAM size nor VRAM use in sysfs to an ordinary user (the totals sit behind the
DRM query ioctls, device-wide use behind CAP_PERFMON). kvmon reads what some kernels do offer —
``device/tileN/physical_vram_size_bytes`` (drm-xe trees, read by Level Zero's sysman) and the out-of-tree i915's
``lmem_total_bytes`` / ``lmem_avail_bytes`` — and otherwise takes size and bandwidth from the Intel table by PCI
id. The model server's own VRAM comes from its DRM fdinfo (``drm-total-vram0`` on xe, ``drm-total-local0`` on
i915). Arc cards sit behind a PCIe switch on the card: the GPU's own link reads 2.5 GT/s x1, so the slot's link is
looked for on the bridges above. The graphics clock and why it is held down come from xe's ``freq0`` folder (its
``throttle/reason_*`` files) or i915's ``gt/gtN`` (``throttle_reason_*``). Integrated Intel GPUs (no table entry, no
local memory) are not listed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from kvmon.core.readings import DeviceKind, GpuReading, GpuSetReading, PcieLink
from kvmon.physics.gpus import GpuSpec, lookup_pci
from kvmon.sources.sysfs import DrmCard, SysfsGpuSource, drm_cards, hwmon_power, intel_core_clock, pci_link, read_int

_SWITCH_LINK = (1, 1)  # (generation, width) an Arc GPU reports for the switch inside the card
NO_DEVICE_USE = ("Intel's driver gives device-wide VRAM use only to privileged processes (CAP_PERFMON): "
                 "only the model server's own share is known")


def _vram_size(card: DrmCard) -> tuple[int | None, str | None]:
    """VRAM size from the files some kernels offer: (bytes, which file) or (None, None)."""
    dev = card.device_dir
    for tile in sorted(dev.glob("tile[0-9]*")):
        for rel in ("physical_vram_size_bytes", "memory/physical_vram_size_bytes"):
            n = read_int(tile / rel)
            if n:
                return n, rel
    n = read_int(dev.parent / "lmem_total_bytes") if dev.name == "device" else None
    return (n, "lmem_total_bytes") if n else (None, None)


def _slot_link(card: DrmCard) -> tuple[PcieLink, str | None]:
    """The card's PCIe link to the slot: the GPU's own unless that is the on-card switch's, then the bridges'."""
    link = pci_link(card.device_dir)
    if (link.generation, link.width) != _SWITCH_LINK:
        return link, None
    try:
        here = card.device_dir.resolve()
    except OSError:
        here = card.device_dir
    for parent in list(here.parents)[:3]:
        up = pci_link(parent)
        if up.generation is not None and (up.generation, up.width) != _SWITCH_LINK:
            return up, None
    return PcieLink(), "the GPU reports its on-card PCIe switch (2.5 GT/s x1); the slot's link is not readable here"


@dataclass
class _Card:
    card: DrmCard
    vendor_index: int
    spec: GpuSpec
    vram_bytes: int | None
    vram_from: str


class IntelGpuSource(SysfsGpuSource):
    """Every Intel Arc card under ``root`` (``/``; tests give a fixture tree); ``poll`` never raises."""

    def __init__(self, root: str | Path = "/", *, include_child_processes: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(root, include_child_processes=include_child_processes, clock=clock)
        self._cards: list[_Card] = []
        self._skipped: list[str] = []

    def _scan(self) -> list[_Card]:
        if not self._rescan_due():
            return self._cards
        cards: list[_Card] = []
        self._skipped = []
        for c in drm_cards(self.root, ("xe", "i915")):
            if not (c.pci_id or "").startswith("8086:"):
                continue
            size, size_file = _vram_size(c)
            spec = lookup_pci(c.pci_id, size)
            if spec is None:
                self._skipped.append(f"{c.pci_id} (not an Arc card kvmon knows: an integrated GPU?)")
                continue
            if size is not None:
                cards.append(_Card(c, len(cards), spec, size, f"sysfs {size_file}"))
            elif " or " in spec.memory:  # the table cannot say which size this one has
                cards.append(_Card(c, len(cards), spec, None, ""))
            else:
                cards.append(_Card(c, len(cards), spec, spec.vram_bytes, "kvmon's Intel table"))
        self._cards = cards
        return cards

    def poll(self, server_pids: Collection[int] = ()) -> GpuSetReading:
        """Every Intel Arc card now; a machine without one says so in ``unavailable_reason``."""
        with self._lock:
            t = self._clock()
            cards = self._scan()
            if not cards:
                extra = f"; not listed: {', '.join(self._skipped)}" if self._skipped else ""
                return GpuSetReading(t_monotonic=t, unavailable_reason=f"no Intel Arc GPU{extra}")
            per_slot, why_unknown = self._server_memory(server_pids)
            return GpuSetReading(t_monotonic=t, gpus=tuple(self._read(c, per_slot, why_unknown) for c in cards))

    def _read(self, c: _Card, per_slot: dict[str, dict[str, int]] | None, why_unknown: str | None) -> GpuReading:
        reasons: dict[str, str] = {}
        dev = c.card.device_dir
        total = c.vram_bytes
        if total is None:
            reasons["vram_total_bytes"] = (f"the driver does not publish the VRAM size and the {c.spec.name} comes "
                                           f"in several sizes ({c.spec.memory})")
        elif c.vram_from == "kvmon's Intel table":
            reasons["vram_total_bytes"] = "from kvmon's Intel table (the driver does not publish it in sysfs)"
        avail = read_int(dev.parent / "lmem_avail_bytes") if dev.name == "device" else None
        used = total - avail if total is not None and avail is not None else None
        if used is None:
            reasons["vram_used_bytes"] = reasons["vram_free_bytes"] = NO_DEVICE_USE
            reasons["other_processes_used_bytes"] = NO_DEVICE_USE
        held = per_slot.get(c.card.slot or "", {}) if per_slot is not None else None  # {}: nothing on this card
        if why_unknown:
            reasons["server_used_bytes"] = why_unknown
        server = held.get("vram", 0) + held.get("local", 0) if held is not None else None
        link, link_why = _slot_link(c.card)
        if link_why:
            reasons["pcie.bandwidth_bytes_per_s"] = link_why
        other = max(0, used - server) if used is not None and server is not None else None
        power_w, energy_j, power_why = hwmon_power(dev)
        reasons.update(power_why)
        core, core_max, why_slow = intel_core_clock(dev.parent, dev)
        if why_slow is None:
            reasons["clock_reasons"] = "the driver publishes no throttle reasons for this card here"
        return GpuReading(
            core_clock_mhz=core, core_clock_max_mhz=core_max, clock_reasons=why_slow,
            index=c.vendor_index, name=f"Intel Arc {c.spec.name.removeprefix('Arc ')}", vram_total_bytes=total,
            vram_used_bytes=used, vram_free_bytes=None if used is None or total is None else total - used,
            peak_bandwidth_bytes_per_s=c.spec.bandwidth_bytes_per_s, bandwidth_source="table", pcie=link,
            server_used_bytes=server, other_processes_used_bytes=other, kind=DeviceKind.DISCRETE_GPU.value,
            vendor="intel", source=c.card.driver, vendor_index=c.vendor_index, pci_bus_id=c.card.slot,
            pci_device_id=c.card.pci_id, memory_type="GDDR6", power_w=power_w, energy_j=energy_j, reasons=reasons,
        )
