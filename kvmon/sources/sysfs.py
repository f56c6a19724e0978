"""Reading Linux's sysfs for the GPU sources: small text files that may be missing, unreadable or odd.

``DrmCard`` is one ``/sys/class/drm/cardN`` with its PCI device directory; ``drm_cards`` lists them under a root
(``/`` on a real machine, a fixture tree in tests), ``pci_link`` reads a device's PCIe link, ``SysfsGpuSource`` is
what the AMD and Intel sources share. Every read returns
``None`` when the file is absent or unparsable: a field kvmon cannot read is unknown, never an error.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kvmon.core.readings import CLOCK_REASONS, ClockReason, PcieLink
from kvmon.physics.gpus import pcie_bandwidth_bytes_per_s
from kvmon.sources.drm_fdinfo import server_gpu_memory
from kvmon.sources.localfile import open_regular
from kvmon.sources.procs import PidTreeCache

MAX_SYSFS_BYTES = 64 * 1024  # sysfs attributes are one page; anything longer is not one
T = TypeVar("T")
R = TypeVar("R")
_CARD = re.compile(r"^card(\d+)$")
# the PCI core's speed strings (drivers/pci/pci-sysfs.c): "16.0 GT/s PCIe"; the generation each one is
_GT_S_GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def read_text(path: Path) -> str | None:
    """A sysfs file's text without the trailing newline, or None when it cannot be read."""
    try:
        with open_regular(path) as f:  # sysfs attributes are regular files; anything else is not read
            data = f.read(MAX_SYSFS_BYTES)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace").rstrip("\n")


def read_int(path: Path, base: int = 10) -> int | None:
    """A sysfs file holding one integer ("17163091968", "0x1002" with base 16), or None."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


RELIST_S = 30.0  # what a sysfs folder offers (hwmon files, RAPL zones) is looked for again this often


def relisted(known: dict[Path, tuple[float, T]], folder: Path, now: float, find: Callable[[], T],
             read: Callable[[T], R], ok: Callable[[R], bool]) -> R:
    """``read`` what ``find`` last found in ``folder`` (kept in ``known``): found again every ``RELIST_S``, and at
    once when a read of an older finding fails (a driver reload renumbers its folders), so that a poll reads its
    one or two files, not a folder listing and a probe of each candidate."""
    last = known.get(folder)
    fresh = last is None or now - last[0] >= RELIST_S
    if fresh:
        last = known[folder] = (now, find())
    assert last is not None
    out = read(last[1])
    if not ok(out) and not fresh:
        known[folder] = (now, find())
        out = read(known[folder][1])
    return out


@dataclass(frozen=True)
class _HwmonFiles:
    """What one card's hwmon offers: the files to read and why a reading has none."""

    power: Path | None
    energy: Path | None
    reasons: dict[str, str]


_hwmon_files: dict[Path, tuple[float, _HwmonFiles]] = {}


def _find_hwmon_files(device_dir: Path) -> _HwmonFiles:
    dirs = sorted((device_dir / "hwmon").glob("hwmon*")) if (device_dir / "hwmon").is_dir() else []
    if not dirs:
        why = "the driver offers no hwmon sensors for this card (no power or energy reading)"
        return _HwmonFiles(None, None, {"power_w": why, "energy_j": why})
    chosen: dict[str, Path | None] = {}
    reasons: dict[str, str] = {}
    for key, files in (("power_w", [d / n for d in dirs for n in ("power1_average", "power1_input")]),
                       ("energy_j", [d / "energy1_input" for d in dirs])):
        chosen[key] = next((f for f in files if (v := read_int(f)) is not None and v >= 0), None)
        if chosen[key] is None:
            there = [f for f in files if f.exists()]
            reasons[key] = (f"{there[0]} is not readable by this user" if there else
                            f"the card's hwmon has no {'power' if key == 'power_w' else 'energy'} file")
    return _HwmonFiles(chosen["power_w"], chosen["energy_j"], reasons)


def hwmon_power(device_dir: Path, clock: Callable[[], float] = time.monotonic) -> tuple[float | None, float | None,
                                                                                        dict[str, str]]:
    """(power W, energy counter J, reasons) from the card's hwmon: ``power1_average`` or ``power1_input`` (µW) and
    ``energy1_input`` (µJ), as amdgpu, xe and i915 publish them; a file that is there but not readable (root
    only on some kernels) is said so, one that is not there too. Which files is looked for as ``relisted`` says."""
    out = relisted(_hwmon_files, device_dir, clock(), lambda: _find_hwmon_files(device_dir), _read_hwmon,
                   lambda o: o is not None)
    if out is None:
        why = "the card's hwmon files stopped reading"
        return None, None, {"power_w": why, "energy_j": why}
    return out


