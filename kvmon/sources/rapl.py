"""The CPU package's energy counter: Linux's powercap (RAPL, on Intel and on AMD Zen since kernel 5.8), without root
where the system allows it.

Since 2020 most distributions make ``energy_uj`` readable by root only (a side channel, CVE-2020-8694); then the
reason says so and how to allow it. macOS has no such counter without root (``powermetrics`` needs sudo).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kvmon.sources.sysfs import read_int, relisted

POWERCAP = "sys/class/powercap"
_PACKAGE_ZONE = re.compile(r"^intel-rapl:\d+$")  # a package; its sub-zones (cores, dram) are intel-rapl:N:M
_zones: dict[Path, tuple[float, list[Path]]] = {}


def _package_zones(base: Path) -> list[Path]:
    return sorted(p for p in base.glob("intel-rapl:*") if _PACKAGE_ZONE.match(p.name)) if base.is_dir() else []


def cpu_energy(root: Path | str = "/", platform: str = sys.platform,
               clock: Callable[[], float] = time.monotonic) -> tuple[float | None, float | None, str | None]:
    """(energy J, where it wraps J, reason when unknown): every CPU package's counter together; the wrap is known
    for one package only (two wrap at different moments: kvmon then skips the interval in which one did).

    Read every poll (energy per interval needs each one's): the zones are found as ``sysfs.relisted`` says, listed
    again at once only when a zone's counter is gone (a counter readable by root only, as most systems ship it, is
    no reason to list the folder again on every read)."""
    if platform == "darwin":
        return None, None, "macOS reports CPU power only through powermetrics, which needs root"
    base = Path(root) / POWERCAP
    energy, wrap, why, _gone = relisted(_zones, base, clock(), lambda: _package_zones(base), _read_zones,
                                        lambda found: not found[3])
    return energy, wrap, why


def _read_zones(zones: list[Path]) -> tuple[float | None, float | None, str | None, bool]:
    """(energy J, wrap J, reason, whether a zone or its counter is missing: a new listing may find them)."""
    if not zones:
        return None, None, f"no RAPL energy counters on this system (/{POWERCAP})", True  # (a module loaded later)
    total = 0.0
    for z in zones:
        path = z / "energy_uj"
        uj = read_int(path)
        if uj is None or uj < 0:
            if not path.exists():
                return None, None, f"/{POWERCAP}/{z.name} has no energy_uj counter", True
            if not os.access(path, os.R_OK, effective_ids=os.access in os.supports_effective_ids):
                return None, None, (f"/{POWERCAP}/{z.name}/energy_uj is readable by root only on this system "
                                    "(a udev rule or 'chmod a+r' on it lets kvmon read the CPU's energy)"), False
            return None, None, f"/{POWERCAP}/{z.name}/energy_uj does not hold a count of microjoules", False
        total += uj / 1e6
    wrap = read_int(zones[0] / "max_energy_range_uj") if len(zones) == 1 else None
    return total, (wrap / 1e6 if wrap else None), None, False
