"""Per-process GPU memory from the kernel's DRM fdinfo (``/proc/<pid>/fdinfo/<fd>`` of a process's open GPU device).

Every open DRM file of a process carries its client's memory in ``drm-<kind>-<region>: <n> [KiB|MiB]`` lines
(Documentation/gpu/drm-usage-stats.rst): amdgpu prints ``drm-memory-vram`` / ``drm-memory-gtt`` (older kernels)
or ``drm-total-vram`` / ``drm-resident-vram`` (newer), Intel's xe ``drm-total-vram0``, i915 ``drm-total-local0``,
with ``drm-pdev`` (the PCI slot) and ``drm-client-id``. One client may be open through several fds (or shared
with a child): clients are counted once per (pdev, client id). Only the model server's own processes are read:
that is what kvmon attributes, and what an ordinary user may read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kvmon.sources.localfile import open_regular

MAX_FDINFO_BYTES = 64 * 1024
_UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_LINE = re.compile(r"^(drm-[A-Za-z0-9_.-]+):\s*(\S+)(?:\s+(\S+))?\s*$")
_MEMORY_KEY = re.compile(r"^drm-(memory|total|resident)-([A-Za-z_]+?)(\d*)$")


@dataclass(frozen=True)
class DrmClient:
    """One DRM client's memory by region ("vram", "gtt", "local", "system"), in bytes."""

    pdev: str | None
    client_id: str | None
    driver: str | None
    memory_bytes: dict[str, int] = field(default_factory=dict)


def parse_fdinfo(text: str) -> DrmClient | None:
    """A DRM client from one fdinfo file, or None when the file is not a DRM client's.

    The allocated size (``drm-total-``) is taken where the kernel gives it, else the older ``drm-memory-``,
    else what is resident; regions with an instance number (``vram0``) are summed per kind.
    """
    values: dict[str, str] = {}
    memory: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        key, number, unit = m.group(1), m.group(2), m.group(3) or ""
        mm = _MEMORY_KEY.match(key)
        if mm is None:
            values[key] = number
            continue
        try:
            n = int(number) * _UNITS[unit]
        except (ValueError, KeyError):
            continue
        region = mm.group(2)
        per = memory.setdefault(mm.group(1), {})
        per[region] = per.get(region, 0) + n
    if "drm-client-id" not in values and "drm-driver" not in values:
        return None
    best: dict[str, int] = {}
    for kind in ("resident", "memory", "total"):  # later wins: total, else memory, else resident
        best.update(memory.get(kind, {}))
    return DrmClient(values.get("drm-pdev", "").lower() or None, values.get("drm-client-id"),
                     values.get("drm-driver"), best)


def _drm_fds(proc: Path, pid: int) -> Iterable[Path]:
    fd_dir = proc / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("/dev/dri/"):
            yield proc / str(pid) / "fdinfo" / name


def server_gpu_memory(proc: Path, pids: Collection[int]) -> dict[str, dict[str, int]] | None:
    """Bytes by PCI slot and region that ``pids`` hold on GPUs (each client once); None if no pid was readable."""
    seen: set[tuple[str | None, str | None]] = set()
    out: dict[str, dict[str, int]] = {}
    readable = False
    for pid in sorted(pids):
        if not (proc / str(pid)).is_dir():
            continue
        readable = True
        for path in _drm_fds(proc, pid):
            try:
                with open_regular(path) as f:
                    text = f.read(MAX_FDINFO_BYTES).decode("utf-8", errors="replace")
            except OSError:
                continue
            client = parse_fdinfo(text)
            if client is None or client.pdev is None:
                continue
            key = (client.pdev, client.client_id)
            if key in seen:
                continue
            seen.add(key)
            per = out.setdefault(client.pdev, {})
            for region, n in client.memory_bytes.items():
                per[region] = per.get(region, 0) + n
    return out if readable else None