def _read_hwmon(files: _HwmonFiles) -> tuple[float | None, float | None, dict[str, str]] | None:
    """(W, J, reasons) from the chosen files; None when one of them does not read as it did."""
    out: list[float | None] = []
    for path in (files.power, files.energy):
        if path is None:
            out.append(None)
            continue
        v = read_int(path)
        if v is None or v < 0:
            return None
        out.append(v / 1e6)  # µW, µJ
    return out[0], out[1], dict(files.reasons)


POWER_AT_CAP = 0.97  # power drawn at this share of the card's cap or more: the cap holds its clocks down
THERMAL_MARGIN_MC = 5000  # a sensor within 5 °C of its critical mark: the driver slows the card (millidegrees)


def hwmon_limit_reasons(device_dir: Path) -> tuple[ClockReason, ...] | None:
    """Why a card's clocks are held down, from what its hwmon says (amdgpu publishes no reason of its own): its
    power at its cap (``power1_average``/``power1_input`` against ``power1_cap``), a temperature near its critical
    mark (``tempN_input`` against ``tempN_crit``: edge, junction, memory); () when neither; None without hwmon."""
    dirs = sorted((device_dir / "hwmon").glob("hwmon*")) if (device_dir / "hwmon").is_dir() else []
    if not dirs:
        return None
    found: set[ClockReason] = set()
    for d in dirs:
        power = next((v for n in ("power1_average", "power1_input") if (v := read_int(d / n)) is not None), None)
        cap = read_int(d / "power1_cap")
        if power is not None and cap and power >= POWER_AT_CAP * cap:
            found.add("power_cap")
        for temp in d.glob("temp*_input"):
            now, crit = read_int(temp), read_int(temp.with_name(temp.name.replace("_input", "_crit")))
            if now is not None and crit and now >= crit - THERMAL_MARGIN_MC:
                found.add("thermal")
    return tuple(r for r in CLOCK_REASONS if r in found)


# Intel's throttle reason files (xe: tileN/gtN/freq0/throttle/reason_*, i915: gt/gtN/throttle_reason_*), in words
_INTEL_REASONS: dict[str, ClockReason] = {"pl1": "power_cap", "pl2": "power_cap", "pl4": "power_cap",
                                          "thermal": "thermal", "prochot": "thermal", "ratl": "thermal",
                                          "vr_thermalert": "thermal", "vr_tdc": "current_limit"}


def intel_core_clock(card_dir: Path, device_dir: Path) -> tuple[float | None, float | None,
                                                                tuple[ClockReason, ...] | None]:
    """An Intel GPU's graphics clock now, its highest, and why it is held down, from xe's ``tileN/gtN/freq0`` (under
    the PCI device) or i915's ``gt/gtN`` (under the card): (None, None, None) where neither is there."""
    for freq in sorted(device_dir.glob("tile[0-9]*/gt[0-9]*/freq0")):
        cur, top = read_int(freq / "act_freq") or read_int(freq / "cur_freq"), read_int(freq / "rp0_freq")
        return (_mhz(cur), _mhz(top or read_int(freq / "max_freq")),
                _intel_reasons({k: read_int(freq / "throttle" / f"reason_{k}") for k in _INTEL_REASONS}))
    for gt in sorted(card_dir.glob("gt/gt[0-9]*")):
        cur, top = read_int(gt / "rps_act_freq_mhz") or read_int(gt / "rps_cur_freq_mhz"), read_int(
            gt / "rps_RP0_freq_mhz")
        return (_mhz(cur), _mhz(top or read_int(gt / "rps_max_freq_mhz")),
                _intel_reasons({k: read_int(gt / f"throttle_reason_{k}") for k in _INTEL_REASONS}))
    return None, None, None


def _mhz(value: int | None) -> float | None:
    return float(value) if value else None


def _intel_reasons(flags: dict[str, int | None]) -> tuple[ClockReason, ...] | None:
    """The reasons whose file says 1; None when no reason file could be read."""
    if all(v is None for v in flags.values()):
        return None
    found = {_INTEL_REASONS[k] for k, v in flags.items() if v}
    return tuple(r for r in CLOCK_REASONS if r in found)


def read_hex_id(path: Path, digits: int = 4) -> str | None:
    """"0x744c" → "744c" (PCI vendor and device files; revisions have two digits: "0xc8" → "c8"), or None."""
    value = read_int(path, 16)
    return None if value is None else f"{value:0{digits}x}"


def link_generation(speed: str | None) -> int | None:
    """"16.0 GT/s PCIe" → 4; None for "Unknown" or anything else."""
    if not speed:
        return None
    m = re.match(r"\s*([0-9.]+)\s*GT/s", speed)
    if not m:
        return None
    return _GT_S_GENERATION.get(float(m.group(1)))


def pci_link(device_dir: Path) -> PcieLink:
    """The device's current and maximum PCIe link, and the one-direction bandwidth of the maximum."""
    gen = link_generation(read_text(device_dir / "current_link_speed"))
    width = read_int(device_dir / "current_link_width")
    max_gen = link_generation(read_text(device_dir / "max_link_speed"))
    max_width = read_int(device_dir / "max_link_width")
    bw = pcie_bandwidth_bytes_per_s(max_gen or gen, max_width or width)
    return PcieLink(generation=gen, width=width or None, max_generation=max_gen, max_width=max_width or None,
                    bandwidth_bytes_per_s=bw)


@dataclass(frozen=True)
class DrmCard:
    """One DRM card: its number, its PCI device directory and what ``uevent`` says (driver, ids, slot)."""

    number: int
    device_dir: Path
    driver: str | None
    pci_id: str | None  # "1002:744c"
    slot: str | None  # "0000:03:00.0"
    revision: str | None  # "c8"


def _uevent(device_dir: Path) -> dict[str, str]:
    text = read_text(device_dir / "uevent") or ""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def drm_cards(root: Path, drivers: tuple[str, ...]) -> list[DrmCard]:
    """The ``cardN`` entries under ``root/sys/class/drm`` whose driver is one of ``drivers``, by card number."""
    base = root / "sys" / "class" / "drm"
    try:
        names = os.listdir(base)
    except OSError:
        return []
    cards = []
    for name in names:
        m = _CARD.match(name)
        if not m:
            continue
        dev = base / name / "device"
        ev = _uevent(dev)
        driver = ev.get("DRIVER")
        if driver not in drivers:
            continue
        pci_id = ev.get("PCI_ID", "").lower() or None
        if pci_id is None:
            vendor, device = read_hex_id(dev / "vendor"), read_hex_id(dev / "device")
            pci_id = f"{vendor}:{device}" if vendor and device else None
        cards.append(DrmCard(int(m.group(1)), dev, driver, pci_id, ev.get("PCI_SLOT_NAME", "").lower() or None,
                             read_hex_id(dev / "revision", 2)))
    return sorted(cards, key=lambda c: (c.slot or "", c.number))


class SysfsGpuSource:
    """What the sysfs GPU sources share: the root they read under, when to look for cards again, and the model
    server's own GPU memory from its DRM fdinfo (by PCI slot)."""

    CARD_RESCAN_S = 30.0  # cards come and go rarely (eGPU, driver reload): look again this often

    def __init__(self, root: str | Path = "/", *, include_child_processes: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self._pid_tree = PidTreeCache(include_children=include_child_processes)
        self._clock = clock
        self._lock = threading.Lock()
        self._scanned_at: float | None = None

    def close(self) -> None:
        """Nothing is held open between polls."""

    def _rescan_due(self) -> bool:
        """Whether the card list should be read again (first poll, or older than ``CARD_RESCAN_S``)."""
        now = self._clock()
        if self._scanned_at is not None and 0.0 <= now - self._scanned_at < self.CARD_RESCAN_S:
            return False
        self._scanned_at = now
        return True

    def _server_memory(self, server_pids: Collection[int]) -> tuple[dict[str, dict[str, int]] | None, str | None]:
        """(bytes by PCI slot and region the model server holds, None), or (None, why they are unknown)."""
        pids = self._pid_tree.expand(server_pids)
        if not pids:
            return None, "the model server's process is not known"
        found = server_gpu_memory(self.root / "proc", pids)
        if found is None:
            return None, "the model server's processes are not readable here (DRM fdinfo)"
        return found, None
